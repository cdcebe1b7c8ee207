//! The one way every subcommand that works on a VMI (`defaults`, `convert`, `overhead`, `pod`)
//! turns its input into the VMI the cluster would store, so that all of them accept and refuse
//! the same inputs for the same reasons.
//!
//! A VirtualMachine is first checked as KubeVirt v1.9.0's VM validating webhook checks it
//! ([`validate_vm`]: run strategy — `spec.running` alone is accepted, `running` together with
//! `runStrategy` or neither is refused — DataVolume templates, template metadata), then turned
//! into the VMI its controller would create ([`vmi_from_vm`]). The VMI (given or derived) is then
//! admitted like any VMI ([`admit`]: namespace, mutating webhook defaults, validating webhook).
//!
//! A VM that references an instancetype or a preference goes through KubeVirt's instancetype
//! steps ([`expand_vm`]): its references are found among the `--instancetype` / `--preference`
//! objects; the VM mutating webhook writes the preferred architecture and machine type into it;
//! the VM validating webhook applies both to a copy of the template (refusing a spread topology
//! that does not divide the vCPUs and any field the instancetype owns, with KubeVirt's
//! messages), defaults that copy and checks the preference's requirements, and validates the
//! VM as expanded; the VM controller then builds the VMI from the VM, applies the preference's
//! auto-attach values, adds its input device and pod network, annotates the VMI with the
//! instancetype and preference names and applies both at `spec`.

use std::path::Path;

use kvrs_core::admission::admit;
use kvrs_core::defaults::apply_defaults;
use kvrs_core::template::{add_controller_devices, vmi_from_vm};
use kvrs_core::validate::validate_vm;
use kvrs_core::{ClusterConfig, VirtualMachine, VirtualMachineInstance};
use kvrs_instancetype::vm::{controller_apply, mutate_vm, requirements_refusal, webhook_apply};
use kvrs_instancetype::{
    FindError, InstancetypeSpec, PreferenceSpec, apply_autoattach_preferences, check_requirements,
};

use crate::cmd::instancetypes::Instancetypes;
use crate::input::{CliError, Workload, read_workloads};

/// Admits one workload read from `origin` (see the module documentation). Every error starts
/// with `origin`. `refs` are the `--instancetype` / `--preference` objects; `None` where the
/// subcommand has no such flags (a VM with references is then refused).
pub fn admit_workload(
    workload: Workload,
    origin: &str,
    config: &ClusterConfig,
    refs: Option<&Instancetypes>,
) -> Result<VirtualMachineInstance, CliError> {
    let vmi = match workload {
        Workload::Vmi(vmi) => *vmi,
        Workload::Vm(vm) if vm.spec.instancetype.is_none() && vm.spec.preference.is_none() => {
            validate_vm(&vm, config).map_err(|e| {
                CliError::Rejected(format!("{origin}: rejected by validating webhook: {e}"))
            })?;
            vmi_from_vm(&vm).map_err(|e| CliError::Input(format!("{origin}: {e}")))?
        }
        Workload::Vm(vm) => match refs {
            Some(refs) => expand_vm(*vm, origin, config, refs)?,
            None => return Err(refuse_instancetypes(&vm, origin)),
        },
    };
    admit(vmi, config).map_err(|e| CliError::Rejected(format!("{origin}: {e}")))
}

/// The VMI KubeVirt's webhooks and VM controller make of a VM with an instancetype or a
/// preference (see the module documentation).
fn expand_vm(
    mut vm: VirtualMachine,
    origin: &str,
    config: &ClusterConfig,
    refs: &Instancetypes,
) -> Result<VirtualMachineInstance, CliError> {
    let (instancetype, preference) = find_references(&vm, origin, refs)?;
    let (it, pref) = (instancetype.as_ref(), preference.as_ref());
    let rejected = |e: &dyn std::fmt::Display| {
        CliError::Rejected(format!("{origin}: rejected by validating webhook: {e}"))
    };

    // The VM mutating webhook.
    mutate_vm(&mut vm, pref);

    // The VM validating webhook, on an expanded copy.
    let mut expanded = vm.clone();
    if let Some(applied) = webhook_apply(&vm, it, pref).map_err(|e| rejected(&e))? {
        expanded.spec.template.spec = Some(applied.spec);
        expanded.spec.template.metadata = applied.metadata;
    }
    let mut defaulted = VirtualMachineInstance {
        spec: expanded.spec.template.spec.clone().unwrap_or_default(),
        ..Default::default()
    };
    apply_defaults(&mut defaulted, config);
    check_requirements(it, pref, &defaulted.spec)
        .map_err(|e| rejected(&requirements_refusal(&e)))?;
    validate_vm(&expanded, config).map_err(|e| rejected(&e))?;

    // The VM controller.
    let input = |e: &dyn std::fmt::Display| CliError::Input(format!("{origin}: {e}"));
    let mut vmi = vmi_from_vm(&vm).map_err(|e| input(&e))?;
    if vm.spec.preference.is_some() {
        apply_autoattach_preferences(pref, &mut vmi.spec);
    }
    add_controller_devices(&mut vmi, config).map_err(|e| input(&e))?;
    controller_apply(&vm, it, pref, &mut vmi.spec, &mut vmi.metadata)
        .map_err(|e| CliError::Rejected(format!("{origin}: the VM controller refuses it: {e}")))?;
    Ok(vmi)
}

