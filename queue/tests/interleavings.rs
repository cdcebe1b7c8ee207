//! Property test: random interleavings of add / add_after / add_rate_limited / get / done /
//! forget / clock steps across several workers, checked against a model after every step.
//!
//! Invariants: a key is never handed to two workers at once; a key is never handed out unless it
//! was added since it was last handed out (a key waiting is never queued twice); every added key
//! is eventually handed out (none lost); the ready queue holds exactly the added, not-yet-taken
//! keys that no worker holds; a graceful shutdown hands out every queued key once and drains.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use kvrs_queue::{
    AddOutcome, ControllerRateLimiter, DoneOutcome, Instant, RateLimiter, ShutdownMode, WorkQueue,
    controller_rate_limiter,
};
use proptest::prelude::*;

const MAX_WORKERS: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    AddAfter(u8, u64),
    AddRateLimited(u8),
    Get(usize),
    Done(usize, Finish),
    Forget(u8),
    Advance(u64),
}

#[derive(Debug, Clone, Copy)]
enum Finish {
    Succeeded,
    Failed,
    Plain,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    let worker = 0usize..MAX_WORKERS;
    prop_oneof![
        4 => key.clone().prop_map(Op::Add),
        2 => (key.clone(), 0u64..40).prop_map(|(k, d)| Op::AddAfter(k, d)),
        1 => key.clone().prop_map(Op::AddRateLimited),
        4 => worker.clone().prop_map(Op::Get),
        3 => (worker, prop_oneof![Just(Finish::Succeeded), Just(Finish::Failed), Just(Finish::Plain)])
            .prop_map(|(w, f)| Op::Done(w, f)),
        1 => key.prop_map(Op::Forget),
        2 => (0u64..60).prop_map(Op::Advance),
    ]
}

/// What the queue must look like from outside.
struct Model {
    now: Instant,
    held: Vec<Option<u8>>,
    /// Added since last handed out (queued, or re-added while held).
    owed: HashSet<u8>,
    /// Earliest scheduled add per key.
    timers: HashMap<u8, Instant>,
    limiter: ControllerRateLimiter<u8>,
    shut: bool,
}

impl Model {
    fn new(workers: usize) -> Self {
        Model {
            now: Instant::ZERO,
            held: vec![None; workers],
            owed: HashSet::new(),
            timers: HashMap::new(),
            limiter: controller_rate_limiter(),
            shut: false,
        }
    }

    fn schedule(&mut self, k: u8, delay: Duration) {
        if self.shut {
            return;
        }
        if delay.is_zero() {
            self.owed.insert(k);
            return;
        }
        let due = self.now + delay;
        let slot = self.timers.entry(k).or_insert(due);
        *slot = (*slot).min(due);
    }

    fn fire_timers(&mut self) {
        let now = self.now;
        let fired: Vec<u8> = self
            .timers
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in fired {
            self.timers.remove(&k);
            self.owed.insert(k);
        }
    }

    fn is_held(&self, k: u8) -> bool {
        self.held.contains(&Some(k))
    }

    fn ready(&self) -> usize {
        self.owed.iter().filter(|k| !self.is_held(**k)).count()
    }
}

