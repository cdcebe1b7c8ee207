//! `/proc/<pid>/mountinfo`, and how a mount seen by one process is found in another's view.
//!
//! A claim mounted into the attachment pod at `/<volume>` is a bind mount of some directory of
//! a filesystem the node has mounted too (the kubelet's `.../volumes/kubernetes.io~local-volume/
//! <pv>` under the real kubelet, the PV's path itself under kvrs's kubelet). The pod's
//! mountinfo names that directory as a path *within its filesystem* (the `root` field) and the
//! filesystem by device number; the node's mountinfo has a mount of the same device whose root
//! is a prefix of it. This is what KubeVirt asks `findmnt -N <pid>` for, read here directly.

use std::path::{Path, PathBuf};

/// One line of a mountinfo file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MountEntry {
    /// `major:minor` of the mounted filesystem.
    pub device: String,
    /// The mounted directory, as a path within its filesystem.
    pub root: PathBuf,
    /// Where it is mounted, relative to the reading process's root.
    pub mount_point: PathBuf,
    /// The filesystem type.
    pub fs_type: String,
}

/// Undoes the kernel's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a mountinfo file's text; malformed lines are skipped (the kernel writes none).
pub(crate) fn parse(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    let sep = fields.iter().position(|f| *f == "-")?;
    if sep < 6 || fields.len() < sep + 2 {
        return None;
    }
    Some(MountEntry {
        device: fields[2].to_string(),
        root: PathBuf::from(unescape(fields[3])),
        mount_point: PathBuf::from(unescape(fields[4])),
        fs_type: fields[sep + 1].to_string(),
    })
}

/// The topmost mount at `mount_point` (the last one listed covers the others).
pub(crate) fn mounted_at<'m>(
    mounts: &'m [MountEntry],
    mount_point: &Path,
) -> Option<&'m MountEntry> {
    mounts.iter().rev().find(|m| m.mount_point == mount_point)
}

/// Where the node may see the directory `wanted` (a mount from another process's mountinfo):
/// below each mount of the same device whose root contains `wanted.root`, the most specific
/// (longest root) first. Empty when the node has no mount of that filesystem reaching it. The
/// caller checks which path really is the directory (a mount point can be covered).
pub(crate) fn node_paths_of(node: &[MountEntry], wanted: &MountEntry) -> Vec<PathBuf> {
    let mut found: Vec<(usize, PathBuf)> = node
        .iter()
        .filter(|m| m.device == wanted.device)
        .filter_map(|m| {
            let rest = wanted.root.strip_prefix(&m.root).ok()?;
            // `join("")` would add a trailing `/`, which the in-root path check refuses: the
            // directory is the mount point itself when the roots are equal.
            let path = if rest.as_os_str().is_empty() {
                m.mount_point.clone()
            } else {
                m.mount_point.join(rest)
            };
            Some((m.root.as_os_str().len(), path))
        })
        .collect();
    // Later mounts cover earlier ones at the same place: among equals, the last listed first.
    found.reverse();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:27 / /tmp rw,nosuid shared:7 - tmpfs tmpfs rw
41 22 8:17 / /mnt/disks rw shared:9 - xfs /dev/sdb1 rw
55 22 8:17 /pv\\0401 /var/lib/kubelet/pods/u1/volumes/kubernetes.io~local-volume/pv1 rw shared:9 - xfs /dev/sdb1 rw
";

    #[test]
    fn lines_are_parsed_with_escapes() {
        let m = parse(NODE);
        assert_eq!(m.len(), 4);
        assert_eq!(m[3].root, Path::new("/pv 1"));
        assert_eq!(m[1].fs_type, "tmpfs");
        assert_eq!(m[0].mount_point, Path::new("/"));
    }

    #[test]
    fn the_most_specific_node_mount_is_used() {
        let node = parse(NODE);
        let pod = parse("900 800 8:17 /pv\\0401/sub /vol rw master:9 - xfs /dev/sdb1 rw\n");
        let at = mounted_at(&pod, Path::new("/vol")).expect("mount");
        // Both /mnt/disks (root /) and the kubelet's bind (root /pv 1) reach it: the latter wins.
        assert_eq!(
            node_paths_of(&node, at),
            [
                PathBuf::from(
                    "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~local-volume/pv1/sub"
                ),
                PathBuf::from("/mnt/disks/pv 1/sub"),
            ]
        );
        // Another device: not found.
        let other = parse("900 800 9:9 /x /vol rw - xfs /dev/x rw\n");
        assert!(node_paths_of(&node, &other[0]).is_empty());
        // The pod's mount is the kubelet's whole volume (same root): its mount point as it is,
        // with no trailing `/` (the in-root path check refuses one).
        let whole = parse("900 800 8:17 /pv\\0401 /vol rw master:9 - xfs /dev/sdb1 rw\n");
        let paths = node_paths_of(&node, &whole[0]);
        assert_eq!(
            paths[0],
            PathBuf::from("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~local-volume/pv1")
        );
        assert!(
            paths.iter().all(|p| !p.to_string_lossy().ends_with('/')),
            "{paths:?}"
        );
        // A prefix must be a whole path component: /pv 10 is not below /pv 1.
        let sibling = parse("900 800 8:17 /pv\\04010 /vol rw - xfs /dev/sdb1 rw\n");
        assert_eq!(
            node_paths_of(&node, &sibling[0]),
            [PathBuf::from("/mnt/disks/pv 10")]
        );
    }
}
