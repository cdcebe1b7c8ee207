//! A real node in the test cluster: containerd v2 + runc + CNI plugins (tests/node) and the
//! kubelet + kube-proxy (tests/kube), joined to a real control plane. The node registers and
//! becomes Ready; a pod from a locally imported image runs on the CNI bridge, answers the host
//! on its pod IP, reaches the API server through the `kubernetes` Service's ClusterIP and sees an
//! image volume's files; deleting it removes it; stopping the node leaves nothing behind.
//!
//! Needs root (cgroups, mounts, links, nftables). A missing or unbuildable component fails the
//! test, never skips it.

mod common;
use common::{http_get, ok, text};

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use kvrs_test_cluster::{
    NODE_BRIDGE, NODE_NAME, NodeComponent, Options, RealNode, TestCluster, node_leftovers,
    oci_archive, wait_for,
};

/// The busybox image ([`common::busybox_image`]) and a data-only image.
fn build_images(dir: &Path, kubectl: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let busybox_tar = common::busybox_image(
        dir,
        kubectl,
        &[
            "sh", "cat", "mkdir", "httpd", "wget", "nc", "sleep", "printf", "ls", "env",
        ],
    );

    let data = dir.join("data-rootfs");
    fs::create_dir_all(data.join("files")).unwrap();
    fs::write(data.join("files/hello.txt"), "kvrs image volume\n").unwrap();
    let data_tar = dir.join("data.tar");
    oci_archive(&data, "kvrs.local/node-test-data:1", &data_tar, &[])
        .expect("writing the data image");
    (busybox_tar, data_tar)
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: kvrs.local/busybox:1
    imagePullPolicy: Never
    command:
    - /bin/sh
    - -c
    - >-
      mkdir -p /www && cat /data/files/hello.txt > /www/index.html &&
      echo from-the-pod > /host/written && exec httpd -f -p 8080 -h /www
    volumeMounts:
    - name: data
      mountPath: /data
    - name: host
      mountPath: /host
  volumes:
  - name: data
    image:
      reference: kvrs.local/node-test-data:1
      pullPolicy: Never
  - name: host
    hostPath:
      path: /var/run/kvrs-node-test
      type: DirectoryOrCreate
"#;

#[test]
fn a_real_node_runs_a_pod_and_leaves_nothing_behind() {
    let begun = Instant::now();
    let cluster = TestCluster::start_for_node(Options::full())
        .expect("a real control plane on the node bridge");
    let node = RealNode::start(&cluster).expect("a real node (containerd, kubelet, kube-proxy)");
    eprintln!(
        "control plane up in {:.1?}, node Ready in {:.1?}",
        cluster.started_in(),
        node.started_in()
    );
    let context = || {
        format!(
            "pods: {}\nevents: {}\n--- kubelet ---\n{}\n--- containerd ---\n{}",
            text(&cluster.kubectl(["get", "pods", "-A", "-o", "wide"])),
            text(&cluster.kubectl(["get", "events", "-A"])),
            node.log_tail(NodeComponent::Kubelet, 30),
            node.log_tail(NodeComponent::Containerd, 15),
        )
    };

    // The Node: registered by a kubelet of this release on containerd 2.x, Ready.
    let info = ok(cluster.kubectl([
        "get",
        "node",
        NODE_NAME,
        "-o",
        "jsonpath={.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion} \
         {.status.conditions[?(@.type==\"Ready\")].status} {.status.addresses[?(@.type==\"InternalIP\")].address}",
    ]));
    assert_eq!(
        info, "v1.36.3 containerd://2.4.2 True 10.252.0.1",
        "node info"
    );

    // Images come from archives, never from a registry.
    let images = tempfile::tempdir().unwrap();
    let (busybox, data) = build_images(images.path(), &cluster.bin_dir().join("kubectl"));
    node.import_image(&busybox).expect("importing busybox");
    node.import_image(&data).expect("importing the data image");

    // The `default` ServiceAccount appears once the controller manager has run.
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
    // A hostPath directory the pod creates goes at teardown too (/var/run is /run here).
    node.remove_on_teardown(Path::new("/var/run/kvrs-node-test"))
        .expect("registering a hostPath for teardown");
    ok(cluster.kubectl_with_stdin(["apply", "-f", "-"], POD));
    let ip = wait_for(
        "pod web Running with an IP",
        Duration::from_secs(90),
        || {
            let out = cluster.kubectl([
                "get",
                "pod",
                "web",
                "-o",
                "jsonpath={.status.phase} {.status.podIP} {.spec.nodeName}",
            ]);
            let t = text(&out);
            let mut parts = t.split(' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("Running"), Some(ip), Some(NODE_NAME)) if !ip.is_empty() => {
                    Some(ip.to_owned())
                }
                _ => None,
            }
        },
        context,
    );
    assert!(
        ip.starts_with("10.252.0."),
        "pod IP {ip} from the bridge's subnet"
    );

    // The host reaches the pod on its IP; the page comes from the image volume.
    let addr: SocketAddr = format!("{ip}:8080").parse().unwrap();
    let page = wait_for(
        "the pod's httpd answering the host",
        Duration::from_secs(30),
        || http_get(addr, "/index.html").ok(),
        context,
    );
    assert!(
        page.starts_with("HTTP/1.") && page.contains(" 200 "),
        "{page}"
    );
    assert!(page.ends_with("kvrs image volume\n"), "{page}");
    assert_eq!(
        fs::read_to_string("/run/kvrs-node-test/written").unwrap(),
        "from-the-pod\n"
    );

    // In-cluster clients: the `kubernetes` Service's ClusterIP (kube-proxy's nftables DNAT to
    // the API server on the bridge address), TLS verified with the ServiceAccount's CA bundle,
    // authenticated with its token: kubectl's in-cluster configuration, as any controller's.
    // (`kubectl exec` itself goes API server -> kubelet: client certificate, webhook authz.)
    let env = ok(cluster.kubectl(["exec", "web", "--", "env"]));
    assert!(
        env.lines().any(|l| l == "KUBERNETES_SERVICE_HOST=10.0.0.1"),
        "{env}"
    );
    ok(cluster.kubectl([
        "create",
        "rolebinding",
        "web-view",
        "--clusterrole=view",
        "--serviceaccount=default:default",
    ]));
    let itself = ok(cluster.kubectl([
        "exec", "web", "--", "kubectl", "get", "pod", "web", "-o", "name",
    ]));
    assert_eq!(
        itself, "pod/web",
        "the pod read itself through the API server"
    );

    // Delete: the pod goes, and with it its veth on the bridge.
    ok(cluster.kubectl(["delete", "pod", "web", "--wait=true", "--timeout=60s"]));
    assert!(
        !ok(cluster.kubectl(["get", "pods", "-o", "name"])).contains("web"),
        "pod deleted"
    );
    wait_for(
        "the pod's veth gone from the bridge",
        Duration::from_secs(30),
        || {
            fs::read_dir(format!("/sys/class/net/{NODE_BRIDGE}/brif"))
                .map(|d| d.count() == 0)
                .unwrap_or(true)
                .then_some(())
        },
        context,
    );

    // A pod still running when the node stops (as DaemonSet pods are): its processes, network
    // namespace, veth, image volume and secret mounts must go with the node.
    ok(cluster.kubectl_with_stdin(
        ["apply", "-f", "-"],
        &POD.replace("name: web\n  namespace", "name: stays\n  namespace"),
    ));
    wait_for(
        "pod stays Running",
        Duration::from_secs(60),
        || {
            (text(&cluster.kubectl(["get", "pod", "stays", "-o", "jsonpath={.status.phase}"]))
                == "Running")
                .then_some(())
        },
        context,
    );

    // Stop: nothing of the node is left on the machine; then the cluster takes the bridge.
    node.stop()
        .expect("the node stops and leaves nothing behind");
    assert_eq!(node_leftovers(), Vec::<String>::new());
    assert!(
        !Path::new("/run/kvrs-node-test").exists(),
        "the hostPath is gone"
    );
    drop(cluster);
    assert!(
        !Path::new("/sys/class/net").join(NODE_BRIDGE).exists(),
        "the bridge goes with the cluster"
    );
    eprintln!("whole test: {:.1?}", begun.elapsed());
}
