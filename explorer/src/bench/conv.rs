//! `spindle bench conv`: arguments, tables and plots of the sparse
//! convolution suite (`spindle_bench::conv`).

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use plotters::prelude::*;
use spindle_bench::conv::{ConvCase, ConvInput, ConvOptions, ConvReport, Run};

/// A case's time of one variant (ms).
type Metric<'a> = &'a dyn Fn(&ConvCase) -> f64;

#[derive(Debug, clap::Args)]
pub struct ConvArgs {
    /// Timed repetitions per measurement, after one warm-up (the median is
    /// reported).
    #[arg(long, default_value_t = 5, value_parser = crate::repeats)]
    pub repeats: usize,
    /// Threads of the all-thread runs (1 to 4096; default, or 0: every CPU thread).
    #[arg(long, value_parser = crate::bench_threads)]
    pub threads: Option<usize>,
    /// Which convolutions, comma-separated: 1 (O[i] = I[i+p] * F[p]), 2,
    /// 3.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub dims: Vec<usize>,
    /// Sparsities of the input in %, comma-separated (default
    /// 0,20,40,60,80,90,95,99,99.9; with --quick 0,90,99.9).
    #[arg(long, value_delimiter = ',')]
    pub sparsities: Vec<f64>,
    /// Small sizes for a smoke test: 1-D 9,999, 2-D 99x99, 3-D 19^3, at
    /// 0, 90 and 99.9 % unless --sparsities says otherwise.
    #[arg(long)]
    pub quick: bool,
    /// The 1-D input's format.
    #[arg(long = "format-1d", default_value = "c")]
    pub format_1d: String,
    /// The 2-D input's format (csr, dcsr, coo, dd, dc, ...).
    #[arg(long = "format-2d", default_value = "csr")]
    pub format_2d: String,
    /// The 3-D input's format (csf, dcc, ddc, ...).
    #[arg(long = "format-3d", default_value = "csf")]
    pub format_3d: String,
    /// Tune the dense convolution in memory (otherwise the tuned schedule
    /// is cached per shape in the driver's cache, as `spindle run` does).
    #[arg(long)]
    pub tune_in_memory: bool,
    /// Skip paper 002's own comparison with TACO-UCF (a DCCC NHWC layer,
    /// 1x256x256x64 to 64 channels, at 90.4-99.9% sparsity).
    #[arg(long)]
    pub no_paper_layer: bool,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this folder as `conv-<date>.json`, and a plot
    /// per convolution beside it (`conv-<date>-1d.svg`, ...).
    #[arg(long)]
    pub record: Option<PathBuf>,
}

pub fn run(args: ConvArgs) -> Result<()> {
    let mut opts = ConvOptions::new(args.quick);
    opts.timing = spindle::TimingOptions { warmup: 1, repeats: args.repeats.max(1) };
    if let Some(threads) = args.threads.filter(|&t| t != 0) {
        opts.threads = threads;
    }
    opts.dims = args.dims;
    if !args.sparsities.is_empty() {
        opts.sparsities = args.sparsities;
    }
    opts.formats = [args.format_1d, args.format_2d, args.format_3d];
    // Each format asked for, checked against its input's order before any
    // run (a bad one failed after the first runs, in the bench's words).
    for (k, format) in opts.formats.iter().enumerate() {
        let dims = k + 1;
        if opts.dims.contains(&dims) {
            let spec: spindle::formats::FormatSpec =
                format.parse().map_err(|e| anyhow!("--format-{dims}d {format}: {e}"))?;
            spec.levels(&vec![8; dims]).map_err(|e| anyhow!("--format-{dims}d {format}: {e}"))?;
        }
    }
    opts.tune_in_memory = args.tune_in_memory;
    opts.paper_layer = !args.no_paper_layer;
    let report = spindle_bench::conv::run(&opts, &mut |line| eprintln!("{line}"))?;
    super::finish(&report, args.json, args.record.as_deref(), "conv", print_tables)?;
    if let Some(dir) = &args.record {
        let date = spindle_bench::today();
        for input in &report.inputs {
            let path = dir.join(format!("conv-{date}-{}d.svg", input.dims));
            plot(input, &path)?;
            eprintln!("plotted {}", path.display());
        }
    }
    // A variant that failed, or a reference check above `--check`'s
    // tolerance for f64 (1e-3), fails the command (after the tables and
    // the record).
    let failures: usize = report.summary.iter().map(|s| s.failures.len()).sum();
    let unchecked =
        report.reference_checks.iter().filter(|r| !r.max_rel_error.is_some_and(|e| e <= 1e-3)).count();
    if failures + unchecked > 0 {
        anyhow::bail!(
            "{failures} runs failed and {unchecked} reference checks did not pass (the FAILURE and FAILED lines above)"
        );
    }
    Ok(())
}

