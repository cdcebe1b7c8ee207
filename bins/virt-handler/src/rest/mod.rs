//! virt-handler's REST server: the VMI lifecycle and guest-agent calls virt-api forwards
//! (`pause`, `unpause`, `softreboot`, `reset`, `freeze`, `unfreeze`, `guestosinfo`,
//! `userlist`, `filesystemlist`), served on KubeVirt's port 8186 under
//! `/v1/namespaces/{namespace}/virtualmachineinstances/{name}/{action}` over mutual TLS, and
//! carried out on the VMI's launcher through its cmd socket, as KubeVirt v1.9.0's
//! `pkg/virt-handler/rest/lifecycle.go` does.
//!
//! The split: [`Action`] and [`route`] read a request, [`answer`] turns the launcher's result
//! into KubeVirt's answer (plain data, unit-tested); [`tls`] loads the certificates virt-api
//! issues (the Secret `kvrs-virt-handler-certs`, mounted); [`server`] is the hyper shell, which
//! looks the VMI up in this handler's own VMI cache (only VMIs of this node are served) and
//! dials the launcher for each request, as KubeVirt does.
//!
//! The serial console (`GET .../console`, a WebSocket bridged to the launcher's serial socket)
//! is [`console`]'s, with the handshake checks in [`websocket`].

pub mod console;
pub mod server;
pub mod tls;
pub mod websocket;

use std::time::Duration;

/// A lifecycle or guest-agent call on a VMI's launcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `PUT pause`: `PauseVirtualMachine`.
    Pause,
    /// `PUT unpause`: `UnpauseVirtualMachine`.
    Unpause,
    /// `PUT softreboot`: `SoftRebootVirtualMachine`.
    SoftReboot,
    /// `PUT reset`: `ResetVirtualMachine`.
    Reset,
    /// `PUT freeze` with the unfreeze timeout: `FreezeVirtualMachine`.
    Freeze,
    /// `PUT unfreeze`: `UnfreezeVirtualMachine`.
    Unfreeze,
    /// `GET guestosinfo`: `GetGuestInfo`.
    GuestOsInfo,
    /// `GET userlist`: `GetUsers`.
    UserList,
    /// `GET filesystemlist`: `GetFilesystems`.
    FilesystemList,
}

impl Action {
    fn from_name(name: &str) -> Option<Action> {
        Some(match name {
            "pause" => Action::Pause,
            "unpause" => Action::Unpause,
            "softreboot" => Action::SoftReboot,
            "reset" => Action::Reset,
            "freeze" => Action::Freeze,
            "unfreeze" => Action::Unfreeze,
            "guestosinfo" => Action::GuestOsInfo,
            "userlist" => Action::UserList,
            "filesystemlist" => Action::FilesystemList,
            _ => return None,
        })
    }

    /// Whether it is served for `GET` (answering JSON) rather than `PUT`.
    pub fn is_get(self) -> bool {
        matches!(
            self,
            Action::GuestOsInfo | Action::UserList | Action::FilesystemList
        )
    }

    /// What KubeVirt logs when the launcher call fails (the answer carries the error alone).
    pub fn failure(self) -> &'static str {
        match self {
            Action::Pause => "Failed to pause VMI",
            Action::Unpause => "Failed to unpause VMI",
            Action::SoftReboot => "Failed to soft reboot VMI",
            Action::Reset => "Failed to reset VMI",
            Action::Freeze => "Failed to freeze VMI",
            Action::Unfreeze => "Failed to unfreeze VMI",
            Action::GuestOsInfo => "Failed to get guest info",
            Action::UserList => "Failed to get user list",
            Action::FilesystemList => "Failed to get file systems",
        }
    }
}

/// A request's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The VMI's namespace.
    pub namespace: String,
    /// The VMI's name.
    pub name: String,
    /// What to do.
    pub action: Action,
}

impl Target {
    /// `namespace/name`, the handler's VMI cache key.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// An HTTP answer: status, content type, body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// `application/json` or `text/plain`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// A plain-text answer, as go-restful's `WriteError` writes one.
    pub fn text(status: u16, message: &str) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: message.as_bytes().to_vec(),
        }
    }

    fn empty(status: u16) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: Vec::new(),
        }
    }
}

