//! Running virt-handler's plans: node steps and launcher commands in order, failures fed back as
//! facts, the status write last.

use kvrs_api::VirtualMachineInstance;
use kvrs_decide::handler::{HandlerPlan, NodeFacts};
use kvrs_decide::{Action, DecideError, ErrorKind, QueueOp, Requeue};
use tracing::debug;

use crate::effects::{Api, ApiError, Launcher, Node};

/// How many times one sync may be decided again after a failing step. Every re-decision records
/// one more failure, and a plan has only so many steps; the bound keeps a decision that keeps
/// asking for new steps from looping.
const MAX_REDECISIONS: usize = 8;

/// What running one handler sync did.
#[derive(Clone, Debug, PartialEq)]
pub struct HandlerExecuted {
    /// The last plan decided (after any failures were fed back).
    pub plan: HandlerPlan,
    /// How many times the sync was decided (1 when nothing failed).
    pub decisions: usize,
    /// Whether the plan's VMI status write was sent and accepted.
    pub status_written: bool,
    /// The API write that failed, if any.
    pub failed_write: Option<ApiError>,
    /// What to do with the key now.
    pub queue: Requeue,
    /// The sync's error, if it failed.
    pub error: Option<DecideError>,
}

/// Runs one handler sync. `decide` is the pure handler decision over the node facts (the VMI,
/// domain and clock are captured by the caller); `facts` start as the shell gathered them and
/// collect each failure. The actions run in order; when a launcher command or node step fails,
/// the failure becomes a fact ([`NodeFacts::record_failure`]) and the sync is decided again: the
/// new plan must repeat the steps already taken (decisions are deterministic), and what follows
/// them — usually the status write with the error condition — is run next.
///
/// `fx` is the API, the launcher and the node in one: in the simulator one object owns all three.
pub async fn execute_handler<E: Api + Launcher + Node>(
    mut decide: impl FnMut(&NodeFacts) -> HandlerPlan,
    facts: &mut NodeFacts,
    vmi: Option<&VirtualMachineInstance>,
    fx: &mut E,
) -> HandlerExecuted {
    let mut plan = decide(facts);
    let mut decisions = 1;
    let mut status_written = false;
    let mut failed_write = None;
    let mut unrecorded: Option<DecideError> = None;
    // The actions are read in place, by index: a plan is replaced only after a failure, and
    // then only when it repeats every step taken before (copying them per sync was a tenth
    // of a large simulation's handler work).
    let mut i = 0;
    while i < plan.plan.actions.len() {
        let action = &plan.plan.actions[i];
        let result = match action {
            Action::Write(w) => match fx.write(w).await {
                Ok(()) => {
                    status_written |= w.resource == "virtualmachineinstances";
                    i += 1;
                    continue;
                }
                Err(err) => {
                    failed_write = Some(err);
                    break;
                }
            },
            Action::Launcher(call) => fx.call(vmi, call.clone()).await,
            Action::Node(step) => fx.step(vmi, step).await,
        };
        let Err(message) = result else {
            i += 1;
            continue;
        };
        debug!(action = %action.label(), "handler step failed: {message}");
        let kind = match action {
            Action::Launcher(_) => ErrorKind::LauncherCall,
            _ => ErrorKind::NodeStep,
        };
        if decisions > MAX_REDECISIONS || !facts.record_failure(action, &message) {
            unrecorded = Some(DecideError::new(kind, message));
            break;
        }
        let next = decide(facts);
        decisions += 1;
        let same_so_far = next.plan.actions.get(..=i) == plan.plan.actions.get(..=i);
        plan = next;
        if !same_so_far {
            // A decision that changes what it did before a failure would make the shell
            // repeat or skip side effects; fail the sync instead and retry it later.
            unrecorded = Some(DecideError::new(
                kind,
                format!("{message} (and the sync decided differently after it)"),
            ));
            break;
        }
        i += 1;
    }
    for event in &plan.plan.events {
        fx.event(event).await;
    }
    let (queue, error) = if let Some(err) = &failed_write {
        (
            retry_instead_of_forget(&plan.plan.queue),
            Some(DecideError::new(ErrorKind::ApiWrite, err.message.clone())),
        )
    } else if let Some(err) = unrecorded {
        (retry_instead_of_forget(&plan.plan.queue), Some(err))
    } else {
        (plan.plan.queue.clone(), plan.plan.error.clone())
    };
    HandlerExecuted {
        plan,
        decisions,
        status_written,
        failed_write,
        queue,
        error,
    }
}

