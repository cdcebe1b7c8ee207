//! What virt-api reads and writes in the cluster besides answering reviews: its certificate
//! Secret and the `caBundle` of its webhook configurations, plus the facts a webhook asks for
//! ([`crate::webhooks::Lookup`]).
//!
//! Every write is a JSON patch with `test` preconditions, or a create: the Secret is created
//! when absent (a create that loses the race re-reads the winner's), and changed only if its
//! `resourceVersion` is still the one read; a webhook configuration's `caBundle` is written
//! entry by entry, each guarded by a test of the entry's name and of the configuration's
//! `resourceVersion`, so nothing else in objects kvrs only partly owns is ever overwritten.
//! Writes are logged keyed by `namespace/name`.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::certs::{self, Bundle, CertError, Plan, Validity};
use crate::webhooks::{Facts, Lookup};

/// Why a cluster read or write failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The API server refused or could not be reached.
    #[error("{action} {object}: {source}")]
    Api {
        /// What was being done (`creating`, `patching`, ...).
        action: &'static str,
        /// `namespace/name` or `kind/name`.
        object: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Making certificates failed.
    #[error("certificates: {0}")]
    Certs(#[from] CertError),
    /// Another writer kept changing the object between read and write.
    #[error("{0}: still conflicting after retries")]
    Conflict(String),
}

impl ClusterError {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            ClusterError::Api { .. } => "api",
            ClusterError::Certs(e) => e.label(),
            ClusterError::Conflict(_) => "conflict",
        }
    }
}

fn api_error(action: &'static str, object: &str) -> impl FnOnce(kube::Error) -> ClusterError {
    let object = object.to_string();
    move |source| ClusterError::Api {
        action,
        object,
        source,
    }
}

/// Whether the API answered `code`.
fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// A failed `test` operation (422) or an optimistic-lock conflict (409).
fn lost_race(e: &kube::Error) -> bool {
    is_status(e, 409) || is_status(e, 422)
}

const RETRIES: usize = 5;

/// The Secret holding the certificates.
pub struct CertSecret {
    api: Api<Secret>,
    namespace: String,
    name: String,
}

impl CertSecret {
    /// `namespace/name` through `client`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        CertSecret {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The Secret's certificates (or why they cannot be read) and its resourceVersion; `None`
    /// when there is no Secret.
    async fn read(&self) -> Result<Option<(Result<Bundle, CertError>, String)>, ClusterError> {
        let secret = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(api_error("reading", &self.key()))?;
        Ok(secret.map(|s| {
            let data: BTreeMap<String, Vec<u8>> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            (
                Bundle::from_secret_data(&data),
                s.metadata.resource_version.unwrap_or_default(),
            )
        }))
    }

    /// The certificates to serve with at `now`: the Secret's when they are good, else new ones
    /// written to it (created when absent; a lost race re-reads and decides again).
    pub async fn ensure(
        &self,
        names: &[String],
        now: i64,
        validity: Validity,
    ) -> Result<Bundle, ClusterError> {
        for _ in 0..RETRIES {
            match self.read().await? {
                None => {
                    let bundle = certs::apply(
                        &Plan::RotateCa("none yet".into()),
                        None,
                        names,
                        now,
                        validity,
                    )?;
                    match self.create(&bundle).await {
                        Ok(()) => return Ok(bundle),
                        Err(e) if is_status(&e, 409) => continue, // another replica won
                        Err(e) => return Err(api_error("creating", &self.key())(e)),
                    }
                }
                Some((found, version)) => {
                    let plan = certs::plan(found.as_ref(), now);
                    let current = found.as_ref().ok();
                    if plan == Plan::Keep
                        && let Some(b) = current
                    {
                        return Ok(b.clone());
                    }
                    let bundle = certs::apply(&plan, current, names, now, validity)?;
                    match self.replace(&bundle, &version).await {
                        Ok(()) => {
                            info!(secret = %self.key(), ?plan, "certificates written");
                            return Ok(bundle);
                        }
                        Err(e) if lost_race(&e) => continue,
                        Err(e) => return Err(api_error("patching", &self.key())(e)),
                    }
                }
            }
        }
        Err(ClusterError::Conflict(self.key()))
    }

    fn data(bundle: &Bundle) -> BTreeMap<String, ByteString> {
        bundle
            .secret_data()
            .into_iter()
            .map(|(k, v)| (k, ByteString(v)))
            .collect()
    }

