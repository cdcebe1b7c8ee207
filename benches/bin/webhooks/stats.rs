//! Percentiles and paired ratios: plain numbers in, plain numbers out.

/// The quantile `per_mille` / 1000 of `samples` by the nearest-rank method (500: the median,
/// 990: p99); `None` when empty.
pub fn quantile(samples: &[f64], per_mille: usize) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (per_mille.min(1000) * v.len()).div_ceil(1000);
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// Median, first and third quartile of `values` (the per-round ratios).
pub fn median_iqr(values: &[f64]) -> Option<(f64, f64, f64)> {
    Some((
        quantile(values, 500)?,
        quantile(values, 250)?,
        quantile(values, 750)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 500), Some(50.0));
        assert_eq!(quantile(&v, 990), Some(99.0));
        assert_eq!(quantile(&v, 1000), Some(100.0));
        assert_eq!(quantile(&[3.0], 990), Some(3.0));
        assert_eq!(quantile(&[], 500), None);
    }
}
