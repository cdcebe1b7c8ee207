//! The migration controller's MigrationPolicies and namespace labels, from the caches: what
//! `kvrs_decide::migration::MigrationConfig::with_policies` takes.

use std::collections::BTreeMap;

use kube::api::{ApiResource, GroupVersionKind};
use kvrs_decide::migration::policy::{Labels, MigrationPolicy};
use tracing::warn;

use crate::caches::Caches;

/// The `migrations.kubevirt.io/v1alpha1` MigrationPolicy resource (cluster-scoped).
pub fn policy_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("migrations.kubevirt.io", "v1alpha1", "MigrationPolicy");
    ApiResource::from_gvk_with_plural(&gvk, "migrationpolicies")
}

impl Caches {
    /// The cached MigrationPolicies that can be read; one that cannot is left out with a
    /// warning naming it and why (the CRD's schema makes that rare).
    pub fn migration_policies(&self) -> Vec<MigrationPolicy> {
        let Some(store) = &self.migration_policies else {
            return Vec::new();
        };
        store
            .state()
            .iter()
            .filter_map(|p| {
                let v = serde_json::to_value(p.as_ref()).ok()?;
                MigrationPolicy::from_value(&v)
                    .map_err(|e| warn!(reason = e.label(), "{e}: ignored"))
                    .ok()
            })
            .collect()
    }

    /// The labels of every cached namespace, by name.
    pub fn namespace_labels(&self) -> BTreeMap<String, Labels> {
        self.namespaces
            .state()
            .iter()
            .filter_map(|n| {
                let name = n.metadata.name.clone()?;
                Some((name, n.metadata.labels.clone().unwrap_or_default()))
            })
            .collect()
    }
}
