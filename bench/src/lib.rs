//! Spindle's benchmark suites: our kernels and their baselines timed in one
//! process, so ratios hold even where absolute times move on a shared
//! machine. Every suite returns a typed report (serde), which the `spindle
//! bench` command prints as a table or JSON and records in `bench/results/`.
//!
//! - [`formats`]: COO→CSR and COO→GroupCOO conversion against sprs.
//! - [`spmm`]: C = A·B (N = 64, f32) on the C backend against sprs, faer and,
//!   through `python3`, SciPy, Intel MKL and SuiteSparse:GraphBLAS
//!   ([`python`]), on one thread and all cores.
//! - [`rows`]: CSR SpMM as the level path's row loops against the tile
//!   path's expanded rows, on one and all threads.
//! - [`spgemm`]: C = A·B with A, B, C in CSR (the level path's row-wise
//!   kernel) against sprs, SciPy and MKL, on paper 001's A·shift(Aᵀ).
//! - [`workspaces`]: every sparse-workspace policy against the dense
//!   workspace, sprs, SciPy and MKL; paper 001's synthetic sweeps, ablation
//!   and a parallel ISM.
//! - [`conv`]: sparse convolution through subsection loops (paper 002) in
//!   every legal loop order against the dense-outer-loop variant and the
//!   dense direct convolution, 1-D to 3-D over sparsities 0–99.9 %.
//! - [`gpu`]: SpMM against cuSPARSE CSR and block-sparse SpMM against
//!   cuSPARSE BSR and cuBLAS, on an NVIDIA GPU.
//!
//! Every suite where a Spindle kernel runs reports two Spindle rows: *as a
//! user gets it* (the plain statement `C[m,n] += A[m,k] * B[k,n]` with A in
//! CSR and no schedule, autotuned by the driver's [`spindle::Tuner`]) and
//! the *best variant* of the suite's sweep. Kernels compile, run and are
//! timed through the driver (`spindle`), as a Rust user's would.

pub mod conv;
pub mod formats;
pub mod gpu;
pub mod python;
pub mod react;
pub mod roofline;
pub mod rows;
pub mod spgemm;
pub mod spmm;
pub mod workspaces;

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use spindle::{Timing, TimingOptions};

/// Where and when a benchmark ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// The CPU's model name.
    pub cpu: String,
    /// CPU threads available to the process.
    pub threads: usize,
    /// `git rev-parse --short HEAD` of the working directory, when in a
    /// repository.
    pub commit: Option<String>,
    /// When the report was made (RFC 3339, UTC).
    pub date: String,
}

/// `n` and the noun, plural unless `n` is one: `1 run`, `3 runs`.
pub fn counted(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// `1 thread` or `N threads`, for tables and progress lines.
pub fn threads_text(n: usize) -> String {
    counted(n, "thread")
}

/// A time in milliseconds for a table or a progress line: at least three
/// significant digits (0.000 said nothing beside a ratio of 13x), "-"
/// where there is none.
pub fn ms_text(t: Option<f64>) -> String {
    match t.filter(|t| t.is_finite()) {
        None => "-".into(),
        Some(x) if x == 0.0 || x.abs() >= 0.1 => format!("{x:.3}"),
        Some(x) => {
            let decimals = (2 - x.abs().log10().floor() as i32).clamp(3, 9) as usize;
            format!("{x:.decimals$}")
        }
    }
}

/// The machine this process runs on, now.
pub fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    Machine {
        cpu,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        commit,
        date: jiff::Timestamp::now().to_string(),
    }
}

/// `/proc/loadavg` (other work on the machine moves the all-thread times).
pub fn loadavg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.trim().to_string())
}

/// The two thread settings every CPU measurement is made under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Threads {
    /// One thread.
    One,
    /// Every CPU thread (or `--threads`).
    All,
}

impl Threads {
    pub const BOTH: [Threads; 2] = [Threads::One, Threads::All];

    /// The thread count for this setting, given the all-core count.
    pub fn count(self, all: usize) -> usize {
        match self {
            Threads::One => 1,
            Threads::All => all.max(1),
        }
    }
}

/// Writes `report` as pretty JSON to `dir/<stem>-<YYYY-MM-DD>.json` (today,
/// local time) and returns the path.
pub fn record<T: Serialize>(report: &T, dir: &Path, stem: &str) -> Result<PathBuf> {
    let path = dir.join(format!("{stem}-{}.json", today()));
    write_json(report, &path)?;
    Ok(path)
}

/// Today's date (`2026-11-26`), as recorded files are named.
pub fn today() -> String {
    jiff::Zoned::now().strftime("%Y-%m-%d").to_string()
}

/// Writes `report` as pretty JSON to `path`, creating its folder.
pub fn write_json<T: Serialize>(report: &T, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(report)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Whether `name` passes a `--matrix` filter (empty: everything).
pub fn wanted(filter: &[String], name: &str) -> bool {
    filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(name))
}

