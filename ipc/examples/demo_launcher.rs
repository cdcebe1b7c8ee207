//! A stand-in launcher for manual interoperability checks: serves `Cmd` on the socket given as
//! the first argument, answers Ping, GetDomain (a fixed small domain JSON) and SyncVirtualMachine
//! (printing the VMI's name), until interrupted.
//!
//! `cargo run -p kvrs-ipc --example demo_launcher -- /tmp/x/launcher-sock`

use std::sync::Arc;

use kvrs_ipc::{CmdResult, LauncherService, ServeOptions, VmiCommand, serve_launcher};

struct Demo;

#[kvrs_ipc::async_trait]
impl LauncherService for Demo {
    async fn sync_vmi(&self, cmd: VmiCommand) -> CmdResult {
        println!(
            "SyncVirtualMachine {}/{}",
            cmd.vmi.metadata.namespace.unwrap_or_default(),
            cmd.vmi.metadata.name.unwrap_or_default()
        );
        Ok(())
    }
    async fn get_domain(&self) -> CmdResult<Option<String>> {
        Ok(Some(
            r#"{"kind":"Domain","spec":{"name":"default_demo"}}"#.to_string(),
        ))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let socket = std::env::args()
        .nth(1)
        .ok_or("usage: demo_launcher SOCKET")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = serve_launcher(&socket, Arc::new(Demo), ServeOptions::default()).await?;
        println!("serving on {}", server.socket().display());
        std::future::pending::<()>().await;
        Ok(())
    })
}
