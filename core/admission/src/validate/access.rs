//! Access credentials, the service account, encrypted guests (launch security) and vGPU displays.

use super::causes::Causes;
use crate::api::VirtualMachineInstanceSpec;

const CREDS: &str = "spec.accessCredentials";
const LAUNCH: &str = "spec.domain.launchSecurity";

pub(super) fn check(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    check_access_credentials(spec, causes);
    check_service_account(spec, causes);
    check_launch_security(spec, causes);
    check_ramfb_displays(spec, causes);
}

/// Each credential is one SSH key or one password, from one secret, propagated one way; the
/// cloud-init ways need the matching cloud-init volume.
fn check_access_credentials(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let volumes = spec.volumes.as_deref().unwrap_or(&[]);
    let no_cloud = volumes.iter().any(|v| v.cloud_init_no_cloud.is_some());
    let config_drive = volumes.iter().any(|v| v.cloud_init_config_drive.is_some());
    for (idx, cred) in spec.access_credentials.iter().flatten().enumerate() {
        let path = format!("{CREDS}[{idx}]");
        let kinds =
            usize::from(cred.ssh_public_key.is_some()) + usize::from(cred.user_password.is_some());
        if let Some(ssh) = &cred.ssh_public_key {
            let method = &ssh.propagation_method;
            if method.no_cloud.is_some() && !no_cloud {
                causes.invalid(
                    format!("{path}.sshPublicKey.propagationMethod"),
                    format!("{path} requires a noCloud volume to exist when the noCloud propagationMethod is in use."),
                );
            }
            if method.config_drive.is_some() && !config_drive {
                causes.invalid(
                    format!("{path}.sshPublicKey.propagationMethod"),
                    format!("{path} requires a configDrive volume to exist when the configDrive propagationMethod is in use."),
                );
            }
            if let Some(qga) = &method.qemu_guest_agent
                && qga.users.as_ref().is_none_or(|u| u.is_empty())
            {
                causes.invalid(
                    format!("{path}.sshPublicKey.propagationMethod.qemuGuestAgent.users"),
                    format!("{path} requires at least one user to be present in the users list"),
                );
            }
            if ssh.source.secret.is_none() {
                causes.invalid(
                    format!("{path}.sshPublicKey.source"),
                    format!("{path} must have exactly one source set"),
                );
            }
            let methods = [
                method.no_cloud.is_some(),
                method.config_drive.is_some(),
                method.qemu_guest_agent.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if methods != 1 {
                causes.invalid(
                    format!("{path}.sshPublicKey.propagationMethod"),
                    format!("{path} must have exactly one propagationMethod set"),
                );
            }
        }
        if let Some(pw) = &cred.user_password {
            if pw.source.secret.is_none() {
                causes.invalid(
                    format!("{path}.userPassword.source"),
                    format!("{path} must have exactly one source set"),
                );
            }
            if pw.propagation_method.qemu_guest_agent.is_none() {
                causes.invalid(
                    format!("{path}.userPassword.propagationMethod"),
                    format!("{path} must have exactly one propagationMethod set"),
                );
            }
        }
        if kinds != 1 {
            causes.invalid(
                path.clone(),
                format!("{path} must have exactly one access credential type set"),
            );
        }
    }
}

/// The pod's service account must be a valid name and agree with a serviceAccount volume.
fn check_service_account(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let Some(name) = spec
        .service_account_name
        .as_deref()
        .filter(|n| !n.is_empty())
    else {
        return;
    };
    const FIELD: &str = "spec.serviceAccountName";
    if !is_dns1123_subdomain(name) {
        causes.invalid(
            FIELD,
            format!(
                "{FIELD} is not a valid service account name: {name:?} is not a DNS-1123 subdomain"
            ),
        );
    }
    let other = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.service_account.as_ref())
        .map(|s| s.service_account_name.as_deref().unwrap_or(""))
        .find(|s| *s != name);
    if let Some(other) = other {
        causes.invalid(
            FIELD,
            format!("spec.serviceAccountName {name:?} and serviceAccount volume {other:?} must reference the same service account"),
        );
    }
}

/// Lower-case alphanumerics, '-' and '.', alphanumeric at both ends, at most 253 characters.
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Encrypted guests (SEV, SNP, TDX) on amd64: one technology, UEFI firmware that fits it, no
/// SMM with TDX, no bootable NICs.
fn check_launch_security(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let Some(ls) = &spec.domain.launch_security else {
        return;
    };
    let arch = spec.architecture.as_deref().unwrap_or("amd64");
    if arch == "s390x" {
        return;
    }
    if arch != "amd64" {
        causes.invalid(
            "spec.architecture",
            format!("No launchSecurity support for architecture: {arch}"),
        );
        return;
    }
    let kinds: Vec<&str> = [
        (ls.sev.is_some(), "SEV"),
        (ls.snp.is_some(), "SNP"),
        (ls.tdx.is_some(), "TDX"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect();
    if kinds.len() != 1 {
        causes.push(
            super::CauseKind::Forbidden,
            LAUNCH,
            "One and only one launchSecurity type can be set",
        );
        return;
    }
    let kind = kinds[0];
    let features = spec.domain.features.as_ref();
    if kind == "TDX"
        && features
            .and_then(|f| f.smm.as_ref())
            .is_some_and(|s| s.enabled != Some(false))
    {
        causes.invalid(LAUNCH, "TDX does not work along with SMM");
    }
    match spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.bootloader.as_ref())
        .and_then(|b| b.efi.as_ref())
    {
        None => causes.invalid(LAUNCH, format!("{kind} requires OVMF (UEFI)")),
        Some(efi) => {
            if kind != "TDX" && efi.secure_boot != Some(false) {
                causes.invalid(
                    LAUNCH,
                    format!("{kind} does not work along with SecureBoot"),
                );
            }
            if kind != "SEV" && efi.persistent == Some(true) {
                causes.invalid(
                    LAUNCH,
                    format!("{kind} does not work along with Persistent EFI variables"),
                );
            }
        }
    }
    if ls.sev.as_ref().is_some_and(|s| s.attestation.is_some())
        && spec.start_strategy.as_deref() != Some("Paused")
    {
        causes.invalid(
            LAUNCH,
            "SEV attestation requires VMI StartStrategy 'Paused'",
        );
    }
    for iface in spec.domain.devices.interfaces.iter().flatten() {
        if iface.boot_order.is_some() {
            causes.invalid(
                LAUNCH,
                format!("{kind} does not work with bootable NICs: {}", iface.name),
            );
        }
    }
}

/// Only one vGPU display may use ramfb.
fn check_ramfb_displays(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let ramfb = spec
        .domain
        .devices
        .gpus
        .iter()
        .flatten()
        .filter_map(|g| g.virtual_gpu_options.as_ref()?.display.as_ref())
        .filter(|d| {
            d.enabled != Some(false) && d.ram_fb.as_ref().is_none_or(|r| r.enabled == Some(true))
        })
        .count();
    if ramfb > 1 {
        causes.invalid(
            "spec.GPUs",
            "configuring multiple displays with ramfb is not valid",
        );
    }
}
