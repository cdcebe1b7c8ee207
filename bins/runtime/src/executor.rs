//! Running a controller plan: the VM and VMI controllers' writes, in order.

use kvrs_decide::{Action, DecideError, ErrorKind, Plan, Requeue};
use kvrs_queue::Instant;
use tracing::debug;

use crate::effects::{Api, ApiError, Expecting};

/// What running a plan did.
#[derive(Clone, Debug, PartialEq)]
pub struct Executed {
    /// How many API writes were sent and accepted.
    pub writes_sent: usize,
    /// The write that failed, with the server's answer; the plan stopped there.
    pub failed: Option<ApiError>,
    /// What to do with the key now: the plan's own outcome, or a rate-limited retry when a write
    /// failed.
    pub queue: Requeue,
    /// The reconcile's error: the plan's, or the failed write's.
    pub error: Option<DecideError>,
}

/// Runs `plan`'s writes in order through `fx`, raising each write's expectation first and
/// lowering it if the write fails; stops at the first failure (the
/// later writes assumed the earlier ones succeeded). Events are recorded after the writes that
/// were sent, as KubeVirt records them after acting.
///
/// A controller plan has no launcher calls or node steps; should one appear it is skipped with a
/// debug log rather than sent anywhere (only [`execute_handler`](crate::execute_handler) runs them).
///
/// `fx` is both the API and the expectations store: in the simulator one object owns both (a
/// write's watch event reaches the store before the write returns, as it can in a cluster).
/// [`With`](crate::With) pairs an API with a separate store.
pub async fn execute<E: Api + Expecting>(plan: &Plan, fx: &mut E, now: Instant) -> Executed {
    let mut writes_sent = 0;
    let mut failed = None;
    for action in &plan.actions {
        let Action::Write(write) = action else {
            debug!(action = %action.label(), "controller plan: non-write action skipped");
            continue;
        };
        if let Some(e) = &write.expectation {
            fx.raise(e, now);
        }
        match fx.write(write).await {
            Ok(()) => writes_sent += 1,
            Err(err) => {
                if let Some(e) = &write.expectation {
                    fx.lower(e);
                }
                debug!(
                    verb = write.op.verb(),
                    resource = %write.resource,
                    object = %format!("{}/{}", write.namespace, write.name),
                    reason = err.kind.label(),
                    "write failed: {}", err.message
                );
                tracing::trace!(op = ?write.op, "the failed write");
                failed = Some(err);
                break;
            }
        }
    }
    for event in &plan.events {
        fx.event(event).await;
    }
    finish(plan, writes_sent, failed)
}

fn finish(plan: &Plan, writes_sent: usize, failed: Option<ApiError>) -> Executed {
    match failed {
        None => Executed {
            writes_sent,
            failed: None,
            queue: plan.queue.clone(),
            error: plan.error.clone(),
        },
        Some(err) => Executed {
            writes_sent,
            error: Some(DecideError::new(ErrorKind::ApiWrite, err.message.clone())),
            queue: retry_after(&err),
            failed: Some(err),
        },
    }
}

/// How to retry after a failed write.
///
/// A conflict means the stored object is newer than the cache the plan was decided on, so the
/// watch is already delivering that newer version and its event queues the key again. Waiting
/// out the shared rate limiter's token bucket (10/s in client-go's default) as well would cap a
/// whole controller at a few syncs per second under load; a short timer is kept only as a safety
/// net. Every other failure backs off per key, as KubeVirt's controllers do.
fn retry_after(err: &ApiError) -> Requeue {
    match err.kind {
        crate::ApiErrorKind::Conflict => Requeue::after(std::time::Duration::from_secs(1)),
        _ => Requeue::rate_limited(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::{ApiErrorKind, With};
    use crate::expectations::ControllerExpectations;
    use crate::ready::run_ready;
    use kvrs_decide::{ApiWrite, Event, Expectation, WriteOp};
    use serde_json::json;

    /// An API that accepts `ok` writes, then fails every later one with a conflict.
    struct Scripted {
        ok: usize,
        sent: Vec<String>,
        events: usize,
    }

    impl Api for Scripted {
        async fn write(&mut self, w: &ApiWrite) -> Result<(), ApiError> {
            if self.sent.len() == self.ok {
                return Err(ApiError::new(
                    ApiErrorKind::Conflict,
                    "the object has been modified",
                ));
            }
            self.sent.push(format!("{} {}", w.op.verb(), w.name));
            Ok(())
        }
        async fn event(&mut self, _: &Event) {
            self.events += 1;
        }
    }

    fn create(name: &str) -> ApiWrite {
        ApiWrite::new(
            "virtualmachineinstances",
            "ns",
            name,
            WriteOp::Create {
                object: json!({"metadata": {"name": name}}),
            },
        )
        .expecting(Expectation::Creations {
            key: "ns/vm".into(),
            count: 1,
        })
    }

    #[test]
    fn a_failed_write_stops_the_plan_and_lowers_its_expectation() {
        let mut plan = Plan::idle();
        plan.push_write(create("a"));
        plan.push_write(create("b"));
        plan.push_write(create("c"));
        let mut api = Scripted {
            ok: 1,
            sent: vec![],
            events: 0,
        };
        let mut exp = ControllerExpectations::new();
        let out = run_ready(execute(&plan, &mut With(&mut api, &mut exp), Instant::ZERO)).unwrap();
        assert_eq!(api.sent, ["create a"]);
        assert_eq!(out.writes_sent, 1);
        assert_eq!(
            out.failed.as_ref().map(|e| e.kind),
            Some(ApiErrorKind::Conflict)
        );
        // A conflict waits for the watch (which brings the newer object), not the rate limiter.
        assert_eq!(out.queue, Requeue::after(std::time::Duration::from_secs(1)));
        assert_eq!(
            out.error.as_ref().map(DecideError::label),
            Some("api_write")
        );
        // One create was sent and is still expected; the failed one is not.
        assert_eq!(exp.pending("ns/vm", Instant::ZERO).creations, 1);
    }

    #[test]
    fn a_plan_that_goes_through_keeps_its_own_outcome() {
        let mut plan = Plan::idle();
        plan.push_write(create("a"));
        plan.queue = Requeue::after(std::time::Duration::from_secs(5));
        plan.events.push(Event::normal(
            Default::default(),
            "SuccessfulCreate",
            "created",
        ));
        let mut api = Scripted {
            ok: 9,
            sent: vec![],
            events: 0,
        };
        let mut exp = ControllerExpectations::new();
        let out = run_ready(execute(&plan, &mut With(&mut api, &mut exp), Instant::ZERO)).unwrap();
        assert_eq!(out.failed, None);
        assert_eq!(out.queue.after_seconds(), Some(5));
        assert_eq!(api.events, 1);
    }
}
