//! What the runner reports on `pods/status`: pure builders of strategic merge patches (the
//! patch a kubelet sends; conditions merge by `type` and container statuses by `name`, so the
//! `kubevirt.io/virtual-machine-unpaused` condition virt-controller writes is left alone).

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// A pod's phase as the runner reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Accepted, container not started.
    Pending,
    /// The container runs.
    Running,
    /// The container exited 0.
    Succeeded,
    /// The container failed, or the pod could not start.
    Failed,
}

impl Phase {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }
}

/// The one container's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerState {
    /// Not started: `reason` like `ErrImagePull`.
    Waiting {
        /// Why.
        reason: String,
        /// Details.
        message: String,
    },
    /// Running since `started_at`.
    Running {
        /// RFC 3339.
        started_at: String,
    },
    /// Exited.
    Terminated {
        /// The exit code (128 + signal when killed by one).
        exit_code: i32,
        /// The signal that ended it, if any.
        signal: Option<i32>,
        /// `Completed`, `Error`, ...
        reason: String,
        /// The log's last lines when it failed (`FallbackToLogsOnError`).
        message: Option<String>,
        /// RFC 3339.
        started_at: Option<String>,
        /// RFC 3339.
        finished_at: String,
    },
}

/// Everything one status patch says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodReport {
    /// The phase.
    pub phase: Phase,
    /// Pod-level reason (e.g. `ErrImagePull`, `NodeRestart`).
    pub reason: Option<String>,
    /// Pod-level message.
    pub message: Option<String>,
    /// `status.podIP`, once the network is up.
    pub pod_ip: Option<Ipv4Addr>,
    /// `status.hostIP`.
    pub host_ip: Ipv4Addr,
    /// `status.startTime`.
    pub start_time: Option<String>,
    /// The container's name.
    pub container: String,
    /// Its image.
    pub image: String,
    /// Its state.
    pub state: ContainerState,
    /// Whether it passed its readiness check (the launcher socket exists).
    pub ready: bool,
    /// The pod's other containers that were run, after the main one in `containerStatuses`.
    pub sidecars: Vec<ContainerReport>,
}

/// The status of one of the pod's other containers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerReport {
    /// The container's name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// Its state.
    pub state: ContainerState,
    /// Whether it is ready.
    pub ready: bool,
}

