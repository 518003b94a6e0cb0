//! The ReACT suite (paper 003's evaluation, its four kernels), every kernel
//! through the driver as `spindle run` builds it, under `fusion=none`,
//! `maximal` and `trie`, in one process on one thread, f64:
//!
//! - **SDDMM** `A[i,j] = B[i,j] * (C[i,k] * D[k,j])`, B a shared matrix in
//!   CSR, A in B's pattern, D column-major, NK = 16, 32, 64;
//! - **GNN kernel 1** `Z[i,j] = A[i,k] * X[k,h] * W[h,j]`, NH = 128, 256,
//!   NJ = 16, and NJ = 32, 64 at NH = 128: by its work, maximal's
//!   `nnz·NH·NJ` against trie's `nnz·NH + NI·NH·NJ`, trie's advantage
//!   `nnz·NJ / (nnz + NI·NJ)` does not change with NH but grows with NJ (to
//!   the rows' mean length), so NJ is swept to show it;
//! - **GNN kernel 2** `Z[i,j] = (A[i,h] * (X[i,k] * Y[k,h])) * V[h,j]`, NK
//!   (the features X·Y sums over) = 128, 256, NJ = 16, Y column-major (the second
//!   `Y` is `V` here: one matrix cannot be NK × NI and NI × NJ);
//! - **MTTKRP** `A[i,r] = X[i,j,k] * C[k,r] * B[j,r]`, X a shared FROSTT
//!   tensor in CSF, R = 16, 32.
//!
//! SciPy joins for the first three (`python/react_baselines.py`: one
//! library call per operation, intermediates in full). Dense operands are
//! seeded random values in ±[0.1, 1). The policies' outputs are compared
//! with each other, and SciPy's by the sum of its values. Every launch
//! starts from a zeroed output (outside the clock, the same for every
//! policy); each kernel allocates its temporaries inside it; SciPy's calls
//! allocate everything; medians.

use anyhow::{Context, Result};
use ndarray::ArrayD;
use serde::{Deserialize, Serialize};
use spindle::{CBackend, Input, Problem, ProgramRun, Schedule, Timing, TimingOptions};
use spindle_formats::{Compressed, Coo};

use crate::python::{self, PythonEnv};
use crate::{Machine, geomean, loadavg, machine, wanted};

pub const GOALS: [&str; 4] = [
    "trie >= 1.5x maximal on SDDMM",
    "GNN kernel 1 under trie is asymptotically faster than maximal: the ratio grows with NH",
    "trie is never slower than none by more than 5%",
    "the closing note has the paper's Table 2 (predicted) beside what was measured",
];

pub const FUSIONS: [&str; 3] = ["none", "maximal", "trie"];

/// SciPy's intermediates larger than this many values are not made.
pub const SCIPY_DENSE_LIMIT: usize = 1 << 26;

/// The dense operand a kernel reads down its columns in a dot product
/// (SDDMM's `D[k,j]` and GNN kernel 2's `Y[k,h]`, summed over `k` for each
/// stored `(i, j)`), stored column-major (`dd:modes=1-0`) so that the sum
/// reads it contiguously, as a user would store it; the same for every
/// policy.
fn column_major(kernel: &str) -> Option<&'static str> {
    match kernel {
        "sddmm" => Some("D"),
        "gnn2" => Some("Y"),
        _ => None,
    }
}

pub const SDDMM: &str = "A[i,j] = B[i,j] * (C[i,k] * D[k,j])";
/// GNN kernel 1's NJ where NH is swept, and NH where NJ is.
pub const GNN1_NJ: usize = 16;
pub const GNN1_NH: usize = 128;
pub const GNN1: &str = "Z[i,j] = A[i,k] * X[k,h] * W[h,j]";
pub const GNN2: &str = "Z[i,j] = (A[i,h] * (X[i,k] * Y[k,h])) * V[h,j]";
pub const MTTKRP: &str = "A[i,r] = X[i,j,k] * C[k,r] * B[j,r]";