fn ms(run: &Run) -> String {
    match &run.timing {
        Some(t) => super::ms(Some(t.median_ms)),
        None => "fail".into(),
    }
}

fn shape(dims: &[usize]) -> String {
    dims.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}

fn print_tables(report: &ConvReport) {
    let all = report.threads;
    println!(
        "Sparse convolution (paper 002 §6.2-6.3), f64, medians of {} after {} warm-up (ms){}",
        report.repeats,
        report.warmup,
        if report.quick { ", --quick sizes" } else { "" }
    );
    for input in &report.inputs {
        println!(
            "\n{}-D {}: I {} in {}, F {}, O {}; {} legal orders; default order {}",
            input.dims,
            input.statement,
            shape(&input.input_shape),
            input.format,
            shape(&input.filter_shape),
            shape(&input.output_shape),
            input.legal_orders.len(),
            input.default_order
        );
        println!(
            "{:>8} {:>9} | {:>9} {:<14} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>8}",
            "sparsity",
            "nnz",
            "default",
            "best order",
            "best",
            "ucf(def)",
            "ucf(best)",
            "dense",
            "dense(lv)",
            "default",
            "best",
            "ucf(def)",
            "ucf(best)",
            "dense",
            "dense(lv)",
            "plain",
            "agree"
        );
        println!(
            "{:>18} | {:^84} | {:^59} |",
            "",
            "one thread",
            format!("{all} threads, best = the one-thread best order")
        );
        for c in &input.cases {
            let a = &c.all_threads;
            println!(
                "{:>7}% {:>9} | {:>9} {:<14} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} \
                 {:>8.1e}",
                c.sparsity,
                c.nnz,
                c.order(&input.default_order).map_or("-".into(), ms),
                c.best_order,
                c.order(&c.best_order).map_or("-".into(), ms),
                ms(&c.ucf_default),
                ms(&c.ucf_best),
                ms(&c.dense),
                ms(&c.dense_levels),
                ms(&a.default),
                ms(&a.best),
                ms(&a.ucf_default),
                ms(&a.ucf_best),
                ms(&a.dense),
                ms(&a.dense_levels),
                ms(&c.plain),
                c.max_rel_diff
            );
        }
        print_orders(input);
        if let Some(c) = input.cases.first() {
            println!(
                "dense schedule (autotuned): {} | on {all} threads: {} | plain: {}",
                c.dense.schedule, c.all_threads.dense.schedule, c.plain.schedule
            );
            if let Some(note) = &c.dense.note {
                println!("dense: {note}");
            }
        }
    }
    if !report.reference_checks.is_empty() {
        println!("\nagainst the reference evaluator (reduced inputs):");
        for r in &report.reference_checks {
            println!(
                "  {}-D {} at {}%, {:<18} {}",
                r.dims,
                shape(&r.input_shape),
                r.sparsity,
                r.variant,
                match (&r.max_rel_error, &r.error) {
                    (Some(e), _) => format!("max rel error {e:.1e}"),
                    (None, e) => format!("FAILED: {}", e.as_deref().unwrap_or("?")),
                }
            );
        }
    }
    print_summary(report);
}

