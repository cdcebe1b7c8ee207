//! The CPU request of a VMI without dedicated CPUs: vCPUs divided by `cpuAllocationRatio`.

/// Why a CPU request cannot be computed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuRequestError {
    /// A ratio of zero would divide by zero; KubeVirt's config validation forbids it.
    #[error("cpuAllocationRatio: must be at least 1, got 0")]
    ZeroRatio,
}

/// The quantity text KubeVirt parses as the CPU request for `cpus` vCPUs (plus IO threads) at
/// `ratio` vCPUs per physical CPU, or `None` when there is no CPU to request.
///
/// KubeVirt divides in floating point and prints the result with Go's shortest `%g` form, switching
/// to millicores below one CPU: 1 vCPU at ratio 10 gives `100m`, 15 vCPUs give `1.5`. The text is
/// what a Kubernetes quantity is parsed from, so the caller canonicalises it.
pub fn cpu_request_text(cpus: i64, ratio: u32) -> Result<Option<String>, CpuRequestError> {
    if ratio == 0 {
        return Err(CpuRequestError::ZeroRatio);
    }
    if cpus == 0 {
        return Ok(None);
    }
    let value = cpus as f64 / f64::from(ratio);
    Ok(Some(if value < 1.0 {
        format!("{}m", go_shortest(value * 1000.0))
    } else {
        go_shortest(value)
    }))
}

/// Go's `%g` with shortest precision for the magnitudes a CPU count can reach: the shortest
/// decimal that round-trips, in exponent form from 1e21 upwards (Rust's `Display` already prints
/// the shortest round-tripping digits).
fn go_shortest(v: f64) -> String {
    if v.abs() >= 1e21 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_below_one_cpu_are_millicores() {
        assert_eq!(cpu_request_text(1, 10).unwrap().unwrap(), "100m");
        assert_eq!(cpu_request_text(3, 10).unwrap().unwrap(), "300m");
        assert_eq!(cpu_request_text(15, 10).unwrap().unwrap(), "1.5");
        assert_eq!(cpu_request_text(20, 10).unwrap().unwrap(), "2");
        assert_eq!(
            cpu_request_text(1, 3).unwrap().unwrap(),
            "333.3333333333333m"
        );
    }

    #[test]
    fn zero_ratio_is_an_error_and_zero_cpus_request_nothing() {
        assert_eq!(cpu_request_text(1, 0), Err(CpuRequestError::ZeroRatio));
        assert_eq!(cpu_request_text(0, 10), Ok(None));
    }
}
