//! KubeVirt's subresource API `subresources.kubevirt.io` (`v1`, `v1alpha3`) in the embedded API
//! server: what virt-api serves on a cluster, so that VM `start`, `stop` and `restart`
//! (`virtctl --kubeconfig <run>/kubeconfig start guest`) work against `kvrs run`, and so do
//! `expand-spec` and `expand-vm-spec`. Discovery, the request reading and the decisions are
//! kvrs-virt-api's (`subresources`, `subresources::vm`, `subresources::expand`); this reads the
//! VM, its VMI and the instancetypes, preferences and revisions from the store and writes the
//! decided JSON patches through it as the server's own PATCH does; `migrate` creates virt-api's
//! VirtualMachineInstanceMigration through the store's create (a dry run only validates); the VM
//! and VMI `addvolume` / `removevolume` write kvrs-virt-api's `subresources::volumes` patches
//! (with the run's `--feature-gates`). The run's bearer token authenticates, as on every path.
//! The VMI subresources (`pause`, ..., `console`, `vnc`) need this machine's virt-handler and
//! are taken whole by [`super::vmi_subresources`].

use std::sync::Arc;

use hyper::Request;
use hyper::body::Incoming;
use kvrs_apiserver::{Answer, Extension, Objects, ObjectsHandle, Pending};
use kvrs_virt_api::subresources::vm::{PatchOp, Target};
use kvrs_virt_api::subresources::volumes::{self, Gates, VolumeRequest};
use kvrs_virt_api::subresources::{self as sub, ApiError, Route, VmCall, expand, vm, vm_migrate};
use serde_json::{Value, json};

use super::vmi_subresources::LocalHandler;

const GROUP: &str = "kubevirt.io";

/// The extension the embedded API server is started with.
pub struct KubevirtSubresources {
    /// This machine's handler, for the VMI subresources (`None`: they answer 501).
    pub handler: Option<Arc<LocalHandler>>,
    /// The run's volume hotplug gates (`addvolume` / `removevolume`).
    pub gates: Gates,
}

impl Extension for KubevirtSubresources {
    fn group(&self) -> &str {
        sub::GROUP
    }

    fn api_group(&self) -> Value {
        sub::api_group()
    }

    fn resource_list(&self, version: &str) -> Option<Value> {
        sub::VERSIONS
            .contains(&version)
            .then(|| sub::resource_list(version))
    }

    fn serve(&self, objects: &Objects<'_>, method: &str, path: &str, body: &[u8]) -> Answer {
        match serve(objects, self.gates, method, path, body) {
            Ok(answer) => answer,
            Err(e) => (e.code, Some(e.body())),
        }
    }

    /// The VMI subresources kvrs serves, when this machine's handler is known.
    fn takes(&self, req: &Request<Incoming>) -> bool {
        self.handler.is_some()
            && matches!(
                sub::route(req.uri().path()),
                Some(Route::Vmi { subresource, .. })
                    if super::vmi_subresources::serves(&subresource)
            )
    }

    fn take(&self, objects: ObjectsHandle, req: Request<Incoming>) -> Pending {
        match (&self.handler, sub::route(req.uri().path())) {
            (
                Some(handler),
                Some(Route::Vmi {
                    namespace,
                    name,
                    subresource,
                }),
            ) => super::vmi_subresources::take(handler, objects, req, namespace, name, subresource),
            // Not what `takes` chose: answered as the synchronous path answers it.
            _ => Box::pin(async {
                let e = vm::not_served("");
                super::vmi_subresources::status(&e)
            }),
        }
    }
}