/// The plan's queue operations with the closing `Forget` turned into a retry with backoff: the
/// sync failed after all, but the timers it asked for still stand.
fn retry_instead_of_forget(queue: &Requeue) -> Requeue {
    Requeue(
        queue
            .ops()
            .iter()
            .map(|op| match op {
                QueueOp::Forget => QueueOp::AddRateLimited,
                other => *other,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ready::run_ready;
    use kvrs_decide::handler::{Decision, LauncherCall, NodeStep};
    use kvrs_decide::{ApiWrite, Event, Plan, WriteOp};
    use serde_json::json;

    /// Records what it is asked to do; `SyncVirtualMachine` fails.
    #[derive(Default)]
    struct Fx {
        api: Vec<String>,
        node: Vec<String>,
    }

    impl Api for Fx {
        async fn write(&mut self, w: &ApiWrite) -> Result<(), ApiError> {
            self.api.push(format!("write {}", w.name));
            Ok(())
        }
        async fn event(&mut self, e: &Event) {
            self.api.push(format!("event {}", e.reason));
        }
    }

    impl Launcher for Fx {
        async fn call(
            &mut self,
            _: Option<&VirtualMachineInstance>,
            c: LauncherCall,
        ) -> Result<(), String> {
            match c {
                LauncherCall::SyncVirtualMachine => Err("libvirt refused".into()),
                _ => Ok(()),
            }
        }
    }

    impl Node for Fx {
        async fn step(
            &mut self,
            _: Option<&VirtualMachineInstance>,
            s: &NodeStep,
        ) -> Result<(), String> {
            self.node.push(s.name().to_string());
            Ok(())
        }
    }

    /// A stand-in decision: prepare, sync, and write the status; after a failed sync, the same
    /// steps and a status write carrying the error.
    fn decide(facts: &NodeFacts) -> HandlerPlan {
        let mut plan = Plan::idle();
        plan.actions
            .push(Action::Node(NodeStep::MountContainerDisks));
        plan.actions
            .push(Action::Launcher(LauncherCall::SyncVirtualMachine));
        let name = match facts.launcher_error("SyncVirtualMachine") {
            Some(_) => {
                plan.error = Some(DecideError::new(ErrorKind::Sync, "libvirt refused"));
                plan.queue = Requeue::rate_limited();
                "status-with-error"
            }
            None => "status",
        };
        plan.push_write(ApiWrite::new(
            "virtualmachineinstances",
            "ns",
            name,
            WriteOp::Patch {
                patch_type: kvrs_decide::PatchType::Json,
                patch: json!([]),
            },
        ));
        HandlerPlan {
            decision: Decision::Update,
            plan,
            status: None,
            io_error_retry: None,
        }
    }

    #[test]
    fn a_failed_launcher_call_is_decided_again_without_repeating_steps() {
        let mut fx = Fx::default();
        let mut facts = NodeFacts::default();
        let out = run_ready(execute_handler(decide, &mut facts, None, &mut fx)).unwrap();
        assert_eq!(out.decisions, 2);
        assert_eq!(fx.node, ["mountContainerDisks"], "the mount ran once");
        assert_eq!(fx.api, ["write status-with-error"]);
        assert!(out.status_written);
        assert_eq!(out.queue, Requeue::rate_limited());
        assert_eq!(out.error.map(|e| e.message), Some("libvirt refused".into()));
    }
}
