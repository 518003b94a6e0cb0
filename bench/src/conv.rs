//! The sparse-convolution suite (paper 002 §6.2–6.3): a sparse input read
//! at affine subscripts, walked by subsection loops (`spindle_conv`), in
//! its loop orders, against the dense-outer-loop variant (TACO-UCF's
//! strategy, `subsect=off`) and the dense direct convolution; every kernel
//! through the driver as `spindle run` builds it, in one process, f64.
//!
//! Inputs (paper 002 §6.3, Fig. 17), each at sparsities 0, 20, 40, 60, 80,
//! 90, 95, 99 and 99.9 % (`--sparsities`):
//!
//! - **1-D** `O[i] = I[i+p] * F[p]`, I of 999,999 in `c` (a compressed
//!   vector), F of 3, O of 999,997;
//! - **2-D** `O[i,j] = I[i+p,j+q] * F[p,q]`, I 999×999 in CSR, F 3×3;
//! - **3-D** `O[i,j,k] = I[i+p,j+q,k+r] * F[p,q,r]`, I 99³ in CSF, F 3³.
//!
//! The sparse input holds exactly round((1 − s)·N) entries at uniformly
//! random positions (seeded, generated as COO, never dense), values in
//! ±[0.1, 1); the filter is dense, seeded, in ±[0.1, 1). For each input and
//! sparsity:
//!
//! - **subsection loops in every legal loop order** (1-D: 2, 2-D: 12, 3-D:
//!   120; an order is legal when the input's levels resolve in storage
//!   order, and the legal ones are found by asking the lowering), one
//!   thread. 3-D has too many orders for every sparsity: all 120 run at
//!   [`SWEEP_3D`] (90, 99, 99.9 %), and at the other sparsities only a
//!   selection ([`select_orders`]): the default order; for each output
//!   loop (i, j, k) the fastest swept order that binds it last among the
//!   output loops (the literal "innermost" is impossible for i and j: in
//!   CSF only k or r can be the innermost loop, since level 2 resolves
//!   last); and the fastest swept order whose innermost loop is the filter
//!   loop r (paper §6.3.1's other class). The overall fastest swept order
//!   is always among them. "Best order" at a sparsity is the fastest of
//!   the orders that ran there;
//! - the **default order**: what the lowering picks given no `order=`
//!   (read back from the kernel);
//! - the **dense-outer-loop variant** (`subsect=off`, paper §6.2's
//!   comparison point) in the default order, in the best order, and in
//!   the paper's order for that comparison, every output loop outermost
//!   ([`paper_order`]: `i+j+p+q` in 2-D, as its `n→h→w→r→q→c→f`), beside
//!   subsection loops in that order: goal 2 compares these two;
//! - the **dense direct convolution**: the same statement without a format
//!   (the input made dense by the driver), on the tile path, autotuned by
//!   the driver's [`Tuner`] with the threads fixed (the tuned schedule is
//!   cached per statement and shapes in the driver's cache, as `spindle
//!   run` does, so it is searched once per shape);
//! - the **dense direct convolution of this crate**: the input stored in
//!   dense levels (`d`, `dd`, `ddd`: every coordinate, zeros too), walked by
//!   the same loops in the default order — goal 1 compares against the
//!   faster of the two dense convolutions;
//! - the default order, the best order, both UCF variants and dense again
//!   on every core (`threads=N`);
//! - **the plain command**: `spindle run` with `--format I=csr` (or `c`,
//!   `csf`) and no schedule, i.e. [`spindle::Prepared::autotune`]: the
//!   default order with the driver's thread choice.
//!
//! Every variant's output is compared with the default order's on one
//! thread (max |x − ref| / max |ref|, all f64; the tile path accumulates in
//! f64 too), and per dimensionality a reduced case (the `--quick` size at
//! 90 %) is checked against the reference evaluator. Timing: the driver's
//! protocol (`Compiled::run_and_time`): compiled outside the clock, one
//! run for the output, then 1 warm-up and `--repeats` timed launches, each
//! from the initial buffers (the output zeroed outside the clock, the same
//! for every variant); medians.

use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};
use ndarray::ArrayD;
use serde::{Deserialize, Serialize};
use spindle::{CBackend, ElemType, Input, Prepared, Problem, Schedule, Target, Timing, TimingOptions, Tuner};
use spindle_formats::{Coo, DType};
use spindle_ir::level::{LevelKernel, Node};

use crate::{Machine, geomean, loadavg, machine};

pub const GOALS: [&str; 4] = [
    "sparse beats dense at <= 80% sparsity with the best order (dense: the faster of the tile path's, autotuned, and the conv crate's over dense levels)",
    "at least 20x the dense-outer-loop variant (subsect=off) at 99.9% sparsity, same order: the paper's, every output loop outermost, on each of the 1-D, 2-D and 3-D inputs (the paper: 19.5x); paper 002's own layer (a DCCC NHWC activation, order n,h,w,r,q,c,f) is reported beside it with the bound that writing its output sets on any kernel",
    "time falls linearly with nnz (best order; fit ms = a + b*nnz, R^2 >= 0.95)",
    "the plain command (a format, no schedule: default order, the driver's threads) beside the best variant",
];

/// The sparsities (%) of a full run.
pub const SPARSITIES: [f64; 9] = [0.0, 20.0, 40.0, 60.0, 80.0, 90.0, 95.0, 99.0, 99.9];
/// The sparsities of `--quick`.
pub const QUICK_SPARSITIES: [f64; 3] = [0.0, 90.0, 99.9];
/// The 3-D sparsities at which every legal order runs.
pub const SWEEP_3D: [f64; 3] = [90.0, 99.0, 99.9];
/// Largest relative difference between variants that counts as agreement.
pub const TOLERANCE: f64 = 1e-9;
/// Goal 1's sparsity and goal 3's R².
pub const GOAL_CROSSOVER: f64 = 80.0;
pub const GOAL_UCF: f64 = 20.0;
pub const GOAL_R2: f64 = 0.95;
/// The sparsity of goal 2.
pub const UCF_SPARSITY: f64 = 99.9;
/// The sparsity of the reduced case checked against the reference.
pub const REFERENCE_SPARSITY: f64 = 90.0;

const OUTPUTS: [&str; 3] = ["i", "j", "k"];
const FILTERS: [&str; 3] = ["p", "q", "r"];

#[derive(Clone, Debug)]
pub struct ConvOptions {
    pub timing: TimingOptions,
    /// The all-core thread count.
    pub threads: usize,
    /// Which convolutions: 1, 2, 3.
    pub dims: Vec<usize>,
    /// Sparsities in %.
    pub sparsities: Vec<f64>,
    /// The small sizes (1-D 9,999, 2-D 99×99, 3-D 19³).
    pub quick: bool,
    /// The input's format per dimensionality (index 0: 1-D).
    pub formats: [String; 3],
    /// Tune the dense convolution in memory instead of the driver's cache.
    pub tune_in_memory: bool,
    /// Run paper 002's own comparison with TACO-UCF ([`paper_layer`]).
    pub paper_layer: bool,
}