#[derive(Clone, Debug)]
pub struct ReactOptions {
    pub timing: TimingOptions,
    pub python: bool,
    /// Only these inputs (file stems).
    pub filter: Vec<String>,
    /// Only these kernels (`sddmm`, `gnn1`, `gnn2`, `mttkrp`).
    pub kernels: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReactReport {
    pub suite: String,
    pub machine: Machine,
    pub loadavg_before: Option<String>,
    pub loadavg_after: Option<String>,
    pub warmup: usize,
    pub repeats: usize,
    pub timing_protocol: String,
    pub goals: Vec<String>,
    pub notes: Vec<String>,
    pub runs: Vec<KernelRun>,
    pub summary: ReactSummary,
}

/// One kernel on one input at one size, under every policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelRun {
    pub kernel: String,
    pub input: String,
    /// The swept size's name (NK, NH, R) and value.
    pub size_name: String,
    pub size: usize,
    pub nnz: usize,
    /// In [`FUSIONS`] order.
    pub policies: Vec<PolicyRun>,
    /// Per policy (in [`FUSIONS`] order), its time in each round (ms): the
    /// median of that round's batch. Ratios between policies are taken
    /// round by round ([`KernelRun::ratio`]).
    #[serde(default)]
    pub round_ms: Vec<Vec<f64>>,
    /// GNN kernel 1: maximal's work over trie's, `nnz·NJ / (nnz + NI·NJ)`
    /// (multiply-adds), what maximal / trie would be if time followed work.
    #[serde(default)]
    pub work_maximal_over_trie: Option<f64>,
    pub scipy_ms: Option<f64>,
    pub scipy_error: Option<String>,
    /// Max |x − trie| / max |trie| over the other policies' outputs.
    pub max_rel_error_between_policies: f64,
    /// |sum(trie) − sum(SciPy)| / sqrt(sum of squares(SciPy)).
    pub scipy_sum_rel_diff: Option<f64>,
}

