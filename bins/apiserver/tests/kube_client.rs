//! The embedded API server driven by a real `kube::Client` built from the kubeconfig it wrote.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Binding, ConfigMap, Node, ObjectReference, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use kvrs_apiserver::{Admission, ApiServer, Operation, Options, Running};

async fn start(options: Options) -> (Running, Client) {
    let running = ApiServer::start(options).await.expect("start");
    let kc = kube::config::Kubeconfig::read_from(&running.kubeconfig_path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    (running, Client::try_from(cfg).unwrap())
}

fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }))
    .unwrap()
}

fn vm_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kubevirt.io", "v1", kind), plural)
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_patches_and_kubeconfig() {
    let (running, client) = start(Options::default()).await;
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&running.kubeconfig_path)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.git_version, "v1.36.0-kvrs");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"a": "1"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    assert!(created.metadata.uid.is_some());
    assert_eq!(
        code(cms.create(&PostParams::default(), &cm).await.unwrap_err()),
        409
    );
    assert_eq!(cms.get("c").await.unwrap().data.unwrap()["a"], "1");
    assert_eq!(code(cms.get("nope").await.unwrap_err()), 404);
    let list = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());
    // The namespace was created on first use.
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    assert!(nss.get("team").await.is_ok());

    // JSON patch with a failing test: Invalid, nothing changed.
    let failing = json_patch::Patch(
        serde_json::from_value(json!([
            {"op": "test", "path": "/data/a", "value": "2"},
            {"op": "replace", "path": "/data/a", "value": "3"},
        ]))
        .unwrap(),
    );
    let e = cms
        .patch("c", &PatchParams::default(), &Patch::Json::<()>(failing))
        .await
        .unwrap_err();
    assert_eq!(code(e), 422);
    let merged = cms
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"b": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.data.unwrap().len(), 2);
    // Stale resourceVersion in a replace: Conflict.
    let mut stale = created.clone();
    stale.data = Some([("a".to_string(), "9".to_string())].into());
    assert_eq!(
        code(
            cms.replace("c", &PostParams::default(), &stale)
                .await
                .unwrap_err()
        ),
        409
    );

    // Strategic merge on a Node (cluster-scoped, registered with its status).
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"a": "1"}}, "status": {"capacity": {"cpu": "4"}}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let n = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"b": "2"}}})),
        )
        .await
        .unwrap();
    assert_eq!(n.labels().len(), 2);
    assert!(n.status.unwrap().capacity.unwrap().contains_key("cpu"));
    let apply = nodes
        .patch("n1", &PatchParams::apply("t"), &Patch::Apply(json!({})))
        .await
        .unwrap_err();
    assert_eq!(code(apply), 415);

    // Unknown groups are 404, as virt-controller's CDI probe needs.
    assert!(
        kube::discovery::group(&client, "cdi.kubevirt.io")
            .await
            .is_err()
    );
    let kv = kube::discovery::group(&client, "kubevirt.io")
        .await
        .unwrap();
    assert!(
        kv.recommended_resources()
            .iter()
            .any(|(r, _)| r.plural == "virtualmachineinstances")
    );

    // No token: 401.
    let raw = reqwest_like_get(&running.url, "/api/v1/pods", None).await;
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    let raw = reqwest_like_get(&running.url, "/healthz", Some(&running.token)).await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    // Malformed JSON: 400 naming the field.
    let truncated = client
        .request::<Value>(
            http::Request::post("/api/v1/namespaces/team/configmaps")
                .body(br#"{"metadata": "#.to_vec())
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(truncated), 400);
    let bad = client
        .request::<Value>(
            http::Request::delete("/api/v1/namespaces/team/configmaps/c")
                .body(br#"{"gracePeriodSeconds": "x"}"#.to_vec())
                .unwrap(),
        )
        .await
        .unwrap_err();
    match bad {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 400);
            assert!(s.message.contains("gracePeriodSeconds"), "{}", s.message);
        }
        other => panic!("{other}"),
    }

    // kubectl reads the same kubeconfig.
    let kubectl = dirs_kubectl();
    match kubectl {
        Some(k) => {
            let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
            pods.create(&PostParams::default(), &pod("shown", json!({})))
                .await
                .unwrap();
            let out = std::process::Command::new(k)
                .args([
                    "--kubeconfig",
                    running.kubeconfig_path.to_str().unwrap(),
                    "get",
                    "pods",
                    "-A",
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                text.contains("shown") && text.contains("NAMESPACE"),
                "{text}"
            );
        }
        None => {
            println!("SKIPPED the kubectl assertion: no kubectl under ~/.cache/kvrs/kube-*/bin")
        }
    }
    running.shutdown.stop().await;
}

