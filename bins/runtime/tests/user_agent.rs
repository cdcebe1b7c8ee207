//! Every request of a daemon's kube client names the daemon: the User-Agent is
//! `<component>/v<version> (<os>/<arch>) kvrs`, as client-go names KubeVirt's components, so
//! audit logs tell kvrs's daemons apart. A plain-HTTP stand-in for the API server records the
//! header of the request the client sends (`GET /version`).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use kvrs_runtime::kube::setup::{connect_as, user_agent};

/// Answers one request with a `/version` document; returns the request's User-Agent.
fn serve_one(listener: TcpListener) -> std::thread::JoinHandle<Option<String>> {
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().ok()?;
        let mut reader = BufReader::new(stream.try_clone().ok()?);
        let mut agent = None;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("user-agent")
            {
                agent = Some(value.trim().to_string());
            }
        }
        let body = r#"{"major":"1","minor":"36","gitVersion":"v1.36.3","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":"linux/amd64"}"#;
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .ok()?;
        agent
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_daemon_names_itself_in_the_user_agent() {
    for component in ["virt-controller", "virt-handler"] {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let server = serve_one(listener);
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
                 users:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
                 current-context: x\n"
            ),
        )
        .unwrap();
        let client = connect_as(component, Some(&kubeconfig))
            .await
            .expect("a client");
        let version = client.apiserver_version().await.expect("GET /version");
        assert_eq!(version.git_version, "v1.36.3");
        let agent = server.join().unwrap().expect("a User-Agent header");
        assert_eq!(agent, user_agent(component));
        assert!(
            agent.starts_with(&format!("{component}/v{} (", env!("CARGO_PKG_VERSION"))),
            "{agent}"
        );
        assert!(agent.ends_with(") kvrs"), "{agent}");
    }
}
