//! VM `start`, `stop` and `restart` as KubeVirt v1.9.0's `pkg/virt-api/rest/lifecycle.go` does
//! them, as a pure decision: the VM (and its VMI, if any) as read plus the request's options in,
//! the JSON patches to write (each with KubeVirt's `test` preconditions) or KubeVirt's error out.
//!
//! Per run strategy:
//!
//! | strategy         | start                                   | stop                                  | restart             |
//! |------------------|-----------------------------------------|---------------------------------------|---------------------|
//! | `Halted`         | `spec.runStrategy` → `Always` (or a paused start request) | only a shorter grace period: stop request | 409 |
//! | `Manual`         | start request (stop+start after a final VMI) | stop request                       | stop+start requests |
//! | `RerunOnFailure` | start request (stop+start after `Succeeded`; 409 after `Failed`) | stop request      | stop+start requests |
//! | `Always`         | 409 `Always does not support manual start requests` | `spec.runStrategy` → `Halted` | stop+start requests |
//! | `Once`           | 409                                     | `spec.runStrategy` → `Halted`         | 409                 |

use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiError;

/// KubeVirt's message for a VM with a failed volume migration.
pub const MANUAL_RECOVERY_REQUIRED: &str = "VM recovery required: Volume migration failed, leaving some volumes pointing to non-consistent targets; manual intervention is needed to reassign them to their original volumes.";
/// KubeVirt's `vmNotRunning`.
pub const VM_NOT_RUNNING: &str = "VM is not running";

/// KubeVirt's `StartOptions`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StartOptions {
    /// Start the VMI paused.
    #[serde(default)]
    pub paused: bool,
    /// `["All"]` for a dry run.
    #[serde(default)]
    pub dry_run: Vec<String>,
}

/// KubeVirt's `StopOptions`: `gracePeriod` 0 is virtctl's `--force`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StopOptions {
    /// The VMI's new `terminationGracePeriodSeconds`.
    pub grace_period: Option<i64>,
    /// `["All"]` for a dry run.
    #[serde(default)]
    pub dry_run: Vec<String>,
}

/// KubeVirt's `RestartOptions`: only `gracePeriodSeconds: 0` (force) is accepted.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RestartOptions {
    /// 0 for a forced restart.
    pub grace_period_seconds: Option<i64>,
    /// `["All"]` for a dry run.
    #[serde(default)]
    pub dry_run: Vec<String>,
}

/// Which part of an object a patch goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The VM (`PATCH .../virtualmachines/NAME`).
    Vm,
    /// The VM's status subresource.
    VmStatus,
    /// The VMI (`PATCH .../virtualmachineinstances/NAME`).
    Vmi,
}

/// One JSON patch to send.
#[derive(Clone, Debug, PartialEq)]
pub struct PatchOp {
    /// Where.
    pub target: Target,
    /// The operations (a JSON array).
    pub patch: Value,
}

/// The writes of one request, in order; the answer is 202 once all are done.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The patches.
    pub patches: Vec<PatchOp>,
    /// A write to undo when a later one fails (restart's grace period).
    pub rollback: Option<PatchOp>,
}

impl Plan {
    /// Writes the patches in order with `patch` (a synchronous writer: `kvrs run`'s embedded
    /// API server; virt-api's server does the same over its client), stopping at the first
    /// error; when a write after the first fails, the [`rollback`](Self::rollback) is written
    /// too (its own failure only logged).
    pub fn apply(
        &self,
        mut patch: impl FnMut(&PatchOp) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        for (i, op) in self.patches.iter().enumerate() {
            if let Err(e) = patch(op) {
                if i > 0
                    && let Some(back) = &self.rollback
                    && let Err(r) = patch(back)
                {
                    tracing::error!("rolling back the grace period: {}", r.message);
                }
                return Err(e);
            }
        }
        Ok(())
    }
}

