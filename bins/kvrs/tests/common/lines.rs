//! A command's standard output as a set of lines (empty when it cannot run): the tests compare
//! what the host has (links, cgroups, mounts, nftables) before and after.

use std::collections::BTreeSet;
use std::process::Command;

/// The lines `cmd` prints.
pub fn lines_of(cmd: &mut Command) -> BTreeSet<String> {
    cmd.output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}
