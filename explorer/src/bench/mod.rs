//! `spindle bench`: our code and its baselines timed in one process, so
//! ratios hold even where absolute times move.

mod formats;
pub(crate) mod gpu;
pub(crate) mod spmm;

use std::time::Instant;

use anyhow::Result;

#[derive(Debug, clap::Subcommand)]
pub enum Suite {
    /// COO→CSR and COO→GroupCOO(g*) against sprs TriMat→CSR, on ca-CondMat
    /// (when the shared data folder is present) and a generated 1M-nonzero
    /// power-law matrix.
    Formats {
        /// Timed repetitions per measurement (the median is reported).
        #[arg(long, default_value_t = 11)]
        repeats: usize,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// Also write the JSON to this folder as `formats-<date>.json`
        /// (the repository keeps them in `bench/results/`).
        #[arg(long)]
        record: Option<std::path::PathBuf>,
    },
    /// SpMM C = A·B (N = 64, f32): our C kernels (COO, CSR, GroupCOO over
    /// g) against sprs and faer, on one thread and all cores, with F(g)
    /// and achieved bandwidth against a measured copy.
    Spmm(spmm::SpmmArgs),
    /// Block-sparse SpMM on the GPU: A 4096x4096 with 32x32 blocks at
    /// sparsity 50-99% in BlockGroupCOO (Tensor Cores, f16) against
    /// cuSPARSE BSR and cuBLAS dense GEMM.
    Bsr(gpu::BsrArgs),
}

pub fn run(suite: Suite) -> Result<()> {
    match suite {
        Suite::Formats { repeats, json, record } => formats::run(repeats.max(1), json, record.as_deref()),
        Suite::Spmm(args) => spmm::run(args),
        Suite::Bsr(args) => gpu::bsr(&args),
    }
}

/// Median wall time of `repeats` runs of `f` after one warm-up run. The
/// result of each run is dropped outside the timed region.
pub fn median_seconds<T>(repeats: usize, mut f: impl FnMut() -> T) -> f64 {
    drop(f());
    let mut times: Vec<f64> = (0..repeats)
        .map(|_| {
            let start = Instant::now();
            let out = f();
            let t = start.elapsed().as_secs_f64();
            drop(out);
            t
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Where and when a benchmark ran.
pub fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    serde_json::json!({
        "cpu": cpu,
        "threads": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "commit": commit,
        "date": jiff::Timestamp::now().to_string(),
    })
}
