//! `spindle bench spmm`: arguments and tables of the SpMM suites
//! (`spindle_bench::spmm` on the CPU, `spindle_bench::gpu` on a GPU).

use std::path::PathBuf;

use anyhow::{Result, bail};
use spindle_bench::Threads;
use spindle_bench::spmm::{
    BaselineResult, MatrixResult, PythonMode, RowKind, RowTime, SUMMARY_BASELINES, Schedules, SpmmOptions,
    SpmmReport,
};

// The notebook's SpMM cells use the suite's tiling rule and Rust baselines.
pub(crate) use spindle_bench::spmm::{COO_P_CAP, GROUPCOO_P_CAP, auto_tile_p, faer_baselines};
pub(crate) use spindle_bench::time_reset;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// C11 + OpenMP on the CPU.
    C,
    /// CUDA on an NVIDIA GPU: GroupCOO over g (N = 128) against cuSPARSE
    /// CSR, in f32 and f16.
    Cuda,
}

/// Whether the Python baselines (SciPy, MKL, GraphBLAS) run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PythonArg {
    /// Install them on first use into target/python-baselines of the
    /// workspace the binary was built in, or $SPINDLE_PYTHON_BASELINES (a
    /// venv, ~1.4 GB, about a minute, once; the install line prints the
    /// folder), then run them; skipped with the reason when python3, venv,
    /// pip or a wheel is unavailable.
    Install,
    /// Run them when already installed; skip otherwise.
    IfInstalled,
    /// Do not run them.
    Off,
}

#[derive(Debug, clap::Args)]
pub struct SpmmArgs {
    /// The backend our kernels run on.
    #[arg(long, value_enum, default_value_t = Target::C)]
    pub target: Target,
    /// Timed repetitions per measurement, after one warm-up (the median is
    /// reported, with min and max in the JSON).
    #[arg(long, default_value_t = 11, value_parser = crate::repeats)]
    pub repeats: usize,
    /// Threads for the all-core measurements (1 to 4096; default, or 0: every CPU thread).
    #[arg(long, value_parser = crate::bench_threads)]
    pub threads: Option<usize>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this folder as `spmm-c-<date>.json`
    /// (`spmm-cuda-<date>.json` with --target cuda; the repository keeps
    /// them in `bench/results/`).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Override a variant's schedule: `coo=SCHEDULE`, `csr=SCHEDULE`,
    /// `groupcoo=SCHEDULE`, or a bare SCHEDULE for all of them (e.g.
    /// "tile.p=8 tile.n=64"). GroupCOO's tile.q defaults to g; threads come
    /// from the suite (one, then --threads), not the schedule.
    #[arg(long = "schedule", value_name = "[VARIANT=]SCHEDULE")]
    pub schedules: Vec<String>,
    /// Only these matrices (file stems such as `ca-CondMat`, or
    /// `powerlaw-1M`); all of them when absent.
    #[arg(long = "matrix", value_name = "NAME")]
    pub matrices: Vec<String>,
    /// Also time COO, CSR and GroupCOO (at g = auto's choice and at the
    /// g of smallest F) under tile.p = 1..64 and print that sweep, each
    /// tile.p marked when it is ragged (how the default tile.p was chosen).
    #[arg(long)]
    pub sweep: bool,
    /// Write the C source of each variant of the table (COO, CSR and GroupCOO
    /// per g, under the variants' schedules) to this folder.
    #[arg(long, value_name = "DIR")]
    pub emit_c: Option<PathBuf>,
    /// The Python baselines of the C suite (SciPy, Intel MKL,
    /// SuiteSparse:GraphBLAS, run by python3 with the same timing protocol).
    #[arg(long, value_enum, default_value_t = PythonArg::Install)]
    pub python: PythonArg,
    /// Value types of the CUDA suite (default: f32 and f16).
    #[arg(long = "precision", value_enum)]
    pub precisions: Vec<super::gpu::PrecisionArg>,
    /// CUDA suite: use the default schedule instead of autotuning tiles.
    #[arg(long)]
    pub no_autotune: bool,
}

pub fn run(args: SpmmArgs) -> Result<()> {
    if args.target == Target::Cuda {
        return super::gpu::spmm(&args);
    }
    if !args.precisions.is_empty() || args.no_autotune {
        let flag = if args.no_autotune { "--no-autotune" } else { "--precision" };
        bail!("{flag} is for the CUDA suite (--target cuda); the C suite times f32 under its own schedules");
    }
    let opts = SpmmOptions {
        repeats: args.repeats.max(1),
        threads: args.threads.filter(|&t| t != 0).unwrap_or_else(spindle::CBackend::max_threads),
        schedules: Schedules::with_overrides(&args.schedules)?,
        sweep: args.sweep,
        emit_c: args.emit_c.clone(),
        python: match args.python {
            PythonArg::Install => PythonMode::Install,
            PythonArg::IfInstalled => PythonMode::IfInstalled,
            PythonArg::Off => PythonMode::Off,
        },
        ..SpmmOptions::new()
    };
    let inputs = spindle_bench::spmm::inputs(&args.matrices, |line| eprintln!("{line}"))?;
    let report = spindle_bench::spmm::run(&inputs, &opts, &mut |line| eprintln!("{line}"))?;
    super::finish(
        &report,
        args.json,
        args.record.as_deref(),
        spindle_bench::spmm::RECORD_STEM,
        print_report,
    )?;
    let failed: usize = report.results.iter().map(|m| m.failed.len()).sum();
    if failed > 0 {
        bail!(
            "{} failed (the FAILED lines above); the report has the others",
            crate::counted(failed, "variant")
        );
    }
    Ok(())
}

