//! Target device names: `vd*` for virtio, `sd*` for SATA/SCSI/USB, keeping names already
//! recorded in the VMI's volume status.

use crate::configurators::util::{NameMap, NameSet, SCAN_MAX};
use crate::domain::Str;
use kvrs_api::api::{Disk, VolumeStatus};

/// `prefix` + a base-26 index (`a`..`z`, `aa`..).
pub(crate) fn device_name(prefix: &str, index: usize) -> String {
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
pub(super) fn prefix(bus: &str) -> &'static str {
    match bus {
        "virtio" => "vd",
        "sata" | "scsi" | "usb" => "sd",
        _ => "",
    }
}

/// The search for a free index stops below 26^3 (as the converter always has).
const MAX_INDEX: usize = 26 * 26 * 26;

/// The first 26 names under `vd` and `sd` (nearly every VMI's targets), as constants: naming a
/// disk allocates nothing.
const VD: [&str; 26] = [
    "vda", "vdb", "vdc", "vdd", "vde", "vdf", "vdg", "vdh", "vdi", "vdj", "vdk", "vdl", "vdm",
    "vdn", "vdo", "vdp", "vdq", "vdr", "vds", "vdt", "vdu", "vdv", "vdw", "vdx", "vdy", "vdz",
];
const SD: [&str; 26] = [
    "sda", "sdb", "sdc", "sdd", "sde", "sdf", "sdg", "sdh", "sdi", "sdj", "sdk", "sdl", "sdm",
    "sdn", "sdo", "sdp", "sdq", "sdr", "sds", "sdt", "sdu", "sdv", "sdw", "sdx", "sdy", "sdz",
];

/// The 676 two-letter names of a prefix (`vdaa`..`vdzz`, indices 26..702), four bytes each, back
/// to back: with [`VD`] and [`SD`], a VMI of up to 702 disks per prefix is named without an
/// allocation (a 200-disk VMI allocated a `String` for 174 of its targets).
const fn two_letter_names(prefix: &[u8; 2]) -> [u8; 676 * 4] {
    const LETTERS: &[u8; 26] = b"abcdefghijklmnopqrstuvwxyz";
    let mut t = [0u8; 676 * 4];
    let mut i = 0;
    while i < 676 {
        t[i * 4] = prefix[0];
        t[i * 4 + 1] = prefix[1];
        t[i * 4 + 2] = LETTERS[i / 26];
        t[i * 4 + 3] = LETTERS[i % 26];
        i += 1;
    }
    t
}

/// `vdaa`..`vdzz`.
static VD2: [u8; 676 * 4] = two_letter_names(b"vd");
/// `sdaa`..`sdzz`.
static SD2: [u8; 676 * 4] = two_letter_names(b"sd");

/// [`device_name`] as a model string: a constant for names of one and two letters.
fn target_name(prefix: &'static str, index: usize) -> Str {
    let (one, two): (&'static [&'static str; 26], &'static [u8; 676 * 4]) = match prefix {
        "vd" => (&VD, &VD2),
        "sd" => (&SD, &SD2),
        _ => return Str::Owned(device_name(prefix, index)),
    };
    if let Some(name) = one.get(index) {
        return Str::Borrowed(name);
    }
    let at = (index - one.len()) * 4;
    match two.get(at..at + 4).map(std::str::from_utf8) {
        Some(Ok(name)) => Str::Borrowed(name),
        _ => Str::Owned(device_name(prefix, index)),
    }
}

/// Whether two disks have the same name: pairwise for short lists, through a set beyond
/// [`SCAN_MAX`].
fn repeats_a_name(disks: &[Disk]) -> bool {
    if disks.len() <= SCAN_MAX {
        return disks
            .iter()
            .enumerate()
            .any(|(i, d)| disks[..i].iter().any(|e| e.name == d.name));
    }
    let mut seen = NameSet::with_capacity_and_hasher(disks.len(), Default::default());
    !disks.iter().all(|d| seen.insert(d.name.as_str()))
}

/// The three prefixes [`prefix`] returns, as small indices.
fn prefix_slot(prefix: &str) -> usize {
    match prefix {
        "vd" => 0,
        "sd" => 1,
        _ => 2,
    }
}

/// The indices taken under one prefix and the lowest one that may still be free.
#[derive(Default)]
struct Taken {
    /// One bit per index below 64 (`vda`..`vdbl`): held in place, so a VMI with fewer than 64
    /// disks on a prefix (nearly every one) names them without an allocation.
    first: u64,
    /// One bit per index from 64 on (at most [`MAX_INDEX`] bits), grown as indices are taken.
    more: Vec<u64>,
    /// Every index below it is taken; indices are never released, so it only moves up.
    lowest_free: usize,
}

impl Taken {
    fn contains(&self, i: usize) -> bool {
        match (i / 64).checked_sub(1) {
            None => self.first & (1 << (i % 64)) != 0,
            Some(w) => self.more.get(w).is_some_and(|w| w & (1 << (i % 64)) != 0),
        }
    }

    fn insert(&mut self, i: usize) {
        match (i / 64).checked_sub(1) {
            None => self.first |= 1 << (i % 64),
            Some(w) => {
                if self.more.len() <= w {
                    self.more.resize(w + 1, 0);
                }
                self.more[w] |= 1 << (i % 64);
            }
        }
    }
}

/// A target given to a disk: a computed name (by index) or one recorded in the volume status.
#[derive(Clone, Copy)]
enum Given<'a> {
    Index(usize),
    Recorded(&'a str),
}