impl ConvOptions {
    /// The defaults of a full run (`quick`: the smoke-test sizes and
    /// sparsities).
    pub fn new(quick: bool) -> ConvOptions {
        ConvOptions {
            timing: TimingOptions { warmup: 1, repeats: 5 },
            threads: spindle::c::cpu_threads(),
            dims: vec![1, 2, 3],
            sparsities: if quick { QUICK_SPARSITIES.to_vec() } else { SPARSITIES.to_vec() },
            quick,
            formats: ["c".into(), "csr".into(), "csf".into()],
            tune_in_memory: false,
            paper_layer: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConvReport {
    pub suite: String,
    pub machine: Machine,
    pub loadavg_before: Option<String>,
    pub loadavg_after: Option<String>,
    pub warmup: usize,
    pub repeats: usize,
    /// The all-core thread count.
    pub threads: usize,
    pub quick: bool,
    pub timing_protocol: String,
    pub goals: Vec<String>,
    pub notes: Vec<String>,
    pub inputs: Vec<ConvInput>,
    /// Reduced cases against the reference evaluator.
    pub reference_checks: Vec<ReferenceCheck>,
    pub summary: Vec<DimsSummary>,
    /// Per goal, over every dimensionality: met, not met, or not measured.
    pub goals_met: Vec<Option<bool>>,
    /// Paper 002's own setup for its comparison with TACO-UCF.
    #[serde(default)]
    pub paper_layer: Option<PaperLayer>,
    pub seconds: f64,
}

/// Paper 002's comparison with TACO-UCF (§6.2.2, Fig. 16): ResNet's first
/// layer as the paper altered it, an NHWC activation of 1×256×256×64 in
/// DCCC, here with a 3×3 filter to 64 channels, in the paper's order
/// `n→h→w→r→q→c→f`, at 90.4 to 99.9 % sparsity.
pub const PAPER_STATEMENT: &str = "O[n,h,w,f] = I[n,h+r,w+q,c] * F[r,q,c,f]";
pub const PAPER_ORDER: &str = "n+h+w+r+q+c+f";
pub const PAPER_FORMAT: &str = "dccc";
pub const PAPER_SPARSITIES: [f64; 5] = [90.4, 95.0, 98.4, 99.0, 99.9];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaperLayer {
    pub statement: String,
    pub input_shape: Vec<usize>,
    pub filter_shape: Vec<usize>,
    pub format: String,
    pub order: String,
    pub cases: Vec<PaperCase>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaperCase {
    pub sparsity: f64,
    pub nnz: usize,
    /// Subsection loops and `subsect=off` in the paper's order, and the
    /// default order, one thread.
    pub subsect: Run,
    pub ucf: Run,
    pub default: Run,
    /// UCF ms / subsection ms.
    pub ucf_over_subsect: Option<f64>,
    pub max_rel_diff: f64,
    /// What every variant here must at least do: add once to each output
    /// element that the input reaches ([`output_floor`]), timed the same way.
    #[serde(default = "missing")]
    pub output_floor: Run,
    /// UCF ms / floor ms: the largest UCF / subsection ratio any kernel
    /// that writes this output could reach on this machine.
    #[serde(default)]
    pub ucf_over_floor: Option<f64>,
}

/// One convolution at every sparsity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConvInput {
    pub dims: usize,
    pub statement: String,
    pub input_shape: Vec<usize>,
    pub filter_shape: Vec<usize>,
    pub output_shape: Vec<usize>,
    pub format: String,
    /// Every legal order (`i+p+q+j`).
    pub legal_orders: Vec<String>,
    /// The lowering's choice given no `order=`.
    pub default_order: String,
    /// Where every legal order ran (every sparsity below 3-D).
    pub sweep_sparsities: Vec<f64>,
    /// By sparsity.
    pub cases: Vec<ConvCase>,
}

/// One kernel variant's measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// An order (`i+p+q+j`) for the subsection variants, else what it is.
    pub variant: String,
    /// The schedule it ran under (the tuned one when autotuned).
    pub schedule: String,
    pub timing: Option<Timing>,
    /// Why it did not run (it failed to compile or to run).
    pub error: Option<String>,
    /// How it was obtained where that is not the obvious way.
    #[serde(default)]
    pub note: Option<String>,
}

impl Run {
    /// The median ms, NaN when it failed.
    pub fn ms(&self) -> f64 {
        self.timing.as_ref().map_or(f64::NAN, |t| t.median_ms)
    }
}

/// The variants on every core.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllThreads {
    pub default: Run,
    pub best: Run,
    pub ucf_default: Run,
    pub ucf_best: Run,
    pub dense: Run,
    #[serde(default = "missing")]
    pub dense_levels: Run,
}

/// A run absent from an older record.
fn missing() -> Run {
    Run {
        variant: String::new(),
        schedule: String::new(),
        timing: None,
        error: Some("not run".into()),
        note: None,
    }
}

/// One input at one sparsity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConvCase {
    pub sparsity: f64,
    pub nnz: usize,
    /// Subsection loops on one thread, one per order run here.
    pub orders: Vec<Run>,
    /// The fastest of `orders`.
    pub best_order: String,
    /// `subsect=off`, one thread, in the default and the best order.
    pub ucf_default: Run,
    pub ucf_best: Run,
    /// Subsection loops and `subsect=off` in [`paper_order`], one thread.
    pub paper: Run,
    pub ucf_paper: Run,
    /// The dense direct convolution, tile path, autotuned, one thread.
    pub dense: Run,
    /// The dense direct convolution in the conv crate: the input stored in
    /// dense levels (`dd`), walked by the same loops, default order, one
    /// thread.
    #[serde(default = "missing")]
    pub dense_levels: Run,
    pub all_threads: AllThreads,
    /// `spindle run` with the format and no schedule.
    pub plain: Run,
    /// Max relative difference of every variant's output from the default
    /// order's on one thread, and the variant where it is largest.
    pub max_rel_diff: f64,
    pub worst_variant: Option<String>,
}

impl ConvCase {
    /// The faster dense direct convolution on one thread: the tile path's
    /// or the conv crate's over dense levels.
    pub fn dense_ms(&self) -> f64 {
        self.dense.ms().min(self.dense_levels.ms())
    }

    /// The subsection variant of `order` on one thread, when it ran here.
    pub fn order(&self, order: &str) -> Option<&Run> {
        self.orders.iter().find(|r| r.variant == order)
    }

    pub fn order_ms(&self, order: &str) -> f64 {
        self.order(order).map_or(f64::NAN, Run::ms)
    }

