//! KubeVirt's hook sidecars, as virt-launcher v1.9.0 runs them.
//!
//! A VMI annotated `hooks.kubevirt.io/hookSidecars` (or using a network binding plugin with a
//! sidecar image) gets extra containers in its launcher pod; each serves the hook gRPC API on a
//! socket under the pod's hooks directory. The launcher waits at start for as many sidecars as
//! the pod asked for ([`collect`]), then lets them change the domain XML just before each define
//! ([`HookSidecars::on_define_domain`]) and the cloud-init data before its ISO is written
//! ([`HookSidecars::pre_cloud_init_iso`]), and tells them when it ends
//! ([`HookSidecars::shutdown`]).
//!
//! The decisions are pure and live apart from the sockets: which version to speak and in which
//! order hook points call their sidecars ([`registry`]), whether an answer is usable
//! ([`validate`]). Any failure is a typed [`HookError`] naming the sidecar; the domain is defined
//! only once every hook answered with a domain that parses, so a failing hook leaves nothing
//! half-defined.

pub mod cloud_init;
mod collect;
mod error;
mod registry;
mod validate;

#[cfg(test)]
mod test_sidecar;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_kubevirt;
#[cfg(test)]
pub(crate) mod tests_libvirt;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kvrs_api::VirtualMachineInstance;
use kvrs_ipc::hooks::{
    CloudInitPayload, HookClient, ON_DEFINE_DOMAIN, PRE_CLOUD_INIT_ISO, SHUTDOWN,
};

pub use error::HookError;
pub use registry::{Registry, Sidecar};
pub use validate::CloudInitAnswer;

use crate::log;

/// Where the launcher finds the sidecars' sockets (KubeVirt's `HookSocketsSharedDirectory`).
pub const HOOKS_DIR: &str = "/var/run/kubevirt-hooks";

/// The deadlines of KubeVirt's hook manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Dialling a sidecar's socket (KubeVirt's gRPC dial: 2 s).
    pub connect: Duration,
    /// The `Info` handshake (1 s).
    pub info: Duration,
    /// Each `OnDefineDomain`, `PreCloudInitIso` and `Shutdown` call (1 minute).
    pub call: Duration,
    /// Between two scans of the hooks directory (300 ms).
    pub scan_interval: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(2),
            info: Duration::from_secs(1),
            call: Duration::from_secs(60),
            scan_interval: Duration::from_millis(300),
        }
    }
}

/// The collected sidecars and the deadlines to call them with.
#[derive(Clone, Debug, Default)]
pub struct HookSidecars {
    registry: Registry,
    timeouts: Timeouts,
    /// `namespace/name`, for log lines.
    owner: String,
}

/// Waits for `expected` sidecars in `dir` (at most `timeout`, KubeVirt's `--qemu-timeout`);
/// none expected means none looked for.
pub async fn collect(
    dir: &Path,
    expected: u32,
    timeout: Duration,
    timeouts: Timeouts,
    owner: &str,
) -> Result<HookSidecars, HookError> {
    let registry = if expected == 0 {
        Registry::default()
    } else {
        collect::collect(dir, expected, timeout, &timeouts, owner).await?
    };
    Ok(HookSidecars {
        registry,
        timeouts,
        owner: owner.to_string(),
    })
}

impl HookSidecars {
    /// The sidecars found.
    #[cfg(test)]
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    async fn dial(
        &self,
        sidecar: &Sidecar,
        hook_point: &'static str,
    ) -> Result<HookClient, HookError> {
        HookClient::connect(&sidecar.socket, self.timeouts.connect)
            .await
            .map_err(|source| HookError::Call {
                hook: sidecar.hook.clone(),
                hook_point,
                source: Box::new(source),
            })
    }

