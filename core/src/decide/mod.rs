//! Controller decisions as pure functions: a snapshot of the world in, a [`Plan`] out.
//!
//! Every controller of kvrs (the VM controller, the VMI controller, virt-handler) is split in two:
//! a decision here that reads a snapshot (objects from the informer caches, the expectations, the
//! clock reading `now`, random draws such as jitter) and returns what to do, and a shell in the
//! binaries that sends the writes, records the events and requeues the key. Keeping the clock,
//! randomness and IO out of the decision is what lets the same code run in the controllers, in the
//! simulator and in the oracle tests unchanged.
//!
//! The types in this module are shared by all decisions; they say nothing about VMs in particular.
//!
//! - [`vm::decide_vm`] — the VM controller ([`vm::VmWorld`] in, [`vm::VmDecision`] out);
//! - [`vmi::decide_vmi`] — the VMI controller, launcher pods rendered through a
//!   [`vmi::LauncherRenderer`] ([`vmi::launcher_renderer`] wires `crate::pod`);
//! - [`scenario::Scenario`] — the oracle scenario format parsed into those worlds;
//! - [`store::ObjectStore`] — an in-memory API server that executes plans;
//! - [`patch`] — building and applying JSON, merge and strategic merge patches.

pub mod handler;
pub mod meta;
pub mod patch;
pub mod scenario;
pub mod store;
pub mod vm;
pub mod vmi;

use std::time::Duration;

use serde_json::{Map, Value, json};

/// What one reconcile of one key decided.
///
/// The shell executes `writes` in order and stops at the first failing write (the remaining writes
/// were computed under the assumption that the earlier ones succeed); a failed write turns the
/// outcome into [`QueueOutcome::RateLimited`] with the API error as `error`, as KubeVirt's
/// controllers return the error from their sync and let the queue retry with backoff.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// API writes in the order they must be sent.
    pub writes: Vec<ApiWrite>,
    /// Kubernetes events to record, in order.
    pub events: Vec<Event>,
    /// What to do with the queue key afterwards.
    pub queue: QueueOutcome,
    /// The error the reconcile reports (the key is then retried with backoff), if any.
    pub error: Option<String>,
}

impl Plan {
    /// A plan that does nothing and forgets the key.
    pub fn idle() -> Self {
        Self::default()
    }

    /// Records `err` as the reconcile's error and asks for a rate-limited retry, as a sync that
    /// returns an error does.
    pub fn fail(&mut self, err: impl Into<String>) {
        self.error = Some(err.into());
        self.queue = QueueOutcome::RateLimited;
    }

    /// The plan in the JSON shape of the oracle outputs (`actions`, `events`, `queue`, `error`),
    /// reads left out. `key` is the queue key, `object` names the reconciled object in events.
    pub fn to_json(&self, key: &str) -> Value {
        let mut out = Map::new();
        out.insert(
            "actions".into(),
            Value::Array(self.writes.iter().map(ApiWrite::to_json).collect()),
        );
        out.insert(
            "events".into(),
            Value::Array(self.events.iter().map(Event::to_json).collect()),
        );
        out.insert("queue".into(), self.queue.to_json(key));
        out.insert(
            "requeued".into(),
            Value::Bool(!matches!(self.queue, QueueOutcome::Forget)),
        );
        if let QueueOutcome::After(d) = self.queue {
            out.insert("requeueAfterSeconds".into(), json!(d.as_secs()));
        }
        if let Some(e) = &self.error {
            out.insert("error".into(), Value::String(e.clone()));
        }
        Value::Object(out)
    }
}

/// What happens to the queue key after the reconcile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueOutcome {
    /// Done: reset the key's retry backoff (`Forget`).
    #[default]
    Forget,
    /// Look again after this delay (`AddAfter`), and reset the retry backoff: used for timers such
    /// as the start-failure backoff, which are not errors.
    After(Duration),
    /// The reconcile failed: retry with the per-key exponential backoff (`AddRateLimited`).
    RateLimited,
}

impl QueueOutcome {
    /// The queue operations as the oracles record them.
    pub fn to_json(&self, key: &str) -> Value {
        match self {
            QueueOutcome::Forget => json!([{ "op": "Forget", "key": key }]),
            QueueOutcome::After(d) => json!([
                { "op": "AddAfter", "key": key, "delaySeconds": d.as_secs() },
                { "op": "Forget", "key": key },
            ]),
            QueueOutcome::RateLimited => json!([{ "op": "AddRateLimited", "key": key }]),
        }
    }
}

