//! `spindle bench workspaces`: arguments, tables and the sweeps' plots of
//! the sparse-workspace suite (`spindle_bench::workspaces`).

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use plotters::prelude::*;
use spindle_bench::workspaces::{SweepPoint, WorkspacesOptions, WorkspacesReport};

#[derive(Debug, clap::Args)]
pub struct WorkspacesArgs {
    /// Timed repetitions per measurement, after one warm-up (the median is
    /// reported).
    #[arg(long, default_value_t = 5, value_parser = crate::repeats)]
    pub repeats: usize,
    /// Threads of the parallel ISM's all-thread run (1 to 4096; default, or
    /// 0: every CPU thread).
    #[arg(long, value_parser = crate::bench_threads)]
    pub threads: Option<usize>,
    /// Only these matrices (file stems such as `ca-CondMat`).
    #[arg(long = "matrix", value_name = "NAME")]
    pub matrices: Vec<String>,
    /// Skip SciPy and MKL (otherwise installed on first use into
    /// target/python-baselines).
    #[arg(long)]
    pub no_python: bool,
    /// Only the policies on the matrices: skip the synthetic sweeps, the
    /// ablation and the parallel ISM.
    #[arg(long)]
    pub no_sweeps: bool,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this folder as `workspaces-<date>.json`, and
    /// the sweeps' plots beside it (`workspaces-<date>-rowwise.svg`,
    /// `-outer.svg`).
    #[arg(long)]
    pub record: Option<PathBuf>,
}

pub fn run(args: WorkspacesArgs) -> Result<()> {
    let opts = WorkspacesOptions {
        timing: spindle::TimingOptions { warmup: 1, repeats: args.repeats.max(1) },
        threads: args.threads.filter(|&t| t != 0).unwrap_or_else(spindle::c::cpu_threads),
        python: !args.no_python,
        filter: args.matrices,
        sweeps: !args.no_sweeps,
    };
    let report = spindle_bench::workspaces::run(&opts, &mut |line| eprintln!("{line}"))?;
    super::finish(&report, args.json, args.record.as_deref(), "workspaces", print_tables)?;
    if let Some(dir) = &args.record {
        let date = spindle_bench::today();
        for (points, what, title) in [
            (&report.row_sweep, "rowwise", "Row-wise SpGEMM, first-order workspace (cf. paper 001 Fig. 15)"),
            (&report.outer_sweep, "outer", "Outer-product SpGEMM, second-order workspace (cf. Fig. 16)"),
        ] {
            if !points.is_empty() {
                let path = dir.join(format!("workspaces-{date}-{what}.svg"));
                plot(points, title, &path)?;
                eprintln!("plotted {}", path.display());
            }
        }
    }
    Ok(())
}

