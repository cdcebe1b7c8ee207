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
