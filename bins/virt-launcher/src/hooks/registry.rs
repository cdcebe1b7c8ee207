//! The sidecars the launcher found, and which of them each hook point calls in which order: the
//! pure half of KubeVirt's hook manager (no sockets here).
//!
//! Order: KubeVirt v1.9.0 calls a hook point's sidecars in the order it found them: the sockets
//! that answered in an earlier scan of the hooks directory first, and within one scan by
//! container directory (`hook-sidecar-0`, `hook-sidecar-1`, ... in byte order, so
//! `hook-sidecar-10` before `hook-sidecar-2`) and then socket name. Its "sort by priority" step
//! sorts each sidecar's own list of hook points (priority descending, then name), which never
//! changes whom a hook point calls first; kvrs keeps both, so a sidecar that relies on
//! KubeVirt's order sees the same order here.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kvrs_ipc::hooks::{CallbacksVersion, SidecarInfo};

use super::error::{HookError, HookName};

/// One hook point a sidecar subscribed to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookPoint {
    /// `OnDefineDomain`, `PreCloudInitIso` or `Shutdown` (others are kept and never called).
    pub name: String,
    /// The sidecar's priority for it (higher first within the sidecar's own list).
    pub priority: i32,
}

/// A sidecar that answered the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sidecar {
    /// Its socket.
    pub socket: PathBuf,
    /// How errors name it.
    pub hook: HookName,
    /// The newest `Callbacks` version both sides speak.
    pub version: CallbacksVersion,
    /// Its hook points, priority descending then name (KubeVirt's sort).
    pub hook_points: Vec<HookPoint>,
}

/// The newest `Callbacks` version the sidecar offers that the launcher speaks.
pub fn choose_version(offered: &[String]) -> Option<CallbacksVersion> {
    CallbacksVersion::NEWEST_FIRST
        .into_iter()
        .find(|v| offered.iter().any(|o| o == v.as_str()))
}

impl Sidecar {
    /// The sidecar an `Info` answer describes; `hook` names its socket.
    pub fn from_info(
        socket: PathBuf,
        hook: HookName,
        info: SidecarInfo,
    ) -> Result<Sidecar, HookError> {
        let hook = HookName {
            name: info.name.clone(),
            ..hook
        };
        let Some(version) = choose_version(&info.versions) else {
            return Err(HookError::UnsupportedVersion {
                hook,
                offered: info.versions,
            });
        };
        let mut hook_points: Vec<HookPoint> = info
            .hook_points
            .into_iter()
            .map(|p| HookPoint {
                name: p.name,
                priority: p.priority,
            })
            .collect();
        hook_points.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(Sidecar {
            socket,
            hook,
            version,
            hook_points,
        })
    }
}

/// The collected sidecars by hook point, each list in call order.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    found: Vec<HookName>,
    by_point: BTreeMap<String, Vec<Sidecar>>,
}

impl Registry {
    /// Adds a sidecar after those found before it.
    pub fn add(&mut self, sidecar: Sidecar) {
        self.found.push(sidecar.hook.clone());
        for point in &sidecar.hook_points {
            self.by_point
                .entry(point.name.clone())
                .or_default()
                .push(sidecar.clone());
        }
    }

    /// How many sidecars were added.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.found.len()
    }

    /// The sidecars a hook point calls, in order.
    pub fn callbacks(&self, hook_point: &str) -> &[Sidecar] {
        self.by_point
            .get(hook_point)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Every sidecar's name, in the order found (for logs and errors).
    pub fn names(&self) -> Vec<String> {
        self.found.iter().map(ToString::to_string).collect()
    }
}
