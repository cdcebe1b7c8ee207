//! KubeVirt v1.9.0's admission webhooks as pure functions: [`admit`] takes the request, the
//! cluster configuration and whatever the webhook needs from the cluster ([`Facts`], fetched by
//! the shell beforehand as [`lookup`] says) and returns the [`Verdict`]. No IO, no clock, no
//! randomness: [`Context`] carries the clock reading and the fresh UUIDs a VM gets.
//!
//! [`Webhook`] is the one table of names, paths, operations and resources; the deploy manifests
//! and the test's webhook configurations are checked against it.

mod eviction;
mod instancetype;
mod migration;
mod status;
mod vm;
mod vm_architecture;
mod vm_infer;
mod vm_references;
mod vmi;

use std::collections::BTreeSet;

use kvrs_admission::ClusterConfig;
use kvrs_api::time::Now;
use serde_json::Value;

use crate::review::{AdmissionRequest, Verdict};

pub use eviction::{
    decide as decide_eviction, node as eviction_node, vmi_name as eviction_vmi_name,
};
pub use migration::{MIGRATION_FINALIZER, MIGRATION_SELECTOR_LABEL};
pub use vm_references::reads as vm_reads;

/// One of KubeVirt's webhooks that kvrs serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Webhook {
    /// VMI defaults on CREATE; status changes by others reverted on UPDATE.
    VmiMutate,
    /// VMI validation on CREATE.
    VmiValidateCreate,
    /// VMI UPDATE: spec frozen (except KubeVirt's own hotplug), reserved labels kept.
    VmiValidateUpdate,
    /// VM defaults (matchers checked, the preference's architecture, machine type and storage
    /// class, firmware UUID and serial, architecture, machine type).
    VmMutate,
    /// VM validation on CREATE and UPDATE.
    VmValidate,
    /// Migration selector label and finalizer on CREATE.
    MigrationMutateCreate,
    /// Migration CREATE: a VMI that exists, may migrate and has no migration in flight.
    MigrationValidateCreate,
    /// Migration UPDATE: spec frozen, selector label kept while in flight.
    MigrationValidateUpdate,
    /// `VirtualMachineInstancetype` CREATE/UPDATE.
    InstancetypeValidate,
    /// `VirtualMachineClusterInstancetype` CREATE/UPDATE.
    ClusterInstancetypeValidate,
    /// `VirtualMachinePreference` CREATE/UPDATE.
    PreferenceValidate,
    /// `VirtualMachineClusterPreference` CREATE/UPDATE.
    ClusterPreferenceValidate,
    /// `pods/eviction` of a launcher pod: refused, and the VMI marked for evacuation, when the
    /// VMI should move rather than stop.
    PodEviction,
    /// KubeVirt's `kubevirt-crd-status-validator`: a VM's `status.volumeRequests` on CREATE and
    /// UPDATE of `virtualmachines/status` (replica set and migration statuses pass).
    StatusValidate,
}

/// A webhook's registration facts, as KubeVirt's virt-operator writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The webhook's name in its configuration.
    pub name: &'static str,
    /// The URL path it is served at.
    pub path: &'static str,
    /// The operations it is called for.
    pub operations: &'static [&'static str],
    /// API group of its resource.
    pub group: &'static str,
    /// API versions of its resource.
    pub versions: &'static [&'static str],
    /// The plural resources (with their subresource, e.g. `virtualmachines/status`).
    pub resources: &'static [&'static str],
}

const CORE_VERSIONS: &[&str] = &["v1", "v1alpha3"];
const V1: &[&str] = &["v1"];
const ALL_OPERATIONS: &[&str] = &["*"];
const INSTANCETYPE_VERSIONS: &[&str] = &["v1beta1"];
const CREATE: &[&str] = &["CREATE"];
const UPDATE: &[&str] = &["UPDATE"];
const CREATE_UPDATE: &[&str] = &["CREATE", "UPDATE"];
const STATUSES: &[&str] = &[
    "virtualmachines/status",
    "virtualmachineinstancereplicasets/status",
    "virtualmachineinstancemigrations/status",
];

