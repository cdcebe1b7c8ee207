//! Leader election on a `coordination.k8s.io/v1` Lease, the way KubeVirt's virt-controller runs
//! it through client-go's `leaderelection` package (Lease `kubevirt/virt-controller`, 15 s lease,
//! 10 s renew deadline, 2 s retry period).
//!
//! Only one replica may write KubeVirt objects at a time, so the leader must stop writing
//! *before* a standby can take over: it gives up after `renew_deadline` without a successful
//! renewal, while a standby waits a full `lease_duration` (longer) after it last saw the record
//! change. Both intervals are measured on each process's own monotonic clock; the Lease's
//! `renewTime` is written for humans and never compared with the local wall clock, so clock skew
//! between nodes cannot make a standby take over early.
//!
//! The decision (create, renew, take over or wait) is the plain `Election` below, tested on a
//! fake clock; [`LeaderElector`] is the IO around it.
//!
//! ## Why not kube-lease-manager or kube-leader-election
//!
//! kube-rs has no leader election (kube-rs/kube#485), and the two crates.io crates that add one
//! (read at kube-lease-manager 0.13.1 and kube-leader-election 0.44.0) lack the property this
//! module exists for, fencing: a leader that cannot renew must stop *before* a standby may
//! take over. Both decide that a lease has expired by adding `leaseDurationSeconds` to the
//! holder's `renewTime` and comparing with the local wall clock, so skew between nodes moves
//! the takeover (kube-lease-manager's `grace` is the skew it tolerates), where client-go and
//! this module count from when the record was last *seen* to change. Neither has a renew
//! deadline: kube-lease-manager renews `grace` seconds before expiry and, when that renewal
//! fails, logs it and retries with backoff while its channel still says leading, so a leader
//! cut off from the API server keeps leading after its lease has expired and a standby took it
//! over; kube-leader-election is one `try_acquire_or_renew` call the caller loops around, with
//! no deadline, timeout or leadership signal. Its takeover and renewal are merge patches
//! without a `resourceVersion` precondition, so two standbys that both find the lease expired
//! both succeed and both lead (here the write carries the read's `resourceVersion`, and the
//! loser gets a 409). kube-lease-manager's timing is two whole-second knobs (`duration`,
//! `grace`), so KubeVirt's lease duration / renew deadline / retry period (15 s / 10 s / 2 s,
//! the tests' 3 s / 2 s / 0.5 s) cannot be expressed; kube-leader-election leaves all three to
//! its caller. kube-lease-manager also takes a lease over by first clearing the holder with an
//! unconditional patch, which clears a live holder when the standby's clock runs ahead, and
//! kube-leader-election 0.44 depends on kube 4, where this workspace uses kube 5. What either
//! crate would save is the read-and-write round (about 100 lines here); the timing, the
//! fencing and the client-go-compatible record (`holderIdentity`, `leaseTransitions`, release
//! as `holderIdentity: ""` with `leaseDurationSeconds: 1`) would still have to be written
//! around it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{Instrument, debug, info, info_span, warn};

