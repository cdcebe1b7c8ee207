//! The aggregated API `subresources.kubevirt.io` (`v1` and `v1alpha3`, as KubeVirt v1.9.0
//! serves both): discovery, the routes, and KubeVirt's error answers. The decisions are pure
//! ([`vm`]: start / stop / restart, [`vm_migrate`], [`expand`], [`vmi`], [`volumes`]: addvolume
//! / removevolume); the reads and writes
//! around them are in [`serve`] and [`serve_volumes`] (feature `server`).

pub mod console;
pub mod expand;
pub mod vm;
pub mod vm_migrate;
pub mod vmi;
pub mod volumes;

#[cfg(feature = "server")]
pub mod handler;
#[cfg(feature = "server")]
pub mod serve;
#[cfg(feature = "server")]
pub mod serve_volumes;
#[cfg(feature = "server")]
pub mod stream;

use serde_json::{Value, json};

/// The API group.
pub const GROUP: &str = "subresources.kubevirt.io";
/// The versions served, preferred first (KubeVirt's `SubresourceGroupVersions`).
pub const VERSIONS: &[&str] = &["v1", "v1alpha3"];

/// The APIServices registering the group (`bins/deploy/virt-api/apiservice.yaml`), whose
/// `caBundle` virt-api keeps current.
pub const API_SERVICES: &[&str] = &[
    "v1.subresources.kubevirt.io",
    "v1alpha3.subresources.kubevirt.io",
];

/// KubeVirt v1.9.0's subresources as its discovery lists them (`api.go`), namespaced all.
pub const RESOURCES: &[&str] = &[
    "expand-vm-spec",
    "virtualmachineinstances/vnc",
    "virtualmachineinstances/vnc/screenshot",
    "virtualmachineinstances/console",
    "virtualmachineinstances/portforward",
    "virtualmachineinstances/backup",
    "virtualmachineinstances/redefine-checkpoint",
    "virtualmachineinstances/pause",
    "virtualmachineinstances/unpause",
    "virtualmachineinstances/freeze",
    "virtualmachineinstances/unfreeze",
    "virtualmachineinstances/reset",
    "virtualmachineinstances/softreboot",
    "virtualmachines/start",
    "virtualmachines/stop",
    "virtualmachines/restart",
    "virtualmachines/migrate",
    "virtualmachines/expand-spec",
    "virtualmachines/objectgraph",
    "virtualmachines/evacuate/cancel",
    "virtualmachineinstances/guestosinfo",
    "virtualmachineinstances/userlist",
    "virtualmachineinstances/filesystemlist",
    "virtualmachineinstances/addvolume",
    "virtualmachineinstances/removevolume",
    "virtualmachineinstances/objectgraph",
    "virtualmachineinstances/sev/fetchcertchain",
    "virtualmachineinstances/sev/querylaunchmeasurement",
    "virtualmachineinstances/sev/setupsession",
    "virtualmachineinstances/sev/injectlaunchsecret",
    "virtualmachineinstances/evacuate/cancel",
];

/// A Kubernetes `Status` error as KubeVirt's `writeError` sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub code: u16,
    /// `Conflict`, `NotFound`, `BadRequest`, `InternalError`, ...
    pub reason: &'static str,
    /// The message.
    pub message: String,
    /// `details.name` (the object), if any.
    pub name: Option<String>,
    /// `details.kind` with `name`: `virtualmachine` or `virtualmachineinstance`.
    pub kind: &'static str,
    /// `details.causes[].message` (KubeVirt's validation errors).
    pub causes: Vec<String>,
}

impl ApiError {
    /// `errors.NewConflict(v1.Resource("virtualmachine"), name, err)`.
    pub fn conflict(name: &str, message: &str) -> ApiError {
        ApiError::conflict_on("virtualmachine", name, message)
    }