impl Webhook {
    /// Every webhook, mutating first, in the order of virt-operator's configurations.
    pub const ALL: [Webhook; 14] = [
        Webhook::VmMutate,
        Webhook::VmiMutate,
        Webhook::MigrationMutateCreate,
        Webhook::VmiValidateCreate,
        Webhook::VmiValidateUpdate,
        Webhook::PodEviction,
        Webhook::VmValidate,
        Webhook::MigrationValidateCreate,
        Webhook::MigrationValidateUpdate,
        Webhook::InstancetypeValidate,
        Webhook::ClusterInstancetypeValidate,
        Webhook::PreferenceValidate,
        Webhook::ClusterPreferenceValidate,
        Webhook::StatusValidate,
    ];

    /// Whether it is a mutating webhook (else validating).
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            Webhook::VmMutate | Webhook::VmiMutate | Webhook::MigrationMutateCreate
        )
    }

    /// The webhook served at `path`.
    pub fn from_path(path: &str) -> Option<Webhook> {
        Webhook::ALL
            .into_iter()
            .find(|w| w.registration().path == path)
    }

    /// Its name, path, operations and resource (virt-operator v1.9.0's
    /// `pkg/virt-operator/resource/generate/components/webhooks.go`).
    pub fn registration(self) -> Registration {
        let r = |name, path, operations, group, versions, resources| Registration {
            name,
            path,
            operations,
            group,
            versions,
            resources,
        };
        let kv = "kubevirt.io";
        let it = "instancetype.kubevirt.io";
        match self {
            Webhook::VmMutate => r(
                "virtualmachines-mutator.kubevirt.io",
                "/virtualmachines-mutate",
                CREATE_UPDATE,
                kv,
                CORE_VERSIONS,
                &["virtualmachines"],
            ),
            Webhook::VmiMutate => r(
                "virtualmachineinstances-mutator.kubevirt.io",
                "/virtualmachineinstances-mutate",
                CREATE_UPDATE,
                kv,
                CORE_VERSIONS,
                &["virtualmachineinstances"],
            ),
            Webhook::MigrationMutateCreate => r(
                "migrations-mutator.kubevirt.io",
                "/migration-mutate-create",
                CREATE,
                kv,
                CORE_VERSIONS,
                &["virtualmachineinstancemigrations"],
            ),
            Webhook::VmiValidateCreate => r(
                "virtualmachineinstances-create-validator.kubevirt.io",
                "/virtualmachineinstances-validate-create",
                CREATE,
                kv,
                CORE_VERSIONS,
                &["virtualmachineinstances"],
            ),
            Webhook::VmiValidateUpdate => r(
                "virtualmachineinstances-update-validator.kubevirt.io",
                "/virtualmachineinstances-validate-update",
                UPDATE,
                kv,
                CORE_VERSIONS,
                &["virtualmachineinstances"],
            ),
            Webhook::PodEviction => r(
                "virt-launcher-eviction-interceptor.kubevirt.io",
                "/pod-eviction-validate",
                ALL_OPERATIONS,
                "",
                V1,
                &["pods/eviction"],
            ),
            Webhook::VmValidate => r(
                "virtualmachine-validator.kubevirt.io",
                "/virtualmachines-validate",
                CREATE_UPDATE,
                kv,
                CORE_VERSIONS,
                &["virtualmachines"],
            ),
            Webhook::MigrationValidateCreate => r(
                "migration-create-validator.kubevirt.io",
                "/migration-validate-create",
                CREATE,
                kv,
                CORE_VERSIONS,
                &["virtualmachineinstancemigrations"],
            ),
            Webhook::MigrationValidateUpdate => r(
                "migration-update-validator.kubevirt.io",
                "/migration-validate-update",
                UPDATE,
                kv,
                CORE_VERSIONS,
                &["virtualmachineinstancemigrations"],
            ),
            Webhook::InstancetypeValidate => r(
                "virtualmachineinstancetype-validator.instancetype.kubevirt.io",
                "/virtualmachineinstancetypes-validate",
                CREATE_UPDATE,
                it,
                INSTANCETYPE_VERSIONS,
                &["virtualmachineinstancetypes"],
            ),
            Webhook::ClusterInstancetypeValidate => r(
                "virtualmachineclusterinstancetype-validator.instancetype.kubevirt.io",
                "/virtualmachineclusterinstancetypes-validate",
                CREATE_UPDATE,
                it,
                INSTANCETYPE_VERSIONS,
                &["virtualmachineclusterinstancetypes"],
            ),
            Webhook::PreferenceValidate => r(
                "virtualmachinepreference-validator.instancetype.kubevirt.io",
                "/virtualmachinepreferences-validate",
                CREATE_UPDATE,
                it,
                INSTANCETYPE_VERSIONS,
                &["virtualmachinepreferences"],
            ),
            Webhook::ClusterPreferenceValidate => r(
                "virtualmachineclusterpreference-validator.instancetype.kubevirt.io",
                "/virtualmachineclusterpreferences-validate",
                CREATE_UPDATE,
                it,
                INSTANCETYPE_VERSIONS,
                &["virtualmachineclusterpreferences"],
            ),
            Webhook::StatusValidate => r(
                "kubevirt-crd-status-validator.kubevirt.io",
                "/status-validate",
                CREATE_UPDATE,
                kv,
                CORE_VERSIONS,
                STATUSES,
            ),
        }
    }

    /// Its `sideEffects`: `NoneOnDryRun` for the eviction webhook, which marks the VMI (as a
    /// dry run when the eviction is one), `None` for the others.
    pub fn side_effects(self) -> &'static str {
        match self {
            Webhook::PodEviction => "NoneOnDryRun",
            _ => "None",
        }
    }

    /// A stable label for metrics and logs (the path without its `/`).
    pub fn label(self) -> &'static str {
        &self.registration().path[1..]
    }
}

