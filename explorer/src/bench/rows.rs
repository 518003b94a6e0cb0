//! `spindle bench rows`: CSR SpMM as the level path's row loops against the
//! tile path's expanded rows (`spindle_bench::rows`).

use std::path::PathBuf;

use anyhow::Result;
use spindle_bench::rows::{GOAL, RowsOptions, RowsReport};

#[derive(Debug, clap::Args)]
pub struct RowsArgs {
    /// Timed repetitions per measurement, after one warm-up.
    #[arg(long, default_value_t = 11, value_parser = crate::repeats)]
    pub repeats: usize,
    /// Threads for the all-thread measurements (1 to 4096; default, or 0: every CPU thread).
    #[arg(long, value_parser = crate::bench_threads)]
    pub threads: Option<usize>,
    /// Only these matrices (file stems such as `ca-CondMat`, or `powerlaw-1M`).
    #[arg(long = "matrix", value_name = "NAME")]
    pub matrices: Vec<String>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this folder as `rows-<date>.json`.
    #[arg(long)]
    pub record: Option<PathBuf>,
}

pub fn run(args: RowsArgs) -> Result<()> {
    let opts = RowsOptions {
        timing: spindle::TimingOptions { warmup: 1, repeats: args.repeats.max(1) },
        threads: args.threads.filter(|&t| t != 0).unwrap_or_else(spindle::c::cpu_threads),
        filter: args.matrices,
    };
    let report = spindle_bench::rows::run(&opts, &mut |line| eprintln!("{line}"))?;
    super::finish(&report, args.json, args.record.as_deref(), "rows", print_table)
}

fn print_table(report: &RowsReport) {
    let t = report.threads;
    println!("{} (N = {}, f32, A in CSR), medians", report.statement, report.n);
    println!(
        "{:<22} {:>9} {:>11} {:>11} {:>11} {:>11} {:>9} {:>9} {:>9}",
        "matrix",
        "nnz",
        "rows 1t",
        "tiles 1t",
        &format!("rows {t}t"),
        &format!("tiles {t}t"),
        "1t",
        &format!("{t}t"),
        "scaling"
    );
    for r in &report.results {
        println!(
            "{:<22} {:>9} {:>11} {:>11} {:>11} {:>11} {:>8.2}x {:>8.2}x {:>8.2}x",
            r.matrix,
            r.nnz,
            super::ms(Some(r.levels_one_thread.median_ms)),
            super::ms(Some(r.tiles_one_thread.median_ms)),
            super::ms(Some(r.levels_all_threads.median_ms)),
            super::ms(Some(r.tiles_all_threads.median_ms)),
            r.speedup(false),
            r.speedup(true),
            r.scaling()
        );
    }
    let g = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}x"));
    println!(
        "geomean tiles/rows: {} on 1 thread, {} on {t}",
        g(report.geomean_one_thread),
        g(report.geomean_all_threads)
    );
    println!("goal: {GOAL}");
}
