//! The domain as JSON in the shape KubeVirt's Go `api.Domain` marshals to: the payload virt-launcher
//! sends to virt-handler (`domainJSON` in domain notifications, the `GetDomain` response).
//!
//! Go's `encoding/json` writes KubeVirt's domain types with their Go field names (`"Spec"`,
//! `"Devices"`, `"Memory": {"Value": .., "Unit": ..}`) and without `omitempty`, so unset pointers
//! appear as `null` and unset strings as `""`. The model in [`crate::domain`] is shaped for libvirt's
//! XML instead, so every model type gets a [`GoJson`] impl here, one file per model file, that
//! writes every field Go writes (including the ones the model does not carry) in Go's order.
//!
//! ```
//! use kvrs_converter::gojson::{DomainEnvelope, from_go_json, to_go_json};
//! use kvrs_converter::Domain;
//! let mut spec = Domain::default();
//! spec.kind = "kvm".into();
//! spec.name = "default_vm".into();
//! let env = DomainEnvelope::new("default", "vm", spec);
//! let json = to_go_json(&env);
//! assert_eq!(json["ObjectMeta"]["name"], "vm");
//! assert_eq!(json["Spec"]["Type"], "kvm");
//! assert_eq!(json["Spec"]["CurrentMemory"], serde_json::Value::Null);
//! assert_eq!(json["Status"]["Status"], "");
//! assert_eq!(from_go_json(&json).unwrap(), env);
//! ```
//!
//! The launcher fills `meta.uid` and `status` and sends [`to_go_json_vec`] (the bytes Go's
//! `json.Marshal` writes, escapes included); the handler reads them with [`from_go_json_slice`]:
//!
//! ```
//! use kvrs_converter::gojson::{DomainEnvelope, LifeCycle, StateChangeReason, from_go_json_slice, to_go_json_vec};
//! let mut env = DomainEnvelope::new("default", "vm", kvrs_converter::Domain::default());
//! env.meta.uid = "1234".into();
//! env.status.status = LifeCycle::Running;
//! env.status.reason = StateChangeReason::Unknown;
//! let bytes = to_go_json_vec(&env);
//! assert!(bytes.starts_with(br#"{"ObjectMeta":{"name":"vm","namespace":"default","uid":"1234"},"Spec":{"#));
//! assert_eq!(from_go_json_slice(&bytes).unwrap(), env);
//! ```

mod base;
mod cpu;
mod devices;
mod disk;
mod envelope;
mod features;
mod interface;
mod memory;
mod meta;
mod metadata;
mod os;
mod root;
mod status;

pub(crate) use base::go_struct;
pub use base::{GoJson, GoJsonError, Path};
pub(crate) use base::{modes, object, xml_name};
pub use envelope::{
    DomainEnvelope, from_go_json, from_go_json_slice, to_go_json, to_go_json_pretty, to_go_json_vec,
};
pub use meta::ObjectMeta;
pub use status::{
    DomainStatus, FsFreeze, GuestOsInfo, GuestPanicInfo, InterfaceStatus, LifeCycle,
    StateChangeReason,
};