/// What a decision reads besides the request: the configuration, who KubeVirt's own components
/// are, the clock and fresh UUIDs.
#[derive(Clone, Debug)]
pub struct Context<'a> {
    /// The cluster configuration (the KubeVirt CR's, flags over it).
    pub config: &'a ClusterConfig,
    /// Usernames of KubeVirt's (kvrs's) service accounts, `system:serviceaccount:NS:NAME`:
    /// they may write a VMI's status and spec (hotplug) and its reserved labels.
    pub service_accounts: &'a BTreeSet<String>,
    /// The controller's username among them (only it may set a migration's priority).
    pub controller_account: &'a str,
    /// The handler's username among them (node restriction applies to it).
    pub handler_account: &'a str,
    /// The webhook's clock reading (the VMI's `Pending` transition).
    pub now: Now,
    /// Two fresh random UUIDs: a new VM's firmware UUID and serial when it has none.
    pub fresh_uuids: [String; 2],
}

impl Context<'_> {
    /// Whether `username` is one of KubeVirt's service accounts.
    pub fn is_kubevirt(&self, username: &str) -> bool {
        self.service_accounts.contains(username)
    }
}

/// What the shell must read from the cluster before [`admit`] can decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The VMI a new migration names, and the migrations labelled with it.
    MigrationTarget {
        /// The migration's namespace.
        namespace: String,
        /// `spec.vmiName`.
        vmi_name: String,
    },
    /// What a VM webhook reads for a VM: the objects its `inferFromVolume` matchers walk
    /// through, then the instancetype, preference and ControllerRevisions its matchers name;
    /// [`vm_reads`] says which, round by round. Those that do not exist are left out of
    /// [`Facts::objects`] (KubeVirt's VM webhooks ignore a missing instancetype or preference).
    Vm {
        /// The VM, in the request's namespace.
        vm: Value,
        /// The mutator reads only the preference.
        preference_only: bool,
        /// The VMI of that name in the VM's namespace, into [`Facts::vmi`]: the validator's
        /// check of the VM's volume requests needs it when the VM is Ready.
        vmi: Option<String>,
    },
    /// A VMI, into [`Facts::vmi`] (a failed read into [`Facts::error`]): the status
    /// validator's check of a Ready VM's volume requests.
    Vmi {
        /// The VMI's namespace.
        namespace: String,
        /// The VMI's name (the VM's).
        name: String,
    },
    /// The pod of a `pods/eviction` request, then (for a live launcher pod) its VMI and the
    /// cluster's `evictionStrategy`; the VMI is marked for evacuation if the decision says so.
    Eviction {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        pod: String,
    },
}