impl KernelRun {
    /// `a`'s time over `b`'s: the median over the rounds of the ratio
    /// within each round, where the two ran within milliseconds of each
    /// other. This shared machine has slow spells of a few hundred
    /// milliseconds that slow every policy alike (SDDMM on sparse-dnn,
    /// NK 64: all three policies 1.3x slower for three rounds in a row);
    /// one that begins between two policies' rounds moves the ratio of
    /// their medians but only one round's ratio. Records without round
    /// times: the ratio of the medians.
    pub fn ratio(&self, a: &str, b: &str) -> f64 {
        let at = |f: &str| FUSIONS.iter().position(|x| *x == f);
        match (at(a).and_then(|i| self.round_ms.get(i)), at(b).and_then(|i| self.round_ms.get(i))) {
            (Some(ta), Some(tb)) if !ta.is_empty() && ta.len() == tb.len() => {
                Timing::of(ta.iter().zip(tb).map(|(x, y)| x / y).collect(), 1).median_ms
            }
            _ => ms(self, a) / ms(self, b),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyRun {
    pub fusion: String,
    pub timing: Timing,
    /// Statements in three-address form (maximal: the one they were
    /// substituted into).
    pub statements: usize,
    /// What the policy decided beyond its name (input-sensitive fusion).
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReactSummary {
    /// maximal / trie, geomean over SDDMM's runs.
    pub sddmm_trie_over_maximal: Option<f64>,
    /// (NH, maximal / trie geomean over the matrices) for GNN kernel 1 at
    /// NJ = 16.
    pub gnn1_trie_over_maximal_by_nh: Vec<(usize, f64)>,
    /// (NJ, maximal / trie geomean over the matrices, the same geomean of
    /// their work ratios) for GNN kernel 1 at NH = 128.
    #[serde(default)]
    pub gnn1_trie_over_maximal_by_nj: Vec<(usize, f64, f64)>,
    /// The largest trie / none over every run, and where.
    pub worst_trie_over_none: Option<(String, f64)>,
    /// Geomean of SciPy / trie per kernel where SciPy ran.
    pub scipy_over_trie: Vec<(String, f64)>,
}

/// The shared matrices (or a generated one where the folder is absent).
fn matrices(filter: &[String], progress: &mut dyn FnMut(&str)) -> Result<Vec<(String, Coo<f64, i64>)>> {
    crate::spgemm::matching_inputs(filter, &mut *progress)
}

/// The shared FROSTT tensors of order 3.
fn tensors(filter: &[String], progress: &mut dyn FnMut(&str)) -> Result<Vec<(String, Coo<f64, i64>)>> {
    let Some(dir) = spindle_formats::data::shared_data_dir() else {
        progress("(shared data folder not found: MTTKRP runs on a generated 200x300x400 tensor)");
        let coo = random_tensor(&[200, 300, 400], 20_000, 7)?;
        return Ok(vec![("random-3d".to_string(), coo)]);
    };
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir.join("tensors"))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    for path in files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "tns")) {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if !wanted(filter, &name) {
            continue;
        }
        let coo: Coo<f64, i64> =
            spindle_formats::io::read_tensor(&path).with_context(|| format!("reading {}", path.display()))?;
        if coo.order() == 3 {
            out.push((name, coo));
        }
    }
    Ok(out)
}

/// Seeded dense values in ±[0.1, 1).
fn dense(shape: &[usize], seed: u64) -> Result<ArrayD<f64>> {
    match spindle::input::random(shape, seed, None)? {
        spindle_ir::tensor::TensorValue::Values(v) => Ok(v),
        spindle_ir::tensor::TensorValue::Indices(_) => unreachable!("values were asked for"),
    }
}

/// A run's output values in a fixed order: a sparse output's in
/// coordinate order, a dense one's row-major.
fn values(run: &ProgramRun) -> Result<Vec<f64>> {
    match &run.assembled {
        Some(a) => Ok(spindle::check::entries(a)?.canonicalize().val),
        None => Ok(run.result.iter().copied().collect()),
    }
}

pub fn run(opts: &ReactOptions, progress: &mut dyn FnMut(&str)) -> Result<ReactReport> {
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
    let want_kernel = |k: &str| opts.kernels.is_empty() || opts.kernels.iter().any(|x| x == k);
    let mut runs = Vec::new();
    let mut notes = vec![
        "one thread; f64; the output zeroed outside the clock before every launch, for every policy"
            .to_string(),
        "fusion=none and trie are one C kernel each (none: one loop nest per statement); maximal is the \
         statements substituted into one, through the level path"
            .to_string(),
        "SDDMM's D and GNN kernel 2's Y, read down their columns by the sums over k, are stored \
         column-major (dd:modes=1-0) for every policy (since 2026-11-28; before, row-major)"
            .to_string(),
    ];
    // The matrices the matrix kernels run on, the tensors MTTKRP runs on:
    // an --input may name either, but must name one.
    let matrices = match ["sddmm", "gnn1", "gnn2"].into_iter().any(want_kernel) {
        true => matrices(&opts.filter, &mut *progress)?,
        false => Vec::new(),
    };
    let tensors = match want_kernel("mttkrp") {
        true => tensors(&opts.filter, &mut *progress)?,
        false => Vec::new(),
    };
    if matrices.is_empty() && tensors.is_empty() {
        anyhow::bail!("no input of the chosen kernels matches --input {}", opts.filter.join(", "));
    }
    for (name, coo) in &matrices {
        let (ni, nj) = (coo.shape[0], coo.shape[1]);
        let csr = Compressed::from_coo(coo, 0)?;
        let sizes: [(&str, &str, &[usize]); 4] = [
            ("sddmm", "NK", &[16, 32, 64]),
            ("gnn1", "NH", &[128, 256]),
            ("gnn1", "NJ", &[32, 64]),
            ("gnn2", "NK", &[128, 256]),
        ];
        for (kernel, size_name, sizes) in sizes {
            if !want_kernel(kernel) {
                continue;
            }
            for &n in sizes {
                // GNN kernel 1's (NH, NJ).
                let (nh, nj_out) = if size_name == "NJ" { (GNN1_NH, n) } else { (n, GNN1_NJ) };
                let (statement, operands): (&str, Vec<(&str, ArrayD<f64>)>) = match kernel {
                    "sddmm" => (SDDMM, vec![("C", dense(&[ni, n], 1)?), ("D", dense(&[n, nj], 2)?)]),
                    "gnn1" => (GNN1, vec![("X", dense(&[nj, nh], 3)?), ("W", dense(&[nh, nj_out], 4)?)]),
                    _ => (
                        GNN2,
                        vec![
                            ("X", dense(&[ni, n], 5)?),
                            ("Y", dense(&[n, nj], 6)?),
                            ("V", dense(&[nj, 16], 7)?),
                        ],
                    ),
                };
                let sparse = if kernel == "sddmm" { "B" } else { "A" };
                let mut problem = Problem::new(statement).tensor(sparse, coo.clone()).format(sparse, "csr");
                if kernel == "sddmm" {
                    problem = problem.format("A", "csr");
                }
                if let Some(t) = column_major(kernel) {
                    problem = problem.format(t, "dd:modes=1-0");
                }
                for (t, v) in &operands {
                    problem = problem.tensor(*t, Input::from(v.clone()));
                }
                progress(&format!("{kernel} {name} {size_name}={n}"));
                let mut run = measure(&problem, kernel, name, size_name, n, coo.nnz(), opts.timing)?;
                if kernel == "gnn1" {
                    let (nnz, rows, nj) = (coo.nnz() as f64, ni as f64, nj_out as f64);
                    run.report.work_maximal_over_trie = Some(nnz * nj / (nnz + rows * nj));
                }
                // SciPy's SDDMM and GNN kernel 2 hold a dense NI x NJ
                // intermediate: past this, it is not run.
                let dense_intermediate = kernel != "gnn1" && ni * nj > SCIPY_DENSE_LIMIT;
                if dense_intermediate && env.is_some() {
                    run.report.scipy_error = Some(format!(
                        "not run: its dense intermediate would hold {ni} x {nj} values (more than {SCIPY_DENSE_LIMIT})"
                    ));
                }
                if let Some(env) = env.as_ref().filter(|_| !dense_intermediate) {
                    let lower: Vec<(String, ArrayD<f64>)> =
                        operands.iter().map(|(t, v)| (t.to_lowercase(), v.clone())).collect();
                    let named: Vec<(&str, &ArrayD<f64>)> =
                        lower.iter().map(|(t, v)| (t.as_str(), v)).collect();
                    let inputs = python::ReactInputs::write(&format!("{kernel}-{name}-{n}"), &csr, &named)?;
                    match python::run_react(env, &inputs, kernel, opts.timing) {
                        Ok(out) => match out.results.first() {
                            Some(r) if r.error.is_none() => {
                                run.report.scipy_ms = (!r.times_ms.is_empty())
                                    .then(|| Timing::of(r.times_ms.clone(), 1).median_ms);
                                if let (Some(sum), Some(squares)) = (r.sum, r.sum_squares) {
                                    let ours: f64 = run.trie_values.iter().sum();
                                    run.report.scipy_sum_rel_diff =
                                        Some((ours - sum).abs() / squares.sqrt().max(1e-300));
                                }
                            }
                            Some(r) => run.report.scipy_error = r.error.clone(),
                            None => run.report.scipy_error = out.error.clone(),
                        },
                        Err(e) => run.report.scipy_error = Some(e.to_string()),
                    }
                }
                runs.push(run.report);
            }
        }
    }
    for (name, coo) in tensors {
        for r in [16, 32] {
            let problem = Problem::new(MTTKRP)
                .tensor("X", coo.clone())
                .format("X", "csf")
                .tensor("C", Input::from(dense(&[coo.shape[2], r], 8)?))
                .tensor("B", Input::from(dense(&[coo.shape[1], r], 9)?));
            progress(&format!("mttkrp {name} R={r}"));
            runs.push(measure(&problem, "mttkrp", &name, "R", r, coo.nnz(), opts.timing)?.report);
        }
    }
    notes.push("SciPy cannot express MTTKRP (paper 003's Table 2 says so too)".to_string());
    let summary = summarize(&runs);
    Ok(ReactReport {
        suite: "react".to_string(),
        machine: machine(),
        loadavg_before,
        loadavg_after: loadavg(),
        warmup: opts.timing.warmup,
        repeats: opts.timing.repeats,
        timing_protocol:
            "medians of --repeats rounds in which the three policies take turns (each round starting with the \
             next policy), each a warm-up launch and a timed one (a kernel under 10 ms: the median of a batch \
             of launches filling about 10 ms, at most 100, counted from the first round); outputs zeroed \
             outside the clock; a ratio between two policies is the median over the rounds of the ratio within \
             each round"
                .to_string(),
        goals: GOALS.iter().map(|g| g.to_string()).collect(),
        notes,
        runs,
        summary,
    })
}

/// A run being measured: the report and the trie policy's values (for
/// SciPy's check).
struct Measured {
    report: KernelRun,
    trie_values: Vec<f64>,
}

fn measure(
    problem: &Problem,
    kernel: &str,
    input: &str,
    size_name: &str,
    size: usize,
    nnz: usize,
    timing: TimingOptions,
) -> Result<Measured> {
    // The policies take turns, one timed launch (after the warm-up) each per
    // round, so a slow spell of this shared machine falls on all three
    // alike rather than on whichever ran then.
    let schedules: Vec<Schedule> =
        FUSIONS.iter().map(|f| format!("fusion={f} threads=1").parse()).collect::<Result<_, _>>()?;
    // A round times a batch of launches of each policy where one launch is
    // short (their median), so the clock's resolution and the machine's
    // jitter do not decide a ratio of microseconds.
    let mut batches = vec![1; FUSIONS.len()];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); FUSIONS.len()];
    let mut policies = Vec::new();
    let mut outputs = Vec::new();
    for round in 0..timing.repeats.max(1) {
        // Each round starts with the next policy, so that every policy
        // follows each other one alike (a policy run after maximal's large
        // buffers were unmapped met the memory as maximal left it).
        for p in turns(round) {
            let (fusion, batch) = (FUSIONS[p], batches[p]);
            let launches = TimingOptions { warmup: timing.warmup, repeats: batch };
            let ran = problem
                .run_program(&CBackend::new(), &schedules[p], launches, false)
                .with_context(|| format!("{kernel} on {input}, fusion={fusion}"))?;
            times[p].push(ran.timings[0].median_ms);
            if round == 0 {
                batches[p] = batch_for(ran.timings[0].median_ms);
                outputs.push(values(&ran)?);
                policies.push(PolicyRun {
                    fusion: fusion.to_string(),
                    timing: ran.timings[0].clone(),
                    statements: ran.statements.len(),
                    notes: ran.notes.clone(),
                });
            }
        }
    }
    for (policy, times) in policies.iter_mut().zip(&times) {
        policy.timing = Timing::of(times.clone(), 1);
    }
    let trie = outputs.pop().expect("three policies");
    let max_rel_error_between_policies = outputs
        .iter()
        .map(|o| if o.len() == trie.len() { crate::rel_error(o, &trie) } else { f64::INFINITY })
        .fold(0.0, f64::max);
    Ok(Measured {
        report: KernelRun {
            kernel: kernel.to_string(),
            input: input.to_string(),
            size_name: size_name.to_string(),
            size,
            nnz,
            policies,
            round_ms: times,
            work_maximal_over_trie: None,
            scipy_ms: None,
            scipy_error: None,
            max_rel_error_between_policies,
            scipy_sum_rel_diff: None,
        },
        trie_values: trie,
    })
}

