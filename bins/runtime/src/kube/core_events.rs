//! Events as KubeVirt records them: core/v1 `Event`s with `source.component`, correlated and
//! counted the way client-go's `record` package does before they reach the API server.
//!
//! Why not kube-runtime's recorder: it writes `events.k8s.io/v1`, and KubeVirt v1.9.0's
//! ClusterRoles grant only core `events` (create, patch; the controller also update). Dropped
//! into a KubeVirt install, every event kvrs recorded through it was refused (403). And tools
//! that filter on KubeVirt's `source.component` (`virtualmachine-controller`, `virt-handler`)
//! found nothing, because events.k8s.io has no `source`.
//!
//! What client-go does, and this module with it ([`Correlator`], plain data and a `now` in, no
//! clock or socket inside):
//! - an event equal to one recorded before (same source, object, type, reason and message) is
//!   not created again: the stored one is patched with `count + 1`, `lastTimestamp` and
//!   `message` (a strategic-merge patch, as client-go's two-way patch comes out);
//! - more than [`AGGREGATE_MAX_EVENTS`] different messages for the same source, object, type and
//!   reason within [`AGGREGATE_INTERVAL_SECONDS`] become one event whose message starts with
//!   `(combined from similar events): `;
//! - a source may record [`SPAM_BURST`] events about one object, then one more every
//!   [`SPAM_REFILL_SECONDS`]; beyond that events are dropped;
//! - each cache holds at most [`CACHE_ENTRIES`] keys, the least recently used leaving first.
//!
//! [`CoreEventRecorder`] is the shell: it reads the wall clock, asks the correlator, sends the
//! create or the patch (a patch of an event that has gone is sent again as a create), and feeds
//! the stored event back, so the next patch names what the server holds.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api as KubeResourceApi, Patch, PatchParams, PostParams};
use kvrs_decide::Event;
use tracing::warn;

/// Keys each of the correlator's caches keeps (client-go's `maxLruCacheEntries`).
pub const CACHE_ENTRIES: usize = 4096;
/// Distinct messages for one source, object, type and reason before they are combined.
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// The window in which distinct messages count towards combining.
pub const AGGREGATE_INTERVAL_SECONDS: i64 = 600;
/// Events a source may record about one object at once.
pub const SPAM_BURST: f64 = 25.0;
/// Seconds after which a source may record one more event about an object past the burst.
pub const SPAM_REFILL_SECONDS: f64 = 300.0;
/// The prefix of a combined event's message.
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

const NANOS: i64 = 1_000_000_000;

/// What to send for one recorded event.
#[derive(Clone, Debug, PartialEq)]
pub enum Correlated {
    /// Nothing: the source exceeded its budget for this object.
    Skip,
    /// A new event.
    Create(Box<CoreEvent>),
    /// An event already stored under `event.metadata.name`: patch it with `patch` (or create
    /// `event` when it has gone).
    Patch {
        /// The event as it is after the patch.
        event: Box<CoreEvent>,
        /// The strategic-merge patch body.
        patch: serde_json::Value,
    },
}

/// client-go's event correlation as a pure state machine: time comes in as nanoseconds since
/// the epoch.
#[derive(Debug, Default)]
pub struct Correlator {
    aggregates: Lru<Aggregate>,
    observed: Lru<Observed>,
    spam: Lru<TokenBucket>,
}

#[derive(Clone, Debug, Default)]
struct Aggregate {
    messages: HashSet<String>,
    last_nanos: i64,
}

#[derive(Clone, Debug)]
struct Observed {
    count: i32,
    first_timestamp: Option<Time>,
    name: String,
    resource_version: Option<String>,
}

#[derive(Clone, Debug)]
struct TokenBucket {
    tokens: f64,
    last_nanos: i64,
}

impl Correlator {
    /// Correlates `event` (as [`new_event`] made it) at `now_nanos`.
    pub fn correlate(&mut self, event: CoreEvent, now_nanos: i64) -> Correlated {
        let (event, key) = self.aggregate(event, now_nanos);
        let observed = self.observe(event, key);
        if !self.accept(&observed.0, now_nanos) {
            return Correlated::Skip;
        }
        match observed {
            (event, None) => Correlated::Create(Box::new(event)),
            (event, Some(patch)) => Correlated::Patch {
                event: Box::new(event),
                patch,
            },
        }
    }

