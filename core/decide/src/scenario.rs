//! Scenario files (the format of `../shared/oracle-vm/*.json`) parsed into decision inputs.
//!
//! A scenario is a snapshot of the world one reconcile sees: the VM and/or VMI of the key, the
//! other objects in the caches, the clock and the seed of the start-failure jitter. Objects
//! without a namespace live in `default`. Only pods labelled `kubevirt.io` are in the VMI
//! controller's pod cache, as in production.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde::Deserialize;
use serde_json::Value;

use super::meta;
use super::vm::{PendingExpectations, VmWorld};
use super::vmi::VmiWorld;
use crate::ClusterConfig;
use crate::api::{VirtualMachine, VirtualMachineInstance};

/// Why a scenario could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The document does not match the scenario format.
    #[error("scenario: {path}: {reason}")]
    Shape {
        /// Path of the offending field.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A required object is missing.
    #[error("scenario: {0} is required")]
    Missing(&'static str),
    /// `now` is not an RFC 3339 timestamp.
    #[error("scenario: now: not an RFC 3339 timestamp: {0}")]
    BadNow(String),
}

/// One reconcile's world, as a scenario file describes it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    /// What the case is about.
    #[serde(default)]
    pub description: String,
    /// RFC 3339 virtual clock.
    #[serde(default)]
    pub now: Option<String>,
    /// Seed of the jitter draw (KubeVirt: Go's math/rand).
    #[serde(default)]
    pub seed: Option<i64>,
    /// Queue key, `namespace/name`.
    #[serde(default)]
    pub key: Option<String>,
    /// The VM of a VM reconcile.
    #[serde(default)]
    pub vm: Option<VirtualMachine>,
    /// The VMI of a VMI reconcile (or of the VM's name).
    #[serde(default)]
    pub vmi: Option<VirtualMachineInstance>,
    /// Other VMs in the cache.
    #[serde(default)]
    pub vms: Vec<VirtualMachine>,
    /// Other VMIs in the cache.
    #[serde(default)]
    pub vmis: Vec<Value>,
    /// Pods (only those labelled `kubevirt.io` are visible to the VMI controller).
    #[serde(default)]
    pub pods: Vec<Pod>,
    /// ControllerRevisions.
    #[serde(default)]
    pub controller_revisions: Vec<crate::vm::Revision>,
    /// DataVolumes, as JSON (CDI's DataVolume has no Rust type here).
    #[serde(default)]
    pub data_volumes: Vec<Value>,
    /// PersistentVolumeClaims.
    #[serde(default)]
    pub pvcs: Vec<PersistentVolumeClaim>,
    /// VirtualMachineInstanceMigrations, as JSON (no Rust type here).
    #[serde(default)]
    pub migrations: Vec<Value>,
    /// StorageClasses, as JSON.
    #[serde(default)]
    pub storage_classes: Vec<Value>,
    /// Nodes.
    #[serde(default)]
    pub nodes: Vec<Value>,
    /// Comma-separated feature gates.
    #[serde(default)]
    pub feature_gates: Option<Value>,
    /// Outstanding expectations of the key (kvrs extension; absent in the oracles = satisfied).
    #[serde(default)]
    pub expectations: Option<ScenarioExpectations>,
    /// Jitter draw in `[0, 1)` (kvrs extension; default 0.5).
    #[serde(default)]
    pub jitter: Option<f64>,
}

/// Outstanding expectations as a scenario states them.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct ScenarioExpectations {
    /// Creations not yet seen.
    #[serde(default)]
    pub creations: u32,
    /// Deletions not yet seen.
    #[serde(default)]
    pub deletions: u32,
}

/// The default clock of scenarios.
pub const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

impl Scenario {
    /// Parses a scenario from JSON text (YAML callers convert to a JSON value first).
    pub fn from_value(v: Value) -> Result<Self, ScenarioError> {
        if !v.is_object() {
            return Err(ScenarioError::Shape {
                path: "$".into(),
                reason: "a scenario is a map with at least `vm` or `vmi`".into(),
            });
        }
        serde_path_to_error_lite(v)
    }

    /// The clock reading, seconds since the epoch.
    pub fn now_unix(&self) -> Result<i64, ScenarioError> {
        let s = self.now.as_deref().unwrap_or(DEFAULT_NOW);
        super::parse_rfc3339(s).ok_or_else(|| ScenarioError::BadNow(s.into()))
    }

