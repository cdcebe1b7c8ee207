//! The VMI subresources virt-api forwards to the virt-handler of the VMI's node (`pause`,
//! `unpause`, `softreboot`, `reset`, `freeze`, `unfreeze`, `guestosinfo`, `userlist`,
//! `filesystemlist`) as KubeVirt v1.9.0's `pkg/virt-api/rest` decides them, as plain functions:
//! the request, the VMI (and for `unpause` the VM) as read, and the handler pods of the VMI's
//! node in; KubeVirt's error or the handler call to make out. The shell
//! ([`super::serve`], [`super::handler`]) reads, calls and answers.
//!
//! Two answer styles, as KubeVirt's two request handlers have them: the `PUT` actions answer a
//! failure with a Kubernetes `Status` of its code (409 for a VMI in the wrong state, 400 when no
//! handler is found, 500 when the handler fails) and a success with an empty 200; the `GET`
//! actions answer every failure with a plain-text 500 carrying the same message, and a success
//! with the handler's JSON.

use serde::Deserialize;
use serde_json::Value;

use super::ApiError;
use super::vm::{VM_NOT_RUNNING, decode};

/// KubeVirt's `vmiNotRunning`.
pub const VMI_NOT_RUNNING: &str = "VMI is not running";
/// KubeVirt's `vmiNotPaused`.
pub const VMI_NOT_PAUSED: &str = "VMI is not paused";
/// KubeVirt's `vmiGuestAgentErr`.
pub const VMI_NO_AGENT: &str = "VMI does not have guest agent connected";
/// KubeVirt's `vmSnapshotInprogress`.
pub const VM_SNAPSHOT_IN_PROGRESS: &str = "VM snapshot is in progress";
/// The label value of virt-handler's pods (`kubevirt.io=virt-handler`).
pub const HANDLER_LABEL: &str = "kubevirt.io=virt-handler";
/// The Secret (in virt-api's namespace) holding virt-handler's serving certificate, issued by
/// virt-api's CA and mounted by the handler DaemonSet.
pub const HANDLER_SECRET: &str = "kvrs-virt-handler-certs";
/// virt-handler's console and lifecycle server port (KubeVirt's `consoleServerPort`).
pub const HANDLER_PORT: u16 = 8186;

const VMI: &str = "virtualmachineinstance";

/// A VMI subresource kvrs forwards to virt-handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `PUT pause`: the domain suspended.
    Pause,
    /// `PUT unpause`: resumed.
    Unpause,
    /// `PUT softreboot`: reboot through the agent or ACPI.
    SoftReboot,
    /// `PUT reset`: a hard reset.
    Reset,
    /// `PUT freeze`: guest filesystems frozen through the agent.
    Freeze,
    /// `PUT unfreeze`.
    Unfreeze,
    /// `GET guestosinfo`: the agent's guest information.
    GuestOsInfo,
    /// `GET userlist`: the guest's logged-in users.
    UserList,
    /// `GET filesystemlist`: the guest's filesystems.
    FilesystemList,
}

impl Action {
    /// Every action, for tests and discovery.
    pub const ALL: [Action; 9] = [
        Action::Pause,
        Action::Unpause,
        Action::SoftReboot,
        Action::Reset,
        Action::Freeze,
        Action::Unfreeze,
        Action::GuestOsInfo,
        Action::UserList,
        Action::FilesystemList,
    ];