    pub fn best_ms(&self) -> f64 {
        self.order_ms(&self.best_order)
    }

    /// Every measurement of the case, for failure reports.
    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        let a = &self.all_threads;
        self.orders.iter().chain([
            &self.ucf_default,
            &self.ucf_best,
            &self.paper,
            &self.ucf_paper,
            &self.dense,
            &self.dense_levels,
            &a.default,
            &a.best,
            &a.ucf_default,
            &a.ucf_best,
            &a.dense,
            &a.dense_levels,
            &self.plain,
        ])
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReferenceCheck {
    pub dims: usize,
    pub input_shape: Vec<usize>,
    pub sparsity: f64,
    pub variant: String,
    /// Max |x − reference| / max |reference|; None when it did not run.
    pub max_rel_error: Option<f64>,
    pub error: Option<String>,
}

/// ms = a + b·nnz by least squares.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinearFit {
    pub a_ms: f64,
    pub b_ms_per_nnz: f64,
    pub r2: f64,
    pub points: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DimsSummary {
    pub dims: usize,
    /// The fastest order over every sparsity (geomean), among the orders
    /// that ran at every sparsity: the "best order" of goal 3.
    pub best_overall_order: Option<String>,
    /// Goal 1: (sparsity, dense ms / best-order ms) per sparsity, one
    /// thread, and the lowest sparsity where the best order is at least
    /// as fast as dense.
    pub dense_over_best: Vec<(f64, f64)>,
    pub crossover_sparsity: Option<f64>,
    /// Goal 2: at `ucf_sparsity` (99.9 %, or the sparsest run), UCF ms /
    /// subsection ms in the same order: the paper's order (the goal's), the
    /// best and the default order.
    pub ucf_sparsity: Option<f64>,
    #[serde(default)]
    pub ucf_over_subsect_paper: Option<f64>,
    pub ucf_over_subsect_best: Option<f64>,
    pub ucf_over_subsect_default: Option<f64>,
    /// Goal 3: the fit over every sparsity of `best_overall_order`, and its
    /// time at the sparsest over the densest beside their nnz ratio.
    pub fit: Option<LinearFit>,
    pub time_ratio: Option<f64>,
    pub nnz_ratio: Option<f64>,
    /// Goal 4: (sparsity, plain ms / best-order ms on every core).
    pub plain_over_best_all: Vec<(f64, f64)>,
    pub plain_over_best_all_geomean: Option<f64>,
    /// Cases where some variant failed or disagreed.
    pub failures: Vec<String>,
    pub goals_met: Vec<Option<bool>>,
}

/// Paper 002's order for its comparison with TACO-UCF (§6.2, `n→h→w→r→q→
/// c→f`): every output loop outermost, then the filter's.
pub fn paper_order(dims: usize) -> String {
    indices(dims).join("+")
}

/// The index names of a convolution: outputs then filter taps.
pub fn indices(dims: usize) -> Vec<String> {
    OUTPUTS[..dims].iter().chain(&FILTERS[..dims]).map(|s| s.to_string()).collect()
}

/// `O[i,j] = I[i+p,j+q] * F[p,q]` for `dims` = 2.
pub fn statement(dims: usize) -> String {
    let (outs, taps) = (&OUTPUTS[..dims], &FILTERS[..dims]);
    let sums: Vec<String> = outs.iter().zip(taps).map(|(o, t)| format!("{o}+{t}")).collect();
    format!("O[{}] = I[{}] * F[{}]", outs.join(","), sums.join(","), taps.join(","))
}

/// The input's shape: the paper's, or `--quick`'s.
pub fn input_shape(dims: usize, quick: bool) -> Vec<usize> {
    match (dims, quick) {
        (1, false) => vec![999_999],
        (2, false) => vec![999, 999],
        (_, false) => vec![99, 99, 99],
        (1, true) => vec![9_999],
        (2, true) => vec![99, 99],
        (_, true) => vec![19, 19, 19],
    }
}

/// Every ordering of `items`, in lexicographic order of positions.
pub fn permutations(items: &[String]) -> Vec<Vec<String>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for (n, first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(n);
        for mut tail in permutations(&rest) {
            tail.insert(0, first.clone());
            out.push(tail);
        }
    }
    out
}

/// `nnz = round((1 − sparsity/100)·N)` entries of `shape` at distinct,
/// uniformly random positions (seeded), values in ±[0.1, 1), in coordinate
/// order: the `uniform:shape=...` generator a user names.
pub fn random_input(shape: &[usize], sparsity: f64, seed: u64) -> Result<Coo<f64, i64>> {
    let n: usize = shape.iter().product();
    let nnz = (((1.0 - sparsity / 100.0) * n as f64).round().max(0.0) as usize).min(n);
    Ok(spindle_formats::generate::uniform_tensor(shape, nnz, seed)?)
}

/// Least squares of `y = a + b·x`, with R².
pub fn linear_fit(points: &[(f64, f64)]) -> Option<LinearFit> {
    let n = points.len();
    if n < 2 {
        return None;
    }
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n as f64,
        points.iter().map(|p| p.1).sum::<f64>() / n as f64,
    );
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let b = sxy / sxx;
    let a = my - b * mx;
    let residual: f64 = points.iter().map(|p| (p.1 - a - b * p.0).powi(2)).sum();
    let r2 = if syy > 0.0 { 1.0 - residual / syy } else { 1.0 };
    Some(LinearFit { a_ms: a, b_ms_per_nnz: b, r2, points: n })
}

/// The order's variables (`i+p+q+j`).
fn vars(order: &str) -> Vec<&str> {
    order.split('+').collect()
}

/// The 3-D orders run at the sparsities outside the sweep, given the swept
/// orders ranked fastest first: the default; per output loop, the fastest
/// order binding it last among the output loops; the fastest order with a
/// filter loop innermost.
pub fn select_orders(ranked: &[String], default: &str, dims: usize) -> Vec<String> {
    let outs = &OUTPUTS[..dims];
    let last_output =
        |order: &str| vars(order).into_iter().rev().find(|v| outs.contains(v)).map(str::to_string);
    let mut chosen = vec![default.to_string()];
    let mut add = |order: Option<&String>| {
        if let Some(o) = order.filter(|o| !chosen.contains(o)) {
            chosen.push(o.clone());
        }
    };
    for out in outs {
        add(ranked.iter().find(|o| last_output(o).as_deref() == Some(*out)));
    }
    add(ranked.iter().find(|o| vars(o).last().is_some_and(|v| !outs.contains(v))));
    chosen
}