use super::ms;

fn ratio(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "-".into(), |x| format!("{x:.2}x"))
}

fn frac(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "-".into(), |x| format!("{:.0}%", x * 100.0))
}

/// The table of one matrix's baselines: a line per library and format,
/// with its one-thread and all-thread times.
fn print_baselines(m: &MatrixResult) {
    let sprs_1 = m.baseline_ms("sprs", Threads::One);
    let faer_all = m.baseline_ms("faer", Threads::All);
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for b in &m.baselines {
        if !seen.contains(&(b.library.as_str(), b.format.as_str())) {
            seen.push((b.library.as_str(), b.format.as_str()));
        }
    }
    for (library, format) in seen {
        let find = |t: Threads| -> Option<&BaselineResult> {
            m.baselines.iter().find(|b| b.library == library && b.format == format && b.threads == t)
        };
        let (one, all) = (find(Threads::One), find(Threads::All));
        let label = format!("{} {format}", title(library));
        if let Some(e) = one.or(all).and_then(|b| b.error.as_deref()) {
            println!("  {label:<18} not run: {e}");
            continue;
        }
        let t1 = one.and_then(BaselineResult::median_ms);
        let tn = all.and_then(BaselineResult::median_ms);
        let failed = [one, all].into_iter().flatten().any(|b| b.passed() == Some(false));
        println!(
            "  {:<18} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}{}",
            label,
            ms(t1),
            ms(tn),
            ratio(sprs_1.zip(t1).map(|(s, t)| s / t)),
            ratio(faer_all.zip(tn).map(|(f, t)| f / t)),
            frac(one.and_then(|b| b.bw_fraction)),
            frac(all.and_then(|b| b.bw_fraction)),
            if failed { "  FAILED the check" } else { "" },
        );
    }
}

/// A library's name in tables.
fn title(library: &str) -> &str {
    match library {
        "scipy" => "SciPy",
        "mkl" => "MKL",
        "graphblas" => "GraphBLAS",
        other => other,
    }
}