    /// The subresource's name, also the last element of the handler's path.
    pub fn name(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Unpause => "unpause",
            Action::SoftReboot => "softreboot",
            Action::Reset => "reset",
            Action::Freeze => "freeze",
            Action::Unfreeze => "unfreeze",
            Action::GuestOsInfo => "guestosinfo",
            Action::UserList => "userlist",
            Action::FilesystemList => "filesystemlist",
        }
    }

    /// The action named `subresource`.
    pub fn from_name(subresource: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == subresource)
    }

    /// Whether it is a `GET` (answering the handler's JSON) rather than a `PUT`.
    pub fn is_get(self) -> bool {
        matches!(
            self,
            Action::GuestOsInfo | Action::UserList | Action::FilesystemList
        )
    }

    /// The HTTP method virt-api and virt-handler serve it for.
    pub fn method(self) -> &'static str {
        if self.is_get() { "GET" } else { "PUT" }
    }

    /// The handler's path for the VMI `namespace/name`.
    pub fn handler_path(self, namespace: &str, name: &str) -> String {
        format!(
            "/v1/namespaces/{namespace}/virtualmachineinstances/{name}/{}",
            self.name()
        )
    }

    /// Whether the request body travels on to the handler (freeze's unfreeze timeout).
    pub fn forwards_body(self) -> bool {
        matches!(self, Action::Freeze)
    }
}

/// KubeVirt's `PauseOptions` / `UnpauseOptions`: only a dry run.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DryRunOptions {
    /// `["All"]` for a dry run.
    #[serde(default)]
    pub dry_run: Vec<String>,
}

/// A VMI request as read before anything is fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// What is asked.
    pub action: Action,
    /// Validate only: nothing reaches the handler (pause and unpause; KubeVirt takes
    /// `dryRun: ["All"]` only).
    pub dry_run: bool,
}

impl Request {
    /// Reads `subresource`'s request: `None` for one kvrs does not forward (the caller answers
    /// 501), 405 for the wrong method, 400 for an unreadable pause or unpause body.
    pub fn read(subresource: &str, method: &str, body: &[u8]) -> Option<Result<Request, ApiError>> {
        let action = Action::from_name(subresource)?;
        let get = matches!(method, "GET" | "HEAD");
        if get != action.is_get() || (!get && method != "PUT") {
            return Some(Err(ApiError::status(
                405,
                "MethodNotAllowed",
                &format!("{subresource} is served for {} only", action.method()),
            )));
        }
        let dry_run = match action {
            Action::Pause | Action::Unpause => match decode::<DryRunOptions>(body) {
                Ok(o) => o.dry_run.first().is_some_and(|d| d == "All"),
                Err(e) => return Some(Err(e)),
            },
            _ => false,
        };
        Some(Ok(Request { action, dry_run }))
    }
}

fn phase(vmi: &Value) -> &str {
    vmi["status"]["phase"].as_str().unwrap_or("")
}