/// The loop order of a level kernel's nest, outermost first.
fn order_of(kernel: &LevelKernel) -> String {
    let mut names = Vec::new();
    let mut nodes = &kernel.body;
    while let Some(node) = nodes.first() {
        match node {
            Node::Dense { var, body } | Node::Subsect { var, body, .. } | Node::Resolve { var, body, .. } => {
                names.push(kernel.vars[*var].name.clone());
                nodes = body;
            }
            Node::Taps { outer, inner, body, .. } => {
                names.extend([*outer, *inner].map(|v| kernel.vars[v].name.clone()));
                nodes = body;
            }
            _ => break,
        }
    }
    names.join("+")
}

/// The statement over `coo` (stored in `format`, or dense when `None`) and
/// a seeded filter; the output given as f64.
fn problem(dims: usize, coo: &Coo<f64, i64>, format: Option<&str>, filter_seed: u64) -> Problem {
    let output: Vec<usize> = coo.shape.iter().map(|n| n - 2).collect();
    let problem = Problem::new(statement(dims))
        .tensor("I", coo.clone())
        .tensor("F", Input::random(&vec![3; dims], DType::F64, filter_seed))
        .tensor("O", Input::shape(&output, ElemType::Value(DType::F64)));
    match format {
        Some(f) => problem.format("I", f),
        None => problem,
    }
}

fn schedule(order: Option<&str>, subsections: bool, threads: usize) -> Result<Schedule> {
    let mut text = String::new();
    if let Some(o) = order {
        text.push_str(&format!("order={o} "));
    }
    if !subsections {
        text.push_str("subsect=off ");
    }
    text.push_str(&format!("threads={threads}"));
    Ok(text.parse()?)
}

/// Compiles on `threads` threads at once (each into the driver's compile
/// cache), so the timed loop that follows only loads them.
fn precompile(prepared: &Prepared, backend: &CBackend, schedules: &[Schedule], threads: usize) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                while let Some(schedule) = schedules.get(next.fetch_add(1, Ordering::Relaxed)) {
                    // A failure shows again, with its message, when timed.
                    let _ = prepared.compile(backend, schedule);
                }
            });
        }
    });
}

/// Outputs compared with a reference output.
struct Agreement {
    reference: Option<ArrayD<f64>>,
    max: f64,
    worst: Option<String>,
}

impl Agreement {
    fn see(&mut self, variant: &str, out: Option<ArrayD<f64>>) {
        let Some(out) = out else { return };
        match &self.reference {
            None => self.reference = Some(out),
            Some(want) => {
                let diff = spindle::check::max_rel_error(&out, want);
                if diff.is_nan() || diff > self.max {
                    self.max = diff;
                    self.worst = Some(variant.to_string());
                }
            }
        }
    }
}

struct Ctx<'a> {
    opts: &'a ConvOptions,
    backend: CBackend,
    /// The dense convolution's tuners: one thread, every core.
    tune_one: Tuner,
    tune_all: Tuner,
    /// The plain command's (no threads fixed).
    tune_plain: Tuner,
    progress: &'a mut dyn FnMut(&str),
}

impl Ctx<'_> {
    fn measure(&self, prepared: &Prepared, variant: &str, schedule: &Schedule) -> (Run, Option<ArrayD<f64>>) {
        let ran = prepared.compile(&self.backend, schedule).and_then(|c| c.run_and_time(self.opts.timing));
        finish_run(variant, schedule.to_string(), ran)
    }

    /// Autotuned by `tuner` (which: 0 one thread, 1 every core, 2 plain).
    fn tuned(&mut self, prepared: &Prepared, variant: &str, which: usize) -> (Run, Option<ArrayD<f64>>) {
        let timing = self.opts.timing;
        let tuner = match which {
            0 => &mut self.tune_one,
            1 => &mut self.tune_all,
            _ => &mut self.tune_plain,
        };
        let mut schedule = String::new();
        let ran = prepared.autotune(&self.backend, tuner).and_then(|c| {
            schedule = c.schedule.to_string();
            c.run_and_time(timing)
        });
        finish_run(variant, schedule, ran)
    }

    /// The dense convolution on `threads` threads, autotuned by the driver.
    fn dense(&mut self, prepared: &Prepared, variant: &str, threads: usize) -> (Run, Option<ArrayD<f64>>) {
        self.tuned(prepared, variant, if threads == 1 { 0 } else { 1 })
    }
}

fn finish_run(
    variant: &str,
    schedule: String,
    ran: spindle::Result<(ArrayD<f64>, Timing)>,
) -> (Run, Option<ArrayD<f64>>) {
    match ran {
        Ok((out, timing)) => (
            Run { variant: variant.to_string(), schedule, timing: Some(timing), error: None, note: None },
            Some(out),
        ),
        Err(e) => (
            Run {
                variant: variant.to_string(),
                schedule,
                timing: None,
                error: Some(e.to_string()),
                note: None,
            },
            None,
        ),
    }
}

fn tuner(in_memory: bool, threads: Option<usize>, timing: TimingOptions) -> Tuner {
    let mut tuner = if in_memory { Tuner::in_memory() } else { Tuner::for_target(Target::C) };
    tuner.threads = threads;
    tuner.timing = timing;
    tuner
}

