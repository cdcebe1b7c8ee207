//! Controller decisions as pure functions: a snapshot of the world in, a [`Plan`] out.
//!
//! Every controller of kvrs (the VM controller, the VMI controller, the migration controller,
//! virt-handler) is split in two: a decision here that reads a snapshot (objects from the informer
//! caches, the expectations, the clock reading `now`, random draws such as jitter) and returns
//! what to do, and a shell in the binaries that sends the writes, records the events and requeues
//! the key. Keeping the clock, randomness and IO out of the decision is what lets the same code
//! run in the controllers, in the simulator and in the oracle tests unchanged.
//!
//! All of them return the same [`Plan`]: one ordered list of [`Action`]s (API writes with their
//! preconditions and expectations, launcher commands, node steps), events, a [`Requeue`] and a
//! typed [`DecideError`] whose [`ErrorKind`] is a stable metrics label. All take the clock as the
//! same [`Now`]. `kvrs-executor` executes plans; nothing here does.
//!
//! - [`vm::decide_vm`] — the VM controller ([`vm::VmWorld`] in, [`vm::VmDecision`] out);
//! - [`vmi::decide_vmi`] — the VMI controller, launcher pods rendered through a
//!   [`vmi::LauncherRenderer`] ([`vmi::launcher_renderer`] wires `kvrs_pod`);
//! - [`migration::decide_migration`] — the migration controller (local live migrations up to
//!   the hand-off to virt-handler and after it), target pods rendered through a
//!   [`migration::TargetRenderer`] ([`migration::target_renderer`] wires `kvrs_pod`);
//! - [`evacuation::decide_evacuation`] — the evacuation controller (a drained node's VMIs get
//!   migrations) and [`evacuation::admit_eviction`], virt-api's `pods/eviction` webhook;
//! - [`handler::decide`] — virt-handler's sync ([`handler::HandlerWorld`] in,
//!   [`handler::HandlerPlan`] out), launcher failures fed back as [`handler::NodeFacts`];
//! - [`scenario::Scenario`] — the oracle scenario format parsed into those worlds;
//! - [`patch`] — building and applying JSON, merge and strategic merge patches.
//!
//! ## Deciding
//!
//! A decision is a function call: build the world from what the caches hold, call the decision,
//! read the plan. Nothing is sent anywhere — running the same world twice gives the same plan,
//! which is how the oracle tests compare it with KubeVirt's. Here the VM controller sees a new VM
//! that should run (`runStrategy: Always`) and no VMI yet:
//!
//! ```
//! use kvrs_admission::ClusterConfig;
//! use kvrs_api::VirtualMachine;
//! use kvrs_decide::vm::{VmWorld, decide_vm};
//! use kvrs_decide::{Expectation, Now, PendingExpectations};
//!
//! let vm: VirtualMachine = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "testvm", "namespace": "default", "uid": "vm-uid", "generation": 1},
//!     "spec": {
//!         "runStrategy": "Always",
//!         "template": {"spec": {
//!             "domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}},
//!             "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora"}}]
//!         }}
//!     }
//! }))?;
//! let config = ClusterConfig::default();
//! let world = VmWorld {
//!     vm: &vm,
//!     vmi: None, // the cache holds no VMI of this name
//!     revisions: &[],
//!     instancetype_objects: &[],
//!     data_volumes: &[],
//!     pvcs: &[],
//!     expectations: PendingExpectations::default(),
//!     now: Now::from_unix(1_767_225_600),
//!     jitter: 0.0,
//!     config: &config,
//! };
//! let decision = decide_vm(&world);
//!
//! // In one reconcile: finalizer and API-version annotations on the VM, the start revision, the
//! // VMI — and the VM status the plan ends with.
//! let writes: Vec<String> = decision.plan.writes()
//!     .map(|w| match &w.subresource {
//!         Some(sub) => format!("{} {}/{sub}", w.op.verb(), w.resource),
//!         None => format!("{} {}", w.op.verb(), w.resource),
//!     })
//!     .collect();
//! assert_eq!(writes, [
//!     "patch virtualmachines",
//!     "create controllerrevisions",
//!     "create virtualmachineinstances",
//!     "patch virtualmachines/status",
//! ]);
//! assert_eq!(decision.status.as_ref().unwrap()["printableStatus"], "Starting");
//!
//! // The VMI create raises an expectation: until the watch shows the VMI, the next decision
//! // sees it pending and starts no second one.
//! let create = decision.plan.writes().find(|w| w.resource == "virtualmachineinstances").unwrap();
//! assert_eq!(
//!     create.expectation,
//!     Some(Expectation::Creations { key: "default/testvm".into(), count: 1 }),
//! );
//! println!("{:#}", decision.plan.to_json("default/testvm"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(unreachable_pub)]

mod action;
pub mod evacuation;
mod event;
pub mod handler;
pub mod meta;
pub mod migration;
pub mod patch;
mod plan;
pub mod scenario;
pub mod small_json;
pub mod vm;
pub mod vmi;
pub mod vmi_state;
mod write;

// The shared crates' modules under the names the code here has always used.
use kvrs_admission::ClusterConfig;
use kvrs_api::{Quantity, api, quantity};

pub use action::{Action, LauncherCall, NodeStep};
pub use event::{Event, EventType, ObjectRef};
pub use kvrs_api::time::{Now, format_rfc3339, parse_rfc3339};
pub use plan::{DecideError, ErrorKind, Plan, QueueOp, Requeue};
pub use write::{ApiWrite, Expectation, PatchType, WriteOp};

/// Outstanding expectations of a controller key: writes the controller made that its caches have
/// not shown yet. While any are outstanding the decision must not act on the (stale) cache —
/// that is what keeps a lagging cache from producing a second VMI or pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingExpectations {
    /// Creations not yet observed.
    pub creations: u32,
    /// Deletions not yet observed.
    pub deletions: u32,
}

impl PendingExpectations {
    /// No outstanding creations or deletions.
    pub fn satisfied(&self) -> bool {
        self.creations == 0 && self.deletions == 0
    }
}
