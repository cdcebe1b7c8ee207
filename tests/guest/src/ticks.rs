//! The live-migration proof the tests share: a guest workload that prints, once a second, a
//! count, the kernel's boot id and a random pattern it drew once into its RAM-backed root
//! filesystem — so a guest that arrived with its memory continues the count with the same boot
//! id and pattern, and one that booted anew cannot.

/// The marker of a tick line.
pub const TICK: &str = "KVRS-TICK";

/// The cloud-init user-data line (`KVRS-RUN:`, run at boot by this guest's init) of the loop.
pub const TICK_LOOP: &str = "KVRS-RUN: head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' >/pattern; i=0; while true; do i=$((i+1)); echo \"KVRS-TICK $i $(cat /proc/sys/kernel/random/boot_id) $(cat /pattern)\"; sleep 1; done";

/// `(count, boot id + RAM pattern)` of each complete tick line of a serial console log.
pub fn ticks(log: &str) -> Vec<(u64, String)> {
    log.lines()
        .filter_map(|l| {
            let mut w = l.split(TICK).nth(1)?.split_whitespace();
            let count = w.next()?.parse().ok()?;
            let (boot, pattern) = (w.next()?, w.next()?);
            // 16 random bytes in hex: a line cut short by the console is not a tick.
            (pattern.len() == 32).then(|| (count, format!("{boot} {pattern}")))
        })
        .collect()
}

/// Panics unless `after` (the target's ticks) continues `before` (the source's): the same boot
/// id and pattern, a count past the last one seen before and without gaps, and no boot on the
/// target's console (`target_log`).
pub fn assert_continues(before: &[(u64, String)], after: &[(u64, String)], target_log: &str) {
    let last_before = before.last().expect("ticks before the migration");
    assert!(
        !target_log.contains(crate::BOOT_MARKER),
        "the target's guest booted instead of arriving:\n{target_log}"
    );
    assert!(
        after.iter().all(|(_, boot)| *boot == last_before.1),
        "a different boot or RAM pattern on the target: {after:?} vs {last_before:?}"
    );
    assert!(
        after.first().is_some_and(|f| f.0 > last_before.0)
            && after.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "the count does not go on: before {before:?}, after {after:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_lines_are_read_and_cut_ones_skipped() {
        let p = "0123456789abcdef0123456789abcdef";
        let log = format!(
            "noise\nKVRS-TICK 7 boot1 {p}\nKVRS-TICK 8 boot1 0123\n[x] KVRS-TICK 9 boot1 {p}\n"
        );
        assert_eq!(
            ticks(&log),
            vec![(7, format!("boot1 {p}")), (9, format!("boot1 {p}"))]
        );
        assert_continues(
            &[(7, format!("boot1 {p}"))],
            &[(9, format!("boot1 {p}")), (10, format!("boot1 {p}"))],
            "KVRS-TICK 9",
        );
    }
}
