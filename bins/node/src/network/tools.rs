//! The two host binaries the setup runs, from the namespace thread (a child forked there
//! inherits the thread's network namespace):
//!
//! * `nft`, as KubeVirt runs it, fed a whole script on stdin (one atomic transaction);
//! * `ip tuntap`, because a tap is made with `TUNSETIFF` ioctls on `/dev/net/tun` (rtnetlink
//!   cannot create one) and kvrs keeps `unsafe` out; KubeVirt likewise shells out to its
//!   `virt-chroot create-tap` helper.
//!
//! A missing binary is an error naming it, never a silent skip.

use super::nft::PREINBOUND;
use super::plan::TapSpec;
use crate::error::NodeError;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// The nft binary (found on `PATH`, like KubeVirt's `nft`).
pub const NFT: &str = "nft";
/// The iproute2 binary.
pub const IP: &str = "ip";

/// Applies an nft script in one transaction.
pub(crate) fn nft_apply(script: &str) -> Result<(), NodeError> {
    let fail = |reason: String| NodeError::Nft { reason };
    let mut child = Command::new(NFT)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("running {NFT}: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| fail(format!("writing the ruleset to {NFT}: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| fail(format!("waiting for {NFT}: {e}")))?;
    if !out.status.success() {
        return Err(fail(format!(
            "{NFT} -f - exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Whether KubeVirt's `KUBEVIRT_PREINBOUND` chain exists in table `nat` of `ip` / `ip6`.
pub(crate) fn nat_present() -> Result<(bool, bool), NodeError> {
    let fail = |reason: String| NodeError::Nft { reason };
    let out = Command::new(NFT)
        .args(["-j", "list", "chains"])
        .output()
        .map_err(|e| fail(format!("running {NFT}: {e}")))?;
    if !out.status.success() {
        return Err(fail(format!(
            "{NFT} -j list chains exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| fail(format!("{NFT} -j list chains printed no JSON: {e}")))?;
    let mut v4 = false;
    let mut v6 = false;
    for item in doc["nftables"].as_array().into_iter().flatten() {
        let chain = &item["chain"];
        if chain["table"] == "nat" && chain["name"] == PREINBOUND {
            match chain["family"].as_str() {
                Some("ip") => v4 = true,
                Some("ip6") => v6 = true,
                _ => {}
            }
        }
    }
    Ok((v4, v6))
}

/// Creates the persistent tap `name` with KubeVirt's flags and owner.
pub(crate) fn create_tap(name: &str, tap: &TapSpec) -> Result<(), NodeError> {
    let owner = tap.owner.to_string();
    let mut args = vec![
        "tuntap", "add", "dev", name, "mode", "tap", "user", &owner, "group", &owner,
    ];
    if tap.multi_queue {
        // IFF_MULTI_QUEUE | IFF_NO_PI (iproute2 sets IFF_NO_PI unless told `pi`).
        args.push("multi_queue");
    } else {
        // IFF_ONE_QUEUE, packet info kept: KubeVirt's single-queue flags.
        args.extend(["one_queue", "pi"]);
    }
    let out = Command::new(IP)
        .args(&args)
        .output()
        .map_err(|e| NodeError::Tap {
            name: name.to_string(),
            reason: format!("running {IP}: {e}"),
        })?;
    if !out.status.success() {
        return Err(NodeError::Tap {
            name: name.to_string(),
            reason: format!(
                "{IP} {} exited with {}: {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(())
}
