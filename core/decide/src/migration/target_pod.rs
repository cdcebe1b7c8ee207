//! The migration target pod: the VMI's launcher pod as the renderer builds it, plus what
//! KubeVirt v1.9.0's `createTargetPod` adds for a target (local migrations only): the
//! anti-affinity to the VMI's current pod, the migration's added node selector, the job label
//! and annotation, the CPU model and vendor node selectors of the source node, and the source's
//! SELinux level.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Map, Value, json};

use super::view::{Vmim, vmi_node};
use super::{MigrationConfig, names};
use crate::ClusterConfig;
use crate::api::VirtualMachineInstance;
use crate::meta;

/// Renders the target pod of a migration of the VMI from its current (source) pod, as a JSON
/// Pod with `metadata.generateName`, or says why it cannot (KubeVirt's
/// `RenderMigrationManifest`).
pub type TargetRenderer<'r> = &'r dyn Fn(&VirtualMachineInstance, &Pod) -> Result<Value, String>;

/// The production target renderer: [`kvrs_pod::render_launcher_pod`] of the VMI (the container
/// disks are then pinned to the source's digests by the decision, see `image_ids`).
///
/// Differs from KubeVirt: KubeVirt copies the network annotations of the source pod into the
/// target; `kvrs_pod` does not render them yet.
pub fn target_renderer<'a>(
    config: &'a ClusterConfig,
    inputs: &'a kvrs_pod::PodInputs,
) -> impl Fn(&VirtualMachineInstance, &Pod) -> Result<Value, String> + 'a {
    move |vmi, _source| {
        kvrs_pod::render_launcher_pod(vmi, config, inputs)
            .map_err(|e| e.to_string())
            .and_then(|p| serde_json::to_value(p).map_err(|e| e.to_string()))
    }
}

/// Why the target pod could not be built; the message is KubeVirt's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetPodError {
    /// The renderer refused the VMI.
    #[error("failed to render launch manifest: {0}")]
    Render(String),
    /// The VMI's node is not in the node cache (its labels give the CPU selectors).
    #[error("node \"{node}\" associated with vmi \"{vmi}\" does not exist")]
    NodeNotFound {
        /// The VMI's `status.nodeName`.
        node: String,
        /// The VMI's name.
        vmi: String,
    },
    /// A host-model VMI whose node has no host CPU model label.
    #[error(
        "unable to locate host cpu model, does not contain label \"host-model-cpu.node.kubevirt.io/\" with information"
    )]
    NoHostCpuModel,
    /// virt-handler has not reported the VMI's SELinux context yet.
    #[error("SELinux context not set on VMI status")]
    NoSelinuxContext,
}

impl TargetPodError {
    /// A stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Render(_) => "render",
            Self::NodeNotFound { .. } => "node_not_found",
            Self::NoHostCpuModel => "no_host_cpu_model",
            Self::NoSelinuxContext => "no_selinux_context",
        }
    }
}

/// The target pod of `migration`: rendered, then decorated as `createTargetPod` does.
pub(super) fn build(
    render: TargetRenderer<'_>,
    migration: Vmim<'_>,
    vmi: &VirtualMachineInstance,
    source: &Pod,
    nodes: &[Node],
    config: &MigrationConfig,
) -> Result<Value, TargetPodError> {
    let mut pod = render(vmi, source).map_err(TargetPodError::Render)?;
    super::image_ids::pin_container_disks(&mut pod, vmi, source);
    add_anti_affinity(&mut pod, meta::uid(&vmi.metadata));

    // The migration's added selector first, the rendered selector over it.
    let mut selector: BTreeMap<String, String> =
        string_map(migration.0.pointer("/spec/addedNodeSelector"));
    selector.extend(string_map(pod.pointer("/spec/nodeSelector")));

    set_string(
        &mut pod,
        "labels",
        names::MIGRATION_JOB_UID,
        migration.uid(),
    );
    set_string(
        &mut pod,
        "annotations",
        names::MIGRATION_JOB_NAME,
        migration.name(),
    );

    let host_model = vmi
        .spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.model.as_deref())
        == Some("host-model");
    let source_node = || {
        let node = vmi_node(vmi);
        nodes
            .iter()
            .find(|n| meta::name(&n.metadata) == node)
            .ok_or_else(|| TargetPodError::NodeNotFound {
                node: node.into(),
                vmi: meta::name(&vmi.metadata).into(),
            })
    };
    if host_model {
        let node = source_node()?;
        let from_source_pod: BTreeMap<String, String> = source
            .spec
            .as_ref()
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| {
                k.contains(names::CPU_FEATURE) || k.contains(names::HOST_MODEL_MIGRATION_CPU)
            })
            .collect();
        if from_source_pod.is_empty() {
            // Not migrated before: the source node's host model and required features.
            selector.extend(host_cpu_model_selectors(node_labels(node))?);
        } else {
            selector.extend(from_source_pod);
        }
    }

    // Only between nodes of the same CPU vendor.
    if !selector.keys().any(|k| k.starts_with(names::CPU_VENDOR)) {
        let node = source_node()?;
        if let Some(k) = node_labels(node)
            .keys()
            .find(|k| k.starts_with(names::CPU_VENDOR))
        {
            selector.insert(k.clone(), "true".into());
        }
    }
    pod["spec"]["nodeSelector"] = json!(selector);

    if config.match_selinux_level() {
        set_selinux_level(&mut pod, vmi)?;
    }

    if let Some(image) = migration
        .annotation(names::FUNC_TEST_TARGET_IMAGE_OVERRIDE)
        .filter(|i| !i.is_empty())
        && let Some(c) = pod
            .pointer_mut("/spec/containers")
            .and_then(Value::as_array_mut)
            .and_then(|cs| cs.iter_mut().find(|c| c["name"] == "compute"))
    {
        c["image"] = json!(image);
    }
    Ok(pod)
}

