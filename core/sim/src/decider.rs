//! The decision thread: shares the deciding of virt-controller's syncs with the simulator's
//! thread, which executes their plans in queue order.
//!
//! A pass's jobs are claimed one at a time, in order, by whichever thread is free: the
//! decision thread claims the next job as soon as it finished one; the simulator's thread
//! takes the plan it must execute next if it is there, and otherwise claims (and decides)
//! the next unclaimed job itself instead of waiting. Handing the decisions to the other thread
//! alone left the simulator's thread idle whenever a decision took longer than executing the
//! plan before it (a VMI status decision serialises most of the VMI): about 3.9 s of a
//! 10 000-VM run. A decision reads only the pass's cache, configuration and time, so its plan
//! is the same whichever thread decides it, and a run stays what its seed makes it.
//!
//! One thread lives as long as the simulator (a thread per pass cost a thread start each time).
//!
//! Between passes the decision thread would idle while the simulator's thread runs the
//! handlers and the kubelet, so it also drops what the simulator's thread hands it
//! ([`Decider::discard`]): the object versions the API server's event log lets go. Dropping
//! a version walks its whole tree (about a tenth of the simulator's thread before); handing a
//! batch over is one channel send. A pass comes first: garbage is dropped only while no pass
//! message waits, a few items at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use k8s_openapi::api::core::v1::Pod;
use kvrs_admission::ClusterConfig;
use kvrs_decide::{Now, Plan};

use crate::cache::Cache;
use crate::virt_controller::Job;

/// One pass's syncs, in queue order, and what they are decided from.
pub(crate) struct Batch {
    pub cache: Arc<Cache>,
    pub config: Arc<ClusterConfig>,
    pub now: Now,
    pub jobs: Vec<Job>,
}

/// A submitted pass, shared by the two threads.
struct Shared {
    jobs: Vec<Job>,
    config: Arc<ClusterConfig>,
    now: Now,
    /// The pass's cache, until the pass is over. The decision thread borrows it for one
    /// decision at a time; the simulator's thread takes it away when it has every plan, so its
    /// own handle is the only one left when it updates the cache in place (a handle still held
    /// here would make it copy the whole cache instead).
    cache: Mutex<Option<Arc<Cache>>>,
    /// The first job nobody has claimed.
    next: AtomicUsize,
    /// Decided plans by job index, each put there once by the thread that claimed the job.
    slots: Vec<Mutex<Option<Option<Plan>>>>,
}