/// Where the lease lives, who this candidate is, and the election's timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The Lease's namespace (KubeVirt: its install namespace, `kubevirt`).
    pub namespace: String,
    /// The Lease's name (KubeVirt: `virt-controller`).
    pub name: String,
    /// This candidate's holder identity; unique per replica (KubeVirt: the pod name).
    pub identity: String,
    /// How long a standby waits after the record last changed before taking the lease over.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives leadership up.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// KubeVirt's virt-controller timing: 15 s lease, 10 s renew deadline, 2 s retry period.
    pub fn kubevirt(namespace: &str, name: &str, identity: &str) -> Self {
        LeaseConfig {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Checks client-go's invariants: without them a leader could still be writing when a
    /// standby takes over.
    fn validate(&self) -> Result<(), LeaseError> {
        let invalid = |reason: &'static str| Err(LeaseError::InvalidConfig { reason });
        if self.identity.is_empty() {
            return invalid("identity must not be empty");
        }
        if self.namespace.is_empty() || self.name.is_empty() {
            return invalid("namespace and name must not be empty");
        }
        if self.retry_period.is_zero() {
            return invalid("retry_period must be positive");
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid("lease_duration must be greater than renew_deadline");
        }
        if self.renew_deadline <= self.retry_period {
            return invalid("renew_deadline must be greater than retry_period");
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written: whole seconds, rounded up, at least one.
    fn lease_duration_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
    }

    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Why a lease operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The configuration breaks the election's timing invariants.
    #[error("invalid lease config: {reason}")]
    InvalidConfig {
        /// Which invariant.
        reason: &'static str,
    },
    /// The API server answered a read or write with an error.
    #[error("lease {lease}: {verb} failed: {source}")]
    Api {
        /// `namespace/name` of the Lease.
        lease: String,
        /// `get`, `create` or `replace`.
        verb: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Another candidate wrote the Lease between this one's read and write (409).
    #[error("lease {lease}: another candidate wrote it first")]
    Conflict {
        /// `namespace/name` of the Lease.
        lease: String,
    },
    /// A read-and-write round did not complete in time.
    #[error("lease {lease}: no answer within {timeout:?}")]
    Timeout {
        /// `namespace/name` of the Lease.
        lease: String,
        /// How long was waited.
        timeout: Duration,
    },
}

impl LeaseError {
    /// A stable, low-cardinality name for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            LeaseError::InvalidConfig { .. } => "invalid_config",
            LeaseError::Api { verb: "get", .. } => "api_read",
            LeaseError::Api { .. } => "api_write",
            LeaseError::Conflict { .. } => "conflict",
            LeaseError::Timeout { .. } => "timeout",
        }
    }
}

/// Why [`LeaderElector::hold`] returned: this process no longer leads and must stop writing.
#[derive(Debug)]
pub enum LeaseLost {
    /// No renewal succeeded within `renew_deadline`.
    RenewDeadline {
        /// The last failed attempt's error, if an attempt failed rather than hung.
        last_error: Option<LeaseError>,
    },
    /// Another candidate's identity (empty when someone cleared it) is in the Lease now.
    Stolen {
        /// The holder found in the Lease.
        holder: String,
    },
    /// `hold` was called without holding the lease.
    NotLeading,
}

impl LeaseLost {
    /// A stable name for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            LeaseLost::RenewDeadline { .. } => "renew_deadline",
            LeaseLost::Stolen { .. } => "stolen",
            LeaseLost::NotLeading => "not_leading",
        }
    }
}

/// The parts of a Lease the election compares: any change restarts a standby's wait.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LeaseRecord {
    /// The holder; empty when nobody holds it (never acquired, or released).
    pub(crate) holder: String,
    /// `leaseDurationSeconds` as written by the holder.
    pub(crate) duration_seconds: Option<i32>,
    pub(crate) acquire_time: Option<MicroTime>,
    pub(crate) renew_time: Option<MicroTime>,
    pub(crate) transitions: i32,
}

impl LeaseRecord {
    fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else {
            return LeaseRecord::default();
        };
        LeaseRecord {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            duration_seconds: spec.lease_duration_seconds,
            acquire_time: spec.acquire_time.clone(),
            renew_time: spec.renew_time.clone(),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

/// What a candidate should do with the Lease it just read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// There is no Lease: create it, holding it.
    Create,
    /// This candidate holds it: write a new renewTime.
    Renew,
    /// Nobody holds it, or the holder has not changed it for its lease duration: take it over.
    TakeOver,
    /// Someone else holds it and it has not expired yet.
    Wait {
        /// The current holder.
        holder: String,
    },
}

/// The election's memory between reads: the record last seen and when, on this process's
/// monotonic clock, it last changed.
#[derive(Debug)]
pub(crate) struct Election {
    identity: String,
    /// Used when the record carries no positive `leaseDurationSeconds`.
    default_duration: Duration,
    observed: Option<(LeaseRecord, Instant)>,
}

impl Election {
    pub(crate) fn new(identity: &str, default_duration: Duration) -> Self {
        Election {
            identity: identity.to_owned(),
            default_duration,
            observed: None,
        }
    }

    /// Records what was read (`None`: no Lease). Only a *change* resets the observation time,
    /// so a holder that stopped renewing expires `lease_duration` after its last write was seen.
    pub(crate) fn observe(&mut self, record: Option<LeaseRecord>, now: Instant) {
        self.observed = match (record, self.observed.take()) {
            (None, _) => None,
            (Some(record), Some((seen, at))) if seen == record => Some((seen, at)),
            (Some(record), _) => Some((record, now)),
        };
    }

    /// Whether the observed record is older than its lease duration (or there is none).
    pub(crate) fn expired(&self, now: Instant) -> bool {
        let Some((record, at)) = &self.observed else {
            return true;
        };
        let duration = record
            .duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|&s| s > 0)
            .map_or(self.default_duration, Duration::from_secs);
        now >= *at + duration
    }

