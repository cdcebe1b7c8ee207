//! Where and as whom the pod runs: node selector, affinity, pod security context, hostname,
//! pull secrets, service account, DRA claims.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;

use super::NON_ROOT_UID;
use crate::api::VirtualMachineInstance;
use crate::config::ClusterConfig;
use crate::resources::is_cpu_dedicated;

/// Longest DNS-1123 label, the limit of a pod hostname.
const DNS1123_LABEL_MAX: usize = 63;

/// The pod's hostname: `spec.hostname`, else the VMI name up to its first dot, cut to 63
/// characters.
pub(super) fn hostname(vmi: &VirtualMachineInstance, name: &str) -> String {
    if let Some(h) = vmi.spec.hostname.as_deref().filter(|h| !h.is_empty()) {
        return h.to_string();
    }
    let first = name.split('.').next().unwrap_or(name);
    first.chars().take(DNS1123_LABEL_MAX).collect()
}

/// Pod-level security: fsGroup 107 always (virtiofsd runs unprivileged even in root pods), and
/// the qemu user for non-root VMIs.
pub(super) fn pod_security_context(non_root: bool) -> core::PodSecurityContext {
    if non_root {
        core::PodSecurityContext {
            fs_group: Some(NON_ROOT_UID),
            run_as_user: Some(NON_ROOT_UID),
            run_as_group: Some(NON_ROOT_UID),
            run_as_non_root: Some(true),
            ..Default::default()
        }
    } else {
        core::PodSecurityContext {
            fs_group: Some(NON_ROOT_UID),
            run_as_user: Some(0),
            ..Default::default()
        }
    }
}

fn features_enabled(f: &Option<crate::api::FeatureState>) -> bool {
    f.as_ref().and_then(|f| f.enabled).unwrap_or(false)
}

/// Node labels the VMI's Hyper-V features need (only with the HypervStrictCheck gate).
fn hyperv_selectors(vmi: &VirtualMachineInstance, out: &mut BTreeMap<String, String>) {
    let Some(hv) = vmi
        .spec
        .domain
        .features
        .as_ref()
        .and_then(|f| f.hyperv.as_ref())
    else {
        return;
    };
    let synictimer = hv
        .synictimer
        .as_ref()
        .and_then(|t| t.enabled)
        .unwrap_or(false);
    let tlbflush = hv
        .tlbflush
        .as_ref()
        .and_then(|t| t.enabled)
        .unwrap_or(false);
    let table = [
        (features_enabled(&hv.vpindex), "vpindex"),
        (features_enabled(&hv.runtime), "runtime"),
        (features_enabled(&hv.reset), "reset"),
        (features_enabled(&hv.synic), "synic"),
        (synictimer, "synictimer"),
        (features_enabled(&hv.frequencies), "frequencies"),
        (features_enabled(&hv.reenlightenment), "reenlightenment"),
        (tlbflush, "tlbflush"),
        (features_enabled(&hv.ipi), "ipi"),
    ];
    for (on, label) in table {
        if on {
            out.insert(format!("hyperv.node.kubevirt.io/{label}"), "true".into());
        }
    }
    if hv.evmcs.as_ref().is_some_and(|e| e.enabled.unwrap_or(true)) {
        out.insert("cpu-vendor.node.kubevirt.io/Intel".into(), "true".into());
    }
}

