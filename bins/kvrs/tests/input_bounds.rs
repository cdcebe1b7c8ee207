//! issue 17: every input is bounded before it is rendered — the manifest's size (the API
//! server's 3 MiB request limit), its flow nesting, its device lists and vCPU counts — and
//! `defaults`, `convert`, `overhead` and `pod` give the same answer for it.

use std::path::PathBuf;
use std::process::Command;

const KVRS: &str = env!("CARGO_BIN_EXE_kvrs");
const SUBCOMMANDS: &[&str] = &["defaults", "convert", "overhead", "pod"];

fn write(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kvrs-input-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Exit code and stderr of `kvrs SUB FILE`.
fn run(sub: &str, file: &PathBuf) -> (Option<i32>, String) {
    let out = Command::new(KVRS).arg(sub).arg(file).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn vmi(extra_domain: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: t\nspec:\n  \
         domain:\n    memory: {{guest: 1Gi}}\n{extra_domain}{extra_spec}"
    )
}

/// Every subcommand fails with exit code 2 and `kvrs: <path>: <expected>`.
fn refused_alike(file: &PathBuf, expected: &str) {
    for sub in SUBCOMMANDS {
        let (code, err) = run(sub, file);
        assert_eq!(code, Some(2), "{sub}: {err}");
        assert_eq!(
            err.trim_end(),
            format!("kvrs: {}: {expected}", file.display()),
            "{sub}"
        );
    }
}

#[test]
fn manifests_over_the_api_servers_request_limit_are_refused() {
    let mut text = vmi("    devices: {}\n", "");
    text.push_str(&format!("# {}\n", "x".repeat(3 << 20)));
    let file = write("big.yaml", &text);
    refused_alike(
        &file,
        "larger than 3145728 bytes, the most an API server accepts in one request",
    );
}

#[test]
fn deep_flow_nesting_is_refused_before_parsing() {
    let file = write(
        "deep.yaml",
        &format!("{}{}", "[".repeat(40_000), "]".repeat(40_000)),
    );
    refused_alike(
        &file,
        "line 1 column 129: [ ] and { } nest deeper than 128 levels, the most kvrs reads",
    );
}

#[test]
fn more_than_256_disks_are_refused_like_the_crd_refuses_them() {
    let disks: String = (0..300)
        .map(|i| format!("      - {{name: d{i}, disk: {{bus: virtio}}}}\n"))
        .collect();
    let volumes: String = (0..300)
        .map(|i| format!("    - {{name: d{i}, emptyDisk: {{capacity: 1Mi}}}}\n"))
        .collect();
    let text = vmi(
        &format!(
            "    devices:\n      disks:\n{}",
            disks.replace("      - ", "        - ")
        ),
        &format!("  volumes:\n{volumes}"),
    );
    let file = write("disks.yaml", &text);
    refused_alike(
        &file,
        "rejected by validating webhook: spec.domain.devices.disks: Too many: 300: must have at \
         most 256 items; spec.volumes: Too many: 300: must have at most 256 items",
    );
}

#[test]
fn vcpu_counts_from_quantities_get_one_answer_everywhere() {
    // `8Ei` was converted with one vCPU while `pod` refused it; 65536 x 65536 aborted convert.
    let file = write(
        "lim8ei.yaml",
        &vmi("    devices: {}\n    resources: {limits: {cpu: 8Ei}}\n", ""),
    );
    refused_alike(
        &file,
        "rejected by validating webhook: spec.domain.resources.requests.cpu: quantity \"8Ei\" is \
         too large; spec.domain.resources.limits.cpu: quantity \"8Ei\" is too large",
    );
    let file = write(
        "topology.yaml",
        &vmi(
            "    devices: {}\n    cpu: {sockets: 65536, cores: 65536}\n",
            "",
        ),
    );
    refused_alike(
        &file,
        "rejected by validating webhook: spec.domain.cpu.sockets: 65536 sockets x 65536 cores x \
         1 threads is 4294967296 vCPUs, more than the 1024 vCPUs a guest can have",
    );
}
