//! The SpGEMM suite on the C backend: C = A·B with A, B and C in CSR, f64,
//! on every matrix of the shared data folder (a generated power-law matrix
//! without it), as paper 001 sets it up: B is Aᵀ with its columns shifted
//! by one (column j of Aᵀ moves to j + 1 mod its width), so C is not
//! symmetric.
//!
//! # What is timed
//!
//! Spindle as a user gets it: `spindle run "C[i,j] = A[i,k] * B[k,j]"
//! --format A=csr --format B=csr --format C=csr`, the level path's row-wise
//! (Gustavson) kernel with a dense workspace per thread, through the
//! driver's `Compiled::assemble_and_time`: one warm-up, then timed launches,
//! each counting the entries, sizing the arrays and filling them, so every
//! launch allocates its output, as every baseline call does (sprs `&a * &b`,
//! SciPy `A @ B`, MKL `dot_product_mkl(A, B)`). No cache is flushed on
//! either side. Medians are reported.
//!
//! The suite also times the level path's union, `C[i,j] = A[i,j] + D[i,j]`
//! with D = A with its columns shifted by one (two patterns held apart by a
//! column), all CSR, against sprs `&a + &d` and SciPy `A + D`.
//!
//! One thread is the comparison the goal is on (sprs and SciPy have no
//! other); Spindle and MKL also run on all threads.
//!
//! # Workspace bytes
//!
//! Spindle's dense workspace holds, per thread, a value (8 bytes) and a list
//! slot (8 bytes) per column of C, a mark bit per column and a summary bit
//! per 64 marks, beside the per-row counts (8 bytes per row) that size the
//! output: [`workspace_bytes`]. With an ISM policy (`--workspace hash`,
//! ...) it is the kernel's own count of the most its workspace held.
//!
//! # Check
//!
//! Our output's levels are read back with every promise checked, then
//! compared entry by entry with sprs's product (max |difference| over max
//! |value|); SciPy's and MKL's with their entry count, value sum and sum of
//! squares.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use spindle::{CBackend, ElemType, Input, Problem, Schedule, Timing, TimingOptions};
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::{Compressed, Coo, DType};

use crate::python::{self, PythonEnv};
use crate::{Machine, geomean, loadavg, machine, wanted};

pub const STATEMENT: &str = "C[i,j] = A[i,k] * B[k,j]";
pub const ADD: &str = "C[i,j] = A[i,j] + D[i,j]";
pub const GOAL: &str = "Spindle >= 1.0x SciPy on one thread on at least 6 of the 9 shared matrices";

/// Generated when the shared data folder is absent.
const POWER_LAW: &str = "powerlaw:rows=20000,cols=20000,nnz=100000,seed=7";