/// The kind of an event, as Kubernetes spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

impl EventType {
    /// `Normal` or `Warning`.
    pub fn as_str(&self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// A Kubernetes event about an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The object the event is about.
    pub object: ObjectRef,
    /// Normal or Warning.
    pub kind: EventType,
    /// CamelCase reason, e.g. `SuccessfulCreate`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl Event {
    /// A `Normal` event.
    pub fn normal(object: ObjectRef, reason: &str, message: impl Into<String>) -> Self {
        Self {
            object,
            kind: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A `Warning` event.
    pub fn warning(object: ObjectRef, reason: &str, message: impl Into<String>) -> Self {
        Self {
            object,
            kind: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// `{object, type, reason, message}` as in the oracles.
    pub fn to_json(&self) -> Value {
        json!({
            "object": format!("{} {}/{}", self.object.kind, self.object.namespace, self.object.name),
            "type": self.kind.as_str(),
            "reason": self.reason,
            "message": self.message,
        })
    }
}

/// Names an object: kind, namespace, name (and UID when known).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRef {
    /// Kind, e.g. `VirtualMachine`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID, when known.
    pub uid: Option<String>,
}

/// The body of a patch and how the server must interpret it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902 JSON patch (`application/json-patch+json`); `test` operations make it conditional.
    Json,
    /// RFC 7386 JSON merge patch (`application/merge-patch+json`).
    Merge,
    /// Kubernetes strategic merge patch (`application/strategic-merge-patch+json`).
    StrategicMerge,
}

impl PatchType {
    /// The content type.
    pub fn content_type(&self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
        }
    }
}

/// The verb of a write and its payload.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteOp {
    /// Create `object` (complete, as it is to be stored).
    Create {
        /// The object.
        object: Value,
    },
    /// Replace the object (or its subresource) with `object`.
    Update {
        /// The object.
        object: Value,
    },
    /// Patch the object.
    Patch {
        /// How to read `patch`.
        patch_type: PatchType,
        /// The patch document.
        patch: Value,
    },
    /// Delete the object.
    Delete {
        /// Only delete if the stored object still has this UID (a newer object of the same name
        /// must not be deleted by a decision about an older one).
        precondition_uid: Option<String>,
    },
}

impl WriteOp {
    /// `create`, `update`, `patch` or `delete`.
    pub fn verb(&self) -> &'static str {
        match self {
            WriteOp::Create { .. } => "create",
            WriteOp::Update { .. } => "update",
            WriteOp::Patch { .. } => "patch",
            WriteOp::Delete { .. } => "delete",
        }
    }
}

/// Bookkeeping the shell must do in its expectations store BEFORE sending the paired write, and
/// undo if the write fails. It is what keeps a controller whose cache lags behind its own writes
/// from creating (or deleting) the same thing twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expectation {
    /// Expect the cache to show `count` more objects created under the controller key `key`.
    Creations {
        /// Controller key (`namespace/name`).
        key: String,
        /// How many creations.
        count: u32,
    },
    /// Expect the cache to show the controller's own update of the object `key` before acting on
    /// it again (a VMI controller that acted on its pre-update copy would undo its own write).
    ObservedUpdate {
        /// The object's key (`namespace/name`).
        key: String,
    },
    /// Expect the cache to show these objects (by `namespace/name`) deleted under `key`.
    Deletions {
        /// Controller key (`namespace/name`).
        key: String,
        /// The objects to be seen gone.
        objects: Vec<String>,
    },
}

/// One API write: verb, target and payload, plus the expectation to raise first.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiWrite {
    /// Plural resource name, e.g. `virtualmachineinstances`, `pods`, `controllerrevisions`.
    pub resource: String,
    /// Subresource, e.g. `status`.
    pub subresource: Option<String>,
    /// Namespace of the target.
    pub namespace: String,
    /// Name of the target (for a create with `generateName`, the name the oracle server assigns).
    pub name: String,
    /// Verb and payload.
    pub op: WriteOp,
    /// Expectation to raise before sending (and lower if the write fails).
    pub expectation: Option<Expectation>,
}

