//! # kvrs-admission
//!
//! What happens to a VirtualMachine or VirtualMachineInstance before any controller sees it, as
//! KubeVirt v1.9.0 does it: the cluster configuration that shapes it ([`config`]), virt-api's
//! mutating webhook ([`defaults`]) and validating webhook ([`validate`]), the VMI a VM's template
//! becomes ([`template`]), and the whole pipeline as one function ([`admit`]).
//!
//! Pure functions on plain data: the same calls serve the CLI, the VM controller (which admits the
//! VMI it is about to create) and users' own tools.
//!
//! ## Admitting a VMI
//!
//! [`admit`] takes a VMI as a user would `kubectl create` it and returns it as the API server
//! would store it: in a namespace, with every default virt-api's mutating webhook fills in, and
//! checked by the validating webhook. The [`ClusterConfig`] stands for the KubeVirt CR the
//! webhooks read (its `Default` is a fresh KubeVirt installation's); [`kubevirt_cr`] reads a real
//! one.
//!
//! ```
//! use kvrs_admission::{ClusterConfig, admit};
//! use kvrs_api::VirtualMachineInstance;
//!
//! let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "testvmi"},
//!     "spec": {
//!         "domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}},
//!         "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora"}}]
//!     }
//! }))?;
//! let admitted = admit(vmi, &ClusterConfig::default())?;
//!
//! // Defaults: the namespace, the machine type, a disk for the bare volume.
//! assert_eq!(admitted.metadata.namespace.as_deref(), Some("default"));
//! let machine = admitted.spec.domain.machine.as_ref().and_then(|m| m.r#type.as_deref());
//! assert_eq!(machine, Some("q35"));
//! let disks = admitted.spec.domain.devices.disks.as_deref().unwrap_or_default();
//! assert_eq!(disks[0].name, "root");
//!
//! // What the validating webhook refuses is an error naming the field.
//! let no_memory: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "testvmi"},
//!     "spec": {"domain": {"devices": {}}}
//! }))?;
//! let err = admit(no_memory, &ClusterConfig::default()).unwrap_err();
//! assert_eq!(err.causes()[0].field, "spec.domain.memory.guest");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Each step is also callable on its own: [`defaults::apply_defaults`] alone, [`validate::validate`]
//! alone, and [`template`] for the VMI a VM's template becomes before it is admitted.

#![warn(unreachable_pub)]

mod admit;
pub mod config;
pub mod defaults;
pub mod feature_gates;
pub mod kubevirt_cr;
pub mod live_config;
pub mod template;
pub mod validate;

pub use admit::{AdmissionError, admit, admit_created, default_created};
pub use config::ClusterConfig;

// The API crate's modules under the names the code here has always used.
use kvrs_api::{api, quantity};