    async fn create(&self, bundle: &Bundle) -> Result<(), kube::Error> {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_string(),
                    "kvrs-virt-api".to_string(),
                )])),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(Self::data(bundle)),
            ..Default::default()
        };
        self.api.create(&PostParams::default(), &secret).await?;
        info!(secret = %self.key(), "certificate Secret created");
        Ok(())
    }

    async fn replace(&self, bundle: &Bundle, version: &str) -> Result<(), kube::Error> {
        let data: BTreeMap<String, String> = bundle
            .secret_data()
            .into_iter()
            .map(|(k, v)| (k, base64::engine::general_purpose::STANDARD.encode(v)))
            .collect();
        let patch = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/data", "value": data},
        ]);
        let patch: json_patch::Patch =
            serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
        self.api
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await?;
        Ok(())
    }
}

/// Which webhook configuration kind.
#[derive(Clone, Copy, Debug)]
pub enum ConfigurationKind {
    /// `MutatingWebhookConfiguration`.
    Mutating,
    /// `ValidatingWebhookConfiguration`.
    Validating,
}

/// The JSON patch that sets `ca_bundle` (base64) on every webhook of `configuration` whose
/// bundle differs, guarded by `test`s of the resourceVersion and of each entry's name; `None`
/// when every entry already has it.
pub fn ca_bundle_patch(configuration: &Value, ca_bundle: &str) -> Option<json_patch::Patch> {
    let version = configuration["metadata"]["resourceVersion"].as_str()?;
    let mut ops =
        vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
    for (i, webhook) in configuration["webhooks"].as_array()?.iter().enumerate() {
        if webhook["clientConfig"]["caBundle"].as_str() == Some(ca_bundle) {
            continue;
        }
        ops.push(
            json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": webhook["name"]}),
        );
        ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": ca_bundle}));
    }
    if ops.len() == 1 {
        return None;
    }
    serde_json::from_value(Value::Array(ops)).ok()
}

/// Keeps the `caBundle` of webhook configuration `name` equal to `bundle_pem`. A configuration
/// that does not exist (not installed yet) is logged and skipped; the next sync tries again.
pub async fn sync_ca_bundle(
    client: &kube::Client,
    kind: ConfigurationKind,
    name: &str,
    bundle_pem: &str,
) -> Result<(), ClusterError> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle_pem);
    let (gvk, plural) = match kind {
        ConfigurationKind::Mutating => (
            GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "MutatingWebhookConfiguration",
            ),
            "mutatingwebhookconfigurations",
        ),
        ConfigurationKind::Validating => (
            GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
            ),
            "validatingwebhookconfigurations",
        ),
    };
    patch_ca_bundle(client, &gvk, plural, name, |current| {
        ca_bundle_patch(current, &encoded)
    })
    .await
}

/// Reads object `name` of `gvk` and applies the patch `patch_for` makes from it, retrying a lost
/// race (its `test`s failed: someone wrote in between) a few times. An object that does not
/// exist yet is logged and skipped (the next sync tries again); `None` from `patch_for` means
/// it already holds the bundle.
async fn patch_ca_bundle(
    client: &kube::Client,
    gvk: &GroupVersionKind,
    plural: &str,
    name: &str,
    patch_for: impl Fn(&Value) -> Option<json_patch::Patch>,
) -> Result<(), ClusterError> {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(gvk, plural),
    );
    let object = format!("{}/{name}", gvk.kind);
    for _ in 0..RETRIES {
        let Some(current) = api
            .get_opt(name)
            .await
            .map_err(api_error("reading", &object))?
        else {
            warn!(object = %object, "not found: its caBundle is set once it exists");
            return Ok(());
        };
        let value = serde_json::to_value(&current).unwrap_or(Value::Null);
        let Some(patch) = patch_for(&value) else {
            return Ok(());
        };
        match api
            .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
        {
            Ok(_) => {
                info!(object = %object, "caBundle updated");
                return Ok(());
            }
            Err(e) if lost_race(&e) => continue,
            Err(e) => return Err(api_error("patching", &object)(e)),
        }
    }
    Err(ClusterError::Conflict(object))
}

/// The JSON patch that sets an APIService's `spec.caBundle` (base64), guarded by its
/// `resourceVersion`; `None` when it already has it.
pub fn api_service_ca_patch(service: &Value, ca_bundle: &str) -> Option<json_patch::Patch> {
    if service["spec"]["caBundle"].as_str() == Some(ca_bundle) {
        return None;
    }
    let version = service["metadata"]["resourceVersion"].as_str()?;
    serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "add", "path": "/spec/caBundle", "value": ca_bundle},
    ]))
    .ok()
}

