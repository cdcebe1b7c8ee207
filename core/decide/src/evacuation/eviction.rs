//! virt-api's `pods/eviction` webhook for launcher pods (KubeVirt v1.9.0's
//! `PodEvictionAdmitter.admitLauncherPod`), as a pure function.
//!
//! The webhook has one side effect, which the shell carries out: marking the VMI for evacuation
//! ([`EvictionVerdict::Mark`]). Whatever the mark's outcome, a launcher pod whose VMI is to move
//! is never evicted by this request: the refusal (429, which `kubectl drain` retries) holds the
//! pod until the guest has left it.
//!
//! Not covered: hotplug attachment pods (`hp-volume-*`, refused by KubeVirt while their VMI
//! exists); kvrs creates none.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{EvictionStrategy, evacuation_node, is_migratable, names, node_of, strategy_of};
use crate::api::VirtualMachineInstance;
use crate::meta;

/// The annotation of a launcher pod naming its VMI (KubeVirt's `DomainAnnotation`).
pub const DOMAIN_ANNOTATION: &str = "kubevirt.io/domain";
/// The annotation the descheduler puts on its evictions.
const REQUESTED_BY: &str = "requested-by";
/// Its value for the descheduler.
const REQUESTED_BY_DESCHEDULER: &str = "sigs.k8s.io/descheduler";
/// The HTTP code of every refusal (Too Many Requests: the eviction API's "try again later").
pub const REFUSAL_CODE: u16 = 429;

/// What the webhook was asked, and what the shell read for it.
#[derive(Clone, Debug)]
pub struct EvictionRequest<'a> {
    /// The pod being evicted; `None` when reading it failed (KubeVirt then lets the eviction
    /// through: the API server will answer for a pod that does not exist).
    pub pod: Option<&'a Pod>,
    /// The pod's VMI (named by its `kubevirt.io/domain` annotation), or why reading it failed
    /// (a VMI that does not exist is a failure too, as in KubeVirt).
    pub vmi: Result<&'a VirtualMachineInstance, String>,
    /// The `Eviction` object of the request (`request.object`).
    pub eviction: &'a Value,
    /// The admission request's own `dryRun`.
    pub dry_run: bool,
    /// The cluster's `evictionStrategy` (the KubeVirt CR's).
    pub cluster_strategy: Option<&'a str>,
}

/// The webhook's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum EvictionVerdict {
    /// Let the eviction through.
    Allow,
    /// Refuse it with this message (code [`REFUSAL_CODE`]).
    Deny(String),
    /// Patch the VMI (`namespace`/`name`) with `patch` (a JSON patch; with `dryRun=All` when
    /// `dry_run`), then refuse with `message` — or, if the patch fails, with
    /// [`EvictionVerdict::mark_failed`]'s message.
    Mark {
        /// The VMI's namespace.
        namespace: String,
        /// The VMI's name.
        name: String,
        /// The JSON patch marking it.
        patch: Value,
        /// Send the patch as a dry run (the eviction is one).
        dry_run: bool,
        /// The refusal once marked.
        message: String,
    },
}

impl EvictionVerdict {
    /// The refusal when marking failed (it is up to the evicter to retry, as in KubeVirt).
    pub fn mark_failed(error: &str) -> String {
        format!("kubevirt failed marking the vmi for eviction: {error}")
    }
}

/// Why an eviction request could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvictionError {
    /// `request.object` is not a `policy/v1` Eviction.
    #[error("failed to parse the eviction object: {0}")]
    Unparsable(String),
}

impl EvictionError {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            EvictionError::Unparsable(_) => "eviction_object_unparsable",
        }
    }
}

fn is_launcher(pod: &Pod) -> bool {
    meta::label(&pod.metadata, names_app()) == Some("virt-launcher")
}

fn names_app() -> &'static str {
    crate::migration::names::APP
}

fn is_completed(pod: &Pod) -> bool {
    matches!(crate::vmi::pod::phase(pod), "Failed" | "Succeeded")
}

/// Whether the shell must read the VMI for this pod at all: a live launcher pod with a
/// `kubevirt.io/domain` annotation. Its value is the VMI's name.
pub fn vmi_to_read(pod: &Pod) -> Option<&str> {
    if !is_launcher(pod) || is_completed(pod) {
        return None;
    }
    meta::annotation(&pod.metadata, DOMAIN_ANNOTATION)
}

