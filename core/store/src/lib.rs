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
//!
//! ## Using the store
//!
//! A resource is named by its [`ResourceType`] ([`by_plural`], [`lookup`], or
//! [`ResourceType::unknown`] for one outside the [`catalogue`]); an object by its key,
//! `namespace/name`. Every write takes `now` and returns the object as stored; every write is an
//! event a watch replays.
//!
//! ```
//! use kvrs_store::{CreateOptions, DeleteOptions, EventKind, PatchType, Selector, Store, by_plural};
//! use serde_json::json;
//!
//! let mut store = Store::default();
//! let cms = by_plural("configmaps").unwrap();
//! let at = CreateOptions { now: 10, ..CreateOptions::default() };
//! let cm = json!({"metadata": {"name": "cfg", "namespace": "ns", "finalizers": ["example.com/keep"]}});
//! let created = store.create(&cms, None, cm, &at)?.to_json();
//! assert_eq!(created["metadata"]["resourceVersion"], "1");
//!
//! // A stale resourceVersion is a conflict, as an optimistic client expects.
//! let stale = json!({"metadata": {"resourceVersion": "0"}, "data": {"a": "1"}});
//! let err = store.patch(&cms, "ns/cfg", None, PatchType::Merge, &stale, 11).unwrap_err();
//! assert_eq!(err.code(), 409);
//!
//! // The finalizer holds a deleted object until it is removed.
//! store.delete(&cms, "ns/cfg", &DeleteOptions::default(), 12)?;
//! assert!(store.get(&cms, "ns/cfg").is_some());
//! let release = json!({"metadata": {"finalizers": null}});
//! store.patch(&cms, "ns/cfg", None, PatchType::Merge, &release, 13)?;
//! assert!(store.get(&cms, "ns/cfg").is_none());
//!
//! // A watch from resourceVersion 0 replays it all: created, marked for deletion, finalizer
//! // removed, gone.
//! let events = store.watch_from(&cms, 0, &Selector::all(), 100)?;
//! let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
//! use EventKind::{Added, Deleted, Modified};
//! assert_eq!(kinds, [Added, Modified, Modified, Deleted]);
//! # Ok::<(), kvrs_store::StoreError>(())
//! ```

#![warn(unreachable_pub)]

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