/// A VM's run strategy as KubeVirt's `VirtualMachine.RunStrategy()` reads it.
pub fn run_strategy(vm: &Value) -> Result<String, ApiError> {
    let spec = &vm["spec"];
    match (spec.get("running"), spec["runStrategy"].as_str()) {
        (Some(r), Some(_)) if !r.is_null() => Err(ApiError::internal(
            "running and runstrategy are mutually exclusive",
        )),
        (_, Some(s)) => Ok(s.to_string()),
        (Some(Value::Bool(true)), None) => Ok("Always".into()),
        _ => Ok("Halted".into()),
    }
}

fn vmi_phase(vmi: Option<&Value>) -> Option<&str> {
    vmi.map(|v| v["status"]["phase"].as_str().unwrap_or(""))
}

fn is_final(vmi: &Value) -> bool {
    matches!(
        vmi["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

fn has_condition(vm: &Value, kind: &str) -> bool {
    vm["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

fn name_of(v: &Value) -> String {
    v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// KubeVirt's `getRunningPatch`: `spec.runStrategy` (or the deprecated `spec.running`) set,
/// tested against its current value.
fn running_patch(vm: &Value, running: bool) -> PatchOp {
    let spec = &vm["spec"];
    let patch = if spec["runStrategy"].is_string() {
        json!([
            {"op": "test", "path": "/spec/runStrategy", "value": spec["runStrategy"]},
            {"op": "replace", "path": "/spec/runStrategy", "value": if running { "Always" } else { "Halted" }},
        ])
    } else {
        json!([
            {"op": "test", "path": "/spec/running", "value": spec.get("running").cloned().unwrap_or(Value::Null)},
            {"op": "replace", "path": "/spec/running", "value": running},
        ])
    };
    PatchOp {
        target: Target::Vm,
        patch,
    }
}

/// A `status.stateChangeRequests` entry.
fn request(action: &str, uid: Option<&Value>, data: Option<Value>) -> Value {
    let mut r = json!({"action": action});
    if let Some(uid) = uid {
        r["uid"] = uid.clone();
    }
    if let Some(d) = data {
        r["data"] = d;
    }
    r
}

/// KubeVirt's `getChangeRequestJson`: the requests added to the VM's status, tested against
/// the current ones; a stop replaces pending requests, anything else while requests are
/// pending is refused.
fn change_requests(vm: &Value, changes: Vec<Value>) -> Result<PatchOp, ApiError> {
    let status = &vm["status"];
    let empty_status = status.as_object().is_none_or(|o| o.is_empty());
    let mut ops = Vec::new();
    if empty_status {
        ops.push(
            json!({"op": "add", "path": "/status", "value": {"stateChangeRequests": changes}}),
        );
    } else {
        let current = status["stateChangeRequests"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        // KubeVirt tests against its Go value: an absent list is `null`.
        let tested = if status.get("stateChangeRequests").is_some() {
            status["stateChangeRequests"].clone()
        } else {
            Value::Null
        };
        ops.push(json!({"op": "test", "path": "/status/stateChangeRequests", "value": tested}));
        if current.is_empty() {
            ops.push(json!({"op": "add", "path": "/status/stateChangeRequests", "value": changes}));
        } else if changes.len() == 1 && changes[0]["action"] == "Stop" {
            ops.push(
                json!({"op": "replace", "path": "/status/stateChangeRequests", "value": changes}),
            );
        } else {
            return Err(ApiError::internal(
                "unable to complete request: stop/start already underway",
            ));
        }
    }
    if status.get("startFailure").is_some_and(|v| !v.is_null()) {
        ops.push(json!({"op": "remove", "path": "/status/startFailure"}));
    }
    Ok(PatchOp {
        target: Target::VmStatus,
        patch: Value::Array(ops),
    })
}

/// KubeVirt's `patchVMITerminationGracePeriod`: the VMI's grace period set, tested against its
/// current value; and the patch restoring it.
fn grace_period_patch(vmi: &Value, seconds: i64) -> (PatchOp, PatchOp) {
    let old = vmi["spec"]
        .get("terminationGracePeriodSeconds")
        .cloned()
        .unwrap_or(Value::Null);
    let set = PatchOp {
        target: Target::Vmi,
        patch: json!([
            {"op": "test", "path": "/spec/terminationGracePeriodSeconds", "value": old},
            {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": seconds},
        ]),
    };
    let back = PatchOp {
        target: Target::Vmi,
        patch: json!([
            {"op": "test", "path": "/spec/terminationGracePeriodSeconds", "value": seconds},
            {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": old.as_i64().unwrap_or(0)},
        ]),
    };
    (set, back)
}

/// `PUT .../virtualmachines/NAME/start`.
pub fn start(vm: &Value, vmi: Option<&Value>, options: &StartOptions) -> Result<Plan, ApiError> {
    let name = name_of(vm);
    let phase = vmi_phase(vmi);
    if let Some(vmi) = vmi
        && !is_final(vmi)
        && !matches!(phase, Some("Unknown" | ""))
    {
        return Err(ApiError::conflict(&name, "VM is already running"));
    }
    if has_condition(vm, "ManualRecoveryRequired") {
        return Err(ApiError::conflict(&name, MANUAL_RECOVERY_REQUIRED));
    }
    let data = options
        .paused
        .then(|| json!({"paused": "true"}))
        .or_else(|| Some(json!({})));
    let strategy = run_strategy(vm)?;
    let patch = match strategy.as_str() {
        "Halted" => {
            // KubeVirt skips the request when the template already starts paused, but compares
            // pointers to do so: a paused start always sends it.
            if options.paused {
                change_requests(vm, vec![request("Start", None, data)])?
            } else {
                running_patch(vm, true)
            }
        }
        "RerunOnFailure" | "Manual" => {
            let needs_restart = match (strategy.as_str(), vmi) {
                ("RerunOnFailure", Some(_)) => phase == Some("Succeeded"),
                ("Manual", Some(v)) => is_final(v),
                _ => false,
            };
            if strategy == "RerunOnFailure" && vmi.is_some() && phase == Some("Failed") {
                return Err(ApiError::conflict(
                    &name,
                    "RerunOnFailure does not support starting VM from failed state",
                ));
            }
            let start = request("Start", None, data);
            let changes = if needs_restart {
                let uid = &vmi.expect("a VMI")["metadata"]["uid"];
                vec![request("Stop", Some(uid), None), start]
            } else {
                vec![start]
            };
            change_requests(vm, changes)?
        }
        other => {
            return Err(ApiError::conflict(
                &name,
                &format!("{other} does not support manual start requests"),
            ));
        }
    };
    Ok(Plan {
        patches: vec![patch],
        rollback: None,
    })
}

/// `PUT .../virtualmachines/NAME/stop`.
pub fn stop(vm: &Value, vmi: Option<&Value>, options: &StopOptions) -> Result<Plan, ApiError> {
    let name = name_of(vm);
    let strategy = run_strategy(vm)?;
    let running = vmi.filter(|v| !is_final(v));
    let mut patches = Vec::new();
    let mut old_grace = 0;
    if let (Some(vmi), Some(grace)) = (running, options.grace_period) {
        old_grace = vmi["spec"]["terminationGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        patches.push(grace_period_patch(vmi, grace).0);
    }
    let stop_request = |vmi: &Value| {
        change_requests(
            vm,
            vec![request("Stop", Some(&vmi["metadata"]["uid"]), None)],
        )
    };
    match strategy.as_str() {
        "Halted" => {
            let Some(vmi) = running else {
                return Err(ApiError::conflict(&name, VM_NOT_RUNNING));
            };
            let has_grace = vmi["spec"]["terminationGracePeriodSeconds"].is_i64();
            if options
                .grace_period
                .is_none_or(|g| has_grace && g >= old_grace)
            {
                return Err(ApiError::conflict(
                    &name,
                    "Halted only supports manual stop requests with a shorter graceperiod",
                ));
            }
            patches.push(stop_request(vmi)?);
        }
        "RerunOnFailure" | "Manual" => {
            let Some(vmi) = running else {
                return Err(ApiError::conflict(&name, VM_NOT_RUNNING));
            };
            patches.push(stop_request(vmi)?);
        }
        _ => patches.push(running_patch(vm, false)),
    }
    Ok(Plan {
        patches,
        rollback: None,
    })
}

/// Restart's options, checked before the VM is read (as KubeVirt does): only a forced restart
/// (`gracePeriodSeconds: 0`) may name a grace period.
pub fn check_restart_options(options: &RestartOptions) -> Result<(), ApiError> {
    match options.grace_period_seconds {
        Some(g) if g > 0 => Err(ApiError::bad_request(
            "For force restart, only gracePeriod=0 is supported for now",
        )),
        Some(g) if g < 0 => Err(ApiError::bad_request(
            "gracePeriod has to be greater or equal to 0",
        )),
        _ => Ok(()),
    }
}

/// `PUT .../virtualmachines/NAME/restart`.
pub fn restart(
    vm: &Value,
    vmi: Option<&Value>,
    options: &RestartOptions,
) -> Result<Plan, ApiError> {
    let name = name_of(vm);
    check_restart_options(options)?;
    if has_condition(vm, "VolumesChange") {
        return Err(ApiError::conflict(&name, MANUAL_RECOVERY_REQUIRED));
    }
    let strategy = run_strategy(vm)?;
    if matches!(strategy.as_str(), "Halted" | "Once") {
        return Err(ApiError::conflict(
            &name,
            &format!("RunStategy {strategy} does not support manual restart requests"),
        ));
    }
    let Some(vmi) = vmi else {
        return Err(ApiError::conflict(&name, "VM is not running: Halted"));
    };
    let mut patches = Vec::new();
    let mut rollback = None;
    if options.grace_period_seconds == Some(0) {
        let (set, back) = grace_period_patch(vmi, 1);
        patches.push(set);
        rollback = Some(back);
    }
    patches.push(change_requests(
        vm,
        vec![
            request("Stop", Some(&vmi["metadata"]["uid"]), None),
            request("Start", None, None),
        ],
    )?);
    Ok(Plan { patches, rollback })
}

/// A `start`, `stop` or `restart` request as read before the VM is: KubeVirt decodes stop's
/// and restart's options first (a bad body is a 400 even for a VM that does not exist),
/// start's only once the VM is read. virt-api's server and `kvrs run`'s embedded API server
/// both serve the VM subresources through [`Request::read`] and [`Request::decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `start` (its options are read by [`Request::decide`]).
    Start,
    /// `stop`.
    Stop(StopOptions),
    /// `restart`, its options checked.
    Restart(RestartOptions),
}

impl Request {
    /// Reads a request for `subresource`: 501 for one kvrs does not serve yet, 405 for a
    /// method other than `PUT`, 400 for a bad stop or restart body.
    pub fn read(subresource: &str, method: &str, body: &[u8]) -> Result<Request, ApiError> {
        if !matches!(subresource, "start" | "stop" | "restart") {
            return Err(not_served(subresource));
        }
        if method != "PUT" {
            return Err(ApiError::status(
                405,
                "MethodNotAllowed",
                &format!("{subresource} is served for PUT only"),
            ));
        }
        Ok(match subresource {
            "stop" => Request::Stop(decode(body)?),
            "restart" => {
                let o = decode(body)?;
                check_restart_options(&o)?;
                Request::Restart(o)
            }
            _ => Request::Start,
        })
    }

    /// The decision for the VM and its VMI as read (`body`: the request's, for start's
    /// options): the patches, and whether the request is a dry run.
    pub fn decide(
        &self,
        vm: &Value,
        vmi: Option<&Value>,
        body: &[u8],
    ) -> Result<(Plan, bool), ApiError> {
        match self {
            Request::Stop(o) => Ok((stop(vm, vmi, o)?, !o.dry_run.is_empty())),
            Request::Restart(o) => Ok((restart(vm, vmi, o)?, !o.dry_run.is_empty())),
            Request::Start => {
                let o: StartOptions = decode(body)?;
                Ok((start(vm, vmi, &o)?, !o.dry_run.is_empty()))
            }
        }
    }
}

/// KubeVirt's `decodeBody`: an empty body is the defaults, anything unreadable a 400.
pub fn decode<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let refuse = |e: &dyn std::fmt::Display| {
        ApiError::bad_request(&format!(
            "Can not unmarshal Request body to struct, error: {e}"
        ))
    };
    // Go's decoder reads only an object (or null) into a struct; serde's derive would also
    // take an array as the fields in order (`[1]` as `gracePeriod: 1`).
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| refuse(&e))?;
    match value {
        serde_json::Value::Null => Ok(T::default()),
        serde_json::Value::Object(_) => serde_json::from_value(value).map_err(|e| refuse(&e)),
        other => Err(refuse(&format!(
            "json: cannot unmarshal {} into a request options object",
            match other {
                serde_json::Value::Array(_) => "array",
                serde_json::Value::String(_) => "string",
                serde_json::Value::Number(_) => "number",
                _ => "bool",
            }
        ))),
    }
}

/// The 501 of a subresource kvrs does not serve yet.
pub fn not_served(subresource: &str) -> ApiError {
    ApiError::status(
        501,
        "NotImplemented",
        &format!("the {subresource} subresource is not served by kvrs yet"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_body_is_the_defaults_and_garbage_is_a_400() {
        assert_eq!(decode::<StopOptions>(b"").unwrap(), StopOptions::default());
        assert_eq!(
            decode::<StopOptions>(b"null").unwrap(),
            StopOptions::default()
        );
        for not_an_object in [&b"[1]"[..], b"\"x\"", b"3", b"true"] {
            let err = decode::<StopOptions>(not_an_object).unwrap_err();
            assert!(format!("{err:?}").contains("cannot unmarshal"), "{err:?}");
        }
        assert_eq!(
            decode::<StopOptions>(br#"{"gracePeriod": 0, "dryRun": ["All"]}"#).unwrap(),
            StopOptions {
                grace_period: Some(0),
                dry_run: vec!["All".into()]
            }
        );
        let e = decode::<StartOptions>(b"{nope").unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            e.message
                .starts_with("Can not unmarshal Request body to struct, error: "),
            "{}",
            e.message
        );
    }

    #[test]
    fn requests_are_read_before_the_vm() {
        assert_eq!(
            Request::read("start", "PUT", b"{nope").unwrap(),
            Request::Start
        );
        assert_eq!(
            Request::read("stop", "PUT", b"{nope").unwrap_err().code,
            400
        );
        assert_eq!(Request::read("stop", "POST", b"").unwrap_err().code, 405);
        assert_eq!(
            Request::read("objectgraph", "PUT", b"").unwrap_err().code,
            501
        );
        assert_eq!(
            Request::read("restart", "PUT", br#"{"gracePeriodSeconds": 5}"#)
                .unwrap_err()
                .code,
            400
        );
    }

    fn vm(strategy: &str) -> Value {
        json!({"metadata": {"name": "vm1", "namespace": "default", "uid": "vm-uid"},
            "spec": {"runStrategy": strategy, "template": {"spec": {}}},
            "status": {"printableStatus": "Stopped"}})
    }

    fn vmi(phase: &str) -> Value {
        json!({"metadata": {"name": "vm1", "uid": "vmi-uid"},
            "spec": {"terminationGracePeriodSeconds": 30}, "status": {"phase": phase}})
    }

    fn err(r: Result<Plan, ApiError>) -> (u16, String) {
        let e = r.unwrap_err();
        (e.code, e.message)
    }

    fn only(plan: Plan) -> PatchOp {
        assert_eq!(plan.patches.len(), 1, "{plan:?}");
        plan.patches.into_iter().next().unwrap()
    }

    #[test]
    fn start_halted_sets_always_tested_against_halted() {
        let p = only(start(&vm("Halted"), None, &StartOptions::default()).unwrap());
        assert_eq!(p.target, Target::Vm);
        assert_eq!(
            p.patch,
            json!([{"op": "test", "path": "/spec/runStrategy", "value": "Halted"},
                {"op": "replace", "path": "/spec/runStrategy", "value": "Always"}])
        );
        // The deprecated `running`.
        let mut old = vm("Halted");
        old["spec"] = json!({"running": false});
        let p = only(start(&old, None, &StartOptions::default()).unwrap());
        assert_eq!(
            p.patch,
            json!([{"op": "test", "path": "/spec/running", "value": false},
                {"op": "replace", "path": "/spec/running", "value": true}])
        );
        // Paused: a start request in the status.
        let paused = StartOptions {
            paused: true,
            ..Default::default()
        };
        let p = only(start(&vm("Halted"), None, &paused).unwrap());
        assert_eq!(p.target, Target::VmStatus);
        assert_eq!(
            p.patch,
            json!([{"op": "test", "path": "/status/stateChangeRequests", "value": null},
                {"op": "add", "path": "/status/stateChangeRequests",
                 "value": [{"action": "Start", "data": {"paused": "true"}}]}])
        );
    }

    #[test]
    fn start_refuses_a_running_vm_and_always_and_once() {
        assert_eq!(
            err(start(
                &vm("Halted"),
                Some(&vmi("Running")),
                &StartOptions::default()
            )),
            (409, "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": VM is already running".into())
        );
        for s in ["Always", "Once"] {
            assert_eq!(
                err(start(&vm(s), None, &StartOptions::default())),
                (
                    409,
                    format!(
                        "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": {s} does not support manual start requests"
                    )
                )
            );
        }
        let mut broken = vm("Halted");
        broken["status"]["conditions"] =
            json!([{"type": "ManualRecoveryRequired", "status": "True"}]);
        assert_eq!(err(start(&broken, None, &StartOptions::default())).0, 409);
    }

    #[test]
    fn start_manual_and_rerun_send_requests() {
        let p = only(start(&vm("Manual"), None, &StartOptions::default()).unwrap());
        assert_eq!(p.target, Target::VmStatus);
        assert_eq!(
            p.patch[1],
            json!({"op": "add", "path": "/status/stateChangeRequests", "value": [{"action": "Start", "data": {}}]})
        );
        // After a final VMI: stop (that VMI) + start.
        let p = only(
            start(
                &vm("Manual"),
                Some(&vmi("Failed")),
                &StartOptions::default(),
            )
            .unwrap(),
        );
        assert_eq!(
            p.patch[1]["value"],
            json!([{"action": "Stop", "uid": "vmi-uid"}, {"action": "Start", "data": {}}])
        );
        let p = only(
            start(
                &vm("RerunOnFailure"),
                Some(&vmi("Succeeded")),
                &StartOptions::default(),
            )
            .unwrap(),
        );
        assert_eq!(p.patch[1]["value"][0]["action"], "Stop");
        assert_eq!(
            err(start(
                &vm("RerunOnFailure"),
                Some(&vmi("Failed")),
                &StartOptions::default()
            ))
            .1,
            "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": RerunOnFailure does not support starting VM from failed state"
        );
        // No status at all: the status is added whole.
        let mut bare = vm("Manual");
        bare.as_object_mut().unwrap().remove("status");
        let p = only(start(&bare, None, &StartOptions::default()).unwrap());
        assert_eq!(
            p.patch,
            json!([{"op": "add", "path": "/status", "value": {"stateChangeRequests": [{"action": "Start", "data": {}}]}}])
        );
        // Requests pending: refused.
        let mut busy = vm("Manual");
        busy["status"]["stateChangeRequests"] = json!([{"action": "Stop", "uid": "x"}]);
        assert_eq!(
            err(start(&busy, None, &StartOptions::default())),
            (
                500,
                "Internal error occurred: unable to complete request: stop/start already underway"
                    .into()
            )
        );
    }

    #[test]
    fn stop_per_strategy() {
        let opts = StopOptions::default();
        // Always and Once: runStrategy Halted.
        for s in ["Always", "Once"] {
            let p = only(stop(&vm(s), Some(&vmi("Running")), &opts).unwrap());
            assert_eq!(
                p.patch,
                json!([{"op": "test", "path": "/spec/runStrategy", "value": s},
                    {"op": "replace", "path": "/spec/runStrategy", "value": "Halted"}])
            );
        }
        // Manual / RerunOnFailure: a stop request for the running VMI; none running: 409.
        for s in ["Manual", "RerunOnFailure"] {
            let p = only(stop(&vm(s), Some(&vmi("Running")), &opts).unwrap());
            assert_eq!(p.target, Target::VmStatus);
            assert_eq!(
                p.patch[1]["value"],
                json!([{"action": "Stop", "uid": "vmi-uid"}])
            );
            assert_eq!(
                err(stop(&vm(s), Some(&vmi("Succeeded")), &opts)),
                (
                    409,
                    "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": VM is not running".into()
                )
            );
            assert_eq!(err(stop(&vm(s), None, &opts)).0, 409);
        }
        // A stop replaces a pending start.
        let mut pending = vm("Manual");
        pending["status"]["stateChangeRequests"] = json!([{"action": "Start"}]);
        let p = only(stop(&pending, Some(&vmi("Running")), &opts).unwrap());
        assert_eq!(p.patch[1]["op"], "replace");
        // Halted: only a shorter grace period.
        assert_eq!(
            err(stop(&vm("Halted"), Some(&vmi("Running")), &opts)).1,
            "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": Halted only supports manual stop requests with a shorter graceperiod"
        );
        let force = StopOptions {
            grace_period: Some(0),
            ..Default::default()
        };
        let plan = stop(&vm("Halted"), Some(&vmi("Running")), &force).unwrap();
        assert_eq!(plan.patches.len(), 2);
        assert_eq!(plan.patches[0].target, Target::Vmi);
        assert_eq!(
            plan.patches[0].patch,
            json!([{"op": "test", "path": "/spec/terminationGracePeriodSeconds", "value": 30},
                {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": 0}])
        );
        assert_eq!(plan.patches[1].target, Target::VmStatus);
        assert_eq!(
            err(stop(&vm("Halted"), None, &force)).1,
            "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": VM is not running"
        );
        // Force on Always: grace period, then Halted.
        let plan = stop(&vm("Always"), Some(&vmi("Running")), &force).unwrap();
        assert_eq!(
            plan.patches.iter().map(|p| p.target).collect::<Vec<_>>(),
            [Target::Vmi, Target::Vm]
        );
    }

    #[test]
    fn restart_per_strategy() {
        let opts = RestartOptions::default();
        for s in ["Always", "Manual", "RerunOnFailure"] {
            let p = only(restart(&vm(s), Some(&vmi("Running")), &opts).unwrap());
            assert_eq!(p.target, Target::VmStatus);
            assert_eq!(
                p.patch[1]["value"],
                json!([{"action": "Stop", "uid": "vmi-uid"}, {"action": "Start"}])
            );
            assert_eq!(
                err(restart(&vm(s), None, &opts)).1,
                "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": VM is not running: Halted"
            );
        }
        for s in ["Halted", "Once"] {
            assert_eq!(
                err(restart(&vm(s), Some(&vmi("Running")), &opts)),
                (
                    409,
                    format!(
                        "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": RunStategy {s} does not support manual restart requests"
                    )
                )
            );
        }
        let force = RestartOptions {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let plan = restart(&vm("Always"), Some(&vmi("Running")), &force).unwrap();
        assert_eq!(plan.patches.len(), 2);
        assert_eq!(plan.patches[0].patch[1]["value"], 1);
        assert_eq!(
            plan.rollback.unwrap().patch[1],
            json!({"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": 30})
        );
        let slow = RestartOptions {
            grace_period_seconds: Some(5),
            ..Default::default()
        };
        assert_eq!(
            err(restart(&vm("Always"), Some(&vmi("Running")), &slow)),
            (
                400,
                "For force restart, only gracePeriod=0 is supported for now".into()
            )
        );
    }

    #[test]
    fn run_strategy_reads_running_and_refuses_both() {
        assert_eq!(
            run_strategy(&json!({"spec": {"running": true}})).unwrap(),
            "Always"
        );
        assert_eq!(run_strategy(&json!({"spec": {}})).unwrap(), "Halted");
        assert!(
            run_strategy(&json!({"spec": {"running": true, "runStrategy": "Always"}})).is_err()
        );
    }
}