pub fn run(opts: &ConvOptions, progress: &mut dyn FnMut(&str)) -> Result<ConvReport> {
    let start = std::time::Instant::now();
    let loadavg_before = loadavg();
    let mut ctx = Ctx {
        opts,
        backend: CBackend::new(),
        tune_one: tuner(opts.tune_in_memory, Some(1), opts.timing),
        tune_all: tuner(opts.tune_in_memory, Some(opts.threads.max(1)), opts.timing),
        tune_plain: tuner(opts.tune_in_memory, None, opts.timing),
        progress,
    };
    let mut sparsities = opts.sparsities.clone();
    sparsities.sort_by(f64::total_cmp);
    sparsities.dedup();
    if sparsities.iter().any(|s| !(0.0..=100.0).contains(s)) {
        bail!("sparsities are percentages in 0..=100");
    }
    if let Some(dims) = opts.dims.iter().find(|d| !(1..=3).contains(*d)) {
        bail!("--dims takes 1, 2 and 3, not {dims}");
    }
    let mut inputs = Vec::new();
    let mut reference_checks = Vec::new();
    for &dims in &opts.dims {
        reference_checks.extend(reference_check(dims, &opts.formats[dims - 1], &mut ctx));
        inputs.push(convolution(dims, &sparsities, &mut ctx)?);
    }
    let paper_layer = match opts.paper_layer {
        true => Some(paper_layer(&mut ctx)?),
        false => None,
    };
    let summary: Vec<DimsSummary> = inputs.iter().map(summarize).collect();
    let goals_met: Vec<Option<bool>> = (0..GOALS.len())
        .map(|g| {
            let met: Vec<bool> = summary.iter().filter_map(|s| s.goals_met[g]).collect();
            (!met.is_empty()).then(|| met.iter().all(|&m| m))
        })
        .collect();
    let threads = opts.threads.max(1);
    let notes = vec![
        format!(
            "f64 throughout; one thread (threads=1) unless 'all threads' (threads={threads}); a level kernel runs \
             its outermost loop on threads only when that loop binds an output index"
        ),
        format!(
            "3-D: every legal order at {:?} %, elsewhere the default, per output loop the fastest swept order \
             binding it last among the output loops, and the fastest swept order with the filter loop r \
             innermost (ranked by geomean over the swept sparsities)",
            SWEEP_3D
        ),
        "dense: the statement without a format (the input made dense), tile path, autotuned with the threads \
         fixed; the tuned schedule is cached per statement and shapes"
            .to_string(),
        "plain: Prepared::autotune with no threads fixed, as `spindle run --format I=...` without a schedule"
            .to_string(),
        format!(
            "outputs: every variant against the default order on one thread (agreement <= {TOLERANCE:e}); a \
             reduced case per dimensionality against the reference evaluator"
        ),
    ];
    Ok(ConvReport {
        suite: "conv".into(),
        machine: machine(),
        loadavg_before,
        loadavg_after: loadavg(),
        warmup: opts.timing.warmup,
        repeats: opts.timing.repeats,
        threads,
        quick: opts.quick,
        timing_protocol:
            "compiled outside the clock; one run for the output, then --warmup and --repeats timed \
                          launches from the initial buffers (the output zeroed outside the clock); medians"
                .into(),
        goals: GOALS.iter().map(|g| g.to_string()).collect(),
        notes,
        inputs,
        reference_checks,
        summary,
        goals_met,
        paper_layer,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Paper 002's comparison with TACO-UCF in its own setup
/// ([`PAPER_STATEMENT`]; `--quick`: 1×32×32×16 to 16 channels).
fn paper_layer(ctx: &mut Ctx<'_>) -> Result<PaperLayer> {
    let (input_shape, channels_out) =
        if ctx.opts.quick { (vec![1, 32, 32, 16], 16) } else { (vec![1, 256, 256, 64], 64) };
    let filter_shape = vec![3, 3, input_shape[3], channels_out];
    let output = vec![1, input_shape[1] - 2, input_shape[2] - 2, channels_out];
    let mut cases = Vec::new();
    for (k, &sparsity) in PAPER_SPARSITIES.iter().enumerate() {
        let coo = random_input(&input_shape, sparsity, 4000 + k as u64)?;
        let nnz = coo.nnz();
        let windows = written_windows(&coo, &filter_shape[..2], &output[..3]);
        let label = format!("paper 002 layer {sparsity}% (nnz {nnz})");
        let prepared = Problem::new(PAPER_STATEMENT)
            .tensor("I", coo)
            .tensor("F", Input::random(&filter_shape, DType::F64, 401))
            .tensor("O", Input::shape(&output, ElemType::Value(DType::F64)))
            .format("I", PAPER_FORMAT)
            .prepare()
            .with_context(|| label.clone())?;
        let mut agree = Agreement { reference: None, max: 0.0, worst: None };
        let mut measure = |ctx: &mut Ctx<'_>, name: &str, order: Option<&str>, subsections: bool| {
            let sched = schedule(order, subsections, 1)?;
            (ctx.progress)(&format!("{label}: {name} [{sched}]"));
            let (run, out) = ctx.measure(&prepared, name, &sched);
            agree.see(name, out);
            Ok::<Run, anyhow::Error>(run)
        };
        let subsect = measure(ctx, "subsections", Some(PAPER_ORDER), true)?;
        let ucf = measure(ctx, "ucf", Some(PAPER_ORDER), false)?;
        let default = measure(ctx, "default order", None, true)?;
        (ctx.progress)(&format!("{label}: the output floor"));
        let floor = finish_run(
            "output floor",
            format!("{} of {} windows", windows.len(), output[..3].iter().product::<usize>()),
            output_floor(&windows, output[..3].iter().product(), channels_out, ctx.opts.timing)
                .map(|t| (ArrayD::zeros(vec![0]), t)),
        )
        .0;
        let ratio = |a: f64, b: f64| (a / b).is_finite().then_some(a / b);
        cases.push(PaperCase {
            sparsity,
            nnz,
            ucf_over_subsect: ratio(ucf.ms(), subsect.ms()),
            ucf_over_floor: ratio(ucf.ms(), floor.ms()),
            subsect,
            ucf,
            default,
            max_rel_diff: agree.max,
            output_floor: floor,
        });
    }
    Ok(PaperLayer {
        statement: PAPER_STATEMENT.into(),
        input_shape,
        filter_shape,
        format: PAPER_FORMAT.into(),
        order: PAPER_ORDER.into(),
        cases,
    })
}

/// The output windows (flat indices over the output's leading dimensions,
/// `n, h, w` of an NHWC layer, ascending) that some stored entry of `input`
/// reaches through a filter of `taps` (`r, q`) at unit stride: window
/// `(n, h, w)` is written when an entry sits at `(n, h + r, w + q, ·)`.
pub fn written_windows(input: &Coo<f64, i64>, taps: &[usize], windows: &[usize]) -> Vec<usize> {
    let mut hit = vec![false; windows.iter().product()];
    for e in 0..input.nnz() {
        let (n, h, w) = (input.crd[0][e], input.crd[1][e], input.crd[2][e]);
        for r in 0..taps[0] as i64 {
            for q in 0..taps[1] as i64 {
                let (oh, ow) = (h - r, w - q);
                if (0..windows[1] as i64).contains(&oh) && (0..windows[2] as i64).contains(&ow) {
                    hit[(n as usize * windows[1] + oh as usize) * windows[2] + ow as usize] = true;
                }
            }
        }
    }
    hit.iter().enumerate().filter_map(|(k, &h)| h.then_some(k)).collect()
}

/// The least every kernel here does to its output: the whole output
/// (`all_windows` of `channels` values) zeroed outside the clock, as for
/// the kernels, then each value of the `windows` read, added to and stored
/// once, in order. The kernels touch these values too, and more than once
/// where windows share entries; the floor leaves out all their index work.
pub fn output_floor(
    windows: &[usize],
    all_windows: usize,
    channels: usize,
    timing: TimingOptions,
) -> spindle::Result<Timing> {
    let mut out = vec![0.0f64; all_windows * channels];
    let out = std::cell::RefCell::new(&mut out);
    spindle::timing::wall_clock(
        timing,
        || {
            out.borrow_mut().fill(0.0);
            Ok(())
        },
        || {
            let mut out = out.borrow_mut();
            for &w in windows {
                out[w * channels..(w + 1) * channels].iter_mut().for_each(|x| *x += 1.0);
            }
            std::hint::black_box(&mut **out);
            Ok(())
        },
    )
}

/// Every order of the statement in `format` that the lowering takes, and
/// its default order, from a tiny instance.
fn legal_orders(dims: usize, format: &str) -> Result<(Vec<String>, String)> {
    let coo = random_input(&vec![5; dims], 50.0, 1)?;
    let prepared = problem(dims, &coo, Some(format), 1).prepare().context("the tiny instance")?;
    let default = order_of(&prepared.lower_levels(&Schedule::default())?.kernel);
    let mut legal = Vec::new();
    for order in permutations(&indices(dims)) {
        let schedule = Schedule { order: order.clone(), ..Schedule::default() };
        match prepared.lower_levels(&schedule) {
            Ok(_) => legal.push(order.join("+")),
            Err(e) if e.is_out_of_storage_order() => {}
            Err(e) => bail!("order {} in {format}: {e}", order.join("+")),
        }
    }
    Ok((legal, default))
}

/// The default order, UCF and dense on the `--quick` size at 90 % against
/// the reference evaluator.
fn reference_check(dims: usize, format: &str, ctx: &mut Ctx<'_>) -> Vec<ReferenceCheck> {
    let shape = input_shape(dims, true);
    (ctx.progress)(&format!("conv {dims}-D: reference check on {shape:?} at {REFERENCE_SPARSITY}%"));
    let failed = |variant: &str, e: String| ReferenceCheck {
        dims,
        input_shape: shape.clone(),
        sparsity: REFERENCE_SPARSITY,
        variant: variant.to_string(),
        max_rel_error: None,
        error: Some(e),
    };
    let coo = match random_input(&shape, REFERENCE_SPARSITY, 7) {
        Ok(coo) => coo,
        Err(e) => return vec![failed("input", e.to_string())],
    };
    let mut out = Vec::new();
    for (variant, format, subsections) in [
        ("default order", Some(format), true),
        ("ucf default order", Some(format), false),
        ("dense", None, true),
    ] {
        let checked = (|| -> Result<f64> {
            let prepared = problem(dims, &coo, format, 8).prepare()?;
            // The dense convolution as the suite runs it: autotuned.
            let compiled = match format {
                Some(_) => prepared.compile(&ctx.backend, &schedule(None, subsections, 1)?)?,
                None => prepared.autotune(&ctx.backend, &mut ctx.tune_one)?,
            };
            let got = compiled.run()?;
            Ok(spindle::check::max_rel_error(&got, &prepared.reference()?))
        })();
        out.push(match checked {
            Ok(err) => ReferenceCheck {
                dims,
                input_shape: shape.clone(),
                sparsity: REFERENCE_SPARSITY,
                variant: variant.to_string(),
                max_rel_error: Some(err),
                error: None,
            },
            Err(e) => failed(variant, format!("{e:#}")),
        });
    }
    out
}

fn convolution(dims: usize, sparsities: &[f64], ctx: &mut Ctx<'_>) -> Result<ConvInput> {
    let format = ctx.opts.formats[dims - 1].clone();
    let shape = input_shape(dims, ctx.opts.quick);
    let (legal, default) = legal_orders(dims, &format)?;
    (ctx.progress)(&format!(
        "conv {dims}-D: {} on {shape:?} in {format}: {} legal orders, default {default}",
        statement(dims),
        legal.len()
    ));
    // 3-D sweeps every order at a few sparsities only (or, where none of
    // those is asked for, at the sparsest).
    let sweep: Vec<f64> = match dims {
        3 => {
            let s: Vec<f64> = sparsities.iter().copied().filter(|s| SWEEP_3D.contains(s)).collect();
            if s.is_empty() { sparsities.last().copied().into_iter().collect() } else { s }
        }
        _ => sparsities.to_vec(),
    };
    let mut cases = Vec::new();
    for &s in &sweep {
        cases.push(case(dims, &shape, &format, s, &legal, &default, ctx)?);
    }
    let rest: Vec<f64> = sparsities.iter().copied().filter(|s| !sweep.contains(s)).collect();
    if !rest.is_empty() {
        let ranked = rank(&cases, &legal);
        let chosen = select_orders(&ranked, &default, dims);
        (ctx.progress)(&format!("conv {dims}-D: at the other sparsities, orders {}", chosen.join(", ")));
        for s in rest {
            cases.push(case(dims, &shape, &format, s, &chosen, &default, ctx)?);
        }
    }
    cases.sort_by(|a, b| a.sparsity.total_cmp(&b.sparsity));
    Ok(ConvInput {
        dims,
        statement: statement(dims),
        output_shape: shape.iter().map(|n| n - 2).collect(),
        filter_shape: vec![3; dims],
        input_shape: shape,
        format,
        legal_orders: legal,
        default_order: default,
        sweep_sparsities: sweep,
        cases,
    })
}

/// `orders` ranked fastest first by their geomean over `cases` (orders that
/// did not run or failed in any of them last).
pub fn rank(cases: &[ConvCase], orders: &[String]) -> Vec<String> {
    let mut scored: Vec<(String, f64)> = orders
        .iter()
        .map(|o| {
            let times: Vec<f64> = cases.iter().map(|c| c.order_ms(o)).collect();
            let ok = times.iter().all(|t| t.is_finite() && *t > 0.0);
            (o.clone(), if ok { geomean(times).unwrap_or(f64::INFINITY) } else { f64::INFINITY })
        })
        .collect();
    scored.sort_by(|a, b| a.1.total_cmp(&b.1));
    scored.into_iter().map(|(o, _)| o).collect()
}

#[allow(clippy::too_many_arguments)]
fn case(
    dims: usize,
    shape: &[usize],
    format: &str,
    sparsity: f64,
    orders: &[String],
    default: &str,
    ctx: &mut Ctx<'_>,
) -> Result<ConvCase> {
    let coo = random_input(shape, sparsity, 1000 * dims as u64 + (sparsity * 10.0).round() as u64)?;
    let nnz = coo.nnz();
    let filter_seed = 100 + dims as u64;
    let label = format!("conv {dims}-D {sparsity}% (nnz {nnz})");
    let sparse = problem(dims, &coo, Some(format), filter_seed).prepare().with_context(|| label.clone())?;
    let dense = problem(dims, &coo, None, filter_seed).prepare().with_context(|| label.clone())?;
    let coo_for_levels = coo;
    let all = ctx.opts.threads.max(1);
    // The default order first: its output is the reference.
    let mut todo: Vec<&String> = orders.iter().filter(|o| o.as_str() == default).collect();
    todo.extend(orders.iter().filter(|o| o.as_str() != default));
    let schedules: Vec<Schedule> = todo.iter().map(|o| schedule(Some(o), true, 1)).collect::<Result<_>>()?;
    (ctx.progress)(&format!("{label}: compiling {} orders", schedules.len()));
    precompile(&sparse, &ctx.backend, &schedules, all);
    let mut agree = Agreement { reference: None, max: 0.0, worst: None };
    let mut runs = Vec::new();
    for (n, (order, sched)) in todo.iter().zip(&schedules).enumerate() {
        let (run, out) = ctx.measure(&sparse, order, sched);
        (ctx.progress)(&format!(
            "{label}: order {}/{} {order}: {}",
            n + 1,
            todo.len(),
            run.timing.as_ref().map_or_else(
                || "failed".to_string(),
                |t| format!("{} ms", crate::ms_text(Some(t.median_ms)))
            )
        ));
        agree.see(order, out);
        runs.push(run);
    }
    let best_order = runs
        .iter()
        .filter(|r| r.ms().is_finite())
        .min_by(|a, b| a.ms().total_cmp(&b.ms()))
        .map_or_else(|| default.to_string(), |r| r.variant.clone());
    // One measurement per distinct schedule: the best order may be the
    // default one.
    let mut measured: Vec<(String, Run)> = runs.iter().map(|r| (r.schedule.clone(), r.clone())).collect();
    let mut variant = |ctx: &mut Ctx<'_>, name: &str, order: &str, subsections: bool, threads: usize| {
        let sched = schedule(Some(order), subsections, threads)?;
        let text = sched.to_string();
        if let Some((_, run)) = measured.iter().find(|(s, _)| *s == text) {
            return Ok::<Run, anyhow::Error>(Run { variant: name.to_string(), ..run.clone() });
        }
        (ctx.progress)(&format!("{label}: {name} [{text}]"));
        let (run, out) = ctx.measure(&sparse, name, &sched);
        agree.see(name, out);
        measured.push((text, run.clone()));
        Ok(run)
    };
    let ucf_default = variant(ctx, &format!("ucf {default}"), default, false, 1)?;
    let ucf_best = variant(ctx, &format!("ucf {best_order}"), &best_order, false, 1)?;
    let paper_order = paper_order(dims);
    // The paper's order may not be legal in the format asked for (csc in
    // 2-D resolves q before p): then it is not run, and goal 2 is not
    // measured, rather than failed.
    let (paper, ucf_paper) = match sparse.lower_levels(&schedule(Some(&paper_order), true, 1)?) {
        Err(e) if e.is_out_of_storage_order() => {
            let why = format!("not run: the paper's order is not legal in {format}");
            let skipped = |name: String| Run {
                variant: name,
                schedule: String::new(),
                timing: None,
                error: None,
                note: Some(why.clone()),
            };
            (skipped(paper_order.clone()), skipped(format!("ucf {paper_order}")))
        }
        _ => (
            variant(ctx, &paper_order, &paper_order, true, 1)?,
            variant(ctx, &format!("ucf {paper_order}"), &paper_order, false, 1)?,
        ),
    };
    let all_default = variant(ctx, &format!("{default} on {all} threads"), default, true, all)?;
    let all_best = variant(ctx, &format!("{best_order} on {all} threads"), &best_order, true, all)?;
    let all_ucf_default = variant(ctx, &format!("ucf {default} on {all} threads"), default, false, all)?;
    let all_ucf_best = variant(ctx, &format!("ucf {best_order} on {all} threads"), &best_order, false, all)?;
    // The conv crate's own dense direct convolution: every level dense.
    let levels_format = "d".repeat(dims);
    let dense_levels = problem(dims, &coo_for_levels, Some(&levels_format), filter_seed)
        .prepare()
        .with_context(|| label.clone())?;
    drop(coo_for_levels);
    let mut levels_run = |ctx: &mut Ctx<'_>, name: &str, threads: usize| {
        let sched = schedule(None, true, threads)?;
        (ctx.progress)(&format!("{label}: {name} [{sched}]"));
        let (run, out) = ctx.measure(&dense_levels, name, &sched);
        agree.see(name, out);
        Ok::<Run, anyhow::Error>(run)
    };
    let levels_one = levels_run(ctx, &format!("dense levels ({levels_format})"), 1)?;
    let levels_all = levels_run(ctx, &format!("dense levels ({levels_format}) on {all} threads"), all)?;
    (ctx.progress)(&format!("{label}: dense, autotuned (1 thread, then {all})"));
    let (dense_one, out) = ctx.dense(&dense, "dense", 1);
    agree.see("dense", out);
    let (dense_all, out) = ctx.dense(&dense, &format!("dense on {all} threads"), all);
    agree.see("dense all threads", out);
    (ctx.progress)(&format!("{label}: the plain command"));
    let (plain, out) = ctx.tuned(&sparse, "plain", 2);
    agree.see("plain", out);
    if agree.max > TOLERANCE {
        (ctx.progress)(&format!(
            "{label}: WARNING: {} differs from the default order by {:.2e}",
            agree.worst.as_deref().unwrap_or("?"),
            agree.max
        ));
    }
    Ok(ConvCase {
        sparsity,
        nnz,
        orders: runs,
        best_order,
        ucf_default,
        ucf_best,
        paper,
        ucf_paper,
        dense: dense_one,
        dense_levels: levels_one,
        all_threads: AllThreads {
            default: all_default,
            best: all_best,
            ucf_default: all_ucf_default,
            ucf_best: all_ucf_best,
            dense: dense_all,
            dense_levels: levels_all,
        },
        plain,
        max_rel_diff: agree.max,
        worst_variant: agree.worst,
    })
}