/// The VMI's condition of `kind`, if present (KubeVirt's `HasCondition` ignores the status).
fn condition<'v>(vmi: &'v Value, kind: &str) -> Option<&'v Value> {
    vmi["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// `unpause` first reads the VM of the same name: one with a snapshot in progress is refused
/// (no VM is fine: a VMI may stand alone).
pub fn check_vm(action: Action, name: &str, vm: Option<&Value>) -> Result<(), ApiError> {
    match vm {
        Some(vm) if action == Action::Unpause && !vm["status"]["snapshotInProgress"].is_null() => {
            Err(ApiError::conflict(name, VM_SNAPSHOT_IN_PROGRESS))
        }
        _ => Ok(()),
    }
}

/// The action's preconditions on the VMI as read (KubeVirt's per-handler `validate`).
pub fn validate(action: Action, vmi: &Value) -> Result<(), ApiError> {
    let name = vmi["metadata"]["name"].as_str().unwrap_or_default();
    let conflict = |m: &str| Err(ApiError::conflict_on(VMI, name, m));
    let running = phase(vmi) == "Running";
    let paused = condition(vmi, "Paused");
    let agent = condition(vmi, "AgentConnected").is_some();
    match action {
        Action::Pause => {
            if !running {
                return conflict(VM_NOT_RUNNING);
            }
            let probe = &vmi["spec"]["livenessProbe"];
            if !probe.is_null() && probe["guestAgentPing"].is_null() {
                return Err(ApiError::forbidden_on(
                    VMI,
                    name,
                    "Pausing VMIs with a non-GuestAgentPing LivenessProbe is not supported",
                ));
            }
            if paused.is_some() {
                return conflict("VMI is already paused");
            }
        }
        Action::Unpause => {
            if !running {
                return conflict(VMI_NOT_RUNNING);
            }
            if paused.is_none() {
                return conflict(VMI_NOT_PAUSED);
            }
        }
        Action::SoftReboot => {
            if !running {
                return conflict(VM_NOT_RUNNING);
            }
            if paused.is_some_and(|c| c["status"] == "True") {
                return conflict("VMI is paused");
            }
            if !agent && vmi["spec"]["domain"]["features"]["acpi"]["enabled"] == false {
                return conflict(
                    "VMI neither have the agent connected nor the ACPI feature enabled",
                );
            }
        }
        Action::Freeze if !running => return conflict(VM_NOT_RUNNING),
        Action::Unfreeze if !running => return conflict(VMI_NOT_RUNNING),
        Action::GuestOsInfo | Action::UserList | Action::FilesystemList => {
            if !running {
                return conflict(VMI_NOT_RUNNING);
            }
            if !agent {
                return conflict(VMI_NO_AGENT);
            }
        }
        Action::Reset | Action::Freeze | Action::Unfreeze => {}
    }
    Ok(())
}

/// Where to reach the VMI's handler: the address of the one virt-handler pod on its node,
/// at `port` ([`HANDLER_PORT`] unless configured).
/// `pods` are the pods of virt-handler's namespace labelled [`HANDLER_LABEL`] on the VMI's
/// node (`spec.nodeName`), as listed.
pub fn handler_address(vmi: &Value, pods: &[Value], port: u16) -> Result<String, ApiError> {
    check_reachable(vmi)?;
    let node = vmi["status"]["nodeName"].as_str().unwrap_or_default();
    match pods {
        [] => Err(ApiError::bad_request(&format!(
            "No virt-handler on node {node} found"
        ))),
        [pod] => {
            let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
            // Go's client formats the URL with an empty IP too and fails to connect; say why.
            if ip.is_empty() {
                return Err(ApiError::bad_request(&format!(
                    "virt-handler pod {} on node {node} has no IP yet",
                    pod["metadata"]["name"].as_str().unwrap_or_default()
                )));
            }
            Ok(if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            })
        }
        more => Err(ApiError::bad_request(&format!(
            "Expected to find one Pod, found {} Pods",
            more.len()
        ))),
    }
}

/// Whether the VMI's handler is asked at all: only for a VMI `Running` or `Scheduled` (the
/// first check of KubeVirt's `getVirtHandlerConnForVMI`, also where the handler is in the same
/// process, as under `kvrs run`).
pub fn check_reachable(vmi: &Value) -> Result<(), ApiError> {
    let phase = phase(vmi);
    if !matches!(phase, "Running" | "Scheduled") {
        return Err(ApiError::bad_request(&format!(
            "Unable to connect to VirtualMachineInstance because phase is {phase} instead of Running or Scheduled"
        )));
    }
    Ok(())
}

/// KubeVirt's `doRequest` error for a handler answer outside 2xx.
pub fn handler_failure(status: u16, reason: &str, body: &str) -> String {
    format!("unexpected return code {status} ({status} {reason}), message: {body}")
}

/// `reset`'s wording of a failure once the VMI is read: KubeVirt adds the phase of a VMI that
/// is not running (it may have been asked while still starting).
pub fn reset_failure(mut e: ApiError, vmi: &Value) -> ApiError {
    let phase = phase(vmi);
    if phase != "Running" {
        e.message = format!(
            "Failed to reset non-running VMI with phase {phase}: {}",
            e.message
        );
    }
    e
}

