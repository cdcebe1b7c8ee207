//! Two real nodes on one machine (`RealNode::start` and `RealNode::start_second`): both
//! register and become Ready with their own addresses; a pod on each gets an address of its
//! node's subnet; the pods reach each other across the two bridges and the host reaches both;
//! the second node's pod reaches the API server through the `kubernetes` Service (the first
//! node's kube-proxy serves the host); a hostPath the second node holds privately is its own
//! directory (the first node's pod writes the machine's, the second node's pod its own), and its
//! pod sees only its own kubelet's pods under `/var/lib/kubelet`; stopping the second node, then
//! the first, leaves nothing (`node_leftovers()`).
//!
//! Needs root. A missing or unbuildable component fails the test, never skips it.

mod common;
use common::{busybox_image, http_get, ok, text};

use std::fs;
use std::path::Path;
use std::time::Duration;

use kvrs_test_cluster::{
    NODE_NAME, NodeComponent, Options, RealNode, SECOND_NODE_BRIDGE, SECOND_NODE_DIR,
    SECOND_NODE_NAME, TestCluster, node_leftovers, wait_for,
};

const SHARED: &str = "/var/run/kvrs-two-node-test";

/// A pod on `node` that serves its name over HTTP, writes it into the hostPath [`SHARED`] and
/// lists the kubelet's pods directory it sees.
fn pod(name: &str, node: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: kvrs.local/busybox:1
    imagePullPolicy: Never
    command:
    - /bin/sh
    - -c
    - >-
      mkdir -p /www && echo {name} > /www/index.html && echo {name} > /host/who &&
      exec httpd -f -p 8080 -h /www
    volumeMounts:
    - name: host
      mountPath: /host
    - name: kubelet
      mountPath: /kubelet
      readOnly: true
  volumes:
  - name: host
    hostPath:
      path: {SHARED}
      type: DirectoryOrCreate
  - name: kubelet
    hostPath:
      path: /var/lib/kubelet/pods
"#
    )
}