fn serve(
    objects: &Objects<'_>,
    gates: Gates,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Answer, ApiError> {
    let route = sub::route(path).ok_or_else(|| {
        ApiError::status(
            404,
            "NotFound",
            &format!("the server could not find the requested resource: {path}"),
        )
    })?;
    if let Route::Vm {
        namespace,
        name,
        subresource,
    }
    | Route::Vmi {
        namespace,
        name,
        subresource,
    } = &route
        && let Some(request) = VolumeRequest::read(subresource, method, body, gates)
    {
        let on_vm = matches!(route, Route::Vm { .. });
        volume_request(objects, gates, namespace, name, on_vm, &request?)?;
        return Ok((202, None));
    }
    let (namespace, name, subresource) = match &route {
        Route::Vm {
            namespace,
            name,
            subresource,
        } => (namespace, name, subresource),
        Route::ExpandVmSpec { namespace } => {
            sub::check_expand_vm_spec_method(method)?;
            let vm = expand::read_sent_vm(namespace, body)?;
            let expanded = expand_vm(objects, vm).map_err(|e| ApiError::bad_request(&e))?;
            return Ok((200, Some(expanded)));
        }
        Route::Vmi { subresource, .. } => return Err(vm::not_served(subresource)),
        Route::Healthz | Route::Version | Route::Group | Route::Resources(_) => {
            if !matches!(method, "GET" | "HEAD") {
                return Err(ApiError::status(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                ));
            }
            return Ok((
                200,
                Some(match route {
                    Route::Version => sub::version_info(),
                    _ => json!("ok"),
                }),
            ));
        }
    };
    let call = VmCall::read(subresource, method, body)?;
    let vm = objects
        .get(GROUP, "virtualmachines", Some(namespace), name)
        .ok_or_else(|| ApiError::not_found("virtualmachine", name))?;
    let request = match call {
        VmCall::Lifecycle(r) => r,
        VmCall::ExpandSpec => {
            let expanded = expand_vm(objects, vm).map_err(|e| ApiError::internal(&e))?;
            return Ok((200, Some(expanded)));
        }
        // virt-api's decision, then the store's own create (a dry run only validates: the
        // embedded server has no dry-run create). The run's migration controller takes it up;
        // with one node its target pod has nowhere to go, as on a one-node cluster.
        VmCall::Migrate(options) => {
            let vmi = objects.get(GROUP, "virtualmachineinstances", Some(namespace), name);
            let migration = vm_migrate::migration(name, vmi.as_ref(), &options)?;
            if !options.dry_run() {
                objects
                    .create(
                        GROUP,
                        "virtualmachineinstancemigrations",
                        Some(namespace),
                        migration,
                    )
                    .map_err(|e| vm_migrate::create_failure(&e.to_string()))?;
            }
            return Ok((202, None));
        }
    };
    let vmi = objects.get(GROUP, "virtualmachineinstances", Some(namespace), name);
    let (plan, dry_run) = request.decide(&vm, vmi.as_ref(), body)?;
    plan.apply(|op| patch(objects, namespace, name, op, dry_run))?;
    Ok((202, None))
}

/// virt-api's `addvolume` / `removevolume` of a VM (its template, or with `HotplugVolumes` its
/// `status.volumeRequests`) or a VMI (its spec), decided by kvrs-virt-api's [`volumes`] over the
/// object in the store and written through the store; a dry run is applied to a copy only.
fn volume_request(
    objects: &Objects<'_>,
    gates: Gates,
    namespace: &str,
    name: &str,
    on_vm: bool,
    request: &VolumeRequest,
) -> Result<(), ApiError> {
    let op = if on_vm {
        let vm = objects
            .get(GROUP, "virtualmachines", Some(namespace), name)
            .ok_or_else(|| ApiError::not_found("virtualmachine", name))?;
        volumes::vm_patch(&vm, request, gates)?
    } else {
        let vmi = objects
            .get(GROUP, "virtualmachineinstances", Some(namespace), name)
            .ok_or_else(|| ApiError::not_found("virtualmachineinstance", name))?;
        volumes::vmi_patch(&vmi, request, gates)?
    };
    let (plural, sub) = target(&op);
    if request.dry_run() {
        let mut obj = objects
            .get(GROUP, plural, Some(namespace), name)
            .ok_or_else(|| ApiError::internal(&format!("{plural}.{GROUP} \"{name}\" not found")))?;
        // The API server's patch semantics (a `test` of `null` passes on an absent list).
        return kvrs_core::decide::patch::apply_json_patch(&mut obj, &op.patch).map_err(|e| {
            if matches!(e, kvrs_core::decide::patch::PatchError::TestFailed(_)) {
                volumes::patch_failure(op.target, 422, volumes::PATCH_NOT_APPLIED)
            } else {
                volumes::patch_failure(op.target, 500, &e.to_string())
            }
        });
    }
    objects
        .json_patch(GROUP, plural, Some(namespace), name, sub, &op.patch)
        .map(|_| ())
        .map_err(|e| {
            let text = e.to_string();
            // The store's failed `test`, answered in kube-apiserver's words (virtctl retries).
            if e.code() == 422 && text.contains("test operation at ") {
                volumes::patch_failure(op.target, 422, volumes::PATCH_NOT_APPLIED)
            } else {
                volumes::patch_failure(op.target, e.code(), &text)
            }
        })
}

fn target(op: &PatchOp) -> (&'static str, Option<&'static str>) {
    match op.target {
        Target::Vm => ("virtualmachines", None),
        Target::VmStatus => ("virtualmachines", Some("status")),
        Target::Vmi => ("virtualmachineinstances", None),
    }
}

/// virt-api's expansion over the instancetypes, preferences and revisions in the store (the
/// run's cluster configuration is KubeVirt's default one for what the expansion defaults).
fn expand_vm(objects: &Objects<'_>, vm: Value) -> Result<Value, String> {
    let found = expand::references(&vm)
        .iter()
        .filter_map(|r| objects.get(r.group, r.plural, r.namespace.as_deref(), &r.name))
        .collect();
    expand::expand(vm, found, &kvrs_core::ClusterConfig::default())
}

/// One decided patch through the store; a failed `test` or a conflict is KubeVirt's 409, any
/// other refusal its internal error (as virt-api maps the API server's answers). A dry run is
/// applied to a copy and not stored (the store has no dry run; admission is not consulted).
fn patch(
    objects: &Objects<'_>,
    namespace: &str,
    name: &str,
    op: &PatchOp,
    dry_run: bool,
) -> Result<(), ApiError> {
    let (plural, sub) = target(op);
    if dry_run {
        let mut obj = objects
            .get(GROUP, plural, Some(namespace), name)
            .ok_or_else(|| ApiError::internal(&format!("{plural}.{GROUP} \"{name}\" not found")))?;
        let ops: json_patch::Patch = serde_json::from_value(op.patch.clone())
            .map_err(|e| ApiError::internal(&e.to_string()))?;
        return json_patch::patch(&mut obj, &ops).map_err(|e| match e.kind {
            json_patch::PatchErrorKind::TestFailed => ApiError::conflict(name, &e.to_string()),
            _ => ApiError::internal(&e.to_string()),
        });
    }
    objects
        .json_patch(GROUP, plural, Some(namespace), name, sub, &op.patch)
        .map(|_| ())
        .map_err(|e| {
            let text = e.to_string();
            // The store's failed `test` (kube-apiserver's "jsonpatch test operation does not
            // apply").
            if e.code() == 409 || (e.code() == 422 && text.contains("test operation at ")) {
                ApiError::conflict(name, &text)
            } else {
                ApiError::internal(&text)
            }
        })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;
    use std::sync::Arc;

    use kvrs_apiserver::{ApiServer, Options};

    use super::*;

    const DEFAULT_GATES: Gates = Gates {
        hotplug_volumes: false,
        declarative: true,
    };

    /// virtctl's `addvolume --volume-name=claim1` body, named `data`.
    const ADD_DATA: &str = r#"{"name": "data", "disk": {"disk": {"bus": "scsi"}, "serial": "data"},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "claim1"}}}"#;

    const VM: &str = r#"{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "guest", "namespace": "default"},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {},
            "memory": {"guest": "64Mi"}}}}}}"#;

    const VMI: &str = r#"{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "guest", "namespace": "default"},
        "spec": {"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}}"#;

    /// `kubectl --kubeconfig KC ARGS` with a fresh cache: (success, stdout, stderr).
    fn kubectl(kc: &Path, args: &[&str]) -> (bool, String, String) {
        let bin = kvrs_test_cluster::locate_binaries()
            .expect("the kube binaries")
            .join("kubectl");
        let cache = tempfile::tempdir().unwrap();
        let out = Command::new(bin)
            .arg("--kubeconfig")
            .arg(kc)
            .arg("--cache-dir")
            .arg(cache.path())
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn put(kc: &Path, dir: &Path, version: &str, action: &str, body: &str) -> (bool, String) {
        let file = dir.join(format!("{action}.json"));
        std::fs::write(&file, body).unwrap();
        let path = format!(
            "/apis/subresources.kubevirt.io/{version}/namespaces/default/virtualmachines/guest/{action}"
        );
        let (ok, out, err) = kubectl(
            kc,
            &["replace", "--raw", &path, "-f", file.to_str().unwrap()],
        );
        (ok, format!("{out}{err}"))
    }

    fn run_strategy(kc: &Path) -> String {
        let (ok, out, err) = kubectl(
            kc,
            &["get", "vm", "guest", "-o", "jsonpath={.spec.runStrategy}"],
        );
        assert!(ok, "{err}");
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn expand_spec_through_kubectl() {
        let server = ApiServer::start(Options {
            extensions: vec![Arc::new(KubevirtSubresources {
                handler: None,
                gates: DEFAULT_GATES,
            })],
            ..Options::default()
        })
        .await
        .unwrap();
        let kc = server.kubeconfig_path.clone();
        tokio::task::spawn_blocking(move || {
            let dir = tempfile::tempdir().unwrap();
            let typed = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": "typed", "namespace": "default"},
                "spec": {"runStrategy": "Halted",
                    "instancetype": {"name": "u1.small"},
                    "preference": {"name": "sata", "kind": "VirtualMachinePreference"},
                    "template": {"spec": {"domain": {"devices": {}},
                        "volumes": [{"name": "root", "containerDisk": {"image": "x"}}]}}}});
            let objects = [
                json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
                    "kind": "VirtualMachineClusterInstancetype", "metadata": {"name": "u1.small"},
                    "spec": {"cpu": {"guest": 2}, "memory": {"guest": "2Gi"}}}),
                json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
                    "kind": "VirtualMachinePreference",
                    "metadata": {"name": "sata", "namespace": "default"},
                    "spec": {"devices": {"preferredDiskBus": "sata"}}}),
                typed.clone(),
            ];
            for (i, o) in objects.iter().enumerate() {
                let file = dir.path().join(format!("{i}.json"));
                std::fs::write(&file, o.to_string()).unwrap();
                let (ok, _, err) = kubectl(&kc, &["create", "-f", file.to_str().unwrap()]);
                assert!(ok, "{err}");
            }
            let base = "/apis/subresources.kubevirt.io/v1/namespaces/default";
            let (ok, out, err) = kubectl(
                &kc,
                &[
                    "get",
                    "--raw",
                    &format!("{base}/virtualmachines/typed/expand-spec"),
                ],
            );
            assert!(ok, "{err}");
            let vm: Value = serde_json::from_str(&out).unwrap();
            assert!(vm["spec"].get("instancetype").is_none(), "{vm}");
            assert!(vm["spec"].get("preference").is_none(), "{vm}");
            let spec = &vm["spec"]["template"]["spec"];
            assert_eq!(spec["domain"]["cpu"]["sockets"], 2, "{vm}");
            assert_eq!(spec["domain"]["memory"]["guest"], "2Gi", "{vm}");
            assert_eq!(
                spec["domain"]["devices"]["disks"][0],
                json!({"name": "root", "disk": {"bus": "sata"}})
            );
            let (ok, _, err) = kubectl(
                &kc,
                &[
                    "get",
                    "--raw",
                    &format!("{base}/virtualmachines/none/expand-spec"),
                ],
            );
            assert!(!ok);
            assert!(err.contains("not found"), "{err}");

            // A VM in the body; one naming an instancetype that does not exist is a 400.
            let sent = dir.path().join("sent.json");
            let mut body = typed.clone();
            body["metadata"] = json!({"name": "sent"});
            std::fs::write(&sent, body.to_string()).unwrap();
            let url = format!("{base}/expand-vm-spec");
            let (ok, out, err) = kubectl(
                &kc,
                &["replace", "--raw", &url, "-f", sent.to_str().unwrap()],
            );
            assert!(ok, "{err}");
            let vm: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(vm["metadata"]["namespace"], "default");
            assert_eq!(
                vm["spec"]["template"]["spec"]["domain"]["cpu"]["sockets"],
                2
            );
            body["spec"]["instancetype"]["name"] = json!("u9.huge");
            std::fs::write(&sent, body.to_string()).unwrap();
            let (ok, _, err) = kubectl(
                &kc,
                &["replace", "--raw", &url, "-f", sent.to_str().unwrap()],
            );
            assert!(!ok);
            assert!(
                err.contains("u9.huge") && err.contains("not found"),
                "{err}"
            );

            // migrate of a VM with no VMI: virt-api's not-found, nothing created.
            let (ok, _, err) = kubectl(
                &kc,
                &[
                    "replace",
                    "--raw",
                    &format!("{base}/virtualmachines/typed/migrate"),
                    "-f",
                    sent.to_str().unwrap(),
                ],
            );
            assert!(!ok);
            assert!(
                err.contains(r#"virtualmachineinstance.kubevirt.io "typed" not found"#),
                "{err}"
            );
            let (_, listed, _) = kubectl(&kc, &["get", "vmim", "-A", "-o", "name"]);
            assert_eq!(listed.trim(), "", "no migration was created");
        })
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn start_stop_restart_and_discovery_through_kubectl() {
        let server = ApiServer::start(Options {
            admission: Some(Arc::new(super::super::admission::KubevirtWebhooks {
                config: kvrs_core::ClusterConfig::default(),
            })),
            extensions: vec![Arc::new(KubevirtSubresources {
                handler: None,
                gates: DEFAULT_GATES,
            })],
            ..Options::default()
        })
        .await
        .unwrap();
        let kc = server.kubeconfig_path.clone();
        tokio::task::spawn_blocking(move || {
            let dir = tempfile::tempdir().unwrap();
            let vm = dir.path().join("vm.json");
            std::fs::write(&vm, VM).unwrap();
            let (ok, _, err) = kubectl(&kc, &["create", "-f", vm.to_str().unwrap()]);
            assert!(ok, "{err}");

            // Discovery: the group in /apis, the VM subresources in its resource lists.
            let (ok, out, err) = kubectl(&kc, &["get", "--raw", "/apis"]);
            assert!(ok, "{err}");
            let groups: Value = serde_json::from_str(&out).unwrap();
            assert!(
                groups["groups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|g| g["name"] == "subresources.kubevirt.io"),
                "{out}"
            );
            for v in ["v1", "v1alpha3"] {
                let (ok, out, err) =
                    kubectl(&kc, &["get", "--raw", &format!("/apis/subresources.kubevirt.io/{v}")]);
                assert!(ok, "{err}");
                let list: Value = serde_json::from_str(&out).unwrap();
                assert_eq!(list["kind"], "APIResourceList");
                let names: Vec<&str> = list["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|r| r["name"].as_str())
                    .collect();
                for r in ["virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart"] {
                    assert!(names.contains(&r), "{v}: {r} in {names:?}");
                }
            }
            let (ok, _, _) = kubectl(&kc, &["get", "--raw", "/apis/subresources.kubevirt.io/v2"]);
            assert!(!ok, "an unknown version is not served");

            // start: Halted → Always; a second start is KubeVirt's 409.
            let (ok, out) = put(&kc, dir.path(), "v1", "start", "{}");
            assert!(ok, "{out}");
            assert_eq!(run_strategy(&kc), "Always");
            let (ok, out) = put(&kc, dir.path(), "v1", "start", "{}");
            assert!(!ok, "{out}");
            assert!(
                out.contains("Operation cannot be fulfilled on virtualmachine.kubevirt.io \"guest\": Always does not support manual start requests"),
                "{out}"
            );
            assert!(out.contains("Conflict") || out.contains("409"), "{out}");

            // restart without a VMI: KubeVirt's "VM is not running".
            let (ok, out) = put(&kc, dir.path(), "v1", "restart", "{}");
            assert!(!ok, "{out}");
            assert!(out.contains("VM is not running"), "{out}");

            // stop (v1alpha3 too): Always → Halted; then restart is refused for Halted.
            let (ok, out) = put(&kc, dir.path(), "v1alpha3", "stop", "{}");
            assert!(ok, "{out}");
            assert_eq!(run_strategy(&kc), "Halted");
            let (ok, out) = put(&kc, dir.path(), "v1", "restart", "{}");
            assert!(!ok, "{out}");
            assert!(
                out.contains("RunStategy Halted does not support manual restart requests"),
                "{out}"
            );

            // A dry-run start changes nothing; a bad body is KubeVirt's 400.
            let (ok, out) = put(&kc, dir.path(), "v1", "start", r#"{"dryRun": ["All"]}"#);
            assert!(ok, "{out}");
            assert_eq!(run_strategy(&kc), "Halted");
            let (ok, out) = put(&kc, dir.path(), "v1", "stop", r#"{"gracePeriod": "x"}"#);
            assert!(!ok, "{out}");
            assert!(out.contains("Can not unmarshal Request body to struct"), "{out}");

            // addvolume (DeclarativeHotplugVolumes): the template gains the volume and its
            // disk (through the VM admission); a dry run and a second add change nothing.
            let template = |kc: &Path| {
                let (ok, out, err) = kubectl(kc, &["get", "vm", "guest", "-o", "json"]);
                assert!(ok, "{err}");
                serde_json::from_str::<Value>(&out).unwrap()["spec"]["template"]["spec"].clone()
            };
            let before = template(&kc);
            let dry = ADD_DATA.replacen('{', r#"{"dryRun": ["All"], "#, 1);
            let (ok, out) = put(&kc, dir.path(), "v1", "addvolume", &dry);
            assert!(ok, "{out}");
            assert_eq!(template(&kc), before);
            let (ok, out) = put(&kc, dir.path(), "v1", "addvolume", ADD_DATA);
            assert!(ok, "{out}");
            let added = template(&kc);
            assert_eq!(
                added["volumes"],
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": "claim1", "hotpluggable": true}}]),
                "{added}"
            );
            assert_eq!(
                added["domain"]["devices"]["disks"],
                json!([{"name": "data", "serial": "data", "disk": {"bus": "scsi"}}])
            );
            let (ok, out) = put(&kc, dir.path(), "v1", "addvolume", ADD_DATA);
            assert!(!ok, "{out}");
            assert!(
                out.contains("Operation cannot be fulfilled on virtualmachine.kubevirt.io \"guest\": Unable to add volume [data] because volume with that name already exists"),
                "{out}"
            );
            assert_eq!(template(&kc), added);
            let (ok, out) = put(&kc, dir.path(), "v1", "removevolume", r#"{"name": "data"}"#);
            assert!(ok, "{out}");
            assert_eq!(template(&kc)["volumes"], json!([]));
            let (ok, out) = put(&kc, dir.path(), "v1", "removevolume", r#"{"name": "data"}"#);
            assert!(!ok && out.contains("Unable to remove volume [data] because it does not exist"), "{out}");

            // A missing VM is KubeVirt's 404.
            let file = dir.path().join("empty.json");
            std::fs::write(&file, "{}").unwrap();
            let (ok, out, err) = kubectl(
                &kc,
                &[
                    "replace",
                    "--raw",
                    "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/nope/start",
                    "-f",
                    file.to_str().unwrap(),
                ],
            );
            assert!(!ok, "{out}");
            assert!(
                err.contains("virtualmachine.kubevirt.io \"nope\" not found"),
                "{err}"
            );

            // A forced restart of a VM with a VMI: the VMI's grace period (1, as KubeVirt's
            // force) and the VM's stop+start requests, written through the store; a second
            // restart while they are pending is refused as KubeVirt does.
            let (ok, out) = put(&kc, dir.path(), "v1", "start", "{}");
            assert!(ok, "{out}");
            let vmi = dir.path().join("vmi.json");
            std::fs::write(&vmi, VMI).unwrap();
            let (ok, _, err) = kubectl(&kc, &["create", "-f", vmi.to_str().unwrap()]);
            assert!(ok, "{err}");
            let (ok, out) = put(&kc, dir.path(), "v1", "restart", r#"{"gracePeriodSeconds": 0}"#);
            assert!(ok, "{out}");
            let (ok, out, err) = kubectl(&kc, &["get", "vmi", "guest", "-o", "json"]);
            assert!(ok, "{err}");
            let vmi: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(vmi["spec"]["terminationGracePeriodSeconds"], 1, "{out}");
            let (ok, out, err) = kubectl(&kc, &["get", "vm", "guest", "-o", "json"]);
            assert!(ok, "{err}");
            let vm: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(
                vm["status"]["stateChangeRequests"],
                json!([{"action": "Stop", "uid": vmi["metadata"]["uid"]}, {"action": "Start"}]),
                "{out}"
            );
            let (ok, out) = put(&kc, dir.path(), "v1", "restart", "{}");
            assert!(!ok, "{out}");
            assert!(out.contains("stop/start already underway"), "{out}");
        })
        .await
        .unwrap();
        server.shutdown.stop().await;
    }

    /// `PUT` (or `GET`) of the VMI `guest`'s `action` through kubectl: (success, output).
    fn vmi_call(kc: &Path, dir: &Path, action: &str, body: &str) -> (bool, String) {
        let path = format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/guest/{action}"
        );
        let (ok, out, err) = if body.is_empty() {
            kubectl(kc, &["get", "--raw", &path])
        } else {
            let file = dir.join(format!("{action}.json"));
            std::fs::write(&file, body).unwrap();
            kubectl(
                kc,
                &["replace", "--raw", &path, "-f", file.to_str().unwrap()],
            )
        };
        (ok, format!("{out}{err}"))
    }

    /// Writes the VMI `guest`'s status (as virt-handler would) through a kube client.
    fn set_status(kc: &Path, status: Value) {
        let rt = tokio::runtime::Handle::current();
        rt.block_on(async {
            let client = kvrs_runtime::kube::setup::connect(Some(kc)).await.unwrap();
            let ar = kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
                "virtualmachineinstances",
            );
            let api: kube::Api<kube::api::DynamicObject> =
                kube::Api::namespaced_with(client, "default", &ar);
            // VMIs have no status subresource (KubeVirt's CRD): the object itself.
            api.patch(
                "guest",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap();
        });
    }

    /// The VMI subresources' refusals before and at the handler, as virt-api words them; the
    /// launcher itself is `tests/run_virtctl.rs`'s.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn vmi_subresources_refuse_as_virt_api_does() {
        let pods = tempfile::tempdir().unwrap();
        let server = ApiServer::start(Options {
            extensions: vec![Arc::new(KubevirtSubresources {
                handler: Some(Arc::new(LocalHandler::new(
                    "kvrs-local",
                    pods.path().to_path_buf(),
                ))),
                gates: DEFAULT_GATES,
            })],
            ..Options::default()
        })
        .await
        .unwrap();
        let kc = server.kubeconfig_path.clone();
        tokio::task::spawn_blocking(move || {
            let dir = tempfile::tempdir().unwrap();
            let dir = dir.path();
            let (ok, out) = vmi_call(&kc, dir, "pause", "{}");
            assert!(!ok, "{out}");
            assert!(
                out.contains(r#"virtualmachineinstance.kubevirt.io "guest" not found"#),
                "{out}"
            );
            let vmi = dir.join("vmi.json");
            std::fs::write(&vmi, VMI).unwrap();
            let (ok, _, err) = kubectl(&kc, &["create", "-f", vmi.to_str().unwrap()]);
            assert!(ok, "{err}");

            // Not running: KubeVirt's 409; not a WebSocket handshake: gorilla's 400.
            let (ok, out) = vmi_call(&kc, dir, "pause", "{}");
            assert!(!ok && out.contains("VM is not running"), "{out}");
            let (ok, out) = vmi_call(&kc, dir, "console", "");
            assert!(
                !ok && out.contains("'upgrade' token not found in 'Connection' header"),
                "{out}"
            );
            // addvolume: virt-api's refusals, before and after the VMI is read.
            let (ok, out) = vmi_call(&kc, dir, "addvolume", "{}");
            assert!(
                !ok && out.contains("AddVolumeOptions requires name to be set"),
                "{out}"
            );
            let (ok, out) = vmi_call(&kc, dir, "addvolume", ADD_DATA);
            assert!(!ok && out.contains("VMI is not running"), "{out}");

            // Running on another node: no handler there.
            set_status(&kc, json!({"phase": "Running", "nodeName": "elsewhere"}));
            let (ok, out) = vmi_call(&kc, dir, "pause", "{}");
            assert!(!ok && out.contains("No virt-handler on node elsewhere found"), "{out}");

            // On this node: a dry run stops before the handler; the handler finds no launcher
            // (its 500, wrapped as virt-api wraps a handler's answer).
            set_status(&kc, json!({"phase": "Running", "nodeName": "kvrs-local"}));
            let (ok, out) = vmi_call(&kc, dir, "pause", r#"{"dryRun": ["All"]}"#);
            assert!(ok, "{out}");
            let (ok, out) = vmi_call(&kc, dir, "pause", "{}");
            assert!(!ok, "{out}");
            assert!(
                out.contains(
                    "unexpected return code 500 (500 Internal Server Error), message: no launcher socket found for VMI default/guest on this node"
                ),
                "{out}"
            );
            // A GET without the agent: KubeVirt's 409, written as plain text with 500.
            let (ok, out) = vmi_call(&kc, dir, "guestosinfo", "");
            assert!(!ok && out.contains("VMI does not have guest agent connected"), "{out}");

            // A running VMI no VM owns takes an ephemeral hotplug into its spec; the same
            // volume again is KubeVirt's conflict and leaves the spec as it was.
            let (ok, out) = vmi_call(&kc, dir, "addvolume", ADD_DATA);
            assert!(ok, "{out}");
            let spec = |kc: &Path| {
                let (ok, out, err) = kubectl(kc, &["get", "vmi", "guest", "-o", "json"]);
                assert!(ok, "{err}");
                serde_json::from_str::<Value>(&out).unwrap()["spec"].clone()
            };
            let added = spec(&kc);
            assert_eq!(
                added["volumes"],
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": "claim1", "hotpluggable": true}}]),
                "{added}"
            );
            assert_eq!(
                added["domain"]["devices"]["disks"],
                json!([{"name": "data", "serial": "data", "disk": {"bus": "scsi"}}])
            );
            let (ok, out) = vmi_call(&kc, dir, "addvolume", ADD_DATA);
            assert!(
                !ok && out.contains("Unable to add volume [data] because volume with that name already exists"),
                "{out}"
            );
            assert_eq!(spec(&kc), added);
            let (ok, out) = vmi_call(&kc, dir, "removevolume", r#"{"name": "data"}"#);
            assert!(ok, "{out}");
            assert_eq!(spec(&kc)["volumes"], json!([]));
        })
        .await
        .unwrap();
        server.shutdown.stop().await;
    }

    #[tokio::test]
    async fn requests_need_the_token() {
        let server = ApiServer::start(Options {
            extensions: vec![Arc::new(KubevirtSubresources {
                handler: None,
                gates: DEFAULT_GATES,
            })],
            ..Options::default()
        })
        .await
        .unwrap();
        let url = format!(
            "{}/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/guest/start",
            server.url
        );
        let addr = server.url.trim_start_matches("http://").to_string();
        let answer = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let path = url.split_once("127.0.0.1").unwrap().1;
            let path = &path[path.find('/').unwrap()..];
            write!(
                s,
                "PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        })
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        server.shutdown.stop().await;
    }
}
