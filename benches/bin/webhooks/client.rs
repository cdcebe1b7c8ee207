//! The one HTTPS client both virt-apis get: HTTP/1.1 over rustls, one kept-alive connection per
//! worker, every request timed from sending it to having read the whole answer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// A TLS client configuration trusting exactly the given PEM CAs (the two virt-apis' CAs):
/// certificates are verified, against `127.0.0.1` in their SANs.
pub fn tls_config(ca_pems: &[String]) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in ca_pems {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.context("a CA certificate's PEM")?)?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One kept-alive HTTPS connection to a server.
pub struct Conn {
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    send: SendRequest<Full<Bytes>>,
}

impl Conn {
    /// Connects (TCP without Nagle, TLS, HTTP/1.1 handshake).
    pub async fn open(addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> Result<Conn> {
        let tcp = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true)?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
            .with_context(|| format!("TLS handshake with {addr}"))?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn { addr, tls, send })
    }

    /// POSTs `body` as JSON to `path`; (status, answer).
    pub async fn post(&mut self, path: &str, body: Bytes) -> Result<(u16, Bytes)> {
        if self.send.ready().await.is_err() {
            // The server closed the kept-alive connection: open another (counted in the timing,
            // as a real client would pay it).
            *self = Conn::open(self.addr, self.tls.clone()).await?;
        }
        let req = hyper::Request::post(path)
            .header(hyper::header::HOST, self.addr.to_string())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let resp = self
            .send
            .send_request(req)
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = resp.status().as_u16();
        let answer = resp.into_body().collect().await?.to_bytes();
        Ok((status, answer))
    }
}

/// One request of a batch: which path (index into `paths`) and the body.
#[derive(Clone)]
pub struct Job {
    /// Index of the webhook path.
    pub path: usize,
    /// The AdmissionReview.
    pub body: Bytes,
}

/// Runs `jobs` over `conns` (one worker per connection, each taking the next job), returning
/// the connections and each answered request's (path index, latency in µs). Fails on any
/// answer but 200.
pub async fn run_batch(
    conns: Vec<Conn>,
    paths: Arc<Vec<&'static str>>,
    jobs: Arc<Vec<Job>>,
) -> Result<(Vec<Conn>, Vec<(usize, f64)>)> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for mut conn in conns {
        let (paths, jobs, next) = (paths.clone(), jobs.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let path = paths[job.path];
                let start = Instant::now();
                let (status, answer) = conn.post(path, job.body.clone()).await?;
                let micros = start.elapsed().as_secs_f64() * 1e6;
                if status != 200 {
                    bail!(
                        "{path}: HTTP {status}: {}",
                        String::from_utf8_lossy(&answer)
                    );
                }
                out.push((job.path, micros));
            }
            Ok::<_, anyhow::Error>((conn, out))
        }));
    }
    let mut conns = Vec::new();
    let mut samples = Vec::new();
    for w in workers {
        let (conn, out) = w.await??;
        conns.push(conn);
        samples.extend(out);
    }
    Ok((conns, samples))
}
