//! From caches to a decision's world: one function per controller, written once.
//!
//! A decision reads a snapshot — [`VmWorld`](kvrs_decide::vm::VmWorld),
//! [`VmiWorld`](kvrs_decide::vmi::VmiWorld), [`HandlerWorld`](kvrs_decide::handler::HandlerWorld).
//! Which cached objects go into it (the VM's start and instancetype revisions, the VMI's launcher
//! pods, the UID a handler sync's launcher commands are for, ...) is decided here, so the cluster
//! binaries and the simulator feed the decisions the same way. Each runtime says only how its
//! caches answer, by implementing a small trait:
//!
//! - [`ControllerCache`] — the informer caches the VM and VMI controllers share; read by
//!   [`vm_world`] and [`vmi_world`];
//! - [`MigrationCache`] — the cluster-wide caches of the migration controller; read by
//!   [`migration_world`];
//! - [`HandlerSources`] — what one virt-handler knows about a key: its node's VMI cache, the
//!   domains its launchers reported, the launchers themselves; read by [`handler_inputs`].
//!
//! What a runtime does not have (the simulator keeps no instancetypes, PVCs or DataVolumes, and
//! its launchers report no guest agent) its implementation answers explicitly with nothing; the
//! rules that pick from what it has are the ones below.
//!
//! Everything the decisions take besides the caches — the clock, the random draws, the
//! expectations, the configuration — comes in as [`VmInputs`] and [`VmiInputs`] (or, for the
//! handler, as the caller's arguments to [`HandlerSubject::world`]).

mod controller;
mod handler;
mod migration;

pub use controller::{ControllerCache, VmInputs, VmiInputs, WantedRevisions, vm_world, vmi_world};
pub use handler::{HandlerSources, HandlerSubject, VmiRef, handler_inputs};
pub use migration::{MigrationCache, MigrationInputs, migration_of_pod, migration_world};

/// The namespace part of a `namespace/name` key (empty for a cluster-scoped name).
fn namespace_of(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}