/// Now, as the API's `Time` (seconds, UTC).
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The strategic merge patch of `pods/status` that reports `r` for `current` (whose conditions
/// keep their transition times when their status does not change and whose readiness gates
/// decide `Ready`), at `now`.
pub fn status_patch(r: &PodReport, current: &Pod, now: &str) -> Value {
    let existing = current
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let condition = |t: &str, ok: bool, reason: Option<&str>| {
        let status = if ok { "True" } else { "False" };
        let since = existing
            .iter()
            .find(|c| c.type_ == t && c.status == status)
            .and_then(|c| c.last_transition_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(|| json!(now));
        let mut c = json!({"type": t, "status": status, "lastProbeTime": null, "lastTransitionTime": since});
        if let Some(reason) = reason.filter(|_| !ok) {
            c["reason"] = json!(reason);
        }
        c
    };
    let running = matches!(r.state, ContainerState::Running { .. });
    let done = matches!(r.phase, Phase::Succeeded | Phase::Failed);
    let sidecar_ready =
        |c: &ContainerReport| c.ready && matches!(c.state, ContainerState::Running { .. });
    let containers_ready = running && r.ready && r.sidecars.iter().all(sidecar_ready);
    let gates_ok = current
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .all(|g| {
            existing
                .iter()
                .any(|c| c.type_ == g.condition_type && c.status == "True")
        });
    let not_ready = if done {
        "PodCompleted"
    } else if !containers_ready {
        "ContainersNotReady"
    } else {
        "ReadinessGatesNotReady"
    };
    let conditions = vec![
        condition(
            "PodReadyToStartContainers",
            r.pod_ip.is_some() && !done,
            None,
        ),
        condition("Initialized", true, None),
        condition("Ready", containers_ready && gates_ok, Some(not_ready)),
        condition(
            "ContainersReady",
            containers_ready,
            Some(if done {
                "PodCompleted"
            } else {
                "ContainersNotReady"
            }),
        ),
        condition("PodScheduled", true, None),
    ];
    let mut conditions = conditions;
    // The kubelet names the containers that keep a running pod from being ready.
    let unready: Vec<&str> = std::iter::once((&r.container, running && r.ready))
        .chain(r.sidecars.iter().map(|c| (&c.name, sidecar_ready(c))))
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| n.as_str())
        .collect();
    // Null when ready: a strategic merge patch would keep an earlier message otherwise.
    let message = (!done && !unready.is_empty())
        .then(|| format!("containers with unready status: [{}]", unready.join(" ")));
    for c in conditions
        .iter_mut()
        .filter(|c| c["type"] == "Ready" || c["type"] == "ContainersReady")
    {
        c["message"] = json!(message);
    }
    let mut statuses = vec![container_status(
        &r.container,
        &r.image,
        &r.state,
        running && r.ready,
    )];
    for c in &r.sidecars {
        statuses.push(container_status(
            &c.name,
            &c.image,
            &c.state,
            sidecar_ready(c),
        ));
    }
    let mut status = json!({
        "phase": r.phase.as_str(),
        "hostIP": r.host_ip.to_string(),
        "hostIPs": [{"ip": r.host_ip.to_string()}],
        "conditions": conditions,
        "containerStatuses": statuses,
        "reason": r.reason,
        "message": r.message,
    });
    if let Some(ip) = r.pod_ip {
        status["podIP"] = json!(ip.to_string());
        status["podIPs"] = json!([{"ip": ip.to_string()}]);
    }
    if let Some(t) = &r.start_time {
        status["startTime"] = json!(t);
    }
    json!({"status": status})
}

/// One entry of `containerStatuses`.
fn container_status(name: &str, image: &str, state: &ContainerState, ready: bool) -> Value {
    let state = match state {
        ContainerState::Waiting { reason, message } => {
            json!({"waiting": {"reason": reason, "message": message}})
        }
        ContainerState::Running { started_at } => json!({"running": {"startedAt": started_at}}),
        ContainerState::Terminated {
            exit_code,
            signal,
            reason,
            message,
            started_at,
            finished_at,
        } => {
            let mut t = json!({"exitCode": exit_code, "reason": reason, "startedAt": started_at, "finishedAt": finished_at});
            if let Some(s) = signal {
                t["signal"] = json!(s);
            }
            if let Some(m) = message {
                t["message"] = json!(m);
            }
            json!({"terminated": t})
        }
    };
    let started = state.get("running").is_some();
    // A strategic merge patch of `state` merges its one-of keys: null the others.
    let mut state_patch = json!({"waiting": null, "running": null, "terminated": null});
    if let (Some(p), Some(s)) = (state_patch.as_object_mut(), state.as_object()) {
        p.extend(s.clone());
    }
    json!({
        "name": name,
        "image": image,
        "imageID": "",
        "containerID": format!("kvrs://{name}"),
        "ready": ready,
        "started": started,
        "restartCount": 0,
        "state": state_patch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(state: ContainerState, phase: Phase, ready: bool) -> PodReport {
        PodReport {
            phase,
            reason: None,
            message: None,
            pod_ip: Some(Ipv4Addr::new(10, 251, 0, 2)),
            host_ip: Ipv4Addr::LOCALHOST,
            start_time: Some("2025-01-01T00:00:00Z".into()),
            container: "compute".into(),
            image: "img".into(),
            state,
            ready,
            sidecars: Vec::new(),
        }
    }

    fn cond<'a>(p: &'a Value, t: &str) -> &'a str {
        p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .unwrap()["status"]
            .as_str()
            .unwrap()
    }

    #[test]
    fn ready_waits_for_the_socket_and_the_readiness_gates() {
        let running = ContainerState::Running {
            started_at: "2025-01-01T00:00:01Z".into(),
        };
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "readinessGates": [{"conditionType": "kubevirt.io/virtual-machine-unpaused"}]}
        }))
        .unwrap();
        let p = status_patch(&report(running.clone(), Phase::Running, false), &pod, "t");
        assert_eq!(cond(&p, "ContainersReady"), "False");
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"],
            "2025-01-01T00:00:01Z"
        );
        let p = status_patch(&report(running.clone(), Phase::Running, true), &pod, "t");
        assert_eq!(cond(&p, "ContainersReady"), "True");
        assert_eq!(cond(&p, "Ready"), "False", "the gate is not True yet");
        pod.status = serde_json::from_value(json!({"conditions": [
            {"type": "kubevirt.io/virtual-machine-unpaused", "status": "True"}]}))
        .unwrap();
        let p = status_patch(&report(running, Phase::Running, true), &pod, "t");
        assert_eq!(cond(&p, "Ready"), "True");
        assert_eq!(p["status"]["podIP"], "10.251.0.2");
    }

    #[test]
    fn every_container_is_reported_and_ready_needs_them_all() {
        let running = ContainerState::Running {
            started_at: "2025-01-01T00:00:01Z".into(),
        };
        let pod = Pod::default();
        let mut r = report(running.clone(), Phase::Running, true);
        r.sidecars.push(ContainerReport {
            name: "hook-sidecar-0".into(),
            image: "shim".into(),
            state: running,
            ready: true,
        });
        let p = status_patch(&r, &pod, "t");
        let statuses = p["status"]["containerStatuses"].as_array().unwrap();
        let names: Vec<&str> = statuses
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["compute", "hook-sidecar-0"]);
        assert_eq!(statuses[1]["ready"], true);
        assert_eq!(cond(&p, "ContainersReady"), "True");
        // A sidecar that ended: reported terminated, the pod no longer ready.
        r.sidecars[0].state = ContainerState::Terminated {
            exit_code: 1,
            signal: None,
            reason: "Error".into(),
            message: Some("Input error".into()),
            started_at: None,
            finished_at: "t".into(),
        };
        r.sidecars[0].ready = false;
        let p = status_patch(&r, &pod, "t");
        let s = &p["status"]["containerStatuses"][1];
        assert_eq!(s["state"]["terminated"]["exitCode"], 1);
        let ready = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(
            ready["message"],
            "containers with unready status: [hook-sidecar-0]"
        );
        assert_eq!(s["ready"], false);
        assert_eq!(p["status"]["containerStatuses"][0]["ready"], true);
        assert_eq!(cond(&p, "ContainersReady"), "False");
    }

    #[test]
    fn terminated_reports_the_exit_code() {
        let pod = Pod::default();
        let t = ContainerState::Terminated {
            exit_code: 3,
            signal: None,
            reason: "Error".into(),
            message: Some("boom".into()),
            started_at: None,
            finished_at: "t".into(),
        };
        let p = status_patch(&report(t, Phase::Failed, false), &pod, "t");
        assert_eq!(p["status"]["phase"], "Failed");
        let s = &p["status"]["containerStatuses"][0]["state"];
        assert_eq!(s["terminated"]["exitCode"], 3);
        assert!(s["running"].is_null());
        assert_eq!(cond(&p, "Ready"), "False");
    }
}
