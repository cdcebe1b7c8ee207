//! The decision thread: shares the deciding of virt-controller's and the handlers' syncs with
//! the simulator's thread, which executes their plans in queue order.
//!
//! A pass's jobs are claimed one at a time, in order, by whichever thread is free: the
//! decision thread claims the next job as soon as it finished one; the simulator's thread
//! takes the plan it must execute next if it is there, and otherwise claims (and decides)
//! the next unclaimed job itself instead of waiting. Handing the decisions to the other thread
//! alone left the simulator's thread idle whenever a decision took longer than executing the
//! plan before it (a VMI status decision serialises most of the VMI): about 3.9 s of a
//! 10 000-VM run. A decision reads only its job and the pass's context (a controller's cache,
//! configuration and time), so its plan is the same whichever thread decides it, and a run
//! stays what its seed makes it.
//!
//! One thread lives as long as the simulator (a thread per pass cost a thread start each time).
//!
//! Between passes the decision thread would idle while the simulator's thread runs the
//! handlers and the kubelet, so it also drops what the simulator's thread hands it
//! ([`Decider::discard`]): the object versions the API server's event log and the caches let
//! go, executed plans, replaced pod views. Dropping a version walks its whole tree (about a
//! tenth of the simulator's thread before); handing a batch over is one channel send. A pass
//! comes first: garbage is dropped only while no pass message waits, a few items at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use k8s_openapi::api::core::v1::Pod;
use kvrs_decide::Plan;

/// One sync a pass decides: plain data in, a plan out.
pub(crate) trait Decision: Send + Sync + 'static {
    /// What every job of a pass reads besides itself.
    type Context: Send + Sync + 'static;
    /// What a decision returns.
    type Plan: Send + 'static;

    /// Decides the sync.
    fn decide(&self, context: &Self::Context) -> Self::Plan;
}

/// A submitted pass, shared by the two threads.
struct Shared<D: Decision> {
    jobs: Vec<D>,
    /// The pass's context, until the pass is over. The decision thread borrows it for one
    /// decision at a time; the simulator's thread takes it away when it has every plan, so
    /// what it holds (the controller's cache) has no handle left here when the simulator's
    /// thread updates it in place (a handle still held here would make it copy the whole cache
    /// instead).
    context: Mutex<Option<Arc<D::Context>>>,
    /// The first job nobody has claimed.
    next: AtomicUsize,
    /// Decided plans by job index, each put there once by the thread that claimed the job.
    slots: Vec<Mutex<Option<D::Plan>>>,
}

impl<D: Decision> Shared<D> {
    /// Claims the next undecided job: its index, or `None` when every job is claimed.
    fn claim(&self) -> Option<usize> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.jobs.len()).then_some(i)
    }

    fn put(&self, i: usize, plan: D::Plan) {
        *lock(&self.slots[i]) = Some(plan);
    }

    fn take(&self, i: usize) -> Option<D::Plan> {
        lock(&self.slots[i]).take()
    }

    /// Decides job `i` with the pass's context; `None` once the simulator's thread took the
    /// context away (it had every plan, so job `i` was not among the ones it waits for).
    fn decide(&self, i: usize) -> Option<D::Plan> {
        let context = lock(&self.context).clone()?;
        let plan = self.jobs[i].decide(&context);
        // Released before the plan is published: once the simulator's thread has the last
        // plan, no handle of the context may be left here.
        drop(context);
        Some(plan)
    }
}

/// What the decision thread does with a pass, whatever its kind of job.
trait Work: Send + Sync {
    /// Decides jobs until none is left unclaimed.
    fn decide_unclaimed(&self);
}

impl<D: Decision> Work for Shared<D> {
    fn decide_unclaimed(&self) {
        while let Some(i) = self.claim() {
            let Some(plan) = self.decide(i) else {
                return;
            };
            self.put(i, plan);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding a slot's lock cannot leave it half-written (a slot is one store).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A pass being decided: its plans come back in job order from [`Decider::next_plan`].
pub(crate) struct Pass<D: Decision> {
    shared: Arc<Shared<D>>,
    /// This thread's handle of the pass's context (dropped with the pass).
    context: Arc<D::Context>,
    /// The job whose plan is executed next.
    cursor: usize,
}

/// The handle of the decision thread (started on the first pass, unless there is none).
#[derive(Default)]
pub(crate) struct Decider {
    running: Option<Running>,
    /// No second thread: garbage is dropped where it is discarded ([`crate::SimConfig`]'s
    /// `second_thread` off).
    one_thread: bool,
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
    Pass(Arc<dyn Work>),
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
    /// Versions the caches let go (often their last holders).
    pub objects: Vec<Arc<kvrs_store::Obj>>,
    /// Typed views of cached pods a newer version replaced.
    #[expect(
        clippy::vec_box,
        reason = "they leave the cache boxed; unboxing copies ~2.3 KB each"
    )]
    pub pods: Vec<Box<Pod>>,
}

impl Garbage {
    fn is_empty(&self) -> bool {
        self.events.is_empty()
            && self.plans.is_empty()
            && self.objects.is_empty()
            && self.pods.is_empty()
    }