/// The node selector: schedulable KubeVirt nodes of the VMI's architecture, the VMI's own
/// selector, and labels for what the VMI needs (dedicated CPUs, CPU model and features,
/// machine type, realtime, confidential computing).
pub(super) fn node_selector(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("kubevirt.io/schedulable".to_string(), "true".to_string());
    let arch = vmi.spec.architecture.as_deref().unwrap_or_default();
    if !arch.is_empty() {
        out.insert("kubernetes.io/arch".into(), arch.to_lowercase());
    }
    for (k, v) in vmi.spec.node_selector.iter().flatten() {
        out.insert(k.clone(), v.clone());
    }
    let mut on = |label: String| {
        out.insert(label, "true".to_string());
    };
    if is_cpu_dedicated(vmi) {
        on("kubevirt.io/cpumanager".into());
    }
    let cpu = vmi.spec.domain.cpu.as_ref();
    if let Some(model) = cpu.and_then(|c| c.model.as_deref())
        && !model.is_empty()
        && model != "host-model"
        && model != "host-passthrough"
    {
        on(format!("cpu-model.node.kubevirt.io/{model}"));
    }
    let machine = vmi
        .status
        .as_ref()
        .and_then(|s| s.machine.as_ref())
        .and_then(|m| m.r#type.clone())
        .filter(|t| !t.is_empty())
        .or_else(|| {
            vmi.spec
                .domain
                .machine
                .as_ref()
                .and_then(|m| m.r#type.clone())
                .filter(|t| !t.is_empty())
        });
    if let Some(m) = machine {
        on(format!("machine-type.node.kubevirt.io/{m}"));
    }
    if cpu
        .and_then(|c| c.model.as_deref())
        .is_some_and(|m| !m.is_empty())
    {
        for f in cpu.and_then(|c| c.features.as_ref()).into_iter().flatten() {
            if matches!(f.policy.as_deref(), None | Some("") | Some("require")) {
                on(format!("cpu-feature.node.kubevirt.io/{}", f.name));
            }
        }
    }
    if let Some(freq) = tsc_frequency_required(vmi) {
        on(format!("scheduling.node.kubevirt.io/tsc-frequency-{freq}"));
    }
    if cpu.is_some_and(|c| c.realtime.is_some()) {
        on("kubevirt.io/realtime".into());
    }
    let ls = vmi.spec.domain.launch_security.as_ref();
    if ls.is_some_and(|l| l.sev.is_some() || l.snp.is_some()) {
        on("kubevirt.io/sev".into());
    }
    let sev_es = ls
        .and_then(|l| l.sev.as_ref())
        .and_then(|s| s.policy.as_ref())
        .and_then(|p| p.encrypted_state)
        .unwrap_or(false);
    if sev_es {
        on("kubevirt.io/sev-es".into());
    }
    if ls.is_some_and(|l| l.snp.is_some()) {
        on("kubevirt.io/sev-snp".into());
    }
    if ls.is_some() && arch == "s390x" {
        on("kubevirt.io/s390-pv".into());
    }
    if ls.is_some_and(|l| l.tdx.is_some()) {
        on("kubevirt.io/tdx".into());
    }
    if config.gate("HypervStrictCheck") {
        hyperv_selectors(vmi, &mut out);
    }
    out
}

/// The TSC frequency the pod must land on: only when the guest needs a stable TSC (an `invtsc`
/// feature it requires, or Hyper-V reenlightenment) and the controller already put the
/// frequency into `status.topologyHints`.
fn tsc_frequency_required(vmi: &VirtualMachineInstance) -> Option<i64> {
    let invtsc = vmi
        .spec
        .domain
        .cpu
        .iter()
        .flat_map(|c| c.features.iter().flatten())
        .any(|f| f.name == "invtsc" && matches!(f.policy.as_deref(), Some("require" | "force")));
    let reenlightenment = vmi
        .spec
        .domain
        .features
        .as_ref()
        .and_then(|f| f.hyperv.as_ref())
        .is_some_and(|h| features_enabled(&h.reenlightenment));
    if !invtsc && !reenlightenment {
        return None;
    }
    vmi.status
        .as_ref()
        .and_then(|s| s.topology_hints.as_ref())
        .and_then(|t| t.tsc_frequency)
        .filter(|f| *f > 0)
}

fn reject_label(affinity: Option<core::Affinity>, label: &str) -> core::Affinity {
    let requirement = core::NodeSelectorRequirement {
        key: label.into(),
        operator: "DoesNotExist".into(),
        values: None,
    };
    let term = core::NodeSelectorTerm {
        match_expressions: Some(vec![requirement.clone()]),
        ..Default::default()
    };
    let mut affinity = affinity.unwrap_or_default();
    let node = affinity.node_affinity.get_or_insert_with(Default::default);
    match node
        .required_during_scheduling_ignored_during_execution
        .as_mut()
    {
        // Terms are ORed, so the requirement goes into each of them.
        Some(selector) => {
            for t in &mut selector.node_selector_terms {
                t.match_expressions
                    .get_or_insert_with(Vec::new)
                    .push(requirement.clone());
            }
        }
        None => {
            node.required_during_scheduling_ignored_during_execution = Some(core::NodeSelector {
                node_selector_terms: vec![term],
            });
        }
    }
    affinity
}

/// The VMI's affinity, plus: avoid nodes whose host model is obsolete (for host-model CPUs) and
/// nodes that have a forbidden CPU feature.
pub(super) fn affinity(vmi: &VirtualMachineInstance) -> Option<core::Affinity> {
    let mut affinity = vmi.spec.affinity.as_deref().cloned();
    let cpu = vmi.spec.domain.cpu.as_ref();
    let model = cpu.and_then(|c| c.model.as_deref()).unwrap_or_default();
    if model.is_empty() || model == "host-model" {
        affinity = Some(reject_label(
            affinity,
            "node-labeller.kubevirt.io/obsolete-host-model",
        ));
    }
    for f in cpu.and_then(|c| c.features.as_ref()).into_iter().flatten() {
        if f.policy.as_deref() == Some("forbid") {
            affinity = Some(reject_label(
                affinity,
                &format!("cpu-feature.node.kubevirt.io/{}", f.name),
            ));
        }
    }
    affinity
}

/// Labels `pr.kubevirt.io/<pvc uid>` for the claims behind LUN disks with SCSI persistent
/// reservation (claims whose UID the inputs know).
pub(super) fn reservation_labels(
    vmi: &VirtualMachineInstance,
    inputs: &super::PodInputs,
) -> BTreeMap<String, String> {
    let volumes = vmi.spec.volumes.as_deref().unwrap_or_default();
    let mut out = BTreeMap::new();
    for disk in vmi.spec.domain.devices.disks.iter().flatten() {
        if !disk
            .lun
            .as_ref()
            .is_some_and(|l| l.reservation.unwrap_or(false))
        {
            continue;
        }
        let Some(v) = volumes.iter().find(|v| v.name == disk.name) else {
            continue;
        };
        let claim = v.data_volume.as_ref().map(|d| d.name.as_str()).or_else(|| {
            v.persistent_volume_claim
                .as_ref()
                .map(|p| p.claim_name.as_str())
        });
        if let Some(uid) = claim
            .and_then(|c| inputs.pvcs.get(c))
            .and_then(|p| p.uid.as_deref())
        {
            out.insert(format!("pr.kubevirt.io/{uid}"), String::new());
        }
    }
    out
}

/// Pod anti-affinity keeping launchers that share a reserved LUN on different nodes.
pub(super) fn add_reservation_anti_affinity(
    affinity: Option<core::Affinity>,
    labels: &BTreeMap<String, String>,
) -> Option<core::Affinity> {
    if labels.is_empty() {
        return affinity;
    }
    let mut affinity = affinity.unwrap_or_default();
    let anti = affinity
        .pod_anti_affinity
        .get_or_insert_with(Default::default);
    let terms = anti
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new);
    for key in labels.keys() {
        terms.push(core::PodAffinityTerm {
            label_selector: Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_expressions: Some(vec![
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                            key: key.clone(),
                            operator: "Exists".into(),
                            values: None,
                        },
                    ]),
                    ..Default::default()
                },
            ),
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        });
    }
    Some(affinity)
}

