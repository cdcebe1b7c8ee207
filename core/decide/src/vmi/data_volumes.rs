//! The VMI's DataVolumes and claims before its launcher pod exists, as KubeVirt v1.9.0's VMI
//! controller reads them (`areDataVolumesReady`, `aggregateDataVolumesConditions` and the
//! storage helpers it calls): a pod is rendered only once every PVC and DataVolume volume is
//! populated, or a temporary pod when a DataVolume waits for its first consumer (a
//! WaitForFirstConsumer storage class binds the claim only when a pod using it is scheduled).
//!
//! DataVolumes are CDI objects without a Rust type here: they are read as JSON, their
//! `status.phase` and `status.conditions` only.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};

use super::conditions::update_cond;
use super::pod::EPHEMERAL_PROVISIONING_ANNOTATION;
use crate::api::{VirtualMachineInstance, Volume};
use crate::meta;
use crate::small_json::ScanPointer;

/// CDI's DataVolume phases the VMI controller tells apart.
pub(crate) mod dv_phase {
    /// Imported, cloned or uploaded: the claim holds the disk.
    pub(crate) const SUCCEEDED: &str = "Succeeded";
    /// The population failed.
    pub(crate) const FAILED: &str = "Failed";
    /// The claim's storage class binds only for a scheduled consumer.
    pub(crate) const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
    /// A populator fills the claim once it has a consumer.
    pub(crate) const PENDING_POPULATION: &str = "PendingPopulation";
}

/// Why the volumes' readiness could not be told.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum VolumeError {
    /// A volume's claim is not in the cache (yet): KubeVirt waits for it without a retry.
    #[error("PVC {namespace}/{claim} does not exist, waiting for it to appear")]
    PvcNotFound { namespace: String, claim: String },
    /// A claim a DataVolume controls whose DataVolume is not cached.
    #[error("unable to find datavolume {namespace}/{name}")]
    DataVolumeNotFound { namespace: String, name: String },
}

/// Readiness of the VMI's non-hotplugged PVC and DataVolume volumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Readiness {
    /// Every volume is populated or waits for its first consumer.
    pub ready: bool,
    /// Some DataVolume waits for its first consumer: the pod to create is the temporary one.
    pub wait_for_first_consumer: bool,
}

fn phase(dv: &Value) -> &str {
    dv.at("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The claim a PVC or DataVolume volume stands on (a DataVolume's claim has its name).
fn claim_name(volume: &Volume) -> Option<&str> {
    volume
        .persistent_volume_claim
        .as_ref()
        .map(|p| p.claim_name.as_str())
        .or(volume.data_volume.as_ref().map(|d| d.name.as_str()))
}

/// The DataVolume controlling `pvc` (its controller owner reference of kind DataVolume).
fn owner_data_volume(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .filter(|o| o.kind == "DataVolume")
        .map(|o| o.name.as_str())
}

pub(crate) fn find_pvc<'a>(
    pvcs: &'a [PersistentVolumeClaim],
    ns: &str,
    name: &str,
) -> Option<&'a PersistentVolumeClaim> {
    pvcs.iter().find(|p| {
        p.metadata.name.as_deref() == Some(name)
            && p.metadata.namespace.as_deref().is_none_or(|n| n == ns)
    })
}

/// The cached DataVolumes the VMI's volumes stand on, in volume order (KubeVirt's
/// `ListDataVolumesFromVolumes`): a DataVolume volume's, and the one controlling a PVC
/// volume's claim. Volumes whose DataVolume is not cached are skipped.
pub(crate) fn of_volumes<'a>(
    vmi: &VirtualMachineInstance,
    data_volumes: &'a [Value],
    pvcs: &[PersistentVolumeClaim],
) -> Vec<&'a Value> {
    let ns = meta::namespace(&vmi.metadata);
    vmi.spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            let name = match (&v.persistent_volume_claim, &v.data_volume) {
                (Some(p), _) => owner_data_volume(find_pvc(pvcs, ns, &p.claim_name)?)?,
                (None, Some(d)) => d.name.as_str(),
                (None, None) => return None,
            };
            meta::find_json(data_volumes, ns, name)
        })
        .collect()
}

/// Whether one of `dvs` failed.
pub(crate) fn any_failed(dvs: &[&Value]) -> bool {
    dvs.iter().any(|d| phase(d) == dv_phase::FAILED)
}

