//! Compiles kvrs's own .proto files of KubeVirt's handler<->launcher contract (and of the
//! kubelet's device-plugin API virt-handler serves, and of the hook sidecars' API the launcher
//! calls) with protox (a pure-Rust protobuf compiler), so building kvrs never needs a system
//! `protoc`.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "kubevirt/cmd/v1/cmd.proto",
    "kubevirt/cmd/info/info.proto",
    "kubevirt/notify/v1/notify.proto",
    "kubevirt/notify/info/info.proto",
    "k8s/deviceplugin/v1beta1/api.proto",
    "kubevirt/hooks/info/info.proto",
    "kubevirt/hooks/v1alpha1/v1alpha1.proto",
    "kubevirt/hooks/v1alpha2/v1alpha2.proto",
    "kubevirt/hooks/v1alpha3/v1alpha3.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(proto).display());
    }
    let descriptors = protox::compile(PROTOS, [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
