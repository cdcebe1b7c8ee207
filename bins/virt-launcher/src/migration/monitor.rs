//! What a running migration needs, decided from plain numbers: KubeVirt v1.9.0's legacy
//! convergence handling (`handleLegacyConvergence`), which is what it does when no stall
//! detector options are given.
//!
//! Why a state machine apart from libvirt: the decision depends only on elapsed time, the
//! progress QEMU reports and the options, so tests (and a proptest) can drive it through every
//! case without a guest.

use super::{MigrationOptions, QEMU_MAX_DOWNTIME_MS};

/// The migration's mode as the metadata records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Memory copied while the guest runs.
    PreCopy,
    /// The guest runs on the target, pages pulled on demand: nothing may be aborted now.
    PostCopy,
    /// The guest was paused (or the downtime raised) so the copy can finish.
    Paused,
}

impl Mode {
    /// `v1.MigrationMode`'s spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::PreCopy => "PreCopy",
            Mode::PostCopy => "PostCopy",
            Mode::Paused => "Paused",
        }
    }
}

/// What the monitor does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    Continue,
    /// `virDomainMigrateStartPostCopy`, then mode PostCopy.
    StartPostCopy,
    /// Pause the guest so the copy converges, then mode Paused.
    Suspend,
    /// Raise QEMU's max downtime to this many ms (a guest with VFIO devices), then mode Paused.
    SetMaxDowntime(u64),
    /// Abort the migration, for this reason.
    Abort(String),
}

/// The monitor's memory between two polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitor {
    /// Seconds the whole migration may take (`CompletionTimeoutPerGiB` x data GB; 0: no limit).
    pub acceptable_completion_secs: i64,
    /// Seconds without progress before an abort (0: no limit).
    pub progress_timeout_secs: i64,
    /// May the guest be disrupted (post-copy or a pause) to finish.
    pub allow_workload_disruption: bool,
    /// May the migration switch to post-copy.
    pub allow_post_copy: bool,
    /// The guest has VFIO devices (no post-copy, no pause: a raised downtime instead).
    pub has_vfio: bool,
    /// The current mode.
    pub mode: Mode,
    /// Lowest `data_remaining` seen (0: none yet).
    watermark: u64,
    /// Elapsed seconds when progress was last seen.
    last_progress_secs: i64,
}

impl Monitor {
    /// A monitor for a migration of `data_gb` GB with these options.
    pub fn new(o: &MigrationOptions, data_gb: i64, has_vfio: bool) -> Monitor {
        Monitor {
            acceptable_completion_secs: o.completion_timeout_per_gib.saturating_mul(data_gb),
            progress_timeout_secs: o.progress_timeout,
            allow_workload_disruption: o.allow_workload_disruption,
            allow_post_copy: o.allow_post_copy,
            has_vfio,
            mode: Mode::PreCopy,
            watermark: 0,
            last_progress_secs: 0,
        }
    }

    /// Records QEMU's `data_remaining` at `elapsed_secs`: less than ever before is progress.
    pub fn observe(&mut self, elapsed_secs: i64, data_remaining: Option<u64>) {
        let remaining = data_remaining.unwrap_or(self.watermark);
        if self.watermark == 0 || remaining < self.watermark {
            self.last_progress_secs = elapsed_secs;
        }
        self.watermark = remaining;
    }

    fn timed_out(&self, elapsed_secs: i64) -> bool {
        self.acceptable_completion_secs != 0 && elapsed_secs > self.acceptable_completion_secs
    }

    /// The next action at `elapsed_secs`; `abort_in_progress` when a cancel is already running.
    pub fn decide(&self, elapsed_secs: i64, abort_in_progress: bool) -> Action {
        if self.mode == Mode::PostCopy {
            // The guest already runs on the target: aborting would lose it.
            return Action::Continue;
        }
        let timed_out = self.timed_out(elapsed_secs);
        if self.allow_workload_disruption && timed_out && self.mode != Mode::Paused {
            return if self.allow_post_copy && !self.has_vfio {
                Action::StartPostCopy
            } else if self.has_vfio {
                let secs =
                    u64::try_from(self.acceptable_completion_secs.saturating_mul(2)).unwrap_or(0);
                Action::SetMaxDowntime(secs.saturating_mul(1000).min(QEMU_MAX_DOWNTIME_MS))
            } else {
                Action::Suspend
            };
        }
        let stuck_for = elapsed_secs - self.last_progress_secs;
        if self.progress_timeout_secs != 0 && stuck_for > self.progress_timeout_secs {
            if abort_in_progress {
                return Action::Continue;
            }
            return Action::Abort(format!("Aborting migration: stuck for {stuck_for} seconds"));
        }
        if timed_out && !abort_in_progress {
            return Action::Abort(format!(
                "Aborting migration: not completed after {} seconds",
                self.acceptable_completion_secs
            ));
        }
        Action::Continue
    }

