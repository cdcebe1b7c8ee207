//! How a preference spreads an instancetype's vCPUs over sockets, cores and threads
//! (KubeVirt's `GetPreferredTopology` / `GetSpreadOptions`), shared by the application and the
//! checks.

use crate::types::PreferenceSpec;

/// A preferred CPU topology, with the deprecated `prefer*` spellings folded into the current
/// ones; a value KubeVirt does not know is kept as `Unknown` (it then leaves every count at 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// All vCPUs as sockets (the default).
    Sockets,
    /// All vCPUs as cores of one socket.
    Cores,
    /// All vCPUs as threads of one core.
    Threads,
    /// Spread by the spread options (ratio and across).
    Spread,
    /// Any: applied as sockets.
    Any,
    /// A value KubeVirt does not know.
    Unknown,
}

/// The preference's topology (`sockets` when it names none).
pub fn preferred_topology(preference: Option<&PreferenceSpec>) -> Topology {
    let named = preference
        .and_then(|p| p.cpu.as_ref())
        .and_then(|c| c.preferred_cpu_topology.as_deref());
    match named {
        None | Some("sockets" | "preferSockets") => Topology::Sockets,
        Some("cores" | "preferCores") => Topology::Cores,
        Some("threads" | "preferThreads") => Topology::Threads,
        Some("spread" | "preferSpread") => Topology::Spread,
        Some("any" | "preferAny") => Topology::Any,
        Some(_) => Topology::Unknown,
    }
}

/// What `spread` spreads across.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Across {
    /// Sockets and cores (the default): `ratio` cores per socket.
    SocketsCores,
    /// Cores and threads: `ratio` threads per core.
    CoresThreads,
    /// Sockets, cores and two threads per core: `ratio` cores per socket.
    SocketsCoresThreads,
    /// A value KubeVirt does not know (it then leaves every count at 1).
    Unknown(String),
}

impl std::fmt::Display for Across {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Across::SocketsCores => "SocketsCores",
            Across::CoresThreads => "CoresThreads",
            Across::SocketsCoresThreads => "SocketsCoresThreads",
            Across::Unknown(s) => s,
        })
    }
}

/// The spread ratio (2 unless the preference says otherwise; `spreadOptions.ratio` wins over the
/// deprecated `preferSpreadSocketToCoreRatio`) and what it spreads across.
pub fn spread_options(preference: &PreferenceSpec) -> (u32, Across) {
    let mut ratio = 2;
    if preference.prefer_spread_socket_to_core_ratio != 0 {
        ratio = preference.prefer_spread_socket_to_core_ratio;
    }
    let mut across = Across::SocketsCores;
    if let Some(opts) = preference
        .cpu
        .as_ref()
        .and_then(|c| c.spread_options.as_ref())
    {
        if let Some(a) = &opts.across {
            across = match a.as_str() {
                "SocketsCores" => Across::SocketsCores,
                "CoresThreads" => Across::CoresThreads,
                "SocketsCoresThreads" => Across::SocketsCoresThreads,
                other => Across::Unknown(other.to_string()),
            };
        }
        if let Some(r) = opts.ratio {
            ratio = r;
        }
    }
    (ratio, across)
}