    /// Records what the API server stored, so the next patch of the same event names it.
    pub fn stored(&mut self, stored: &CoreEvent) {
        self.observed.put(
            event_key(stored),
            Observed {
                count: stored.count.unwrap_or(1),
                first_timestamp: stored.first_timestamp.clone(),
                name: stored.metadata.name.clone().unwrap_or_default(),
                resource_version: stored.metadata.resource_version.clone(),
            },
        );
    }

    fn aggregate(&mut self, event: CoreEvent, now_nanos: i64) -> (CoreEvent, String) {
        let key = event_key(&event);
        let aggregate_key = aggregate_key(&event);
        let mut record = self.aggregates.take(&aggregate_key).unwrap_or_default();
        if now_nanos - record.last_nanos > AGGREGATE_INTERVAL_SECONDS * NANOS {
            record = Aggregate::default();
        }
        record
            .messages
            .insert(event.message.clone().unwrap_or_default());
        record.last_nanos = now_nanos;
        let over = record.messages.len() >= AGGREGATE_MAX_EVENTS;
        if over && let Some(any) = record.messages.iter().next().cloned() {
            // client-go keeps the set from growing past the threshold.
            record.messages.remove(&any);
        }
        self.aggregates.put(aggregate_key.clone(), record);
        if !over {
            return (event, key);
        }
        let now = time_of(now_nanos);
        let involved = event.involved_object.clone();
        let combined = CoreEvent {
            metadata: ObjectMeta {
                name: Some(event_name(
                    involved.name.as_deref().unwrap_or_default(),
                    now_nanos,
                )),
                namespace: event.metadata.namespace.clone(),
                ..ObjectMeta::default()
            },
            count: Some(1),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            involved_object: involved,
            message: Some(format!(
                "{COMBINED_PREFIX}{}",
                event.message.as_deref().unwrap_or_default()
            )),
            type_: event.type_.clone(),
            reason: event.reason.clone(),
            source: event.source.clone(),
            ..CoreEvent::default()
        };
        (combined, aggregate_key)
    }

    fn observe(
        &mut self,
        mut event: CoreEvent,
        key: String,
    ) -> (CoreEvent, Option<serde_json::Value>) {
        let mut patch = None;
        if let Some(last) = self.observed.get(&key).filter(|o| o.count > 0) {
            event.metadata.name = Some(last.name.clone());
            event.metadata.resource_version = last.resource_version.clone();
            event.first_timestamp = last.first_timestamp.clone();
            event.count = Some(last.count.saturating_add(1));
            // What client-go's two-way merge patch between the event with count, lastTimestamp
            // and message cleared and the event itself comes to.
            patch = Some(serde_json::json!({
                "count": event.count,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            }));
        }
        self.observed.put(
            key,
            Observed {
                count: event.count.unwrap_or(1),
                first_timestamp: event.first_timestamp.clone(),
                name: event.metadata.name.clone().unwrap_or_default(),
                resource_version: event.metadata.resource_version.clone(),
            },
        );
        (event, patch)
    }

    /// The source's token bucket for the object: false when it is empty.
    fn accept(&mut self, event: &CoreEvent, now_nanos: i64) -> bool {
        let key = spam_key(event);
        let mut bucket = self.spam.take(&key).unwrap_or(TokenBucket {
            tokens: SPAM_BURST,
            last_nanos: now_nanos,
        });
        let elapsed = (now_nanos - bucket.last_nanos).max(0) as f64 / NANOS as f64;
        bucket.tokens = (bucket.tokens + elapsed / SPAM_REFILL_SECONDS).min(SPAM_BURST);
        bucket.last_nanos = now_nanos;
        let accept = bucket.tokens >= 1.0;
        if accept {
            bucket.tokens -= 1.0;
        }
        self.spam.put(key, bucket);
        accept
    }
}

