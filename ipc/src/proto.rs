//! Code generated at build time from `ipc/proto/`: the messages and the raw tonic clients and
//! servers of KubeVirt's handler<->launcher contract, of its hook sidecars' API, and of the kubelet's
//! device-plugin API.
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

/// `kubevirt.hooks.*`: the API of hook sidecars, which a launcher calls to let them change the
/// domain (and the cloud-init data) before it is defined.
pub mod hooks {
    /// `kubevirt.hooks.info`: the handshake every hook sidecar answers.
    pub mod info {
        include!(concat!(env!("OUT_DIR"), "/kubevirt.hooks.info.rs"));
    }
    /// `kubevirt.hooks.v1alpha1`: Callbacks with OnDefineDomain.
    pub mod v1alpha1 {
        include!(concat!(env!("OUT_DIR"), "/kubevirt.hooks.v1alpha1.rs"));
    }
    /// `kubevirt.hooks.v1alpha2`: Callbacks with OnDefineDomain and PreCloudInitIso.
    pub mod v1alpha2 {
        include!(concat!(env!("OUT_DIR"), "/kubevirt.hooks.v1alpha2.rs"));
    }
    /// `kubevirt.hooks.v1alpha3`: Callbacks with OnDefineDomain, PreCloudInitIso and Shutdown.
    pub mod v1alpha3 {
        include!(concat!(env!("OUT_DIR"), "/kubevirt.hooks.v1alpha3.rs"));
    }
}