    /// client-go's `tryAcquireOrRenew` decision for the last observed record.
    pub(crate) fn step(&self, now: Instant) -> Step {
        match &self.observed {
            None => Step::Create,
            Some((record, _)) if record.holder == self.identity => Step::Renew,
            Some((record, _)) if record.holder.is_empty() || self.expired(now) => Step::TakeOver,
            Some((record, _)) => Step::Wait {
                holder: record.holder.clone(),
            },
        }
    }
}

/// The spec this candidate writes for `step`, from the spec it read (`None` when creating).
/// `now` is only written (for humans and client-go tooling), never compared.
fn next_spec(
    step: &Step,
    read: Option<&LeaseSpec>,
    identity: &str,
    duration_seconds: i32,
    now: Timestamp,
) -> LeaseSpec {
    let read = read.cloned().unwrap_or_default();
    let (acquire_time, transitions) = match step {
        Step::Renew => (
            read.acquire_time.clone(),
            read.lease_transitions.unwrap_or(0),
        ),
        Step::TakeOver => (
            Some(MicroTime(now)),
            read.lease_transitions.unwrap_or(0).saturating_add(1),
        ),
        Step::Create | Step::Wait { .. } => (Some(MicroTime(now)), 0),
    };
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(duration_seconds),
        acquire_time,
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..read
    }
}

/// Whether a round may take the lease over, or only renew it (while leading: anything else
/// means it was lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Acquire,
    Renew,
}

/// The outcome of one read-and-write round.
#[derive(Debug)]
enum Round {
    Leading,
    HeldBy(String),
}

/// One candidate in the election on one Lease; see the [module documentation](self).
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    election: Election,
    leading: watch::Sender<bool>,
    /// When the last successful write of this candidate's lease was answered.
    renewed_at: Instant,
}