/// Subsection loops, one thread: a row per order (fastest first over the
/// swept sparsities), a column per sparsity.
fn print_orders(input: &ConvInput) {
    let ranked = spindle_bench::conv::rank(
        &input
            .cases
            .iter()
            .filter(|c| input.sweep_sparsities.contains(&c.sparsity))
            .cloned()
            .collect::<Vec<_>>(),
        &input.legal_orders,
    );
    let swept: Vec<String> = input.sweep_sparsities.iter().map(|s| s.to_string()).collect();
    println!(
        "orders, subsection loops, one thread (ms; * default; fastest first over {} %):",
        swept.join(", ")
    );
    print!("  {:<16}", "order");
    for c in &input.cases {
        print!(" {:>9}", format!("{}%", c.sparsity));
    }
    println!();
    for order in &ranked {
        let star = if *order == input.default_order { "*" } else { " " };
        print!("  {:<16}", format!("{order}{star}"));
        for c in &input.cases {
            print!(" {:>9}", c.order(order).map_or("-".into(), ms));
        }
        println!();
    }
}

fn print_summary(report: &ConvReport) {
    println!();
    // Goal 4 has no threshold: it is reported.
    let met = |m: Option<bool>, goal: usize| match m {
        Some(true) => "met",
        Some(false) => "NOT met",
        None if goal == 3 => "reported",
        None => "not measured",
    };
    let ratio = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}x"));
    if let Some(p) = &report.paper_layer {
        println!(
            "paper 002's setup: {} with I {} in {}, F {}, order {}, one thread (ms):",
            p.statement,
            shape_text(&p.input_shape),
            p.format,
            shape_text(&p.filter_shape),
            p.order
        );
        println!(
            "  {:>9} {:>9} {:>12} {:>12} {:>12} {:>9} {:>12} {:>10} {:>8}",
            "sparsity", "nnz", "subsect", "ucf", "default", "ucf/sub", "out floor", "ucf/floor", "agree"
        );
        for c in &p.cases {
            println!(
                "  {:>8}% {:>9} {:>12.4} {:>12.4} {:>12.4} {:>9} {:>12.4} {:>10} {:>8.1e}",
                c.sparsity,
                c.nnz,
                c.subsect.ms(),
                c.ucf.ms(),
                c.default.ms(),
                ratio(c.ucf_over_subsect),
                c.output_floor.ms(),
                ratio(c.ucf_over_floor),
                c.max_rel_diff
            );
        }
        println!(
            "  (out floor: each output value the input reaches read, added to and stored once, the output \
             zeroed outside the clock as for the kernels; ucf/floor bounds ucf/sub for any kernel writing O)"
        );
        println!();
    }
    for (g, goal) in report.goals.iter().enumerate() {
        println!("goal {}: {goal}: {}", g + 1, met(report.goals_met[g], g));
        for s in &report.summary {
            let line = match g {
                0 => {
                    let per: Vec<String> =
                        s.dense_over_best.iter().map(|(sp, r)| format!("{sp}%: {r:.2}x")).collect();
                    format!(
                        "first sparsity where best order <= dense: {} (dense/best {})",
                        s.crossover_sparsity.map_or("none".into(), |x| format!("{x}%")),
                        per.join(", ")
                    )
                }
                1 => format!(
                    "at {}: ucf/subsections {} in the paper's order ({}), {} in the best order, {} in the default \
                     order",
                    s.ucf_sparsity.map_or("-".into(), |x| format!("{x}%")),
                    ratio(s.ucf_over_subsect_paper),
                    spindle_bench::conv::paper_order(s.dims),
                    ratio(s.ucf_over_subsect_best),
                    ratio(s.ucf_over_subsect_default)
                ),
                2 => match &s.fit {
                    Some(f) => format!(
                        "order {}: ms = {:.4} + {:.3e}*nnz, R^2 {:.4} over {} sparsities; time sparsest/densest {} vs \
                         nnz {}",
                        s.best_overall_order.as_deref().unwrap_or("-"),
                        f.a_ms,
                        f.b_ms_per_nnz,
                        f.r2,
                        f.points,
                        s.time_ratio.map_or("-".into(), |x| format!("{x:.4}")),
                        s.nnz_ratio.map_or("-".into(), |x| format!("{x:.4}"))
                    ),
                    None => "no fit (fewer than two sparsities)".into(),
                },
                _ => {
                    let per: Vec<String> =
                        s.plain_over_best_all.iter().map(|(sp, r)| format!("{sp}%: {r:.2}")).collect();
                    format!(
                        "plain / best order on {} threads: geomean {} ({})",
                        report.threads,
                        s.plain_over_best_all_geomean.map_or("-".into(), |x| format!("{x:.2}")),
                        per.join(", ")
                    )
                }
            };
            println!("  {}-D ({}): {line}", s.dims, met(s.goals_met[g], g));
        }
    }
    for s in &report.summary {
        for f in &s.failures {
            println!("{}-D FAILURE: {f}", s.dims);
        }
    }
    println!("took {:.0} s", report.seconds);
}

