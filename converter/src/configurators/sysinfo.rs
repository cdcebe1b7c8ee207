//! `<sysinfo type="smbios">`: firmware UUID and serial, cluster SMBIOS, chassis.

use super::Configurator;
use super::util::intern;
use crate::context::SmBios;
use crate::domain::{Domain, Entry, SysInfo as DomSysInfo};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes SMBIOS tables.
pub struct SysInfo<'a> {
    /// Cluster SMBIOS values.
    pub smbios: Option<&'a SmBios>,
}

impl Configurator for SysInfo<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let mut s = DomSysInfo {
            kind: "smbios".into(),
            ..DomSysInfo::default()
        };
        let system = &mut s.system.entries;
        // uuid, serial and the five cluster values: one allocation.
        system.reserve_exact(7);
        if let Some(fw) = &vmi.spec.domain.firmware {
            system.push(Entry::new("uuid", fw.uuid.clone().unwrap_or_default()));
            if let Some(serial) = fw.serial.as_ref().filter(|x| !x.is_empty()) {
                system.push(Entry::new("serial", serial.clone()));
            }
        }
        if let Some(b) = self.smbios {
            system.push(Entry::new("manufacturer", intern(&b.manufacturer)));
            system.push(Entry::new("family", intern(&b.family)));
            system.push(Entry::new("product", intern(&b.product)));
            system.push(Entry::new("sku", intern(&b.sku)));
            system.push(Entry::new("version", intern(&b.version)));
        }
        if let Some(c) = &vmi.spec.domain.chassis {
            let v = |x: &Option<String>| x.clone().unwrap_or_default();
            s.chassis.entries = vec![
                Entry::new("manufacturer", v(&c.manufacturer)),
                Entry::new("version", v(&c.version)),
                Entry::new("serial", v(&c.serial)),
                Entry::new("asset", v(&c.asset)),
                Entry::new("sku", v(&c.sku)),
            ];
        }
        domain.sysinfo = Some(s);
        Ok(())
    }
}
