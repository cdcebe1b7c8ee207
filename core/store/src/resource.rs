//! Which resources the store knows, and the few facts about each that change how a write is
//! handled: the scope (namespaced or cluster-wide), whether it has a `status` subresource, and
//! whether its objects are re-serialised through kvrs's typed structs.

use std::sync::Arc;

/// How objects of a resource are parsed on every write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Typed {
    /// Kept as JSON.
    Json,
    /// Parsed as a `kvrs_api` VirtualMachine.
    Vm,
    /// Parsed as a `kvrs_api` VirtualMachineInstance.
    Vmi,
}

/// A resource type: `group/version/plural` plus what the store needs to know about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// API version served (the store keeps one version per resource).
    pub version: String,
    /// Plural resource name, e.g. `pods`.
    pub plural: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Namespaced (`true`) or cluster-scoped.
    pub namespaced: bool,
    /// Whether a `status` subresource splits writes: main writes keep the stored status and
    /// `/status` writes change only status; `metadata.generation` follows spec changes.
    pub status_subresource: bool,
    /// Typed re-serialisation (only when the store is built with typed objects).
    pub typed: Typed,
    /// Short names for discovery (`kubectl get vmi`).
    pub short_names: Vec<String>,
}

impl ResourceType {
    fn known(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status_subresource: bool,
        short: &[&str],
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status_subresource,
            typed: Typed::Json,
            short_names: short.iter().map(|s| (*s).to_string()).collect(),
        }
    }

    /// A resource the catalogue does not know: stored as JSON, no status subresource, kind
    /// guessed from the plural (a client writes `kind` itself anyway).
    pub fn unknown(group: &str, version: &str, plural: &str, namespaced: bool) -> Self {
        let mut kind = plural.strip_suffix('s').unwrap_or(plural).to_string();
        if let Some(first) = kind.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        Self::known(group, version, plural, &kind, namespaced, false, &[])
    }

    /// `group/version`, or `version` for the core group (an object's `apiVersion`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The store's key of this resource: `plural` for the core group, `plural.group` otherwise
    /// (Kubernetes' GroupResource spelling).
    pub fn id(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Calls `f` with [`ResourceType::id`] spelled without a heap allocation when it fits a
    /// small buffer: the store looks its tables up by it on every write.
    pub(crate) fn with_id<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        if self.group.is_empty() {
            return f(&self.plural);
        }
        let mut buf = [0u8; 96];
        let len = self.plural.len() + 1 + self.group.len();
        if len > buf.len() {
            return f(&self.id());
        }
        buf[..self.plural.len()].copy_from_slice(self.plural.as_bytes());
        buf[self.plural.len()] = b'.';
        buf[self.plural.len() + 1..len].copy_from_slice(self.group.as_bytes());
        match std::str::from_utf8(&buf[..len]) {
            Ok(id) => f(id),
            Err(_) => f(&self.id()),
        }
    }

    /// The key of an object: `namespace/name` when namespaced, `name` otherwise.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{ns}/{name}"),
            (true, None) => format!("default/{name}"),
            (false, _) => name.to_string(),
        }
    }
}