#[test]
fn two_real_nodes_run_side_by_side_and_leave_nothing_behind() {
    let cluster = TestCluster::start_for_node(Options::full()).expect("a real control plane");
    let first = RealNode::start(&cluster).expect("the first node");
    let second = RealNode::start_second(&cluster, &[Path::new(SHARED)]).expect("the second node");
    eprintln!(
        "first node Ready in {:.1?}, second in {:.1?}",
        first.started_in(),
        second.started_in()
    );
    let context = || {
        format!(
            "pods: {}\nevents: {}\n--- kubelet B ---\n{}\n--- containerd B ---\n{}",
            text(&cluster.kubectl(["get", "pods", "-A", "-o", "wide"])),
            text(&cluster.kubectl(["get", "events", "-A"])),
            second.log_tail(NodeComponent::Kubelet, 30),
            second.log_tail(NodeComponent::Containerd, 15),
        )
    };
    for (node, ip) in [(NODE_NAME, first.ip()), (SECOND_NODE_NAME, second.ip())] {
        let info = ok(cluster.kubectl([
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} \
             {.status.addresses[?(@.type==\"InternalIP\")].address}",
        ]));
        assert_eq!(info, format!("True {ip}"), "node {node}");
    }
    assert_ne!(first.runtime_socket(), second.runtime_socket());

    let images = tempfile::tempdir().unwrap();
    let busybox = busybox_image(
        images.path(),
        &cluster.bin_dir().join("kubectl"),
        &["sh", "cat", "mkdir", "httpd", "nc", "printf", "ls", "echo"],
    );
    for node in [&first, &second] {
        node.import_image(&busybox).expect("importing busybox");
    }
    first
        .remove_on_teardown(Path::new(SHARED))
        .expect("the first node's hostPath goes at teardown");
    wait_for(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || {
            cluster
                .kubectl(["get", "sa", "default"])
                .status
                .success()
                .then_some(())
        },
        String::new,
    );
    ok(cluster.kubectl_with_stdin(["apply", "-f", "-"], &pod("web-a", NODE_NAME)));
    ok(cluster.kubectl_with_stdin(["apply", "-f", "-"], &pod("web-b", SECOND_NODE_NAME)));
    let running = |name: &str| {
        wait_for(
            &format!("pod {name} Running with an IP"),
            Duration::from_secs(120),
            || {
                let t = text(&cluster.kubectl([
                    "get",
                    "pod",
                    name,
                    "-o",
                    "jsonpath={.status.phase} {.status.podIP} {.metadata.uid}",
                ]));
                let parts: Vec<&str> = t.split(' ').collect();
                (parts.len() == 3 && parts[0] == "Running")
                    .then(|| (parts[1].to_owned(), parts[2].to_owned()))
            },
            context,
        )
    };
    let (ip_a, uid_a) = running("web-a");
    let (ip_b, uid_b) = running("web-b");
    assert!(ip_a.starts_with("10.252.0."), "web-a's IP {ip_a}");
    assert!(ip_b.starts_with("10.252.1."), "web-b's IP {ip_b}");

    // The host reaches both pods; each pod reaches the other across the two bridges.
    for (ip, name) in [(&ip_a, "web-a"), (&ip_b, "web-b")] {
        let page = wait_for(
            &format!("{name} answering the host"),
            Duration::from_secs(30),
            || http_get(format!("{ip}:8080").parse().unwrap(), "/").ok(),
            context,
        );
        assert!(page.ends_with(&format!("{name}\n")), "{page}");
    }
    for (from, to_ip, to) in [("web-a", &ip_b, "web-b"), ("web-b", &ip_a, "web-a")] {
        // (busybox-static's wget crashes without an /etc; nc speaks HTTP/1.0 well enough.)
        let got = ok(cluster.kubectl([
            "exec",
            from,
            "--",
            "sh",
            "-c",
            &format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {to_ip} 8080"),
        ]));
        assert!(
            got.starts_with("HTTP/1.") && got.ends_with(to),
            "{from} fetching {to}'s page: {got}"
        );
    }

    // The second node's pod is an in-cluster client too (the first node's kube-proxy DNATs the
    // `kubernetes` Service for every pod of the machine).
    ok(cluster.kubectl([
        "create",
        "rolebinding",
        "web-view",
        "--clusterrole=view",
        "--serviceaccount=default:default",
    ]));
    for name in ["web-a", "web-b"] {
        let itself = ok(cluster.kubectl([
            "exec", name, "--", "kubectl", "get", "pod", name, "-o", "name",
        ]));
        assert_eq!(itself, format!("pod/{name}"));
    }

    // Each node's hostPaths are its own: the machine's directory holds the first node's pod's
    // file, the second node's directory its pod's; each sees only its kubelet's pods.
    assert_eq!(
        fs::read_to_string("/run/kvrs-two-node-test/who").unwrap(),
        "web-a\n"
    );
    let private = Path::new(SECOND_NODE_DIR).join("host/run/kvrs-two-node-test/who");
    assert_eq!(fs::read_to_string(&private).unwrap(), "web-b\n");
    for (name, own, other) in [("web-a", &uid_a, &uid_b), ("web-b", &uid_b, &uid_a)] {
        let pods = ok(cluster.kubectl(["exec", name, "--", "ls", "/kubelet"]));
        assert!(
            pods.lines().any(|l| l == own) && !pods.lines().any(|l| l == other),
            "{name} sees its own kubelet's pods only: {pods}"
        );
    }

    // The second node goes first, with its pod still running; then the first.
    second
        .stop()
        .expect("the second node stops and leaves nothing behind");
    assert!(
        !Path::new("/sys/class/net")
            .join(SECOND_NODE_BRIDGE)
            .exists(),
        "the second node's bridge is gone"
    );
    assert!(!Path::new(SECOND_NODE_DIR).exists());
    // The first node still serves its pod.
    let page = http_get(format!("{ip_a}:8080").parse().unwrap(), "/").expect("web-a still answers");
    assert!(page.ends_with("web-a\n"), "{page}");
    first
        .stop()
        .expect("the first node stops and leaves nothing behind");
    assert_eq!(node_leftovers(), Vec::<String>::new());
    assert!(!Path::new(SHARED).exists(), "the hostPath is gone");
}
