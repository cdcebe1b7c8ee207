//! Target device names: `vd*` for virtio, `sd*` for SATA/SCSI/USB, keeping names already
//! recorded in the VMI's volume status.

use kvrs_api::api::{Disk, VolumeStatus};
use std::collections::{HashMap, HashSet};

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

/// The search for a free index stops below 26^3 (as the converter always has).
const MAX_INDEX: usize = 26 * 26 * 26;

/// The indices taken under one prefix and the lowest one that may still be free.
#[derive(Default)]
struct Taken {
    used: HashSet<usize>,
    /// Every index below it is taken; indices are never released, so it only moves up.
    lowest_free: usize,
}

/// Allocates target names per prefix, each in constant amortized time: a VMI with N disks is
/// named in O(N) (a scan of the names given so far per disk made it O(N^3)).
pub struct Namer<'a> {
    /// (prefix, disk name) -> target, the first one assigned.
    by_disk: HashMap<(&'static str, &'a str), String>,
    /// Indices taken per prefix.
    taken: HashMap<&'static str, Taken>,
    /// Candidate indices examined so far (the tests' measure of the work done).
    #[cfg(test)]
    probes: usize,
}

impl<'a> Namer<'a> {
    /// Seeds the namer with targets from the volume status.
    pub fn new(statuses: &'a [VolumeStatus], disks: &'a [Disk]) -> Namer<'a> {
        let mut namer = Namer {
            by_disk: HashMap::new(),
            taken: HashMap::new(),
            #[cfg(test)]
            probes: 0,
        };
        if statuses.is_empty() {
            return namer;
        }
        // The first status with a target, per volume name.
        let mut targets: HashMap<&str, &str> = HashMap::with_capacity(statuses.len());
        for s in statuses.iter().filter(|s| !s.target.is_empty()) {
            targets.entry(s.name.as_str()).or_insert(s.target.as_str());
        }
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
            if let Some(target) = targets.get(d.name.as_str()) {
                namer.assign(prefix(bus.unwrap_or("")), &d.name, target);
            }
        }
        namer
    }

    fn assign(&mut self, pfx: &'static str, disk: &'a str, target: &str) {
        self.by_disk
            .entry((pfx, disk))
            .or_insert_with(|| target.to_string());
        if let Some(i) = index_of(pfx, target) {
            self.taken.entry(pfx).or_default().used.insert(i);
        }
    }

    /// The target of `disk` on `bus` and its index.
    pub fn name(&mut self, disk: &'a str, bus: &str) -> (String, usize) {
        let pfx = prefix(bus);
        if let Some(existing) = self.by_disk.get(&(pfx, disk)) {
            let idx = index_of(pfx, existing).unwrap_or(0);
            return (existing.clone(), idx);
        }
        let taken = self.taken.entry(pfx).or_default();
        let mut i = taken.lowest_free;
        while i < MAX_INDEX && taken.used.contains(&i) {
            i += 1;
        }
        #[cfg(test)]
        {
            self.probes += i + 1 - taken.lowest_free;
        }
        taken.lowest_free = i;
        if i >= MAX_INDEX {
            return (String::new(), 0);
        }
        let n = device_name(pfx, i);
        self.assign(pfx, disk, &n);
        (n, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_api::api::DiskTarget;

    #[test]
    fn names_and_indices_agree() {
        for i in [0usize, 1, 25, 26, 27, 51, 52, 701, 702, 17575] {
            let n = device_name("vd", i);
            assert_eq!(index_of("vd", &n), Some(i), "{n}");
        }
        assert_eq!(device_name("sd", 0), "sda");
        assert_eq!(device_name("sd", 26), "sdaa");
    }

    /// The namer before it was indexed (one scan of the names so far per candidate index): the
    /// reference the indexed one must agree with.
    fn reference(statuses: &[VolumeStatus], disks: &[Disk]) -> Vec<(String, usize)> {
        let mut assigned: Vec<(&'static str, &str, String)> = Vec::new();
        for d in disks {
            let Some(bus) = d.disk.as_ref().map(|t| t.bus.as_deref()) else {
                continue;
            };
            if let Some(st) = statuses
                .iter()
                .find(|s| s.name == d.name && !s.target.is_empty())
            {
                assigned.push((prefix(bus.unwrap_or("")), &d.name, st.target.clone()));
            }
        }
        let mut out = Vec::new();
        for d in disks {
            let bus = d.disk.as_ref().and_then(|t| t.bus.as_deref()).unwrap_or("");
            let pfx = prefix(bus);
            if let Some((_, _, t)) = assigned.iter().find(|(p, n, _)| *p == pfx && *n == d.name) {
                out.push((t.clone(), index_of(pfx, t).unwrap_or(0)));
                continue;
            }
            let used = |i: usize| {
                assigned
                    .iter()
                    .any(|(p, _, t)| *p == pfx && index_of(pfx, t) == Some(i))
            };
            match (0..MAX_INDEX).find(|&i| !used(i)) {
                None => out.push((String::new(), 0)),
                Some(i) => {
                    let n = device_name(pfx, i);
                    assigned.push((pfx, &d.name, n.clone()));
                    out.push((n, i));
                }
            }
        }
        out
    }

    fn disk(name: &str, bus: &str) -> Disk {
        Disk {
            name: name.into(),
            disk: Some(DiskTarget {
                bus: Some(bus.into()),
                ..DiskTarget::default()
            }),
            ..Disk::default()
        }
    }

    fn status(name: &str, target: &str) -> VolumeStatus {
        VolumeStatus {
            name: name.into(),
            target: target.into(),
            ..VolumeStatus::default()
        }
    }

    fn indexed(statuses: &[VolumeStatus], disks: &[Disk]) -> (Vec<(String, usize)>, usize) {
        let mut namer = Namer::new(statuses, disks);
        let names = disks
            .iter()
            .map(|d| {
                namer.name(
                    &d.name,
                    d.disk.as_ref().and_then(|t| t.bus.as_deref()).unwrap_or(""),
                )
            })
            .collect();
        (names, namer.probes)
    }

    #[test]
    fn agrees_with_the_scanning_namer() {
        let buses = ["virtio", "sata", "scsi", "usb", "ide", ""];
        let disks: Vec<Disk> = (0..300)
            .map(|i| disk(&format!("d{}", i % 290), buses[i % buses.len()]))
            .collect();
        let statuses: Vec<VolumeStatus> = [
            status("d0", "vdc"),
            status("d1", ""),
            status("d1", "sda"),
            status("d7", "sdb"),
            status("d7", "sdz"),
            status("d12", "vda"),
            status("d13", "hda"),
            status("d14", "vdzzzz"),
            status("d20", "sdaa"),
            status("nodisk", "vdb"),
        ]
        .into_iter()
        .collect();
        for st in [&statuses[..], &[]] {
            assert_eq!(indexed(st, &disks).0, reference(st, &disks));
        }
    }

    /// Naming N disks examines O(N) candidate indices (the scanning namer examined O(N^2) and
    /// compared each against every name given: O(N^3)).
    #[test]
    fn naming_is_linear_in_the_disks() {
        let n = MAX_INDEX + 2;
        let disks: Vec<Disk> = (0..n).map(|i| disk(&format!("d{i}"), "virtio")).collect();
        let statuses: Vec<VolumeStatus> = (0..MAX_INDEX)
            .step_by(3)
            .map(|i| status(&format!("d{i}"), &device_name("vd", i)))
            .collect();
        let (names, probes) = indexed(&statuses, &disks);
        assert!(probes <= 2 * n, "{probes} candidate indices for {n} disks");
        assert_eq!(names[0], ("vda".to_string(), 0));
        assert_eq!(names[1], ("vdb".to_string(), 1));
        assert_eq!(
            names[MAX_INDEX - 1],
            (device_name("vd", MAX_INDEX - 1), MAX_INDEX - 1)
        );
        // Past 26^3 candidates there is no name left.
        assert_eq!(names[MAX_INDEX], (String::new(), 0));
        assert_eq!(names[MAX_INDEX + 1], (String::new(), 0));
    }
}
