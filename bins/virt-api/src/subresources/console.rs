//! The VMI `console` and `vnc` subresources as KubeVirt v1.9.0's `pkg/virt-api/rest/console.go`,
//! `vnc.go` and `streamer.go` decide them, as plain functions: the VMI as read in, KubeVirt's
//! refusal or the go-ahead out; and the wording of a handler that refused the stream.
//!
//! The order is KubeVirt's: the VMI is read (404), checked ([`validate`]), the handler of its
//! node found ([`super::vmi::handler_address`]: 400) and its WebSocket dialled ([`refused`]:
//! 500); only then is the client's connection upgraded and the two piped byte for byte (the
//! WebSocket frames pass through unchanged: the client's masked frames are what the handler
//! expects from a client, the handler's unmasked ones what a client expects from a server).
//! kvrs checks the client's upgrade request before dialling, so a request that is not a
//! WebSocket handshake cannot close another client's console on the handler.

use serde_json::Value;

use super::ApiError;
use super::vmi::VMI_NOT_RUNNING;

/// The serial console's subresource.
pub const CONSOLE: &str = "console";
/// The VNC display's subresource.
pub const VNC: &str = "vnc";

/// A stream to a VMI's launcher, through its handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The serial console.
    Console,
    /// The VNC display; `preserve_session`: the handler refuses (503) rather than closes a
    /// connected client.
    Vnc {
        /// KubeVirt's `preserveSession` query parameter.
        preserve_session: bool,
    },
}

/// Go's `strconv.ParseBool`, with anything else `false` (KubeVirt logs and goes on).
fn parse_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

impl Stream {
    /// The stream `subresource` names, with its `query`: `None` for another subresource.
    pub fn read(subresource: &str, query: Option<&str>) -> Option<Stream> {
        match subresource {
            CONSOLE => Some(Stream::Console),
            VNC => Some(Stream::Vnc {
                preserve_session: query
                    .into_iter()
                    .flat_map(|q| q.split('&'))
                    .filter_map(|kv| kv.split_once('='))
                    .find(|(k, _)| *k == "preserveSession")
                    .is_some_and(|(_, v)| parse_bool(v)),
            }),
            _ => None,
        }
    }

    /// The handler's path for the VMI `namespace/name` (KubeVirt's `ConsoleURI` / `VNCURI`).
    pub fn handler_path(self, namespace: &str, name: &str) -> String {
        let base = format!("/v1/namespaces/{namespace}/virtualmachineinstances/{name}");
        match self {
            Stream::Console => format!("{base}/console"),
            Stream::Vnc { preserve_session } => {
                format!("{base}/vnc?preserveSession={preserve_session}")
            }
        }
    }

    /// The stream's preconditions on the VMI as read.
    pub fn validate(self, vmi: &Value) -> Result<(), ApiError> {
        match self {
            Stream::Console => validate(vmi),
            Stream::Vnc { .. } => validate_vnc(vmi),
        }
    }
}

fn has_token(values: &[&str], token: &str) -> bool {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Checks that the client's request is a WebSocket handshake (`header(name)`: every value of a
/// header) before anything else is done for it, so that a request that is none cannot close
/// another client's console; a refusal is a 400 with gorilla/websocket's reason, as KubeVirt's
/// streamer answers it.
pub fn check_handshake<'h>(
    method: &str,
    header: impl Fn(&str) -> Vec<&'h str>,
) -> Result<(), ApiError> {
    use base64::Engine;
    const NOT_WS: &str = "websocket: the client is not using the websocket protocol";
    if !has_token(&header("connection"), "upgrade") {
        return Err(ApiError::bad_request(&format!(
            "{NOT_WS}: 'upgrade' token not found in 'Connection' header"
        )));
    }
    if !has_token(&header("upgrade"), "websocket") {
        return Err(ApiError::bad_request(&format!(
            "{NOT_WS}: 'websocket' token not found in 'Upgrade' header"
        )));
    }
    if method != "GET" {
        return Err(ApiError::bad_request(&format!(
            "{NOT_WS}: request method is not GET"
        )));
    }
    if !has_token(&header("sec-websocket-version"), "13") {
        return Err(ApiError::bad_request(
            "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header",
        ));
    }
    let key = header("sec-websocket-key")
        .first()
        .map(|k| k.trim())
        .unwrap_or_default();
    if base64::engine::general_purpose::STANDARD
        .decode(key)
        .map(|k| k.len())
        != Ok(16)
    {
        return Err(ApiError::bad_request(
            "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length",
        ));
    }
    Ok(())
}

/// KubeVirt's `vmiHasDisplay`: a VMI without a graphics device, or not running, is refused
/// (400 both; a failed VMI is not running).
pub fn validate_vnc(vmi: &Value) -> Result<(), ApiError> {
    if vmi["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] == false {
        return Err(ApiError::bad_request("No graphics devices are present."));
    }
    if vmi["status"]["phase"] != "Running" {
        return Err(ApiError::bad_request(VMI_NOT_RUNNING));
    }
    Ok(())
}

