//! Timing: warm-up launches, then the median of timed ones with their
//! spread. Every launch starts from the same output, reset outside the
//! timed region, for our kernels and every baseline alike.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// How to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingOptions {
    /// Untimed launches first (caches, page faults, thread start-up).
    pub warmup: usize,
    /// Timed launches (at least one).
    pub repeats: usize,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions { warmup: 2, repeats: 10 }
    }
}

/// The times of one measurement, in milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// Timed launches.
    pub runs: usize,
    /// Copies of the inputs rotated through (GPU timing, so repeats do not
    /// hit in L2); 1 on the CPU.
    pub input_sets: usize,
}

impl Timing {
    /// The timing of these launch times (milliseconds, any order).
    pub fn of(mut times_ms: Vec<f64>, input_sets: usize) -> Timing {
        times_ms.sort_by(f64::total_cmp);
        let runs = times_ms.len();
        let median_ms = match runs {
            0 => f64::NAN,
            n if n % 2 == 1 => times_ms[n / 2],
            n => (times_ms[n / 2 - 1] + times_ms[n / 2]) / 2.0,
        };
        let min_ms = times_ms.first().copied().unwrap_or(f64::NAN);
        let max_ms = times_ms.last().copied().unwrap_or(f64::NAN);
        Timing { median_ms, min_ms, max_ms, runs, input_sets }
    }

    /// (max − min) / median: how much the runs disagree.
    pub fn spread(&self) -> f64 {
        (self.max_ms - self.min_ms) / self.median_ms
    }
}

/// Times `launch` by the wall clock: `reset` runs before every launch,
/// outside the timed region.
pub fn wall_clock(
    opts: TimingOptions,
    mut reset: impl FnMut() -> Result<()>,
    mut launch: impl FnMut() -> Result<()>,
) -> Result<Timing> {
    for _ in 0..opts.warmup {
        reset()?;
        launch()?;
    }
    let mut times = Vec::with_capacity(opts.repeats.max(1));
    for _ in 0..opts.repeats.max(1) {
        reset()?;
        let start = Instant::now();
        launch()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Timing::of(times, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max_and_spread() {
        let t = Timing::of(vec![3.0, 1.0, 2.0, 10.0], 1);
        assert_eq!((t.median_ms, t.min_ms, t.max_ms, t.runs), (2.5, 1.0, 10.0, 4));
        assert_eq!(t.spread(), 9.0 / 2.5);
        assert_eq!(Timing::of(vec![4.0, 1.0, 2.0], 1).median_ms, 2.0);
        assert!(Timing::of(Vec::new(), 1).median_ms.is_nan());
    }

    #[test]
    fn resets_happen_before_every_launch_and_outside_the_clock() {
        let (mut resets, mut launches) = (0, 0);
        let cell = std::cell::Cell::new(0);
        let t = wall_clock(
            TimingOptions { warmup: 2, repeats: 3 },
            || {
                resets += 1;
                cell.set(0);
                Ok(())
            },
            || {
                launches += 1;
                // Every launch sees a fresh output.
                assert_eq!(cell.replace(1), 0);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((resets, launches, t.runs), (5, 5, 3));
    }
}
