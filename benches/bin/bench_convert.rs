//! `kvrs-bench-convert FILE N`: times N conversions of one defaulted VMI in process — convert,
//! then the indented domain XML the launcher defines — and prints the same timing line as
//! `kvrs-diff-go bench-convert` (KubeVirt's converter, libvirt-domain defaulting and
//! `xml.MarshalIndent`), so `benches/compare-kubevirt.sh` can put them side by side.
//!
//! It runs on the system allocator, as the launcher does. The allocation counts come from
//! `kvrs-bench-convert-allocs` (the same conversion on a counting allocator): counting costs
//! four atomic read-modify-writes per allocation, which would be timed here too — Go's
//! `runtime.MemStats.Mallocs` counts for free.
//!
//! `kvrs-bench-convert FILE N --phases` additionally times one conversion's phases — convert
//! (configurators, disks, libvirt defaults), XML writing, and dropping the domain and the text —
//! and prints each phase's median.
//!
//! `kvrs-bench-convert FILE --serve` times windows on request: each line `N` on stdin runs N
//! conversions and answers their median (ns) on a line of its own.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Instant;

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::ConverterContext;

#[path = "convert_common.rs"]
mod common;

fn main() -> ExitCode {
    const BIN: &str = "kvrs-bench-convert";
    let args = match common::args(BIN) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let vmi = &args.vmi;
    let ctx = ConverterContext::default();
    // One untimed conversion first: it fails early on bad input and warms the caches.
    if let Err(e) = common::once(vmi, &ctx) {
        eprintln!("{BIN}: convert: {e}");
        return ExitCode::FAILURE;
    }
    let (n, phases) = match args.mode {
        common::Mode::Run { n, phases } => (n, phases),
        common::Mode::Serve => {
            return match serve(vmi, &ctx) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{BIN}: {e}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    let median = match window(vmi, &ctx, n) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{BIN}: convert: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("conversions: {n}");
    println!("median ns/conversion: {median}");
    if phases {
        let mut phase_times: [Vec<u128>; 4] = std::array::from_fn(|_| Vec::with_capacity(n));
        for _ in 0..n {
            let mut start = Instant::now();
            let done = common::phases(vmi, &ctx, |phase| {
                if let Some(t) = phase_times.get_mut(phase) {
                    t.push(start.elapsed().as_nanos());
                }
                start = Instant::now();
            });
            if let Err(e) = done {
                eprintln!("{BIN}: convert: {e}");
                return ExitCode::FAILURE;
            }
        }
        for (name, t) in common::PHASES.iter().zip(&mut phase_times) {
            t.sort_unstable();
            println!("phase {name}: median ns {}", t[n / 2]);
        }
    }
    ExitCode::SUCCESS
}

/// Times `n` conversions; their median in nanoseconds.
fn window(vmi: &VirtualMachineInstance, ctx: &ConverterContext, n: usize) -> Result<u128, String> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        common::once(vmi, ctx)?;
        times.push(start.elapsed());
    }
    times.sort_unstable();
    Ok(times[n / 2].as_nanos())
}

/// `--serve`: each line `N` on stdin times N conversions and answers `MEDIAN_NS` on stdout —
/// the counterpart of `kvrs-diff-go bench-convert-serve`, so `benches/compare-kubevirt.sh` can
/// interleave short windows of the two converters without starting a process for each.
fn serve(vmi: &VirtualMachineInstance, ctx: &ConverterContext) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        let n: usize = match line.trim().parse() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "--serve: each line must be a positive integer, got {line:?}"
                ));
            }
        };
        let median = window(vmi, ctx, n).map_err(|e| format!("convert: {e}"))?;
        writeln!(out, "{median}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("writing stdout: {e}"))?;
    }
    Ok(())
}
