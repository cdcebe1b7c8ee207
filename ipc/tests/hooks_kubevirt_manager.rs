//! A kvrs hook sidecar (kvrs-ipc's generated `Info` and `Callbacks` v1alpha3 servers) under
//! KubeVirt's own hook manager: `tests/hooks/main.go` runs kubevirt.io/kubevirt v1.9.0's
//! `pkg/hooks` as virt-launcher does (Collect, OnDefineDomain, the answer parsed into KubeVirt's
//! domain type, Shutdown), built by `scripts/hooks-harness.sh`. The manager only looks under
//! `/var/run/kubevirt-hooks`, so it runs in a mount namespace where that is the test's hooks
//! directory. Needs root (the mount namespace) and Go with the module proxy (or a built harness).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use kvrs_ipc::proto::hooks::{info, v1alpha3};
use tonic::{Request, Response, Status};

/// The sidecar: stamps the VMI's annotated manufacturer into the domain's SMBIOS base board.
#[derive(Clone, Default)]
struct KvrsSidecar {
    /// The RPCs called, in order, with what OnDefineDomain received.
    calls: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl info::info_server::Info for KvrsSidecar {
    async fn info(
        &self,
        _: Request<info::InfoParams>,
    ) -> Result<Response<info::InfoResult>, Status> {
        self.calls.lock().unwrap().push("Info".into());
        Ok(Response::new(info::InfoResult {
            name: "kvrs-sidecar".into(),
            hook_points: ["OnDefineDomain", "Shutdown"]
                .map(|name| info::HookPoint {
                    name: name.into(),
                    priority: 0,
                })
                .to_vec(),
            versions: vec!["v1alpha3".into()],
        }))
    }
}

#[tonic::async_trait]
impl v1alpha3::callbacks_server::Callbacks for KvrsSidecar {
    async fn on_define_domain(
        &self,
        r: Request<v1alpha3::OnDefineDomainParams>,
    ) -> Result<Response<v1alpha3::OnDefineDomainResult>, Status> {
        let p = r.into_inner();
        let xml =
            String::from_utf8(p.domain_xml).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let vmi: serde_json::Value =
            serde_json::from_slice(&p.vmi).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let manufacturer =
            vmi["metadata"]["annotations"]["smbios.vm.kubevirt.io/baseBoardManufacturer"]
                .as_str()
                .ok_or_else(|| Status::invalid_argument("no manufacturer annotation"))?;
        self.calls
            .lock()
            .unwrap()
            .push(format!("OnDefineDomain {xml}"));
        let sysinfo = format!(
            "<sysinfo type=\"smbios\"><baseBoard><entry name=\"manufacturer\">{manufacturer}</entry></baseBoard></sysinfo></domain>"
        );
        let Some(at) = xml.rfind("</domain>") else {
            return Err(Status::invalid_argument("no </domain>"));
        };
        let edited = format!("{}{sysinfo}", &xml[..at]);
        Ok(Response::new(v1alpha3::OnDefineDomainResult {
            domain_xml: edited.into_bytes(),
        }))
    }

    async fn pre_cloud_init_iso(
        &self,
        _: Request<v1alpha3::PreCloudInitIsoParams>,
    ) -> Result<Response<v1alpha3::PreCloudInitIsoResult>, Status> {
        Err(Status::unimplemented("not subscribed"))
    }

    async fn shutdown(
        &self,
        _: Request<v1alpha3::ShutdownParams>,
    ) -> Result<Response<v1alpha3::ShutdownResult>, Status> {
        self.calls.lock().unwrap().push("Shutdown".into());
        Ok(Response::new(v1alpha3::ShutdownResult {}))
    }
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Builds (or finds) the harness; its directory.
fn harness() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/hooks-harness.sh");
    let out = Command::new("bash")
        .arg(script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/hooks-harness.sh");
    assert!(
        out.status.success(),
        "scripts/hooks-harness.sh failed (Go >= 1.26 and the Go module proxy are needed)"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(text.lines().last().expect("the harness directory").trim())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubevirts_hook_manager_calls_a_kvrs_sidecar() {
    assert!(
        is_root(),
        "this test needs root (a mount namespace for /var/run/kubevirt-hooks)"
    );
    let manager = harness().join("kubevirt-hook-manager");
    assert!(manager.is_file(), "{} missing", manager.display());

    let dir = tempfile::tempdir().unwrap();
    let hooks = dir.path().join("hooks");
    std::fs::create_dir_all(hooks.join("hook-sidecar-0")).unwrap();
    let sidecar = KvrsSidecar::default();
    let listener = tokio::net::UnixListener::bind(hooks.join("hook-sidecar-0/kvrs.sock")).unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(info::info_server::InfoServer::new(sidecar.clone()))
            .add_service(v1alpha3::callbacks_server::CallbacksServer::new(
                sidecar.clone(),
            ))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );

    let domain = dir.path().join("domain.xml");
    std::fs::write(
        &domain,
        "<domain type=\"qemu\"><name>ns_vm</name><memory unit=\"b\">134217728</memory>\
         <os><type arch=\"x86_64\" machine=\"q35\">hvm</type></os></domain>",
    )
    .unwrap();
    let vmi = dir.path().join("vmi.json");
    std::fs::write(
        &vmi,
        serde_json::json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm", "namespace": "ns",
                         "annotations": {"smbios.vm.kubevirt.io/baseBoardManufacturer": "kvrs sidecar"}},
            "spec": {"domain": {"devices": {}}}
        })
        .to_string(),
    )
    .unwrap();

    let out = tokio::task::spawn_blocking(move || {
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-euc"])
            .arg(
                "mount -t tmpfs kvrs-hooks /run && mkdir /run/kubevirt-hooks && \
                 mount --bind \"$1\" /run/kubevirt-hooks && shift && exec \"$@\"",
            )
            .arg("sh")
            .arg(&hooks)
            .arg(&manager)
            .arg("--domain")
            .arg(&domain)
            .arg("--vmi")
            .arg(&vmi)
            .output()
            .expect("run KubeVirt's hook manager")
    })
    .await
    .unwrap();
    server.abort();
    assert!(
        out.status.success(),
        "KubeVirt's hook manager failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // KubeVirt parsed the sidecar's answer into its domain type: the base board is there.
    assert_eq!(
        result["sysInfo"]["BaseBoard"],
        serde_json::json!([{"Name": "manufacturer", "Value": "kvrs sidecar"}]),
        "{result}"
    );
    let calls = sidecar.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0], "Info");
    // What KubeVirt sent: its own re-marshalled domain.
    assert!(
        calls[1].starts_with("OnDefineDomain <domain type=\"qemu\"")
            && calls[1].contains("<name>ns_vm</name>"),
        "{}",
        calls[1]
    );
    assert_eq!(calls[2], "Shutdown");
}
