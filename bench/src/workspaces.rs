//! The sparse-workspace suite (paper 001's evaluation, scaled to this
//! machine), every kernel through the driver as `spindle run` builds it:
//!
//! 1. **Policies on real matrices**: row-wise SpGEMM A·shift(Aᵀ) in CSR
//!    (as [`crate::spgemm`] sets it up), f64, one thread, under the dense
//!    workspace and every ISM policy (`workspace=bucket|hash|coord|map|
//!    vector`), with sprs, SciPy and MKL in the same run. Peak workspace
//!    bytes: the kernel's own count for the ISM policies (the most any
//!    thread's workspace held), [`crate::spgemm::workspace_bytes`] for the
//!    dense one.
//! 2. **Row-wise sweep** (Fig. 15): 128 rows of 16 products each of 1024
//!    entries (2^14 products per row), the output's width swept from 2^11
//!    to 2^23, so deduplication (products per output entry) falls from 8
//!    to 1.
//! 3. **Outer-product sweep** (Fig. 16): DCSC × DCSR, 2000 × K × 2000,
//!    100 entries per slice of K, K swept from 8 to 1024, so the
//!    second-order workspace's deduplication grows with K.
//! 4. **Ablation** (Fig. 24): the outer product under Bucket and Coord with
//!    the ISM's optimizations switched on one at a time, from a first
//!    capacity of [`ABLATION_CAPACITY`], on the matrices of at most
//!    [`ABLATION_PRODUCTS`] products (without reallocation every merge
//!    rewrites the all array: quadratic in the output).
//! 5. **Parallel ISM**: the library's [`spindle_workspaces::ism::parallel`]
//!    on the outer product's inserts, on one thread and on all.
//!
//! Every launch (ours and each baseline) allocates its output; no cache is
//! flushed; medians.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use spindle::{CBackend, ElemType, Input, Problem, Schedule, Timing, TimingOptions};
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::{Compressed, Coo, DType};
use spindle_workspaces::ism::{self, Hash, Labels, Options};

use crate::python::{self, PythonEnv};
use crate::spgemm::{compare, inputs, shifted, shifted_transpose, workspace_bytes};
use crate::{Machine, geomean, loadavg, machine};

pub const PRODUCT: &str = "C[i,j] = A[i,k] * B[k,j]";
pub const GOALS: [&str; 4] = [
    "the best sparse policy reaches >= 1.0x SciPy on one thread on at least 6 of the 9 matrices",
    "the sweeps reproduce the crossover: sparse beats dense at low deduplication, dense wins at high",
    "on 2 cores the parallel ISM runs >= 1.6x as fast as the sequential one (geomean over the inputs of at least 10^6 products)",
    "a sparse policy's peak workspace bytes <= the dense workspace's on every matrix where C is sparser than 10%",
];

/// The ISM policies, as `workspace=` names.
pub const SPARSE: [&str; 5] = ["bucket", "hash", "coord", "map", "vector"];

