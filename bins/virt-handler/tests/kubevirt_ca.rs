//! The REST server's client CA under KubeVirt's operator, on a real kube-apiserver: the
//! operator's Secret holds `tls.crt`/`tls.key` only and the CA is the `ca-bundle` of the
//! ConfigMap `kubevirt/kubevirt-ca`. kvrs's handler keeps that bundle in its private directory
//! and the REST server's certificates load with it; a `ca.crt` of its own in the directory
//! (kvrs's layout) wins, and the ConfigMap is then not read.

use kvrs_test_cluster::{Options, TestCluster};
use kvrs_virt_handler::kubevirt_ca::{FALLBACK_FILE, Synced, sync_once};
use kvrs_virt_handler::rest::tls::CertDir;
use serde_json::json;

async fn client(cluster: &TestCluster) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(cluster.admin_kubeconfig_path()).unwrap();
    let options = kube::config::KubeConfigOptions::default();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .expect("the admin kubeconfig");
    kube::Client::try_from(cfg).expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_servers_client_ca_comes_from_kubevirts_configmap() {
    let cluster = tokio::task::spawn_blocking(|| {
        TestCluster::start(Options::apiserver_only()).expect("a real kube-apiserver")
    })
    .await
    .unwrap();
    let pki = kvrs_virt_api::certs::throwaway_pki("virt-handler").unwrap();
    let apply = |obj: serde_json::Value| {
        let out = cluster.kubectl_with_stdin(["apply", "-f", "-"], &obj.to_string());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubevirt"}}));
    apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "kubevirt-ca", "namespace": "kubevirt"},
                 "data": {"ca-bundle": pki.ca}}));

    // The operator's Secret: the serving pair, no CA.
    let certs = tempfile::tempdir().unwrap();
    std::fs::write(certs.path().join("tls.crt"), &pki.serving.0).unwrap();
    std::fs::write(certs.path().join("tls.key"), &pki.serving.1).unwrap();
    let private = tempfile::tempdir().unwrap();
    let fallback = private.path().join(FALLBACK_FILE);
    let c = client(&cluster).await;

    let mut without = CertDir::new(certs.path());
    assert!(
        without.load_if_changed().is_err(),
        "no CA: no configuration"
    );
    let synced = sync_once(&c, "kubevirt", "kubevirt-ca", certs.path(), &fallback).await;
    assert_eq!(synced, Ok(Synced::Written));
    assert_eq!(std::fs::read_to_string(&fallback).unwrap(), pki.ca);
    let mut with = CertDir::with_ca_fallback(certs.path(), Some(&fallback));
    assert!(
        with.load_if_changed()
            .expect("the pair and the ConfigMap's CA")
            .is_some(),
        "a configuration"
    );
    assert_eq!(
        sync_once(&c, "kubevirt", "kubevirt-ca", certs.path(), &fallback).await,
        Ok(Synced::Unchanged)
    );

    // A rotated CA reaches the file; the server's next load picks it up.
    let rotated = kvrs_virt_api::certs::throwaway_pki("virt-handler").unwrap();
    apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "kubevirt-ca", "namespace": "kubevirt"},
                 "data": {"ca-bundle": format!("{}{}", rotated.ca, pki.ca)}}));
    assert_eq!(
        sync_once(&c, "kubevirt", "kubevirt-ca", certs.path(), &fallback).await,
        Ok(Synced::Written)
    );
    assert!(with.load_if_changed().unwrap().is_some(), "reloaded");

    // A missing ConfigMap is an error naming it (the last bundle stays in the file).
    let err = sync_once(&c, "kubevirt", "no-such-ca", certs.path(), &fallback)
        .await
        .expect_err("no ConfigMap");
    assert!(err.contains("kubevirt/no-such-ca"), "{err}");
    assert!(fallback.exists());

    // kvrs's layout: the directory's own ca.crt; the ConfigMap is not read.
    std::fs::write(certs.path().join("ca.crt"), &pki.ca).unwrap();
    assert_eq!(
        sync_once(&c, "kubevirt", "no-such-ca", certs.path(), &fallback).await,
        Ok(Synced::OwnCa)
    );
}