/// Reads `method path`: the target, or the answer (404 for an unknown path, 405 for the wrong
/// method).
pub fn route(method: &str, path: &str) -> Result<Target, Answer> {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let [
        "",
        "v1",
        "namespaces",
        ns,
        "virtualmachineinstances",
        name,
        action,
    ] = parts.as_slice()
    else {
        return Err(Answer::text(404, "404 page not found"));
    };
    let Some(action) = Action::from_name(action) else {
        return Err(Answer::text(404, "404 page not found"));
    };
    if ns.is_empty() || name.is_empty() {
        return Err(Answer::text(404, "404 page not found"));
    }
    let get = matches!(method, "GET" | "HEAD");
    if get != action.is_get() || (!get && method != "PUT") {
        return Err(Answer::text(405, "405: Method Not Allowed"));
    }
    Ok(Target {
        namespace: ns.to_string(),
        name: name.to_string(),
        action,
    })
}

/// The VMI is not in this handler's cache (KubeVirt's `getVMI`).
pub fn vmi_missing(target: &Target) -> Answer {
    Answer::text(404, &format!("VMI {} does not exist", target.key()))
}

/// The launcher socket could not be found or dialled.
pub fn launcher_unreachable(detail: &str) -> Answer {
    Answer::text(500, detail)
}

/// Why a freeze request's body is refused (KubeVirt's three 400s).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FreezeBodyError {
    /// No body.
    #[error("failed to retrieve unfreeze timeout")]
    Missing,
    /// Not the JSON object with a Go duration.
    #[error("failed to unmarshal unfreeze timeout")]
    Unreadable,
    /// No `unfreezeTimeout`.
    #[error("Unfreeze timeout in freeze request is not set")]
    NotSet,
}

/// Reads a freeze body (`{"unfreezeTimeout": "5m0s"}`): the timeout in whole seconds.
pub fn unfreeze_timeout(body: &[u8]) -> Result<i32, FreezeBodyError> {
    if body.is_empty() {
        return Err(FreezeBodyError::Missing);
    }
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| FreezeBodyError::Unreadable)?;
    let timeout = match value.get("unfreezeTimeout") {
        None | Some(serde_json::Value::Null) => return Err(FreezeBodyError::NotSet),
        Some(serde_json::Value::String(s)) => go_duration(s).ok_or(FreezeBodyError::Unreadable)?,
        Some(_) => return Err(FreezeBodyError::Unreadable),
    };
    Ok(i32::try_from(timeout.as_secs()).unwrap_or(i32::MAX))
}

/// A Go `time.Duration` string (`1h2m3.5s`, `300ms`) as metav1.Duration reads it.
fn go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&e| e > 0)?;
        let number: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += number * seconds;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// A launcher's user or filesystem list (a JSON array, or nothing) as the Kubernetes-style list
/// KubeVirt's handler answers (`VirtualMachineInstanceGuestOSUserList`,
/// `VirtualMachineInstanceFileSystemList`): `{"metadata": {}, "items": [...]}`, `items` null
/// when the launcher said nothing, as Go writes a nil slice.
pub fn as_list(launcher_json: &str) -> Result<String, String> {
    let items = if launcher_json.is_empty() {
        serde_json::Value::Null
    } else {
        match serde_json::from_str::<serde_json::Value>(launcher_json) {
            Ok(v @ (serde_json::Value::Array(_) | serde_json::Value::Null)) => v,
            Ok(_) => return Err("the launcher's list is not a JSON array".into()),
            Err(e) => return Err(e.to_string()),
        }
    };
    Ok(serde_json::json!({"metadata": {}, "items": items}).to_string())
}

