//! # kvrs-core
//!
//! The kubevirt.io/v1 API as plain Rust data ([`api`]), exact Kubernetes quantities ([`Quantity`]),
//! and — in later modules — KubeVirt v1.9.0's defaulting, validation and controller decisions as
//! pure functions: data in, data out, no clock, socket or randomness inside.

pub mod admission;
pub mod api;
pub mod config;
pub mod decide;
pub mod defaults;
pub mod pod;
pub mod quantity;
pub mod resources;
mod serde_util;
#[cfg(feature = "sim")]
pub mod sim;
pub mod template;
pub mod validate;

pub use api::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceSpec};
pub use config::ClusterConfig;
pub use quantity::{Quantity, QuantityError};
