//! A small log-linear latency histogram for the load generators: constant memory (≈30 KiB),
//! O(1) recording, mergeable across tasks, with under 1 % relative error on quantiles,
//! which is plenty for p50/p99/p99.9 of network round trips. Written here instead of pulling
//! in a dependency for ~100 lines.
//!
//! Values below 128 ns have their own bucket; above, each power of two is split into 64
//! equal buckets.

use std::time::Duration;

const SUB_BITS: u32 = 6; // 64 buckets per power of two
const SUB: u64 = 1 << SUB_BITS;
const LINEAR: u64 = 2 * SUB; // values < 128 are exact
const BUCKETS: usize = (LINEAR + (64 - (SUB_BITS + 1) as u64) * SUB) as usize;

/// Latency histogram over nanoseconds.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.total)
            .field("min", &self.min())
            .field("p50", &self.quantile(0.5))
            .field("max", &self.max())
            .finish()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

fn index(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // ≥ 7
    let shift = exp - SUB_BITS;
    let mantissa = (v >> shift) - SUB; // 0..64
    (LINEAR + u64::from(exp - SUB_BITS - 1) * SUB + mantissa) as usize
}

/// Lowest value and width of bucket `i`.
fn bucket_range(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < LINEAR {
        return (i, 1);
    }
    let k = i - LINEAR;
    let exp = k / SUB + u64::from(SUB_BITS) + 1;
    let mantissa = k % SUB + SUB;
    let shift = exp - u64::from(SUB_BITS);
    (mantissa << shift, 1 << shift)
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }

    /// Records one value in nanoseconds.
    pub fn record_nanos(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += u128::from(v);
    }

    /// Records one duration.
    pub fn record(&mut self, d: Duration) {
        self.record_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Smallest value (zero when empty).
    pub fn min(&self) -> Duration {
        if self.total == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.min)
        }
    }

    /// Largest value.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max)
    }

    /// Arithmetic mean.
    pub fn mean(&self) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos((self.sum / u128::from(self.total)) as u64)
    }

    /// The value at quantile `q` (0.0..=1.0): the middle of the bucket holding the
    /// `ceil(q·n)`-th smallest value, clamped to the observed min/max.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, width) = bucket_range(i);
                let mid = lo + (width - 1) / 2;
                return Duration::from_nanos(mid.clamp(self.min, self.max));
            }
        }
        self.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous() {
        let mut expected_lo = 0u64;
        for i in 0..BUCKETS {
            let (lo, width) = bucket_range(i);
            assert_eq!(lo, expected_lo, "bucket {i}");
            assert_eq!(index(lo), i);
            assert_eq!(index(lo + (width - 1)), i);
            expected_lo = lo.wrapping_add(width);
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_within_one_percent() {
        let mut h = Histogram::new();
        for us in 1..=10_000u64 {
            h.record(Duration::from_micros(us));
        }
        assert_eq!(h.count(), 10_000);
        for (q, exact) in [(0.5, 5_000.0), (0.99, 9_900.0), (0.999, 9_990.0)] {
            let got = h.quantile(q).as_secs_f64() * 1e6;
            assert!((got - exact).abs() / exact < 0.01, "q{q}: {got} vs {exact}");
        }
        assert_eq!(h.min(), Duration::from_micros(1));
        assert_eq!(h.max(), Duration::from_micros(10_000));
        let mean = h.mean().as_secs_f64() * 1e6;
        assert!((mean - 5_000.5).abs() < 0.01);
        let mut other = Histogram::new();
        other.record_nanos(5);
        h.merge(&other);
        assert_eq!(h.count(), 10_001);
        assert_eq!(h.min(), Duration::from_nanos(5));
        assert_eq!(Histogram::new().quantile(0.5), Duration::ZERO);
    }
}