/// The answer for a `GET` action's error: KubeVirt writes the message as plain text with 500
/// whatever the error's own code.
pub fn get_failure(e: &ApiError) -> (u16, String) {
    (500, e.message.clone())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi(phase: &str, conditions: Value) -> Value {
        json!({"metadata": {"name": "v", "namespace": "ns"},
            "spec": {"domain": {}},
            "status": {"phase": phase, "nodeName": "node01", "conditions": conditions}})
    }

    fn paused() -> Value {
        json!([{"type": "Paused", "status": "True", "reason": "PausedByUser"}])
    }

    fn agent() -> Value {
        json!([{"type": "AgentConnected", "status": "True"}])
    }

    #[test]
    fn requests_are_read_with_their_method_and_dry_run() {
        let r = Request::read("pause", "PUT", br#"{"dryRun":["All"]}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            r,
            Request {
                action: Action::Pause,
                dry_run: true
            }
        );
        assert!(
            !Request::read("unpause", "PUT", b"")
                .unwrap()
                .unwrap()
                .dry_run
        );
        assert_eq!(
            Request::read("pause", "GET", b"")
                .unwrap()
                .unwrap_err()
                .code,
            405
        );
        assert_eq!(
            Request::read("guestosinfo", "PUT", b"")
                .unwrap()
                .unwrap_err()
                .code,
            405
        );
        assert_eq!(
            Request::read("guestosinfo", "GET", b"").unwrap().unwrap(),
            Request {
                action: Action::GuestOsInfo,
                dry_run: false
            }
        );
        let bad = Request::read("pause", "PUT", b"[1]").unwrap().unwrap_err();
        assert_eq!(bad.code, 400);
        assert!(
            bad.message
                .starts_with("Can not unmarshal Request body to struct")
        );
        assert!(Request::read("console", "GET", b"").is_none());
    }

    #[test]
    fn pause_needs_a_running_unpaused_vmi_without_another_probe() {
        let e = validate(Action::Pause, &vmi("Scheduled", json!([]))).unwrap_err();
        assert_eq!(e.code, 409);
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"v\": VM is not running"
        );
        assert_eq!(e.body()["details"]["kind"], "virtualmachineinstance");
        let e = validate(Action::Pause, &vmi("Running", paused())).unwrap_err();
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"v\": VMI is already paused"
        );
        let mut probed = vmi("Running", json!([]));
        probed["spec"]["livenessProbe"] = json!({"httpGet": {"port": 80}});
        let e = validate(Action::Pause, &probed).unwrap_err();
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "virtualmachineinstance.kubevirt.io \"v\" is forbidden: Pausing VMIs with a non-GuestAgentPing LivenessProbe is not supported"
        );
        probed["spec"]["livenessProbe"] = json!({"guestAgentPing": {}});
        validate(Action::Pause, &probed).unwrap();
        validate(Action::Pause, &vmi("Running", json!([]))).unwrap();
    }

    #[test]
    fn unpause_needs_a_paused_vmi_and_no_snapshot_in_progress() {
        assert!(
            validate(Action::Unpause, &vmi("Running", json!([])))
                .unwrap_err()
                .message
                .ends_with(": VMI is not paused")
        );
        assert!(
            validate(Action::Unpause, &vmi("Failed", paused()))
                .unwrap_err()
                .message
                .ends_with(": VMI is not running")
        );
        validate(Action::Unpause, &vmi("Running", paused())).unwrap();
        let vm = json!({"status": {"snapshotInProgress": "snap-1"}});
        let e = check_vm(Action::Unpause, "v", Some(&vm)).unwrap_err();
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"v\": VM snapshot is in progress"
        );
        check_vm(Action::Unpause, "v", None).unwrap();
        check_vm(Action::Pause, "v", Some(&vm)).unwrap();
        check_vm(Action::Unpause, "v", Some(&json!({"status": {}}))).unwrap();
    }

    #[test]
    fn softreboot_refuses_a_paused_vmi_and_one_without_agent_or_acpi() {
        let e = validate(Action::SoftReboot, &vmi("Running", paused())).unwrap_err();
        assert!(e.message.ends_with(": VMI is paused"), "{}", e.message);
        let mut no_acpi = vmi("Running", json!([]));
        no_acpi["spec"]["domain"]["features"] = json!({"acpi": {"enabled": false}});
        assert!(
            validate(Action::SoftReboot, &no_acpi)
                .unwrap_err()
                .message
                .ends_with(": VMI neither have the agent connected nor the ACPI feature enabled")
        );
        no_acpi["status"]["conditions"] = agent();
        validate(Action::SoftReboot, &no_acpi).unwrap();
        validate(Action::SoftReboot, &vmi("Running", json!([]))).unwrap();
        // A Paused condition that is not True does not stop a soft reboot.
        validate(
            Action::SoftReboot,
            &vmi("Running", json!([{"type": "Paused", "status": "False"}])),
        )
        .unwrap();
    }

    #[test]
    fn the_guest_agent_actions_need_a_running_vmi_with_its_agent() {
        for a in [
            Action::GuestOsInfo,
            Action::UserList,
            Action::FilesystemList,
        ] {
            let e = validate(a, &vmi("Succeeded", agent())).unwrap_err();
            assert!(e.message.ends_with(": VMI is not running"), "{a:?}");
            let e = validate(a, &vmi("Running", json!([]))).unwrap_err();
            assert!(
                e.message
                    .ends_with(": VMI does not have guest agent connected"),
                "{a:?}"
            );
            assert_eq!(get_failure(&e).0, 500);
            validate(a, &vmi("Running", agent())).unwrap();
        }
        // Reset has no precondition; freeze and unfreeze only a running VMI (two wordings).
        validate(Action::Reset, &vmi("Scheduled", json!([]))).unwrap();
        assert!(
            validate(Action::Freeze, &vmi("Pending", json!([])))
                .unwrap_err()
                .message
                .ends_with(": VM is not running")
        );
        assert!(
            validate(Action::Unfreeze, &vmi("Pending", json!([])))
                .unwrap_err()
                .message
                .ends_with(": VMI is not running")
        );
    }

    #[test]
    fn a_reset_failure_names_the_phase_of_a_vmi_not_running() {
        let e = handler_address(&vmi("Pending", json!([])), &[], HANDLER_PORT).unwrap_err();
        let e = reset_failure(e, &vmi("Pending", json!([])));
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Failed to reset non-running VMI with phase Pending: Unable to connect to VirtualMachineInstance because phase is Pending instead of Running or Scheduled"
        );
        let e = reset_failure(ApiError::internal("x"), &vmi("Running", json!([])));
        assert_eq!(e.message, "Internal error occurred: x");
    }

    #[test]
    fn the_handler_is_the_one_pod_on_the_vmis_node() {
        let running = vmi("Running", json!([]));
        let pod =
            |ip: &str| json!({"metadata": {"name": "virt-handler-x"}, "status": {"podIP": ip}});
        assert_eq!(
            handler_address(&running, &[pod("10.0.0.7")], HANDLER_PORT).unwrap(),
            "10.0.0.7:8186"
        );
        assert_eq!(
            handler_address(&running, &[pod("fd00::7")], HANDLER_PORT).unwrap(),
            "[fd00::7]:8186"
        );
        let e = handler_address(&running, &[], HANDLER_PORT).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "No virt-handler on node node01 found")
        );
        let e = handler_address(&running, &[pod("a"), pod("b")], HANDLER_PORT).unwrap_err();
        assert_eq!(e.message, "Expected to find one Pod, found 2 Pods");
        let e = handler_address(&vmi("Pending", json!([])), &[pod("10.0.0.7")], HANDLER_PORT)
            .unwrap_err();
        assert_eq!(
            e.message,
            "Unable to connect to VirtualMachineInstance because phase is Pending instead of Running or Scheduled"
        );
        assert_eq!(
            Action::Pause.handler_path("ns", "v"),
            "/v1/namespaces/ns/virtualmachineinstances/v/pause"
        );
        assert_eq!(
            handler_failure(500, "Internal Server Error", "boom"),
            "unexpected return code 500 (500 Internal Server Error), message: boom"
        );
    }
}
