//! The admission pipeline a new VMI goes through in the cluster, as one function.
//!
//! Namespace default (API server) -> defaulting (virt-api's mutating webhook) -> validation
//! (virt-api's validating webhook). Other kvrs commands (`convert`, `overhead`, `pod`) call
//! [`admit`] first, exactly as KubeVirt only ever converts an admitted VMI.

use crate::api::VirtualMachineInstance;
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
