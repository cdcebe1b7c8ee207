//! What `kvrs-bench-convert` and `kvrs-bench-convert-allocs` share: their arguments, the VMI
//! they load and the conversion they repeat (convert, then the indented domain XML the launcher
//! defines), whole or split into phases.

use std::process::ExitCode;

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::{ConverterContext, Domain, convert};

/// `BIN FILE N [--phases]` or `BIN FILE --serve`.
pub struct Args {
    /// The defaulted VMI (JSON).
    pub vmi: VirtualMachineInstance,
    /// What to do with it.
    pub mode: Mode,
}

/// `N [--phases]` or `--serve`.
pub enum Mode {
    /// Run N conversions (and, with `phases`, N more split into their phases).
    Run { n: usize, phases: bool },
    /// Serve windows of conversions: each line `N` on stdin, answered on stdout.
    Serve,
}

/// Reads the arguments and the VMI; a usage or input error is printed and becomes the exit code.
pub fn args(bin: &str) -> Result<Args, ExitCode> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(file), Some(n)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: {bin} FILE N [--phases] | {bin} FILE --serve");
        return Err(ExitCode::from(2));
    };
    let vmi = |file: &str| {
        std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            .map_err(|e| {
                eprintln!("{bin}: {file}: {e}");
                ExitCode::FAILURE
            })
    };
    if n == "--serve" && args.len() == 3 {
        return Ok(Args {
            vmi: vmi(file)?,
            mode: Mode::Serve,
        });
    }
    let n: usize = match n.parse() {
        Ok(n) if n > 0 => n,
        _ => {
            eprintln!("{bin}: N must be a positive integer, got {n:?}");
            return Err(ExitCode::from(2));
        }
    };
    let phases = match args.get(3).map(String::as_str) {
        None => false,
        Some("--phases") => true,
        Some(other) => {
            eprintln!("{bin}: unknown option {other:?} (only --phases)");
            return Err(ExitCode::from(2));
        }
    };
    Ok(Args {
        vmi: vmi(file)?,
        mode: Mode::Run { n, phases },
    })
}

/// One conversion: the domain and its indented XML; returns the XML's length.
pub fn once(vmi: &VirtualMachineInstance, ctx: &ConverterContext) -> Result<usize, String> {
    // Matched by reference: moving the (large) domain out of the result copies it.
    match &convert(vmi, ctx) {
        Ok(domain) => domain.to_xml().map(|x| x.len()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// The phases of one conversion, in order.
pub const PHASES: [&str; 4] = ["convert", "xml", "drop domain", "drop xml"];

/// One conversion split into [`PHASES`]; `mark(i)` is called as phase `i` ends (and once with
/// `usize::MAX` before the first), so the caller can time or count each.
pub fn phases(
    vmi: &VirtualMachineInstance,
    ctx: &ConverterContext,
    mut mark: impl FnMut(usize),
) -> Result<(), String> {
    mark(usize::MAX);
    let domain: Domain = convert(vmi, ctx).map_err(|e| e.to_string())?;
    mark(0);
    let xml = domain.to_xml().map_err(|e| e.to_string())?;
    mark(1);
    drop(domain);
    mark(2);
    drop(xml);
    mark(3);
    Ok(())
}