/// The event client-go's recorder makes for `event` from `source` at `now_nanos`: named
/// `<object>.<nanoseconds in hex>`, counted once, in the object's namespace (`default` for a
/// cluster-scoped object), reporting controller and instance taken from the source.
pub fn new_event(event: &Event, source: &EventSource, now_nanos: i64) -> CoreEvent {
    let namespace = if event.object.namespace.is_empty() {
        "default".to_string()
    } else {
        event.object.namespace.clone()
    };
    let now = time_of(now_nanos);
    CoreEvent {
        metadata: ObjectMeta {
            name: Some(event_name(&event.object.name, now_nanos)),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(super::api::api_version_of(&event.object.kind).to_string()),
            kind: Some(event.object.kind.clone()),
            namespace: Some(event.object.namespace.clone()).filter(|n| !n.is_empty()),
            name: Some(event.object.name.clone()),
            uid: event.object.uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some(event.reason.clone()),
        message: Some(event.message.clone()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        type_: Some(event.kind.as_str().to_string()),
        source: Some(source.clone()),
        reporting_component: source.component.clone(),
        reporting_instance: source.host.clone(),
        ..CoreEvent::default()
    }
}

/// `<name>.<hex nanoseconds>`, as client-go names events.
fn event_name(object: &str, now_nanos: i64) -> String {
    format!("{object}.{now_nanos:x}")
}

fn time_of(now_nanos: i64) -> Time {
    Time(Timestamp::from_second(now_nanos.div_euclid(NANOS)).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn involved_key(e: &CoreEvent) -> [&str; 7] {
    let source = e.source.as_ref();
    let o = &e.involved_object;
    [
        source.and_then(|s| s.component.as_deref()).unwrap_or(""),
        source.and_then(|s| s.host.as_deref()).unwrap_or(""),
        o.kind.as_deref().unwrap_or(""),
        o.namespace.as_deref().unwrap_or(""),
        o.name.as_deref().unwrap_or(""),
        o.uid.as_deref().unwrap_or(""),
        o.api_version.as_deref().unwrap_or(""),
    ]
}

/// Source, object, field path, type, reason and message: one stored event each.
fn event_key(e: &CoreEvent) -> String {
    let mut parts = involved_key(e).map(str::to_string).to_vec();
    parts.insert(5, e.involved_object.field_path.clone().unwrap_or_default());
    parts.push(e.type_.clone().unwrap_or_default());
    parts.push(e.reason.clone().unwrap_or_default());
    parts.push(e.message.clone().unwrap_or_default());
    parts.join("\u{0}")
}

/// Source, object, type and reason: the events that combine.
fn aggregate_key(e: &CoreEvent) -> String {
    let mut parts = involved_key(e).map(str::to_string).to_vec();
    parts.push(e.type_.clone().unwrap_or_default());
    parts.push(e.reason.clone().unwrap_or_default());
    parts.join("\u{0}")
}

/// Source, object and type: one budget each.
fn spam_key(e: &CoreEvent) -> String {
    let mut parts = involved_key(e).map(str::to_string).to_vec();
    parts.push(e.type_.clone().unwrap_or_default());
    parts.join("\u{0}")
}

/// A map that forgets its least recently used key beyond [`CACHE_ENTRIES`].
#[derive(Debug)]
struct Lru<V> {
    entries: HashMap<String, (u64, V)>,
    tick: u64,
    capacity: usize,
}

impl<V> Default for Lru<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            tick: 0,
            capacity: CACHE_ENTRIES,
        }
    }
}

impl<V> Lru<V> {
    fn get(&mut self, key: &str) -> Option<&V> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(t, v)| {
            *t = tick;
            &*v
        })
    }

    fn take(&mut self, key: &str) -> Option<V> {
        self.entries.remove(key).map(|(_, v)| v)
    }

    fn put(&mut self, key: String, value: V) {
        self.tick += 1;
        self.entries.insert(key, (self.tick, value));
        if self.entries.len() > self.capacity
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
        {
            self.entries.remove(&oldest);
        }
    }
}