/// The resources kvrs's daemons and `kubectl` use, as a real cluster with KubeVirt installed
/// serves them (scopes and status subresources as in KubeVirt's CRDs: VMIs have none).
pub fn catalogue() -> &'static [Arc<ResourceType>] {
    static CATALOGUE: std::sync::OnceLock<Vec<Arc<ResourceType>>> = std::sync::OnceLock::new();
    CATALOGUE.get_or_init(|| {
        let k = ResourceType::known;
        let mut vm = k(
            "kubevirt.io",
            "v1",
            "virtualmachines",
            "VirtualMachine",
            true,
            true,
            &["vm", "vms"],
        );
        vm.typed = Typed::Vm;
        let mut vmi = k(
            "kubevirt.io",
            "v1",
            "virtualmachineinstances",
            "VirtualMachineInstance",
            true,
            false,
            &["vmi", "vmis"],
        );
        vmi.typed = Typed::Vmi;
        let it = "instancetype.kubevirt.io";
        [
            k("", "v1", "pods", "Pod", true, true, &["po"]),
            k("", "v1", "nodes", "Node", false, true, &["no"]),
            k("", "v1", "namespaces", "Namespace", false, true, &["ns"]),
            k("", "v1", "events", "Event", true, false, &["ev"]),
            k(
                "",
                "v1",
                "persistentvolumeclaims",
                "PersistentVolumeClaim",
                true,
                true,
                &["pvc"],
            ),
            k(
                "",
                "v1",
                "persistentvolumes",
                "PersistentVolume",
                false,
                true,
                &["pv"],
            ),
            k("", "v1", "configmaps", "ConfigMap", true, false, &["cm"]),
            k("", "v1", "secrets", "Secret", true, false, &[]),
            k(
                "",
                "v1",
                "serviceaccounts",
                "ServiceAccount",
                true,
                false,
                &["sa"],
            ),
            k("", "v1", "services", "Service", true, true, &["svc"]),
            k(
                "apps",
                "v1",
                "controllerrevisions",
                "ControllerRevision",
                true,
                false,
                &[],
            ),
            k(
                "events.k8s.io",
                "v1",
                "events",
                "Event",
                true,
                false,
                &["ev"],
            ),
            k(
                "coordination.k8s.io",
                "v1",
                "leases",
                "Lease",
                true,
                false,
                &[],
            ),
            vm,
            vmi,
            k(
                "kubevirt.io",
                "v1",
                "virtualmachineinstancemigrations",
                "VirtualMachineInstanceMigration",
                true,
                true,
                &["vmim", "vmims"],
            ),
            k(
                "kubevirt.io",
                "v1",
                "virtualmachineinstancereplicasets",
                "VirtualMachineInstanceReplicaSet",
                true,
                true,
                &["vmirs", "vmirss"],
            ),
            k(
                "kubevirt.io",
                "v1",
                "kubevirts",
                "KubeVirt",
                true,
                true,
                &["kv", "kvs"],
            ),
            k(
                it,
                "v1beta1",
                "virtualmachineinstancetypes",
                "VirtualMachineInstancetype",
                true,
                false,
                &["vminstancetype"],
            ),
            k(
                it,
                "v1beta1",
                "virtualmachineclusterinstancetypes",
                "VirtualMachineClusterInstancetype",
                false,
                false,
                &["vmclusterinstancetype"],
            ),
            k(
                it,
                "v1beta1",
                "virtualmachinepreferences",
                "VirtualMachinePreference",
                true,
                false,
                &["vmpref"],
            ),
            k(
                it,
                "v1beta1",
                "virtualmachineclusterpreferences",
                "VirtualMachineClusterPreference",
                false,
                false,
                &["vmcpref"],
            ),
        ]
        .into_iter()
        .map(Arc::new)
        .collect()
    })
}

/// The catalogue entry of `group`/`plural`.
pub fn lookup(group: &str, plural: &str) -> Option<Arc<ResourceType>> {
    catalogue()
        .iter()
        .find(|r| r.group == group && r.plural == plural)
        .cloned()
}

/// The first catalogue entry named `plural` in any group (core `events` before
/// `events.k8s.io`): how the simulator, which names resources by plural only, finds them.
pub fn by_plural(plural: &str) -> Option<Arc<ResourceType>> {
    catalogue().iter().find(|r| r.plural == plural).cloned()
}

/// Well-known resources, as the simulator names them.
pub mod res {
    /// VirtualMachines.
    pub const VMS: &str = "virtualmachines";
    /// VirtualMachineInstances.
    pub const VMIS: &str = "virtualmachineinstances";
    /// Pods.
    pub const PODS: &str = "pods";
    /// Nodes.
    pub const NODES: &str = "nodes";
    /// ControllerRevisions.
    pub const REVISIONS: &str = "controllerrevisions";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmis_have_no_status_subresource_vms_do() {
        assert!(
            !by_plural("virtualmachineinstances")
                .unwrap()
                .status_subresource
        );
        assert!(by_plural("virtualmachines").unwrap().status_subresource);
        assert!(!by_plural("nodes").unwrap().namespaced);
        assert_eq!(
            lookup("events.k8s.io", "events").unwrap().id(),
            "events.events.k8s.io"
        );
        assert_eq!(by_plural("events").unwrap().group, "");
    }

    #[test]
    fn unknown_resources_guess_a_kind() {
        let r = ResourceType::unknown("example.com", "v1", "widgets", true);
        assert_eq!(r.kind, "Widget");
        assert_eq!(r.api_version(), "example.com/v1");
    }
}
