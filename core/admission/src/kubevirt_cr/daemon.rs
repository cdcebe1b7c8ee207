//! What only the daemons read from a KubeVirt CR: settings that change the launcher pod outside
//! its spec's defaulting, or what virt-handler tells the launcher and decides on the node. None of
//! them changes defaulting or validation, so they are kept out of [`ClusterConfig`].
//!
//! Also here: the checks KubeVirt's `validateConfig` makes on fields kvrs does not otherwise
//! model (`imagePullPolicy`, `developerConfiguration.pvcTolerateLessSpaceUpToPercent`), so a
//! configuration KubeVirt refuses is refused here too and the daemons keep the last good one.
//!
//! [`ClusterConfig`]: crate::ClusterConfig

use serde_json::Value;

use super::{Field, KubevirtCrError};

/// The CR annotation that gives EFI guests a VGA display instead of Bochs
/// (`v1.VGADisplayForEFIGuestsX86Annotation`).
pub const VGA_DISPLAY_FOR_EFI_GUESTS_ANNOTATION: &str = "kubevirt.io/vga-display-efi-x86";

/// Settings of a KubeVirt CR only the daemons read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonSettings {
    /// `imagePullPolicy` of the launcher image (`None`: not set, KubeVirt's `IfNotPresent`).
    pub image_pull_policy: Option<String>,
    /// `virtualMachineOptions.disableSerialConsoleLog` is set: launcher pods get no
    /// `guest-console-log` container unless the VMI asks for one, and the launcher is told.
    pub serial_console_log_disabled: bool,
    /// `virtualMachineOptions.disableFreePageReporting` is set (told to the launcher).
    pub free_page_reporting_disabled: bool,
    /// The CR carries [`VGA_DISPLAY_FOR_EFI_GUESTS_ANNOTATION`]: EFI guests get VGA, not Bochs.
    pub vga_display_for_efi_guests: bool,
    /// `evictionStrategy`, the cluster's default for VMIs that set none (`None`: KubeVirt's
    /// `None` strategy).
    pub eviction_strategy: Option<String>,
    /// `supportedGuestAgentVersions`, regular expressions (`None`: KubeVirt's `2.*` to `5.*`).
    pub supported_guest_agent_versions: Option<Vec<String>>,
}

/// Reads the daemon settings of the CR `root` whose `spec.configuration` is `conf`.
pub(super) fn read(root: &Field<'_>, conf: &Field<'_>) -> Result<DaemonSettings, KubevirtCrError> {
    let mut out = DaemonSettings::default();
    let policy = conf.get("imagePullPolicy")?;
    match policy.string()?.as_deref() {
        None | Some("") => {}
        Some(p @ ("Always" | "Never" | "IfNotPresent")) => out.image_pull_policy = Some(p.into()),
        Some(other) => {
            return Err(policy.invalid(format!(
                "{other:?} is not an image pull policy (Always, Never, IfNotPresent)"
            )));
        }
    }
    let options = conf.get("virtualMachineOptions")?;
    out.serial_console_log_disabled = present(&options.get("disableSerialConsoleLog")?)?;
    out.free_page_reporting_disabled = present(&options.get("disableFreePageReporting")?)?;
    out.vga_display_for_efi_guests = root
        .get("metadata")?
        .get("annotations")?
        .get(VGA_DISPLAY_FOR_EFI_GUESTS_ANNOTATION)?
        .value
        .is_some();
    out.eviction_strategy = conf
        .get("evictionStrategy")?
        .string()?
        .filter(|s| !s.is_empty());
    out.supported_guest_agent_versions =
        super::string_list(&conf.get("supportedGuestAgentVersions")?)?.filter(|l| !l.is_empty());
    let toleration = conf
        .get("developerConfiguration")?
        .get("pvcTolerateLessSpaceUpToPercent")?;
    if let Some(t) = toleration.integer()?
        && !(0..=100).contains(&t)
    {
        return Err(toleration.invalid(format!("{t} is not a percentage (0 to 100)")));
    }
    Ok(out)
}

/// Whether an option object (`disableSerialConsoleLog: {}`) is set; KubeVirt only asks whether
/// its pointer is non-nil.
fn present(field: &Field<'_>) -> Result<bool, KubevirtCrError> {
    match field.value {
        None => Ok(false),
        Some(Value::Object(_)) => Ok(true),
        Some(_) => Err(field.wrong("an object")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::read_kubevirt_cr;
    use super::*;

    fn settings(doc: Value) -> Result<DaemonSettings, String> {
        read_kubevirt_cr(&doc)
            .map(|cr| cr.daemon)
            .map_err(|e| e.to_string())
    }

    fn cr(configuration: Value) -> Value {
        json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"configuration": configuration}})
    }

    #[test]
    fn an_empty_configuration_sets_nothing() {
        assert_eq!(settings(cr(json!({}))), Ok(DaemonSettings::default()));
    }

    #[test]
    fn the_daemon_settings_are_read() {
        let mut doc = cr(json!({
            "imagePullPolicy": "Always",
            "virtualMachineOptions": {"disableSerialConsoleLog": {}, "disableFreePageReporting": {}},
            "evictionStrategy": "LiveMigrate",
            "supportedGuestAgentVersions": ["6.*"],
        }));
        doc["metadata"]["annotations"] = json!({VGA_DISPLAY_FOR_EFI_GUESTS_ANNOTATION: ""});
        assert_eq!(
            settings(doc),
            Ok(DaemonSettings {
                image_pull_policy: Some("Always".into()),
                serial_console_log_disabled: true,
                free_page_reporting_disabled: true,
                vga_display_for_efi_guests: true,
                eviction_strategy: Some("LiveMigrate".into()),
                supported_guest_agent_versions: Some(vec!["6.*".into()]),
            })
        );
    }

    #[test]
    fn what_kubevirts_validate_config_refuses_is_refused_with_its_path() {
        let cases = [
            (
                json!({"imagePullPolicy": "Sometimes"}),
                "spec.configuration.imagePullPolicy: \"Sometimes\" is not an image pull policy (Always, Never, IfNotPresent)",
            ),
            (
                json!({"developerConfiguration": {"pvcTolerateLessSpaceUpToPercent": 101}}),
                "spec.configuration.developerConfiguration.pvcTolerateLessSpaceUpToPercent: 101 is not a percentage (0 to 100)",
            ),
            (
                json!({"virtualMachineOptions": {"disableSerialConsoleLog": true}}),
                "spec.configuration.virtualMachineOptions.disableSerialConsoleLog: expected an object",
            ),
        ];
        for (conf, want) in cases {
            assert_eq!(settings(cr(conf)), Err(want.to_string()));
        }
    }
}
