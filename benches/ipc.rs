//! Round trips per second over a real Unix socket between a kvrs handler-side client and a kvrs
//! launcher-side server: `Ping` (the floor: handshake-free unary call) and `SyncVirtualMachine`
//! carrying a realistic VMI (KubeVirt's defaulted Fedora example from the oracle corpus, so the
//! VMI JSON encode on the client and decode on the server are part of the measurement).

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kvrs_core::VirtualMachineInstance;
use kvrs_ipc::{
    CmdResult, LauncherClient, LauncherService, ServeOptions, VirtualMachineOptions, VmiCommand,
    serve_launcher,
};

/// Accepts every sync without doing anything, so only the IPC path is measured.
struct NoopLauncher;

#[kvrs_ipc::async_trait]
impl LauncherService for NoopLauncher {
    async fn sync_vmi(&self, cmd: VmiCommand) -> CmdResult {
        std::hint::black_box(cmd);
        Ok(())
    }
}

fn realistic_vmi() -> VirtualMachineInstance {
    let path = kvrs_corpus::shared_dir("oracle").join("example-vmi-fedora.defaulted.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the oracle corpus provides the realistic VMI)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn bench_ipc(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("launcher-sock");
    let _server = runtime
        .block_on(serve_launcher(
            &socket,
            Arc::new(NoopLauncher),
            ServeOptions::default(),
        ))
        .unwrap();
    let client = runtime.block_on(LauncherClient::connect(&socket)).unwrap();
    let vmi = realistic_vmi();
    let vmi_bytes = serde_json::to_vec(&vmi).unwrap().len();

    let mut group = c.benchmark_group("ipc_round_trip");
    group.throughput(Throughput::Elements(1));
    group.bench_function("ping", |b| {
        b.iter(|| runtime.block_on(client.ping()).unwrap());
    });
    group.bench_function(format!("sync_vmi_{vmi_bytes}B_json"), |b| {
        b.iter(|| {
            runtime
                .block_on(client.sync_vmi(&vmi, VirtualMachineOptions::default()))
                .unwrap()
        });
    });
    // Sixteen syncs in flight on one connection (HTTP/2 multiplexing), as a handler with many
    // VMIs on a node would not do per launcher, but as an upper bound of the transport.
    group.throughput(Throughput::Elements(16));
    group.bench_function("sync_vmi_16_concurrent", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let calls =
                    (0..16).map(|_| client.sync_vmi(&vmi, VirtualMachineOptions::default()));
                for result in futures_join_all(calls).await {
                    result.unwrap();
                }
            })
        });
    });
    group.finish();
}

/// Polls all futures concurrently on the current task (a tiny join_all without a new dependency).
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if outputs[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => outputs[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

criterion_group!(benches, bench_ipc);
criterion_main!(benches);
