//! `<launchSecurity>`: SEV, SEV-SNP or TDX on amd64 (nothing elsewhere).

use super::{Configurator, util};
use crate::context::Arch;
use crate::domain::{Domain, LaunchSecurity as DomLs, QuoteGenerationService};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

const SEV_POLICY_NO_DEBUG: u64 = 1;
const SEV_POLICY_ENCRYPTED_STATE: u64 = 1 << 2;
const SNP_POLICY_SMT: u64 = 1 << 16;
const SNP_POLICY_RESERVED: u64 = 1 << 17;
const QGS_SOCKET_ANNOTATION: &str = "kubevirt.io/qgs-socket-path";

/// Writes the launch security element.
pub(super) struct LaunchSecurity {
    /// Effective architecture.
    pub arch: Arch,
}

impl Configurator for LaunchSecurity {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let Some(ls) = &vmi.spec.domain.launch_security else {
            return Ok(());
        };
        if self.arch != Arch::Amd64 {
            domain.launch_security = None;
            return Ok(());
        }
        domain.launch_security = if let (None, Some(_)) = (&ls.sev, &ls.snp) {
            Some(DomLs {
                kind: "sev-snp".into(),
                policy: Some(format!("0x{:x}", SNP_POLICY_SMT | SNP_POLICY_RESERVED)),
                ..DomLs::default()
            })
        } else if let Some(sev) = &ls.sev {
            let mut bits = SEV_POLICY_NO_DEBUG;
            if sev.policy.as_ref().and_then(|p| p.encrypted_state) == Some(true) {
                bits |= SEV_POLICY_ENCRYPTED_STATE;
            }
            Some(DomLs {
                kind: "sev".into(),
                policy: Some(format!("0x{bits:x}")),
                dh_cert: sev.dh_cert.clone().filter(|s| !s.is_empty()),
                session: sev.session.clone().filter(|s| !s.is_empty()),
                ..DomLs::default()
            })
        } else if ls.tdx.is_some() {
            let path = util::annotation(vmi, QGS_SOCKET_ANNOTATION).unwrap_or("");
            Some(DomLs {
                kind: "tdx".into(),
                quote_generation_service: Some(QuoteGenerationService {
                    path: (!path.is_empty()).then(|| path.to_string()),
                }),
                ..DomLs::default()
            })
        } else {
            None
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{annotated, element, run, vmi};
    use serde_json::{Value, json};

    fn launch_security_on(arch: Arch, vmi: &VirtualMachineInstance) -> Option<DomLs> {
        run(&LaunchSecurity { arch }, vmi).unwrap().launch_security
    }

    fn with(launch_security: Value) -> VirtualMachineInstance {
        vmi(json!({"domain": {"devices": {}, "launchSecurity": launch_security}}))
    }

    #[test]
    fn nothing_without_launch_security_in_the_vmi() {
        let plain = vmi(json!({"domain": {"devices": {}}}));
        for arch in [Arch::Amd64, Arch::Arm64, Arch::S390x] {
            assert_eq!(launch_security_on(arch, &plain), None);
        }
    }

    #[test]
    fn only_amd64_writes_a_launch_security_element() {
        // s390x Secure Execution needs no element (the IOMMU drivers are the other configurators').
        for arch in [Arch::Arm64, Arch::S390x] {
            assert_eq!(launch_security_on(arch, &with(json!({"sev": {}}))), None);
        }
    }

    #[test]
    fn sev_policy_forbids_debugging_and_adds_encrypted_state_when_asked() {
        let sev = launch_security_on(Arch::Amd64, &with(json!({"sev": {}}))).unwrap();
        assert_eq!(
            (sev.kind.as_str(), sev.policy.as_deref()),
            ("sev", Some("0x1"))
        );
        let es = with(json!({"sev": {"policy": {"encryptedState": true},
            "dhCert": "cert", "session": "blob"}}));
        let d = run(&LaunchSecurity { arch: Arch::Amd64 }, &es).unwrap();
        insta::assert_snapshot!(element(&d, "launchSecurity"), @r#"
        <launchSecurity type="sev">
        	<dhCert>cert</dhCert>
        	<session>blob</session>
        	<policy>0x5</policy>
        </launchSecurity>
        "#);
    }

    #[test]
    fn snp_alone_writes_sev_snp_with_smt_allowed() {
        let snp = launch_security_on(Arch::Amd64, &with(json!({"snp": {}}))).unwrap();
        assert_eq!(
            (snp.kind.as_str(), snp.policy.as_deref()),
            ("sev-snp", Some("0x30000"))
        );
        // With `sev` beside it, SEV wins.
        let both = launch_security_on(Arch::Amd64, &with(json!({"sev": {}, "snp": {}}))).unwrap();
        assert_eq!(both.kind, "sev");
    }

    #[test]
    fn tdx_takes_the_quote_generation_socket_from_the_annotation() {
        let spec = json!({"domain": {"devices": {}, "launchSecurity": {"tdx": {}}}});
        let plain = launch_security_on(Arch::Amd64, &vmi(spec.clone())).unwrap();
        assert_eq!(plain.kind, "tdx");
        assert_eq!(
            plain.quote_generation_service,
            Some(QuoteGenerationService { path: None })
        );
        let socket = annotated(
            json!({QGS_SOCKET_ANNOTATION: "/var/run/tdx-qgs/qgs.socket"}),
            spec,
        );
        let d = run(&LaunchSecurity { arch: Arch::Amd64 }, &socket).unwrap();
        insta::assert_snapshot!(element(&d, "launchSecurity"), @r#"
        <launchSecurity type="tdx">
        	<quoteGenerationService path="/var/run/tdx-qgs/qgs.socket"/>
        </launchSecurity>
        "#);
    }
}