fn step(q: &mut WorkQueue<u8>, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    match *op {
        Op::Add(k) => {
            let out = q.add(k, m.now);
            if m.shut {
                prop_assert_eq!(out, AddOutcome::Rejected);
            } else {
                let want = if m.is_held(k) {
                    AddOutcome::AfterDone
                } else if m.owed.contains(&k) {
                    AddOutcome::AlreadyQueued
                } else {
                    AddOutcome::Queued
                };
                prop_assert_eq!(out, want);
                m.owed.insert(k);
            }
        }
        Op::AddAfter(k, ms) => {
            q.add_after(k, Duration::from_millis(ms), m.now);
            m.schedule(k, Duration::from_millis(ms));
        }
        Op::AddRateLimited(k) => {
            q.add_rate_limited(k, m.now);
            if !m.shut {
                let d = m.limiter.when(&k, m.now);
                m.schedule(k, d);
            }
        }
        Op::Forget(k) => {
            q.forget(&k);
            m.limiter.forget(&k);
            prop_assert_eq!(q.num_requeues(&k), 0);
        }
        Op::Advance(ms) => m.now += Duration::from_millis(ms),
        Op::Get(w) => {
            if w >= m.held.len() || m.held[w].is_some() {
                return Ok(());
            }
            m.fire_timers();
            match q.get(m.now) {
                Some(k) => {
                    prop_assert!(!m.is_held(k), "key {} handed to two workers", k);
                    prop_assert!(
                        m.owed.remove(&k),
                        "key {} handed out without being added",
                        k
                    );
                    m.held[w] = Some(k);
                }
                None => {
                    let lost: Vec<_> = m.owed.iter().filter(|k| !m.is_held(**k)).collect();
                    prop_assert!(lost.is_empty(), "keys {:?} added but not handed out", lost);
                }
            }
        }
        Op::Done(w, finish) => {
            let Some(k) = m.held.get(w).copied().flatten() else {
                return Ok(());
            };
            match finish {
                Finish::Succeeded => {
                    q.forget(&k);
                    m.limiter.forget(&k);
                }
                Finish::Failed => {
                    q.add_rate_limited(k, m.now);
                    if !m.shut {
                        let d = m.limiter.when(&k, m.now);
                        m.schedule(k, d);
                    }
                }
                Finish::Plain => {}
            }
            let want = if m.owed.contains(&k) {
                DoneOutcome::Requeued
            } else {
                DoneOutcome::Finished
            };
            prop_assert_eq!(q.done(&k, m.now), want);
            m.held[w] = None;
        }
    }
    check(q, m)
}

fn check(q: &WorkQueue<u8>, m: &Model) -> Result<(), TestCaseError> {
    // The ready queue is exactly the owed keys no worker holds: no duplicates, nothing extra.
    prop_assert_eq!(q.len(), m.ready());
    prop_assert_eq!(q.processing_len(), m.held.iter().flatten().count());
    prop_assert_eq!(q.delayed_len(), m.timers.len());
    prop_assert_eq!(q.next_wakeup(), m.timers.values().min().copied());
    for k in 0..6u8 {
        prop_assert_eq!(q.num_requeues(&k), m.limiter.num_requeues(&k));
        prop_assert_eq!(q.is_processing(&k), m.is_held(k));
    }
    Ok(())
}

/// Lets every worker finish and fetch until nothing is left; every owed key comes out.
fn drain(q: &mut WorkQueue<u8>, m: &mut Model) -> Result<(), TestCaseError> {
    m.now += Duration::from_secs(10_000); // past any backoff
    for _ in 0..100 {
        for w in 0..m.held.len() {
            step(q, m, &Op::Done(w, Finish::Plain))?;
        }
        for w in 0..m.held.len() {
            step(q, m, &Op::Get(w))?;
        }
        if m.held.iter().all(Option::is_none) && m.owed.is_empty() {
            break;
        }
    }
    prop_assert!(
        m.owed.is_empty() && m.timers.is_empty(),
        "work left after draining"
    );
    prop_assert!(q.is_idle());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_keep_the_queue_invariants(
        workers in 1usize..=MAX_WORKERS,
        ops in proptest::collection::vec(op(), 1..200),
        shutdown_at_end in any::<bool>(),
    ) {
        let mut q = WorkQueue::<u8>::new();
        let mut m = Model::new(workers);
        for op in &ops {
            step(&mut q, &mut m, op)?;
        }
        if shutdown_at_end {
            q.shutdown(ShutdownMode::DrainQueued);
            m.shut = true;
            m.timers.clear();
            check(&q, &m)?;
            drain(&mut q, &mut m)?;
            prop_assert!(q.is_drained());
        } else {
            drain(&mut q, &mut m)?;
        }
    }
}
