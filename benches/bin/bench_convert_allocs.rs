//! `kvrs-bench-convert-allocs FILE N`: counts the allocations (and reallocations) of N
//! conversions of one defaulted VMI — the conversion `kvrs-bench-convert` times — on
//! `stats_alloc`'s instrumented system allocator, the counterpart of Go's
//! `runtime.MemStats.Mallocs`. Prints allocations and bytes per conversion; with `--phases`,
//! the allocations of each phase (convert, XML, dropping the domain, dropping the text).

use std::alloc::System;
use std::process::ExitCode;

use kvrs_converter::ConverterContext;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[path = "convert_common.rs"]
mod common;

fn main() -> ExitCode {
    const BIN: &str = "kvrs-bench-convert-allocs";
    let args = match common::args(BIN) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let common::Mode::Run { n, phases } = args.mode else {
        eprintln!("{BIN}: --serve is kvrs-bench-convert's (this binary counts, it does not time)");
        return ExitCode::from(2);
    };
    let vmi = &args.vmi;
    let ctx = ConverterContext::default();
    if let Err(e) = common::once(vmi, &ctx) {
        eprintln!("{BIN}: convert: {e}");
        return ExitCode::FAILURE;
    }
    let region = Region::new(GLOBAL);
    for _ in 0..n {
        if let Err(e) = common::once(vmi, &ctx) {
            eprintln!("{BIN}: convert: {e}");
            return ExitCode::FAILURE;
        }
    }
    let stats = region.change();
    let per = |v: usize| v / n;
    println!("conversions: {n}");
    println!(
        "allocations/conversion: {}",
        per(stats.allocations + stats.reallocations)
    );
    println!("bytes/conversion: {}", per(stats.bytes_allocated));
    if phases {
        let mut allocs = [0usize; 4];
        for _ in 0..n {
            let mut region = Region::new(GLOBAL);
            let done = common::phases(vmi, &ctx, |phase| {
                if let Some(a) = allocs.get_mut(phase) {
                    let c = region.change();
                    *a += c.allocations + c.reallocations;
                }
                region = Region::new(GLOBAL);
            });
            if let Err(e) = done {
                eprintln!("{BIN}: convert: {e}");
                return ExitCode::FAILURE;
            }
        }
        for (name, a) in common::PHASES.iter().zip(allocs) {
            println!("phase {name}: allocations/conversion {}", per(a));
        }
    }
    ExitCode::SUCCESS
}