fn print_report(r: &SpmmReport) {
    let threads = r.threads;
    let all = spindle_bench::threads_text(threads);
    println!(
        "spmm C[m,n] += A[m,k] * B[k,n], N = {}, f32; median of {} repeats after {} warm-up; 1 thread and {all}",
        r.n, r.repeats, r.warmup
    );
    println!(
        "copy bandwidth ({} MiB, read+write): 1 thread {:.1} GB/s, {all} {:.1} GB/s",
        r.copy.bytes >> 20,
        r.copy.one_thread_gbs,
        r.copy.all_threads_gbs,
    );
    println!("bandwidth model: {}", r.bandwidth_model);
    println!(
        "vs sprs: sprs's one-thread time over the row's one-thread time (sprs runs on one thread); vs faer: faer's \
         {threads}-thread time over the row's {threads}-thread time"
    );
    println!("timing: {}", r.timing_protocol);
    println!(
        "load average before/after: {} / {}",
        r.loadavg_before.as_deref().unwrap_or("?"),
        r.loadavg_after.as_deref().unwrap_or("?")
    );
    match (&r.python.skipped, &r.python.env) {
        (Some(why), _) => println!("python baselines: SKIPPED: {why}"),
        (None, Some(env)) => {
            let versions: Vec<String> = r.python.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!(
                "python baselines: python {} in {} ({})",
                r.python.python.as_deref().unwrap_or("?"),
                env.display(),
                versions.join(", ")
            );
        }
        (None, None) => {}
    }
    for m in &r.results {
        println!();
        println!(
            "{}  {}x{}  nnz {}  max row {}  g* {:.2} (between {} and {}), F-best g {}",
            m.matrix,
            m.rows,
            m.cols,
            m.nnz,
            m.max_occupancy,
            m.g_star,
            m.g_star_pow2[0],
            m.g_star_pow2[1],
            m.g_best_f,
        );
        println!(
            "  {:<18} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>12} {:>8}",
            "variant", "1t ms", "all ms", "vs sprs", "vs faer", "bw 1t", "bw all", "F(g)/min", "padding"
        );
        print_baselines(m);
        let f_min = m.groupcoo.f_of_g.values().min().map_or(f64::NAN, |&f| f as f64);
        for v in &m.variants {
            println!(
                "  {:<18} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>12} {:>8}",
                v.variant,
                ms(Some(v.one_thread.median_ms)),
                ms(Some(v.all_threads.median_ms)),
                ratio(v.vs_sprs_one_thread),
                ratio(v.vs_faer_all_threads),
                frac(Some(v.one_thread_bw_fraction)),
                frac(Some(v.all_threads_bw_fraction)),
                v.f_of_g.map_or_else(|| "-".into(), |f| format!("{:.2}", f as f64 / f_min)),
                frac(v.padding),
            );
        }
        for f in &m.failed {
            println!("  {:<18} FAILED: {}", f.variant, f.error);
        }
        for s in &m.groupcoo.skipped {
            println!("  groupcoo g={:<6} skipped ({}), F(g) = {}", s.g, s.reason, s.f_of_g);
        }
        let yes_no = |v: Option<bool>| match v {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        let g = |g: Option<usize>| g.map_or_else(|| "-".into(), |g| g.to_string());
        println!(
            "  F(g): fastest g {} (1 thread), {} ({all}); within a factor of 2 of g*: {}, {}",
            g(m.groupcoo.fastest_g_one_thread),
            g(m.groupcoo.fastest_g_all_threads),
            yes_no(m.groupcoo.fastest_g_within_2x_of_g_star_one_thread),
            yes_no(m.groupcoo.fastest_g_within_2x_of_g_star_all_threads),
        );
        let sprs_1 = m.baseline_ms("sprs", Threads::One);
        let faer_all = m.baseline_ms("faer", Threads::All);
        // The user row names its tuned schedules, the best row its variants.
        for (label, row, note, by_schedule) in [
            ("as a user gets it", &m.user, "`spindle run` with --format A=csr and no schedule", true),
            ("best variant", &m.best, "the fastest of the variants above and the user's kernel", false),
        ] {
            let (one, all): (&RowTime, &RowTime) = (&row.one_thread, &row.all_threads);
            println!(
                "  {:<18} {:>10} {:>10} {:>9} {:>9}   ({note}: {} / {})",
                label,
                ms(Some(one.timing.median_ms)),
                ms(Some(all.timing.median_ms)),
                ratio(sprs_1.map(|s| s / one.timing.median_ms)),
                ratio(faer_all.map(|f| f / all.timing.median_ms)),
                if by_schedule { one.schedule.as_str() } else { one.variant.as_str() },
                if by_schedule { all.schedule.as_str() } else { all.variant.as_str() },
            );
        }
        if !m.sweep.is_empty() {
            println!("  tile.p sweep (ms, 1 thread / {all}):");
            for row in &m.sweep {
                println!(
                    "    {:<16} tile.p={:<3} {:>10} {:>10}{}",
                    row.variant,
                    row.tile_p,
                    ms(Some(row.one_thread.median_ms)),
                    ms(Some(row.all_threads.median_ms)),
                    if row.ragged { "  (ragged)" } else { "" },
                );
            }
        }
    }
    print_summary(r);
    println!();
    println!("goal: {}", r.goal);
    for note in &r.notes {
        println!("note: {note}");
    }
}

/// Geometric means, then the per-matrix ratios against MKL and SciPy.
fn print_summary(r: &SpmmReport) {
    let s = &r.summary;
    println!();
    println!(
        "summary: geometric mean of baseline time / Spindle time over the {} {} (> 1: Spindle is faster)",
        s.matrices.len(),
        s.over
    );
    println!(
        "  {:<12} {:>10} {:>10} {:>10} {:>10}",
        "baseline",
        "user 1t",
        "best 1t",
        format!("user {}t", r.threads),
        format!("best {}t", r.threads)
    );
    for baseline in SUMMARY_BASELINES {
        let cell = |row: RowKind, t: Threads| ratio(s.ratio(row, baseline, t).and_then(|x| x.geomean));
        println!(
            "  {:<12} {:>10} {:>10} {:>10} {:>10}",
            title(baseline),
            cell(RowKind::User, Threads::One),
            cell(RowKind::Best, Threads::One),
            cell(RowKind::User, Threads::All),
            cell(RowKind::Best, Threads::All),
        );
    }
    println!("  per matrix (user / best):");
    // (Wide enough for two three-digit ratios, "143.87x / 268.23x".)
    println!(
        "  {:<22} {:>19} {:>19} {:>19} {:>19}",
        "matrix",
        "vs MKL 1t",
        format!("vs MKL {}t", r.threads),
        "vs SciPy 1t",
        format!("vs SciPy {}t", r.threads)
    );
    for m in &s.matrices {
        let cell = |baseline: &str, t: Threads| {
            let get = |row| s.ratio(row, baseline, t).and_then(|x| x.per_matrix.get(m).copied());
            format!("{} / {}", ratio(get(RowKind::User)), ratio(get(RowKind::Best)))
        };
        println!(
            "  {:<22} {:>19} {:>19} {:>19} {:>19}",
            m,
            cell("mkl", Threads::One),
            cell("mkl", Threads::All),
            cell("scipy", Threads::One),
            cell("scipy", Threads::All),
        );
    }
}