    /// The cluster configuration (defaults plus the scenario's feature gates).
    pub fn config(&self) -> ClusterConfig {
        match &self.feature_gates {
            Some(Value::String(s)) => ClusterConfig::with_feature_gates(s),
            Some(Value::Array(a)) => ClusterConfig::with_feature_gates(
                &a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => ClusterConfig::default(),
        }
    }

    /// The queue key: given, or the namespace/name of the VM (VM reconciles) or VMI.
    pub fn key(&self) -> String {
        if let Some(k) = &self.key {
            return k.clone();
        }
        if let Some(vm) = &self.vm {
            return meta::key(&vm.metadata);
        }
        self.vmi
            .as_ref()
            .map(|v| meta::key(&v.metadata))
            .unwrap_or_default()
    }

    fn expectations(&self) -> PendingExpectations {
        self.expectations
            .map(|e| PendingExpectations {
                creations: e.creations,
                deletions: e.deletions,
            })
            .unwrap_or_default()
    }

    /// The VM decision's inputs. The VMI of the VM's name is the scenario's `vmi` when it has that
    /// name, else the one of that name in `vmis`.
    pub fn vm_world<'a>(
        &'a self,
        config: &'a ClusterConfig,
        extra_vmi: &'a Option<VirtualMachineInstance>,
    ) -> Result<VmWorld<'a>, ScenarioError> {
        let vm = self.vm.as_ref().ok_or(ScenarioError::Missing("vm"))?;
        let same_name = |v: &&VirtualMachineInstance| {
            meta::name(&v.metadata) == meta::name(&vm.metadata)
                && meta::namespace(&v.metadata) == meta::namespace(&vm.metadata)
        };
        let vmi = self
            .vmi
            .as_ref()
            .filter(same_name)
            .or(extra_vmi.as_ref().filter(same_name));
        Ok(VmWorld {
            vm,
            vmi,
            revisions: &self.controller_revisions,
            instancetype_objects: &[],
            data_volumes: &self.data_volumes,
            pvcs: &self.pvcs,
            expectations: self.expectations(),
            now: crate::Now::from_unix(self.now_unix()?),
            jitter: self.jitter.unwrap_or(0.5),
            config,
        })
    }

    /// A VMI of the VM's name from `vmis`, parsed (for [`Scenario::vm_world`]).
    pub fn vmi_from_list(&self) -> Option<VirtualMachineInstance> {
        let vm = self.vm.as_ref()?;
        self.vmis
            .iter()
            .filter_map(|v| serde_json::from_value::<VirtualMachineInstance>(v.clone()).ok())
            .find(|v| {
                meta::name(&v.metadata) == meta::name(&vm.metadata)
                    && meta::namespace(&v.metadata) == meta::namespace(&vm.metadata)
            })
    }

    /// The VMI decision's inputs.
    pub fn vmi_world<'a>(
        &'a self,
        config: &'a ClusterConfig,
    ) -> Result<VmiWorld<'a>, ScenarioError> {
        let vmi = self.vmi.as_ref().ok_or(ScenarioError::Missing("vmi"))?;
        Ok(VmiWorld {
            vmi,
            pods: self
                .pods
                .iter()
                .filter(|p| meta::label(&p.metadata, "kubevirt.io").is_some())
                .collect(),
            vms: &self.vms,
            vm: self.vm.as_ref(),
            migrations: &self.migrations,
            pvcs: &self.pvcs,
            data_volumes: &self.data_volumes,
            storage_classes: &self.storage_classes,
            storage_profiles: &[],
            expectations: self.expectations(),
            now: crate::Now::from_unix(self.now_unix()?),
            config,
        })
    }
}

fn serde_path_to_error_lite(v: Value) -> Result<Scenario, ScenarioError> {
    // Check the typed objects one by one so the error names the one that failed.
    if let Value::Object(m) = &v {
        for k in ["vm", "vmi"] {
            if let Some(obj) = m.get(k).filter(|o| !o.is_null()) {
                let r = if k == "vm" {
                    VirtualMachine::deserialize(obj).map(|_| ())
                } else {
                    VirtualMachineInstance::deserialize(obj).map(|_| ())
                };
                r.map_err(|e| shape(k.into(), e))?;
            }
        }
        check_list::<VirtualMachine>(m, "vms")?;
        check_list::<Pod>(m, "pods")?;
        check_list::<ControllerRevision>(m, "controllerRevisions")?;
        check_list::<PersistentVolumeClaim>(m, "pvcs")?;
    }
    serde_json::from_value(v).map_err(|e| shape("$".into(), e))
}

/// Parses each entry of the list `k` (when it is one) as a `T`, naming the first that fails.
fn check_list<T: for<'de> Deserialize<'de>>(
    m: &serde_json::Map<String, Value>,
    k: &str,
) -> Result<(), ScenarioError> {
    let Some(items) = m.get(k).and_then(Value::as_array) else {
        return Ok(());
    };
    for (i, obj) in items.iter().enumerate() {
        T::deserialize(obj).map_err(|e| shape(format!("{k}[{i}]"), e))?;
    }
    Ok(())
}

fn shape(path: String, e: serde_json::Error) -> ScenarioError {
    ScenarioError::Shape {
        path,
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_cache_object_that_does_not_parse_is_named() {
        let v = json!({"vmi": {"metadata": {"name": "a"}, "spec": {"domain": {"devices": {}}}},
                       "pods": [{"metadata": {"name": "ok"}}, {"metadata": {"labels": 5}}]});
        match Scenario::from_value(v) {
            Err(ScenarioError::Shape { path, .. }) => assert_eq!(path, "pods[1]"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_kubevirt_pods_are_in_the_vmi_world() {
        let v = json!({"vmi": {"metadata": {"name": "a"}, "spec": {"domain": {"devices": {}}}},
                       "pods": [{"metadata": {"name": "p1", "labels": {"kubevirt.io": "virt-launcher"}}},
                                {"metadata": {"name": "p2"}}]});
        let s = Scenario::from_value(v).unwrap();
        let config = s.config();
        let w = s.vmi_world(&config).unwrap();
        let names: Vec<_> = w.pods.iter().map(|p| meta::name(&p.metadata)).collect();
        assert_eq!(names, ["p1"]);
    }
}