/// The test cluster's cached kubectl (scripts/kube-components.sh).
fn dirs_kubectl() -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME")?;
    let cache = std::path::Path::new(&home).join(".cache/kvrs");
    std::fs::read_dir(cache)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin/kubectl"))
        .find(|p| p.exists())
}

/// A bare HTTP/1.1 GET (to see the server without kube-rs adding the token).
async fn reqwest_like_get(url: &str, path: &str, token: Option<&str>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_subresources_of_vms_and_vmis() {
    let (running, client) = start(Options::default()).await;
    let vms: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &vm_resource("VirtualMachine", "virtualmachines"),
    );
    let vm: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm"}, "spec": {"runStrategy": "Halted"},
    }))
    .unwrap();
    vms.create(&PostParams::default(), &vm).await.unwrap();
    let pp = PatchParams::default();
    let after = vms
        .patch_status(
            "vm",
            &pp,
            &Patch::Merge(json!({"status": {"ready": true}, "spec": {"runStrategy": "Always"}})),
        )
        .await
        .unwrap();
    assert_eq!(after.data["status"]["ready"], true);
    assert_eq!(after.data["spec"]["runStrategy"], "Halted");
    let after = vms
        .patch(
            "vm",
            &pp,
            &Patch::Merge(json!({"status": {"ready": false}, "spec": {"runStrategy": "Always"}})),
        )
        .await
        .unwrap();
    assert_eq!(after.data["status"]["ready"], true);
    assert_eq!(after.data["spec"]["runStrategy"], "Always");
    assert_eq!(after.metadata.generation, Some(2));

    let vmis: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &vm_resource("VirtualMachineInstance", "virtualmachineinstances"),
    );
    let vmi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi"}, "spec": {},
    }))
    .unwrap();
    vmis.create(&PostParams::default(), &vmi).await.unwrap();
    let after = vmis
        .patch(
            "vmi",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Scheduling"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        after.data["status"]["phase"], "Scheduling",
        "VMIs have no status subresource"
    );
    assert_eq!(
        code(
            vmis.patch_status("vmi", &pp, &Patch::Merge(json!({})))
                .await
                .unwrap_err()
        ),
        404
    );
    running.shutdown.stop().await;
}

struct RefuseBadLabel;