    /// `errors.NewConflict(v1.Resource(kind), name, err)`.
    pub fn conflict_on(kind: &'static str, name: &str, message: &str) -> ApiError {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {kind}.kubevirt.io \"{name}\": {message}"
            ),
            name: Some(name.into()),
            kind,
            causes: Vec::new(),
        }
    }

    /// `errors.NewForbidden(v1.Resource(kind), name, err)`.
    pub fn forbidden_on(kind: &'static str, name: &str, message: &str) -> ApiError {
        ApiError {
            code: 403,
            reason: "Forbidden",
            message: format!("{kind}.kubevirt.io \"{name}\" is forbidden: {message}"),
            name: Some(name.into()),
            kind,
            causes: Vec::new(),
        }
    }

    /// `errors.NewNotFound(v1.Resource(resource), name)`.
    pub fn not_found(resource: &'static str, name: &str) -> ApiError {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{resource}.kubevirt.io \"{name}\" not found"),
            name: Some(name.into()),
            kind: resource,
            causes: Vec::new(),
        }
    }

    /// `errors.NewBadRequest(message)`.
    pub fn bad_request(message: &str) -> ApiError {
        ApiError {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
            name: None,
            kind: "",
            causes: Vec::new(),
        }
    }

    /// `errors.NewInternalError(err)`.
    pub fn internal(message: &str) -> ApiError {
        ApiError {
            code: 500,
            reason: "InternalError",
            message: format!("Internal error occurred: {message}"),
            name: None,
            kind: "",
            causes: Vec::new(),
        }
    }

    /// 401: no verified front-proxy client certificate.
    pub fn unauthorized(message: &str) -> ApiError {
        ApiError {
            code: 401,
            reason: "Unauthorized",
            message: message.into(),
            name: None,
            kind: "",
            causes: Vec::new(),
        }
    }

    /// 403: a client certificate, but not one of the allowed names.
    pub fn forbidden(message: &str) -> ApiError {
        ApiError {
            code: 403,
            reason: "Forbidden",
            message: message.into(),
            name: None,
            kind: "",
            causes: Vec::new(),
        }
    }

    /// 404 for a path nothing is served at, 405 for a method.
    pub fn status(code: u16, reason: &'static str, message: &str) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            name: None,
            kind: "",
            causes: Vec::new(),
        }
    }

    /// The `Status` object.
    pub fn body(&self) -> Value {
        let mut status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code});
        if let Some(name) = &self.name {
            status["details"] = json!({"name": name, "group": "kubevirt.io", "kind": self.kind});
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self.causes.iter().map(|m| json!({"message": m})).collect();
            status["details"] = json!({"causes": causes});
        }
        status
    }
}

/// A VM subresource request as read before anything is fetched.
#[derive(Clone, Debug, PartialEq)]
pub enum VmCall {
    /// `start`, `stop`, `restart`.
    Lifecycle(vm::Request),
    /// `PUT migrate`, its options read.
    Migrate(vm_migrate::MigrateOptions),
    /// `GET expand-spec`.
    ExpandSpec,
}

impl VmCall {
    /// Reads a VM subresource request: `migrate` is served for `PUT`, `expand-spec` for `GET`
    /// (405 otherwise), the rest as [`vm::Request::read`] reads them.
    pub fn read(subresource: &str, method: &str, body: &[u8]) -> Result<VmCall, ApiError> {
        let only = |allowed: &str| {
            ApiError::status(
                405,
                "MethodNotAllowed",
                &format!("{subresource} is served for {allowed} only"),
            )
        };
        match subresource {
            "migrate" if method != "PUT" => Err(only("PUT")),
            "migrate" => Ok(VmCall::Migrate(vm_migrate::MigrateOptions::read(body)?)),
            "expand-spec" if !matches!(method, "GET" | "HEAD") => Err(only("GET")),
            "expand-spec" => Ok(VmCall::ExpandSpec),
            _ => vm::Request::read(subresource, method, body).map(VmCall::Lifecycle),
        }
    }
}

