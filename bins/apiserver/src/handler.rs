//! The verbs: GET (object, list, watch), POST (create, `pods/binding`), PUT, PATCH, DELETE,
//! each checked for the bearer token and answered with the object or a `Status`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::{debug, info_span};

use kvrs_store::{CreateOptions, DeleteOptions, Deleted, Propagation, Selector, json_of, lookup};

use crate::error::{ApiError, success};
use crate::query::Query;
use crate::route::{ObjectPath, Route, route};
use crate::{State, discovery, now, table};

/// Response bodies: whole JSON documents, or a watch stream.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The largest request body read (the real API server's limit is 3 MiB).
const MAX_BODY: usize = 8 << 20;

pub(crate) fn json_response(code: u16, v: &Value) -> Response<Body> {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Serves one request; never fails (errors become `Status` responses).
pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let span = info_span!("request", method = %req.method(), path = %req.uri().path());
    let _e = span.enter();
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    drop(_e);
    match serve(state, req).await {
        Ok(r) => r,
        Err(e) => {
            debug!(%method, %path, error = %e, label = e.label(), "request refused");
            json_response(e.code(), &e.status())
        }
    }
}

fn query(req: &Request<Incoming>) -> Query {
    Query::parse(req.uri().query().unwrap_or(""))
}

async fn body_bytes(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| ApiError::BadRequest(format!("reading the request body: {e}")))
}

/// Parses a JSON body; the error names the field path.
fn parse<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        ApiError::BadRequest(format!(
            "error decoding the body at {path}: {}",
            e.into_inner()
        ))
    })
}

async fn serve(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let authorized = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .is_some_and(|t| t.trim() == state.token)
        || req
            .headers()
            .get("impersonate-user")
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix(crate::kubeconfig::IMPERSONATE_PREFIX))
            .is_some_and(|t| t == state.token);
    if !authorized {
        return Err(ApiError::Unauthorized);
    }
    let path = req.uri().path().to_string();
    if let Some(ext) = crate::extension::find(&state, &path) {
        return crate::extension::serve(state, req, ext).await;
    }
    let route = route(&path)?;
    if req.method() != Method::GET && !matches!(route, Route::Object(_)) {
        return Err(ApiError::MethodNotAllowed(format!(
            "{} {path}",
            req.method()
        )));
    }
    match route {
        Route::Health => {
            let mut r = Response::new(Full::new(Bytes::from_static(b"ok")).boxed_unsync());
            r.headers_mut().insert(
                CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain"),
            );
            Ok(r)
        }
        Route::Version => Ok(json_response(200, &discovery::version())),
        Route::CoreVersions => Ok(json_response(200, &discovery::core_versions(&state.addr))),
        Route::Groups => {
            let extra: Vec<Value> = state.extensions.iter().map(|e| e.api_group()).collect();
            Ok(json_response(200, &discovery::group_list(&extra)))
        }
        Route::Group(g) => discovery::group(&g)
            .map(|d| json_response(200, &d))
            .ok_or(ApiError::NoRoute(path)),
        Route::Resources(g, v) => discovery::resource_list(&g, &v)
            .map(|d| json_response(200, &d))
            .ok_or(ApiError::NoRoute(path)),
        Route::Object(op) => object(state, req, op).await,
        Route::OpenApiV3Root => Ok(bytes_response(crate::openapi::v3_root())),
        Route::OpenApiV3(gv) => crate::openapi::v3(&gv)
            .map(bytes_response)
            .ok_or(ApiError::NoRoute(path)),
        Route::OpenApiV2 => {
            // Only JSON: a client asking for the protobuf encoding alone is refused.
            let accept = req
                .headers()
                .get(ACCEPT)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            if accept.is_empty() || accept.contains("json") || accept.contains("*/*") {
                Ok(bytes_response(crate::openapi::v2()))
            } else {
                Err(ApiError::NotAcceptable)
            }
        }
    }
}

fn bytes_response(b: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(b).boxed_unsync());
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// `?fieldValidation=Strict` (what kubectl sends to a server whose OpenAPI document says it
/// validates fields): the fields of `body` its kind's schema does not declare are refused,
/// with kube-apiserver's message.
fn strict_fields(rt: &kvrs_store::ResourceType, q: &Query, body: &Value) -> Result<(), ApiError> {
    let fields = strict_errors(rt, q, body);
    if fields.is_empty() {
        return Ok(());
    }
    Err(ApiError::BadRequest(format!(
        "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
        fields,
        kind = rt.kind,
        version = rt.version,
    )))
}