/// The instancetype and preference specs the VM references, or an error naming the VM field.
fn find_references(
    vm: &VirtualMachine,
    origin: &str,
    refs: &Instancetypes,
) -> Result<(Option<InstancetypeSpec>, Option<PreferenceSpec>), CliError> {
    let missing_flag = |field: &str, flag: &str, what: String| {
        CliError::Input(format!(
            "{origin}: {field}: references {what}; pass it with {flag} FILE|DIR (a file with the \
             object, or a directory of such objects)"
        ))
    };
    fn found<T>(r: Result<T, FindError>, origin: &str, flag: &str) -> Result<T, CliError> {
        r.map_err(|e| CliError::Input(format!("{origin}: {e} (in {flag})")))
    }
    let instancetype = match (&vm.spec.instancetype, &refs.instancetypes) {
        (None, _) => None,
        (Some(_), Some(catalog)) => found(catalog.find_instancetype(vm), origin, "--instancetype")?,
        (Some(m), None) => {
            return Err(missing_flag(
                "spec.instancetype",
                "--instancetype",
                describe(
                    m.kind.as_deref(),
                    m.name.as_deref(),
                    "VirtualMachineClusterInstancetype",
                    "VirtualMachineInstancetype",
                    kvrs_instancetype::instancetype_is_namespaced,
                ),
            ));
        }
    };
    let preference = match (&vm.spec.preference, &refs.preferences) {
        (None, _) => None,
        (Some(_), Some(catalog)) => found(catalog.find_preference(vm), origin, "--preference")?,
        (Some(m), None) => {
            return Err(missing_flag(
                "spec.preference",
                "--preference",
                describe(
                    m.kind.as_deref(),
                    m.name.as_deref(),
                    "VirtualMachineClusterPreference",
                    "VirtualMachinePreference",
                    kvrs_instancetype::preference_is_namespaced,
                ),
            ));
        }
    };
    Ok((instancetype, preference))
}

/// `Kind "name"` of a VM's reference, with the kind KubeVirt resolves it to.
fn describe(
    kind: Option<&str>,
    name: Option<&str>,
    cluster_kind: &str,
    namespaced_kind: &str,
    namespaced: fn(Option<&str>) -> Option<bool>,
) -> String {
    let kind = match namespaced(kind) {
        Some(true) => namespaced_kind.to_string(),
        Some(false) => cluster_kind.to_string(),
        None => kind.unwrap_or("").to_string(),
    };
    format!("{kind} {:?}", name.unwrap_or(""))
}

/// The refusal of a VM with references where the subcommand cannot take the objects
/// (`kvrs run`: its embedded cluster serves no instancetypes yet).
fn refuse_instancetypes(vm: &VirtualMachine, origin: &str) -> CliError {
    let (field, what) = if let Some(it) = &vm.spec.instancetype {
        let what = describe(
            it.kind.as_deref(),
            it.name.as_deref(),
            "VirtualMachineClusterInstancetype",
            "VirtualMachineInstancetype",
            kvrs_instancetype::instancetype_is_namespaced,
        );
        ("spec.instancetype", what)
    } else {
        let p = vm.spec.preference.as_ref();
        let what = describe(
            p.and_then(|p| p.kind.as_deref()),
            p.and_then(|p| p.name.as_deref()),
            "VirtualMachineClusterPreference",
            "VirtualMachinePreference",
            kvrs_instancetype::preference_is_namespaced,
        );
        ("spec.preference", what)
    };
    CliError::Rejected(format!(
        "{origin}: {field}: references {what}, which this subcommand cannot expand; expand it \
         with `kvrs defaults FILE --instancetype FILE|DIR --preference FILE|DIR` and use the VMI"
    ))
}

/// Reads every VMI or VM in `file` (YAML documents, `kind: List` items) and admits each; the
/// first failure is the error (nothing is printed for a file with a bad object). Each VMI comes
/// with the name its errors use.
pub fn admitted_vmis(
    file: &Path,
    config: &ClusterConfig,
    refs: &Instancetypes,
) -> Result<Vec<(String, VirtualMachineInstance)>, CliError> {
    read_workloads(file)?
        .into_iter()
        .map(|(origin, workload)| {
            let vmi = admit_workload(workload, &origin, config, Some(refs))?;
            Ok((origin, vmi))
        })
        .collect()
}

/// Prints one output per object: as it is for one, as YAML documents (`---`) for several.
pub fn print_outputs(outputs: &[String]) {
    if let [one] = outputs {
        print!("{one}");
        return;
    }
    for out in outputs {
        print!("---\n{out}");
        if !out.ends_with('\n') {
            println!();
        }
    }
}