    /// Drops one item; `false` when there was none.
    fn drop_one(&mut self) -> bool {
        self.events.pop().map(drop).is_some()
            || self.plans.pop().map(drop).is_some()
            || self.objects.pop().map(drop).is_some()
            || self.pods.pop().map(drop).is_some()
    }
}

/// Items dropped between two looks for a waiting pass.
const DROPS_BETWEEN_LOOKS: usize = 16;

impl Decider {
    /// A decider whose garbage goes to a second thread, or is dropped where it is discarded.
    pub(crate) fn new(second_thread: bool) -> Self {
        Self {
            running: None,
            one_thread: !second_thread,
            garbage: Garbage::default(),
        }
    }

    /// Starts deciding a pass's jobs on both threads.
    pub(crate) fn submit<D: Decision>(&mut self, context: D::Context, jobs: Vec<D>) -> Pass<D> {
        let slots = jobs.iter().map(|_| Mutex::new(None)).collect();
        let context = Arc::new(context);
        let shared = Arc::new(Shared {
            jobs,
            context: Mutex::new(Some(Arc::clone(&context))),
            next: AtomicUsize::new(0),
            slots,
        });
        let work: Arc<dyn Work> = shared.clone();
        self.send(Message::Pass(work));
        Pass {
            shared,
            context,
            cursor: 0,
        }
    }

    /// Keeps what a cache update let go for the next [`Decider::discard`].
    pub(crate) fn keep(&mut self, replaced: crate::cache::Replaced) {
        self.garbage.objects.extend(replaced.object);
        self.garbage.pods.extend(replaced.pod);
    }

    /// Hands the gathered [`Decider::garbage`] to the decision thread to drop when it has no
    /// pass to decide.
    pub(crate) fn discard(&mut self) {
        if self.one_thread {
            self.garbage = Garbage::default();
        } else if !self.garbage.is_empty() {
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

    /// The pass's next job and plan, deciding it or a later one here while it is not there
    /// yet; `None` when the pass is over.
    pub(crate) fn next_plan<'p, D: Decision>(
        &mut self,
        pass: &'p mut Pass<D>,
    ) -> Option<(&'p D, D::Plan)> {
        let i = pass.cursor;
        if i >= pass.shared.jobs.len() {
            return None;
        }
        let plan = self.plan_of(&pass.shared, &pass.context, i);
        pass.cursor += 1;
        if pass.cursor == pass.shared.jobs.len() {
            // Every plan is here, so the decision thread holds no handle of the context now.
            lock(&pass.shared.context).take();
        }
        Some((&pass.shared.jobs[i], plan))
    }

    /// Job `i`'s plan: taken when decided, decided here when unclaimed.
    fn plan_of<D: Decision>(
        &mut self,
        shared: &Shared<D>,
        context: &D::Context,
        i: usize,
    ) -> D::Plan {
        let mut idle_rounds = 0u32;
        loop {
            if let Some(plan) = shared.take(i) {
                return plan;
            }
            if let Some(j) = shared.claim() {
                let plan = shared.jobs[j].decide(context);
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
            match wait(inbox) {
                Some(m) => m,
                None => return,
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
            Message::Pass(pass) => pass.decide_unclaimed(),
            Message::Discard(garbage) => pile.push(garbage),
        }
    }
}

/// How long the decision thread polls for the next message before it sleeps. Passes come
/// every few hundred microseconds while a run is busy; waking a sleeping thread takes tens of
/// microseconds, in which the simulator's thread decides the pass's first jobs itself.
const POLL_BEFORE_SLEEP: std::time::Duration = std::time::Duration::from_micros(200);

/// The next message: polled for a while, then waited for asleep; `None` when the simulator
/// is gone.
fn wait(inbox: &Receiver<Message>) -> Option<Message> {
    let started = std::time::Instant::now();
    loop {
        match inbox.try_recv() {
            Ok(m) => return Some(m),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if started.elapsed() < POLL_BEFORE_SLEEP => {
                std::hint::spin_loop();
            }
            Err(TryRecvError::Empty) => return inbox.recv().ok(),
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
