//! Running a controller plan: the VM and VMI controllers' writes, in order.

use kvrs_decide::{DecideError, ErrorKind, Plan, Requeue};
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
    /// Which of the plan's writes (`plan.writes().nth(i)`) failed. Writes sent together with
    /// it may have been accepted, so this is not always `writes_sent`.
    pub failed_write: Option<usize>,
    /// What to do with the key now: the plan's own outcome, or a rate-limited retry when a write
    /// failed.
    pub queue: Requeue,
    /// The reconcile's error: the plan's, or the failed write's.
    pub error: Option<DecideError>,
}

/// Runs `plan`'s writes in order through `fx`, raising each write's expectation first and
/// lowering it if the write fails; stops at the first failure (the later writes assumed the
/// earlier ones succeeded). Writes the plan marks
/// [`alongside_previous`](kvrs_decide::ApiWrite::alongside_previous) go out together with the
/// write before them ([`Api::write_together`]), and the next write waits for all of them.
/// Events are recorded after the writes that were sent, as KubeVirt records them after acting.
///
/// A controller plan has no launcher calls or node steps; should one appear it is skipped with a
/// debug log rather than sent anywhere (only [`execute_handler`](crate::execute_handler) runs them).
///
/// `fx` is both the API and the expectations store: in the simulator one object owns both (a
/// write's watch event reaches the store before the write returns, as it can in a cluster).
/// [`With`](crate::With) pairs an API with a separate store.
pub async fn execute<E: Api + Expecting>(plan: &Plan, fx: &mut E, now: Instant) -> Executed {
    for action in &plan.actions {
        if action.as_write().is_none() {
            debug!(action = %action.label(), "controller plan: non-write action skipped");
        }
    }
    let writes = plan.write_list();
    let mut writes_sent = 0;
    let mut failed = None;
    let mut start = 0;
    while start < writes.len() && failed.is_none() {
        let end = start
            + 1
            + writes[start + 1..]
                .iter()
                .take_while(|w| w.alongside_previous)
                .count();
        let wave = &writes[start..end];
        for w in wave {
            if let Some(e) = &w.expectation {
                fx.raise(e, now);
            }
        }
        let results = if let [one] = wave {
            vec![fx.write(one).await]
        } else {
            fx.write_together(wave).await
        };
        for (i, (write, result)) in wave.iter().zip(results).enumerate() {
            match result {
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
                    if failed.is_none() {
                        failed = Some((start + i, err));
                    }
                }
            }
        }
        start = end;
    }
    for event in &plan.events {
        fx.event(event).await;
    }
    finish(plan, writes_sent, failed)
}

fn finish(plan: &Plan, writes_sent: usize, failed: Option<(usize, ApiError)>) -> Executed {
    match failed {
        None => Executed {
            writes_sent,
            failed: None,
            failed_write: None,
            queue: plan.queue.clone(),
            error: plan.error.clone(),
        },
        Some((index, err)) => Executed {
            writes_sent,
            error: Some(DecideError::new(ErrorKind::ApiWrite, err.message.clone())),
            queue: retry_after(&err),
            failed: Some(err),
            failed_write: Some(index),
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
    /// An API that refuses the write named `fail` and records which writes went out together.
    struct Waves {
        fail: &'static str,
        sent: Vec<String>,
        waves: Vec<Vec<String>>,
    }

    impl Api for Waves {
        async fn write(&mut self, w: &ApiWrite) -> Result<(), ApiError> {
            self.sent.push(w.name.clone());
            if w.name == self.fail {
                return Err(ApiError::new(ApiErrorKind::Conflict, "test failed"));
            }
            Ok(())
        }
        async fn write_together(&mut self, writes: &[&ApiWrite]) -> Vec<Result<(), ApiError>> {
            self.waves
                .push(writes.iter().map(|w| w.name.clone()).collect());
            let mut out = Vec::new();
            for w in writes {
                out.push(self.write(w).await);
            }
            out
        }
        async fn event(&mut self, _: &Event) {}
    }

    impl Waves {
        fn failing(fail: &'static str) -> Self {
            Waves {
                fail,
                sent: vec![],
                waves: vec![],
            }
        }
    }

    /// Creates `a`, `b` (independent of `a`), then `c`.
    fn a_with_b_then_c() -> Plan {
        let mut plan = Plan::idle();
        plan.push_write(create("a"));
        plan.push_write(create("b").independent_of_previous());
        plan.push_write(create("c"));
        plan
    }

    #[test]
    fn independent_writes_go_together_and_the_next_waits_for_both() {
        let plan = a_with_b_then_c();
        let mut api = Waves::failing("none");
        let mut exp = ControllerExpectations::new();
        let out = run_ready(execute(&plan, &mut With(&mut api, &mut exp), Instant::ZERO)).unwrap();
        assert_eq!(api.waves, [["a", "b"]]);
        assert_eq!(api.sent, ["a", "b", "c"]);
        assert_eq!((out.writes_sent, out.failed_write), (3, None));
    }

    #[test]
    fn a_failure_in_a_wave_ends_the_plan_after_the_wave() {
        let plan = a_with_b_then_c();
        let mut api = Waves::failing("a");
        let mut exp = ControllerExpectations::new();
        let out = run_ready(execute(&plan, &mut With(&mut api, &mut exp), Instant::ZERO)).unwrap();
        // `b` was already on its way; `c` assumed both and is not sent.
        assert_eq!(api.sent, ["a", "b"]);
        assert_eq!(out.writes_sent, 1);
        assert_eq!(out.failed_write, Some(0));
        // Only the accepted create is still expected.
        assert_eq!(exp.pending("ns/vm", Instant::ZERO).creations, 1);
    }
}