/// What the shell read for a [`Lookup`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    /// The migration's VMI, or the VM's for its volume requests (`None`: it does not exist).
    pub vmi: Option<Value>,
    /// The migrations whose selector label names that VMI.
    pub migrations: Vec<Value>,
    /// The objects of a [`Lookup::Vm`] that exist.
    pub objects: Vec<Value>,
    /// Why reading failed (the webhook then refuses with it, as KubeVirt's does).
    pub error: Option<String>,
    /// The pod of a [`Lookup::Eviction`] (`None`: reading it failed).
    pub pod: Option<Value>,
    /// The KubeVirt CR's `evictionStrategy`, for a [`Lookup::Eviction`].
    pub cluster_eviction_strategy: Option<String>,
    /// The outcome of marking the VMI for evacuation, when the eviction decision asked for it.
    pub marked: Option<Result<(), String>>,
}

/// What `webhook` needs read from the cluster for `request`, if anything.
pub fn lookup(webhook: Webhook, request: &AdmissionRequest) -> Option<Lookup> {
    match webhook {
        Webhook::MigrationValidateCreate => migration::lookup(request),
        Webhook::VmMutate => vm_references::lookup(request, true),
        Webhook::VmValidate => vm_references::lookup(request, false),
        Webhook::StatusValidate => status::lookup(request),
        Webhook::PodEviction => eviction::lookup(request),
        _ => None,
    }
}

/// `webhook`'s answer to `request` (KubeVirt v1.9.0's, see each module).
pub fn admit(
    webhook: Webhook,
    request: &AdmissionRequest,
    ctx: &Context<'_>,
    facts: &Facts,
) -> Verdict {
    match webhook {
        Webhook::VmiMutate => vmi::mutate(request, ctx),
        Webhook::VmiValidateCreate => vmi::validate_create(request, ctx),
        Webhook::VmiValidateUpdate => vmi::validate_update(request, ctx),
        Webhook::VmMutate => vm::mutate(request, ctx, facts),
        Webhook::VmValidate => vm::validate(request, ctx, facts),
        Webhook::MigrationMutateCreate => migration::mutate(request),
        Webhook::MigrationValidateCreate => migration::validate_create(request, ctx, facts),
        Webhook::MigrationValidateUpdate => migration::validate_update(request),
        Webhook::InstancetypeValidate | Webhook::ClusterInstancetypeValidate => {
            instancetype::validate_instancetype(request)
        }
        Webhook::PreferenceValidate | Webhook::ClusterPreferenceValidate => {
            instancetype::validate_preference(request)
        }
        Webhook::PodEviction => eviction::admit(request, facts),
        Webhook::StatusValidate => status::validate(request, ctx, facts),
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_webhook_has_one_path_and_name() {
        let paths: BTreeSet<_> = Webhook::ALL.iter().map(|w| w.registration().path).collect();
        let names: BTreeSet<_> = Webhook::ALL.iter().map(|w| w.registration().name).collect();
        assert_eq!(paths.len(), Webhook::ALL.len());
        assert_eq!(names.len(), Webhook::ALL.len());
        for w in Webhook::ALL {
            assert_eq!(Webhook::from_path(w.registration().path), Some(w));
        }
        assert_eq!(Webhook::from_path("/healthz"), None);
        assert_eq!(
            Webhook::VmiValidateCreate.label(),
            "virtualmachineinstances-validate-create"
        );
    }
}
