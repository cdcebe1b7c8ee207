//! The cluster's live-migration configuration (`spec.configuration.migrations` of the KubeVirt
//! CR over KubeVirt v1.9.0's defaults), as the migration controller reads it.
//!
//! Kept here rather than in `kvrs_admission::ClusterConfig` because only the migration decision
//! reads it; the shell builds it from the KubeVirt CR it watches ([`MigrationConfig::from_kubevirt`]).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::policy::{Labels, MigrationPolicy, apply_policy, match_policy};

/// KubeVirt's default `parallelMigrationsPerCluster`.
pub const PARALLEL_MIGRATIONS_PER_CLUSTER: u32 = 5;
/// KubeVirt's default `parallelOutboundMigrationsPerNode`.
pub const PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE: u32 = 2;

/// The resolved migration configuration: every field KubeVirt defaults, overlaid with what the
/// CR sets.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationConfig {
    /// The configuration as the VMI's `status.migrationState.migrationConfiguration` carries it
    /// (KubeVirt's `ToVMIMConfigurationOptions` of the cluster configuration).
    pub options: Map<String, Value>,
    /// The cluster's MigrationPolicies ([`MigrationConfig::with_policies`]; none by default).
    pub policies: Vec<MigrationPolicy>,
    /// The labels of each namespace (by name), which the policies' namespace selectors read.
    pub namespace_labels: BTreeMap<String, Labels>,
}

impl Default for MigrationConfig {
    fn default() -> Self {
        Self::from_migrations(None)
    }
}

impl MigrationConfig {
    /// The configuration of a KubeVirt CR (`None`: no CR, KubeVirt's defaults).
    pub fn from_kubevirt(cr: Option<&Value>) -> Self {
        Self::from_migrations(cr.and_then(|cr| cr.pointer("/spec/configuration/migrations")))
    }

    /// The configuration from a `spec.configuration.migrations` object: set fields replace the
    /// defaults one by one, as KubeVirt unmarshals the CR's configuration over its defaults.
    pub fn from_migrations(migrations: Option<&Value>) -> Self {
        let mut options = match json!({
            "parallelMigrationsPerCluster": PARALLEL_MIGRATIONS_PER_CLUSTER,
            "parallelOutboundMigrationsPerNode": PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE,
            "nodeDrainTaintKey": "kubevirt.io/drain",
            // KubeVirt's default is `resource.MustParse("0Mi")`, which Go writes as "0".
            "bandwidthPerMigration": "0",
            "progressTimeout": 150,
            "completionTimeoutPerGiB": 150,
            "maxDowntimeMs": 900,
            "utilityVolumesTimeout": 150,
            "unsafeMigrationOverride": false,
            "allowAutoConverge": false,
            "allowPostCopy": false,
        }) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if let Some(Value::Object(set)) = migrations {
            for (k, v) in set {
                if !v.is_null() {
                    options.insert(k.clone(), v.clone());
                }
            }
        }
        canonicalize_bandwidth(&mut options);
        // KubeVirt: allowWorkloadDisruption follows allowPostCopy unless set.
        if !options.contains_key("allowWorkloadDisruption") {
            let post_copy = options
                .get("allowPostCopy")
                .cloned()
                .unwrap_or(json!(false));
            options.insert("allowWorkloadDisruption".into(), post_copy);
        }
        Self {
            options,
            policies: Vec::new(),
            namespace_labels: BTreeMap::new(),
        }
    }

    /// This configuration with the cluster's MigrationPolicies and the labels of its
    /// namespaces: [`MigrationConfig::for_vmi`] then applies the policy matching a VMI.
    pub fn with_policies(
        mut self,
        policies: Vec<MigrationPolicy>,
        namespace_labels: BTreeMap<String, Labels>,
    ) -> Self {
        self.policies = policies;
        self.namespace_labels = namespace_labels;
        self
    }

    /// The configuration a VMI's migration runs with (KubeVirt's `resolveMigrationConfig`):
    /// the cluster's, overridden by the MigrationPolicy selecting the VMI, and that policy's
    /// name. `labels` and `namespace` are the VMI's labels and namespace.
    pub fn for_vmi(
        &self,
        labels: Option<&Labels>,
        namespace: &str,
    ) -> (Map<String, Value>, Option<String>) {
        match match_policy(&self.policies, labels, self.namespace_labels.get(namespace)) {
            Some(p) => (apply_policy(&self.options, &p.spec), Some(p.name.clone())),
            None => (self.options.clone(), None),
        }
    }

    fn limit(&self, key: &str, default: u32) -> usize {
        let n = self
            .options
            .get(key)
            .and_then(Value::as_u64)
            .unwrap_or(u64::from(default));
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    /// How many migrations may run in the cluster at once.
    pub fn parallel_per_cluster(&self) -> usize {
        self.limit(
            "parallelMigrationsPerCluster",
            PARALLEL_MIGRATIONS_PER_CLUSTER,
        )
    }

    /// How many migrations may leave one node at once.
    pub fn parallel_outbound_per_node(&self) -> usize {
        self.limit(
            "parallelOutboundMigrationsPerNode",
            PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE,
        )
    }

    /// Whether the target pod gets the source's SELinux level (unset means yes).
    pub fn match_selinux_level(&self) -> bool {
        self.options
            .get("matchSELinuxLevelOnMigration")
            .and_then(Value::as_bool)
            .unwrap_or(true)
    }
}

/// `bandwidthPerMigration` as KubeVirt writes it into the VMI's migration configuration: Go holds
/// it as a `resource.Quantity` and writes it canonically (`1024Mi` as `1Gi`, `0Mi` as `0`), and
/// virt-handler's comparisons of the stored state see that text. A value that is no quantity is
/// left as it is (the CR's validation refuses it).
pub(super) fn canonicalize_bandwidth(options: &mut Map<String, Value>) {
    if let Some(Value::String(q)) = options.get("bandwidthPerMigration")
        && let Ok(c) = kvrs_api::Quantity::new(q.as_str()).canonical()
    {
        options.insert("bandwidthPerMigration".into(), json!(c.to_string()));
    }
}
