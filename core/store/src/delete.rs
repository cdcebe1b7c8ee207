//! Deletion: preconditions, finalizers, graceful pod termination and the propagation policies.
//!
//! An object with finalizers is only marked (`deletionTimestamp`, `deletionGracePeriodSeconds:
//! 0`) and goes once an update empties its finalizers. A pod bound to a node is deleted
//! gracefully, as the kubelet needs: marked with `deletionTimestamp = now + grace` and kept
//! until a delete with `gracePeriodSeconds: 0` (the kubelet's, once its containers stopped).
//! Unbound and terminated pods go at once.

use std::sync::Arc;

use serde_json::{Value, json};

use kvrs_decide::format_rfc3339;

use crate::error::StoreError;
use crate::object::{finalizers_empty, meta_mut, meta_str};
use crate::resource::ResourceType;
use crate::store::{DeleteOptions, Deleted, Propagation, Store, not_found};
use kvrs_decide::small_json::ScanPointer;

/// 9999-12-31T23:59:59Z, the last instant a four-digit RFC 3339 year holds.
const LAST_RFC3339_SECOND: i64 = 253_402_300_799;

/// Default grace of a pod without `terminationGracePeriodSeconds`.
const DEFAULT_POD_GRACE: i64 = 30;

fn is_pod(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "pods"
}

/// The grace period a delete of `cur` gets: 0 for everything but bound, running pods.
fn grace_of(rt: &ResourceType, cur: &Value, asked: Option<i64>) -> i64 {
    if !is_pod(rt) {
        return 0;
    }
    let bound = cur
        .at("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let terminal = matches!(
        cur.at("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !bound || terminal {
        return 0;
    }
    asked
        .or_else(|| {
            cur.at("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(DEFAULT_POD_GRACE)
        .max(0)
}

impl Store {
    /// Deletes an object: removes it, or marks it when finalizers or a graceful pod deletion
    /// hold it. A repeated delete of a marked pod can shorten its grace period (to 0: remove).
    pub fn delete(
        &mut self,
        rt: &Arc<ResourceType>,
        key: &str,
        opts: &DeleteOptions,
        now: i64,
    ) -> Result<Deleted, StoreError> {
        let Some(cur) = self.get_json(rt, key) else {
            return Err(not_found(rt, key));
        };
        let cur: &Value = &cur;
        let precondition = |what: &str, want: &Option<String>, field: &str| match want {
            Some(w) if Some(w.as_str()) != meta_str(cur, field) => Err(StoreError::Conflict {
                resource: rt.id(),
                name: key.to_string(),
                reason: format!(
                    "Precondition failed: {what} in precondition: {w}, {what} in object meta: {}",
                    meta_str(cur, field).unwrap_or("")
                ),
            }),
            _ => Ok(()),
        };
        if let Err(e) = precondition("UID", &opts.uid, "uid").and_then(|()| {
            precondition("ResourceVersion", &opts.resource_version, "resourceVersion")
        }) {
            self.stats.refused += 1;
            return Err(e);
        }
        let grace = grace_of(rt, cur, opts.grace_period_seconds);
        let uid = meta_str(cur, "uid").unwrap_or_default().to_string();
        let marked_grace = cur.at("/metadata/deletionTimestamp").map(|_| {
            cur.at("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        });
        let no_finalizers = finalizers_empty(cur);
        match opts.propagation {
            Propagation::Background => {}
            Propagation::Orphan => self.orphan_dependents(&uid, now),
            Propagation::Foreground => self.delete_dependents_now(&uid, now),
        }
        if no_finalizers && grace == 0 {
            let last = self
                .remove(rt, key, now)
                .ok_or_else(|| not_found(rt, key))?;
            return Ok(Deleted::Removed(last));
        }
        // Marked already, and not shortened: nothing to write.
        if let Some(g) = marked_grace
            && g <= grace
        {
            let cur = self.get(rt, key).ok_or_else(|| not_found(rt, key))?;
            return Ok(Deleted::Pending(cur));
        }
        let mut next = self
            .get_json(rt, key)
            .map(std::borrow::Cow::into_owned)
            .ok_or_else(|| not_found(rt, key))?;
        let md = meta_mut(&mut next);
        md.insert(
            "deletionTimestamp".into(),
            // Saturated at the last second RFC 3339 can write: a grace period from input
            // (`gracePeriodSeconds=9223372036854775807`) never overflows.
            json!(format_rfc3339(
                now.saturating_add(grace).min(LAST_RFC3339_SECOND)
            )),
        );
        md.insert("deletionGracePeriodSeconds".into(), json!(grace));
        Ok(Deleted::Pending(
            self.edit_unchecked(rt, key, |v| *v = next, now)
                .ok_or_else(|| not_found(rt, key))?,
        ))
    }

    /// Every current dependent of `owner_uid`: `(resource, key)`.
    fn dependents_of(&self, owner_uid: &str) -> Vec<(Arc<ResourceType>, String)> {
        self.dependents_index(owner_uid)
            .into_iter()
            .filter_map(|(id, key)| Some((self.resource_by_id(&id)?, key)))
            .collect()
    }

    fn orphan_dependents(&mut self, owner_uid: &str, now: i64) {
        for (rt, key) in self.dependents_of(owner_uid) {
            self.edit_unchecked(
                &rt,
                &key,
                |v| {
                    if let Some(refs) = v
                        .at_mut("/metadata/ownerReferences")
                        .and_then(Value::as_array_mut)
                    {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
                    }
                },
                now,
            );
        }
    }

    fn delete_dependents_now(&mut self, owner_uid: &str, now: i64) {
        for (rt, key) in self.dependents_of(owner_uid) {
            let _ = self.delete(&rt, &key, &DeleteOptions::default(), now);
        }
    }
}