impl LeaderElector {
    /// A candidate that has not tried to acquire yet (it does no IO until [`acquire`](Self::acquire)).
    pub fn new(client: kube::Client, config: LeaseConfig) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            election: Election::new(&config.identity, config.lease_duration),
            config,
            leading: watch::Sender::new(false),
            renewed_at: Instant::now(),
        }
    }

    /// Waits (retrying every retry_period) until this process holds the lease.
    ///
    /// API errors are logged and retried, as client-go does: a standby that cannot reach the
    /// API server simply stays a standby. Fails only on an invalid [`LeaseConfig`].
    pub async fn acquire(&mut self) -> Result<(), LeaseError> {
        self.config.validate()?;
        let span = self.span();
        async {
            loop {
                match self.bounded_round(Mode::Acquire).await {
                    Ok(Round::Leading) => {
                        info!("acquired the lease");
                        self.leading.send_replace(true);
                        return Ok(());
                    }
                    Ok(Round::HeldBy(holder)) => debug!(%holder, "lease held by another candidate"),
                    // Losing a race is routine; failing to reach the API server is not.
                    Err(e @ LeaseError::Conflict { .. }) => debug!(error = %e, "lost a write race"),
                    Err(e) => {
                        warn!(error = %e, label = e.label(), "lease acquisition round failed")
                    }
                }
                tokio::time::sleep(self.config.retry_period).await;
            }
        }
        .instrument(span)
        .await
    }

    /// Renews every retry_period while leading; returns when leadership is lost: a renewal did
    /// not succeed within renew_deadline, or another holder took the lease. The caller must stop
    /// all writes and exit (fencing).
    pub async fn hold(&mut self) -> LeaseLost {
        if !*self.leading.borrow() {
            return LeaseLost::NotLeading;
        }
        let span = self.span();
        let lost = async {
            let retry = self.config.retry_period;
            let mut next = self.renewed_at + retry;
            let mut last_error = None;
            loop {
                tokio::time::sleep_until(next).await;
                let deadline = self.renewed_at + self.config.renew_deadline;
                match tokio::time::timeout_at(deadline, self.round(Mode::Renew)).await {
                    Ok(Ok(Round::Leading)) => last_error = None,
                    Ok(Ok(Round::HeldBy(holder))) => return LeaseLost::Stolen { holder },
                    Ok(Err(e)) => {
                        warn!(error = %e, label = e.label(), "lease renewal failed");
                        last_error = Some(e);
                    }
                    Err(_elapsed) => {}
                }
                let now = Instant::now();
                // `round` moved `renewed_at` on success, so this is the renewal's deadline.
                let deadline = self.renewed_at + self.config.renew_deadline;
                if now >= deadline {
                    return LeaseLost::RenewDeadline { last_error };
                }
                // One period on, but the last try no later than the deadline.
                next = (now + retry).min(deadline);
            }
        }
        .instrument(span.clone())
        .await;
        self.leading.send_replace(false);
        span.in_scope(|| warn!(reason = lost.label(), "lost the lease"));
        lost
    }

    /// Gives the lease up on graceful stop so a standby takes over at once (holderIdentity
    /// cleared / leaseDurationSeconds 1, as client-go's ReleaseOnCancel).
    ///
    /// A no-op when this process does not lead, or when the Lease already names someone else.
    /// Leadership ends locally before the write, so [`leading`](Self::leading) turns false even
    /// if the write fails (the lease then expires on its own).
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        if !self.leading.send_replace(false) {
            return Ok(());
        }
        let span = self.span();
        let timeout = self.config.renew_deadline;
        let lease = self.config.key();
        let released = async {
            let Some(mut read) = self.get().await? else {
                return Ok(());
            };
            let mut spec = read.spec.take().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = Some(String::new());
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            read.spec = Some(spec);
            self.replace(&read).await?;
            Ok(())
        };
        let result = tokio::time::timeout(timeout, released)
            .instrument(span.clone())
            .await
            .unwrap_or(Err(LeaseError::Timeout { lease, timeout }));
        span.in_scope(|| match &result {
            Ok(()) => info!("released the lease"),
            Err(e) => warn!(error = %e, "releasing the lease failed; it expires on its own"),
        });
        result
    }

    /// Leadership as a watch channel for metrics/readiness.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn span(&self) -> tracing::Span {
        info_span!("lease", lease = %self.config.key(), identity = %self.config.identity)
    }

    /// One round, bounded by `renew_deadline` so a hung request cannot stall acquisition.
    async fn bounded_round(&mut self, mode: Mode) -> Result<Round, LeaseError> {
        let timeout = self.config.renew_deadline;
        let lease = self.config.key();
        tokio::time::timeout(timeout, self.round(mode))
            .await
            .unwrap_or(Err(LeaseError::Timeout { lease, timeout }))
    }

    /// Reads the Lease, decides, and writes it with the read's resourceVersion.
    async fn round(&mut self, mode: Mode) -> Result<Round, LeaseError> {
        let read = self.get().await?;
        self.election.observe(
            read.as_ref()
                .map(|l| LeaseRecord::from_spec(l.spec.as_ref())),
            Instant::now(),
        );
        let step = self.election.step(Instant::now());
        match (&step, mode) {
            (Step::Wait { holder }, _) => return Ok(Round::HeldBy(holder.clone())),
            (Step::Create | Step::TakeOver, Mode::Renew) => {
                let holder = read
                    .as_ref()
                    .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
                    .unwrap_or_default();
                return Ok(Round::HeldBy(holder));
            }
            _ => {}
        }
        let spec = next_spec(
            &step,
            read.as_ref().and_then(|l| l.spec.as_ref()),
            &self.config.identity,
            self.config.lease_duration_seconds(),
            Timestamp::now(),
        );
        let written = match read {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.write("create", self.api.create(&PostParams::default(), &lease))
                    .await?
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.replace(&lease).await?
            }
        };
        if step == Step::TakeOver {
            info!(transitions = ?written.spec.as_ref().and_then(|s| s.lease_transitions), "took the lease over");
        }
        self.renewed_at = Instant::now();
        self.election.observe(
            Some(LeaseRecord::from_spec(written.spec.as_ref())),
            self.renewed_at,
        );
        Ok(Round::Leading)
    }

    async fn get(&self) -> Result<Option<Lease>, LeaseError> {
        self.api
            .get_opt(&self.config.name)
            .await
            .map_err(|source| LeaseError::Api {
                lease: self.config.key(),
                verb: "get",
                source,
            })
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        let pp = PostParams::default();
        self.write("replace", self.api.replace(&self.config.name, &pp, lease))
            .await
    }

    /// Maps a write's 409 (Conflict, AlreadyExists) to [`LeaseError::Conflict`]: someone else won.
    async fn write(
        &self,
        verb: &'static str,
        request: impl Future<Output = Result<Lease, kube::Error>>,
    ) -> Result<Lease, LeaseError> {
        request.await.map_err(|source| match source {
            kube::Error::Api(status) if status.code == 409 => LeaseError::Conflict {
                lease: self.config.key(),
            },
            source => LeaseError::Api {
                lease: self.config.key(),
                verb,
                source,
            },
        })
    }
}

