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
pub struct LaunchSecurity {
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