/// Allocates target names per prefix, each in constant amortized time: a VMI with N disks is
/// named in O(N) (a scan of the names given so far per disk made it O(N^3)).
pub(super) struct Namer<'a> {
    /// (prefix slot, disk name) -> target, the first one assigned: searched in place while
    /// short (nearly every VMI), indexed by a map once longer than [`SCAN_MAX`].
    given: Vec<(usize, &'a str, Given<'a>)>,
    given_index: Option<NameMap<(usize, &'a str), usize>>,
    /// Whether a disk can be named twice: no volume status and no disk name repeated (nearly
    /// every VMI) means each disk is named once, so the targets given need no record.
    recall: bool,
    /// Indices taken per prefix slot.
    taken: [Taken; 3],
    /// Candidate indices examined so far (the tests' measure of the work done).
    #[cfg(test)]
    probes: usize,
}

impl<'a> Namer<'a> {
    /// Seeds the namer with targets from the volume status.
    pub(super) fn new(statuses: &'a [VolumeStatus], disks: &'a [Disk]) -> Namer<'a> {
        let mut namer = Namer {
            given: Vec::new(),
            given_index: None,
            recall: !statuses.is_empty() || repeats_a_name(disks),
            taken: Default::default(),
            #[cfg(test)]
            probes: 0,
        };
        if statuses.is_empty() {
            return namer;
        }
        // The first status with a target, per volume name.
        let mut targets: NameMap<&str, &str> =
            NameMap::with_capacity_and_hasher(statuses.len(), Default::default());
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
                let pfx = prefix(bus.unwrap_or(""));
                namer.assign(pfx, &d.name, Given::Recorded(target), index_of(pfx, target));
            }
        }
        namer
    }

    /// The target given to `disk` under the prefix slot, if any.
    fn lookup(&self, slot: usize, disk: &str) -> Option<Given<'a>> {
        if !self.recall {
            return None;
        }
        match &self.given_index {
            Some(map) => map.get(&(slot, disk)).map(|&i| self.given[i].2),
            None => self
                .given
                .iter()
                .find(|(s, d, _)| *s == slot && *d == disk)
                .map(|g| g.2),
        }
    }

    /// Records `target` for `disk` (unless it has one) and takes its index.
    fn assign(
        &mut self,
        pfx: &'static str,
        disk: &'a str,
        target: Given<'a>,
        index: Option<usize>,
    ) {
        let slot = prefix_slot(pfx);
        if self.recall && self.lookup(slot, disk).is_none() {
            self.given.push((slot, disk, target));
            let at = self.given.len() - 1;
            if let Some(map) = &mut self.given_index {
                map.insert((slot, disk), at);
            } else if self.given.len() > SCAN_MAX {
                let mut map =
                    NameMap::with_capacity_and_hasher(self.given.len() * 2, Default::default());
                for (i, (s, d, _)) in self.given.iter().enumerate() {
                    map.entry((*s, *d)).or_insert(i);
                }
                self.given_index = Some(map);
            }
        }
        if let Some(i) = index {
            self.taken[slot].insert(i);
        }
    }

    /// The target of `disk` on `bus` and its index.
    pub(super) fn name(&mut self, disk: &'a str, bus: &str) -> (Str, usize) {
        let pfx = prefix(bus);
        let slot = prefix_slot(pfx);
        match self.lookup(slot, disk) {
            Some(Given::Index(i)) => return (target_name(pfx, i), i),
            Some(Given::Recorded(t)) => {
                return (Str::Owned(t.to_owned()), index_of(pfx, t).unwrap_or(0));
            }
            None => {}
        }
        let taken = &mut self.taken[slot];
        let mut i = taken.lowest_free;
        while i < MAX_INDEX && taken.contains(i) {
            i += 1;
        }
        #[cfg(test)]
        {
            self.probes += i + 1 - taken.lowest_free;
        }
        taken.lowest_free = i;
        if i >= MAX_INDEX {
            return (Str::Borrowed(""), 0);
        }
        self.assign(pfx, disk, Given::Index(i), Some(i));
        (target_name(pfx, i), i)
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

    /// The constant targets are the names [`device_name`] computes, and are constants exactly up
    /// to two letters.
    #[test]
    fn constant_targets_match_computed_names() {
        for prefix in ["vd", "sd"] {
            for i in 0..800 {
                let name = target_name(prefix, i);
                assert_eq!(name, device_name(prefix, i), "{prefix} {i}");
                assert_eq!(matches!(name, Str::Borrowed(_)), i < 702, "{name}");
            }
        }
        assert!(matches!(target_name("hd", 0), Str::Owned(_)));
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
                let (name, i) = namer.name(
                    &d.name,
                    d.disk.as_ref().and_then(|t| t.bus.as_deref()).unwrap_or(""),
                );
                (name.into_owned(), i)
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
        // Repeated names among many disks, among a few, and none repeated.
        let few_repeated: Vec<Disk> = [
            ("a", "virtio"),
            ("b", "sata"),
            ("a", "virtio"),
            ("c", "scsi"),
            ("b", "sata"),
            ("a", "sata"),
        ]
        .iter()
        .map(|(name, bus)| disk(name, bus))
        .collect();
        let unique: Vec<Disk> = (0..40)
            .map(|i| disk(&format!("d{i}"), buses[i % 3]))
            .collect();
        for disks in [&disks, &few_repeated, &unique[..8].to_vec(), &unique] {
            for st in [&statuses[..], &[]] {
                assert_eq!(indexed(st, disks).0, reference(st, disks));
            }
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