impl Admission for RefuseBadLabel {
    fn admit(&self, op: Operation, resource: &str, obj: &mut Value) -> Result<(), String> {
        if op == Operation::Create && resource == "virtualmachines" {
            obj["metadata"]["annotations"] = json!({"defaulted": "true"});
        }
        if obj.pointer("/metadata/labels/bad").is_some() {
            return Err("label bad is not allowed".into());
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_defaults_and_refuses() {
    let options = Options {
        admission: Some(std::sync::Arc::new(RefuseBadLabel)),
        ..Options::default()
    };
    let (running, client) = start(options).await;
    let vms: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &vm_resource("VirtualMachine", "virtualmachines"),
    );
    let vm: DynamicObject = serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm"}, "spec": {}})).unwrap();
    let created = vms.create(&PostParams::default(), &vm).await.unwrap();
    assert_eq!(created.annotations()["defaulted"], "true");
    let e = vms
        .patch(
            "vm",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"bad": "x"}}})),
        )
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            assert!(
                s.message.contains("label bad is not allowed"),
                "{}",
                s.message
            );
        }
        other => panic!("{other}"),
    }
    running.shutdown.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_finalizers_graceful_pods_gc_and_binding() {
    let (running, client) = start(Options::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let held: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "held", "finalizers": ["x/y"]}}))
            .unwrap();
    cms.create(&PostParams::default(), &held).await.unwrap();
    // Preconditions.
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    assert_eq!(code(cms.delete("held", &dp).await.unwrap_err()), 409);
    let marked = cms
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(code(cms.get("held").await.unwrap_err()), 404);

    // Binding, then a graceful delete the kubelet finishes.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    let binding = Binding {
        metadata: kube::api::ObjectMeta {
            name: Some("p".into()),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some("n1".into()),
            ..Default::default()
        },
    };
    let body = binding;
    let _: Value = pods
        .create_subresource("binding", "p", &PostParams::default(), &body)
        .await
        .unwrap();
    assert_eq!(
        pods.get("p")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .as_deref(),
        Some("n1")
    );
    let e = pods
        .create_subresource::<Binding, Value>("binding", "p", &PostParams::default(), &body)
        .await
        .unwrap_err();
    assert_eq!(code(e), 409);
    let marked = pods
        .delete("p", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(30));
    assert!(pods.get("p").await.is_ok());
    pods.delete(
        "p",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(code(pods.get("p").await.unwrap_err()), 404);
    // Unbound pods go at once.
    pods.create(&PostParams::default(), &pod("u", json!({})))
        .await
        .unwrap();
    pods.delete("u", &DeleteParams::default()).await.unwrap();
    assert_eq!(code(pods.get("u").await.unwrap_err()), 404);

    // ownerReference GC: background removes dependents, orphan keeps them.
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap(),
        )
        .await
        .unwrap();
    let oref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid().unwrap()}]);
    let dep = |n: &str| {
        serde_json::from_value::<ConfigMap>(
            json!({"metadata": {"name": n, "ownerReferences": oref}}),
        )
        .unwrap()
    };
    cms.create(&PostParams::default(), &dep("dep"))
        .await
        .unwrap();
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    assert_eq!(code(cms.get("dep").await.unwrap_err()), 404);
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap(),
        )
        .await
        .unwrap();
    let oref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid().unwrap()}]);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "kept", "ownerReferences": oref}}))
            .unwrap(),
    )
    .await
    .unwrap();
    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    cms.delete("owner", &orphan).await.unwrap();
    assert!(
        cms.get("kept")
            .await
            .unwrap()
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    running.shutdown.stop().await;
}

