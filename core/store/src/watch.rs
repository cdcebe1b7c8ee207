//! Watches: the events of one resource after a resourceVersion, as a selector sees them.
//!
//! As in the real API server, an object that stops matching the selector is reported
//! `Deleted` (with its new state) and one that starts matching is reported `Added`, so a
//! client's cache of the selected objects stays exact.

use std::sync::Arc;

use serde_json::Value;

use crate::error::StoreError;
use crate::object::Obj;
use crate::resource::ResourceType;
use crate::selector::Selector;
use crate::store::{EventKind, Store};

/// One event as a watcher with a selector sees it.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// Added, Modified or Deleted, after the selector's transitions.
    pub kind: EventKind,
    /// The object (for Deleted: its last state, with the deletion's resourceVersion).
    pub object: Arc<Obj>,
    /// The event's resourceVersion.
    pub rv: u64,
}

/// Whether `selector` selects `obj` (typed objects are serialised only when a label or field
/// requirement needs it; the namespace is read from the key).
pub(crate) fn selects(selector: &Selector, key: &str, obj: &Obj) -> bool {
    if let Some(ns) = &selector.namespace
        && key.split_once('/').map(|(n, _)| n) != Some(ns.as_str())
    {
        return false;
    }
    if selector.labels.is_empty() && selector.fields.is_empty() {
        return true;
    }
    let unscoped = Selector {
        namespace: None,
        ..selector.clone()
    };
    match obj {
        Obj::Other(v) => unscoped.matches(v),
        typed => unscoped.matches(&typed.to_json()),
    }
}

impl Store {
    /// The events of `rt` after `rv` that `selector` selects, in order (at most `limit`).
    /// [`StoreError::Expired`] when events after `rv` are no longer kept.
    pub fn watch_from(
        &self,
        rt: &ResourceType,
        rv: u64,
        selector: &Selector,
        limit: usize,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let id = rt.id();
        let mut out = Vec::new();
        for e in self.events_after(rv)? {
            if out.len() >= limit {
                break;
            }
            if e.resource.id() != id {
                continue;
            }
            let now = selects(selector, &e.key, &e.object);
            let before = e
                .old
                .as_deref()
                .is_some_and(|o| selects(selector, &e.key, o));
            let kind = match (e.kind, before, now) {
                (EventKind::Added, _, true) => EventKind::Added,
                (EventKind::Deleted, true, _) => EventKind::Deleted,
                (EventKind::Modified, true, true) => EventKind::Modified,
                (EventKind::Modified, true, false) => EventKind::Deleted,
                (EventKind::Modified, false, true) => EventKind::Added,
                _ => continue,
            };
            out.push(WatchEvent {
                kind,
                object: e.object.clone(),
                rv: e.rv,
            });
        }
        Ok(out)
    }
}

/// The JSON of an object, borrowed when untyped.
pub fn json_of(obj: &Obj) -> std::borrow::Cow<'_, Value> {
    match obj {
        Obj::Other(v) => std::borrow::Cow::Borrowed(v),
        typed => std::borrow::Cow::Owned(typed.to_json()),
    }
}