fn summarize(input: &ConvInput) -> DimsSummary {
    let cases = &input.cases;
    // Goal 1.
    let dense_over_best: Vec<(f64, f64)> =
        cases.iter().map(|c| (c.sparsity, c.dense_ms() / c.best_ms())).collect();
    let crossover_sparsity = dense_over_best.iter().find(|(_, r)| *r >= 1.0).map(|(s, _)| *s);
    // Goal 2: at 99.9 %, or the sparsest.
    let at = cases
        .iter()
        .find(|c| c.sparsity == UCF_SPARSITY)
        .or_else(|| cases.iter().max_by(|a, b| a.sparsity.total_cmp(&b.sparsity)));
    let finite = |x: f64| x.is_finite().then_some(x);
    let ucf_over_subsect_best = at.and_then(|c| finite(c.ucf_best.ms() / c.best_ms()));
    let ucf_over_subsect_paper = at.and_then(|c| finite(c.ucf_paper.ms() / c.paper.ms()));
    let ucf_over_subsect_default =
        at.and_then(|c| finite(c.ucf_default.ms() / c.order_ms(&input.default_order)));
    // Goal 3: the fastest order among those run everywhere.
    let everywhere: Vec<String> =
        input.legal_orders.iter().filter(|o| cases.iter().all(|c| c.order(o).is_some())).cloned().collect();
    let best_overall_order = rank(cases, &everywhere).into_iter().next();
    let fit = best_overall_order.as_ref().and_then(|o| {
        let points: Vec<(f64, f64)> = cases.iter().map(|c| (c.nnz as f64, c.order_ms(o))).collect();
        linear_fit(&points)
    });
    let ends = cases.first().zip(cases.last()).filter(|(a, b)| a.sparsity < b.sparsity);
    let time_ratio = ends
        .zip(best_overall_order.as_ref())
        .and_then(|((lo, hi), o)| finite(hi.order_ms(o) / lo.order_ms(o)));
    let nnz_ratio = ends.map(|(lo, hi)| hi.nnz as f64 / lo.nnz.max(1) as f64);
    // Goal 4.
    let plain_over_best_all: Vec<(f64, f64)> =
        cases.iter().map(|c| (c.sparsity, c.plain.ms() / c.all_threads.best.ms())).collect();
    let plain_over_best_all_geomean = geomean(plain_over_best_all.iter().map(|p| p.1));
    let mut failures = Vec::new();
    for c in cases {
        for r in c.runs().filter(|r| r.error.is_some()) {
            failures.push(format!(
                "{}% {} [{}]: {}",
                c.sparsity,
                r.variant,
                r.schedule,
                r.error.as_deref().unwrap_or("")
            ));
        }
        if c.max_rel_diff.is_nan() || c.max_rel_diff > TOLERANCE {
            failures.push(format!(
                "{}%: {} differs from the default order by {:.2e}",
                c.sparsity,
                c.worst_variant.as_deref().unwrap_or("?"),
                c.max_rel_diff
            ));
        }
    }
    let has = |s: f64| cases.iter().any(|c| c.sparsity == s);
    // Goal 1 is met where sparse wins at some sparsity up to 80 %, and
    // not met only where 80 % itself was measured (`--quick` skips it).
    let goal_1 = match crossover_sparsity.is_some_and(|s| s <= GOAL_CROSSOVER) {
        true => Some(true),
        false => has(GOAL_CROSSOVER).then_some(false),
    };
    let goals_met = vec![
        goal_1,
        ucf_over_subsect_paper.filter(|_| has(UCF_SPARSITY)).map(|r| r >= GOAL_UCF),
        fit.as_ref().filter(|f| f.points >= 3).map(|f| f.r2 >= GOAL_R2),
        // No threshold: reported beside the best.
        None,
    ];
    DimsSummary {
        dims: input.dims,
        best_overall_order,
        dense_over_best,
        crossover_sparsity,
        ucf_sparsity: at.map(|c| c.sparsity),
        ucf_over_subsect_paper,
        ucf_over_subsect_best,
        ucf_over_subsect_default,
        fit,
        time_ratio,
        nnz_ratio,
        plain_over_best_all,
        plain_over_best_all_geomean,
        failures,
        goals_met,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_indices_and_permutations() {
        assert_eq!(statement(1), "O[i] = I[i+p] * F[p]");
        assert_eq!(statement(3), "O[i,j,k] = I[i+p,j+q,k+r] * F[p,q,r]");
        assert_eq!(indices(2), ["i", "j", "p", "q"]);
        let all = permutations(&indices(3));
        assert_eq!(all.len(), 720);
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 720);
        assert_eq!(permutations(&indices(1)), [["i", "p"], ["p", "i"]]);
        assert_eq!(paper_order(3), "i+j+k+p+q+r");
    }

    #[test]
    fn random_inputs_hold_exactly_the_asked_entries() {
        let coo = random_input(&[7, 9], 60.0, 3).unwrap();
        assert_eq!(coo.nnz(), 25); // round(0.4 * 63)
        assert!(coo.is_canonical());
        assert!(coo.val.iter().all(|v| (0.1..1.0).contains(&v.abs())));
        assert_eq!(random_input(&[4, 5], 0.0, 1).unwrap().nnz(), 20);
        assert_eq!(random_input(&[10], 99.9, 1).unwrap().nnz(), 0);
        assert_eq!(random_input(&[7, 9], 60.0, 3).unwrap(), coo, "seeded");
    }

    #[test]
    fn written_windows_are_those_an_entry_reaches() {
        let coo = random_input(&[2, 6, 7, 3], 97.0, 5).unwrap();
        let windows = [2, 4, 5];
        let mut brute = Vec::new();
        let all = (0..2i64).flat_map(|n| (0..4i64).flat_map(move |h| (0..5i64).map(move |w| (n, h, w))));
        for (n, h, w) in all {
            let reached = (0..coo.nnz()).any(|e| {
                let (en, eh, ew) = (coo.crd[0][e], coo.crd[1][e], coo.crd[2][e]);
                en == n && (h..h + 3).contains(&eh) && (w..w + 3).contains(&ew)
            });
            if reached {
                brute.push(((n * 4 + h) * 5 + w) as usize);
            }
        }
        assert!(!brute.is_empty() && brute.len() < 40, "a case with written and unwritten windows");
        assert_eq!(written_windows(&coo, &[3, 3], &windows), brute);
    }

    #[test]
    fn the_output_floor_times_its_launches() {
        let timing = output_floor(&[0, 3, 4], 6, 8, TimingOptions { warmup: 1, repeats: 3 }).unwrap();
        assert_eq!(timing.runs, 3);
        assert!(timing.median_ms >= 0.0 && timing.max_ms >= timing.min_ms);
    }

    #[test]
    fn linear_fits() {
        let f = linear_fit(&[(0.0, 1.0), (10.0, 21.0), (5.0, 11.0)]).unwrap();
        assert!((f.a_ms - 1.0).abs() < 1e-12 && (f.b_ms_per_nnz - 2.0).abs() < 1e-12);
        assert!((f.r2 - 1.0).abs() < 1e-12);
        let noisy = linear_fit(&[(0.0, 0.0), (1.0, 1.0), (2.0, 0.0), (3.0, 1.0)]).unwrap();
        assert!(noisy.r2 < 0.5);
        assert!(linear_fit(&[(1.0, 1.0)]).is_none());
    }

    #[test]
    fn three_d_selection_keeps_the_default_and_one_per_class() {
        let ranked: Vec<String> = ["p+i+q+j+r+k", "i+p+j+q+k+r", "j+k+p+i+q+r", "k+i+p+j+q+r", "i+p+q+j+r+k"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let chosen = select_orders(&ranked, "i+p+j+q+r+k", 3);
        // The default; the fastest binding i, j, k last among the outputs;
        // the fastest with r innermost.
        assert_eq!(chosen, ["i+p+j+q+r+k", "j+k+p+i+q+r", "k+i+p+j+q+r", "p+i+q+j+r+k", "i+p+j+q+k+r"]);
        assert_eq!(select_orders(&ranked[..1], "p+i+q+j+r+k", 3), ["p+i+q+j+r+k"]);
    }
}
