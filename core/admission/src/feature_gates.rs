//! The feature gates KubeVirt v1.9.0 knows, by their state there. A name not in this list
//! changes nothing in KubeVirt (it ignores unknown gates silently); kvrs refuses it instead, so a
//! typo in `--feature-gates` is an error naming the gate rather than a quietly different result.

use std::collections::BTreeSet;

/// What KubeVirt v1.9.0 says about a gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateState {
    /// Alpha: off unless enabled.
    Alpha,
    /// Beta: off unless enabled.
    Beta,
    /// GA: always on; naming it is accepted and changes nothing.
    Ga,
    /// Deprecated: accepted, on its way out.
    Deprecated,
    /// Discontinued: accepted by name, the feature is gone.
    Discontinued,
}

/// Every gate KubeVirt v1.9.0 registers (`pkg/virt-config/featuregate`), with its state.
pub const KNOWN_GATES: &[(&str, GateState)] = {
    use GateState::*;
    &[
        ("AlignCPUs", Alpha),
        ("AutoResourceLimitsGate", Ga),
        ("BochsDisplayForEFIGuests", Ga),
        ("CPUManager", Alpha),
        ("CPUNodeDiscovery", Ga),
        ("ClusterProfiler", Ga),
        ("CommonInstancetypesDeploymentGate", Ga),
        ("ConfigurableHypervisor", Alpha),
        ("ContainerPathVolumes", Alpha),
        ("CrossArchitectureVirtualization", Alpha),
        ("DecentralizedLiveMigration", Alpha),
        ("DeclarativeHotplugVolumes", Beta),
        ("DisableCustomSELinuxPolicy", Ga),
        ("DisableMDEVConfiguration", Deprecated),
        ("DockerSELinuxMCSWorkaround", Deprecated),
        ("DownwardMetrics", Alpha),
        ("DynamicPodInterfaceNaming", Ga),
        ("EnableVirtioFsConfigVolumes", Ga),
        ("EnableVirtioFsStorageVolumes", Alpha),
        ("ExpandDisks", Ga),
        ("ExperimentalIgnitionSupport", Alpha),
        ("ExperimentalVirtiofsSupport", Discontinued),
        ("ExternalNetResourceInjection", Beta),
        ("FirmwareAutoSelection", Alpha),
        ("GPU", Ga),
        ("GPUsWithDRA", Beta),
        ("GraceIOVirtualization", Alpha),
        ("HostDevices", Alpha),
        ("HostDevicesWithDRA", Beta),
        ("HostDisk", Alpha),
        ("HotplugNICs", Ga),
        ("HotplugVolumes", Deprecated),
        ("HypervStrictCheck", Alpha),
        ("IOMMUFD", Alpha),
        ("ImageVolume", Beta),
        ("IncrementalBackup", Alpha),
        ("InstancetypeReferencePolicy", Ga),
        ("KubevirtSeccompProfile", Beta),
        ("LibvirtHooksServerAndClient", Beta),
        ("LiveMigration", Ga),
        ("LiveUpdateNADRef", Ga),
        ("Macvtap", Discontinued),
        ("MigrationPriorityQueue", Ga),
        ("MigrationStallDetection", Alpha),
        ("MultiArchitecture", Deprecated),
        ("NUMA", Ga),
        ("NetworkBindingPlugins", Ga),
        ("NetworkDevicesWithDRA", Alpha),
        ("NodeRestriction", Beta),
        ("NonRoot", Ga),
        ("OCIExport", Alpha),
        ("ObjectGraph", Alpha),
        ("OptOutRoleAggregation", Beta),
        ("PCINUMAAwareTopology", Alpha),
        ("PSA", Ga),
        ("PanicDevices", Ga),
        ("Passt", Discontinued),
        ("PasstBinding", Beta),
        ("PasstIPStackMigration", Discontinued),
        ("PersistentReservation", Ga),
        ("Plugins", Alpha),
        ("PodSecondaryInterfaceNamingUpgrade", Beta),
        ("PortRangesSpec", Alpha),
        ("RebootPolicy", Beta),
        ("ReservedOverheadMemlock", Alpha),
        ("Root", Alpha),
        ("SRIOVLiveMigration", Ga),
        ("SecureExecution", Ga),
        ("Sidecar", Alpha),
        ("Snapshot", Beta),
        ("Template", Beta),
        ("UtilityVolumes", Alpha),
        ("VGPULiveMigration", Alpha),
        ("VMExport", Ga),
        ("VMLiveUpdateFeatures", Ga),
        ("VMPersistentState", Ga),
        ("VMStatsCollector", Alpha),
        ("VSOCK", Alpha),
        ("VideoConfig", Ga),
        ("VmiMemoryOverheadReport", Beta),
        ("VolumeMigration", Ga),
        ("VolumesUpdateStrategy", Ga),
        ("WorkloadEncryptionSEV", Beta),
        ("WorkloadEncryptionTDX", Alpha),
    ]
};

/// KubeVirt v1.9.0's state of `name`, if it knows the gate.
pub fn gate_state(name: &str) -> Option<GateState> {
    KNOWN_GATES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// A feature gate KubeVirt v1.9.0 does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown feature gate {name:?}{hint} (KubeVirt v1.9.0's gates: {known})")]
pub struct UnknownFeatureGate {
    /// The name given.
    pub name: String,
    /// `, did you mean "X"?` when a known gate differs only in case.
    hint: String,
    known: String,
}

impl UnknownFeatureGate {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        "unknown_feature_gate"
    }
}

/// Parses a comma-separated gate list (blanks ignored), refusing names KubeVirt v1.9.0 does not
/// register.
pub fn parse_feature_gates(list: &str) -> Result<BTreeSet<String>, UnknownFeatureGate> {
    let mut out = BTreeSet::new();
    for name in list.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        if gate_state(name).is_none() {
            let hint = KNOWN_GATES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(n, _)| format!(", did you mean {n:?}?"))
                .unwrap_or_default();
            let known = KNOWN_GATES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ");
            return Err(UnknownFeatureGate {
                name: name.to_string(),
                hint,
                known,
            });
        }
        out.insert(name.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_gates_parse_and_unknown_ones_are_named() {
        let gates = parse_feature_gates(" Sidecar, HostDisk ,").unwrap();
        assert_eq!(
            gates.into_iter().collect::<Vec<_>>(),
            ["HostDisk", "Sidecar"]
        );
        let err = parse_feature_gates("Sidecar,hostdisk").unwrap_err();
        assert_eq!(err.name, "hostdisk");
        assert!(
            err.to_string().contains("did you mean \"HostDisk\"?"),
            "{err}"
        );
        assert!(parse_feature_gates("NoSuchGate").is_err());
        assert_eq!(gate_state("LiveMigration"), Some(GateState::Ga));
    }

    #[test]
    fn the_list_is_sorted_and_has_no_duplicates() {
        let names: Vec<&str> = KNOWN_GATES.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
    }
}