/// Whether one of `dvs` waits for its first consumer.
pub(crate) fn any_wait_for_first_consumer(dvs: &[&Value]) -> bool {
    dvs.iter()
        .any(|d| phase(d) == dv_phase::WAIT_FOR_FIRST_CONSUMER)
}

/// KubeVirt's `areDataVolumesReady`: for each non-hotplugged PVC or DataVolume volume, its claim
/// must be cached; a claim a DataVolume controls is ready when the DataVolume Succeeded or is
/// PendingPopulation, and waits for its first consumer when the DataVolume does; any other
/// claim is ready as it is (someone else populated it). The DataVolume is looked up among
/// `listed` first, then in the whole cache.
pub(crate) fn readiness(
    vmi: &VirtualMachineInstance,
    listed: &[&Value],
    data_volumes: &[Value],
    pvcs: &[PersistentVolumeClaim],
) -> Result<Readiness, VolumeError> {
    let ns = meta::namespace(&vmi.metadata);
    let mut out = Readiness {
        ready: true,
        wait_for_first_consumer: false,
    };
    for v in vmi.spec.volumes.iter().flatten() {
        let checked = match (&v.data_volume, &v.persistent_volume_claim) {
            (Some(d), _) => d.hotpluggable != Some(true),
            (None, Some(p)) => p.hotpluggable != Some(true),
            (None, None) => false,
        };
        let Some(claim) = claim_name(v).filter(|_| checked) else {
            continue;
        };
        let Some(pvc) = find_pvc(pvcs, ns, claim) else {
            return Err(VolumeError::PvcNotFound {
                namespace: ns.into(),
                claim: claim.into(),
            });
        };
        let (ready, wffc) = claim_readiness(pvc, ns, listed, data_volumes)?;
        out.wait_for_first_consumer |= wffc;
        out.ready = out.ready && (ready || wffc);
    }
    Ok(out)
}

/// Whether one claim is populated (KubeVirt's `IsSucceededOrPendingPopulation`) and whether it
/// waits for its first consumer: a claim no DataVolume controls is taken as populated (someone
/// else filled it); one a DataVolume controls follows the DataVolume, looked up among `listed`
/// first, then in the whole cache.
pub(crate) fn claim_readiness(
    pvc: &PersistentVolumeClaim,
    ns: &str,
    listed: &[&Value],
    data_volumes: &[Value],
) -> Result<(bool, bool), VolumeError> {
    let Some(dv_name) = owner_data_volume(pvc) else {
        return Ok((true, false));
    };
    let dv = listed
        .iter()
        .copied()
        .find(|d| {
            d.at("/metadata/name").and_then(Value::as_str) == Some(dv_name)
                && meta::json_namespace(d) == ns
        })
        .or_else(|| meta::find_json(data_volumes, ns, dv_name))
        .ok_or_else(|| VolumeError::DataVolumeNotFound {
            namespace: ns.into(),
            name: dv_name.into(),
        })?;
    let p = phase(dv);
    let ready = p == dv_phase::SUCCEEDED || p == dv_phase::PENDING_POPULATION;
    Ok((ready, !ready && p == dv_phase::WAIT_FOR_FIRST_CONSUMER))
}

