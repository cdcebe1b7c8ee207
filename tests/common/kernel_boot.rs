//! The VMI the launcher tests boot: the test guest's kernel and initramfs as a kernel-boot
//! container, an empty container disk, no pod interface, and the cloud-init user-data lines
//! the test's guest acts on (`KVRS-E2E` markers, `KVRS-RUN:` commands).

/// VMI `kvrs/<name>` (UID `uid`) with `user_data` as its cloud-init lines.
pub fn kernel_boot_vmi(name: &str, uid: &str, user_data: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "kvrs", "uid": uid},
        "spec": {
            "domain": {
                "firmware": {"kernelBoot": {
                    "kernelArgs": "console=ttyS0 panic=-1",
                    "container": {"image": "example/kernel-boot", "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initramfs.gz"}
                }},
                "resources": {"requests": {"memory": "128Mi"}},
                "devices": {
                    "autoattachPodInterface": false,
                    "disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}, {"name": "cloudinitdisk", "disk": {"bus": "virtio"}}]
                }
            },
            "volumes": [
                {"name": "rootdisk", "containerDisk": {"image": "example/disk"}},
                {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": format!("#cloud-config\n{}\n", user_data.join("\n"))}}
            ]
        }
    })
}