impl ApiWrite {
    /// A write without expectation.
    pub fn new(resource: &str, namespace: &str, name: &str, op: WriteOp) -> Self {
        Self {
            resource: resource.into(),
            subresource: None,
            namespace: namespace.into(),
            name: name.into(),
            op,
            expectation: None,
        }
    }

    /// The same write against a subresource.
    pub fn on_subresource(mut self, sub: &str) -> Self {
        self.subresource = Some(sub.into());
        self
    }

    /// The same write with an expectation raised first.
    pub fn expecting(mut self, e: Expectation) -> Self {
        self.expectation = Some(e);
        self
    }

    /// Which client KubeVirt would use: `kubevirt` for kubevirt.io resources, `k8s` otherwise.
    pub fn client(&self) -> &'static str {
        match self.resource.as_str() {
            "virtualmachines" | "virtualmachineinstances" | "virtualmachineinstancemigrations" => {
                "kubevirt"
            }
            _ => "k8s",
        }
    }

    /// The write in the shape of an oracle `actions` entry.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("client".into(), json!(self.client()));
        m.insert("verb".into(), json!(self.op.verb()));
        m.insert("resource".into(), json!(self.resource));
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        m.insert("namespace".into(), json!(self.namespace));
        m.insert("name".into(), json!(self.name));
        match &self.op {
            WriteOp::Create { object } | WriteOp::Update { object } => {
                m.insert("object".into(), object.clone());
            }
            WriteOp::Patch { patch_type, patch } => {
                m.insert("patchType".into(), json!(patch_type.content_type()));
                m.insert("patch".into(), patch.clone());
            }
            WriteOp::Delete { precondition_uid } => {
                if let Some(uid) = precondition_uid {
                    m.insert(
                        "DeleteOptions".into(),
                        json!({ "preconditions": { "uid": uid } }),
                    );
                }
            }
        }
        Value::Object(m)
    }
}

/// The clock reading a decision runs at, as RFC 3339 text with second precision (the form
/// Kubernetes stores timestamps in), plus seconds since the epoch for arithmetic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Now {
    /// Seconds since 1970-01-01T00:00:00Z.
    pub unix: i64,
}

impl Now {
    /// `now` from seconds since the epoch.
    pub fn from_unix(unix: i64) -> Self {
        Self { unix }
    }

    /// Parses `YYYY-MM-DDTHH:MM:SSZ` (fractions and numeric offsets accepted).
    pub fn parse(s: &str) -> Option<Self> {
        parse_rfc3339(s).map(Self::from_unix)
    }

    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub fn rfc3339(&self) -> String {
        format_rfc3339(self.unix)
    }
}

/// Parses an RFC 3339 timestamp into seconds since the epoch (fractional seconds dropped).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        r if r.len() == 6 && (r.starts_with('+') || r.starts_with('-')) => {
            let oh: i64 = r.get(1..3)?.parse().ok()?;
            let om: i64 = r.get(4..6)?.parse().ok()?;
            let o = oh * 3600 + om * 60;
            if r.starts_with('+') { o } else { -o }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset)
}

/// Formats seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86400);
    let secs = unix.rem_euclid(86400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

// Howard Hinnant's civil calendar algorithms (public domain description, written anew).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        for s in [
            "2026-01-01T00:00:00Z",
            "1970-01-01T00:00:00Z",
            "2024-02-29T23:59:59Z",
        ] {
            assert_eq!(format_rfc3339(parse_rfc3339(s).unwrap()), s);
        }
        assert_eq!(parse_rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:10.5Z"), Some(10));
        assert_eq!(parse_rfc3339("garbage"), None);
    }

    #[test]
    fn plan_json_has_oracle_field_names() {
        let mut plan = Plan::idle();
        plan.writes.push(
            ApiWrite::new(
                "virtualmachines",
                "default",
                "vm1",
                WriteOp::Patch {
                    patch_type: PatchType::Merge,
                    patch: json!({"status": {"ready": true}}),
                },
            )
            .on_subresource("status"),
        );
        let j = plan.to_json("default/vm1");
        assert_eq!(j["actions"][0]["patchType"], "application/merge-patch+json");
        assert_eq!(j["actions"][0]["client"], "kubevirt");
        assert_eq!(j["queue"][0]["op"], "Forget");
        assert_eq!(j["requeued"], false);
    }
}
