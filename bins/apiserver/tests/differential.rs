//! The embedded API server and a real kube-apiserver (v1.36, `kvrs-test-cluster`) answer the
//! same malformed and forbidden requests with the same status code and reason (and, for names
//! and namespaces, the same message): invalid names, namespaces that differ or leave the path,
//! patches that change identity or use directives, query parameters out of range.

use http_body_util::BodyExt;
use kube::Client;
use serde_json::{Value, json};

use kvrs_apiserver::{ApiServer, Options};

/// One request: method, path (with query), patch content type, body.
struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Value,
    /// Compare the message too (not only code and reason).
    message: bool,
}

fn case(what: &'static str, method: &'static str, path: &str, body: Value) -> Case {
    let content_type = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    Case {
        what,
        method,
        path: path.to_string(),
        content_type,
        body,
        message: true,
    }
}

fn patch(what: &'static str, ct: &'static str, path: &str, body: Value) -> Case {
    Case {
        what,
        method: "PATCH",
        path: path.to_string(),
        content_type: ct,
        body,
        message: true,
    }
}

const JSON: &str = "application/json-patch+json";
const MERGE: &str = "application/merge-patch+json";
const SMP: &str = "application/strategic-merge-patch+json";

fn pod(ns: Option<&str>, name: &str) -> Value {
    let mut md = json!({"name": name});
    if let Some(ns) = ns {
        md["namespace"] = json!(ns);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": md,
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

fn vm(name: &str) -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
           "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}}})
}

fn cases() -> Vec<Case> {
    let pods = "/api/v1/namespaces/diff/pods";
    let vms = "/apis/kubevirt.io/v1/namespaces/diff/virtualmachines";
    let long = "a".repeat(1000);
    let mut v = vec![
        case("pod ../x", "POST", pods, pod(None, "../x")),
        case("pod a/b", "POST", pods, pod(None, "a/b")),
        case("pod 1000 chars", "POST", pods, pod(None, &long)),
        case("pod NUL", "POST", pods, pod(None, "a\u{0}b")),
        case("pod ..", "POST", pods, pod(None, "..")),
        case("pod .", "POST", pods, pod(None, ".")),
        case("pod space", "POST", pods, pod(None, "a b")),
        case("pod upper", "POST", pods, pod(None, "Abc")),
        case(
            "pod body ns differs",
            "POST",
            pods,
            pod(Some("other"), "p2"),
        ),
        case("pod body ns ../x", "POST", pods, pod(Some("../x"), "p3")),
        case("vm ../x", "POST", vms, vm("../x")),
        case("vm ..", "POST", vms, vm("..")),
        case(
            "namespace a.b",
            "POST",
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}}),
        ),
        case(
            "namespace ..",
            "POST",
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ".."}}),
        ),
        case(
            "node with a namespace",
            "POST",
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "namespace": "x"}}),
        ),
        case(
            "pod via the all-namespaces path",
            "POST",
            "/api/v1/pods",
            pod(Some("diff"), "p4"),
        ),
        case(
            "pod in namespace ../x (url)",
            "POST",
            "/api/v1/namespaces/..%2Fx/pods",
            pod(None, "p5"),
        ),
        patch(
            "json patch of the vm's name",
            JSON,
            &format!("{vms}/vm1"),
            json!([{"op": "replace", "path": "/metadata/name", "value": "vm2"}]),
        ),
        patch(
            "json patch of the vm's namespace",
            JSON,
            &format!("{vms}/vm1"),
            json!([{"op": "replace", "path": "/metadata/namespace", "value": "other"}]),
        ),
        patch(
            "json patch of the vm's uid",
            JSON,
            &format!("{vms}/vm1"),
            json!([{"op": "replace", "path": "/metadata/uid", "value": "0000"}]),
        ),
        patch(
            "json patch removing metadata",
            JSON,
            &format!("{vms}/vm1"),
            json!([{"op": "remove", "path": "/metadata"}]),
        ),
        patch(
            "merge patch of the vm's name",
            MERGE,
            &format!("{vms}/vm1"),
            json!({"metadata": {"name": "vm2"}}),
        ),
        patch(
            "merge patch of the vm's namespace",
            MERGE,
            &format!("{vms}/vm1"),
            json!({"metadata": {"namespace": "other"}}),
        ),
        patch(
            "merge patch of the vm's uid",
            MERGE,
            &format!("{vms}/vm1"),
            json!({"metadata": {"uid": "0000"}}),
        ),
        patch(
            "merge patch removing metadata",
            MERGE,
            &format!("{vms}/vm1"),
            json!({"metadata": null}),
        ),
        patch(
            "strategic merge patch of a vm",
            SMP,
            &format!("{vms}/vm1"),
            json!({"spec": {"template": {"spec": {"domain": {"devices": {"disks": [{"$patch": "delete", "name": "rootdisk"}]}}}}}}),
        ),
        patch(
            "merge patch of the pod's name",
            MERGE,
            &format!("{pods}/p1"),
            json!({"metadata": {"name": "p9"}}),
        ),
        patch(
            "json patch of the pod's uid",
            JSON,
            &format!("{pods}/p1"),
            json!([{"op": "replace", "path": "/metadata/uid", "value": "0000"}]),
        ),
        patch(
            "json patch with a bad path",
            JSON,
            &format!("{pods}/p1"),
            json!([{"op": "replace", "path": "/nope/x", "value": 1}]),
        ),
        patch(
            "json patch not a list",
            JSON,
            &format!("{pods}/p1"),
            json!({"op": "replace"}),
        ),
        patch(
            "merge patch not an object",
            MERGE,
            &format!("{pods}/p1"),
            json!([1]),
        ),
        case(
            "put with another name",
            "PUT",
            &format!("{pods}/p1"),
            pod(None, "p9"),
        ),
        case(
            "strict: a vm with unknown fields",
            "POST",
            &format!("{vms}?fieldValidation=Strict"),
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm3"},
                   "spec": {"runStrategy": "Halted", "foo": 1, "template": {"spec": {"domain": {"devices": {"disks": [{"name": "d", "bar": 2}]}}}}}}),
        ),
        case(
            "strict: a pod with an unknown field",
            "POST",
            &format!("{pods}?fieldValidation=Strict"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p7"},
                   "spec": {"containers": [{"name": "c", "image": "busybox", "nope": true}]}}),
        ),
        patch(
            "strict: a merge patch with an unknown field",
            MERGE,
            &format!("{vms}/vm1?fieldValidation=Strict"),
            json!({"spec": {"foo": 1}}),
        ),
        case(
            "list with a negative limit",
            "GET",
            &format!("{pods}?limit=-1"),
            Value::Null,
        ),
        case(
            "list with limit overflow",
            "GET",
            &format!("{pods}?limit=99999999999999999999"),
            Value::Null,
        ),
        case(
            "list with a bad resourceVersion",
            "GET",
            &format!("{pods}?resourceVersion=abc"),
            Value::Null,
        ),
        case(
            "watch with a bad timeoutSeconds",
            "GET",
            &format!("{pods}?watch=true&timeoutSeconds=abc"),
            Value::Null,
        ),
        case(
            "watch with a timeoutSeconds past int64",
            "GET",
            &format!("{pods}?watch=true&timeoutSeconds=18446744073709551615"),
            Value::Null,
        ),
        case(
            "delete with a bad gracePeriodSeconds",
            "DELETE",
            &format!("{pods}/p1?gracePeriodSeconds=abc"),
            Value::Null,
        ),
    ];
    for c in &mut v {
        // Only code and reason: the 415 lists the media types this server accepts (no
        // apply-patch), and JSON-patch and query errors carry Go's or this server's wording.
        if c.method == "GET"
            || c.method == "DELETE"
            || c.content_type == SMP
            || c.what.starts_with("json patch with")
            || c.what.ends_with("not an object")
            || c.what == "strict: a merge patch with an unknown field"
        {
            c.message = false;
        }
    }
    v
}