/// The answer for the launcher's result: 202 for a `PUT` done, 200 and the launcher's JSON
/// for a `GET`; a failure is 500 with its message, except freeze and unfreeze, which KubeVirt
/// answers with 400.
pub fn answer(action: Action, result: Result<Option<String>, String>) -> Answer {
    match result {
        Ok(None) => Answer::empty(202),
        Ok(Some(json)) => Answer {
            status: 200,
            content_type: "application/json",
            body: json.into_bytes(),
        },
        Err(e) => {
            let status = if matches!(action, Action::Freeze | Action::Unfreeze) {
                400
            } else {
                500
            };
            Answer::text(status, &e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_kubevirts_paths_with_their_methods() {
        let t = route("PUT", "/v1/namespaces/ns/virtualmachineinstances/v/pause").unwrap();
        assert_eq!(
            t,
            Target {
                namespace: "ns".into(),
                name: "v".into(),
                action: Action::Pause
            }
        );
        assert_eq!(t.key(), "ns/v");
        assert_eq!(
            route(
                "GET",
                "/v1/namespaces/ns/virtualmachineinstances/v/guestosinfo"
            )
            .unwrap()
            .action,
            Action::GuestOsInfo
        );
        let e = route("GET", "/v1/namespaces/ns/virtualmachineinstances/v/pause").unwrap_err();
        assert_eq!(e.status, 405);
        let e = route(
            "PUT",
            "/v1/namespaces/ns/virtualmachineinstances/v/userlist",
        )
        .unwrap_err();
        assert_eq!(e.status, 405);
        for bad in [
            "/v1/namespaces/ns/virtualmachineinstances/v/console2",
            "/v1/namespaces/ns/pods/v/pause",
            "/v2/namespaces/ns/virtualmachineinstances/v/pause",
            "/v1/namespaces//virtualmachineinstances/v/pause",
            "/",
        ] {
            assert_eq!(route("PUT", bad).unwrap_err().status, 404, "{bad}");
        }
    }

    #[test]
    fn freeze_bodies_are_read_as_kubevirt_reads_them() {
        assert_eq!(unfreeze_timeout(br#"{"unfreezeTimeout":"5m0s"}"#), Ok(300));
        assert_eq!(
            unfreeze_timeout(br#"{"unfreezeTimeout":"1h0m30s"}"#),
            Ok(3630)
        );
        assert_eq!(unfreeze_timeout(br#"{"unfreezeTimeout":"1500ms"}"#), Ok(1));
        assert_eq!(unfreeze_timeout(b""), Err(FreezeBodyError::Missing));
        assert_eq!(unfreeze_timeout(b"{}"), Err(FreezeBodyError::NotSet));
        assert_eq!(
            unfreeze_timeout(br#"{"unfreezeTimeout":"5 minutes"}"#),
            Err(FreezeBodyError::Unreadable)
        );
        assert_eq!(
            FreezeBodyError::NotSet.to_string(),
            "Unfreeze timeout in freeze request is not set"
        );
    }

    #[test]
    fn launcher_lists_become_kubernetes_lists() {
        assert_eq!(
            as_list(r#"[{"userName":"root"}]"#).unwrap(),
            r#"{"metadata":{},"items":[{"userName":"root"}]}"#
        );
        assert_eq!(as_list("[]").unwrap(), r#"{"metadata":{},"items":[]}"#);
        assert_eq!(as_list("").unwrap(), r#"{"metadata":{},"items":null}"#);
        assert!(as_list("{}").is_err());
    }

    #[test]
    fn launcher_results_become_kubevirts_answers() {
        assert_eq!(answer(Action::Pause, Ok(None)).status, 202);
        let ok = answer(Action::GuestOsInfo, Ok(Some("{\"hostname\":\"g\"}".into())));
        assert_eq!((ok.status, ok.content_type), (200, "application/json"));
        let e = answer(Action::Pause, Err("domain is not running".into()));
        assert_eq!(e.status, 500);
        assert_eq!(e.body, b"domain is not running");
        assert_eq!(answer(Action::Freeze, Err("no agent".into())).status, 400);
        let missing =
            vmi_missing(&route("PUT", "/v1/namespaces/a/virtualmachineinstances/b/reset").unwrap());
        assert_eq!(
            (missing.status, missing.body.as_slice()),
            (404, &b"VMI a/b does not exist"[..])
        );
    }
}
