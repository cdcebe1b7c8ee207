//! The admission pipeline a new VMI goes through in the cluster, as one function.
//!
//! Namespace default (API server) -> defaulting (virt-api's mutating webhook) -> validation
//! (virt-api's validating webhook). Other kvrs commands (`convert`, `overhead`, `pod`) call
//! [`admit`] first, exactly as KubeVirt only ever converts an admitted VMI.

use kvrs_api::time::Now;

use crate::api::{VirtualMachineInstance, VirtualMachineInstancePhaseTransitionTimestamp};
use crate::config::ClusterConfig;
use crate::defaults::{apply_defaults, default_namespace};
use crate::validate::{ValidationError, validate};

/// Why a VMI was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// The validating webhook would reject the defaulted VMI.
    #[error("rejected by validating webhook: {0}")]
    Rejected(#[from] ValidationError),
}

impl AdmissionError {
    /// The causes, each with its field path.
    pub fn causes(&self) -> &[crate::validate::Cause] {
        match self {
            AdmissionError::Rejected(e) => &e.causes,
        }
    }
}

/// Admits a new VMI the way the cluster does on CREATE and returns it as stored.
pub fn admit(
    mut vmi: VirtualMachineInstance,
    config: &ClusterConfig,
) -> Result<VirtualMachineInstance, AdmissionError> {
    default_namespace(&mut vmi);
    apply_defaults(&mut vmi, config);
    validate(&vmi, config)?;
    Ok(vmi)
}

/// Admits a VMI being created at `now`, as virt-api's webhook stores it: [`admit`], then the
/// `Pending` entry of `status.phaseTransitionTimestamps` the mutating webhook appends with its
/// own clock reading.
///
/// [`admit`] leaves that entry out because `kvrs convert`, `pod` and `overhead` answer the same
/// for the same input at any time; whatever stands in for the webhook on a create (the VM
/// controller without virt-api, `kvrs run`'s API server) calls this one, so the stored VMI carries
/// the entry KubeVirt's VMI controller and `kubectl get -o yaml` readers expect.
pub fn admit_created(
    vmi: VirtualMachineInstance,
    config: &ClusterConfig,
    now: Now,
) -> Result<VirtualMachineInstance, AdmissionError> {
    let vmi = default_created(vmi, config, now);
    validate(&vmi, config)?;
    Ok(vmi)
}

/// What virt-api's mutating webhook makes of a VMI created at `now`, without the validation that
/// follows it (the validating webhook is a separate call in the cluster): the namespace default,
/// every default of [`apply_defaults`], and the `Pending` entry of
/// `status.phaseTransitionTimestamps` stamped with `now`.
pub fn default_created(
    mut vmi: VirtualMachineInstance,
    config: &ClusterConfig,
    now: Now,
) -> VirtualMachineInstance {
    default_namespace(&mut vmi);
    apply_defaults(&mut vmi, config);
    let status = vmi.status.get_or_insert_with(Default::default);
    status
        .phase_transition_timestamps
        .get_or_insert_with(Vec::new)
        .push(VirtualMachineInstancePhaseTransitionTimestamp {
            phase: status.phase.clone(),
            phase_transition_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                now.timestamp(),
            )),
            ..Default::default()
        });
    vmi
}
