//! The decision thread: decides virt-controller's syncs for the simulator's thread, which
//! executes their plans as they arrive.
//!
//! One thread lives as long as the simulator. A thread per pass (what a scoped thread gave)
//! cost a thread start each time, so only large passes were worth sending; most passes of a
//! run are small, and their decisions stayed on the simulator's thread — a quarter of its
//! work in a 1 000-VM run.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

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

/// The handle of the decision thread (started on the first batch).
#[derive(Default)]
pub(crate) struct Decider {
    running: Option<Running>,
}

struct Running {
    batches: Sender<Batch>,
    plans: Receiver<Option<Plan>>,
    thread: JoinHandle<()>,
}

impl Decider {
    /// Sends a batch to be decided; its plans come back one per job, in order, from
    /// [`Decider::next_plan`].
    pub fn submit(&mut self, batch: Batch) {
        let running = self.running.get_or_insert_with(start);
        if let Err(returned) = running.batches.send(batch) {
            // The thread is gone (it panicked): say why here, on the simulator's thread.
            drop(returned);
            self.rethrow();
        }
    }

    /// The next plan of the batches submitted.
    pub fn next_plan(&mut self) -> Option<Plan> {
        let received = self.running.as_ref().map(|r| r.plans.recv());
        match received {
            Some(Ok(plan)) => plan,
            _ => self.rethrow(),
        }
    }

    /// Re-raises the decision thread's panic (it sent fewer plans than jobs).
    fn rethrow(&mut self) -> ! {
        match self.running.take().map(|r| r.thread.join()) {
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            _ => panic!("the decision thread stopped before deciding every submitted sync"),
        }
    }
}

fn start() -> Running {
    let (batches, work) = channel::<Batch>();
    let (done, plans) = channel();
    let thread = std::thread::Builder::new()
        .name("sim-decide".into())
        .spawn(move || decide_batches(&work, &done))
        .expect("the simulator needs a second thread to decide on");
    Running {
        batches,
        plans,
        thread,
    }
}

fn decide_batches(work: &Receiver<Batch>, done: &Sender<Option<Plan>>) {
    for batch in work {
        let Batch {
            cache,
            config,
            now,
            jobs,
        } = batch;
        let mut cache = Some(cache);
        let last = jobs.len().saturating_sub(1);
        for (i, job) in jobs.into_iter().enumerate() {
            let plan = cache.as_deref().and_then(|c| job.decide(c, &config, now));
            if i == last {
                // The cache is released before the last plan is sent: the simulator updates
                // its cache in place once a pass is over, and a copy still held here would
                // make it copy the whole cache instead.
                cache = None;
            }
            if done.send(plan).is_err() {
                return;
            }
        }
        drop(cache);
    }
}

impl Drop for Decider {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            drop(r.batches);
            // A panic there was already re-raised on the simulator's thread, or no plan of
            // it was awaited: nothing is left to report.
            let _ = r.thread.join();
        }
    }
}
