//! `kvrs-bench-convert FILE N`: times N conversions of one defaulted VMI in process — convert,
//! then the indented domain XML the launcher defines — and prints the same lines as
//! `kvrs-diff-go bench-convert` (KubeVirt's converter, libvirt-domain defaulting and
//! `xml.MarshalIndent`), so `benches/compare-kubevirt.sh` can put them side by side.
//!
//! Allocations (and reallocations) are counted by `stats_alloc`'s instrumented system
//! allocator: the counterpart of Go's `runtime.MemStats.Mallocs`.
//!
//! `kvrs-bench-convert FILE N --phases` additionally splits one conversion into its phases —
//! convert (configurators, disks, libvirt defaults), XML writing, and dropping the domain and
//! the text — with each phase's median time and allocations, to show where the time goes.

use std::alloc::System;
use std::process::ExitCode;
use std::time::Instant;

use kvrs_converter::{ConverterContext, convert};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(file), Some(n)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: kvrs-bench-convert FILE N");
        return ExitCode::from(2);
    };
    let n: usize = match n.parse() {
        Ok(n) if n > 0 => n,
        _ => {
            eprintln!("kvrs-bench-convert: N must be a positive integer, got {n:?}");
            return ExitCode::from(2);
        }
    };
    let vmi = match std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            eprintln!("kvrs-bench-convert: {file}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let phases = match args.get(3).map(String::as_str) {
        None => false,
        Some("--phases") => true,
        Some(other) => {
            eprintln!("kvrs-bench-convert: unknown option {other:?} (only --phases)");
            return ExitCode::from(2);
        }
    };
    let ctx = ConverterContext::default();
    let once = || -> Result<usize, String> {
        // Matched by reference: moving the (large) domain out of the result copies it.
        match &convert(&vmi, &ctx) {
            Ok(domain) => domain.to_xml().map(|x| x.len()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    if let Err(e) = once() {
        eprintln!("kvrs-bench-convert: convert: {e}");
        return ExitCode::FAILURE;
    }
    let mut times = Vec::with_capacity(n);
    let region = Region::new(GLOBAL);
    for _ in 0..n {
        let start = Instant::now();
        if let Err(e) = once() {
            eprintln!("kvrs-bench-convert: convert: {e}");
            return ExitCode::FAILURE;
        }
        times.push(start.elapsed());
    }
    let stats = region.change();
    // The `times` vector was allocated before the loop: the counts are the conversions' own.
    times.sort();
    let per = u64::try_from(n).unwrap_or(u64::MAX);
    println!("conversions: {n}");
    println!("median ns/conversion: {}", times[n / 2].as_nanos());
    let allocations = u64::try_from(stats.allocations + stats.reallocations).unwrap_or(u64::MAX);
    let bytes = u64::try_from(stats.bytes_allocated).unwrap_or(u64::MAX);
    println!("allocations/conversion: {}", allocations / per);
    println!("bytes/conversion: {}", bytes / per);
    if phases {
        let run = |ctx: &ConverterContext| convert(&vmi, ctx);
        if let Err(e) = print_phases(run, &ctx, n) {
            eprintln!("kvrs-bench-convert: convert: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Times and counts each phase of a conversion separately, N times, and prints per phase the
/// median nanoseconds and the allocations per conversion.
fn print_phases(
    run: impl Fn(&ConverterContext) -> Result<kvrs_converter::Domain, kvrs_converter::ConvertError>,
    ctx: &ConverterContext,
    n: usize,
) -> Result<(), String> {
    const NAMES: [&str; 4] = ["convert", "xml", "drop domain", "drop xml"];
    let mut times: [Vec<u64>; 4] = std::array::from_fn(|_| Vec::with_capacity(n));
    let mut allocs = [0usize; 4];
    for _ in 0..n {
        let mut mark = |phase: usize, start: Instant, region: Region<'_, System>| {
            let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            times[phase].push(nanos);
            let c = region.change();
            allocs[phase] += c.allocations + c.reallocations;
        };
        let (start, region) = (Instant::now(), Region::new(GLOBAL));
        let domain = run(ctx).map_err(|e| e.to_string())?;
        mark(0, start, region);
        let (start, region) = (Instant::now(), Region::new(GLOBAL));
        let xml = domain.to_xml().map_err(|e| e.to_string())?;
        mark(1, start, region);
        let (start, region) = (Instant::now(), Region::new(GLOBAL));
        drop(domain);
        mark(2, start, region);
        let (start, region) = (Instant::now(), Region::new(GLOBAL));
        drop(xml);
        mark(3, start, region);
    }
    for (i, name) in NAMES.iter().enumerate() {
        times[i].sort_unstable();
        println!(
            "phase {name}: median ns {}, allocations/conversion {}",
            times[i][n / 2],
            allocs[i] / n
        );
    }
    Ok(())
}
