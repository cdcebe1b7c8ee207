//! Errors as the API server reports them: a Kubernetes `Status` object with `code` and `reason`.

use serde_json::{Value, json};

use kvrs_store::StoreError;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The store refused it.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No or a wrong bearer token.
    #[error("Unauthorized")]
    Unauthorized,
    /// The path names nothing this server serves (the path is logged, not answered: as
    /// kube-apiserver's message).
    #[error("the server could not find the requested resource")]
    NoRoute(String),
    /// The verb is not allowed on the path.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed(String),
    /// The body or a query parameter is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// An `Accept` this server cannot answer (the protobuf OpenAPI v2).
    #[error("the server was unable to respond with a content type that the client supports")]
    NotAcceptable,
    /// A patch content type this server does not apply.
    /// (The accepted types, comma-separated.)
    #[error("the body of the request was in an unknown format - accepted media types include: {0}")]
    UnsupportedMediaType(String),
}

impl ApiError {
    /// A stable name of the variant, for logs.
    pub fn label(&self) -> &'static str {
        match self {
            ApiError::Store(e) => e.label(),
            ApiError::Unauthorized => "unauthorized",
            ApiError::NoRoute(_) => "no_route",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::NotAcceptable => "not_acceptable",
        }
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::Store(e) => e.code(),
            ApiError::Unauthorized => 401,
            ApiError::NoRoute(_) => 404,
            ApiError::MethodNotAllowed(_) => 405,
            ApiError::BadRequest(_) => 400,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::NotAcceptable => 406,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            ApiError::Store(e) => e.reason(),
            ApiError::Unauthorized => "Unauthorized",
            ApiError::NoRoute(_) => "NotFound",
            ApiError::MethodNotAllowed(_) => "MethodNotAllowed",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::NotAcceptable => "NotAcceptable",
        }
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        if let ApiError::Store(e) = self
            && let Some(name) = e.name()
        {
            let name = name.rsplit('/').next().unwrap_or(name);
            s["details"] = json!({"name": name});
        }
        if let ApiError::Store(StoreError::FieldInvalid {
            kind, name, causes, ..
        }) = self
        {
            // `Pod` or `VirtualMachine.kubevirt.io`: kind, then group.
            let (kind, group) = kind.split_once('.').unwrap_or((kind, ""));
            let causes: Vec<Value> = causes
                .iter()
                .map(|c| json!({"reason": c.reason(), "message": c.detail(), "field": c.field}))
                .collect();
            s["details"] = json!({"name": name, "group": group, "kind": kind, "causes": causes});
        }
        s
    }
}

/// A success `Status` (what `pods/binding` answers).
pub fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}
