//! The exec helper of the kvrs pod runner: becomes one pod's container
//! (see `kvrs_kubelet::pod_exec`). Usage: `kvrs-pod-exec SPEC.json`.

fn main() {
    kvrs_kubelet::pod_exec::main(std::env::args_os().skip(1))
}