/// `--matrix` matching none, refused with the names it picks from: the
/// shared folder's matrices, then the suite's generated ones (`generated`).
pub fn no_matrix_matches(filter: &[String], generated: &[&str]) -> anyhow::Error {
    let mut names: Vec<String> = spindle_formats::data::shared_matrices()
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    names.extend(generated.iter().map(|g| g.to_string()));
    anyhow::anyhow!("no matrix matches --matrix {} (the matrices: {})", filter.join(", "), names.join(", "))
}

/// Times `run` on `state` with the driver's protocol
/// ([`spindle::timing::wall_clock`]): `opts.warmup` untimed calls, then
/// `opts.repeats` timed ones; `reset` runs before every call, outside the
/// timed region. The baselines in Rust are timed with this, our kernels
/// with the driver's own `Compiled::time`, which is the same loop.
pub fn time_state<S: ?Sized>(
    opts: TimingOptions,
    state: &mut S,
    mut reset: impl FnMut(&mut S),
    mut run: impl FnMut(&mut S),
) -> Timing {
    // Both closures need the state; the driver's loop calls them in turn.
    let state = RefCell::new(state);
    let timed = spindle::timing::wall_clock(
        opts,
        || {
            reset(&mut state.borrow_mut());
            Ok(())
        },
        || {
            run(&mut state.borrow_mut());
            Ok(())
        },
    );
    // Neither closure fails, so neither does the loop.
    timed.unwrap_or_else(|_| Timing::of(Vec::new(), 1))
}

/// The median seconds of `repeats` timed calls of `run` on `state`, after
/// one warm-up; `reset` runs before each call, outside the timed region.
pub fn time_reset<S: ?Sized>(
    repeats: usize,
    state: &mut S,
    reset: impl FnMut(&mut S),
    run: impl FnMut(&mut S),
) -> f64 {
    let opts = TimingOptions { warmup: 1, repeats: repeats.max(1) };
    time_state(opts, state, reset, run).median_ms / 1e3
}

/// Median wall time in seconds of `repeats` runs of `f` after one warm-up
/// run. The result of each run is dropped outside the timed region.
pub fn median_seconds<T>(repeats: usize, mut f: impl FnMut() -> T) -> f64 {
    let mut last = None;
    time_reset(
        repeats,
        &mut last,
        // The previous result is dropped here, outside the clock.
        |last| *last = None,
        |last| *last = Some(f()),
    )
}

/// Max |got − want| / max |want| through the driver's check
/// ([`spindle::check::max_rel_error`]); infinite when the lengths differ or
/// a value is not finite where the reference is.
pub fn rel_error(got: &[f64], want: &[f64]) -> f64 {
    let as_array = |v: &[f64]| ndarray::ArrayD::from_shape_vec(vec![v.len()], v.to_vec());
    match (as_array(got), as_array(want)) {
        (Ok(g), Ok(w)) => spindle::check::max_rel_error(&g, &w),
        _ => f64::INFINITY,
    }
}

/// `rel_error` for f32 outputs.
pub fn rel_error_f32(got: &[f32], want: &[f32]) -> f64 {
    let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    rel_error(&widen(got), &widen(want))
}

/// The geometric mean of positive finite values (`None` when there are
/// none).
pub fn geomean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let logs: Vec<f64> = values.into_iter().filter(|v| v.is_finite() && *v > 0.0).map(f64::ln).collect();
    (!logs.is_empty()).then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_keep_three_significant_digits() {
        let ms = |x: f64| ms_text(Some(x));
        assert_eq!(
            [ms(12.3456), ms(0.1234), ms(0.01234), ms(0.000234), ms(0.0)],
            ["12.346", "0.123", "0.0123", "0.000234", "0.000"]
        );
        assert_eq!(ms_text(None), "-");
        assert_eq!(ms_text(Some(f64::NAN)), "-");
    }

    #[test]
    fn machine_round_trips_through_json() {
        let m = machine();
        assert!(m.threads >= 1);
        let back: Machine = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        assert_eq!(serde_json::to_string(&Threads::All).unwrap(), "\"all\"");
    }

    #[test]
    fn timing_resets_outside_the_clock_and_counts_runs() {
        let mut state = (0usize, 0usize);
        let t = time_state(
            TimingOptions { warmup: 2, repeats: 3 },
            &mut state,
            |s| s.0 += 1,
            |s| {
                assert_eq!(s.0, s.1 + 1, "a reset before every run");
                s.1 += 1;
            },
        );
        assert_eq!((state, t.runs), ((5, 5), 3));
        assert!(median_seconds(3, || vec![0u8; 16]) >= 0.0);
    }

    #[test]
    fn errors_and_geomeans() {
        assert_eq!(rel_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_error_f32(&[1.0, 2.1], &[1.0, 2.0]) - 0.05).abs() < 1e-6);
        assert!(rel_error(&[1.0], &[1.0, 2.0]).is_infinite());
        assert!(rel_error(&[f64::NAN, 2.0], &[1.0, 2.0]).is_infinite());
        assert!((geomean([2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
        assert_eq!(geomean([f64::NAN, -1.0]), None);
        assert!(wanted(&[], "cora") && wanted(&["CORA".into()], "cora") && !wanted(&["x".into()], "cora"));
    }
}
