//! # kvrs-api
//!
//! The kubevirt.io/v1 API as plain Rust data ([`api`]), exact Kubernetes quantities
//! ([`Quantity`]), Kubernetes timestamps ([`time`]) and the well-known names KubeVirt's
//! components agree on ([`names`]).
//!
//! This is the one crate every other kvrs crate shares. It holds facts of the API and nothing
//! else: no defaulting, no decisions, no pod rendering. The converter, the handler↔launcher
//! protocol and virt-launcher depend on it alone, so they build without the controllers.
//!
//! ## Reading a VMI
//!
//! The types are serde structs: read a VirtualMachine or VirtualMachineInstance from JSON (or
//! YAML, through any serde format) and write it back. Quantities keep the text they were written
//! as and give their value exactly; fields kvrs does not model are kept in `extra`, so nothing a
//! newer KubeVirt wrote is lost on the way through.
//!
//! ```
//! use kvrs_api::{Quantity, VirtualMachineInstance};
//!
//! let vmi: VirtualMachineInstance = serde_json::from_str(r#"{
//!     "apiVersion": "kubevirt.io/v1",
//!     "kind": "VirtualMachineInstance",
//!     "metadata": {"name": "testvmi", "namespace": "default"},
//!     "spec": {
//!         "domain": {
//!             "devices": {},
//!             "resources": {"requests": {"memory": "1Gi"}},
//!             "someFutureField": true
//!         }
//!     }
//! }"#)?;
//! assert_eq!(vmi.metadata.name.as_deref(), Some("testvmi"));
//!
//! let requests = vmi.spec.domain.resources.as_ref().and_then(|r| r.requests.as_ref());
//! let memory: &Quantity = &requests.unwrap()["memory"];
//! assert_eq!((memory.as_str(), memory.value()?), ("1Gi", 1 << 30));
//!
//! // Written back, the unknown field is still there.
//! let json = serde_json::to_value(&vmi)?;
//! assert_eq!(json["spec"]["domain"]["someFutureField"], true);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A binary that uses these types picks the Kubernetes API version of `k8s-openapi` (the
//! `ObjectMeta` and core types inside them) with one of its features, e.g. `v1_34`; library
//! crates, this one included, leave the choice to it.

#![warn(unreachable_pub)]

pub mod api;
pub mod json_pointer;
pub mod names;
pub mod quantity;
mod serde_util;
pub mod time;

pub use api::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceSpec};
pub use quantity::{Quantity, QuantityError};
pub use serde_util::{go_object_meta, object_meta_json};