/// Decides an eviction of a launcher pod (KubeVirt's `Admit` for everything but hotplug pods).
pub fn admit_eviction(r: &EvictionRequest<'_>) -> EvictionVerdict {
    let Some(pod) = r.pod else {
        return EvictionVerdict::Allow;
    };
    if vmi_to_read(pod).is_none() {
        return EvictionVerdict::Allow;
    }
    let vmi = match &r.vmi {
        Ok(v) => v,
        Err(e) => return EvictionVerdict::Deny(format!("kubevirt failed getting the vmi: {e}")),
    };
    let mark = match strategy_of(vmi, r.cluster_strategy) {
        None | Some(EvictionStrategy::None) => false,
        Some(EvictionStrategy::LiveMigrate) => {
            if !is_migratable(vmi) {
                return EvictionVerdict::Deny(format!(
                    "VMI {} is configured with an eviction strategy but is not live-migratable",
                    meta::name(&vmi.metadata)
                ));
            }
            true
        }
        Some(EvictionStrategy::LiveMigrateIfPossible) => is_migratable(vmi),
        Some(EvictionStrategy::External) => true,
    };
    if !mark {
        return EvictionVerdict::Allow;
    }
    let (ns, name) = (meta::namespace(&vmi.metadata), meta::name(&vmi.metadata));
    // The descheduler parses this message.
    let evacuation = format!("Eviction triggered evacuation of VMI \"{ns}/{name}\"");
    if !evacuation_node(vmi).is_empty() {
        return EvictionVerdict::Deny(format!("Evacuation in progress: {evacuation}"));
    }
    let pod_node = crate::vmi::pod::node_name(pod);
    if node_of(vmi) != pod_node {
        return EvictionVerdict::Deny("Eviction request for target Pod".into());
    }
    let eviction = match read_eviction(r.eviction) {
        Ok(e) => e,
        Err(e) => return EvictionVerdict::Deny(e.to_string()),
    };
    EvictionVerdict::Mark {
        namespace: ns.into(),
        name: name.into(),
        patch: mark_patch(vmi, pod_node, eviction.descheduler),
        dry_run: r.dry_run || eviction.dry_run,
        message: evacuation,
    }
}

/// What the webhook reads from the Eviction object.
struct Eviction {
    /// `deleteOptions.dryRun` is `["All", ...]`.
    dry_run: bool,
    /// The descheduler asked (`requested-by: sigs.k8s.io/descheduler`).
    descheduler: bool,
}

fn read_eviction(v: &Value) -> Result<Eviction, EvictionError> {
    let eviction: k8s_openapi::api::policy::v1::Eviction =
        serde_json::from_value(v.clone()).map_err(|e| EvictionError::Unparsable(e.to_string()))?;
    let dry_run = eviction
        .delete_options
        .as_ref()
        .and_then(|o| o.dry_run.as_ref())
        .and_then(|d| d.first())
        .is_some_and(|d| d == "All");
    let descheduler = eviction
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REQUESTED_BY))
        .is_some_and(|v| v == REQUESTED_BY_DESCHEDULER);
    Ok(Eviction {
        dry_run,
        descheduler,
    })
}

/// KubeVirt's `markVMI`: `status.evacuationNodeName` set to the pod's node and, for the
/// descheduler, the eviction-source annotation. Pinned to the VMI read by its UID.
///
/// As KubeVirt writes it, quirks included (`tests/evacuation_oracle.rs` checks both against
/// KubeVirt's admitter): on a VMI without annotations the annotation map is added with the key
/// escaped as a JSON pointer (`kubevirt.io~1eviction-source`, which KubeVirt's evacuation
/// controller then never reads); on a VMI with annotations the key is set properly. KubeVirt
/// `replace`s that member, which the API server's JSON patch also accepts when it is missing;
/// kvrs `add`s it, the same outcome in RFC 6902 terms.
fn mark_patch(vmi: &VirtualMachineInstance, node: &str, descheduler: bool) -> Value {
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/uid", "value": meta::uid(&vmi.metadata)}),
        json!({"op": "add", "path": "/status/evacuationNodeName", "value": node}),
    ];
    if descheduler {
        let has_annotations = vmi
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| !a.is_empty());
        if has_annotations {
            ops.push(json!({"op": "add",
                "path": format!("/metadata/annotations/{}", names::EVICTION_SOURCE.replace('~', "~0").replace('/', "~1")),
                "value": "descheduler"}));
        } else {
            let escaped = names::EVICTION_SOURCE.replace('~', "~0").replace('/', "~1");
            ops.push(json!({"op": "add", "path": "/metadata/annotations",
                "value": {escaped: "descheduler"}}));
        }
    }
    Value::Array(ops)
}
