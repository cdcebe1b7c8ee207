//! Protocol version negotiation through the `CmdInfo` / `NotifyInfo` services.
//!
//! Before any real call, the dialling side asks the peer which versions of the service it
//! serves and picks the highest one both sides know. KubeVirt v1.9.0 knows only version 1 of
//! each; a peer that announces none of our versions is refused rather than spoken to blindly.

/// The `kubevirt.cmd.vN` versions kvrs speaks.
pub const CMD_VERSIONS: &[u32] = &[1];
/// The `kubevirt.notify.vN` versions kvrs speaks.
pub const NOTIFY_VERSIONS: &[u32] = &[1];

/// The highest version present in both lists, or `None` when they share none.
pub fn highest_common_version(peer: &[u32], ours: &[u32]) -> Option<u32> {
    peer.iter().copied().filter(|v| ours.contains(v)).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_highest_shared_version() {
        assert_eq!(highest_common_version(&[1], CMD_VERSIONS), Some(1));
        assert_eq!(highest_common_version(&[3, 1, 2], &[1, 2]), Some(2));
        assert_eq!(highest_common_version(&[2, 3], &[1]), None);
        assert_eq!(highest_common_version(&[], &[1]), None);
    }
}
