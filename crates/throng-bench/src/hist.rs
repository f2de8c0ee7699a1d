//! The one shape of HDR histogram every latency figure uses (µs), apart
//! from `stats` so that `presence`, which `stats` counts, can use it too.

use hdrhistogram::Histogram;

/// Up to an hour, three significant figures.
pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}
