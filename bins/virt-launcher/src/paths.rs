//! Checks on names and paths that come from the VMI: a volume name becomes a file or directory
//! name, and a path the converter derived from the VMI must stay inside the directory it belongs
//! to. Nothing from the VMI ever reaches a shell; these checks keep it from reaching `..` either.

use std::path::{Component, Path, PathBuf};

/// A VMI-supplied name is a single, plain path component.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {name:?} is not a valid name (letters, digits, '-', '_', '.')"
        ))
    }
}

/// `path` is absolute, has no `..` or `.` components, and lies under `base`.
pub fn check_within(what: &str, path: &Path, base: &Path) -> Result<PathBuf, String> {
    let plain = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if plain && path.starts_with(base) && path != base {
        Ok(path.to_path_buf())
    } else {
        Err(format!(
            "{what} {} is outside {}",
            path.display(),
            base.display()
        ))
    }
}

/// `path` lies under one of `bases`.
pub fn check_within_any(what: &str, path: &Path, bases: &[&Path]) -> Result<PathBuf, String> {
    bases
        .iter()
        .find_map(|b| check_within(what, path, b).ok())
        .ok_or_else(|| {
            let list: Vec<String> = bases.iter().map(|b| b.display().to_string()).collect();
            format!(
                "{what} {} is outside the allowed directories {}",
                path.display(),
                list.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_single_components() {
        assert!(check_name("volume", "rootdisk").is_ok());
        assert!(check_name("volume", "disk_0.img").is_ok());
        for bad in ["", ".", "..", "a/b", "../x", "a b", "x;rm", "a\0b"] {
            assert!(check_name("volume", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn paths_stay_inside_their_directory() {
        let base = Path::new("/var/run/kubevirt-ephemeral-disks/disk-data");
        assert!(check_within("overlay", &base.join("root/disk.qcow2"), base).is_ok());
        assert!(check_within("overlay", &base.join("../escape/disk.qcow2"), base).is_err());
        assert!(check_within("overlay", Path::new("/etc/passwd"), base).is_err());
        assert!(check_within("overlay", Path::new("relative/disk"), base).is_err());
        assert!(check_within("overlay", base, base).is_err());
        assert!(
            check_within_any("x", Path::new("/b/c"), &[Path::new("/a"), Path::new("/b")]).is_ok()
        );
    }
}