/// Keeps the `caBundle` of APIService `name` equal to `bundle_pem` (absent: logged, retried at
/// the next sync).
pub async fn sync_api_service_ca_bundle(
    client: &kube::Client,
    name: &str,
    bundle_pem: &str,
) -> Result<(), ClusterError> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle_pem);
    let gvk = GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService");
    patch_ca_bundle(client, &gvk, "apiservices", name, |current| {
        api_service_ca_patch(current, &encoded)
    })
    .await
}

/// Reads what `lookup` names (errors are reported in the facts: the webhook refuses with them).
pub async fn read_facts(client: &kube::Client, lookup: &Lookup) -> Facts {
    match lookup {
        Lookup::MigrationTarget {
            namespace,
            vmi_name,
        } => {
            let vmi_gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance");
            let mig_gvk =
                GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstanceMigration");
            let vmis: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                namespace,
                &ApiResource::from_gvk_with_plural(&vmi_gvk, "virtualmachineinstances"),
            );
            let migrations: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                namespace,
                &ApiResource::from_gvk_with_plural(&mig_gvk, "virtualmachineinstancemigrations"),
            );
            let vmi = match vmis.get_opt(vmi_name).await {
                Ok(v) => v.and_then(|v| serde_json::to_value(v).ok()),
                Err(e) => {
                    return Facts {
                        error: Some(e.to_string()),
                        ..Facts::default()
                    };
                }
            };
            let selector = format!("{}={vmi_name}", crate::webhooks::MIGRATION_SELECTOR_LABEL);
            match migrations
                .list(&ListParams::default().labels(&selector))
                .await
            {
                Ok(list) => Facts {
                    vmi,
                    migrations: list
                        .items
                        .into_iter()
                        .filter_map(|m| serde_json::to_value(m).ok())
                        .collect(),
                    ..Facts::default()
                },
                Err(e) => Facts {
                    error: Some(e.to_string()),
                    ..Facts::default()
                },
            }
        }
        Lookup::Vm { vm, vmi, .. } => {
            let mut facts = Facts {
                objects: read_vm_references(client, lookup).await,
                ..Facts::default()
            };
            if let Some(name) = vmi {
                let namespace = vm["metadata"]["namespace"].as_str().unwrap_or("");
                read_vmi(client, namespace, name, &mut facts).await;
            }
            facts
        }
        Lookup::Vmi { namespace, name } => {
            let mut facts = Facts::default();
            read_vmi(client, namespace, name, &mut facts).await;
            facts
        }
        Lookup::Eviction { .. } => Facts::default(),
    }
}

/// The VMI `namespace/name` into `facts.vmi` (left `None` when it does not exist), a failed
/// read into `facts.error`.
async fn read_vmi(client: &kube::Client, namespace: &str, name: &str, facts: &mut Facts) {
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance");
    let vmis: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, "virtualmachineinstances"),
    );
    match vmis.get_opt(name).await {
        Ok(v) => facts.vmi = v.and_then(|v| serde_json::to_value(v).ok()),
        Err(e) => facts.error = Some(api_message(&e)),
    }
}

/// The message of an API error as the API server wrote it (KubeVirt quotes the client-go
/// error, which is that message), else the error itself.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(ae) => ae.message.clone(),
        other => other.to_string(),
    }
}

