//! The VMI subresources of `subresources.kubevirt.io` in `kvrs run`'s embedded API server:
//! `pause`, `unpause`, `softreboot`, `reset`, `freeze`, `unfreeze`, `guestosinfo`, `userlist`,
//! `filesystemlist`, and the `console` and `vnc` streams, so that `virtctl --kubeconfig
//! <run>/kubeconfig pause vmi guest` (or `console guest`) works as on a cluster.
//!
//! On a cluster virt-api reads the VMI, decides, and forwards the request over mutual TLS to
//! the virt-handler of the VMI's node, which carries it out on the launcher. Here virt-api's
//! decisions are the same functions (`kvrs_virt_api::subresources::{vmi, console}`), in the
//! same order with the same answers, and "the handler" is virt-handler's REST logic called in
//! this process (`kvrs_virt_handler::rest`: [`serve`] on the launcher's cmd socket,
//! [`console::open`] bridging the client's own WebSocket to the serial or VNC socket): no TLS
//! and no second hop, since the API server, the handler and the launcher's sockets are all on
//! this machine. The handler's VMIs are the store's VMIs on this node.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use kvrs_apiserver::{Body, ObjectsHandle, Pending};
use kvrs_virt_api::subresources::console::{self as api_console, Stream};
use kvrs_virt_api::subresources::{ApiError, vm, vmi};
use kvrs_virt_handler::rest::console::{self, Consoles};
use kvrs_virt_handler::rest::server::{LookupVmis, serve};
use tracing::{info, warn};

const GROUP: &str = "kubevirt.io";

/// This machine's virt-handler, as the embedded API server reaches it.
#[derive(Debug)]
pub struct LocalHandler {
    /// The node `kvrs run` runs as.
    pub node: String,
    /// The kubelet's pods directory (virt-handler's `--pods-dir`).
    pub pods_dir: PathBuf,
    /// The consoles and VNC displays open: one client each per VMI, as the handler keeps them.
    pub consoles: Arc<Consoles>,
}

impl LocalHandler {
    /// The handler of `node`, its launcher pods under `pods_dir`.
    pub fn new(node: &str, pods_dir: PathBuf) -> Self {
        Self {
            node: node.to_string(),
            pods_dir,
            consoles: Arc::default(),
        }
    }

    /// The VMIs of this node in the store, as the handler's VMI cache would hold them.
    fn vmis(&self, objects: &ObjectsHandle) -> LookupVmis {
        let (objects, node) = (objects.clone(), self.node.clone());
        LookupVmis {
            lookup: Box::new(move |namespace, name| {
                let vmi = objects.objects().get(
                    GROUP,
                    "virtualmachineinstances",
                    Some(namespace),
                    name,
                )?;
                if vmi["status"]["nodeName"] != node.as_str() {
                    return None;
                }
                serde_json::from_value(vmi).ok().map(Arc::new)
            }),
            node: self.node.clone(),
            pods_dir: self.pods_dir.clone(),
        }
    }

    /// The handler is asked only for a VMI running or scheduled on this node (virt-api's
    /// `handler_address`, with this machine's handler the only one there is).
    fn check_reachable(&self, vmi: &serde_json::Value) -> Result<(), ApiError> {
        vmi::check_reachable(vmi)?;
        if vmi["status"]["nodeName"] != self.node.as_str() {
            // No handler pod on the VMI's node: virt-api's refusal.
            vmi::handler_address(vmi, &[], vmi::HANDLER_PORT)?;
        }
        Ok(())
    }
}

/// Whether `subresource` of a VMI is served here ([`take`]); the others are answered 501 by
/// the extension's synchronous path, as virt-api answers them.
pub fn serves(subresource: &str) -> bool {
    vmi::Action::from_name(subresource).is_some() || Stream::read(subresource, None).is_some()
}

/// Serves a VMI request [`serves`] chose.
pub fn take(
    local: &Arc<LocalHandler>,
    objects: ObjectsHandle,
    req: Request<Incoming>,
    namespace: String,
    name: String,
    subresource: String,
) -> Pending {
    let local = local.clone();
    if let Some(stream) = Stream::read(&subresource, req.uri().query()) {
        return Box::pin(async move {
            open_stream(&local, &objects, &namespace, &name, stream, req)
                .await
                .unwrap_or_else(|e| status(&e))
        });
    }
    Box::pin(async move {
        let method = req.method().as_str().to_string();
        let body = match read_body(req).await {
            Ok(b) => b,
            Err(e) => return status(&e),
        };
        request(
            &local,
            &objects,
            &namespace,
            &name,
            &subresource,
            &method,
            &body,
        )
        .await
    })
}

/// The largest body read: virt-api's limit for a subresource request.
const MAX_BODY: usize = 64 << 10;

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    http_body_util::Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| ApiError::bad_request(&format!("reading the request body: {e}")))
}

