//! KubeVirt's own virtctl as the tests run it: `virtctl-harness` (tests/virtctl, built or found
//! in ~/.cache/kvrs by `scripts/virtctl-harness.sh`), a [`Virtctl`] bound to a kubeconfig and
//! namespace, and the RFB handshake a VNC viewer makes through `virtctl vnc --proxy-only`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::pod::repo_root;

/// The harness binary. Panics with the script's output when Go or the build fails: a test that
/// needs KubeVirt's virtctl never skips.
pub fn harness() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/virtctl-harness.sh"))
        .output()
        .expect("running scripts/virtctl-harness.sh");
    assert!(
        out.status.success(),
        "scripts/virtctl-harness.sh failed ({}): KubeVirt's virtctl (Go >= 1.26 and the Go module \
         proxy) is needed for this test\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bin = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        bin.is_file(),
        "virtctl-harness.sh printed no binary path: {stdout}"
    );
    bin
}

/// virtctl with a kubeconfig, in one namespace.
pub struct Virtctl {
    /// The harness binary ([`harness`]).
    pub bin: PathBuf,
    /// The kubeconfig it talks with.
    pub kubeconfig: PathBuf,
    /// Its `-n`.
    pub namespace: String,
}

impl Virtctl {
    /// `virtctl --kubeconfig K -n NS ARGS`, not started.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["-n", &self.namespace])
            .args(args);
        cmd
    }

    /// Runs `virtctl ARGS` to its end, with no input.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("virtctl {args:?}: {e}"))
    }

    /// `virtctl ARGS`, which must succeed: its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.ok_or_tell(args, String::new)
    }

    /// [`ok`](Self::ok), with `context()` (logs, objects) in the failure message.
    pub fn ok_or_tell(&self, args: &[&str], context: impl Fn() -> String) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "virtctl {args:?}: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            context()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `virtctl ARGS`, which must fail: its stderr.
    pub fn refused(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "virtctl {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

/// A running virtctl (`console`, `vnc --proxy-only`): killed if the test ends without reaping
/// it; what it writes on stdout collected by a thread; its stderr in a file.
pub struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: PathBuf,
}

impl Session {
    /// Starts `virtctl ARGS`, its stderr going to the file `stderr`.
    pub fn start(virtctl: &Virtctl, args: &[&str], stderr: &Path) -> Session {
        let mut child = virtctl
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(stderr).expect("virtctl's stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("virtctl {args:?}: {e}"));
        let stdin = child.stdin.take();
        let mut out = child.stdout.take().expect("virtctl's stdout");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let sink = stdout.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Session {
            child,
            stdin,
            stdout,
            stderr: stderr.to_path_buf(),
        }
    }

    /// Writes `bytes` to virtctl's stdin.
    pub fn type_in(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("virtctl's stdin");
        stdin.write_all(bytes).expect("writing to virtctl's stdin");
        stdin.flush().unwrap();
    }

    /// What virtctl printed so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// What virtctl wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits up to `timeout` for virtctl to exit: its status, `None` if it still runs.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Types `command` on `virtctl console`'s stdin until its stdout shows `answer` (the
    /// guest's shell may still be starting): what the console showed.
    pub fn ask(&mut self, command: &str, answer: &str) -> Result<String, String> {
        for _ in 0..40 {
            self.type_in(format!("{command}\r").as_bytes());
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                let seen = self.stdout();
                if seen.contains(answer) {
                    return Ok(seen);
                }
                if let Some(status) = self.child.try_wait().unwrap() {
                    return Err(format!(
                        "virtctl console ended ({status}): {}\nit showed:\n{seen}",
                        self.stderr()
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Err(format!(
            "no {answer:?} on the console; it showed:\n{}\nvirtctl's stderr:\n{}",
            self.stdout(),
            self.stderr()
        ))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a VNC server told a viewer up to its `ServerInit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RfbServer {
    /// The greeting, e.g. `RFB 003.008`.
    pub version: String,
    /// The framebuffer's width.
    pub width: u16,
    /// Its height.
    pub height: u16,
    /// The desktop's name.
    pub name: String,
}

/// The RFB 3.8 handshake with security type None on `127.0.0.1:port`, as a VNC viewer makes
/// it, to the server's `ServerInit`; panics on any step the server gets wrong.
pub fn rfb_handshake(port: u16) -> RfbServer {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("connecting to virtctl vnc's port {port}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut version = [0u8; 12];
    s.read_exact(&mut version).expect("the RFB greeting");
    let version = String::from_utf8_lossy(&version).into_owned();
    assert!(version.starts_with("RFB 003.00"), "greeting {version:?}");
    s.write_all(b"RFB 003.008\n").unwrap();
    let mut count = [0u8; 1];
    s.read_exact(&mut count).expect("the security types' count");
    assert!(count[0] > 0, "the server refused the connection");
    let mut types = vec![0u8; usize::from(count[0])];
    s.read_exact(&mut types).expect("the security types");
    assert!(types.contains(&1), "no security type None: {types:?}");
    s.write_all(&[1]).unwrap();
    let mut result = [0u8; 4];
    s.read_exact(&mut result).expect("the SecurityResult");
    assert_eq!(u32::from_be_bytes(result), 0, "SecurityResult");
    // ClientInit: shared.
    s.write_all(&[1]).unwrap();
    let mut init = [0u8; 24];
    s.read_exact(&mut init).expect("the ServerInit");
    let len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]) as usize;
    assert!(len < 4096, "a desktop name of {len} bytes");
    let mut name = vec![0u8; len];
    s.read_exact(&mut name).expect("the desktop's name");
    RfbServer {
        version: version.trim_end().to_string(),
        width: u16::from_be_bytes([init[0], init[1]]),
        height: u16::from_be_bytes([init[2], init[3]]),
        name: String::from_utf8_lossy(&name).into_owned(),
    }
}
