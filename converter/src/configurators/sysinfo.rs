//! `<sysinfo type="smbios">`: firmware UUID and serial, cluster SMBIOS, chassis.

use super::Configurator;
use super::util::intern;
use crate::context::SmBios;
use crate::domain::{Domain, Entry, SysInfo as DomSysInfo};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes SMBIOS tables.
pub(super) struct SysInfo<'a> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, run, vmi};
    use serde_json::{Value, json};

    fn sysinfo(domain_spec: Value, smbios: Option<&SmBios>) -> Domain {
        let vmi = vmi(json!({"domain": domain_spec}));
        run(&SysInfo { smbios }, &vmi).unwrap()
    }

    /// `name=value` of the system entries.
    fn system(d: &Domain) -> Vec<String> {
        let s = d.sysinfo.as_ref().expect("sysinfo is always written");
        let entries = &s.system.entries;
        entries
            .iter()
            .map(|e| format!("{}={}", e.name, e.value))
            .collect()
    }

    #[test]
    fn the_firmware_uuid_and_serial_then_the_clusters_smbios() {
        let smbios = SmBios::default();
        let d = sysinfo(
            json!({"devices": {}, "firmware": {"uuid": "5d30", "serial": "4242"}}),
            Some(&smbios),
        );
        insta::assert_snapshot!(element(&d, "sysinfo"), @r#"
        <sysinfo type="smbios">
        	<system>
        		<entry name="uuid">5d30</entry>
        		<entry name="serial">4242</entry>
        		<entry name="manufacturer">KubeVirt</entry>
        		<entry name="family">KubeVirt</entry>
        		<entry name="product">None</entry>
        		<entry name="sku"></entry>
        		<entry name="version"></entry>
        	</system>
        	<bios/>
        	<baseBoard/>
        	<chassis/>
        </sysinfo>
        "#);
    }

    #[test]
    fn without_firmware_or_cluster_smbios_the_system_table_is_empty() {
        assert!(system(&sysinfo(json!({"devices": {}}), None)).is_empty());
        // A firmware without a UUID still writes an empty one; an empty serial is left out.
        let d = sysinfo(json!({"devices": {}, "firmware": {"serial": ""}}), None);
        assert_eq!(system(&d), ["uuid="]);
    }

    #[test]
    fn the_chassis_writes_all_five_entries() {
        let d = sysinfo(
            json!({"devices": {}, "chassis": {"manufacturer": "Acme", "asset": "a1"}}),
            None,
        );
        let chassis = &d.sysinfo.unwrap().chassis.entries;
        let entries: Vec<_> = chassis
            .iter()
            .map(|e| format!("{}={}", e.name, e.value))
            .collect();
        assert_eq!(
            entries,
            [
                "manufacturer=Acme",
                "version=",
                "serial=",
                "asset=a1",
                "sku="
            ]
        );
    }
}