/// The order in which the policies ([`FUSIONS`] indices) take their turns
/// in round `round`: each round starts one later.
fn turns(round: usize) -> impl Iterator<Item = usize> {
    (0..FUSIONS.len()).map(move |p| (p + round) % FUSIONS.len())
}

/// Launches a round times of a kernel taking `ms`: enough for about
/// [`BATCH_MS`], at most 100.
fn batch_for(ms: f64) -> usize {
    match ms > 0.0 {
        true => ((BATCH_MS / ms).ceil() as usize).clamp(1, 100),
        false => 100,
    }
}

/// The least time a round spends on one policy's launches.
/// 10 ms: with 1 ms, a kernel of 0.5 ms had 2 launches a round, 10 in all,
/// and trie / none on one case swung 0.83-1.30x from process to process.
const BATCH_MS: f64 = 10.0;

fn ms(run: &KernelRun, fusion: &str) -> f64 {
    run.policies.iter().find(|p| p.fusion == fusion).map_or(f64::NAN, |p| p.timing.median_ms)
}

fn summarize(runs: &[KernelRun]) -> ReactSummary {
    fn of<'a>(runs: &'a [KernelRun], kernel: &'a str) -> impl Iterator<Item = &'a KernelRun> {
        runs.iter().filter(move |r| r.kernel == kernel)
    }
    let sddmm_trie_over_maximal = geomean(of(runs, "sddmm").map(|r| r.ratio("maximal", "trie")));
    // GNN kernel 1 by (NH, NJ).
    let gnn1 = |nh: usize, nj: usize| {
        of(runs, "gnn1").filter(move |r| match r.size_name.as_str() {
            "NJ" => (GNN1_NH, r.size) == (nh, nj),
            _ => (r.size, GNN1_NJ) == (nh, nj),
        })
    };
    let sizes = |name: &str| {
        let mut sizes: Vec<usize> =
            of(runs, "gnn1").filter(|r| r.size_name == name).map(|r| r.size).collect();
        sizes.sort();
        sizes.dedup();
        sizes
    };
    let gnn1_trie_over_maximal_by_nh = sizes("NH")
        .into_iter()
        .filter_map(|nh| geomean(gnn1(nh, GNN1_NJ).map(|r| r.ratio("maximal", "trie"))).map(|g| (nh, g)))
        .collect();
    let gnn1_trie_over_maximal_by_nj = std::iter::once(GNN1_NJ)
        .chain(sizes("NJ"))
        .filter_map(|nj| {
            let measured = geomean(gnn1(GNN1_NH, nj).map(|r| r.ratio("maximal", "trie")))?;
            let work = geomean(gnn1(GNN1_NH, nj).filter_map(|r| r.work_maximal_over_trie))?;
            Some((nj, measured, work))
        })
        .collect();
    let worst_trie_over_none = runs
        .iter()
        .map(|r| (format!("{} {} {}={}", r.kernel, r.input, r.size_name, r.size), r.ratio("trie", "none")))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let scipy_over_trie = ["sddmm", "gnn1", "gnn2"]
        .iter()
        .filter_map(|k| {
            geomean(of(runs, k).filter_map(|r| r.scipy_ms.map(|s| s / ms(r, "trie"))))
                .map(|g| (k.to_string(), g))
        })
        .collect();
    ReactSummary {
        sddmm_trie_over_maximal,
        gnn1_trie_over_maximal_by_nh,
        gnn1_trie_over_maximal_by_nj,
        worst_trie_over_none,
        scipy_over_trie,
    }
}

