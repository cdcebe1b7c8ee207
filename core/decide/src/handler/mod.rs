//! virt-handler's per-key sync choice as a pure function.
//!
//! Given the VMI (as stored, or none), the domain the launcher reports (or none) and the node-local
//! facts, [`decide`] returns what KubeVirt v1.9.0's virt-handler VM controller does in one
//! `execute()`: the branch taken ([`Decision`]), the launcher commands in order, node-local steps,
//! the VMI status to write, events and queue operations. No clock, socket or randomness inside:
//! `now` is an input, and results of launcher commands are facts ([`NodeFacts::launcher_errors`]).
//!
//! The shell runs the plan: launcher commands in order; when one fails it calls [`decide`] again
//! with that error recorded, which yields the plan KubeVirt follows after that failure.
//!
//! Order of checks (as in KubeVirt): expectations; a domain whose UID differs from the VMI's is
//! dealt with first (cleanup when its launcher is dead, else wait); a migrated domain is an orphan
//! to delete; migrations in progress, VMIs of other nodes and migration sources are left alone;
//! then `sync`: shutdown > destroy-irrecoverable > delete > update, then the status refresh.
//!
//! The migration source and target controllers, which own what this one leaves alone, are
//! [`decide_source`] and [`decide_target`] ([`migration`]).

mod conditions;
mod ctx;
pub mod domain;
mod execute;
pub mod facts;
mod flows;
pub mod hotplug;
mod migratable;
pub mod migration;
mod netstat;
mod phase;
pub mod plan;
pub mod retry;
pub mod scenario;
pub mod status;
mod view;

#[cfg(test)]
mod tests;

use crate::Now;

use crate::api::VirtualMachineInstance;

pub use domain::Domain;
pub use facts::{HandlerConfig, NodeFacts};
pub use kvrs_api::time::{format_time, parse_time};
pub use migration::{MigrationFacts, MigrationOptions, decide_source, decide_target};
pub use plan::{Decision, HandlerPlan, LauncherCall, NodeStep, QueueOp, status_write};

/// Everything one handler sync looks at.
#[derive(Clone, Copy, Debug)]
pub struct HandlerWorld<'a> {
    /// The node this handler runs on.
    pub node: &'a str,
    /// The queue key, `namespace/name`.
    pub key: &'a str,
    /// The virtual clock.
    pub now: Now,
    /// The VMI as stored (no defaulting applied), or `None` when it is gone from the cluster.
    pub vmi: Option<&'a VirtualMachineInstance>,
    /// The domain from the launcher's notifications, or `None`.
    pub domain: Option<&'a Domain>,
    /// Node-local facts.
    pub facts: &'a NodeFacts,
    /// Cluster settings.
    pub config: &'a HandlerConfig,
}

/// Decides one sync of `world.key`. See the module docs.
pub fn decide(world: &HandlerWorld<'_>) -> HandlerPlan {
    let mut cx = ctx::Ctx::new(world);
    let result = execute::execute(world, &mut cx);
    cx.finish(world, result)
}