fn respond(code: u16, content_type: &'static str, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// KubeVirt's `Status` answer of `e`.
pub fn status(e: &ApiError) -> Response<Body> {
    respond(
        e.code,
        "application/json",
        serde_json::to_vec(&e.body()).unwrap_or_default(),
    )
}

/// A lifecycle or guest-agent request: virt-api's `vmi_request` with the local handler.
async fn request(
    local: &LocalHandler,
    objects: &ObjectsHandle,
    namespace: &str,
    name: &str,
    subresource: &str,
    method: &str,
    body: &[u8],
) -> Response<Body> {
    let request = match vmi::Request::read(subresource, method, body) {
        Some(Ok(r)) => r,
        Some(Err(e)) => return status(&e),
        None => return status(&vm::not_served(subresource)),
    };
    let key = format!("{namespace}/{name}");
    match forward(local, objects, namespace, name, &request, body).await {
        Ok((code, json)) => {
            info!(vmi = %key, dry_run = request.dry_run, status = code, "{subresource}");
            respond(code, "application/json", json)
        }
        Err(e) => {
            info!(vmi = %key, code = e.code, "{subresource} refused: {}", e.message);
            if request.action.is_get() {
                let (code, text) = vmi::get_failure(&e);
                respond(code, "text/plain; charset=utf-8", text.into_bytes())
            } else {
                status(&e)
            }
        }
    }
}

/// The VMI (and VM) read, the preconditions, the handler called: virt-api's `forward`.
async fn forward(
    local: &LocalHandler,
    objects: &ObjectsHandle,
    namespace: &str,
    name: &str,
    request: &vmi::Request,
    body: &[u8],
) -> Result<(u16, Vec<u8>), ApiError> {
    let action = request.action;
    if action == vmi::Action::Unpause {
        let vm = objects
            .objects()
            .get(GROUP, "virtualmachines", Some(namespace), name);
        vmi::check_vm(action, name, vm.as_ref())?;
    }
    let vmi = objects
        .objects()
        .get(GROUP, "virtualmachineinstances", Some(namespace), name)
        .ok_or_else(|| ApiError::not_found("virtualmachineinstance", name))?;
    vmi::validate(action, &vmi)?;
    match call_handler(local, objects, namespace, name, request, body, &vmi).await {
        Err(e) if action == vmi::Action::Reset => Err(vmi::reset_failure(e, &vmi)),
        other => other,
    }
}

/// virt-handler's REST logic for the request, in this process; its answer read as virt-api
/// reads the handler's HTTP answer.
async fn call_handler(
    local: &LocalHandler,
    objects: &ObjectsHandle,
    namespace: &str,
    name: &str,
    request: &vmi::Request,
    body: &[u8],
    vmi: &serde_json::Value,
) -> Result<(u16, Vec<u8>), ApiError> {
    let action = request.action;
    local.check_reachable(vmi)?;
    if request.dry_run {
        return Ok((200, Vec::new()));
    }
    // The handler's own reading of the path virt-api would call.
    let target =
        kvrs_virt_handler::rest::route(action.method(), &action.handler_path(namespace, name))
            .map_err(|a| ApiError::internal(&String::from_utf8_lossy(&a.body)))?;
    let forwarded = if action.forwards_body() { body } else { &[] };
    let answer = serve(&local.vmis(objects), &target, forwarded).await;
    if !(200..300).contains(&answer.status) {
        let reason = StatusCode::from_u16(answer.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        return Err(ApiError::internal(&vmi::handler_failure(
            answer.status,
            reason,
            String::from_utf8_lossy(&answer.body).trim_end(),
        )));
    }
    if !action.is_get() {
        return Ok((200, Vec::new()));
    }
    serde_json::from_slice::<serde_json::Value>(&answer.body)
        .map(|v| (200, serde_json::to_vec(&v).unwrap_or_default()))
        .map_err(|e| ApiError::internal(&e.to_string()))
}

/// `console` / `vnc`: virt-api's checks (the handshake, the VMI, the stream's preconditions,
/// the handler reachable), then virt-handler's console logic on the client's own request, so
/// the client's WebSocket is bridged to the launcher's socket directly. A handler refusal is
/// worded as virt-api words a handler's refused dial.
async fn open_stream(
    local: &LocalHandler,
    objects: &ObjectsHandle,
    namespace: &str,
    name: &str,
    stream: Stream,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let key = format!("{namespace}/{name}");
    let headers = req.headers();
    api_console::check_handshake(req.method().as_str(), |h| {
        headers
            .get_all(h)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    })?;
    let vmi = objects
        .objects()
        .get(GROUP, "virtualmachineinstances", Some(namespace), name)
        .ok_or_else(|| ApiError::not_found("virtualmachineinstance", name))?;
    if let Err(e) = stream.validate(&vmi) {
        info!(vmi = %key, ?stream, "Can't establish the connection: {}", e.message);
        return Err(e);
    }
    local.check_reachable(&vmi)?;
    let handler_path = stream.handler_path(namespace, name);
    let (path, query) = match handler_path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (handler_path.as_str(), None),
    };
    let target = match console::route("GET", path, query) {
        Some(Ok(t)) => t,
        Some(Err(a)) => {
            return Err(api_console::refused(a.status, a.content_type, &a.body));
        }
        None => return Err(ApiError::internal(&format!("no handler route for {path}"))),
    };
    let response = console::open(&local.vmis(objects), &local.consoles, &target, req).await;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        info!(vmi = %key, ?stream, "connected to the local handler");
        return Ok(response.map(|b| b.boxed_unsync()));
    }
    let code = response.status().as_u16();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let e = api_console::refused(code, &content_type, &body);
    warn!(vmi = %key, ?stream, "the handler refused the stream: {}", e.message);
    Err(e)
}
