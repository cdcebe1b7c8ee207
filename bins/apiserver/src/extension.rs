//! API groups served by code outside this crate ([`Extension`]), behind the same bearer token
//! as every other path: for `kvrs run`, KubeVirt's aggregated `subresources.kubevirt.io`
//! (VM `start`, `stop`, `restart`), decided by kvrs-virt-api and written through the store as
//! this server's own PATCH writes. The extension reads and writes objects through [`Objects`].
//!
//! A request whose answer must wait on something other than the store (a VMI's launcher) or
//! that takes the connection over (a console's WebSocket) is taken whole
//! ([`Extension::take`]), with an [`ObjectsHandle`] that outlives the call; the server's
//! connections are served with upgrades, so the extension may answer `101` and keep the
//! client's connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Request, Response};
use serde_json::Value;

use kvrs_store::{PatchType, lookup};

use crate::error::ApiError;
use crate::handler::{Body, json_response};
use crate::{State, now};

/// The largest request body an extension is given: its requests are small option documents
/// (virt-api's own limit for a subresource request).
const MAX_BODY: usize = 64 << 10;

/// An answer of an extension: HTTP status and JSON body (`None`: an empty body).
pub type Answer = (u16, Option<Value>);

/// The response to a request an extension [took](Extension::take), still to come.
pub type Pending = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// An API group served by code outside this crate. Discovery lists the group in `/apis`;
/// `/apis/{group}` and `/apis/{group}/{version}` answer [`api_group`](Self::api_group) and
/// [`resource_list`](Self::resource_list); every other path under `/apis/{group}/` goes to
/// [`serve`](Self::serve).
pub trait Extension: Send + Sync {
    /// The API group (`subresources.kubevirt.io`).
    fn group(&self) -> &str;
    /// The `APIGroup` document (also listed in `/apis`).
    fn api_group(&self) -> Value;
    /// The `APIResourceList` of `version`; `None` (404) for a version not served.
    fn resource_list(&self, version: &str) -> Option<Value>;
    /// Serves any other request under the group (the token already checked): `path` without
    /// the query, `body` read whole (at most 64 KiB).
    fn serve(&self, objects: &Objects<'_>, method: &str, path: &str, body: &[u8]) -> Answer;
    /// Whether [`take`](Self::take) serves `req` rather than [`serve`](Self::serve): for a
    /// request whose answer needs more than the store and a small body (the token is already
    /// checked; nothing of the body is read). Nothing is taken unless overridden.
    fn takes(&self, req: &Request<Incoming>) -> bool {
        let _ = req;
        false
    }
    /// Serves a request [`takes`](Self::takes) chose, whole: the response to come, which may
    /// be `101 Switching Protocols` with `hyper::upgrade::on(req)` handing the connection over.
    fn take(&self, objects: ObjectsHandle, req: Request<Incoming>) -> Pending {
        let _ = objects;
        let path = req.uri().path().to_string();
        Box::pin(async move {
            let e = ApiError::NoRoute(path);
            json_response(e.code(), &e.status())
        })
    }
}

/// The store for a request an extension took: [`Objects`] that can be kept across awaits.
#[derive(Clone)]
pub struct ObjectsHandle {
    state: Arc<State>,
}

impl ObjectsHandle {
    /// The objects, as [`Extension::serve`] sees them.
    pub fn objects(&self) -> Objects<'_> {
        Objects { state: &self.state }
    }
}

impl std::fmt::Debug for ObjectsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectsHandle").finish_non_exhaustive()
    }
}

/// The store as an [`Extension`] sees it: objects read, and JSON patches applied as the
/// server's own `PATCH` applies them (`test` operations and a `resourceVersion` in the patch
/// honoured, admission run, watchers woken).
#[derive(Debug)]
pub struct Objects<'a> {
    state: &'a State,
}

