//! `spindle bench spgemm`: arguments and table of the SpGEMM suite
//! (`spindle_bench::spgemm`).

use std::path::PathBuf;

use anyhow::Result;
use spindle_bench::spgemm::{GOAL, SpgemmOptions, SpgemmReport};

#[derive(Debug, clap::Args)]
pub struct SpgemmArgs {
    /// Timed repetitions per measurement, after one warm-up (the median is
    /// reported).
    #[arg(long, default_value_t = 7, value_parser = crate::repeats)]
    pub repeats: usize,
    /// Threads for the all-thread measurements (1 to 4096; default, or 0: every CPU thread).
    #[arg(long, value_parser = crate::bench_threads)]
    pub threads: Option<usize>,
    /// Only these matrices (file stems such as `ca-CondMat`).
    #[arg(long = "matrix", value_name = "NAME")]
    pub matrices: Vec<String>,
    /// Skip SciPy and MKL (otherwise installed on first use into
    /// target/python-baselines, as `bench spmm` does).
    #[arg(long)]
    pub no_python: bool,
    /// Our kernel's workspace: auto (dense unless the output is wider than
    /// 2^24 columns), dense, or an ISM policy (bucket, hash, coord, map,
    /// vector).
    #[arg(long, default_value = "auto", value_parser = ["auto", "dense", "bucket", "hash", "coord", "map", "vector"])]
    pub workspace: String,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this folder as `spgemm-<date>.json`.
    #[arg(long)]
    pub record: Option<PathBuf>,
}

pub fn run(args: SpgemmArgs) -> Result<()> {
    let opts = SpgemmOptions {
        timing: spindle::TimingOptions { warmup: 1, repeats: args.repeats.max(1) },
        threads: args.threads.filter(|&t| t != 0).unwrap_or_else(spindle::c::cpu_threads),
        python: !args.no_python,
        workspace: args.workspace,
        filter: args.matrices,
    };
    let report = spindle_bench::spgemm::run(&opts, &mut |line| eprintln!("{line}"))?;
    super::finish(&report, args.json, args.record.as_deref(), "spgemm", print_table)
}

fn print_table(report: &SpgemmReport) {
    let t = report.threads;
    println!(
        "{} ({}), workspace={}, medians of {} runs",
        report.statement, report.setup, report.workspace, report.repeats
    );
    println!(
        "{:<22} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "matrix",
        "nnz(A)",
        "nnz(C)",
        "ours 1t",
        &format!("ours {t}t"),
        "sprs",
        "scipy",
        "mkl 1t",
        &format!("mkl {t}t"),
        "vs scipy",
        "ws KiB"
    );
    use super::ms;
    for r in &report.results {
        let base = |lib: &str, threads: usize| r.baseline(lib, threads).and_then(|b| b.median_ms);
        println!(
            "{:<22} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9.1}",
            r.matrix,
            r.nnz_a,
            r.nnz_c,
            ms(Some(r.spindle_one_thread.median_ms)),
            ms(Some(r.spindle_all_threads.median_ms)),
            ms(base("sprs", 1)),
            ms(base("scipy", 1)),
            ms(base("mkl", 1)),
            ms(base("mkl", t)),
            r.speedup("scipy", 1, t).map_or("-".to_string(), |x| format!("{x:.2}x")),
            r.workspace_bytes as f64 / 1024.0,
        );
    }
    let s = &report.summary;
    let g = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}x"));
    println!(
        "one thread: {} of {} matrices at >= 1.0x SciPy; geomean vs SciPy {}, vs sprs {}, vs MKL {}; on {t} threads vs MKL {}",
        s.wins_vs_scipy,
        s.matrices_with_scipy,
        g(s.geomean_vs_scipy),
        g(s.geomean_vs_sprs),
        g(s.geomean_vs_mkl_one_thread),
        g(s.geomean_vs_mkl_all_threads)
    );
    println!();
    println!("{} (D = A with its columns shifted by one; all CSR), one thread", spindle_bench::spgemm::ADD);
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "matrix", "nnz(C)", "ours", "sprs", "scipy", "vs scipy"
    );
    for r in &report.results {
        let scipy = r.baseline("scipy-add", 1).and_then(|b| b.median_ms);
        println!(
            "{:<22} {:>10} {:>10} {:>10} {:>10} {:>9}",
            r.matrix,
            r.add.nnz_c,
            ms(Some(r.add.spindle_one_thread.median_ms)),
            ms(Some(r.add.sprs_ms)),
            ms(scipy),
            r.speedup("scipy-add", 1, t).map_or("-".to_string(), |x| format!("{x:.2}x"))
        );
    }
    println!(
        "C = A + D, one thread: geomean vs SciPy {}, vs sprs {}",
        g(s.add_geomean_vs_scipy),
        g(s.add_geomean_vs_sprs)
    );
    for note in &report.notes {
        println!("note: {note}");
    }
    println!(
        "goal: {GOAL}{}",
        match s.goal_met {
            Some(true) => " (met)",
            Some(false) => " (not met)",
            None => "",
        }
    );
}
