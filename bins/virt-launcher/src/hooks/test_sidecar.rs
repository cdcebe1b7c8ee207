//! A hook sidecar for tests: serves `Info` and `Callbacks` (v1alpha1 and v1alpha3) on a Unix
//! socket with behaviour the test picks, and records the calls it got.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kvrs_ipc::proto::hooks::{info, v1alpha1, v1alpha3};
use tonic::{Request, Response, Status};

/// What `OnDefineDomain` answers, given the domain XML and the VMI JSON it received.
pub type OnDefine = Arc<dyn Fn(&str, &serde_json::Value) -> Result<Vec<u8>, Status> + Send + Sync>;

/// A test sidecar's configuration and call log.
#[derive(Clone)]
pub struct TestSidecar {
    /// Its `Info` name.
    pub name: String,
    /// The versions it offers.
    pub versions: Vec<String>,
    /// `(hook point, priority)`.
    pub hook_points: Vec<(String, i32)>,
    /// Its `OnDefineDomain`.
    pub on_define: OnDefine,
    /// Never answer `Info`.
    pub info_hangs: bool,
    /// Never answer `OnDefineDomain`.
    pub define_hangs: bool,
    /// `<name>:<rpc>` of every call, shared by all sidecars of a test.
    pub calls: Arc<Mutex<Vec<String>>>,
}

impl TestSidecar {
    /// A v1alpha3 sidecar on `OnDefineDomain` that returns the domain unchanged.
    pub fn new(name: &str, calls: &Arc<Mutex<Vec<String>>>) -> TestSidecar {
        TestSidecar {
            name: name.into(),
            versions: vec!["v1alpha3".into()],
            hook_points: vec![("OnDefineDomain".into(), 0), ("Shutdown".into(), 0)],
            on_define: Arc::new(|xml, _| Ok(xml.as_bytes().to_vec())),
            info_hangs: false,
            define_hangs: false,
            calls: Arc::clone(calls),
        }
    }

    fn record(&self, rpc: &str) {
        self.calls
            .lock()
            .unwrap()
            .push(format!("{}:{rpc}", self.name));
    }

    async fn define(&self, version: &str, xml: Vec<u8>, vmi: Vec<u8>) -> Result<Vec<u8>, Status> {
        self.record(&format!("OnDefineDomain/{version}"));
        if self.define_hangs {
            std::future::pending::<()>().await;
        }
        let xml = String::from_utf8(xml).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let vmi: serde_json::Value =
            serde_json::from_slice(&vmi).map_err(|e| Status::invalid_argument(e.to_string()))?;
        (self.on_define)(&xml, &vmi)
    }
}

#[tonic::async_trait]
impl info::info_server::Info for TestSidecar {
    async fn info(
        &self,
        _: Request<info::InfoParams>,
    ) -> Result<Response<info::InfoResult>, Status> {
        self.record("Info");
        if self.info_hangs {
            std::future::pending::<()>().await;
        }
        Ok(Response::new(info::InfoResult {
            name: self.name.clone(),
            hook_points: self
                .hook_points
                .iter()
                .map(|(name, priority)| info::HookPoint {
                    name: name.clone(),
                    priority: *priority,
                })
                .collect(),
            versions: self.versions.clone(),
        }))
    }
}

#[tonic::async_trait]
impl v1alpha3::callbacks_server::Callbacks for TestSidecar {
    async fn on_define_domain(
        &self,
        r: Request<v1alpha3::OnDefineDomainParams>,
    ) -> Result<Response<v1alpha3::OnDefineDomainResult>, Status> {
        let p = r.into_inner();
        let domain_xml = self.define("v1alpha3", p.domain_xml, p.vmi).await?;
        Ok(Response::new(v1alpha3::OnDefineDomainResult { domain_xml }))
    }

    async fn pre_cloud_init_iso(
        &self,
        r: Request<v1alpha3::PreCloudInitIsoParams>,
    ) -> Result<Response<v1alpha3::PreCloudInitIsoResult>, Status> {
        self.record("PreCloudInitIso/v1alpha3");
        let p = r.into_inner();
        let mut data: serde_json::Value = serde_json::from_slice(&p.cloud_init_data)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        data["UserData"] = format!("#cloud-config\n# edited by {}\n", self.name).into();
        Ok(Response::new(v1alpha3::PreCloudInitIsoResult {
            cloud_init_data: serde_json::to_vec(&data).unwrap(),
            cloud_init_no_cloud_source: Vec::new(),
        }))
    }

    async fn shutdown(
        &self,
        _: Request<v1alpha3::ShutdownParams>,
    ) -> Result<Response<v1alpha3::ShutdownResult>, Status> {
        self.record("Shutdown/v1alpha3");
        Ok(Response::new(v1alpha3::ShutdownResult {}))
    }
}

#[tonic::async_trait]
impl v1alpha1::callbacks_server::Callbacks for TestSidecar {
    async fn on_define_domain(
        &self,
        r: Request<v1alpha1::OnDefineDomainParams>,
    ) -> Result<Response<v1alpha1::OnDefineDomainResult>, Status> {
        let p = r.into_inner();
        let domain_xml = self.define("v1alpha1", p.domain_xml, p.vmi).await?;
        Ok(Response::new(v1alpha1::OnDefineDomainResult { domain_xml }))
    }
}

/// A running test sidecar; dropping it stops the server (as a sidecar that exits) and removes
/// its socket.
pub struct Running {
    socket: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops serving at once, as a sidecar that crashed (the socket file stays).
    pub fn crash(&self) {
        self.task.abort();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Serves `sidecar` on `socket` (its directory is created).
pub fn serve(socket: &Path, sidecar: TestSidecar) -> Running {
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(info::info_server::InfoServer::new(sidecar.clone()))
            .add_service(v1alpha3::callbacks_server::CallbacksServer::new(
                sidecar.clone(),
            ))
            .add_service(v1alpha1::callbacks_server::CallbacksServer::new(sidecar))
            .serve_with_incoming(incoming)
            .await;
    });
    Running {
        socket: socket.to_path_buf(),
        task,
    }
}