impl Objects<'_> {
    /// The object `name` (in `namespace` for a namespaced resource) of the resource
    /// `group`/`plural`, if stored.
    pub fn get(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let rt = lookup(group, plural)?;
        let key = rt.key(namespace, name);
        self.state
            .read(|s| s.get_json(&rt, &key).map(std::borrow::Cow::into_owned))
    }

    /// Applies the JSON patch `patch` (an array of operations) to the object, or to its
    /// `sub`resource (`status`); the stored object, or the error the server's `PATCH` answers
    /// (a failed `test` is 422 Invalid, a stale `resourceVersion` 409, a missing object 404).
    pub fn json_patch(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
        sub: Option<&str>,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        let rt =
            lookup(group, plural).ok_or_else(|| ApiError::NoRoute(format!("{group}/{plural}")))?;
        crate::patch::check(PatchType::Json, patch)?;
        let key = rt.key(namespace, name);
        let obj = self
            .state
            .write(|s| s.patch(&rt, &key, sub, PatchType::Json, patch, now()))?;
        Ok(kvrs_store::json_of(&obj).into_owned())
    }

    /// Creates `object` (in `namespace` for a namespaced resource) as the server's own `POST`
    /// does — a `generateName` completed, a UID given, admission run, watchers woken — and
    /// answers the stored object, or the error that `POST` answers (409 when the name is taken).
    pub fn create(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        let rt =
            lookup(group, plural).ok_or_else(|| ApiError::NoRoute(format!("{group}/{plural}")))?;
        if let Some(ns) = namespace {
            crate::handler::ensure_namespace(self.state, ns);
        }
        let opts = kvrs_store::CreateOptions {
            now: now(),
            uid: Some(self.state.uid()),
            name_suffix: Some(self.state.name_suffix()),
        };
        let obj = self
            .state
            .write(|s| s.create(&rt, namespace, object, &opts))
            .map_err(ApiError::Store)?;
        Ok(kvrs_store::json_of(&obj).into_owned())
    }
}

/// The extension serving `path`, if any.
pub(crate) fn find(state: &State, path: &str) -> Option<Arc<dyn Extension>> {
    let rest = path.strip_prefix("/apis/")?;
    state
        .extensions
        .iter()
        .find(|e| {
            rest.strip_prefix(e.group())
                .is_some_and(|r| r.is_empty() || r.starts_with('/'))
        })
        .cloned()
}

/// Serves a request under an extension's group.
pub(crate) async fn serve(
    state: Arc<State>,
    req: Request<Incoming>,
    ext: Arc<dyn Extension>,
) -> Result<Response<Body>, ApiError> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let under = path
        .strip_prefix("/apis/")
        .and_then(|r| r.strip_prefix(ext.group()))
        .unwrap_or("");
    let segs: Vec<&str> = under.split('/').filter(|s| !s.is_empty()).collect();
    let discovery = match segs.as_slice() {
        [] => Some(Some(ext.api_group())),
        [version] => Some(ext.resource_list(version)),
        _ => None,
    };
    if let Some(doc) = discovery {
        if method != Method::GET {
            return Err(ApiError::MethodNotAllowed(format!("{method} {path}")));
        }
        return doc
            .map(|d| json_response(200, &d))
            .ok_or(ApiError::NoRoute(path));
    }
    if ext.takes(&req) {
        let handle = ObjectsHandle {
            state: state.clone(),
        };
        return Ok(ext.take(handle, req).await);
    }
    let body = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| ApiError::BadRequest(format!("reading the request body: {e}")))?;
    let (code, answer) = ext.serve(&Objects { state: &state }, method.as_str(), &path, &body);
    Ok(match answer {
        Some(v) => json_response(code, &v),
        None => {
            let mut r = Response::new(Full::new(Bytes::new()).boxed_unsync());
            *r.status_mut() = hyper::StatusCode::from_u16(code)
                .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
            r.headers_mut().insert(
                CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
    })
}
