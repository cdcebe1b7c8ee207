//! The kubevirt.io/v1 API types.
//!
//! The structs in [`generated`] mirror KubeVirt v1.9.0's published OpenAPI schema field for field
//! (see `scripts/gen-api-types.py`). Every struct keeps unknown fields in `extra`, so a VM or VMI
//! written by a newer KubeVirt passes through kvrs without losing anything.

mod generated;
mod resource;

pub use generated::*;

/// The API group of every type here.
pub const GROUP: &str = "kubevirt.io";
/// The API version of every type here.
pub const VERSION: &str = "v1";
/// `apiVersion` as written in objects.
pub const API_VERSION: &str = "kubevirt.io/v1";
