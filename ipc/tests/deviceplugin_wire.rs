//! The kubelet's device-plugin API v1beta1 on the wire: messages encoded by hand from the
//! kubelet's published field numbers, compared with what prost makes of ours, and the gRPC
//! service names a real kubelet calls. A drifted number or name fails here, not on a node.

use kvrs_ipc::proto::deviceplugin::v1beta1::{
    AllocateResponse, ContainerAllocateResponse, Device, DevicePluginOptions, ListAndWatchResponse,
    RegisterRequest,
};
use kvrs_ipc::proto::deviceplugin::v1beta1::{device_plugin_server, registration_server};
use prost::Message;

/// A length-delimited field: key (number << 3 | 2), length, payload (all lengths < 128 here).
fn ld(number: u8, payload: &[u8]) -> Vec<u8> {
    let len = u8::try_from(payload.len()).expect("short payload");
    assert!(len < 128);
    let mut out = vec![(number << 3) | 2, len];
    out.extend_from_slice(payload);
    out
}

#[test]
fn register_request_has_the_kubelets_field_numbers() {
    // version = 1, endpoint = 2, resource_name = 3, options = 4 { pre_start_required = 1,
    // get_preferred_allocation_available = 2 }.
    let options = [vec![1 << 3, 1], vec![2 << 3, 1]].concat();
    let wire = [
        ld(1, b"v1beta1"),
        ld(2, b"kubevirt-kvm.sock"),
        ld(3, b"devices.kubevirt.io/kvm"),
        ld(4, &options),
    ]
    .concat();
    let ours = RegisterRequest {
        version: "v1beta1".into(),
        endpoint: "kubevirt-kvm.sock".into(),
        resource_name: "devices.kubevirt.io/kvm".into(),
        options: Some(DevicePluginOptions {
            pre_start_required: true,
            get_preferred_allocation_available: true,
        }),
    };
    assert_eq!(ours.encode_to_vec(), wire);
    assert_eq!(RegisterRequest::decode(wire.as_slice()).unwrap(), ours);
}

#[test]
fn list_and_watch_response_has_the_kubelets_field_numbers() {
    // devices = 1 { ID = 1, health = 2 }.
    let device = [ld(1, b"kvm0"), ld(2, b"Healthy")].concat();
    let wire = ld(1, &device);
    let ours = ListAndWatchResponse {
        devices: vec![Device {
            id: "kvm0".into(),
            health: "Healthy".into(),
            topology: None,
        }],
    };
    assert_eq!(ours.encode_to_vec(), wire);
}

#[test]
fn allocate_response_has_the_kubelets_field_numbers() {
    // container_responses = 1 { devices = 3 { container_path = 1, host_path = 2,
    // permissions = 3 } }.
    let spec = [ld(1, b"/dev/kvm"), ld(2, b"/dev/kvm"), ld(3, b"rw")].concat();
    let wire = ld(1, &ld(3, &spec));
    let decoded = AllocateResponse::decode(wire.as_slice()).unwrap();
    let container: &ContainerAllocateResponse = &decoded.container_responses[0];
    assert_eq!(container.devices[0].container_path, "/dev/kvm");
    assert_eq!(container.devices[0].host_path, "/dev/kvm");
    assert_eq!(container.devices[0].permissions, "rw");
    assert_eq!(decoded.encode_to_vec(), wire);
}

#[test]
fn services_are_named_as_the_kubelet_calls_them() {
    assert_eq!(registration_server::SERVICE_NAME, "v1beta1.Registration");
    assert_eq!(device_plugin_server::SERVICE_NAME, "v1beta1.DevicePlugin");
}