#[derive(Clone, Debug)]
pub struct SpgemmOptions {
    pub timing: TimingOptions,
    /// Threads of the all-thread runs.
    pub threads: usize,
    /// Run the Python baselines (installing them on first use).
    pub python: bool,
    /// The workspace policy of our kernel (`auto`, `dense` or `hash`).
    pub workspace: String,
    pub filter: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpgemmReport {
    pub suite: String,
    pub statement: String,
    pub setup: String,
    pub machine: Machine,
    pub loadavg_before: Option<String>,
    pub loadavg_after: Option<String>,
    pub warmup: usize,
    pub repeats: usize,
    pub threads: usize,
    /// Our kernel's `workspace=` schedule item.
    #[serde(default)]
    pub workspace: String,
    pub timing_protocol: String,
    pub goal: String,
    pub notes: Vec<String>,
    pub results: Vec<SpgemmResult>,
    pub summary: SpgemmSummary,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpgemmResult {
    pub matrix: String,
    pub rows: usize,
    pub cols: usize,
    pub nnz_a: usize,
    pub nnz_c: usize,
    /// Multiplications: Σ over A's entries (i, k) of B's row k's length.
    pub products: usize,
    pub spindle_one_thread: Timing,
    pub spindle_all_threads: Timing,
    /// Peak bytes of the workspace, on one thread (the dense one computed
    /// from the columns; an ISM's as the kernel counted it).
    pub workspace_bytes: usize,
    /// Max |ours − sprs| over max |sprs|.
    pub max_rel_error_vs_sprs: f64,
    pub baselines: Vec<Baseline>,
    /// `C = A + D` (D: A shifted by a column), ours and sprs's; SciPy's is
    /// the `scipy-add` baseline.
    pub add: AddResult,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AddResult {
    pub nnz_c: usize,
    pub spindle_one_thread: Timing,
    pub spindle_all_threads: Timing,
    pub sprs_ms: f64,
    pub max_rel_error_vs_sprs: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub library: String,
    pub threads: usize,
    pub call: String,
    pub median_ms: Option<f64>,
    pub times_ms: Vec<f64>,
    /// Every timed call (the Python baselines; empty for sprs, whose
    /// median is timed as ours).
    /// Stored entries of its output, against ours.
    pub nnz: Option<usize>,
    /// |sum − ours| / Σ|ours|, from the value sums.
    pub sum_error: Option<f64>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpgemmSummary {
    /// Matrices where Spindle on one thread is at least as fast as SciPy.
    pub wins_vs_scipy: usize,
    pub matrices_with_scipy: usize,
    pub geomean_vs_scipy: Option<f64>,
    pub geomean_vs_sprs: Option<f64>,
    pub geomean_vs_mkl_one_thread: Option<f64>,
    pub geomean_vs_mkl_all_threads: Option<f64>,
    pub goal_met: Option<bool>,
    /// `C = A + D` on one thread: SciPy time / ours.
    pub add_geomean_vs_scipy: Option<f64>,
    pub add_geomean_vs_sprs: Option<f64>,
}

impl SpgemmResult {
    pub fn baseline(&self, library: &str, threads: usize) -> Option<&Baseline> {
        self.baselines.iter().find(|b| b.library == library && b.threads == threads)
    }

    /// Baseline time / Spindle time at the same thread count.
    pub fn speedup(&self, library: &str, threads: usize, all: usize) -> Option<f64> {
        let ours = match (library, threads) {
            ("scipy-add", 1) => &self.add.spindle_one_thread,
            ("scipy-add", _) => &self.add.spindle_all_threads,
            (_, 1) => &self.spindle_one_thread,
            _ => &self.spindle_all_threads,
        };
        let theirs = self.baseline(library, if threads == 1 { 1 } else { all })?.median_ms?;
        Some(theirs / ours.median_ms)
    }
}

/// The matrices: every `.mtx` of the shared folder, or the generated one;
/// a filter that matches none is refused.
pub fn inputs(filter: &[String], progress: impl FnMut(&str)) -> Result<Vec<(String, Coo<f64, i64>)>> {
    let out = matching_inputs(filter, progress)?;
    if out.is_empty() {
        return Err(crate::no_matrix_matches(filter, &[]));
    }
    Ok(out)
}

/// [`inputs`], none where the filter matches none.
pub fn matching_inputs(
    filter: &[String],
    mut progress: impl FnMut(&str),
) -> Result<Vec<(String, Coo<f64, i64>)>> {
    let mut out = Vec::new();
    let files = spindle_formats::data::shared_matrices();
    if files.is_empty() {
        progress("(shared data folder ../shared/data/matrices not found: a generated power-law matrix runs)");
        let spec: GeneratorSpec = POWER_LAW.parse()?;
        let coo: Coo<f32, i32> = spec.generate()?;
        out.push(("powerlaw-100k".to_string(), coo.cast()?));
    }
    for path in files {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if wanted(filter, &name) {
            // Sorted, duplicates summed: cora.mtx, declared symmetric,
            // stores 151 pairs in both triangles (10858 entries read,
            // 10556 nonzeros), which every suite counts once.
            let coo: Coo<f64, i64> = spindle_formats::io::read_mtx(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            out.push((name, coo.canonicalize()));
        }
    }
    Ok(out)
}

/// A with its columns shifted by one: the second addend.
pub fn shifted(a: &Coo<f64, i64>) -> Result<Coo<f64, i64>> {
    let cols = a.shape[1] as i64;
    let shifted: Vec<i64> = a.crd[1].iter().map(|&j| (j + 1) % cols).collect();
    Ok(Coo::new(a.shape.clone(), vec![a.crd[0].clone(), shifted], a.val.clone())?.canonicalize())
}

/// Aᵀ with its columns shifted by one (paper 001's second operand).
pub fn shifted_transpose(a: &Coo<f64, i64>) -> Result<Coo<f64, i64>> {
    let (rows, cols) = (a.shape[0], a.shape[1]);
    let shifted: Vec<i64> = a.crd[0].iter().map(|&i| (i + 1) % rows as i64).collect();
    Ok(Coo::new(vec![cols, rows], vec![a.crd[1].clone(), shifted], a.val.clone())?.canonicalize())
}

pub fn run(opts: &SpgemmOptions, progress: &mut dyn FnMut(&str)) -> Result<SpgemmReport> {
    let loadavg_before = loadavg();
    let matrices = inputs(&opts.filter, &mut *progress)?;
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
    let mut notes = vec![
        "SciPy leaves each row's column indices unsorted; Spindle's CSR output is sorted (the sort is in its time)"
            .to_string(),
        "sprs and SciPy run on one thread whatever the setting".to_string(),
    ];
    if env.is_none() {
        notes.push("SciPy and MKL did not run (no Python baselines)".to_string());
    }
    let mut results = Vec::new();
    for (k, (name, a)) in matrices.iter().enumerate() {
        progress(&format!(
            "spgemm {}/{}: {name} ({}x{}, {} entries)",
            k + 1,
            matrices.len(),
            a.shape[0],
            a.shape[1],
            a.nnz()
        ));
        let result = one(name, a, opts, env.as_ref())?;
        let scipy = result.speedup("scipy", 1, opts.threads).map_or("-".to_string(), |x| format!("{x:.2}x"));
        progress(&format!(
            "  C has {} entries; Spindle {} ms on 1 thread, {} ms on {}; vs SciPy {scipy}",
            result.nnz_c,
            crate::ms_text(Some(result.spindle_one_thread.median_ms)),
            crate::ms_text(Some(result.spindle_all_threads.median_ms)),
            opts.threads
        ));
        results.push(result);
    }
    let summary = summarize(&results, opts.threads);
    Ok(SpgemmReport {
        suite: "spgemm".into(),
        statement: STATEMENT.into(),
        setup: "A in CSR; B = Aᵀ with its columns shifted by one, CSR; C CSR; f64".into(),
        machine: machine(),
        loadavg_before,
        loadavg_after: loadavg(),
        warmup: opts.timing.warmup,
        repeats: opts.timing.repeats,
        threads: opts.threads,
        workspace: opts.workspace.clone(),
        timing_protocol:
            "warm-up, then timed calls; every call (ours and each baseline) allocates its output; \
                          no cache flush; medians"
                .into(),
        goal: GOAL.into(),
        notes,
        results,
        summary,
    })
}

fn one(name: &str, a: &Coo<f64, i64>, opts: &SpgemmOptions, env: Option<&PythonEnv>) -> Result<SpgemmResult> {
    let b = shifted_transpose(a)?;
    let (rows, cols) = (a.shape[0], b.shape[1]);
    let prepared = Problem::new(STATEMENT)
        .tensor("A", a.clone())
        .tensor("B", b.clone())
        .tensor("C", Input::shape(&[rows, cols], ElemType::Value(DType::F64)))
        .format("A", "csr")
        .format("B", "csr")
        .format("C", "csr")
        .prepare()?;
    let backend = CBackend::new();
    let mut ours = Vec::new();
    let mut assembled = None;
    let mut ism_peak = None;
    for threads in [1, opts.threads] {
        let schedule: Schedule =
            format!("path=levels threads={threads} workspace={}", opts.workspace).parse()?;
        let compiled = prepared.compile(&backend, &schedule)?;
        let (out, timing, peak) = compiled.assemble_time_and_measure(opts.timing)?;
        assembled.get_or_insert(out);
        ism_peak = ism_peak.or(peak);
        ours.push(timing);
    }
    let ours_coo = spindle::check::entries(&assembled.expect("ran"))?;

    // sprs, one thread.
    let a_csr = Compressed::from_coo(a, 0)?;
    let b_csr = Compressed::from_coo(&b, 0)?;
    let (a_sprs, b_sprs) = (a_csr.to_sprs()?, b_csr.to_sprs()?);
    let want = &a_sprs * &b_sprs;
    let max_rel_error_vs_sprs = compare(&ours_coo, &want);
    let products: usize = a_csr.crd.iter().map(|&k| b_csr.slice(k as usize).len()).sum();
    let t_sprs = timed(opts.timing, || {
        let c = &a_sprs * &b_sprs;
        std::hint::black_box(c.nnz());
    });
    let ours_sum: f64 = ours_coo.val.iter().sum();
    let ours_abs: f64 = ours_coo.val.iter().map(|v| v.abs()).sum::<f64>().max(f64::MIN_POSITIVE);
    let mut baselines = vec![Baseline {
        library: "sprs".into(),
        threads: 1,
        call: "&a * &b (sprs CsMat product)".into(),
        median_ms: Some(t_sprs.median_ms),
        times_ms: Vec::new(),
        nnz: Some(want.nnz()),
        sum_error: Some((want.data().iter().sum::<f64>() - ours_sum).abs() / ours_abs),
        error: None,
    }];
    let add = add(a, opts, &backend)?;
    let d_csr = Compressed::from_coo(&shifted(a)?, 0)?;
    if let Some(env) = env {
        let inputs = python::SpgemmInputs::write(name, &a_csr, &b_csr, &d_csr)?;
        for threads in [1, opts.threads] {
            let out = python::run_spgemm(env, &inputs, threads, opts.timing)?;
            if let Some(e) = out.error {
                bail!("the SpGEMM baselines: {e}");
            }
            for r in out.results {
                if threads > 1 && r.library.starts_with("scipy") {
                    continue;
                }
                let median = (!r.times_ms.is_empty()).then(|| Timing::of(r.times_ms.clone(), 1).median_ms);
                baselines.push(Baseline {
                    library: r.library,
                    threads,
                    call: r.call.unwrap_or_default(),
                    median_ms: median,
                    times_ms: r.times_ms,
                    nnz: r.nnz,
                    sum_error: r.sum.map(|s| (s - ours_sum).abs() / ours_abs),
                    error: r.error,
                });
            }
        }
    }
    Ok(SpgemmResult {
        matrix: name.to_string(),
        rows,
        cols,
        nnz_a: a.nnz(),
        nnz_c: ours_coo.nnz(),
        products,
        spindle_one_thread: ours[0].clone(),
        spindle_all_threads: ours[1].clone(),
        workspace_bytes: ism_peak.unwrap_or_else(|| workspace_bytes(cols)),
        max_rel_error_vs_sprs,
        baselines,
        add,
    })
}

/// `C = A + D` through the level path (a union of two CSR matrices into
/// CSR) and sprs, checked against each other.
fn add(a: &Coo<f64, i64>, opts: &SpgemmOptions, backend: &CBackend) -> Result<AddResult> {
    let d = shifted(a)?;
    let prepared = Problem::new(ADD)
        .tensor("A", a.clone())
        .tensor("D", d.clone())
        .tensor("C", Input::shape(&a.shape, ElemType::Value(DType::F64)))
        .format("A", "csr")
        .format("D", "csr")
        .format("C", "csr")
        .prepare()?;
    let mut ours = Vec::new();
    let mut assembled = None;
    for threads in [1, opts.threads] {
        let schedule: Schedule = format!("path=levels threads={threads}").parse()?;
        let (out, timing) = prepared.compile(backend, &schedule)?.assemble_and_time(opts.timing)?;
        assembled.get_or_insert(out);
        ours.push(timing);
    }
    let coo = spindle::check::entries(&assembled.expect("ran"))?;
    let (a_sprs, d_sprs) = (Compressed::from_coo(a, 0)?.to_sprs()?, Compressed::from_coo(&d, 0)?.to_sprs()?);
    let want = &a_sprs + &d_sprs;
    let sprs = timed(opts.timing, || {
        std::hint::black_box((&a_sprs + &d_sprs).nnz());
    });
    Ok(AddResult {
        nnz_c: coo.nnz(),
        spindle_one_thread: ours[0].clone(),
        spindle_all_threads: ours[1].clone(),
        sprs_ms: sprs.median_ms,
        max_rel_error_vs_sprs: compare(&coo, &want),
    })
}

/// The dense workspace of one thread over `cols` columns: values, list
/// (one spare slot), marks and their summary, as the C printer allocates it.
pub fn workspace_bytes(cols: usize) -> usize {
    8 * cols + 8 * (cols + 1) + 8 * cols.div_ceil(64) + 8 * cols.div_ceil(4096)
}

/// Times `f` as the driver times kernels.
fn timed(opts: TimingOptions, mut f: impl FnMut()) -> Timing {
    crate::time_state(opts, &mut (), |_| {}, |_| f())
}

/// Max |ours − theirs| over max |theirs|, entry by entry in row-major
/// order; infinite when the patterns differ.
pub fn compare(ours: &Coo<f64, i64>, theirs: &sprs::CsMatI<f64, i64>) -> f64 {
    use sprs::SpIndex;
    let mut scale = f64::MIN_POSITIVE;
    let mut worst = 0.0f64;
    let mut k = 0;
    for (&v, (i, j)) in theirs.iter() {
        scale = scale.max(v.abs());
        if k >= ours.nnz() || ours.crd[0][k] as usize != i.index() || ours.crd[1][k] as usize != j.index() {
            return f64::INFINITY;
        }
        worst = worst.max((ours.val[k] - v).abs());
        k += 1;
    }
    if k != ours.nnz() {
        return f64::INFINITY;
    }
    worst / scale
}

fn summarize(results: &[SpgemmResult], all: usize) -> SpgemmSummary {
    let ratios = |library: &str, threads: usize| -> Vec<f64> {
        results.iter().filter_map(|r| r.speedup(library, threads, all)).collect()
    };
    let scipy = ratios("scipy", 1);
    let wins = scipy.iter().filter(|&&x| x >= 1.0).count();
    SpgemmSummary {
        wins_vs_scipy: wins,
        matrices_with_scipy: scipy.len(),
        geomean_vs_scipy: geomean(scipy.iter().copied()),
        geomean_vs_sprs: geomean(ratios("sprs", 1)),
        geomean_vs_mkl_one_thread: geomean(ratios("mkl", 1)),
        geomean_vs_mkl_all_threads: geomean(ratios("mkl", all)),
        goal_met: (scipy.len() >= 9).then_some(wins >= 6),
        add_geomean_vs_scipy: geomean(ratios("scipy-add", 1)),
        add_geomean_vs_sprs: geomean(
            results.iter().map(|r| r.add.sprs_ms / r.add.spindle_one_thread.median_ms),
        ),
    }
}

/// Writes the report as `spgemm-<date>.json` in `dir`.
pub fn record(report: &SpgemmReport, dir: &std::path::Path) -> Result<PathBuf> {
    crate::record(report, dir, "spgemm")
}