    /// Passes the domain XML through every `OnDefineDomain` sidecar in order, each getting the
    /// previous one's answer and the VMI as JSON, and returns the XML to define: `xml` itself
    /// when no sidecar subscribed, else the last answer as it came (checked to parse as a domain
    /// named `domain_name`).
    pub async fn on_define_domain(
        &self,
        vmi: &VirtualMachineInstance,
        domain_name: &str,
        xml: String,
    ) -> Result<String, HookError> {
        let callbacks = self.registry.callbacks(ON_DEFINE_DOMAIN);
        if callbacks.is_empty() {
            return Ok(xml);
        }
        let vmi_json = vmi_json(vmi)?;
        let mut xml = xml;
        for sidecar in callbacks {
            let client = self.dial(sidecar, ON_DEFINE_DOMAIN).await?;
            let answer = client
                .on_define_domain(
                    sidecar.version,
                    xml.into_bytes(),
                    vmi_json.clone(),
                    self.timeouts.call,
                )
                .await
                .map_err(|source| HookError::Call {
                    hook: sidecar.hook.clone(),
                    hook_point: ON_DEFINE_DOMAIN,
                    source: Box::new(source),
                })?;
            (xml, _) = validate::domain_xml(&sidecar.hook, domain_name, answer)?;
            log::info(format_args!(
                "{}: {} changed the domain (OnDefineDomain)",
                self.owner, sidecar.hook
            ));
        }
        Ok(xml)
    }

    /// Whether any sidecar subscribed to `PreCloudInitIso`.
    pub fn wants_cloud_init(&self) -> bool {
        !self.registry.callbacks(PRE_CLOUD_INIT_ISO).is_empty()
    }

    /// Lets the first `PreCloudInitIso` sidecar that speaks v1alpha2 or later change the
    /// cloud-init data, as KubeVirt does (it returns after that one; v1alpha1 sidecars are
    /// skipped). `data` is KubeVirt's `CloudInitData` JSON; `user_data` and `network_data` are
    /// repeated as the legacy `CloudInitNoCloudSource`. `None`: no sidecar to ask.
    pub async fn pre_cloud_init_iso(
        &self,
        vmi: &VirtualMachineInstance,
        data_source: &str,
        data: &serde_json::Value,
        user_data: &str,
        network_data: &str,
    ) -> Result<Option<CloudInitAnswer>, HookError> {
        let Some(sidecar) = self
            .registry
            .callbacks(PRE_CLOUD_INIT_ISO)
            .iter()
            .find(|s| s.version.serves(PRE_CLOUD_INIT_ISO))
        else {
            return Ok(None);
        };
        let encode = |what, e: serde_json::Error| HookError::Encode {
            what,
            reason: e.to_string(),
        };
        let payload = CloudInitPayload {
            cloud_init_data: serde_json::to_vec(data).map_err(|e| encode("cloud-init data", e))?,
            cloud_init_no_cloud_source: serde_json::to_vec(&serde_json::json!({
                "userData": user_data,
                "networkData": network_data,
            }))
            .map_err(|e| encode("cloud-init data", e))?,
        };
        let client = self.dial(sidecar, PRE_CLOUD_INIT_ISO).await?;
        let answer = client
            .pre_cloud_init_iso(sidecar.version, payload, vmi_json(vmi)?, self.timeouts.call)
            .await
            .map_err(|source| HookError::Call {
                hook: sidecar.hook.clone(),
                hook_point: PRE_CLOUD_INIT_ISO,
                source: Box::new(source),
            })?;
        validate::cloud_init_answer(
            &sidecar.hook,
            data_source,
            &answer.cloud_init_data,
            &answer.cloud_init_no_cloud_source,
        )
        .map(Some)
    }

    /// Tells every `Shutdown` sidecar (v1alpha3) the launcher is ending; failures are logged,
    /// never fatal: the launcher is on its way out either way.
    pub async fn shutdown(&self) {
        for sidecar in self.registry.callbacks(SHUTDOWN) {
            if !sidecar.version.serves(SHUTDOWN) {
                continue;
            }
            let result = match self.dial(sidecar, SHUTDOWN).await {
                Ok(client) => client
                    .shutdown(sidecar.version, self.timeouts.call)
                    .await
                    .map_err(|source| HookError::Call {
                        hook: sidecar.hook.clone(),
                        hook_point: SHUTDOWN,
                        source: Box::new(source),
                    }),
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                log::warn(format_args!("{}: {e}", self.owner));
            }
        }
    }
}

/// The VMI as the hooks receive it: its JSON, in KubeVirt's field names.
fn vmi_json(vmi: &VirtualMachineInstance) -> Result<Vec<u8>, HookError> {
    serde_json::to_vec(vmi).map_err(|e| HookError::Encode {
        what: "VMI",
        reason: e.to_string(),
    })
}

/// The hooks directory the launcher reads: KubeVirt's.
pub fn hooks_dir() -> PathBuf {
    PathBuf::from(HOOKS_DIR)
}