/// `PUT .../expand-vm-spec` only.
pub fn check_expand_vm_spec_method(method: &str) -> Result<(), ApiError> {
    if method == "PUT" {
        Ok(())
    } else {
        Err(ApiError::status(
            405,
            "MethodNotAllowed",
            "expand-vm-spec is served for PUT only",
        ))
    }
}

/// The `APIGroup` at `/apis/subresources.kubevirt.io`. (KubeVirt names it
/// `subresource.kubevirt.io`, a typo nothing reads; kvrs uses the group's real name.)
pub fn api_group() -> Value {
    let versions: Vec<Value> = VERSIONS
        .iter()
        .map(|v| json!({"groupVersion": format!("{GROUP}/{v}"), "version": v}))
        .collect();
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": versions,
        "preferredVersion": versions[0],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]})
}

/// The `APIGroupList` at `/apis`.
pub fn api_group_list() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group()]})
}

/// The `APIResourceList` at `/apis/subresources.kubevirt.io/VERSION`.
pub fn resource_list(version: &str) -> Value {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .map(
            |r| json!({"name": r, "singularName": "", "namespaced": true, "kind": "", "verbs": []}),
        )
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": format!("{GROUP}/{version}"), "resources": resources})
}

/// The `/version` answer (KubeVirt's `virtversion.Get()` fields).
pub fn version_info() -> Value {
    json!({"gitVersion": concat!("v", env!("CARGO_PKG_VERSION")), "gitCommit": "",
        "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH)})
}

/// The root paths at `/`.
pub fn root_paths() -> Value {
    let mut paths = vec![
        "/apis".to_string(),
        "/apis/".to_string(),
        "/openapi/v2".to_string(),
    ];
    paths.push(format!("/apis/{GROUP}"));
    for v in VERSIONS {
        paths.push(format!("/apis/{GROUP}/{v}"));
    }
    json!({"paths": paths})
}

/// What a path under `/apis/subresources.kubevirt.io` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// The APIGroup.
    Group,
    /// A version's APIResourceList.
    Resources(String),
    /// `.../VERSION/healthz`.
    Healthz,
    /// `.../VERSION/version`.
    Version,
    /// A VM's subresource: `(namespace, name, subresource)`.
    Vm {
        /// The namespace.
        namespace: String,
        /// The VM.
        name: String,
        /// `start`, `stop`, ...
        subresource: String,
    },
    /// `PUT .../namespaces/NS/expand-vm-spec`: a VM in the body expanded.
    ExpandVmSpec {
        /// The namespace.
        namespace: String,
    },
    /// A VMI's subresource.
    Vmi {
        /// The namespace.
        namespace: String,
        /// The VMI.
        name: String,
        /// `pause`, `console`, ...
        subresource: String,
    },
}

impl Route {
    /// Whether the route needs an authenticated front-proxy request (KubeVirt serves
    /// discovery, health and version to anyone).
    pub fn needs_auth(&self) -> bool {
        matches!(
            self,
            Route::Vm { .. } | Route::Vmi { .. } | Route::ExpandVmSpec { .. }
        )
    }
}

/// Reads `path`; `None` when it is not under the group or names an unknown version.
pub fn route(path: &str) -> Option<Route> {
    let rest = path.strip_prefix("/apis/")?.strip_prefix(GROUP)?;
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() {
        return Some(Route::Group);
    }
    let rest = rest.strip_prefix('/')?;
    let (version, rest) = rest.split_once('/').unwrap_or((rest, ""));
    if !VERSIONS.contains(&version) {
        return None;
    }
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        [] => Some(Route::Resources(version.to_string())),
        ["healthz"] => Some(Route::Healthz),
        ["version"] => Some(Route::Version),
        ["namespaces", ns, "expand-vm-spec"] => Some(Route::ExpandVmSpec {
            namespace: ns.to_string(),
        }),
        ["namespaces", ns, kind, name, sub @ ..] if !sub.is_empty() => {
            let (namespace, name, subresource) = (ns.to_string(), name.to_string(), sub.join("/"));
            match *kind {
                "virtualmachines" => Some(Route::Vm {
                    namespace,
                    name,
                    subresource,
                }),
                "virtualmachineinstances" => Some(Route::Vmi {
                    namespace,
                    name,
                    subresource,
                }),
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("/apis/subresources.kubevirt.io"), Some(Route::Group));
        assert_eq!(
            route("/apis/subresources.kubevirt.io/v1alpha3/"),
            Some(Route::Resources("v1alpha3".into()))
        );
        assert_eq!(route("/apis/subresources.kubevirt.io/v2"), None);
        assert_eq!(
            route("/apis/subresources.kubevirt.io/v1/healthz"),
            Some(Route::Healthz)
        );
        assert_eq!(
            route("/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/vm1/start"),
            Some(Route::Vm {
                namespace: "default".into(),
                name: "vm1".into(),
                subresource: "start".into()
            })
        );
        let vnc = route(
            "/apis/subresources.kubevirt.io/v1/namespaces/d/virtualmachineinstances/v/vnc/screenshot",
        )
        .unwrap();
        assert!(vnc.needs_auth());
        assert!(matches!(vnc, Route::Vmi { subresource, .. } if subresource == "vnc/screenshot"));
        assert_eq!(
            route("/apis/subresources.kubevirt.io/v1/namespaces/d/pods/p/exec"),
            None
        );
        assert_eq!(route("/apis/kubevirt.io/v1"), None);
        let expand = route("/apis/subresources.kubevirt.io/v1/namespaces/ns1/expand-vm-spec");
        assert_eq!(
            expand,
            Some(Route::ExpandVmSpec {
                namespace: "ns1".into()
            })
        );
        assert!(expand.unwrap().needs_auth());
    }

    #[test]
    fn discovery_lists_the_vm_subresources() {
        let list = resource_list("v1");
        assert_eq!(list["groupVersion"], "subresources.kubevirt.io/v1");
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        for r in [
            "virtualmachines/start",
            "virtualmachines/stop",
            "virtualmachines/restart",
            "virtualmachines/expand-spec",
        ] {
            assert!(names.contains(&r), "{r}");
        }
        assert_eq!(api_group()["preferredVersion"]["version"], "v1");
        assert_eq!(api_group_list()["groups"][0]["name"], GROUP);
    }

    #[test]
    fn vm_calls_are_read_by_subresource_and_method() {
        assert!(matches!(
            VmCall::read("migrate", "PUT", br#"{"dryRun":["All"]}"#),
            Ok(VmCall::Migrate(o)) if o.dry_run()
        ));
        assert_eq!(VmCall::read("migrate", "PUT", b"{x").unwrap_err().code, 400);
        assert_eq!(VmCall::read("migrate", "GET", b"").unwrap_err().code, 405);
        assert_eq!(
            VmCall::read("expand-spec", "GET", b"").unwrap(),
            VmCall::ExpandSpec
        );
        assert_eq!(
            VmCall::read("expand-spec", "PUT", b"").unwrap_err().code,
            405
        );
        assert_eq!(
            VmCall::read("stop", "PUT", b"").unwrap(),
            VmCall::Lifecycle(vm::Request::Stop(Default::default()))
        );
        assert_eq!(
            VmCall::read("objectgraph", "GET", b"").unwrap_err().code,
            501
        );
        assert!(check_expand_vm_spec_method("PUT").is_ok());
        assert_eq!(check_expand_vm_spec_method("GET").unwrap_err().code, 405);
    }

    #[test]
    fn errors_are_kubernetes_statuses() {
        let e = ApiError::conflict("vm1", "VM is already running");
        let body = e.body();
        assert_eq!(body["code"], 409);
        assert_eq!(body["reason"], "Conflict");
        assert_eq!(body["details"]["name"], "vm1");
        assert_eq!(
            ApiError::not_found("virtualmachine", "x").message,
            "virtualmachine.kubevirt.io \"x\" not found"
        );
    }
}
