//! The one way every subcommand that works on a VMI (`defaults`, `convert`, `overhead`, `pod`)
//! turns its input into the VMI the cluster would store, so that all of them accept and refuse
//! the same inputs for the same reasons.
//!
//! A VirtualMachine is first checked as KubeVirt v1.9.0's VM validating webhook checks it
//! ([`validate_vm`]: run strategy — `spec.running` alone is accepted, `running` together with
//! `runStrategy` or neither is refused — DataVolume templates, template metadata), then turned
//! into the VMI its controller would create ([`vmi_from_vm`]). The VMI (given or derived) is then
//! admitted like any VMI ([`admit`]: namespace, mutating webhook defaults, validating webhook).

use std::path::Path;

use kvrs_core::admission::admit;
use kvrs_core::template::vmi_from_vm;
use kvrs_core::validate::validate_vm;
use kvrs_core::{ClusterConfig, VirtualMachine, VirtualMachineInstance};

use crate::input::{CliError, Workload, read_workloads};

/// Admits one workload read from `origin` (see the module documentation). Every error starts
/// with `origin`.
pub fn admit_workload(
    workload: Workload,
    origin: &str,
    config: &ClusterConfig,
) -> Result<VirtualMachineInstance, CliError> {
    let vmi = match workload {
        Workload::Vmi(vmi) => *vmi,
        Workload::Vm(vm) => {
            refuse_instancetypes(&vm, origin)?;
            validate_vm(&vm, config).map_err(|e| {
                CliError::Rejected(format!("{origin}: rejected by validating webhook: {e}"))
            })?;
            vmi_from_vm(&vm).map_err(|e| CliError::Input(format!("{origin}: {e}")))?
        }
    };
    admit(vmi, config).map_err(|e| CliError::Rejected(format!("{origin}: {e}")))
}

/// Refuses a VM that references an instancetype or a preference: virt-api expands them into
/// the VMI, which kvrs does not model yet, and going on without them would give misleading
/// answers (e.g. "no memory requested" for a VM whose memory comes from its instancetype).
fn refuse_instancetypes(vm: &VirtualMachine, origin: &str) -> Result<(), CliError> {
    let describe = |kind: Option<&str>, name: Option<&str>, default_kind: &str| {
        format!(
            "{} {:?}",
            kind.filter(|k| !k.is_empty()).unwrap_or(default_kind),
            name.unwrap_or("")
        )
    };
    let (field, what) = if let Some(it) = &vm.spec.instancetype {
        let what = describe(
            it.kind.as_deref(),
            it.name.as_deref(),
            "VirtualMachineClusterInstancetype",
        );
        ("spec.instancetype", what)
    } else if let Some(p) = &vm.spec.preference {
        let what = describe(
            p.kind.as_deref(),
            p.name.as_deref(),
            "VirtualMachineClusterPreference",
        );
        ("spec.preference", what)
    } else {
        return Ok(());
    };
    Err(CliError::Rejected(format!(
        "{origin}: {field}: instancetypes are not supported yet: kvrs does not expand {what} into \
         the VMI; inline its CPU, memory and devices in spec.template.spec instead"
    )))
}

/// Reads every VMI or VM in `file` (YAML documents, `kind: List` items) and admits each; the
/// first failure is the error (nothing is printed for a file with a bad object). Each VMI comes
/// with the name its errors use.
pub fn admitted_vmis(
    file: &Path,
    config: &ClusterConfig,
) -> Result<Vec<(String, VirtualMachineInstance)>, CliError> {
    read_workloads(file)?
        .into_iter()
        .map(|(origin, workload)| {
            let vmi = admit_workload(workload, &origin, config)?;
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