async fn eventually(mut f: impl FnMut() -> bool) {
    for _ in 0..100 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("condition not reached in 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_follows_adds_changes_deletes_and_label_changes() {
    let options = Options {
        bookmark_interval: Duration::from_millis(200),
        ..Options::default()
    };
    let (running, client) = start(options).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("before", json!({"app": "web"})),
    )
    .await
    .unwrap();
    let (reader, writer) = reflector::store::<Pod>();
    let cfg = watcher::Config::default().labels("app=web");
    let stream = reflector(writer, watcher(pods.clone(), cfg)).applied_objects();
    let task = tokio::spawn(async move { stream.try_for_each(|_| async { Ok(()) }).await });
    let names = |r: &reflector::Store<Pod>| {
        let mut v: Vec<String> = r.state().iter().map(|p| p.name_any()).collect();
        v.sort();
        v
    };
    eventually(|| names(&reader) == ["before"]).await;
    pods.create(&PostParams::default(), &pod("p", json!({"app": "web"})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("other", json!({"app": "db"})))
        .await
        .unwrap();
    eventually(|| names(&reader) == ["before", "p"]).await;
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"x": "1"}}})),
    )
    .await
    .unwrap();
    eventually(|| {
        reader
            .state()
            .iter()
            .any(|p| p.annotations().contains_key("x"))
    })
    .await;
    // Leaving the selector is a DELETED, entering it an ADDED.
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    eventually(|| names(&reader) == ["before"]).await;
    pods.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    eventually(|| names(&reader) == ["before", "other"]).await;
    pods.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    eventually(|| names(&reader) == ["other"]).await;
    task.abort();

    // A streaming-list watcher (sendInitialEvents) sees the same.
    let (reader, writer) = reflector::store::<Pod>();
    let cfg = watcher::Config::default().streaming_lists();
    let stream = reflector(writer, watcher(pods.clone(), cfg)).applied_objects();
    let task = tokio::spawn(async move { stream.try_for_each(|_| async { Ok(()) }).await });
    eventually(|| names(&reader) == ["other", "p"]).await;
    task.abort();
    running.shutdown.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_old_resource_version_is_gone_and_the_watcher_relists() {
    let options = Options {
        history: 5,
        ..Options::default()
    };
    let (running, client) = start(options).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm =
        |n: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": n}})).unwrap();
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}")))
            .await
            .unwrap();
    }
    // A raw watch from rv 1: an ERROR event with a 410 Status.
    let mut events = cms
        .watch(&kube::api::WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    match events.next().await {
        Some(Err(kube::Error::Api(s))) => assert_eq!(s.code, 410),
        Some(Ok(kube::api::WatchEvent::Error(s))) => assert_eq!(s.code, 410),
        other => panic!("{other:?}"),
    }
    // The watcher relists after a 410 and converges anyway.
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream =
        reflector(writer, watcher(cms.clone(), watcher::Config::default())).applied_objects();
    let task = tokio::spawn(async move {
        let _ = stream.for_each(|_| async {}).await;
    });
    eventually(|| reader.state().len() == 10).await;
    // Many writes while the reflector runs; it may be expired and relist, but ends exact.
    for i in 10..30 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}")))
            .await
            .unwrap();
    }
    for i in 0..15 {
        cms.delete(&format!("c{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    eventually(|| reader.state().len() == 15).await;
    task.abort();
    running.shutdown.stop().await;
}

/// A toy [`kvrs_apiserver::Extension`]: `PUT .../configmaps/NAME/bump` increments `data.n`
/// through a JSON patch tested against the value read (or, with `?stale`, against a wrong one);
/// `GET .../configmaps/NAME/echo` is taken whole: `101`, then each chunk the client sends on
/// the upgraded connection comes back prefixed with `data.n` as read then (the store kept
/// across awaits).
struct Bump;

/// `GET .../echo` taken over: the `101` answer, and the echo once hyper hands the connection.
fn echo(
    objects: kvrs_apiserver::ObjectsHandle,
    mut req: hyper::Request<hyper::body::Incoming>,
) -> kvrs_apiserver::Pending {
    Box::pin(async move {
        let name = req
            .uri()
            .path()
            .rsplit('/')
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            let mut io = hyper_util::rt::TokioIo::new(upgraded);
            let mut buf = [0u8; 256];
            while let Ok(n) = io.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let cm = objects
                    .objects()
                    .get("", "configmaps", Some("default"), &name);
                let n_now = cm.map(|c| c["data"]["n"].clone()).unwrap_or_default();
                let mut out = format!("n={}:", n_now.as_str().unwrap_or("")).into_bytes();
                out.extend_from_slice(&buf[..n]);
                if io.write_all(&out).await.is_err() {
                    break;
                }
            }
        });
        let mut r = hyper::Response::new(http_body_util::BodyExt::boxed_unsync(
            http_body_util::Empty::new(),
        ));
        *r.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
        r.headers_mut().insert(
            hyper::header::UPGRADE,
            hyper::header::HeaderValue::from_static("echo"),
        );
        r.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("Upgrade"),
        );
        r
    })
}

impl kvrs_apiserver::Extension for Bump {
    fn group(&self) -> &str {
        "bump.kvrs.test"
    }

