//! # kvrs-api
//!
//! The kubevirt.io/v1 API as plain Rust data ([`api`]), exact Kubernetes quantities
//! ([`Quantity`]), Kubernetes timestamps ([`time`]) and the well-known names KubeVirt's
//! components agree on ([`names`]).
//!
//! This is the one crate every other kvrs crate shares. It holds facts of the API and nothing
//! else: no defaulting, no decisions, no pod rendering. The converter, the handler↔launcher
//! protocol and virt-launcher depend on it alone, so they build without the controllers.

pub mod api;
pub mod json_pointer;
pub mod names;
pub mod quantity;
mod serde_util;
pub mod time;

pub use api::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceSpec};
pub use quantity::{Quantity, QuantityError};
pub use serde_util::{go_object_meta, object_meta_json};
