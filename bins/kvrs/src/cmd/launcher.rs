//! `kvrs launcher ACTION SOCKET [VMI-FILE]`: talk to a virt-launcher's cmd socket, a kvrs
//! launcher or KubeVirt's own, the way virt-handler does (same handshake, same deadlines).

use std::path::PathBuf;
use std::time::Duration;

use kvrs_ipc::transport::{InfoService, dial, query_versions};
use kvrs_ipc::version::highest_common_version;
use kvrs_ipc::{ClientConfig, LauncherClient, VirtualMachineOptions};

use crate::input::{CliError, Workload, read_workload};

/// What to ask the launcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// `Ping`: prints `ok` when the launcher answers.
    Ping,
    /// `CmdInfo.Info`: the cmd versions the launcher supports and the one kvrs would use (JSON).
    Info,
    /// `GetDomain`: the domain as JSON (`null` when the launcher has none).
    GetDomain,
    /// `SyncVirtualMachine` with VMI-FILE.
    Sync,
    /// `ShutdownVirtualMachine` with VMI-FILE.
    Shutdown,
    /// `KillVirtualMachine` with VMI-FILE.
    Kill,
    /// `PauseVirtualMachine` with VMI-FILE.
    Pause,
    /// `UnpauseVirtualMachine` with VMI-FILE.
    Unpause,
}

/// Examples shown by `kvrs launcher --help`. `tests/help_examples.rs` runs each against a
/// launcher it serves, with that launcher's socket in place of the path shown.
const EXAMPLES: &str = "\
Examples (on a node, as root; paths relative to a kvrs checkout):
  # Is the launcher of this pod alive, and which cmd versions does it speak?
  kvrs launcher ping /var/run/kubevirt/sockets/launcher-sock
  kvrs launcher info /var/run/kubevirt/sockets/launcher-sock
  # The domain it runs (JSON, null when none)
  kvrs launcher get-domain /var/run/kubevirt/sockets/launcher-sock
  # Define and start a VMI's domain, as virt-handler's sync does
  kvrs launcher sync /var/run/kubevirt/sockets/launcher-sock fixtures/vmi/minimal.yaml --timeout 30";

/// Arguments of `kvrs launcher`.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// The request to send.
    #[arg(value_enum)]
    pub action: Action,
    /// The launcher's cmd socket, e.g. `/var/run/kubevirt/sockets/launcher-sock` or
    /// `/pods/<pod UID>/volumes/kubernetes.io~empty-dir/sockets/launcher-sock`.
    pub socket: PathBuf,
    /// The VMI (YAML or JSON, `-` for standard input) for sync, shutdown, kill, pause, unpause.
    pub vmi_file: Option<PathBuf>,
    /// One deadline in seconds for connecting and for the call (default: virt-handler's,
    /// 2 s to connect, 5 s for queries, 20 s for commands).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = match args.timeout {
        None => ClientConfig::default(),
        Some(secs) => ClientConfig::uniform(
            Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    CliError::Input(format!(
                        "--timeout: {secs} is not a positive number of seconds"
                    ))
                })?,
        ),
    };
    let needs_vmi = !matches!(args.action, Action::Ping | Action::Info | Action::GetDomain);
    let vmi = match (&args.vmi_file, needs_vmi) {
        (Some(path), true) => match read_workload(path)? {
            Workload::Vmi(vmi) => Some(vmi),
            Workload::Vm(_) => {
                return Err(CliError::Input(format!(
                    "{}: a VirtualMachine; the launcher takes a VirtualMachineInstance",
                    path.display()
                )));
            }
        },
        (None, true) => {
            return Err(CliError::Input(format!(
                "launcher {}: needs a VMI-FILE",
                action_name(args.action)
            )));
        }
        (Some(path), false) => {
            return Err(CliError::Input(format!(
                "launcher {}: takes no VMI-FILE, got {}",
                action_name(args.action),
                path.display()
            )));
        }
        (None, false) => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    let output = runtime.block_on(talk(args.action, &args.socket, vmi.as_deref(), config))?;
    println!("{output}");
    Ok(())
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Ping => "ping",
        Action::Info => "info",
        Action::GetDomain => "get-domain",
        Action::Sync => "sync",
        Action::Shutdown => "shutdown",
        Action::Kill => "kill",
        Action::Pause => "pause",
        Action::Unpause => "unpause",
    }
}

fn failed(err: kvrs_ipc::IpcError) -> CliError {
    CliError::Failed(err.to_string())
}

async fn talk(
    action: Action,
    socket: &std::path::Path,
    vmi: Option<&kvrs_core::VirtualMachineInstance>,
    config: ClientConfig,
) -> Result<String, CliError> {
    if action == Action::Info {
        return info(socket, &config).await;
    }
    let client = LauncherClient::connect_with(socket, config.clone())
        .await
        .map_err(failed)?;
    let vmi = || vmi.ok_or_else(|| CliError::Input("a VMI-FILE is required".into()));
    match action {
        Action::Ping => client.ping().await.map_err(failed)?,
        Action::GetDomain => {
            return match client.get_domain().await.map_err(failed)? {
                None => Ok("null".to_string()),
                Some(json) => {
                    // Pretty-print when it parses; otherwise show it exactly as received.
                    let value: Result<serde_json::Value, _> = serde_json::from_str(&json);
                    Ok(value
                        .and_then(|v| serde_json::to_string_pretty(&v))
                        .unwrap_or(json))
                }
            };
        }
        Action::Sync => client
            .sync_vmi(vmi()?, VirtualMachineOptions::default())
            .await
            .map_err(failed)?,
        Action::Shutdown => client.shutdown(vmi()?).await.map_err(failed)?,
        Action::Kill => client.kill(vmi()?).await.map_err(failed)?,
        Action::Pause => client.pause(vmi()?).await.map_err(failed)?,
        Action::Unpause => client.unpause(vmi()?).await.map_err(failed)?,
        // Answered before connecting, see above.
        Action::Info => {}
    }
    Ok("ok".to_string())
}

/// `info`: what the peer announces, even when kvrs would refuse it.
async fn info(socket: &std::path::Path, config: &ClientConfig) -> Result<String, CliError> {
    let channel = dial(socket, config.connect_timeout).await.map_err(failed)?;
    let peer = query_versions(&channel, socket, InfoService::Cmd, config.short_timeout)
        .await
        .map_err(failed)?;
    let ours = InfoService::Cmd.our_versions();
    let chosen = highest_common_version(&peer, ours);
    let info = serde_json::json!({
        "socket": socket.display().to_string(),
        "supportedCmdVersions": peer,
        "kvrsCmdVersions": ours,
        "negotiatedVersion": chosen,
        "compatible": chosen.is_some(),
    });
    serde_json::to_string_pretty(&info).map_err(|e| CliError::Failed(e.to_string()))
}