impl Shared {
    /// Claims the next undecided job: its index, or `None` when every job is claimed.
    fn claim(&self) -> Option<usize> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.jobs.len()).then_some(i)
    }

    fn put(&self, i: usize, plan: Option<Plan>) {
        *lock(&self.slots[i]) = Some(plan);
    }

    fn take(&self, i: usize) -> Option<Option<Plan>> {
        lock(&self.slots[i]).take()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding a slot's lock cannot leave it half-written (a slot is one store).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A pass being decided: its plans come back in job order from [`Decider::next_plan`].
pub(crate) struct Pass {
    shared: Arc<Shared>,
    /// The job whose plan is executed next.
    cursor: usize,
}

/// The handle of the decision thread (started on the first pass).
#[derive(Default)]
pub(crate) struct Decider {
    running: Option<Running>,
    /// Garbage gathered since the last [`Decider::discard`].
    pub garbage: Garbage,
}

struct Running {
    messages: Sender<Message>,
    thread: JoinHandle<()>,
}

/// What the simulator's thread sends the decision thread.
enum Message {
    /// A pass to decide jobs of.
    Pass(Arc<Shared>),
    /// Things to drop when no pass waits.
    Discard(Garbage),
}

/// What the simulator's thread leaves to the decision thread to drop.
#[derive(Default)]
pub(crate) struct Garbage {
    /// Events the API server's log let go, with the versions only they still held.
    pub events: Vec<kvrs_store::Event>,
    /// Plans already executed.
    pub plans: Vec<Plan>,
    /// Typed views of cached pods a newer version replaced.
    pub pods: Vec<Box<Pod>>,
}

impl Garbage {
    fn is_empty(&self) -> bool {
        self.events.is_empty() && self.plans.is_empty() && self.pods.is_empty()
    }

    /// Drops one item; `false` when there was none.
    fn drop_one(&mut self) -> bool {
        self.events.pop().map(drop).is_some()
            || self.plans.pop().map(drop).is_some()
            || self.pods.pop().map(drop).is_some()
    }
}

/// Items dropped between two looks for a waiting pass.
const DROPS_BETWEEN_LOOKS: usize = 16;

impl Decider {
    /// Starts deciding a pass's jobs on both threads.
    pub fn submit(&mut self, batch: Batch) -> Pass {
        let Batch {
            cache,
            config,
            now,
            jobs,
        } = batch;
        let slots = jobs.iter().map(|_| Mutex::new(None)).collect();
        let shared = Arc::new(Shared {
            jobs,
            config,
            now,
            cache: Mutex::new(Some(cache)),
            next: AtomicUsize::new(0),
            slots,
        });
        self.send(Message::Pass(Arc::clone(&shared)));
        Pass { shared, cursor: 0 }
    }

    /// Hands the gathered [`Decider::garbage`] to the decision thread to drop when it has no
    /// pass to decide.
    pub fn discard(&mut self) {
        if !self.garbage.is_empty() {
            let garbage = std::mem::take(&mut self.garbage);
            self.send(Message::Discard(garbage));
        }
    }

    fn send(&mut self, message: Message) {
        let running = self.running.get_or_insert_with(start);
        if running.messages.send(message).is_err() {
            // The thread is gone (it panicked): say why here, on the simulator's thread.
            self.rethrow();
        }
    }

    /// The pass's next job's key and plan (`None` when the job decided nothing), deciding it or
    /// a later one here while it is not there yet; `None` when the pass is over. `cache` is the
    /// pass's cache (this thread's handle of it).
    pub fn next_plan(&mut self, pass: &mut Pass, cache: &Cache) -> Option<(String, Option<Plan>)> {
        let i = pass.cursor;
        let shared = &pass.shared;
        let key = shared.jobs.get(i)?.key().to_string();
        let plan = self.plan_of(shared, i, cache);
        pass.cursor += 1;
        if pass.cursor == shared.jobs.len() {
            // Every plan is here, so the decision thread holds no handle of the cache now.
            lock(&shared.cache).take();
        }
        Some((key, plan))
    }

    /// Job `i`'s plan: taken when decided, decided here when unclaimed.
    fn plan_of(&mut self, shared: &Shared, i: usize, cache: &Cache) -> Option<Plan> {
        let mut idle_rounds = 0u32;
        loop {
            if let Some(plan) = shared.take(i) {
                return plan;
            }
            if let Some(j) = shared.claim() {
                let plan = shared.jobs[j].decide(cache, &shared.config, shared.now);
                if j == i {
                    return plan;
                }
                shared.put(j, plan);
                continue;
            }
            // Every job is claimed and this one is being decided on the other thread: a
            // decision takes tens of microseconds, so wait by spinning, then yielding.
            if self.running.as_ref().is_none_or(|r| r.thread.is_finished()) {
                self.rethrow();
            }
            idle_rounds += 1;
            if idle_rounds < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Re-raises the decision thread's panic (it left a claimed job undecided).
    fn rethrow(&mut self) -> ! {
        match self.running.take().map(|r| r.thread.join()) {
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            _ => panic!("the decision thread stopped before deciding every job it claimed"),
        }
    }
}

fn start() -> Running {
    let (messages, inbox) = channel::<Message>();
    let thread = std::thread::Builder::new()
        .name("sim-decide".into())
        .spawn(move || serve(&inbox))
        .expect("the simulator needs a second thread to decide on");
    Running { messages, thread }
}

/// The decision thread: decides passes as they come and drops garbage while none waits.
fn serve(inbox: &Receiver<Message>) {
    let mut pile: Vec<Garbage> = Vec::new();
    loop {
        let message = if pile.is_empty() {
            match inbox.recv() {
                Ok(m) => m,
                Err(_) => return,
            }
        } else {
            match inbox.try_recv() {
                Ok(m) => m,
                Err(TryRecvError::Empty) => {
                    drop_some(&mut pile);
                    continue;
                }
                Err(TryRecvError::Disconnected) => return,
            }
        };
        match message {
            Message::Pass(pass) => decide_pass(&pass),
            Message::Discard(garbage) => pile.push(garbage),
        }
    }
}

/// Drops up to [`DROPS_BETWEEN_LOOKS`] items of the pile.
fn drop_some(pile: &mut Vec<Garbage>) {
    for _ in 0..DROPS_BETWEEN_LOOKS {
        let Some(batch) = pile.last_mut() else {
            return;
        };
        if !batch.drop_one() {
            pile.pop();
        }
    }
}

/// Decides jobs of `pass` until none is left unclaimed.
fn decide_pass(pass: &Shared) {
    while let Some(i) = pass.claim() {
        // The simulator's thread takes the cache away only once it has every plan, and this
        // job's is not there yet.
        let Some(cache) = lock(&pass.cache).clone() else {
            return;
        };
        let plan = pass.jobs[i].decide(&cache, &pass.config, pass.now);
        // Released before the plan is published: once the simulator's thread has the last
        // plan, no handle of the cache may be left here.
        drop(cache);
        pass.put(i, plan);
    }
}

impl Drop for Decider {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            drop(r.messages);
            // A panic there was already re-raised on the simulator's thread, or no plan of
            // it was awaited: nothing is left to report.
            let _ = r.thread.join();
        }
    }
}
