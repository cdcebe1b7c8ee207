//! An object store with Kubernetes semantics, as plain data in and out: no clock (the caller
//! passes `now`), no sockets, no randomness (UIDs and generateName suffixes come from the
//! caller or a counter). The simulator (`kvrs-sim`) drives it directly; `kvrs-apiserver` puts
//! the REST and watch protocol in front of it for `kvrs run`.
//!
//! What it keeps of the real API server's rules:
//! - one global resourceVersion, bumped by every write, and a bounded event log that watches
//!   replay ([`Store::watch_from`]; too old a resourceVersion is [`StoreError::Expired`]);
//! - optimistic concurrency (`metadata.resourceVersion` in an update or patch is a
//!   precondition), JSON patch `test` operations (a failure is [`StoreError::Invalid`]);
//! - status subresources ([`ResourceType::status_subresource`]) and generations;
//! - finalizers, graceful pod deletion, owner-reference garbage collection;
//! - label and field selectors ([`Selector`]), `pods/binding` ([`Store::bind`]).

mod delete;
mod equal_json;
mod error;
pub mod names;
mod object;
mod resource;
mod selector;
mod store;
mod top_level;
mod watch;

pub use error::StoreError;
pub use kvrs_decide::PatchType;
pub use object::Obj;
pub use resource::{ResourceType, Typed, by_plural, catalogue, lookup, res};
pub use selector::{FieldSelector, LabelSelector, Selector};
pub use store::{
    AdmitFn, CreateOptions, DeleteOptions, Deleted, Event, EventKind, List, Operation, Propagation,
    Store, StoreOptions, StoreStats,
};
pub use watch::{WatchEvent, json_of};

#[cfg(test)]
mod identity_tests;
#[cfg(test)]
mod in_place_tests;
#[cfg(test)]
mod tests;
