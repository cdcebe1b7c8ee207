//! The I/O shell: one real kube-apiserver + etcd with KubeVirt's CRDs and KubeVirt CR, and both
//! virt-api processes in front of it — KubeVirt v1.9.0's own `cmd/virt-api` (built by
//! `benches/kubevirt/build.sh`) with the certificate files its operator would mount, and kvrs's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kvrs_test_cluster::{Options, TestCluster, free_loopback_port};
use serde_json::json;

/// KubeVirt's install namespace for both virt-apis.
pub const NAMESPACE: &str = "kubevirt";

/// A child process killed (by its own pid) and reaped when dropped.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Proc {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last 30 lines of its log.
    pub fn tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Fails, with its log's tail, when it has exited.
    pub fn check_alive(&mut self, who: &str) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{who} exited ({status}):\n{}", self.tail());
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kubectl(cluster: &TestCluster, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let out = match stdin {
        Some(s) => cluster.kubectl_with_stdin(args, s),
        None => cluster.kubectl(args),
    };
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The API server with what both virt-apis read at start: KubeVirt's CRDs (from its operator's
/// packages, `manifests`), the namespace, a KubeVirt CR with an empty configuration (the
/// oracle's: every default) in phase `Deployed` (KubeVirt's cluster config ignores a CR without a
/// phase).
pub fn start_cluster(manifests: &str) -> Result<TestCluster> {
    let cluster =
        TestCluster::start(Options::apiserver_only()).map_err(|e| anyhow::anyhow!("{e}"))?;
    kubectl(&cluster, &["create", "namespace", NAMESPACE], None)?;
    // `create`, not `apply`: KubeVirt's CRDs exceed the last-applied annotation's size limit.
    kubectl(&cluster, &["create", "-f", "-"], Some(manifests)).context("KubeVirt's CRDs")?;
    cluster
        .wait_for_crds(
            &[
                "virtualmachines.kubevirt.io",
                "virtualmachineinstances.kubevirt.io",
                "kubevirts.kubevirt.io",
            ],
            Duration::from_secs(60),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let kv = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": NAMESPACE},
        "spec": {"configuration": {}}});
    kubectl(&cluster, &["create", "-f", "-"], Some(&kv.to_string()))?;
    kubectl(
        &cluster,
        &[
            "patch",
            "kubevirt",
            "kubevirt",
            "-n",
            NAMESPACE,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Deployed"}}"#,
        ],
        None,
    )?;
    Ok(cluster)
}

fn openssl(args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .context("running openssl")?;
    if !out.status.success() {
        bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The files KubeVirt's operator would mount into virt-api: a CA, a serving certificate for
/// `127.0.0.1` signed by it (`/etc/virt-api/certificates`), and a client certificate for
/// calling virt-handler (`/etc/virt-handler/clientcertificates`); plus the CA as the
/// `kubevirt-ca` ConfigMap. Returns the CA's PEM.
pub fn kubevirt_certs(cluster: &TestCluster, dir: &Path) -> Result<String> {
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=kubevirt.io@bench",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.crt"),
    ])?;
    for (name, cn, ext) in [
        (
            "tls",
            "virt-api.kubevirt.pod.cluster.local",
            "subjectAltName=IP:127.0.0.1,DNS:virt-api.kubevirt.svc",
        ),
        (
            "handler",
            "kubevirt.io:system:client:virt-handler",
            "extendedKeyUsage=clientAuth",
        ),
    ] {
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &p(&format!("{name}.key")),
            "-out",
            &p(&format!("{name}.csr")),
        ])?;
        std::fs::write(dir.join(format!("{name}.ext")), ext)?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            &p(&format!("{name}.csr")),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &p(&format!("{name}.ext")),
            "-out",
            &p(&format!("{name}.crt")),
        ])?;
    }
    let ca = std::fs::read_to_string(dir.join("ca.crt"))?;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kubevirt-ca", "namespace": NAMESPACE}, "data": {"ca-bundle": ca}});
    kubectl(cluster, &["create", "-f", "-"], Some(&cm.to_string()))?;
    Ok(ca)
}

/// KubeVirt v1.9.0's virt-api on `127.0.0.1:PORT` with the admin kubeconfig (the operator
/// would give it its ServiceAccount; the webhooks' decisions do not depend on it).
pub fn start_kubevirt(
    cluster: &TestCluster,
    bin: &Path,
    certs: &Path,
    log: PathBuf,
) -> Result<(Proc, SocketAddr)> {
    let port = free_loopback_port();
    let c = |f: &str| certs.join(f);
    let child = Command::new(bin)
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig_path())
        .args(["--listen", "127.0.0.1", "--port", &port.to_string()])
        .arg("--tls-cert-file")
        .arg(c("tls.crt"))
        .arg("--tls-key-file")
        .arg(c("tls.key"))
        .arg("--handler-cert-file")
        .arg(c("handler.crt"))
        .arg("--handler-key-file")
        .arg(c("handler.key"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Ok((
        Proc { child, log },
        SocketAddr::from(([127, 0, 0, 1], port)),
    ))
}

/// kvrs's virt-api on `127.0.0.1:PORT` with the admin kubeconfig; it makes its own CA and
/// serving certificate (Secret `kvrs-virt-api-certs`).
pub fn start_kvrs(cluster: &TestCluster, bin: &Path, log: PathBuf) -> Result<(Proc, SocketAddr)> {
    let port = free_loopback_port();
    let child = Command::new(bin)
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig_path())
        .args([
            "--namespace",
            NAMESPACE,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--tls-san",
            "127.0.0.1",
        ])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Ok((
        Proc { child, log },
        SocketAddr::from(([127, 0, 0, 1], port)),
    ))
}

/// kvrs's virt-api's CA (PEM) once it has written its certificate Secret.
pub fn kvrs_ca(cluster: &TestCluster, proc: &mut Proc) -> Result<String> {
    let start = Instant::now();
    loop {
        let out = cluster.kubectl([
            "get",
            "secret",
            "-n",
            NAMESPACE,
            "kvrs-virt-api-certs",
            "-o",
            r#"go-template={{index .data "ca.crt" | base64decode}}"#,
        ]);
        if out.status.success() && out.stdout.starts_with(b"-----BEGIN") {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        proc.check_alive("kvrs's virt-api")?;
        if start.elapsed() > Duration::from_secs(60) {
            bail!("kvrs's virt-api wrote no Secret kvrs-virt-api-certs within 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// CPU seconds (user + system) `pid` has used so far.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) close with ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks =
        |i: usize| -> Result<f64> { Ok(f.get(i).context("short /proc stat")?.parse::<f64>()?) };
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// `kvrs-bench-manifests --namespace kubevirt`: KubeVirt's CRDs and controller RBAC as a List.
pub fn manifests(kubevirt_bin: &Path) -> Result<String> {
    let bin = kubevirt_bin.join("kvrs-bench-manifests");
    let out = Command::new(&bin)
        .args(["--namespace", NAMESPACE])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!("{} failed", bin.display());
    }
    Ok(String::from_utf8(out.stdout)?)
}
