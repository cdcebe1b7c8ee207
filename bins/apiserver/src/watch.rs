//! Watches: a chunked body of newline-delimited `{"type": ..., "object": ...}` events.
//!
//! Each watch pulls from the store's event log at its own pace (only while the client reads),
//! woken by the resourceVersion channel, so no write ever waits for a watcher. A watcher that
//! falls behind the kept history gets an ERROR event with a 410 Status and the stream ends;
//! its client relists. `sendInitialEvents=true` (kube-rs's streaming lists) and a watch
//! without a resourceVersion (or "0") start with ADDED events for the current objects; the
//! former then sends the `k8s.io/initial-events-end` BOOKMARK.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use serde_json::{Value, json};
use tokio::time::Instant;

use kvrs_store::{EventKind, ResourceType, Selector, StoreError, json_of};

use crate::State;
use crate::error::ApiError;
use crate::handler::Body;
use crate::query::{Query, saturating_deadline};

/// Events taken from the log per turn: bounds what a watch holds for a slow client.
const BATCH: usize = 256;
/// A watch without `timeoutSeconds` ends after this long (the real server's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

fn line(kind: &str, object: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn bookmark(rt: &ResourceType, rv: u64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": md}),
    )
}

fn gone(e: &StoreError) -> Bytes {
    line("ERROR", &ApiError::Store(e.clone()).status())
}

struct Watch {
    state: Arc<State>,
    rt: Arc<ResourceType>,
    selector: Selector,
    rv: u64,
    queue: VecDeque<Bytes>,
    changed: tokio::sync::watch::Receiver<u64>,
    deadline: Instant,
    bookmarks: bool,
    next_bookmark: Instant,
    done: bool,
}

impl Watch {
    /// Moves the next batch of selected events into the queue; false when the watch ended.
    fn pull(&mut self) -> bool {
        let (batch, current) = self.state.read(|s| {
            (
                s.watch_from(&self.rt, self.rv, &self.selector, BATCH),
                s.resource_version(),
            )
        });
        match batch {
            Ok(events) => {
                // Fewer than a batch: everything up to `current` was scanned.
                let through = if events.len() < BATCH {
                    current
                } else {
                    events.last().map_or(current, |e| e.rv)
                };
                for e in &events {
                    let kind = match e.kind {
                        EventKind::Added => "ADDED",
                        EventKind::Modified => "MODIFIED",
                        EventKind::Deleted => "DELETED",
                    };
                    self.queue.push_back(line(kind, &json_of(&e.object)));
                }
                self.rv = self.rv.max(through);
                true
            }
            Err(e) => {
                tracing::debug!(resource = %self.rt.id(), rv = self.rv, "watch expired");
                self.queue.push_back(gone(&e));
                self.done = true;
                false
            }
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.queue.pop_front() {
                return Some(b);
            }
            if self.done {
                return None;
            }
            self.changed.borrow_and_update();
            if self.pull() && !self.queue.is_empty() {
                continue;
            }
            if self.done {
                continue;
            }
            let bookmark_at = if self.bookmarks {
                self.next_bookmark
            } else {
                self.deadline
            };
            tokio::select! {
                r = self.changed.changed() => if r.is_err() { self.done = true },
                () = tokio::time::sleep_until(self.deadline) => self.done = true,
                () = tokio::time::sleep_until(bookmark_at), if self.bookmarks => {
                    self.next_bookmark = Instant::now() + self.state.bookmark_interval;
                    self.queue.push_back(bookmark(&self.rt, self.rv, false));
                }
            }
        }
    }
}

/// Starts a watch of `rt` as the query asks.
pub fn watch(
    state: Arc<State>,
    rt: Arc<ResourceType>,
    selector: Selector,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let send_initial = q.flag("sendInitialEvents")?;
    let bookmarks = q.flag("allowWatchBookmarks")?;
    let from = q.resource_version()?.filter(|rv| *rv != 0);
    let timeout = q.int("timeoutSeconds")?;
    let mut queue = VecDeque::new();
    let changed = state.changed.subscribe();
    let rv = if let (false, Some(rv)) = (send_initial, from) {
        rv
    } else {
        let list = state.read(|s| s.list(&rt, &selector));
        for o in &list.items {
            queue.push_back(line("ADDED", &json_of(o)));
        }
        if send_initial {
            queue.push_back(bookmark(&rt, list.resource_version, true));
        }
        list.resource_version
    };
    let now = Instant::now();
    // Saturated: `timeoutSeconds=9223372036854775807` is a long watch, not an overflow.
    let deadline = match timeout {
        Some(t) => saturating_deadline(now, t),
        None => now + DEFAULT_TIMEOUT,
    };
    let w = Watch {
        bookmarks,
        next_bookmark: now + state.bookmark_interval,
        state,
        rt,
        selector,
        rv,
        queue,
        changed,
        deadline,
        done: false,
    };
    let s = stream::unfold(w, |mut w| async move {
        let b = w.next().await?;
        Some((Ok::<_, std::convert::Infallible>(Frame::data(b)), w))
    });
    let mut r = Response::new(StreamBody::new(s).boxed_unsync());
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(r)
}