/// `nnz` seeded random coordinates of `shape` (duplicates summed), values
/// in ±[0.1, 1).
fn random_tensor(shape: &[usize], nnz: usize, seed: u64) -> Result<Coo<f64, i64>> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let crd = shape.iter().map(|&n| (0..nnz).map(|_| rng.random_range(0..n as i64)).collect()).collect();
    let val = (0..nnz).map(|_| rng.random_range(0.1..1.0)).collect();
    Ok(Coo::new(shape.to_vec(), crd, val)?.canonicalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_takes_every_turn_once_in_three_rounds() {
        assert_eq!(turns(0).collect::<Vec<_>>(), [0, 1, 2]);
        let firsts: Vec<usize> = (0..3).map(|r| turns(r).next().unwrap()).collect();
        assert_eq!(firsts, [0, 1, 2]);
        let lasts: Vec<usize> = (0..3).map(|r| turns(r).last().unwrap()).collect();
        assert_eq!(lasts, [2, 0, 1]);
    }

    #[test]
    fn ratios_are_taken_round_by_round() {
        let mut r = run("sddmm", "a", "NK", 64, 3.0, 1.0);
        // A slow spell (x1.3) over rounds 2-4 begins between none's and
        // trie's turns in round 2: the medians say trie is 1.3x none, the
        // rounds' ratios (1, 1, 1.3, 1, 1) say they are even.
        r.round_ms =
            vec![vec![1.0, 1.0, 1.0, 1.3, 1.3], vec![3.0, 3.0, 3.9, 3.9, 3.9], vec![1.0, 1.0, 1.3, 1.3, 1.3]];
        r.policies[0].timing = Timing::of(r.round_ms[0].clone(), 1);
        r.policies[2].timing = Timing::of(r.round_ms[2].clone(), 1);
        assert!((ms(&r, "trie") / ms(&r, "none") - 1.3).abs() < 1e-12);
        assert_eq!(r.ratio("trie", "none"), 1.0);
        assert_eq!(r.ratio("maximal", "trie"), 3.0);
        // Without round times (records before 2026-11-29): the medians.
        r.round_ms.clear();
        assert!((r.ratio("trie", "none") - 1.3).abs() < 1e-12);
    }

    #[test]
    fn short_kernels_are_timed_in_batches() {
        assert_eq!(batch_for(50.0), 1);
        assert_eq!(batch_for(10.0), 1);
        assert_eq!(batch_for(5.0), 2);
        assert_eq!(batch_for(0.3), 34);
        assert_eq!(batch_for(0.001), 100);
        assert_eq!(batch_for(0.0), 100);
    }

    fn run(kernel: &str, input: &str, size_name: &str, size: usize, maximal: f64, trie: f64) -> KernelRun {
        let policy = |fusion: &str, ms: f64| PolicyRun {
            fusion: fusion.to_string(),
            timing: Timing::of(vec![ms], 1),
            statements: 1,
            notes: Vec::new(),
        };
        KernelRun {
            kernel: kernel.to_string(),
            input: input.to_string(),
            size_name: size_name.to_string(),
            size,
            nnz: 10,
            policies: vec![policy("none", trie), policy("maximal", maximal), policy("trie", trie)],
            round_ms: Vec::new(),
            work_maximal_over_trie: Some(maximal / trie / 2.0),
            scipy_ms: None,
            scipy_error: None,
            max_rel_error_between_policies: 0.0,
            scipy_sum_rel_diff: None,
        }
    }

    #[test]
    fn gnn_kernel_1_is_summarized_by_nh_at_nj_16_and_by_nj_at_nh_128() {
        let runs = [
            run("gnn1", "a", "NH", 128, 3.0, 1.0),
            run("gnn1", "b", "NH", 128, 12.0, 1.0),
            run("gnn1", "a", "NH", 256, 8.0, 2.0),
            run("gnn1", "a", "NJ", 64, 16.0, 2.0),
            run("sddmm", "a", "NK", 64, 1.5, 1.0),
        ];
        let s = summarize(&runs);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        let by_nh: Vec<usize> = s.gnn1_trie_over_maximal_by_nh.iter().map(|p| p.0).collect();
        assert_eq!(by_nh, [128, 256]);
        assert!(
            close(s.gnn1_trie_over_maximal_by_nh[0].1, 6.0)
                && close(s.gnn1_trie_over_maximal_by_nh[1].1, 4.0)
        );
        // NJ = 16 is the NH = 128 runs; the work ratios' geomean beside.
        let by_nj = &s.gnn1_trie_over_maximal_by_nj;
        assert_eq!(by_nj.iter().map(|p| p.0).collect::<Vec<_>>(), [16, 64]);
        assert!(close(by_nj[0].1, 6.0) && close(by_nj[0].2, 3.0), "{by_nj:?}");
        assert!(close(by_nj[1].1, 8.0) && close(by_nj[1].2, 4.0), "{by_nj:?}");
        assert!(s.sddmm_trie_over_maximal.is_some_and(|g| close(g, 1.5)));
    }
}
