//! Request paths: `/api/v1[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]` and
//! `/apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]`, plus the
//! discovery and health endpoints.

use std::sync::Arc;

use kvrs_store::{ResourceType, lookup};

use crate::error::ApiError;

/// An object path, resolved against the catalogue.
#[derive(Clone, Debug)]
pub struct ObjectPath {
    /// The resource.
    pub rt: Arc<ResourceType>,
    /// The namespace from the path.
    pub namespace: Option<String>,
    /// The object name (absent for collections).
    pub name: Option<String>,
    /// The subresource (`status`, `binding`).
    pub sub: Option<String>,
}

impl ObjectPath {
    /// The store key of the named object.
    pub fn key(&self) -> Option<String> {
        Some(
            self.rt
                .key(self.namespace.as_deref(), self.name.as_deref()?),
        )
    }
}

/// What a path names.
#[derive(Clone, Debug)]
pub enum Route {
    /// `/healthz`, `/livez`, `/readyz`.
    Health,
    /// `/version`.
    Version,
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/{group}`.
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`.
    Resources(String, String),
    /// An object or collection.
    Object(ObjectPath),
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/openapi/v3`.
    OpenApiV3Root,
    /// `/openapi/v3/{group-version path}` (`api/v1`, `apis/kubevirt.io/v1`).
    OpenApiV3(String),
}

fn no_route(path: &str) -> ApiError {
    ApiError::NoRoute(path.to_string())
}

/// Resolves `path` (already without the query).
pub fn route(path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["healthz" | "livez" | "readyz", ..] => return Ok(Route::Health),
        ["version"] => return Ok(Route::Version),
        ["openapi", "v2"] => return Ok(Route::OpenApiV2),
        ["openapi", "v3"] => return Ok(Route::OpenApiV3Root),
        ["openapi", "v3", gv @ ..] => return Ok(Route::OpenApiV3(gv.join("/"))),
        ["api"] => return Ok(Route::CoreVersions),
        ["apis"] => return Ok(Route::Groups),
        ["apis", g] => return Ok(Route::Group((*g).to_string())),
        ["api", v] => return Ok(Route::Resources(String::new(), (*v).to_string())),
        ["apis", g, v] => return Ok(Route::Resources((*g).to_string(), (*v).to_string())),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(no_route(path)),
    };
    // `namespaces/{ns}/...` scopes the rest, except the namespace object's own subresources.
    let (namespace, rest): (Option<String>, Vec<&str>) = match rest {
        ["namespaces", ns, r, tail @ ..]
            if !(group.is_empty() && tail.is_empty() && matches!(*r, "status" | "finalize")) =>
        {
            let mut v = vec![*r];
            v.extend_from_slice(tail);
            (Some((*ns).to_string()), v)
        }
        other => (None, other.to_vec()),
    };
    let (plural, name, sub) = match rest.as_slice() {
        [r] => (*r, None, None),
        [r, n] => (*r, Some((*n).to_string()), None),
        [r, n, s] => (*r, Some((*n).to_string()), Some((*s).to_string())),
        _ => return Err(no_route(path)),
    };
    let rt = lookup(group, plural)
        .filter(|rt| rt.version == version)
        .ok_or_else(|| no_route(path))?;
    if namespace.is_some() && !rt.namespaced {
        return Err(no_route(path));
    }
    if rt.namespaced && namespace.is_none() && name.is_some() {
        return Err(no_route(path));
    }
    Ok(Route::Object(ObjectPath {
        rt,
        namespace,
        name,
        sub,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(p: &str) -> ObjectPath {
        match route(p).unwrap() {
            Route::Object(o) => o,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn paths() {
        let o = obj("/api/v1/namespaces/ns/pods/p/binding");
        assert_eq!(
            (
                o.rt.plural.as_str(),
                o.namespace.as_deref(),
                o.name.as_deref(),
                o.sub.as_deref()
            ),
            ("pods", Some("ns"), Some("p"), Some("binding"))
        );
        let o = obj("/api/v1/pods");
        assert!(o.namespace.is_none() && o.name.is_none());
        let o = obj("/api/v1/namespaces/ns");
        assert_eq!(
            (o.rt.plural.as_str(), o.name.as_deref()),
            ("namespaces", Some("ns"))
        );
        let o = obj("/api/v1/namespaces/ns/status");
        assert_eq!(
            (o.rt.plural.as_str(), o.sub.as_deref()),
            ("namespaces", Some("status"))
        );
        let o = obj("/apis/kubevirt.io/v1/namespaces/d/virtualmachines/vm/status");
        assert_eq!(o.key().unwrap(), "d/vm");
        let o = obj("/api/v1/nodes/n1");
        assert_eq!(o.key().unwrap(), "n1");
        assert!(route("/apis/cdi.kubevirt.io/v1beta1/datavolumes").is_err());
        assert!(route("/api/v1/namespaces/ns/nodes/n").is_err());
        assert!(route("/api/v1/pods/p").is_err());
        assert!(matches!(
            route("/apis/cdi.kubevirt.io").unwrap(),
            Route::Group(_)
        ));
    }
}
