//! Target device names: `vd*` for virtio, `sd*` for SATA/SCSI/USB, keeping names already
//! recorded in the VMI's volume status.

use kvrs_api::api::{Disk, VolumeStatus};

/// `prefix` + a base-26 index (`a`..`z`, `aa`..).
pub fn device_name(prefix: &str, index: usize) -> String {
    let mut s = String::with_capacity(prefix.len() + 3);
    s.push_str(prefix);
    push_letters(&mut s, index);
    s
}

fn push_letters(s: &mut String, mut index: usize) {
    let mut letters = [0u8; 8];
    let mut n = 0;
    loop {
        letters[n] = b'a' + u8::try_from(index % 26).unwrap_or(0);
        n += 1;
        if index < 26 || n == letters.len() {
            break;
        }
        index = index / 26 - 1;
    }
    s.extend(letters[..n].iter().rev().map(|&b| b as char));
}

/// The index a name's letters stand for, if `name` is `prefix` + letters.
fn index_of(prefix: &str, name: &str) -> Option<usize> {
    let letters = name.strip_prefix(prefix)?;
    if letters.is_empty() || !letters.bytes().all(|b| b.is_ascii_lowercase()) || letters.len() > 3 {
        return None;
    }
    let mut idx = 0usize;
    for (i, b) in letters.bytes().enumerate() {
        let v = (b - b'a') as usize;
        idx = if i == 0 { v } else { (idx + 1) * 26 + v };
    }
    Some(idx)
}

/// Device prefix of a bus.
pub fn prefix(bus: &str) -> &'static str {
    match bus {
        "virtio" => "vd",
        "sata" | "scsi" | "usb" => "sd",
        _ => "",
    }
}

/// Allocates target names per prefix (a handful of disks: linear scans beat hashing).
pub struct Namer<'a> {
    /// (prefix, disk name, target) already assigned.
    assigned: Vec<(&'static str, &'a str, String)>,
}

impl<'a> Namer<'a> {
    /// Seeds the namer with targets from the volume status.
    pub fn new(statuses: &'a [VolumeStatus], disks: &'a [Disk]) -> Namer<'a> {
        let mut assigned = Vec::with_capacity(disks.len());
        if !statuses.is_empty() {
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
                if let Some(st) = statuses
                    .iter()
                    .find(|s| s.name == d.name && !s.target.is_empty())
                {
                    assigned.push((
                        prefix(bus.unwrap_or("")),
                        d.name.as_str(),
                        st.target.clone(),
                    ));
                }
            }
        }
        Namer { assigned }
    }

    /// The target of `disk` on `bus` and its index.
    pub fn name(&mut self, disk: &'a str, bus: &str) -> (String, usize) {
        let pfx = prefix(bus);
        if let Some((_, _, existing)) = self
            .assigned
            .iter()
            .find(|(p, d, _)| *p == pfx && *d == disk)
        {
            let idx = index_of(pfx, existing).unwrap_or(0);
            return (existing.clone(), idx);
        }
        let used = |i: usize| {
            self.assigned
                .iter()
                .any(|(p, _, t)| *p == pfx && index_of(pfx, t) == Some(i))
        };
        let Some(i) = (0..26 * 26 * 26).find(|&i| !used(i)) else {
            return (String::new(), 0);
        };
        let n = device_name(pfx, i);
        self.assigned.push((pfx, disk, n.clone()));
        (n, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_indices_agree() {
        for i in [0usize, 1, 25, 26, 27, 51, 52, 701, 702, 17575] {
            let n = device_name("vd", i);
            assert_eq!(index_of("vd", &n), Some(i), "{n}");
        }
        assert_eq!(device_name("sd", 0), "sda");
        assert_eq!(device_name("sd", 26), "sdaa");
    }
}