impl Drop for LeaderElector {
    /// A dropped elector no longer renews, so it no longer leads.
    fn drop(&mut self) {
        self.leading.send_replace(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn record(holder: &str, renew: i64) -> LeaseRecord {
        LeaseRecord {
            holder: holder.to_owned(),
            duration_seconds: Some(15),
            renew_time: Some(MicroTime(Timestamp::from_second(renew).unwrap())),
            ..LeaseRecord::default()
        }
    }

    #[test]
    fn kubevirt_timing_is_valid() {
        let config = LeaseConfig::kubevirt("kubevirt", "virt-controller", "pod-a");
        assert_eq!(config.lease_duration, 15 * SECOND);
        assert_eq!(config.renew_deadline, 10 * SECOND);
        assert_eq!(config.retry_period, 2 * SECOND);
        assert_eq!(config.lease_duration_seconds(), 15);
        config.validate().unwrap();
    }

    #[test]
    fn renew_deadline_must_end_before_the_lease() {
        let mut config = LeaseConfig::kubevirt("kubevirt", "virt-controller", "pod-a");
        config.renew_deadline = config.lease_duration;
        assert_eq!(config.validate().unwrap_err().label(), "invalid_config");
    }

    #[test]
    fn no_lease_means_create() {
        let election = Election::new("a", 15 * SECOND);
        assert_eq!(election.step(Instant::now()), Step::Create);
    }

    #[test]
    fn another_holder_expires_a_lease_duration_after_the_last_change_seen() {
        let t0 = Instant::now();
        let mut election = Election::new("a", 15 * SECOND);
        // renewTime decades in the past: skew must not matter, only the local observation.
        election.observe(Some(record("b", 1)), t0);
        let wait = Step::Wait { holder: "b".into() };
        assert_eq!(election.step(t0), wait);
        // The holder renews at t0+10s: the wait restarts from there.
        election.observe(Some(record("b", 2)), t0 + 10 * SECOND);
        election.observe(Some(record("b", 2)), t0 + 20 * SECOND);
        assert_eq!(election.step(t0 + 24 * SECOND), wait);
        assert_eq!(election.step(t0 + 25 * SECOND), Step::TakeOver);
    }

    #[test]
    fn the_records_own_lease_duration_counts() {
        let t0 = Instant::now();
        let mut election = Election::new("a", 15 * SECOND);
        let mut released = record("b", 1);
        released.duration_seconds = Some(1);
        election.observe(Some(released), t0);
        assert!(!election.expired(t0));
        assert!(election.expired(t0 + SECOND));
    }

    #[test]
    fn an_empty_holder_is_free_at_once_and_own_holder_renews() {
        let t0 = Instant::now();
        let mut election = Election::new("a", 15 * SECOND);
        election.observe(Some(record("", 1)), t0);
        assert_eq!(election.step(t0), Step::TakeOver);
        election.observe(Some(record("a", 1)), t0);
        assert_eq!(election.step(t0 + 100 * SECOND), Step::Renew);
        election.observe(None, t0);
        assert_eq!(election.step(t0), Step::Create);
    }

    #[test]
    fn take_over_counts_a_transition_and_renew_keeps_it() {
        let now = Timestamp::from_second(1_000).unwrap();
        let read = LeaseSpec {
            holder_identity: Some("b".into()),
            lease_transitions: Some(3),
            acquire_time: Some(MicroTime(Timestamp::from_second(10).unwrap())),
            ..LeaseSpec::default()
        };
        let taken = next_spec(&Step::TakeOver, Some(&read), "a", 15, now);
        assert_eq!(taken.holder_identity.as_deref(), Some("a"));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.renew_time, Some(MicroTime(now)));
        assert_eq!(taken.lease_duration_seconds, Some(15));
        let renewed = next_spec(&Step::Renew, Some(&read), "a", 15, now);
        assert_eq!(renewed.lease_transitions, Some(3));
        assert_eq!(renewed.acquire_time, read.acquire_time);
        let created = next_spec(&Step::Create, None, "a", 15, now);
        assert_eq!(created.lease_transitions, Some(0));
    }
}
