//! `kube::Resource` for the top-level kinds, so `kube::Api<VirtualMachineInstance>` works.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::{NamespaceResourceScope, Resource};

use super::{GROUP, VERSION, VirtualMachine, VirtualMachineInstance};

macro_rules! namespaced_kubevirt_resource {
    ($ty:ty, $kind:literal, $plural:literal) => {
        impl Resource for $ty {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

namespaced_kubevirt_resource!(VirtualMachine, "VirtualMachine", "virtualmachines");
namespaced_kubevirt_resource!(
    VirtualMachineInstance,
    "VirtualMachineInstance",
    "virtualmachineinstances"
);