    fn api_group(&self) -> Value {
        let gv = json!({"groupVersion": "bump.kvrs.test/v1", "version": "v1"});
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": "bump.kvrs.test",
            "versions": [gv.clone()], "preferredVersion": gv})
    }

    fn resource_list(&self, version: &str) -> Option<Value> {
        (version == "v1").then(|| {
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "bump.kvrs.test/v1",
                "resources": [{"name": "configmaps/bump", "singularName": "", "namespaced": true,
                    "kind": "", "verbs": []}]})
        })
    }

    fn serve(
        &self,
        objects: &kvrs_apiserver::Objects<'_>,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> kvrs_apiserver::Answer {
        let parts: Vec<&str> = path.split('/').collect();
        let [
            "",
            "apis",
            "bump.kvrs.test",
            "v1",
            "namespaces",
            ns,
            "configmaps",
            name,
            "bump",
        ] = parts.as_slice()
        else {
            return (404, Some(json!({"kind": "Status", "code": 404})));
        };
        if method != "PUT" {
            return (405, None);
        }
        let Some(cm) = objects.get("", "configmaps", Some(ns), name) else {
            return (
                404,
                Some(json!({"kind": "Status", "code": 404, "message": "no such configmap"})),
            );
        };
        let n: i64 = cm["data"]["n"].as_str().unwrap_or("0").parse().unwrap_or(0);
        let tested = if body == b"stale" { n + 100 } else { n };
        let patch = json!([
            {"op": "test", "path": "/data/n", "value": tested.to_string()},
            {"op": "replace", "path": "/data/n", "value": (n + 1).to_string()},
        ]);
        match objects.json_patch("", "configmaps", Some(ns), name, None, &patch) {
            Ok(_) => (202, None),
            Err(e) => (e.code(), Some(e.status())),
        }
    }

    fn takes(&self, req: &hyper::Request<hyper::body::Incoming>) -> bool {
        req.method() == hyper::Method::GET && req.uri().path().ends_with("/echo")
    }

    fn take(
        &self,
        objects: kvrs_apiserver::ObjectsHandle,
        req: hyper::Request<hyper::body::Incoming>,
    ) -> kvrs_apiserver::Pending {
        echo(objects, req)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_serve_their_group_through_the_store() {
    let (running, client) = start(Options {
        extensions: vec![std::sync::Arc::new(Bump)],
        ..Options::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"n": "1"},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    // Discovery: listed in /apis after the catalogue's groups; its versions; 404 otherwise.
    let groups: Value = client
        .request(http::Request::get("/apis").body(Vec::new()).unwrap())
        .await
        .unwrap();
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(
        names.contains(&"bump.kvrs.test") && names.contains(&"kubevirt.io"),
        "{names:?}"
    );
    let list: Value = client
        .request(
            http::Request::get("/apis/bump.kvrs.test/v1")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(list["resources"][0]["name"], "configmaps/bump");
    let e = client
        .request::<Value>(
            http::Request::get("/apis/bump.kvrs.test/v2")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), 404);
    let e = client
        .request::<Value>(
            http::Request::post("/apis/bump.kvrs.test")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), 405);

    // The extension's write goes through the store: the test precondition holds, then fails.
    let bump = "/apis/bump.kvrs.test/v1/namespaces/default/configmaps/c/bump";
    client
        .request_text(http::Request::put(bump).body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(cms.get("c").await.unwrap().data.unwrap()["n"], "2");
    let e = client
        .request_text(http::Request::put(bump).body(b"stale".to_vec()).unwrap())
        .await
        .unwrap_err();
    assert_eq!(code(e), 422);
    assert_eq!(cms.get("c").await.unwrap().data.unwrap()["n"], "2");

    // The bearer token is required under the group as everywhere.
    let raw = reqwest_like_get(&running.url, "/apis/bump.kvrs.test/v1", None).await;
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    let raw = reqwest_like_get(
        &running.url,
        "/apis/bump.kvrs.test/v1/namespaces/default/configmaps/c/echo",
        None,
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 401"), "taken requests too: {raw}");

    // A request taken whole: 101, then the connection is the extension's, which still reads
    // the store (a write between two messages shows).
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = running.url.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let req = format!(
        "GET /apis/bump.kvrs.test/v1/namespaces/default/configmaps/c/echo HTTP/1.1\r\n\
         Host: {addr}\r\nAuthorization: Bearer {}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n",
        running.token
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(
            s.read(&mut b).await.unwrap(),
            1,
            "the answer's head: {head:?}"
        );
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let exchange = async |s: &mut tokio::net::TcpStream, msg: &[u8]| {
        s.write_all(msg).await.unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await.unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(exchange(&mut s, b"ping").await, "n=2:ping");
    client
        .request_text(http::Request::put(bump).body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(exchange(&mut s, b"pong").await, "n=3:pong");
    // Other requests under the group are still served by `serve`.
    assert_eq!(cms.get("c").await.unwrap().data.unwrap()["n"], "3");
    drop(s);
    running.shutdown.stop().await;
}