fn print_tables(report: &WorkspacesReport) {
    println!(
        "C[i,j] = A[i,k] * B[k,j], row-wise, A·shift(Aᵀ) in CSR, f64, one thread, medians of {}",
        report.repeats
    );
    let policies: Vec<String> = report
        .matrices
        .first()
        .map(|m| m.variants.iter().map(|v| v.schedule.trim_start_matches("workspace=").to_string()).collect())
        .unwrap_or_default();
    print!("{:<22} {:>8}", "matrix", "dens(C)");
    for p in &policies {
        print!(" {:>9}", format!("{p} ms"));
    }
    println!(
        " {:>9} {:>9} {:>9} {:>8} {:>10} {:>10}",
        "sprs", "SciPy", "MKL", "best/SP", "dense B", "best B"
    );
    use super::ms;
    for m in &report.matrices {
        print!("{:<22} {:>8.5}", m.matrix, m.density_c);
        for v in &m.variants {
            print!(" {:>9}", ms(Some(v.timing.median_ms)));
        }
        let best = m.best_sparse();
        let vs = m.scipy_ms.map_or("-".to_string(), |s| format!("{:.2}x", s / best.timing.median_ms));
        println!(
            " {:>9} {:>9} {:>9} {:>8} {:>10} {:>10}",
            ms(Some(m.sprs_ms)),
            ms(m.scipy_ms),
            ms(m.mkl_ms),
            vs,
            m.variants[0].peak_bytes,
            best.peak_bytes
        );
    }
    for (points, what) in [
        (&report.row_sweep, "row-wise sweep (x: output width)"),
        (&report.outer_sweep, "outer-product sweep (x: K)"),
    ] {
        if points.is_empty() {
            continue;
        }
        println!("\n{what}");
        print!("{:>9} {:>10} {:>7}", "x", "products", "dedup");
        for v in &points[0].variants {
            print!(" {:>10}", v.schedule.trim_start_matches("workspace="));
        }
        println!(" {:>12}", "dense/sparse");
        for p in points {
            print!("{:>9} {:>10} {:>7.2}", p.x, p.products, p.deduplication);
            for v in &p.variants {
                print!(" {:>10}", ms(Some(v.timing.median_ms)));
            }
            println!(" {:>12.2}", p.sparse_speedup());
        }
    }
    for a in &report.ablation {
        println!("\nablation, outer-product SpGEMM on {} ({} products)", a.matrix, a.products);
        for v in &a.variants {
            println!("  {:<90} {:>9} ms {:>11} B", v.schedule, ms(Some(v.timing.median_ms)), v.peak_bytes);
        }
    }
    if !report.parallel.is_empty() {
        println!("\nparallel ISM (library, hash policy) on the outer product's inserts");
        for p in &report.parallel {
            println!(
                "  {:<22} {:>10} products: {:>9} ms on 1 thread, {:>9} ms on {}: {:.2}x",
                p.input,
                p.products,
                ms(Some(p.one_thread.median_ms)),
                ms(Some(p.all_threads.median_ms)),
                p.threads,
                p.speedup
            );
        }
    }
    let s = &report.summary;
    println!();
    for (goal, met) in report.goals.iter().zip(&s.goals_met) {
        let met = match met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        println!("goal: {goal}: {met}");
    }
    println!(
        "best sparse >= SciPy on {} of {} matrices (geomean {}); dense geomean {}; parallel ISM {}",
        s.best_sparse_wins_vs_scipy,
        s.matrices_with_scipy,
        s.best_sparse_geomean_vs_scipy.map_or("-".into(), |g| format!("{g:.2}x")),
        s.dense_geomean_vs_scipy.map_or("-".into(), |g| format!("{g:.2}x")),
        s.parallel_speedup.map_or("-".into(), |g| format!("{g:.2}x")),
    );
    // (Goal 4 is not measured where no matrix's C is that sparse.)
    if s.goals_met.get(3).is_some_and(Option::is_none) {
        println!("within the dense workspace's bytes: not measured (no matrix here has C sparser than 10%)");
        return;
    }
    println!(
        "within the dense workspace's bytes on every matrix with C sparser than 10%: {}; the fastest sparse \
         policy exceeds them on {}",
        if s.policies_within_dense_memory.is_empty() {
            "no policy".into()
        } else {
            s.policies_within_dense_memory.join(", ")
        },
        if s.fastest_memory_misses.is_empty() { "none".into() } else { s.fastest_memory_misses.join(", ") },
    );
}

/// Time against deduplication, a line per variant, log-log.
fn plot(points: &[SweepPoint], title: &str, path: &Path) -> Result<()> {
    crate::notebook::plot::register_fonts()?;
    let draw = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let xs = points.iter().map(|p| p.deduplication);
    let ys = points.iter().flat_map(|p| p.variants.iter().map(|v| v.timing.median_ms));
    let (x0, x1) = (xs.clone().fold(f64::MAX, f64::min), xs.fold(0.0, f64::max));
    let (y0, y1) = (ys.clone().fold(f64::MAX, f64::min), ys.fold(0.0, f64::max));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x0 * 0.9..x1 * 1.1).log_scale(), (y0 * 0.8..y1 * 1.25).log_scale())
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc("deduplication (products per output entry)")
        .y_desc("median time (ms)")
        .draw()
        .map_err(|e| draw(&e))?;
    let colours =
        [RGBColor(214, 39, 40), RGBColor(31, 119, 180), RGBColor(44, 160, 44), RGBColor(148, 103, 189)];
    for (n, variant) in points[0].variants.iter().enumerate() {
        let colour = colours[n % colours.len()];
        let line: Vec<(f64, f64)> =
            points.iter().map(|p| (p.deduplication, p.variants[n].timing.median_ms)).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), colour.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(variant.schedule.trim_start_matches("workspace="))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        chart
            .draw_series(line.into_iter().map(|p| Circle::new(p, 3, colour.filled())))
            .map_err(|e| draw(&e))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}