/// Time against sparsity (evenly spaced), log y: a line per order that ran
/// at every sparsity, the swept-only orders as grey points, dense and UCF
/// (default order) dashed (cf. paper 002 Fig. 17). SVG, or PNG for a
/// `.png` path.
fn plot(input: &ConvInput, path: &Path) -> Result<()> {
    crate::notebook::plot::register_fonts()?;
    if input.cases.is_empty() {
        return Ok(());
    }
    let failed = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    if path.extension().is_some_and(|e| e == "png") {
        let root = BitMapBackend::new(path, SIZE).into_drawing_area();
        draw(&root, input).map_err(|e| failed(&e))
    } else {
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        draw(&root, input).map_err(|e| failed(&e))
    }
}

const SIZE: (u32, u32) = (1000, 600);

type DrawResult<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    input: &ConvInput,
) -> DrawResult<DB> {
    let cases = &input.cases;
    root.fill(&WHITE)?;
    let times: Vec<f64> =
        cases.iter().flat_map(|c| c.runs().map(Run::ms)).filter(|t| t.is_finite() && *t > 0.0).collect();
    let (y0, y1) =
        (times.iter().copied().fold(f64::MAX, f64::min), times.iter().copied().fold(0.0, f64::max));
    let (y0, y1) = if y1 > 0.0 { (y0 * 0.7, y1 * 1.5) } else { (1e-3, 1.0) };
    let n = cases.len();
    let labels: Vec<String> = cases.iter().map(|c| format!("{}%", c.sparsity)).collect();
    let title = format!(
        "{}-D {} (I {} in {}), one thread (cf. paper 002 Fig. 17)",
        input.dims,
        input.statement,
        shape(&input.input_shape),
        input.format
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.3..(n as f64 - 0.7), (y0..y1).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc("sparsity of I")
        .y_desc("median time (ms)")
        .draw()?;
    let points = |f: Metric| -> Vec<(f64, f64)> {
        cases
            .iter()
            .enumerate()
            .map(|(x, c)| (x as f64, f(c)))
            .filter(|(_, y)| y.is_finite() && *y > 0.0)
            .collect()
    };
    let everywhere: Vec<&String> =
        input.legal_orders.iter().filter(|o| cases.iter().all(|c| c.order(o).is_some())).collect();
    // The swept-only orders: grey points.
    let grey = RGBColor(170, 170, 170);
    for order in input.legal_orders.iter().filter(|o| !everywhere.contains(o)) {
        let pts = points(&|c| c.order_ms(order));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 2, grey.filled())))?;
    }
    for (k, order) in everywhere.iter().enumerate() {
        let colour = Palette99::pick(k).to_rgba();
        let pts = points(&|c| c.order_ms(order));
        let width = if **order == input.default_order { 3 } else { 2 };
        let name =
            if **order == input.default_order { format!("{order} (default)") } else { order.to_string() };
        chart
            .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(width)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, colour.filled())))?;
    }
    let references: [(&str, RGBColor, Metric); 3] = [
        ("dense (tile path, autotuned)", BLACK, &|c| c.dense.ms()),
        ("dense levels (conv crate)", RGBColor(150, 60, 0), &|c| c.dense_levels.ms()),
        ("UCF, subsect=off (default order)", RGBColor(120, 120, 120), &|c| c.ucf_default.ms()),
    ];
    for (name, colour, f) in references {
        chart
            .draw_series(DashedLineSeries::new(points(f), 8, 5, colour.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .label_font(("sans-serif", 12))
        .draw()?;
    root.present()
}

fn shape_text(shape: &[usize]) -> String {
    shape.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}