/// (code, reason, message) of a response.
async fn send(client: &Client, c: &Case) -> (u16, String, String) {
    let body = if c.body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&c.body).unwrap()
    };
    let req = http::Request::builder()
        .method(c.method)
        .uri(&c.path)
        .header("content-type", c.content_type)
        .body(body)
        .unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .expect("a response");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let reason = v["reason"].as_str().unwrap_or("").to_string();
    let message = v["message"].as_str().unwrap_or("").to_string();
    (code, reason, message)
}

async fn client_of(path: &std::path::Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(cfg).unwrap()
}

async fn seed(client: &Client) {
    for (path, body) in [
        ("/api/v1/namespaces/diff/pods", pod(None, "p1")),
        (
            "/apis/kubevirt.io/v1/namespaces/diff/virtualmachines",
            vm("vm1"),
        ),
    ] {
        let c = case("seed", "POST", path, body);
        let (code, _, m) = send(client, &c).await;
        assert_eq!(code, 201, "seeding {path}: {m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_what_kube_apiserver_refuses_with_its_codes_and_messages() {
    let cluster = tokio::task::spawn_blocking(|| {
        let c = kvrs_test_cluster::TestCluster::apiserver_with_namespace("diff");
        let deploy = kvrs_test_cluster::workspace_root()
            .expect("the workspace")
            .join("bins/deploy");
        c.install_kubevirt_crds(&deploy).expect("the CRDs");
        c
    })
    .await
    .unwrap();
    let real = client_of(cluster.admin_kubeconfig_path()).await;
    let ours_server = ApiServer::start(Options {
        namespaces: vec!["default".into(), "diff".into()],
        ..Options::default()
    })
    .await
    .unwrap();
    let ours = client_of(&ours_server.kubeconfig_path).await;
    seed(&real).await;
    seed(&ours).await;
    let mut differ = Vec::new();
    for c in cases() {
        let r = send(&real, &c).await;
        let o = send(&ours, &c).await;
        eprintln!(
            "{:40} real {} {} {:?}\n{:40} ours {} {} {:?}",
            c.what, r.0, r.1, r.2, "", o.0, o.1, o.2
        );
        let same = r.0 == o.0 && r.1 == o.1 && (!c.message || r.2 == o.2);
        if !same {
            differ.push(c.what);
        }
    }
    assert!(differ.is_empty(), "answered differently: {differ:?}");
}

/// A watch whose timeout is the largest int64 is a long watch (its first event arrives), not a
/// panic of the connection; a deletion's grace period of the largest int64 saturates too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_from_input_saturate() {
    let server = ApiServer::start(Options::default()).await.unwrap();
    let client = client_of(&server.kubeconfig_path).await;
    let c = case(
        "seed",
        "POST",
        "/api/v1/namespaces/default/pods",
        pod(None, "p1"),
    );
    assert_eq!(send(&client, &c).await.0, 201);
    let req = http::Request::builder()
        .uri(format!(
            "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds={}",
            i64::MAX
        ))
        .body(Vec::new())
        .unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut body = resp.into_body();
    let first = tokio::time::timeout(std::time::Duration::from_secs(5), body.frame())
        .await
        .expect("the first event")
        .expect("a frame")
        .expect("no error");
    let line = String::from_utf8_lossy(first.data_ref().unwrap()).to_string();
    assert!(line.contains("\"ADDED\""), "{line}");
    // A bound pod, so the delete is graceful and stamps now + grace.
    let bind = case(
        "bind",
        "POST",
        "/api/v1/namespaces/default/pods/p1/binding",
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n"}}),
    );
    assert_eq!(send(&client, &bind).await.0, 201);
    let del = case(
        "delete",
        "DELETE",
        &format!(
            "/api/v1/namespaces/default/pods/p1?gracePeriodSeconds={}",
            i64::MAX
        ),
        Value::Null,
    );
    let (code, _, m) = send(&client, &del).await;
    assert_eq!(code, 202, "{m}");
}

/// The group-versions whose OpenAPI v3 documents the embedded server serves, as kube-apiserver
/// paths (`api/v1`, `apis/<group>/<version>`).
const OPENAPI_GROUP_VERSIONS: &[&str] = &[
    "api/v1",
    "apis/apps/v1",
    "apis/coordination.k8s.io/v1",
    "apis/events.k8s.io/v1",
    "apis/kubevirt.io/v1",
    "apis/instancetype.kubevirt.io/v1beta1",
];

/// Regenerates `bins/apiserver/openapi/*.json` from a real kube-apiserver with kvrs's CRDs
/// installed: `cargo test -p kvrs-apiserver --test differential -- --ignored dump_openapi`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "regenerates the served OpenAPI documents"]
async fn dump_openapi() {
    let cluster = tokio::task::spawn_blocking(|| {
        let c = kvrs_test_cluster::TestCluster::apiserver_with_namespace("diff");
        let deploy = kvrs_test_cluster::workspace_root()
            .expect("the workspace")
            .join("bins/deploy");
        c.install_kubevirt_crds(&deploy).expect("the CRDs");
        c
    })
    .await
    .unwrap();
    let real = client_of(cluster.admin_kubeconfig_path()).await;
    let out = kvrs_test_cluster::workspace_root()
        .unwrap()
        .join("bins/apiserver/openapi");
    std::fs::create_dir_all(&out).unwrap();
    for gv in OPENAPI_GROUP_VERSIONS {
        let req = http::Request::builder()
            .uri(format!("/openapi/v3/{gv}"))
            .header("accept", "application/json")
            .body(Vec::new())
            .unwrap();
        let resp = real.send(req.map(kube::client::Body::from)).await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{gv}");
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let v = served_part(v, gv);
        let file = out.join(format!("{}.json", gv.replace('/', "__")));
        let text = serde_json::to_vec(&v).unwrap();
        std::fs::write(&file, &text).unwrap();
        eprintln!("{} {} -> {} bytes", file.display(), bytes.len(), text.len());
    }
}

/// The part of a group-version's document the embedded server serves: the PATCH operation of
/// each served resource's object path (what kubectl reads to learn that `fieldValidation` is
/// supported) and the schemas reachable from those and from the served kinds.
fn served_part(mut doc: Value, gv: &str) -> Value {
    let (group, version) = match gv.strip_prefix("apis/") {
        Some(rest) => rest.split_once('/').unwrap(),
        None => ("", "v1"),
    };
    let served: Vec<_> = kvrs_apiserver::store::catalogue()
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .cloned()
        .collect();
    let mut paths = serde_json::Map::new();
    for (p, item) in doc["paths"].as_object().unwrap() {
        let keep = served.iter().any(|r| {
            let ns = format!("/{gv}/namespaces/{{namespace}}/{}/{{name}}", r.plural);
            let cluster = format!("/{gv}/{}/{{name}}", r.plural);
            p == if r.namespaced { &ns } else { &cluster }
        });
        if keep {
            let mut kept = serde_json::Map::new();
            for k in ["patch", "parameters"] {
                if let Some(v) = item.get(k) {
                    kept.insert(k.into(), v.clone());
                }
            }
            paths.insert(p.clone(), Value::Object(kept));
        }
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap().clone();
    let mut todo: Vec<String> = Vec::new();
    refs_in(&Value::Object(paths.clone()), &mut todo);
    for (name, schema) in &schemas {
        let gvks = schema["x-kubernetes-group-version-kind"].as_array();
        let served_kind = gvks.into_iter().flatten().any(|g| {
            g["group"] == group
                && g["version"] == version
                && served.iter().any(|r| g["kind"] == r.kind.as_str())
        });
        if served_kind {
            todo.push(name.clone());
        }
    }
    let mut keep = serde_json::Map::new();
    while let Some(name) = todo.pop() {
        if keep.contains_key(&name) {
            continue;
        }
        if let Some(s) = schemas.get(&name) {
            refs_in(s, &mut todo);
            keep.insert(name, s.clone());
        }
    }
    doc["paths"] = Value::Object(paths);
    doc["components"] = json!({"schemas": keep});
    doc
}

fn refs_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref"
                    && let Some(r) = x
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/components/schemas/"))
                {
                    out.push(r.to_string());
                }
                refs_in(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs_in(x, out)),
        _ => {}
    }
}