/// KubeVirt's `aggregateDataVolumesConditions`: with any DataVolume, the VMI's
/// `DataVolumesReady` condition is True only when each one's `Ready` condition is; False when
/// one's is False, Unknown otherwise. It carries no timestamps (KubeVirt sets none).
pub(super) fn aggregate_condition(c: &mut Value, dvs: &[&Value]) {
    if dvs.is_empty() {
        return;
    }
    let mut status = "True";
    for dv in dvs {
        let ready = dv
            .at("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .and_then(|c| c["status"].as_str())
            .unwrap_or("Unknown");
        if ready != "True" {
            if ready == "False" {
                status = "False";
            } else if status == "True" {
                status = ready;
            }
        }
    }
    let (reason, message) = if status == "True" {
        ("AllDVsReady", "All of the VMI's DVs are bound and ready")
    } else {
        ("NotAllDVsReady", "Not all of the VMI's DVs are ready")
    };
    update_cond(
        c,
        json!({"type": "DataVolumesReady", "status": status, "reason": reason,
               "message": message, "lastProbeTime": null, "lastTransitionTime": null}),
    );
}

/// The temporary pod KubeVirt creates for a WaitForFirstConsumer DataVolume
/// (`RenderLaunchManifestNoVm`): the launcher pod, marked ephemeral, whose compute container
/// only echoes and exits once its claims are bound — scheduling it is what binds them.
pub(super) fn temporary_pod(mut pod: Value) -> Value {
    if !pod["metadata"]["annotations"].is_object() {
        pod["metadata"]["annotations"] = json!({});
    }
    pod["metadata"]["annotations"][EPHEMERAL_PROVISIONING_ANNOTATION] = json!("true");
    if let Some(compute) = pod
        .at_mut("/spec/containers")
        .and_then(Value::as_array_mut)
        .and_then(|cs| cs.iter_mut().find(|c| c["name"] == "compute"))
    {
        compute["command"] = json!(["/bin/bash", "-c", "echo", "bound PVCs"]);
    }
    pod
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(volumes: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"domain": {"devices": {}}, "volumes": volumes}
        }))
        .unwrap()
    }

    fn pvc(name: &str, dv_owner: Option<&str>) -> PersistentVolumeClaim {
        let owners = dv_owner.map(|o| {
            json!([{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                    "name": o, "uid": "dv-uid", "controller": true}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": owners},
            "status": {"phase": "Bound"}
        }))
        .unwrap()
    }

    fn dv(name: &str, phase: &str, ready: Option<&str>) -> Value {
        let conds: Vec<Value> = ready
            .map(|s| json!({"type": "Ready", "status": s}))
            .into_iter()
            .collect();
        json!({"metadata": {"name": name, "namespace": "ns"},
               "status": {"phase": phase, "conditions": conds}})
    }

    #[test]
    fn a_claim_without_a_data_volume_is_ready_as_it_is() {
        let v = vmi(json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]));
        let r = readiness(&v, &[], &[], &[pvc("c", None)]).unwrap();
        assert!(r.ready && !r.wait_for_first_consumer);
    }

    #[test]
    fn a_missing_claim_is_waited_for() {
        let v = vmi(json!([{"name": "d", "dataVolume": {"name": "dv"}}]));
        let err = readiness(&v, &[], &[], &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "PVC ns/dv does not exist, waiting for it to appear"
        );
    }

    #[test]
    fn a_data_volume_claim_follows_its_data_volume() {
        let v = vmi(json!([{"name": "d", "dataVolume": {"name": "dv"}}]));
        let claims = [pvc("dv", Some("dv"))];
        for (phase, ready, wffc) in [
            ("ImportInProgress", false, false),
            ("Succeeded", true, false),
            ("PendingPopulation", true, false),
            ("WaitForFirstConsumer", true, true),
            ("Failed", false, false),
        ] {
            let dvs = [dv("dv", phase, None)];
            let listed = of_volumes(&v, &dvs, &claims);
            assert_eq!(listed.len(), 1);
            let r = readiness(&v, &listed, &dvs, &claims).unwrap();
            assert_eq!(
                (r.ready, r.wait_for_first_consumer),
                (ready, wffc),
                "{phase}"
            );
        }
        // The claim names a DataVolume the cache does not hold.
        let err = readiness(&v, &[], &[], &claims).unwrap_err();
        assert_eq!(err.to_string(), "unable to find datavolume ns/dv");
    }

    #[test]
    fn hotplugged_volumes_are_not_waited_for() {
        let v = vmi(json!([{"name": "d", "dataVolume": {"name": "dv", "hotpluggable": true}}]));
        assert!(readiness(&v, &[], &[], &[]).unwrap().ready);
    }

    #[test]
    fn the_condition_aggregates_the_ready_conditions() {
        let mut c = json!({"status": {}});
        let (a, b, u) = (
            dv("a", "Succeeded", Some("True")),
            dv("b", "ImportInProgress", Some("False")),
            dv("u", "Pending", None),
        );
        aggregate_condition(&mut c, &[&a]);
        assert_eq!(c["status"]["conditions"][0]["status"], "True");
        assert_eq!(c["status"]["conditions"][0]["reason"], "AllDVsReady");
        aggregate_condition(&mut c, &[&a, &u]);
        assert_eq!(c["status"]["conditions"][0]["status"], "Unknown");
        aggregate_condition(&mut c, &[&u, &b]);
        assert_eq!(c["status"]["conditions"][0]["status"], "False");
        assert_eq!(
            c["status"]["conditions"][0]["message"],
            "Not all of the VMI's DVs are ready"
        );
        let mut none = json!({"status": {}});
        aggregate_condition(&mut none, &[]);
        assert!(none["status"].get("conditions").is_none());
    }
}
