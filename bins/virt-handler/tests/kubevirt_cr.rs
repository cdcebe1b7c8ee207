//! The KubeVirt CR drives the running handler (real components, see `support`): an edit of
//! `kubevirt/kubevirt` made after the handler started reaches the next `SyncVirtualMachine` (the
//! launcher defines the domain with the CR's SMBIOS); an edit the handler refuses is logged and
//! counted, and the last good configuration stays.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const T: Duration = Duration::from_secs(60);

fn patch_cr(cluster: &Cluster, patch: &Value) -> String {
    let out = cluster.cluster.kubectl([
        "patch",
        "kubevirt",
        "kubevirt",
        "-n",
        "kubevirt",
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ]);
    assert!(
        out.status.success(),
        "patch the KubeVirt CR: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cr = cluster
        .get("kubevirt", Some("kubevirt"), "kubevirt")
        .expect("the KubeVirt CR");
    cr["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The launcher's domain (`GetDomain`, KubeVirt's JSON), once defined.
fn domain(pod: &LauncherPod) -> Option<String> {
    let socket = pod.sockets_dir.join("launcher-sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = kvrs_ipc::LauncherClient::connect(&socket).await.ok()?;
        client.get_domain().await.ok().flatten()
    })
}

#[test]
fn an_edit_of_the_kubevirt_cr_reaches_the_next_launcher_without_a_restart() {
    let _one = serial();
    let cluster = Cluster::start();
    cluster.apply(&json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"smbios": {"manufacturer": "kvrs-at-start"}}}}));
    let dirs = NodeDirs::new("kvcr");
    let handler = dirs.start_handler(&cluster, 0, &[]);
    let updated = |rv: &str| {
        let line = format!("Updating cluster config from KubeVirt to resource version '{rv}'");
        wait_for(
            &format!("the handler to apply resource version {rv}"),
            T,
            || handler.log().contains(&line).then_some(()),
            || handler.log(),
        );
    };
    let first = cluster
        .get("kubevirt", Some("kubevirt"), "kubevirt")
        .unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    updated(&first);

    // Live: the handler applies the edit without a restart.
    let live = patch_cr(
        &cluster,
        &json!({"spec": {"configuration": {"smbios": {"manufacturer": "kvrs-live", "sku": "kvrs-sku"}}}}),
    );
    updated(&live);

    // Refused: logged once, counted, the last good configuration stays.
    let refused = patch_cr(
        &cluster,
        &json!({"spec": {"configuration": {"smbios": {"manufacturer": "kvrs-refused"},
            "network": {"defaultNetworkInterface": "passt"}}}}),
    );
    let line = format!("invalid configuration at resource version '{refused}'");
    wait_for(
        "the handler to refuse the invalid configuration",
        T,
        || handler.log().contains(&line).then_some(()),
        || handler.log(),
    );
    assert!(
        handler.log().contains(
            "spec.configuration.network.defaultNetworkInterface: \"passt\" is not a default"
        ),
        "{}",
        handler.log()
    );
    let metrics = std::process::Command::new("curl")
        .args([
            "-sf",
            &format!("http://127.0.0.1:{}/metrics", handler.metrics_port),
        ])
        .output()
        .expect("curl");
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        metrics.contains("kvrs_kubevirt_config_refused_total{reason=\"invalid_value\"} 1"),
        "{metrics}"
    );

    // The next VMI's domain carries the last good SMBIOS.
    let uid = cluster.create_vmi(guest_vmi("guest-cr"));
    let mut pod = LauncherPod::new(&dirs, 4, "guest-cr");
    pod.start(&uid);
    cluster.schedule("guest-cr", &pod.uid);
    let spec = wait_for(
        "the domain defined with the CR's SMBIOS",
        Duration::from_secs(180),
        || domain(&pod).filter(|d| d.contains("kvrs-live")),
        || {
            format!(
                "{}\n--- launcher ---\n{}",
                handler.log(),
                pod.launcher_log()
            )
        },
    );
    assert!(spec.contains("kvrs-sku"), "{spec}");
    assert!(!spec.contains("kvrs-refused"), "{spec}");
    pod.delete();
    cluster.release("guest-cr");
}