/// KubeVirt's `createMigrationPodAntiAffinityRule`: never on a node that runs a pod of this VMI.
fn add_anti_affinity(pod: &mut Value, vmi_uid: &str) {
    let term = json!({
        "labelSelector": {"matchLabels": {names::CREATED_BY: vmi_uid}},
        "topologyKey": "kubernetes.io/hostname",
    });
    let spec = &mut pod["spec"];
    if !spec["affinity"].is_object() {
        spec["affinity"] = json!({});
    }
    let anti = &mut spec["affinity"]["podAntiAffinity"];
    if !anti.is_object() {
        *anti = json!({});
    }
    let required = &mut anti["requiredDuringSchedulingIgnoredDuringExecution"];
    match required.as_array_mut() {
        Some(terms) => terms.push(term),
        None => *required = json!([term]),
    }
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

fn set_string(pod: &mut Value, section: &str, key: &str, value: &str) {
    let m = &mut pod["metadata"][section];
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m[key] = json!(value);
}

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// KubeVirt's `getHostCpuModelFromMap`: the node's host CPU model as a migration selector and
/// its required features as feature selectors.
fn host_cpu_model_selectors(
    labels: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, TargetPodError> {
    let mut out = BTreeMap::new();
    let mut model = None;
    for (k, v) in labels {
        if let Some(m) = k.strip_prefix(names::HOST_MODEL_CPU) {
            model = Some((m, v));
        }
        if let Some(f) = k.strip_prefix(names::HOST_MODEL_REQUIRED_FEATURES) {
            out.insert(format!("{}{f}", names::CPU_FEATURE), v.clone());
        }
    }
    let (model, value) = model
        .filter(|(m, _)| !m.is_empty())
        .ok_or(TargetPodError::NoHostCpuModel)?;
    out.insert(
        format!("{}{model}", names::HOST_MODEL_MIGRATION_CPU),
        value.clone(),
    );
    Ok(out)
}

/// KubeVirt's `setTargetPodSELinuxLevel`: the target shares the source's SELinux categories
/// (shared RWX volumes keep their labels); `none` means the node has no SELinux.
fn set_selinux_level(pod: &mut Value, vmi: &VirtualMachineInstance) -> Result<(), TargetPodError> {
    let ctx = vmi
        .status
        .as_ref()
        .and_then(|s| s.selinux_context.as_deref())
        .unwrap_or_default();
    match ctx {
        "none" => Ok(()),
        "" => Err(TargetPodError::NoSelinuxContext),
        ctx => {
            // user:role:type:level, the level itself may hold colons (s0:c1,c2).
            let level = ctx.splitn(4, ':').nth(3).unwrap_or_default();
            if !level.is_empty() {
                let spec = &mut pod["spec"];
                if !spec["securityContext"].is_object() {
                    spec["securityContext"] = json!({});
                }
                spec["securityContext"]["seLinuxOptions"] = json!({"level": level});
            }
            Ok(())
        }
    }
}
