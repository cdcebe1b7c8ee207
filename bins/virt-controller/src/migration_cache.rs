//! The migration controller's side of the caches: the migrations each pod and VMI event
//! concerns (KubeVirt's `resolveControllerRef` and `listMigrationsMatchingVMI`), and the
//! cluster-wide stores [`kvrs_runtime::world::migration_world`] reads.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector;
use kvrs_api::VirtualMachineInstance;
use kvrs_runtime::world::{MigrationCache, migration_of_pod};
use serde_json::Value;

use crate::caches::{Caches, Shared, key_of, split};

/// The migrations a launcher pod belongs to: the one its job annotation names, if that
/// migration's UID is the pod's job label (KubeVirt's `resolveControllerRef`).
pub(crate) fn pod_migrations(pod: &Pod, shared: &Shared) -> Vec<String> {
    let (Some((name, uid)), Some(store)) = (migration_of_pod(pod), shared.migrations.get()) else {
        return Vec::new();
    };
    let ns = pod.namespace().unwrap_or_default();
    let found = store.get(&reflector::ObjectRef::new_with(name, migration_resource()).within(&ns));
    found
        .filter(|m| m.metadata.uid.as_deref() == Some(uid))
        .map(|_| vec![format!("{ns}/{name}")])
        .unwrap_or_default()
}

/// The migrations whose `spec.vmiName` is `vmi` (KubeVirt's `listMigrationsMatchingVMI`).
pub(crate) fn vmi_migrations(vmi: &VirtualMachineInstance, shared: &Shared) -> Vec<String> {
    let Some(store) = shared.migrations.get() else {
        return Vec::new();
    };
    let ns = vmi.namespace();
    let name = vmi.metadata.name.as_deref();
    store
        .state()
        .iter()
        .filter(|m| m.metadata.namespace == ns)
        .filter(|m| m.data.pointer("/spec/vmiName").and_then(Value::as_str) == name)
        .map(|m| key_of(m.as_ref()))
        .collect()
}

/// The migration controller reads the same stores cluster-wide.
impl MigrationCache for Caches {
    type Obj<'a, T: 'a> = Arc<T>;

    fn migration(&self, key: &str) -> Option<Value> {
        let (ns, name) = split(key);
        let found = self
            .migrations
            .get(&reflector::ObjectRef::new_with(name, migration_resource()).within(ns))?;
        migration_json(&found)
    }

    fn all_migrations(&self) -> Vec<Value> {
        let all = self.migrations.state();
        all.iter().filter_map(|m| migration_json(m)).collect()
    }

    fn all_vmis(&self) -> Vec<Arc<VirtualMachineInstance>> {
        self.vmis.state()
    }

    fn all_launcher_pods(&self) -> Vec<Arc<Pod>> {
        self.pods.state()
    }

    fn nodes(&self) -> Vec<Node> {
        self.nodes
            .state()
            .iter()
            .map(|n| n.as_ref().clone())
            .collect()
    }

    fn kubevirts(&self) -> Vec<Value> {
        let Some(store) = &self.kubevirts else {
            return Vec::new();
        };
        store
            .state()
            .iter()
            .filter_map(|cr| serde_json::to_value(cr.as_ref()).ok())
            .collect()
    }
}

/// The `kubevirt.io/v1` VirtualMachineInstanceMigration resource (kvrs-api has no type for it).
pub fn migration_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstanceMigration");
    ApiResource::from_gvk_with_plural(&gvk, "virtualmachineinstancemigrations")
}

/// A cached migration as the decisions read it, with its `apiVersion` and `kind` (a list's
/// items may come without them).
pub(crate) fn migration_json(m: &DynamicObject) -> Option<Value> {
    let mut v = serde_json::to_value(m).ok()?;
    v["apiVersion"] = Value::String("kubevirt.io/v1".into());
    v["kind"] = Value::String("VirtualMachineInstanceMigration".into());
    Some(v)
}