/// `unknown field "a", unknown field "b"` under `?fieldValidation=Strict`; empty otherwise.
fn strict_errors(rt: &kvrs_store::ResourceType, q: &Query, body: &Value) -> String {
    if q.get("fieldValidation") != Some("Strict") {
        return String::new();
    }
    crate::openapi::unknown_fields(&rt.group, &rt.version, &rt.kind, body)
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// [`strict_fields`] of a merge patch: kube-apiserver answers 422 about the `patch`.
fn strict_patch(rt: &kvrs_store::ResourceType, q: &Query, patch: &Value) -> Result<(), ApiError> {
    let fields = strict_errors(rt, q, &set_fields(patch));
    if fields.is_empty() {
        return Ok(());
    }
    Err(ApiError::Store(kvrs_store::StoreError::Invalid {
        resource: String::new(),
        name: String::new(),
        reason: format!(
            "patch: Invalid value: {}: strict decoding error: {fields}",
            kvrs_store::names::go_quote(&patch.to_string())
        ),
    }))
}

/// A merge or strategic-merge patch as the fields it sets (deletions and directives dropped),
/// for [`strict_fields`].
fn set_fields(patch: &Value) -> Value {
    match patch {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                .map(|(k, v)| (k.clone(), set_fields(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(set_fields).collect()),
        other => other.clone(),
    }
}

fn store_err(e: kvrs_store::StoreError) -> ApiError {
    ApiError::Store(e)
}

fn not_allowed(req: &Request<Incoming>, op: &ObjectPath) -> ApiError {
    ApiError::MethodNotAllowed(format!(
        "{} {}{}",
        req.method(),
        op.rt.id(),
        op.sub
            .as_deref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default()
    ))
}

async fn object(
    state: Arc<State>,
    req: Request<Incoming>,
    op: ObjectPath,
) -> Result<Response<Body>, ApiError> {
    let q = query(&req);
    let sub = op.sub.as_deref();
    let key = op.key();
    let rt = op.rt.clone();
    match (req.method().clone(), key, sub) {
        (Method::GET, Some(key), None | Some("status")) => {
            let obj = state.read(|s| s.get(&rt, &key)).ok_or_else(|| {
                store_err(kvrs_store::StoreError::NotFound {
                    resource: rt.id(),
                    name: key.clone(),
                })
            })?;
            let accept = req
                .headers()
                .get(ACCEPT)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            let v = json_of(&obj).into_owned();
            if table::wants_table(accept) {
                return Ok(json_response(200, &table::table(&[v], 0, now())));
            }
            Ok(json_response(200, &v))
        }
        (Method::GET, None, None) => {
            q.check_list()?;
            let selector = Selector::parse(
                op.namespace.as_deref(),
                q.get("labelSelector"),
                q.get("fieldSelector"),
            )
            .map_err(store_err)?;
            if q.flag("watch")? {
                return crate::watch::watch(state, rt, selector, &q);
            }
            let list = state.read(|s| s.list(&rt, &selector));
            let items: Vec<Value> = list.items.iter().map(|o| json_of(o).into_owned()).collect();
            let accept = req
                .headers()
                .get(ACCEPT)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            if table::wants_table(accept) {
                return Ok(json_response(
                    200,
                    &table::table(&items, list.resource_version, now()),
                ));
            }
            // `limit` is ignored and no `continue` is returned: a client that paginates gets
            // everything in the first page, consistent with the resourceVersion given.
            Ok(json_response(
                200,
                &json!({
                    "kind": format!("{}List", rt.kind),
                    "apiVersion": rt.api_version(),
                    "metadata": {"resourceVersion": list.resource_version.to_string()},
                    "items": items,
                }),
            ))
        }
        (Method::POST, None, None) => {
            // A namespaced resource is created through its namespace's path only.
            if rt.namespaced && op.namespace.is_none() {
                return Err(not_allowed(&req, &op));
            }
            if let Some(ns) = &op.namespace {
                check_url_namespace(&path_of(&req), ns)?;
            }
            let body: Value = parse(&body_bytes(req).await?)?;
            strict_fields(&rt, &q, &body)?;
            if let Some(ns) = &op.namespace {
                ensure_namespace(&state, ns);
            }
            let opts = CreateOptions {
                now: now(),
                uid: Some(state.uid()),
                name_suffix: Some(state.name_suffix()),
            };
            let obj = state
                .write(|s| s.create(&rt, op.namespace.as_deref(), body, &opts))
                .map_err(store_err)?;
            Ok(json_response(201, &json_of(&obj)))
        }
        (Method::POST, Some(key), Some("binding"))
            if rt.group.is_empty() && rt.plural == "pods" =>
        {
            #[derive(Deserialize)]
            struct Target {
                name: String,
            }
            #[derive(Deserialize)]
            struct Binding {
                target: Target,
            }
            let b: Binding = parse(&body_bytes(req).await?)?;
            state
                .write(|s| s.bind(&rt, &key, &b.target.name, now()))
                .map_err(store_err)?;
            Ok(json_response(201, &success(201)))
        }
        (Method::PUT, Some(key), None | Some("status")) => {
            let body: Value = parse(&body_bytes(req).await?)?;
            strict_fields(&rt, &q, &body)?;
            let obj = state
                .write(|s| s.update(&rt, &key, sub, body, now()))
                .map_err(store_err)?;
            Ok(json_response(200, &json_of(&obj)))
        }
        (Method::PATCH, Some(key), None | Some("status")) => {
            let ct = req
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("")
                .to_string();
            let patch_type = crate::patch::patch_type(&rt, &ct)?;
            let patch: Value = parse(&body_bytes(req).await?)?;
            crate::patch::check(patch_type, &patch)?;
            if patch_type != kvrs_store::PatchType::Json {
                strict_patch(&rt, &q, &patch)?;
            }
            let obj = state
                .write(|s| s.patch(&rt, &key, sub, patch_type, &patch, now()))
                .map_err(store_err)?;
            Ok(json_response(200, &json_of(&obj)))
        }
        (Method::DELETE, Some(key), None) => {
            let bytes = body_bytes(req).await?;
            let opts = delete_options(&bytes, &q)?;
            match state
                .write(|s| s.delete(&rt, &key, &opts, now()))
                .map_err(store_err)?
            {
                Deleted::Removed(o) => Ok(json_response(200, &json_of(&o))),
                Deleted::Pending(o) => Ok(json_response(202, &json_of(&o))),
            }
        }
        _ => Err(not_allowed(&req, &op)),
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DeleteBody {
    grace_period_seconds: Option<i64>,
    preconditions: Option<Preconditions>,
    propagation_policy: Option<String>,
    orphan_dependents: Option<bool>,
}

fn propagation(p: &str) -> Result<Propagation, ApiError> {
    match p {
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        "Orphan" => Ok(Propagation::Orphan),
        other => Err(ApiError::BadRequest(format!(
            "propagationPolicy: unsupported value {other:?}"
        ))),
    }
}

/// DeleteOptions from the body (kube-rs sends them there) and the query (kubectl's flags).
fn delete_options(bytes: &[u8], q: &Query) -> Result<DeleteOptions, ApiError> {
    let body: DeleteBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        DeleteBody::default()
    } else {
        parse(bytes)?
    };
    let pre = body.preconditions.unwrap_or_default();
    let grace = q.int("gracePeriodSeconds")?.or(body.grace_period_seconds);
    let policy = q
        .get("propagationPolicy")
        .map(str::to_string)
        .or(body.propagation_policy);
    let orphan = match q.get("orphanDependents") {
        Some(_) => Some(q.flag("orphanDependents")?),
        None => body.orphan_dependents,
    };
    let propagation = match (policy, orphan) {
        (Some(p), _) => propagation(&p)?,
        (None, Some(true)) => Propagation::Orphan,
        _ => Propagation::Background,
    };
    Ok(DeleteOptions {
        uid: pre.uid,
        resource_version: pre.resource_version,
        grace_period_seconds: grace,
        propagation,
    })
}

fn path_of<B>(req: &Request<B>) -> String {
    req.uri().path().to_string()
}

/// A namespace from a create's URL: one that could not exist is not found, as kube-apiserver's
/// namespace lifecycle admission answers (and a percent-encoded or dot segment is no route, as
/// its router answers), so no invalid namespace is ever made.
fn check_url_namespace(path: &str, ns: &str) -> Result<(), ApiError> {
    if ns.contains('%') || ns == "." || ns == ".." {
        return Err(ApiError::NoRoute(path.to_string()));
    }
    if !kvrs_store::names::is_valid_namespace(ns) {
        return Err(ApiError::Store(kvrs_store::StoreError::NotFound {
            resource: "namespaces".into(),
            name: ns.to_string(),
        }));
    }
    Ok(())
}

/// Creates the Namespace object of `ns` when there is none: objects may go into any namespace,
/// and `kubectl get ns` then lists it.
pub(crate) fn ensure_namespace(state: &State, ns: &str) {
    let Some(rt) = lookup("", "namespaces") else {
        return;
    };
    if state.read(|s| s.get(&rt, ns).is_some()) {
        return;
    }
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {}, "status": {"phase": "Active"}});
    let opts = CreateOptions {
        now: now(),
        uid: Some(state.uid()),
        name_suffix: None,
    };
    let _ = state.write(|s| s.create(&rt, None, body, &opts));
}
