//! # kvrs-instancetype
//!
//! KubeVirt v1.9.0's instancetypes and preferences as plain data and pure functions: the
//! instancetype.kubevirt.io/v1beta1 objects ([`types`]), finding the ones a VM references
//! ([`Catalog`]), applying them to a VMI spec with KubeVirt's conflicts ([`apply()`]), the VM
//! webhook's checks ([`check_spread`], [`check_requirements`]) and the steps of the VM webhooks
//! and controller that use them ([`vm`]).
//!
//! Nothing here reads files or talks to a cluster: the CLI and the controller bring the
//! objects, and KubeVirt's defaulting (which runs between application and the requirement
//! check) stays in `kvrs-admission`.
//!
//! ## Applying an instancetype
//!
//! An instancetype owns the VM's size: its CPU and memory replace the template's, and a template
//! that sets them itself is refused with KubeVirt's message. A preference only fills what the
//! template leaves unset. [`apply()`] takes the spec's field path (for those messages), the spec,
//! the VM's metadata and the two specs, and returns the VMI spec KubeVirt's VM controller would
//! start:
//!
//! ```
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use kvrs_api::VirtualMachineInstanceSpec;
//! use kvrs_instancetype::{InstancetypeSpec, PreferenceSpec, apply};
//! use serde_json::json;
//!
//! let u1_medium: InstancetypeSpec =
//!     serde_json::from_value(json!({"cpu": {"guest": 2}, "memory": {"guest": "4Gi"}}))?;
//! let fedora: PreferenceSpec =
//!     serde_json::from_value(json!({"devices": {"preferredDiskBus": "virtio"}}))?;
//! let template: VirtualMachineInstanceSpec =
//!     serde_json::from_value(json!({"domain": {"devices": {"disks": [{"name": "root"}]}}}))?;
//! let meta = ObjectMeta::default();
//!
//! let out = apply("spec.template.spec", &template, &meta, Some(&u1_medium), Some(&fedora))?;
//! let cpu = out.spec.domain.cpu.as_ref().unwrap();
//! assert_eq!((cpu.sockets, cpu.cores, cpu.threads), (Some(2), Some(1), Some(1)));
//! let memory = out.spec.domain.memory.as_ref().and_then(|m| m.guest.as_ref()).unwrap();
//! assert_eq!(memory.as_str(), "4Gi");
//! let disks = out.spec.domain.devices.disks.as_deref().unwrap();
//! assert_eq!(disks[0].disk.as_ref().and_then(|d| d.bus.as_deref()), Some("virtio"));
//!
//! // A template that sizes itself conflicts with the instancetype.
//! let sized: VirtualMachineInstanceSpec =
//!     serde_json::from_value(json!({"domain": {"cpu": {"sockets": 4}, "devices": {}}}))?;
//! let err = apply("spec.template.spec", &sized, &meta, Some(&u1_medium), None).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected instance type",
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(unreachable_pub)]

pub mod apply;
mod catalog;
mod check;
pub mod conflict;
pub mod revision;
pub mod topology;
pub mod types;
pub mod vm;

pub use apply::{Applied, apply, apply_autoattach_preferences, apply_in_place};
pub use catalog::{
    AddError, Added, Catalog, FindError, instancetype_is_namespaced, preference_is_namespaced,
};
pub use check::{RequirementError, check_requirements, check_spread};
pub use conflict::{Conflict, Conflicts};
pub use types::{Instancetype, InstancetypeSpec, Preference, PreferenceSpec};