    /// Records that `action` was carried out.
    pub fn applied(&mut self, action: &Action) {
        match action {
            Action::StartPostCopy => self.mode = Mode::PostCopy,
            Action::Suspend => {
                self.acceptable_completion_secs = self.acceptable_completion_secs.saturating_mul(2);
                self.mode = Mode::Paused;
            }
            Action::SetMaxDowntime(_) => {
                self.acceptable_completion_secs = self.acceptable_completion_secs.saturating_mul(2);
                self.mode = Mode::Paused;
            }
            Action::Continue | Action::Abort(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn options(per_gib: i64, progress: i64, disrupt: bool, post_copy: bool) -> MigrationOptions {
        MigrationOptions {
            completion_timeout_per_gib: per_gib,
            progress_timeout: progress,
            allow_workload_disruption: disrupt,
            allow_post_copy: post_copy,
            ..MigrationOptions::default()
        }
    }

    #[test]
    fn a_progressing_migration_within_its_time_continues() {
        let mut m = Monitor::new(&options(150, 150, false, false), 1, false);
        for t in 0..100 {
            m.observe(t, Some(1000 - u64::try_from(t).unwrap()));
            assert_eq!(m.decide(t, false), Action::Continue);
        }
    }

    #[test]
    fn no_progress_past_the_progress_timeout_aborts_once() {
        let mut m = Monitor::new(&options(0, 10, false, false), 1, false);
        m.observe(0, Some(500));
        m.observe(5, Some(500));
        assert_eq!(m.decide(10, false), Action::Continue);
        m.observe(11, Some(600));
        assert_eq!(
            m.decide(11, false),
            Action::Abort("Aborting migration: stuck for 11 seconds".into())
        );
        assert_eq!(m.decide(11, true), Action::Continue);
    }

    #[test]
    fn completion_timeout_aborts_or_helps_as_the_options_allow() {
        // 2 GB at 10 s/GB: 20 s.
        let abort = Monitor::new(&options(10, 0, false, true), 2, false);
        assert_eq!(abort.decide(20, false), Action::Continue);
        assert_eq!(
            abort.decide(21, false),
            Action::Abort("Aborting migration: not completed after 20 seconds".into())
        );
        let mut post = Monitor::new(&options(10, 0, true, true), 2, false);
        assert_eq!(post.decide(21, false), Action::StartPostCopy);
        post.applied(&Action::StartPostCopy);
        assert_eq!(post.decide(10_000, false), Action::Continue);
        let mut pause = Monitor::new(&options(10, 0, true, false), 2, false);
        assert_eq!(pause.decide(21, false), Action::Suspend);
        pause.applied(&Action::Suspend);
        assert_eq!(pause.decide(40, false), Action::Continue);
        assert!(matches!(pause.decide(41, false), Action::Abort(_)));
        let vfio = Monitor::new(&options(10, 0, true, true), 2, true);
        assert_eq!(vfio.decide(21, false), Action::SetMaxDowntime(40_000));
    }

    proptest! {
        #[test]
        fn decisions_respect_kubevirts_rules(
            per_gib in 0i64..200,
            gb in 0i64..64,
            progress in 0i64..300,
            disrupt: bool,
            post_copy: bool,
            vfio: bool,
            aborting: bool,
            samples in proptest::collection::vec((0i64..5, proptest::option::of(0u64..10_000)), 1..40),
        ) {
            let o = options(per_gib, progress, disrupt, post_copy);
            let mut m = Monitor::new(&o, gb, vfio);
            let mut t = 0;
            for (dt, remaining) in samples {
                t += dt;
                m.observe(t, remaining);
                let a = m.decide(t, aborting);
                // Never an abort while another is under way, never anything in post-copy.
                if aborting { prop_assert!(!matches!(a, Action::Abort(_))); }
                if m.mode == Mode::PostCopy { prop_assert_eq!(&a, &Action::Continue); }
                // Post-copy only when allowed and possible; disruption only when allowed.
                if a == Action::StartPostCopy { prop_assert!(post_copy && disrupt && !vfio); }
                if matches!(a, Action::Suspend | Action::SetMaxDowntime(_)) { prop_assert!(disrupt); }
                if let Action::SetMaxDowntime(ms) = a { prop_assert!(ms <= QEMU_MAX_DOWNTIME_MS); }
                // With no limits at all, nothing ever happens.
                if progress == 0 && (per_gib == 0 || gb == 0) {
                    prop_assert_eq!(&a, &Action::Continue);
                }
                m.applied(&a);
            }
        }
    }
}