/// Pull secrets of container disks and the kernel-boot image, then the cluster's.
pub(super) fn image_pull_secrets(
    vmi: &VirtualMachineInstance,
    inputs: &super::PodInputs,
) -> Option<Vec<core::LocalObjectReference>> {
    let mut names: Vec<String> = Vec::new();
    let mut push = |n: &str| {
        if !n.is_empty() && !names.iter().any(|x| x == n) {
            names.push(n.to_string());
        }
    };
    for v in vmi.spec.volumes.iter().flatten() {
        if let Some(s) = v
            .container_disk
            .as_ref()
            .and_then(|c| c.image_pull_secret.as_deref())
        {
            push(s);
        }
    }
    if let Some(s) =
        super::volumes::kernel_boot_container(vmi).and_then(|k| k.image_pull_secret.as_deref())
    {
        push(s);
    }
    if let Some(s) = inputs.image_pull_secret.as_deref() {
        push(s);
    }
    let refs: Vec<core::LocalObjectReference> = names
        .into_iter()
        .map(|name| core::LocalObjectReference { name })
        .collect();
    Some(refs).filter(|r| !r.is_empty())
}

/// `spec.resourceClaims` copied onto the pod.
pub(super) fn resource_claims(vmi: &VirtualMachineInstance) -> Option<Vec<core::PodResourceClaim>> {
    let claims: Vec<core::PodResourceClaim> = vmi
        .spec
        .resource_claims
        .iter()
        .flatten()
        .map(|c| core::PodResourceClaim {
            name: c.name.clone(),
            resource_claim_name: c.resource_claim_name.clone(),
            resource_claim_template_name: c.resource_claim_template_name.clone(),
        })
        .collect();
    Some(claims).filter(|c| !c.is_empty())
}

/// Service account: the VMI's, else the one a serviceAccount volume names; its token is mounted
/// only when such a volume exists or Istio injects a proxy.
pub(super) fn service_account(vmi: &VirtualMachineInstance, spec: &mut core::PodSpec) {
    let from_volume = vmi
        .spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.service_account.as_ref())
        .filter_map(|s| s.service_account_name.clone())
        .find(|n| !n.is_empty());
    if let Some(sa) = vmi
        .spec
        .service_account_name
        .clone()
        .filter(|s| !s.is_empty())
    {
        spec.service_account_name = Some(sa);
    } else if let Some(sa) = &from_volume {
        spec.service_account_name = Some(sa.clone());
    }
    let istio = super::metadata::annotation(vmi, "sidecar.istio.io/inject")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    spec.automount_service_account_token = Some(from_volume.is_some() || istio);
}