/// What the `pods/eviction` webhook reads, and its one write (KubeVirt's `Admit` +
/// `markVMI`): the pod; for a live launcher pod its VMI and the KubeVirt CR's
/// `evictionStrategy`; then, if the decision says so, the VMI's evacuation mark, whose outcome
/// goes into [`Facts::marked`].
pub async fn read_eviction_facts(
    client: &kube::Client,
    request: &crate::review::AdmissionRequest,
) -> Facts {
    let Some(Lookup::Eviction { namespace, pod }) =
        crate::webhooks::lookup(crate::webhooks::Webhook::PodEviction, request)
    else {
        return Facts::default();
    };
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &namespace);
    let mut facts = Facts::default();
    let Ok(p) = pods.get(&pod).await else {
        // KubeVirt lets the eviction through: the API server answers for the pod.
        return facts;
    };
    let vmi_name = crate::webhooks::eviction_vmi_name(&p).map(String::from);
    facts.pod = serde_json::to_value(&p).ok();
    let Some(vmi_name) = vmi_name else {
        return facts;
    };
    let vmi_gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance");
    let vmi_resource = ApiResource::from_gvk_with_plural(&vmi_gvk, "virtualmachineinstances");
    let vmis: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &vmi_resource);
    match vmis.get(&vmi_name).await {
        Ok(v) => facts.vmi = serde_json::to_value(v).ok(),
        Err(e) => facts.error = Some(api_message(&e)),
    }
    let kv_gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt");
    let kubevirts: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&kv_gvk, "kubevirts"),
    );
    match kubevirts.list(&ListParams::default()).await {
        Ok(list) if list.items.len() == 1 => {
            facts.cluster_eviction_strategy = list.items[0]
                .data
                .pointer("/spec/configuration/evictionStrategy")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(String::from);
        }
        Ok(_) => {}
        Err(e) => {
            warn!(error = %e, "reading the KubeVirt CR for its evictionStrategy failed; deciding without it")
        }
    }
    if let kvrs_decide::evacuation::EvictionVerdict::Mark {
        namespace,
        name,
        patch,
        dry_run,
        ..
    } = crate::webhooks::decide_eviction(request, &facts)
    {
        let params = PatchParams {
            dry_run,
            ..PatchParams::default()
        };
        let outcome = match serde_json::from_value::<json_patch::Patch>(patch) {
            Ok(p) => {
                let vmis: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &namespace, &vmi_resource);
                vmis.patch(&name, &params, &Patch::<()>::Json(p))
                    .await
                    .map(|_| ())
                    .map_err(|e| api_message(&e))
            }
            Err(e) => Err(e.to_string()),
        };
        match &outcome {
            Ok(()) => {
                info!(object = %format!("{namespace}/{name}"), node = %crate::webhooks::eviction_node(&facts), dry_run, "marked the VMI for evacuation")
            }
            Err(e) => {
                warn!(object = %format!("{namespace}/{name}"), error = %e, "marking the VMI for evacuation failed")
            }
        }
        facts.marked = Some(outcome);
    }
    facts
}

/// Reads what [`crate::webhooks::vm_reads`] asks for, round by round, until it asks for
/// nothing new (a bounded number of rounds: an inference chain is at most four objects long).
async fn read_vm_references(client: &kube::Client, lookup: &Lookup) -> Vec<Value> {
    let mut found = Vec::new();
    let mut read = Vec::new();
    for _ in 0..8 {
        let wanted = crate::webhooks::vm_reads(lookup, &found, &read);
        if wanted.is_empty() {
            break;
        }
        found.extend(read_references(client, &wanted).await);
        read.extend(wanted);
    }
    found
}

/// The referenced objects that exist. A read that fails is logged and left out: KubeVirt's VM
/// webhooks ignore a reference they cannot resolve (its VM controller reports it).
async fn read_references(
    client: &kube::Client,
    references: &[crate::subresources::expand::Reference],
) -> Vec<Value> {
    let mut found = Vec::new();
    for r in references {
        let gvk = GroupVersionKind::gvk(r.group, r.version, r.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, r.plural);
        let api: Api<DynamicObject> = match &r.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        match api.get_opt(&r.name).await {
            Ok(Some(o)) => found.extend(serde_json::to_value(o).ok()),
            Ok(None) => {}
            Err(e) => warn!(
                object = %format!("{}/{}", r.namespace.as_deref().unwrap_or(""), r.name),
                kind = r.kind,
                error = %e,
                "reading a VM's reference failed; the webhook goes on without it"
            ),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_bundle_patch_is_guarded_and_skips_current_entries() {
        let conf = json!({"metadata": {"name": "c", "resourceVersion": "7"}, "webhooks": [
            {"name": "a.kubevirt.io", "clientConfig": {"caBundle": "NEW"}},
            {"name": "b.kubevirt.io", "clientConfig": {"url": "https://x"}},
        ]});
        let patch = serde_json::to_value(ca_bundle_patch(&conf, "NEW").unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "test", "path": "/webhooks/1/name", "value": "b.kubevirt.io"},
                {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "NEW"},
            ])
        );
        let mut done = conf.clone();
        done["webhooks"][1]["clientConfig"]["caBundle"] = json!("NEW");
        assert!(ca_bundle_patch(&done, "NEW").is_none());
    }

    #[test]
    fn the_api_service_patch_is_guarded() {
        let svc = json!({"metadata": {"name": "v1.subresources.kubevirt.io", "resourceVersion": "3"},
            "spec": {"group": "subresources.kubevirt.io"}});
        let patch = serde_json::to_value(api_service_ca_patch(&svc, "CA").unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "3"},
                {"op": "add", "path": "/spec/caBundle", "value": "CA"},
            ])
        );
        let mut done = svc.clone();
        done["spec"]["caBundle"] = json!("CA");
        assert!(api_service_ca_patch(&done, "CA").is_none());
    }
}