/// Records [`Event`]s as core/v1 events from one source, correlated as client-go does.
pub struct CoreEventRecorder {
    client: kube::Client,
    source: EventSource,
    correlator: Mutex<Correlator>,
}

impl std::fmt::Debug for CoreEventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreEventRecorder")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl CoreEventRecorder {
    /// Records as `component` (KubeVirt's `source.component`, e.g. `virtualmachine-controller`),
    /// on `host` when the source is per node (virt-handler's node name).
    pub fn new(client: kube::Client, component: &str, host: Option<&str>) -> Self {
        Self {
            client,
            source: EventSource {
                component: Some(component.to_string()),
                host: host.map(str::to_string),
            },
            correlator: Mutex::new(Correlator::default()),
        }
    }

    /// The source events are recorded from.
    pub fn source(&self) -> &EventSource {
        &self.source
    }

    /// Records `event`. A failure is logged, never returned: an event that cannot be recorded
    /// never fails a reconcile (client-go drops it too).
    pub async fn record(&self, event: &Event) {
        let now_nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let fresh = new_event(event, &self.source, now_nanos);
        let correlated = match self.correlator.lock() {
            Ok(mut c) => c.correlate(fresh, now_nanos),
            Err(poisoned) => poisoned.into_inner().correlate(fresh, now_nanos),
        };
        let stored = match correlated {
            Correlated::Skip => return,
            Correlated::Create(event) => self.create(*event).await,
            Correlated::Patch { event, patch } => self.patch(*event, patch).await,
        };
        match stored {
            Ok(stored) => match self.correlator.lock() {
                Ok(mut c) => c.stored(&stored),
                Err(poisoned) => poisoned.into_inner().stored(&stored),
            },
            Err(e) => warn!(
                object = %format!("{}/{}", event.object.namespace, event.object.name),
                reason = %event.reason,
                "event not recorded: {e}"
            ),
        }
    }

    fn api(&self, event: &CoreEvent) -> KubeResourceApi<CoreEvent> {
        let ns = event.metadata.namespace.as_deref().unwrap_or("default");
        KubeResourceApi::namespaced(self.client.clone(), ns)
    }

    async fn create(&self, mut event: CoreEvent) -> Result<CoreEvent, kube::Error> {
        event.metadata.resource_version = None;
        self.api(&event)
            .create(&PostParams::default(), &event)
            .await
    }

    async fn patch(
        &self,
        event: CoreEvent,
        patch: serde_json::Value,
    ) -> Result<CoreEvent, kube::Error> {
        let name = event.metadata.name.clone().unwrap_or_default();
        match self
            .api(&event)
            .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            // The event expired or was deleted: record it again.
            Err(kube::Error::Api(s)) if s.code == 404 => self.create(event).await,
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_decide::ObjectRef;

    const SECOND: i64 = NANOS;

    fn source() -> EventSource {
        EventSource {
            component: Some("virtualmachine-controller".into()),
            host: None,
        }
    }

    fn event(reason: &str, message: &str) -> Event {
        Event {
            object: ObjectRef {
                kind: "VirtualMachine".into(),
                namespace: "default".into(),
                name: "vm1".into(),
                uid: Some("u1".into()),
            },
            kind: kvrs_decide::EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn created(c: Correlated) -> CoreEvent {
        match c {
            Correlated::Create(e) => *e,
            other => panic!("expected a create, got {other:?}"),
        }
    }

    #[test]
    fn a_new_event_is_core_v1_with_kubevirt_s_source() {
        let e = new_event(
            &event("SuccessfulCreate", "Started"),
            &source(),
            5 * SECOND + 7,
        );
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["metadata"]["name"], format!("vm1.{:x}", 5 * SECOND + 7));
        assert_eq!(v["metadata"]["namespace"], "default");
        assert_eq!(v["source"]["component"], "virtualmachine-controller");
        assert_eq!(v["reportingComponent"], "virtualmachine-controller");
        assert_eq!(v["involvedObject"]["apiVersion"], "kubevirt.io/v1");
        assert_eq!(v["involvedObject"]["uid"], "u1");
        assert_eq!(v["count"], 1);
        assert_eq!(v["type"], "Normal");
        assert_eq!(v["firstTimestamp"], "1970-01-01T00:00:05Z");
        assert_eq!(v["lastTimestamp"], v["firstTimestamp"]);
    }

    #[test]
    fn the_same_event_again_patches_the_stored_one_with_its_count() {
        let mut c = Correlator::default();
        let first = created(c.correlate(new_event(&event("R", "m"), &source(), SECOND), SECOND));
        let mut stored = first.clone();
        stored.metadata.resource_version = Some("42".into());
        c.stored(&stored);
        let again = c.correlate(
            new_event(&event("R", "m"), &source(), 9 * SECOND),
            9 * SECOND,
        );
        let Correlated::Patch {
            event: patched,
            patch,
        } = again
        else {
            panic!("expected a patch, got {again:?}")
        };
        assert_eq!(patched.metadata.name, first.metadata.name);
        assert_eq!(patched.count, Some(2));
        assert_eq!(patched.first_timestamp, first.first_timestamp);
        assert_eq!(
            patch,
            serde_json::json!({"count": 2, "lastTimestamp": "1970-01-01T00:00:09Z", "message": "m"})
        );
        // A different message is a different event.
        let other = c.correlate(
            new_event(&event("R", "other"), &source(), 10 * SECOND),
            10 * SECOND,
        );
        assert!(matches!(other, Correlated::Create(_)), "{other:?}");
    }

    #[test]
    fn ten_messages_for_one_reason_combine_into_one_counted_event() {
        let mut c = Correlator::default();
        for i in 0..9 {
            let t = i * SECOND;
            let e = created(c.correlate(new_event(&event("R", &format!("m{i}")), &source(), t), t));
            assert_eq!(e.message.as_deref(), Some(format!("m{i}").as_str()));
        }
        let t = 20 * SECOND;
        let tenth = created(c.correlate(new_event(&event("R", "m9"), &source(), t), t));
        assert_eq!(
            tenth.message.as_deref(),
            Some("(combined from similar events): m9")
        );
        let t = 21 * SECOND;
        let eleventh = c.correlate(new_event(&event("R", "m10"), &source(), t), t);
        let Correlated::Patch { event: patched, .. } = eleventh else {
            panic!("expected a patch, got {eleventh:?}")
        };
        assert_eq!(patched.metadata.name, tenth.metadata.name);
        assert_eq!(patched.count, Some(2));
        // Outside the window the messages count afresh.
        let later = (21 + AGGREGATE_INTERVAL_SECONDS + 1) * SECOND;
        let fresh = created(c.correlate(new_event(&event("R", "m11"), &source(), later), later));
        assert_eq!(fresh.message.as_deref(), Some("m11"));
    }

    #[test]
    fn a_source_records_twenty_five_events_about_an_object_then_one_per_five_minutes() {
        let mut c = Correlator::default();
        let sent = (0..40)
            .filter(|i| {
                let e = new_event(&event(&format!("R{i}"), "m"), &source(), SECOND);
                !matches!(c.correlate(e, SECOND), Correlated::Skip)
            })
            .count();
        assert_eq!(sent, 25);
        let t = SECOND + 300 * SECOND;
        let e = new_event(&event("later", "m"), &source(), t);
        assert!(!matches!(c.correlate(e, t), Correlated::Skip));
        let e = new_event(&event("later2", "m"), &source(), t);
        assert!(matches!(c.correlate(e, t), Correlated::Skip));
    }

    #[test]
    fn the_caches_forget_the_least_recently_used_key() {
        let mut lru = Lru::<u32> {
            capacity: 2,
            ..Lru::default()
        };
        lru.put("a".into(), 1);
        lru.put("b".into(), 2);
        assert_eq!(lru.get("a"), Some(&1));
        lru.put("c".into(), 3);
        assert_eq!(lru.get("b"), None);
        assert_eq!(lru.get("a"), Some(&1));
        assert_eq!(lru.get("c"), Some(&3));
    }
}
