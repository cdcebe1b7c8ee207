//! # kvrs-admission
//!
//! What happens to a VirtualMachine or VirtualMachineInstance before any controller sees it, as
//! KubeVirt v1.9.0 does it: the cluster configuration that shapes it ([`config`]), virt-api's
//! mutating webhook ([`defaults`]) and validating webhook ([`validate`]), the VMI a VM's template
//! becomes ([`template`]), and the whole pipeline as one function ([`admit`]).
//!
//! Pure functions on plain data: the same calls serve the CLI, the VM controller (which admits the
//! VMI it is about to create) and users' own tools.

mod admit;
pub mod config;
pub mod defaults;
pub mod feature_gates;
pub mod kubevirt_cr;
pub mod live_config;
pub mod template;
pub mod validate;

pub use admit::{AdmissionError, admit, admit_created};
pub use config::ClusterConfig;

// The API crate's modules under the names the code here has always used.
use kvrs_api::{api, quantity};
