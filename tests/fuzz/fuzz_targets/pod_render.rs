//! VMI or VM text -> admission -> the virt-launcher pod (`kvrs pod`) and the memory overhead and
//! compute resources behind it (`kvrs overhead`). Asserts: no panic or abort; the pod serializes;
//! no hostPath volume, mount path or sub-path of any container has a `..` component — except the
//! hostPath of a `hostDisk` volume, which is the host path the VMI names on purpose (KubeVirt
//! accepts any, `..` included; `//../etc` is `/etc`, no escape from anything).
#![no_main]

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Container, Pod};
use kvrs_admission::ClusterConfig;
use kvrs_fuzz::assert_no_parent_component;
use kvrs_pod::resources::ResourceReport;
use kvrs_pod::{PodInputs, render_launcher_pod};
use libfuzzer_sys::fuzz_target;

fn config() -> &'static ClusterConfig {
    static CONFIG: OnceLock<ClusterConfig> = OnceLock::new();
    CONFIG.get_or_init(kvrs_fuzz::fuzz_config)
}

fn assert_mounts(container: &Container) {
    for mount in container.volume_mounts.iter().flatten() {
        let what = format!("container {} volumeMount {}", container.name, mount.name);
        assert_no_parent_component(&format!("{what} mountPath"), &mount.mount_path);
        if let Some(sub) = &mount.sub_path {
            assert_no_parent_component(&format!("{what} subPath"), sub);
        }
    }
    for device in container.volume_devices.iter().flatten() {
        assert_no_parent_component(
            &format!(
                "container {} volumeDevice {} devicePath",
                container.name, device.name
            ),
            &device.device_path,
        );
    }
}

fn assert_paths(pod: &Pod, host_disks: &[String]) {
    let Some(spec) = &pod.spec else {
        return;
    };
    for volume in spec.volumes.iter().flatten() {
        if host_disks.contains(&volume.name) {
            continue;
        }
        if let Some(host) = &volume.host_path {
            assert_no_parent_component(&format!("volume {} hostPath", volume.name), &host.path);
        }
    }
    for container in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        assert_mounts(container);
    }
}

fuzz_target!(|data: &[u8]| {
    let config = config();
    for vmi in kvrs_fuzz::admitted_vmis(data, config) {
        if let Ok(report) = ResourceReport::new(&vmi, config) {
            let _ = report.to_lines();
        }
        let Ok(pod) = render_launcher_pod(&vmi, config, &PodInputs::default()) else {
            continue;
        };
        if let Err(e) = serde_json::to_vec(&pod) {
            panic!("the launcher pod does not serialize: {e}");
        }
        let host_disks: Vec<String> = vmi
            .spec
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.host_disk.is_some())
            .map(|v| v.name.clone())
            .collect();
        assert_paths(&pod, &host_disks);
    }
});
