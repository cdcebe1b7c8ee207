//! Who wrote what, and why a controller's write failed.
//!
//! Every refused write of a kvrs process is put in one [`Cause`] by comparing what the writer
//! read (the resourceVersion in its informer cache) with what the API server held when the write
//! arrived, and by who made that newer version. The classes say whether a failure is inherent to
//! the optimistic-concurrency protocol (several clients write one object; every cache lags its
//! watch) or made by the simulator or a shell (and so fixable there).

use std::collections::BTreeMap;
use std::fmt;

use super::store::{ApiError, Obj};
use kvrs_decide::small_json::ScanPointer;

/// The client an API write comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Writer {
    /// The VM controller of virt-controller.
    VmController,
    /// The VMI controller of virt-controller.
    VmiController,
    /// The virt-handler of node index `n`.
    Handler(usize),
    /// The scheduler and kubelet (pod binding, pod status, pod removal).
    Kubelet,
    /// A user or third-party client: VM creation, run-strategy edits, the simulator's markers.
    OtherClient,
}

impl Writer {
    /// The writer with handlers folded into one kind (the report counts kinds, not nodes).
    pub fn kind(self) -> &'static str {
        match self {
            Writer::VmController => "vm-controller",
            Writer::VmiController => "vmi-controller",
            Writer::Handler(_) => "handler",
            Writer::Kubelet => "kubelet",
            Writer::OtherClient => "other-client",
        }
    }
}

/// Why a write of a kvrs controller failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// A conflict the simulator injected (fault injection; not a protocol property).
    Injected,
    /// The writer's cache had not yet seen the writer's own previous write of this object, and
    /// the write was built on the older version. Self-inflicted: a process that waits for its
    /// own writes to come back through its watch before syncing the key again (as virt-handler's
    /// expectations do) never sends it.
    StaleOwnWrite,
    /// The newest version, which the writer's cache had not seen yet, came from another kvrs
    /// controller (virt-controller vs virt-handler on a VMI, the VM vs the VMI controller).
    /// Inherent: two processes write the object, each from its own lagging cache; the loser
    /// re-reads and retries.
    StaleOtherController,
    /// The newest version came from the kubelet (pod status, binding). Inherent, as above.
    StaleKubelet,
    /// The newest version came from a user or third-party client (here the simulator's marker
    /// label put on every new VM and VMI at once). Inherent to a cluster with other clients;
    /// the simulator makes it frequent by decorating every new object while it is young.
    StaleOtherClient,
    /// The writer's cache was current and the write was still refused: the plan does not fit
    /// the object it was built from (a decision or shell bug, fixable).
    FreshRejected,
    /// The write was refused and the writer did not have the object cached at all.
    NotCached,
    /// A create of a name that exists: the writer's cache had not seen the object yet (or its
    /// expectations let a second create through). Inherent lag unless expectations cover it.
    AlreadyExists,
    /// The object was gone (deleted since the writer read it). Inherent.
    NotFound,
}

impl Cause {
    /// Whether the class follows from optimistic concurrency between lagging caches (as opposed
    /// to injected, or made by the simulator or a shell and fixable there).
    pub fn inherent(self) -> bool {
        matches!(
            self,
            Cause::StaleOtherController
                | Cause::StaleKubelet
                | Cause::StaleOtherClient
                | Cause::AlreadyExists
                | Cause::NotFound
        )
    }
}

/// One class of failed writes in the report: who wrote, what, and why it failed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FailureClass {
    /// The writer's kind ([`Writer::kind`]).
    pub writer: &'static str,
    /// `resource` or `resource/subresource`, and the verb.
    pub target: String,
    /// The cause.
    pub cause: Cause,
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = if self.cause.inherent() {
            "inherent"
        } else {
            "fixable"
        };
        write!(
            f,
            "{} {}: {:?} ({tag})",
            self.writer, self.target, self.cause
        )
    }
}

/// Failed writes counted by class.
#[derive(Clone, Debug, Default)]
pub struct FailedWrites(pub BTreeMap<FailureClass, u64>);

impl FailedWrites {
    /// Counts one failure.
    pub fn count(&mut self, class: FailureClass) {
        *self.0.entry(class).or_default() += 1;
    }

    /// Failures of one cause, over every writer and target.
    pub fn of(&self, cause: Cause) -> u64 {
        self.0
            .iter()
            .filter(|(c, _)| c.cause == cause)
            .map(|(_, n)| n)
            .sum()
    }

    /// All failures.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

impl fmt::Display for FailedWrites {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "failed writes by class ({} in all):", self.total())?;
        for (class, n) in &self.0 {
            writeln!(f, "  {n:>8}  {class}")?;
        }
        Ok(())
    }
}

/// The resourceVersion of an object, as a number (`None` when it has none or it is not numeric).
pub fn rv_of(o: &Obj) -> Option<u64> {
    let rv = match o {
        Obj::Vm(v) => v.metadata.resource_version.as_deref(),
        Obj::Vmi(v) => v.metadata.resource_version.as_deref(),
        Obj::Other(v) => v
            .at("/metadata/resourceVersion")
            .and_then(serde_json::Value::as_str),
    };
    rv?.parse().ok()
}

/// The cause of a refused write of `writer`, from the error, the version the writer's cache
/// held (`cached`), and the API server's current version with its writer (`current`).
pub fn classify(
    err: &ApiError,
    injected: bool,
    writer: Writer,
    cached: Option<u64>,
    current: Option<(u64, Writer)>,
) -> Cause {
    if injected {
        return Cause::Injected;
    }
    match err {
        ApiError::AlreadyExists(_) => Cause::AlreadyExists,
        ApiError::NotFound(_) => Cause::NotFound,
        ApiError::Conflict(_) | ApiError::Invalid(_) => match (cached, current) {
            (None, _) => Cause::NotCached,
            (_, None) => Cause::NotFound,
            (Some(seen), Some((now, by))) if seen < now => match by {
                w if w == writer => Cause::StaleOwnWrite,
                Writer::Kubelet => Cause::StaleKubelet,
                Writer::OtherClient => Cause::StaleOtherClient,
                _ => Cause::StaleOtherController,
            },
            _ => Cause::FreshRejected,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict() -> ApiError {
        ApiError::Conflict("x".into())
    }

    /// The newest version's writer decides the class of a stale write; a current cache means
    /// the plan itself was refused.
    #[test]
    fn stale_writes_are_blamed_on_the_newest_writer() {
        let w = Writer::VmiController;
        let cases = [
            (Writer::VmiController, Cause::StaleOwnWrite),
            (Writer::Handler(3), Cause::StaleOtherController),
            (Writer::VmController, Cause::StaleOtherController),
            (Writer::Kubelet, Cause::StaleKubelet),
            (Writer::OtherClient, Cause::StaleOtherClient),
        ];
        for (by, want) in cases {
            assert_eq!(
                classify(&conflict(), false, w, Some(4), Some((7, by))),
                want
            );
        }
        assert_eq!(
            classify(&conflict(), false, w, Some(7), Some((7, Writer::Kubelet))),
            Cause::FreshRejected
        );
        assert_eq!(
            classify(&conflict(), false, w, None, Some((7, Writer::Kubelet))),
            Cause::NotCached
        );
        assert_eq!(
            classify(&conflict(), true, w, Some(7), Some((7, w))),
            Cause::Injected
        );
        let exists = ApiError::AlreadyExists("x".into());
        assert_eq!(
            classify(&exists, false, w, None, None),
            Cause::AlreadyExists
        );
    }
}
