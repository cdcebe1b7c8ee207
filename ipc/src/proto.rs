//! Code generated at build time from `ipc/proto/`: the messages and the raw tonic clients and
//! servers of KubeVirt's handler<->launcher contract, and of the kubelet's device-plugin API.
#![allow(missing_docs, clippy::all)]

/// `kubevirt.cmd.*`: the commands a handler sends to a launcher.
pub mod cmd {
    /// `kubevirt.cmd.v1`: the Cmd service and its messages.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/kubevirt.cmd.v1.rs"));
    }
    /// `kubevirt.cmd.info`: the Cmd version handshake.
    pub mod info {
        include!(concat!(env!("OUT_DIR"), "/kubevirt.cmd.info.rs"));
    }
}

/// `kubevirt.notify.*`: the events a launcher sends to its handler.
pub mod notify {
    /// `kubevirt.notify.v1`: the Notify service and its messages.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/kubevirt.notify.v1.rs"));
    }
    /// `kubevirt.notify.info`: the Notify version handshake.
    pub mod info {
        include!(concat!(env!("OUT_DIR"), "/kubevirt.notify.info.rs"));
    }
}

/// The kubelet's device-plugin API (`k8s.io/kubelet/pkg/apis/deviceplugin`), which
/// virt-handler's device plugins speak.
pub mod deviceplugin {
    /// `v1beta1`: the kubelet's `Registration` service and the plugins' `DevicePlugin` service.
    pub mod v1beta1 {
        include!(concat!(env!("OUT_DIR"), "/v1beta1.rs"));
    }
}
