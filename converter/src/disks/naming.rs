//! Target device names: `vd*` for virtio, `sd*` for SATA/SCSI/USB, keeping names already
//! recorded in the VMI's volume status.

use kvrs_core::api::{Disk, VolumeStatus};
use std::collections::HashMap;

/// `prefix` + a base-26 index (`a`..`z`, `aa`..).
pub fn device_name(prefix: &str, mut index: usize) -> String {
    let mut letters = Vec::with_capacity(3);
    loop {
        letters.push(b'a' + (index % 26) as u8);
        if index < 26 {
            break;
        }
        index = index / 26 - 1;
    }
    let mut s = String::with_capacity(prefix.len() + letters.len());
    s.push_str(prefix);
    s.extend(letters.iter().rev().map(|&b| b as char));
    s
}

/// Device prefix of a bus.
pub fn prefix(bus: &str) -> &'static str {
    match bus {
        "virtio" => "vd",
        "sata" | "scsi" | "usb" => "sd",
        _ => "",
    }
}

#[derive(Default)]
struct PrefixNamer {
    by_disk: HashMap<String, String>,
    used: HashMap<String, String>,
}

/// Allocates target names per prefix.
pub struct Namer {
    prefixes: HashMap<&'static str, PrefixNamer>,
}

impl Namer {
    /// Seeds the namer with targets from the volume status.
    pub fn new(statuses: &[VolumeStatus], disks: &[Disk]) -> Namer {
        let mut prefixes: HashMap<&'static str, PrefixNamer> = HashMap::new();
        for d in disks {
            let bus = if let Some(x) = &d.disk {
                x.bus.as_deref()
            } else if let Some(x) = &d.lun {
                x.bus.as_deref()
            } else if let Some(x) = &d.cdrom {
                x.bus.as_deref()
            } else {
                continue;
            };
            let p = prefixes.entry(prefix(bus.unwrap_or(""))).or_default();
            if let Some(st) = statuses
                .iter()
                .find(|s| s.name == d.name && !s.target.is_empty())
            {
                p.by_disk.insert(d.name.clone(), st.target.clone());
                p.used.insert(st.target.clone(), d.name.clone());
            }
        }
        Namer { prefixes }
    }

    /// The target of `disk` on `bus` and its index.
    pub fn name(&mut self, disk: &str, bus: &str) -> (String, usize) {
        let pfx = prefix(bus);
        let p = self.prefixes.entry(pfx).or_default();
        if let Some(existing) = p.by_disk.get(disk) {
            let idx = (0..26 * 26 * 26)
                .find(|&i| device_name(pfx, i) == *existing)
                .unwrap_or(0);
            return (existing.clone(), idx);
        }
        for i in 0..26 * 26 * 26 {
            let n = device_name(pfx, i);
            if !p.used.contains_key(&n) {
                p.by_disk.insert(disk.to_string(), n.clone());
                p.used.insert(n.clone(), disk.to_string());
                return (n, i);
            }
        }
        (String::new(), 0)
    }
}
