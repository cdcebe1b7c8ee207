//! The well-known labels, annotations and finalizers KubeVirt's components agree on.
//!
//! They are part of the API as much as the structs are: virt-controller finds a VMI's launcher
//! pod by [`labels::CREATED_BY`], virt-handler watches its node's VMIs by [`labels::NODE_NAME`],
//! and a VM's finalizer is what keeps its VMI from being garbage-collected under it. One place
//! for them keeps the controllers, the handler and the tests spelling them the same way.

/// Labels.
pub mod labels {
    /// On launcher pods: `virt-launcher`; the controller's pod informer selects on it.
    pub const APP: &str = "kubevirt.io";
    /// The value of [`APP`] on launcher pods.
    pub const APP_LAUNCHER: &str = "virt-launcher";
    /// On launcher pods: the UID of the VMI the pod runs.
    pub const CREATED_BY: &str = "kubevirt.io/created-by";
    /// On VMIs and launcher pods: the node the VMI runs on; virt-handler selects on it.
    pub const NODE_NAME: &str = "kubevirt.io/nodeName";
    /// On launcher pods: the VMI's name (`vm.kubevirt.io/name`).
    pub const VM_NAME: &str = "vm.kubevirt.io/name";
    /// On nodes: the node can run VMIs (set by virt-handler).
    pub const SCHEDULABLE: &str = "kubevirt.io/schedulable";
}

/// Annotations.
pub mod annotations {
    /// The newest API version the controllers have seen the object in.
    pub const LATEST_OBSERVED_API_VERSION: &str = "kubevirt.io/latest-observed-api-version";
    /// The API version the object is stored in.
    pub const STORAGE_OBSERVED_API_VERSION: &str = "kubevirt.io/storage-observed-api-version";
    /// On launcher pods: the domain name the launcher defines.
    pub const DOMAIN: &str = "kubevirt.io/domain";
    /// On VMIs: the VMI is the receiving end of a migration.
    pub const CREATE_MIGRATION_TARGET: &str = "kubevirt.io/create-migration-target";
    /// On nodes: virt-handler's heartbeat, an RFC 3339 timestamp refreshed periodically.
    pub const HEARTBEAT: &str = "kubevirt.io/heartbeat";
}

/// Finalizers.
pub mod finalizers {
    /// On VMs and the VMIs they own: the VM controller's hold, released only once it has
    /// accounted for the VMI (a VM is not gone before its guest is).
    pub const VM_CONTROLLER: &str = "kubevirt.io/virtualMachineControllerFinalize";
    /// On VMIs: deleting a VMI stops its pod first (foreground deletion of the guest).
    pub const FOREGROUND_DELETE_VM: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
}