#[derive(Clone, Debug)]
pub struct WorkspacesOptions {
    pub timing: TimingOptions,
    /// Threads of the parallel ISM's all-thread run.
    pub threads: usize,
    pub python: bool,
    pub filter: Vec<String>,
    /// Run the synthetic sweeps, the ablation and the parallel ISM too.
    pub sweeps: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkspacesReport {
    pub suite: String,
    pub machine: Machine,
    pub loadavg_before: Option<String>,
    pub loadavg_after: Option<String>,
    pub warmup: usize,
    pub repeats: usize,
    pub timing_protocol: String,
    pub goals: Vec<String>,
    pub notes: Vec<String>,
    pub matrices: Vec<MatrixRun>,
    pub row_sweep: Vec<SweepPoint>,
    pub outer_sweep: Vec<SweepPoint>,
    pub ablation: Vec<AblationRun>,
    pub parallel: Vec<ParallelRun>,
    pub summary: WorkspacesSummary,
}

/// One kernel variant: its median and its workspace's peak bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// The schedule's workspace items (`workspace=hash ws.pipeline=on`).
    pub schedule: String,
    pub timing: Timing,
    pub peak_bytes: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatrixRun {
    pub matrix: String,
    pub rows: usize,
    pub cols: usize,
    pub nnz_c: usize,
    /// nnz(C) / (rows · cols).
    pub density_c: f64,
    /// `dense` first, then each ISM policy.
    pub variants: Vec<Variant>,
    pub sprs_ms: f64,
    pub scipy_ms: Option<f64>,
    pub mkl_ms: Option<f64>,
    /// Max |ours − sprs| / max |sprs| over every variant.
    pub max_rel_error_vs_sprs: f64,
}

/// A point of a synthetic sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// The swept dimension's value (the output width, or K).
    pub x: usize,
    pub products: usize,
    pub nnz_c: usize,
    /// Products per output entry.
    pub deduplication: f64,
    pub variants: Vec<Variant>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AblationRun {
    pub matrix: String,
    pub products: usize,
    pub variants: Vec<Variant>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParallelRun {
    pub input: String,
    pub policy: String,
    pub products: usize,
    pub one_thread: Timing,
    pub all_threads: Timing,
    pub threads: usize,
    pub speedup: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkspacesSummary {
    /// Matrices where the fastest sparse policy is at least as fast as SciPy.
    pub best_sparse_wins_vs_scipy: usize,
    pub matrices_with_scipy: usize,
    pub best_sparse_geomean_vs_scipy: Option<f64>,
    pub dense_geomean_vs_scipy: Option<f64>,
    /// Per policy: how often it was the fastest sparse one.
    pub fastest_sparse: Vec<(String, usize)>,
    /// Row-wise sweep: dense / best sparse time at the lowest and the
    /// highest deduplication (> 1: sparse wins).
    pub row_sweep_sparse_over_dense: Option<(f64, f64)>,
    pub outer_sweep_sparse_over_dense: Option<(f64, f64)>,
    pub parallel_speedup: Option<f64>,
    /// Matrices with C sparser than 10% where the fastest sparse policy's
    /// peak bytes exceed the dense workspace's.
    pub fastest_memory_misses: Vec<String>,
    /// The sparse policies whose peak bytes stay within the dense
    /// workspace's on every matrix with C sparser than 10%.
    pub policies_within_dense_memory: Vec<String>,
    pub goals_met: Vec<Option<bool>>,
}

/// The fastest of the ISM variants (every variant after the dense one).
fn best_sparse(variants: &[Variant]) -> &Variant {
    variants[1..]
        .iter()
        .min_by(|a, b| a.timing.median_ms.total_cmp(&b.timing.median_ms))
        .expect("every policy ran")
}

impl MatrixRun {
    fn dense(&self) -> &Variant {
        &self.variants[0]
    }

    /// The fastest ISM policy.
    pub fn best_sparse(&self) -> &Variant {
        best_sparse(&self.variants)
    }
}

impl SweepPoint {
    fn dense(&self) -> &Variant {
        &self.variants[0]
    }

    fn best_sparse(&self) -> &Variant {
        best_sparse(&self.variants)
    }

    /// Dense time / best sparse time (> 1: sparse wins).
    pub fn sparse_speedup(&self) -> f64 {
        self.dense().timing.median_ms / self.best_sparse().timing.median_ms
    }
}

pub fn run(opts: &WorkspacesOptions, progress: &mut dyn FnMut(&str)) -> Result<WorkspacesReport> {
    let loadavg_before = loadavg();
    let env: Option<PythonEnv> = match opts.python {
        false => None,
        true => match python::ensure(&mut *progress) {
            Ok(env) => Some(env),
            Err(why) => {
                progress(&format!("(Python baselines skipped: {why})"));
                None
            }
        },
    };
    let backend = CBackend::new();
    let matrices = inputs(&opts.filter, &mut *progress)?;
    let mut runs = Vec::new();
    for (n, (name, a)) in matrices.iter().enumerate() {
        progress(&format!(
            "workspaces {}/{}: {name} ({} entries), row-wise SpGEMM",
            n + 1,
            matrices.len(),
            a.nnz()
        ));
        let run = matrix(name, a, opts, env.as_ref(), &backend)?;
        let best = run.best_sparse();
        progress(&format!(
            "  dense {} ms; best sparse {} {} ms ({} B vs {} B); SciPy {}",
            crate::ms_text(Some(run.dense().timing.median_ms)),
            best.schedule,
            crate::ms_text(Some(best.timing.median_ms)),
            best.peak_bytes,
            run.dense().peak_bytes,
            run.scipy_ms.map_or("-".to_string(), |t| format!("{} ms", crate::ms_text(Some(t))))
        ));
        runs.push(run);
    }
    let (mut row_sweep, mut outer_sweep, mut ablation, mut parallel) = (vec![], vec![], vec![], vec![]);
    if opts.sweeps {
        row_sweep = row_wise_sweep(opts, &backend, &mut *progress)?;
        outer_sweep = outer_product_sweep(opts, &backend, &mut *progress)?;
        for (name, a) in &matrices {
            if products(a, &shifted_transpose(a)?) <= ABLATION_PRODUCTS {
                progress(&format!("ablation: {name}, outer-product SpGEMM"));
                ablation.push(ablate(name, a, opts, &backend)?);
            }
            parallel.push(parallel_ism(name, a, opts)?);
            let last = parallel.last().expect("pushed");
            progress(&format!("  parallel ISM {:.2}x on {} threads", last.speedup, last.threads));
        }
    }
    let summary = summarize(&runs, &row_sweep, &outer_sweep, &parallel);
    let mut notes = vec![
        "dense: the inline dense workspace (marks, a summary word per 64 marks); its bytes are \
         computed from the columns (values, list, marks, summary) on one thread"
            .to_string(),
        "ISM policies print calls into the workspaces crate's C runtime; their peak bytes are the \
         kernel's own count of what its accumulation, all and batch arrays held"
            .to_string(),
        "sprs and SciPy run on one thread; Spindle's kernels run with threads=1".to_string(),
    ];
    if env.is_none() {
        notes.push("SciPy and MKL did not run (no Python baselines)".to_string());
    }
    Ok(WorkspacesReport {
        suite: "workspaces".into(),
        machine: machine(),
        loadavg_before,
        loadavg_after: loadavg(),
        warmup: opts.timing.warmup,
        repeats: opts.timing.repeats,
        timing_protocol: "warm-up, then timed calls; every call (ours and each baseline) allocates its \
                          output; no cache flush; medians"
            .into(),
        goals: GOALS.iter().map(|g| g.to_string()).collect(),
        notes,
        matrices: runs,
        row_sweep,
        outer_sweep,
        ablation,
        parallel,
        summary,
    })
}

/// The product `a · b` with the given formats, compiled under each of
/// `schedules` (`threads=1 path=levels` added), assembled, checked against
/// the first variant's output, timed.
fn variants(
    a: &Coo<f64, i64>,
    b: &Coo<f64, i64>,
    formats: [&str; 3],
    schedules: &[String],
    opts: &WorkspacesOptions,
    backend: &CBackend,
) -> Result<(Vec<Variant>, Coo<f64, i64>)> {
    let prepared = Problem::new(PRODUCT)
        .tensor("A", a.clone())
        .tensor("B", b.clone())
        .tensor("C", Input::shape(&[a.shape[0], b.shape[1]], ElemType::Value(DType::F64)))
        .format("A", formats[0])
        .format("B", formats[1])
        .format("C", formats[2])
        .prepare()?;
    let mut out = Vec::new();
    let mut first: Option<Coo<f64, i64>> = None;
    for items in schedules {
        let schedule: Schedule = format!("path=levels threads=1 {items}").parse()?;
        let compiled = prepared.compile(backend, &schedule)?;
        let (assembled, timing, peak) = compiled.assemble_time_and_measure(opts.timing)?;
        let coo = spindle::check::entries(&assembled)?;
        match &first {
            None => first = Some(coo),
            Some(want) => {
                // Sums in another order round differently: values are
                // compared against the largest.
                let scale = want.val.iter().fold(f64::MIN_POSITIVE, |m, w| m.max(w.abs()));
                let same = want.crd == coo.crd
                    && want.val.iter().zip(&coo.val).all(|(w, g)| (w - g).abs() <= 1e-12 * scale);
                if !same {
                    bail!("`{items}` assembled a different C than `{}`", schedules[0]);
                }
            }
        }
        let peak_bytes = peak.unwrap_or_else(|| workspace_bytes(b.shape[1]));
        out.push(Variant { schedule: items.clone(), timing, peak_bytes });
    }
    Ok((out, first.expect("a variant ran")))
}

fn policy_schedules() -> Vec<String> {
    std::iter::once("workspace=dense".to_string())
        .chain(SPARSE.iter().map(|p| format!("workspace={p}")))
        .collect()
}

fn matrix(
    name: &str,
    a: &Coo<f64, i64>,
    opts: &WorkspacesOptions,
    env: Option<&PythonEnv>,
    backend: &CBackend,
) -> Result<MatrixRun> {
    let b = shifted_transpose(a)?;
    let (variants, c) = variants(a, &b, ["csr", "csr", "csr"], &policy_schedules(), opts, backend)?;
    let a_csr = Compressed::from_coo(a, 0)?;
    let b_csr = Compressed::from_coo(&b, 0)?;
    let (a_sprs, b_sprs) = (a_csr.to_sprs()?, b_csr.to_sprs()?);
    let want = &a_sprs * &b_sprs;
    let max_rel_error_vs_sprs = compare(&c, &want);
    let sprs = crate::time_state(
        opts.timing,
        &mut (),
        |_| {},
        |_| {
            std::hint::black_box((&a_sprs * &b_sprs).nnz());
        },
    );
    let (mut scipy_ms, mut mkl_ms) = (None, None);
    if let Some(env) = env {
        let d_csr = Compressed::from_coo(&shifted(a)?, 0)?;
        let inputs = python::SpgemmInputs::write(name, &a_csr, &b_csr, &d_csr)?;
        let out = python::run_spgemm(env, &inputs, 1, opts.timing)?;
        for r in out.results {
            let median = (!r.times_ms.is_empty()).then(|| Timing::of(r.times_ms.clone(), 1).median_ms);
            match r.library.as_str() {
                "scipy" => scipy_ms = median,
                "mkl" => mkl_ms = median,
                _ => {}
            }
        }
    }
    let (rows, cols) = (a.shape[0], b.shape[1]);
    Ok(MatrixRun {
        matrix: name.to_string(),
        rows,
        cols,
        nnz_c: c.nnz(),
        density_c: c.nnz() as f64 / (rows as f64 * cols as f64),
        variants,
        sprs_ms: sprs.median_ms,
        scipy_ms,
        mkl_ms,
        max_rel_error_vs_sprs,
    })
}

/// Uniformly random entries (distinct coordinates).
fn uniform(rows: usize, cols: usize, nnz: usize, seed: u64) -> Result<Coo<f64, i64>> {
    let spec: GeneratorSpec = format!("uniform:rows={rows},cols={cols},nnz={nnz},seed={seed}").parse()?;
    let coo: Coo<f32, i32> = spec.generate()?;
    Ok(coo.cast()?)
}

/// Products of `a · b`: Σ over a's entries (i, k) of b's row k's length.
fn products(a: &Coo<f64, i64>, b: &Coo<f64, i64>) -> usize {
    let mut row = vec![0usize; b.shape[0]];
    for &k in &b.crd[0] {
        row[k as usize] += 1;
    }
    a.crd[1].iter().map(|&k| row[k as usize]).sum()
}

fn row_wise_sweep(
    opts: &WorkspacesOptions,
    backend: &CBackend,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<SweepPoint>> {
    let (rows, k) = (128, 256);
    let a = uniform(rows, k, rows * 16, 11)?;
    let schedules: Vec<String> = ["workspace=dense", "workspace=bucket", "workspace=hash", "workspace=coord"]
        .map(String::from)
        .to_vec();
    let mut out = Vec::new();
    for log in (11..=23).step_by(2) {
        let width = 1usize << log;
        let b = uniform(k, width, k * 1024, 12 + log as u64)?;
        let (variants, c) = variants(&a, &b, ["csr", "csr", "csr"], &schedules, opts, backend)?;
        let products = products(&a, &b);
        let point = SweepPoint {
            x: width,
            products,
            nnz_c: c.nnz(),
            deduplication: products as f64 / c.nnz().max(1) as f64,
            variants,
        };
        progress(&format!(
            "row-wise sweep: width 2^{log}, deduplication {:.2}: dense/sparse {:.2}x (above 1: the sparse workspace wins)",
            point.deduplication,
            point.sparse_speedup()
        ));
        out.push(point);
    }
    Ok(out)
}

fn outer_product_sweep(
    opts: &WorkspacesOptions,
    backend: &CBackend,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<SweepPoint>> {
    let (rows, cols, per_slice) = (2000, 2000, 100);
    let schedules: Vec<String> = ["workspace=dense", "workspace=bucket", "workspace=hash", "workspace=coord"]
        .map(String::from)
        .to_vec();
    let mut out = Vec::new();
    for k in [8, 32, 128, 512, 1024] {
        let a = uniform(rows, k, k * per_slice, 21 + k as u64)?;
        let b = uniform(k, cols, k * per_slice, 22 + k as u64)?;
        let (variants, c) = variants(&a, &b, ["dcsc", "dcsr", "csr"], &schedules, opts, backend)?;
        let products = products(&a, &b);
        let point = SweepPoint {
            x: k,
            products,
            nnz_c: c.nnz(),
            deduplication: products as f64 / c.nnz().max(1) as f64,
            variants,
        };
        progress(&format!(
            "outer-product sweep: K {k}, deduplication {:.2}: dense/sparse {:.2}x (above 1: the sparse workspace wins)",
            point.deduplication,
            point.sparse_speedup()
        ));
        out.push(point);
    }
    Ok(out)
}

/// The parallel ISM's goal is judged on inputs of at least this many
/// products (below, starting threads costs more than the work).
pub const PARALLEL_PRODUCTS: usize = 1_000_000;

/// The ablation's first capacity of the accumulation array.
pub const ABLATION_CAPACITY: usize = 4096;
/// The ablation runs on matrices whose outer product has at most this many
/// products.
pub const ABLATION_PRODUCTS: usize = 2_000_000;

/// The ablation's variants: every optimization off, then each on alone,
/// then the defaults, then the defaults with pipelining.
pub fn ablation_schedules(policy: &str) -> Vec<String> {
    let switches: &[&str] = if policy == "coord" {
        &["realloc", "double_buffer", "pipeline", "indexing"]
    } else {
        &["realloc", "double_buffer", "pipeline"]
    };
    let with = |on: &[&str]| {
        let items: Vec<String> = ["realloc", "double_buffer", "indexing", "pipeline"]
            .iter()
            .map(|s| format!("ws.{s}={}", if on.contains(s) { "on" } else { "off" }))
            .collect();
        format!("workspace={policy} ws.cap={ABLATION_CAPACITY} {}", items.join(" "))
    };
    let mut out = vec![with(&[])];
    out.extend(switches.iter().map(|s| with(&[s])));
    out.push(with(&["realloc", "double_buffer", "indexing"]));
    out.push(with(&["realloc", "double_buffer", "indexing", "pipeline"]));
    out
}

fn ablate(
    name: &str,
    a: &Coo<f64, i64>,
    opts: &WorkspacesOptions,
    backend: &CBackend,
) -> Result<AblationRun> {
    let b = shifted_transpose(a)?;
    let mut all = Vec::new();
    for policy in ["bucket", "coord"] {
        let (variants, _) =
            variants(a, &b, ["dcsc", "dcsr", "csr"], &ablation_schedules(policy), opts, backend)?;
        all.extend(variants);
    }
    Ok(AblationRun { matrix: name.to_string(), products: products(a, &b), variants: all })
}

/// The library's parallel ISM on the outer product's inserts (a part per
/// slice of K), on one thread and on all; the results compared.
fn parallel_ism(name: &str, a: &Coo<f64, i64>, opts: &WorkspacesOptions) -> Result<ParallelRun> {
    let b = shifted_transpose(a)?;
    let a_csc = Compressed::from_coo(a, 1)?;
    let b_csr = Compressed::from_coo(&b, 0)?;
    let labels = Labels::new(&[a.shape[0], b.shape[1]])?;
    let parts = a.shape[1];
    let produce = |k: usize, insert: &mut dyn FnMut(&[usize], f64)| {
        for p in a_csc.slice(k) {
            for q in b_csr.slice(k) {
                insert(&[a_csc.crd[p] as usize, b_csr.crd[q] as usize], a_csc.val[p] * b_csr.val[q]);
            }
        }
    };
    let capacity = 1 << 16;
    let run = |threads: usize| {
        ism::parallel(&labels, threads, || Hash::new(capacity), Options::default(), parts, produce)
    };
    let want = run(1);
    let got = run(opts.threads);
    let scale = want.iter().fold(f64::MIN_POSITIVE, |m, w| m.max(w.1.abs()));
    if want.len() != got.len()
        || want.iter().zip(&got).any(|(w, g)| w.0 != g.0 || (w.1 - g.1).abs() > 1e-12 * scale)
    {
        bail!("{name}: the parallel ISM on {} threads differs from one thread", opts.threads);
    }
    let time = |threads: usize| {
        crate::time_state(
            opts.timing,
            &mut (),
            |_| {},
            |_| {
                std::hint::black_box(run(threads).len());
            },
        )
    };
    let one_thread = time(1);
    let all_threads = time(opts.threads);
    Ok(ParallelRun {
        input: name.to_string(),
        policy: "hash".into(),
        products: products(a, &b),
        speedup: one_thread.median_ms / all_threads.median_ms,
        one_thread,
        all_threads,
        threads: opts.threads,
    })
}

fn summarize(
    runs: &[MatrixRun],
    row: &[SweepPoint],
    outer: &[SweepPoint],
    parallel: &[ParallelRun],
) -> WorkspacesSummary {
    let vs_scipy: Vec<f64> =
        runs.iter().filter_map(|r| Some(r.scipy_ms? / r.best_sparse().timing.median_ms)).collect();
    let dense_vs_scipy = runs.iter().filter_map(|r| Some(r.scipy_ms? / r.dense().timing.median_ms));
    let wins = vs_scipy.iter().filter(|&&x| x >= 1.0).count();
    let mut fastest = std::collections::BTreeMap::new();
    for r in runs {
        *fastest.entry(r.best_sparse().schedule.clone()).or_insert(0) += 1;
    }
    let ends = |points: &[SweepPoint]| -> Option<(f64, f64)> {
        let low = points.iter().min_by(|a, b| a.deduplication.total_cmp(&b.deduplication))?;
        let high = points.iter().max_by(|a, b| a.deduplication.total_cmp(&b.deduplication))?;
        Some((low.sparse_speedup(), high.sparse_speedup()))
    };
    let sparse_outputs: Vec<&MatrixRun> = runs.iter().filter(|r| r.density_c < 0.1).collect();
    let fastest_memory_misses: Vec<String> = sparse_outputs
        .iter()
        .filter(|r| r.best_sparse().peak_bytes > r.dense().peak_bytes)
        .map(|r| r.matrix.clone())
        .collect();
    let policies_within_dense_memory: Vec<String> = SPARSE
        .iter()
        .filter(|p| {
            let schedule = format!("workspace={p}");
            sparse_outputs.iter().all(|r| {
                r.variants.iter().any(|v| v.schedule == schedule && v.peak_bytes <= r.dense().peak_bytes)
            })
        })
        .map(|p| p.to_string())
        .collect();
    let crossover = |e: Option<(f64, f64)>| e.map(|(low, high)| low > 1.0 && high < 1.0);
    let row_ends = ends(row);
    let outer_ends = ends(outer);
    let parallel_speedup =
        geomean(parallel.iter().filter(|p| p.products >= PARALLEL_PRODUCTS).map(|p| p.speedup));
    WorkspacesSummary {
        best_sparse_wins_vs_scipy: wins,
        matrices_with_scipy: vs_scipy.len(),
        best_sparse_geomean_vs_scipy: geomean(vs_scipy.iter().copied()),
        dense_geomean_vs_scipy: geomean(dense_vs_scipy),
        fastest_sparse: fastest.into_iter().collect(),
        row_sweep_sparse_over_dense: row_ends,
        outer_sweep_sparse_over_dense: outer_ends,
        parallel_speedup,
        fastest_memory_misses,
        policies_within_dense_memory: policies_within_dense_memory.clone(),
        goals_met: vec![
            (vs_scipy.len() >= 9).then_some(wins >= 6),
            crossover(row_ends).zip(crossover(outer_ends)).map(|(a, b)| a && b),
            parallel_speedup.map(|s| s >= 1.6),
            (!sparse_outputs.is_empty()).then_some(!policies_within_dense_memory.is_empty()),
        ],
    }
}