/// KubeVirt's `validateVMIForConsole`: a VMI without a serial console (400), a failed one
/// (409) and one not running (400) are refused.
pub fn validate(vmi: &Value) -> Result<(), ApiError> {
    let name = vmi["metadata"]["name"].as_str().unwrap_or_default();
    if vmi["spec"]["domain"]["devices"]["autoattachSerialConsole"] == false {
        return Err(ApiError::bad_request("No serial consoles are present."));
    }
    match vmi["status"]["phase"].as_str().unwrap_or_default() {
        "Failed" => Err(ApiError::conflict_on(
            "virtualmachineinstance",
            name,
            "VMI is in failed status",
        )),
        "Running" => Ok(()),
        _ => Err(ApiError::bad_request(VMI_NOT_RUNNING)),
    }
}

/// The error of a handler that answered the WebSocket dial with `status` instead of `101`
/// (KubeVirt's `EnrichError` around gorilla's "bad handshake"): a plain-text body is quoted, a
/// failed `Status` speaks for itself, anything else is left out; always a 500 to the client.
pub fn refused(status: u16, content_type: &str, body: &[u8]) -> ApiError {
    let dial = format!("Can't connect to websocket ({status}): websocket: bad handshake");
    if content_type.contains("application/json")
        && let Ok(s) = serde_json::from_slice::<Value>(body)
        && s["kind"] == "Status"
        && s["status"] != "Success"
    {
        let code = s["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(500);
        let message = s["message"].as_str().unwrap_or_default();
        let reason = s["reason"].as_str().unwrap_or("InternalError");
        return ApiError::status(code, static_reason(reason), message);
    }
    if content_type.contains("text/plain") && !body.is_empty() {
        return ApiError::internal(&format!(
            "{dial}: application info: {}",
            String::from_utf8_lossy(body)
        ));
    }
    ApiError::internal(&dial)
}

/// The `Status` reasons a handler may answer with, as `'static` (anything else: `InternalError`).
fn static_reason(reason: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "BadRequest",
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "Conflict",
        "InternalError",
        "ServiceUnavailable",
    ];
    KNOWN
        .iter()
        .find(|k| **k == reason)
        .copied()
        .unwrap_or("InternalError")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi(phase: &str) -> Value {
        json!({"metadata": {"name": "v", "namespace": "ns"}, "spec": {"domain": {"devices": {}}},
            "status": {"phase": phase, "nodeName": "node01"}})
    }

    #[test]
    fn a_running_vmi_with_its_serial_console_is_served() {
        validate(&vmi("Running")).unwrap();
        let mut explicit = vmi("Running");
        explicit["spec"]["domain"]["devices"]["autoattachSerialConsole"] = json!(true);
        validate(&explicit).unwrap();
    }

    #[test]
    fn refusals_are_kubevirts() {
        let mut none = vmi("Running");
        none["spec"]["domain"]["devices"]["autoattachSerialConsole"] = json!(false);
        let e = validate(&none).unwrap_err();
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (400, "BadRequest", "No serial consoles are present.")
        );
        let e = validate(&vmi("Failed")).unwrap_err();
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"v\": VMI is in failed status"
        );
        for phase in ["Pending", "Scheduling", "Scheduled", "Succeeded", ""] {
            let e = validate(&vmi(phase)).unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (400, "VMI is not running"),
                "{phase}"
            );
        }
    }

    #[test]
    fn vnc_needs_a_graphics_device_and_a_running_vmi() {
        let vnc = Stream::Vnc {
            preserve_session: false,
        };
        vnc.validate(&vmi("Running")).unwrap();
        let mut headless = vmi("Running");
        headless["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = json!(false);
        let e = vnc.validate(&headless).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "No graphics devices are present.")
        );
        // A headless VMI still has its serial console.
        Stream::Console.validate(&headless).unwrap();
        let e = vnc.validate(&vmi("Failed")).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (400, "VMI is not running"));
    }

    #[test]
    fn streams_are_read_with_vncs_preserve_session() {
        assert_eq!(Stream::read("console", None), Some(Stream::Console));
        assert_eq!(Stream::read("pause", None), None);
        assert_eq!(
            Stream::read("vnc", Some("preserveSession=true")),
            Some(Stream::Vnc {
                preserve_session: true
            })
        );
        for q in [
            None,
            Some("preserveSession=maybe"),
            Some("preserveSession=0"),
        ] {
            assert_eq!(
                Stream::read("vnc", q),
                Some(Stream::Vnc {
                    preserve_session: false
                }),
                "{q:?}"
            );
        }
        assert_eq!(
            Stream::Console.handler_path("ns", "v"),
            "/v1/namespaces/ns/virtualmachineinstances/v/console"
        );
        assert_eq!(
            Stream::Vnc {
                preserve_session: false
            }
            .handler_path("ns", "v"),
            "/v1/namespaces/ns/virtualmachineinstances/v/vnc?preserveSession=false"
        );
    }

    #[test]
    fn a_handlers_refusal_is_worded_as_kubevirts_enrich_error() {
        let e = refused(404, "text/plain; charset=utf-8", b"VMI ns/v does not exist");
        assert_eq!((e.code, e.reason), (500, "InternalError"));
        assert_eq!(
            e.message,
            "Internal error occurred: Can't connect to websocket (404): websocket: bad handshake: application info: VMI ns/v does not exist"
        );
        assert_eq!(
            refused(502, "text/html", b"<html/>").message,
            "Internal error occurred: Can't connect to websocket (502): websocket: bad handshake"
        );
        let status = json!({"kind": "Status", "status": "Failure", "code": 403,
            "reason": "Forbidden", "message": "no"});
        let e = refused(403, "application/json", status.to_string().as_bytes());
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (403, "Forbidden", "no")
        );
    }
}
