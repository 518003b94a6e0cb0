//! The GPU suites, in one process with their baselines:
//!
//! - SpMM (`spindle bench spmm --target cuda`): C += A·B with N = 128, A in
//!   GroupCOO over a sweep of g (and g = auto), against cuSPARSE SpMM on
//!   CSR, in f32 and f16, on the matrices of `../shared/data` and generated
//!   power-law ones.
//! - BSR (`spindle bench bsr --target cuda`): A 4096×4096 with 32×32 blocks
//!   at sparsity 50–99%, in BlockGroupCOO (the block product on Tensor
//!   Cores; by default block rows, `map=rows tile.n=128`: a block owns a
//!   block row and 128 columns, streams its blocks through a `cp.async`
//!   ring and writes C once, with no atomics and no zeroing), against
//!   cuSPARSE SpMM on BSR and cuBLAS GEMM on the dense matrix, f16.
//!
//! Both report the two Spindle rows: *as a user gets it* (A in CSR, no
//! schedule: the driver's autotuner on the GPU) and the best variant.
//!
//! # What is timed
//!
//! Our kernels compile, run and are timed through the driver's
//! `CudaBackend`: CUDA events, warm-up launches, then the median of
//! `repeats`; L2 is flushed before each launch (until 2026-11-25 it was not,
//! so the output the reset had just written sat in L2 for our launches
//! only), our output (zeros) is zeroed inside the timed region since the
//! kernel sums into it, as the baselines' `beta = 0` writes C in theirs (a
//! kernel that writes every element without reading it, block rows, is
//! timed without the zeroing it does not need), and
//! inputs that fit in L2 are rotated. cuSPARSE and cuBLAS are timed the same way by
//! `spindle_cuda::baseline`, with the same flush. Our GroupCOO schedule is autotuned
//! over a small tile space and the warp walk (`map=walk`, runs of 8 to 128
//! groups) at g = auto (cached per kernel, shape and device
//! in `autotune.json` of the CUDA cache folder) and reused for the other g.
//!
//! # Correctness
//!
//! Every output — ours and the baselines' — is compared with a reference
//! computed on the CPU in f64 from the same rounded inputs (for the BSR
//! suite on a sample of rows, since the full product is large): max |got −
//! want| / max |want| must stay under 1e-3 (f32) or 1e-2 (f16); a failing
//! check is reported in the table and the JSON, and makes the command exit
//! with an error after the report.
//!
//! # Bandwidth
//!
//! Compulsory traffic over time, as a fraction of a device-to-device copy
//! measured in the same run (read + write counted): A's format arrays once,
//! B once, C written once. Each row also carries the roofline
//! model ([`crate::roofline`]): bytes, flops and the time bound on H100 and
//! H200, and each time as a fraction of the bound on the device it ran on;
//! without a GPU the suites print the bounds before saying they need one.

use anyhow::{Context, Result, anyhow};
use ndarray::{Array2, ArrayD};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use spindle::autotune::{TuneCache, TuneKey, tile_space, tune};
use spindle::{CudaBackend, ElemType, Input, Prepared, Schedule, Target, TimingOptions, Tuner};
use spindle_cuda::baseline::{self, BsrHost, CsrHost, Precision};
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::stats::GroupAnalysis;
use spindle_formats::{Bcsr, Compressed, Coo, DType};

use crate::roofline::Roofline;
use crate::{Machine, machine, rel_error, wanted};

pub const STATEMENT: &str = "C[m,n] += A[m,k] * B[k,n]";

/// Dense columns of the SpMM suite.
pub const SPMM_N: usize = 128;
/// The generated power-law matrices of the SpMM suite.
pub const POWER_LAWS: &[(&str, &str)] = &[
    ("powerlaw-1M", "powerlaw:rows=100000,cols=100000,nnz=1000000,seed=1"),
    ("powerlaw-8M", "powerlaw:rows=1000000,cols=1000000,nnz=8000000,seed=2"),
];
const GROUP_SIZES: &[usize] = &[1, 2, 4, 8, 16, 32];
/// GroupCOO sizes whose padded arrays exceed this multiple of nnz are skipped.
const MAX_STORED_OVER_NNZ: usize = 16;
/// The largest q tile: a group is accumulated in registers before its scatter.
const MAX_Q_TILE: usize = 32;

/// The BSR suite's matrix and blocks.
pub const BSR_SIZE: usize = 4096;
pub const BSR_BLOCK: usize = 32;
pub const BSR_N: usize = 1024;
const BSR_SPARSITIES: &[f64] = &[0.5, 0.7, 0.9, 0.95, 0.99];
/// Rows of the BSR product checked against the CPU.
const BSR_CHECK_ROWS: usize = 96;
/// The block rows the skewed case makes dense ([`BsrSkewed`]).
const SKEWED_ROWS: &[usize] = &[0, 37, 64, 101];

pub fn dtype_of(p: Precision) -> DType {
    match p {
        Precision::F32 => DType::F32,
        Precision::F16 => DType::F16,
    }
}

fn tolerance(p: Precision) -> f64 {
    match p {
        Precision::F32 => 1e-3,
        Precision::F16 => 1e-2,
    }
}

fn round(x: f64, p: Precision) -> f64 {
    match p {
        Precision::F32 => x as f32 as f64,
        Precision::F16 => half::f16::from_f64(x).to_f64(),
    }
}

/// Options of the GPU SpMM suite.
#[derive(Clone, Debug)]
pub struct GpuSpmmOptions {
    pub repeats: usize,
    /// Only these matrices (all when empty).
    pub matrices: Vec<String>,
    pub precisions: Vec<Precision>,
    /// Autotune at g = auto (else the default schedule).
    pub autotune: bool,
}

/// Options of the BSR suite.
#[derive(Clone, Debug)]
pub struct BsrOptions {
    pub repeats: usize,
    /// Autotune the block schedule (else the default one).
    pub autotune: bool,
}

// ---------------------------------------------------------------- reports

/// The device, as reports name it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Device {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    pub memory_bytes: usize,
    pub l2_bytes: usize,
    /// The CUDA driver's version, e.g. 13000.
    pub driver_version: i32,
}

impl From<&spindle_cuda::runtime::DeviceInfo> for Device {
    fn from(d: &spindle_cuda::runtime::DeviceInfo) -> Device {
        Device {
            name: d.name.clone(),
            compute_capability: d.compute_capability,
            multiprocessors: d.multiprocessors,
            memory_bytes: d.memory_bytes,
            l2_bytes: d.l2_bytes,
            driver_version: d.driver_version,
        }
    }
}

/// What `spindle bench spmm --target cuda` reports (`gpu/summary.py` reads
/// it: keep the field names).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSpmmReport {
    pub suite: String,
    pub target: String,
    pub statement: String,
    pub n: usize,
    pub device: Device,
    pub arch: String,
    pub machine: Machine,
    pub copy_gbs: f64,
    pub repeats: usize,
    pub timing: String,
    pub bandwidth_model: String,
    pub results: Vec<GpuSpmmRow>,
    pub failures: Vec<String>,
}

/// A baseline on the GPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuBaseline {
    pub median_ms: Option<f64>,
    pub max_rel_error: Option<f64>,
    pub gbs: Option<f64>,
    pub fraction_of_copy: Option<f64>,
    /// The roofline bound on this device over the time (1: at the bound).
    pub fraction_of_bound: Option<f64>,
    pub error: Option<String>,
}

/// How a kernel was launched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// `grid G x block B threads`.
    pub launch: Option<String>,
    pub resources: Option<Resources>,
    /// Input copies rotated through while timing.
    pub input_sets: usize,
}

/// What ptxas said.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    pub registers: u32,
    pub shared_bytes: u64,
    pub spill_bytes: u64,
}

/// One matrix and precision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSpmmRow {
    pub matrix: String,
    pub rows: usize,
    pub cols: usize,
    pub nnz: usize,
    pub precision: String,
    pub n: usize,
    pub g_auto: usize,
    pub g_star: f64,
    /// Compulsory traffic, flops and the time bound on H100 and H200.
    pub roofline: Option<Roofline>,
    pub cusparse_csr: GpuBaseline,
    /// The tiles autotuning chose at g = auto (empty: the defaults).
    pub tuned_tiles: String,
    /// The best variant.
    pub best: Option<GpuBest>,
    pub variants: Vec<GpuVariant>,
    /// Spindle as a user gets it (CSR, autotuned by the driver).
    pub user: GpuRowTime,
}

/// The fastest g.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuBest {
    pub g: usize,
    pub median_ms: f64,
    pub speedup_vs_cusparse_csr: Option<f64>,
}

/// One GroupCOO size: timed, skipped or failed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuVariant {
    pub g: usize,
    /// Whether this is g = auto's choice.
    pub auto: Option<bool>,
    pub format: Option<String>,
    pub schedule: Option<String>,
    /// The rewritten statement.
    pub statement: Option<String>,
    pub median_ms: Option<f64>,
    pub max_rel_error: Option<f64>,
    pub pass: Option<bool>,
    pub speedup_vs_cusparse_csr: Option<f64>,
    pub gbs: Option<f64>,
    pub fraction_of_copy: Option<f64>,
    /// The roofline bound on this device over the time (1: at the bound).
    pub fraction_of_bound: Option<f64>,
    pub f_of_g: Option<u64>,
    pub launch: Option<Launch>,
    pub skipped: Option<String>,
    pub error: Option<String>,
}

/// A Spindle row on the GPU (or why it did not run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuRowTime {
    pub format: String,
    pub schedule: Option<String>,
    pub timing: Option<spindle::Timing>,
    pub max_rel_error: Option<f64>,
    pub pass: Option<bool>,
    pub error: Option<String>,
}

impl GpuRowTime {
    pub fn median_ms(&self) -> Option<f64> {
        self.timing.as_ref().map(|t| t.median_ms)
    }
}

/// What `spindle bench bsr --target cuda` reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BsrReport {
    pub suite: String,
    pub target: String,
    pub statement: String,
    pub size: usize,
    pub block: usize,
    pub n: usize,
    pub precision: String,
    pub device: Device,
    pub arch: String,
    pub machine: Machine,
    pub copy_gbs: f64,
    pub repeats: usize,
    pub results: Vec<BsrRow>,
    /// Block rows far above the average, with the split and without.
    #[serde(default)]
    pub skewed: Option<BsrSkewed>,
    pub failures: Vec<String>,
    pub check: String,
}

/// The 90% matrix with [`SKEWED_ROWS`] block rows made dense: their work is
/// about eight times the average row's, so without the split
/// (`split=off`) those rows' blocks hold the launch up alone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BsrSkewed {
    pub description: String,
    pub blocks: usize,
    pub schedule: String,
    /// Ours with the split (the default) and with `split=off`, and the
    /// f16 relative errors of both on the sampled rows.
    pub split_ms: Option<f64>,
    pub whole_ms: Option<f64>,
    pub split_error: Option<f64>,
    pub whole_error: Option<f64>,
    pub cusparse_bsr: Option<GpuBaseline>,
    pub error: Option<String>,
}

/// One sparsity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BsrRow {
    pub sparsity: f64,
    pub nnz: Option<usize>,
    pub blocks: Option<usize>,
    pub schedule: Option<String>,
    /// The best variant: BlockGroupCOO at the tuned schedule.
    pub ours: Option<BsrOurs>,
    pub cusparse_bsr: Option<GpuBaseline>,
    pub cublas_dense: Option<GpuBaseline>,
    pub speedup_vs_cusparse_bsr: Option<f64>,
    pub speedup_vs_cublas: Option<f64>,
    /// Compulsory traffic, flops and the time bound on H100 and H200.
    pub roofline: Option<Roofline>,
    /// The bound on this device over our time (1: at the bound).
    pub fraction_of_bound: Option<f64>,
    /// Spindle as a user gets it (CSR, autotuned by the driver).
    pub user: Option<GpuRowTime>,
    pub error: Option<String>,
}

/// BlockGroupCOO on Tensor Cores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BsrOurs {
    pub median_ms: f64,
    pub max_rel_error: f64,
    pub gbs: f64,
    pub fraction_of_copy: f64,
    pub tflops: f64,
    /// How each dot product was printed (Tensor Cores or not).
    pub dots: Vec<String>,
    pub launch: Launch,
}

// ---------------------------------------------------------------- pieces

fn open() -> Result<CudaBackend> {
    CudaBackend::open()
        .map_err(|e| anyhow!("{e}"))
        .context("the GPU suites need an NVIDIA GPU (`bench spmm --target c` runs SpMM on the CPU; `bench bsr` has no CPU suite)")
}

/// The dense operand: values in ±[0.1, 1), seeded, rounded to `p`.
fn dense(rows: usize, cols: usize, seed: u64, p: Precision) -> Vec<f64> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..rows * cols)
        .map(|_| {
            let m: f64 = rng.random_range(0.1..1.0);
            round(if rng.random::<bool>() { m } else { -m }, p)
        })
        .collect()
}

/// C = A·B in f64 for the rows in `rows` (row-major `rows.len() x n`).
fn csr_reference(a: &CsrHost, b: &[f64], n: usize, rows: impl Iterator<Item = usize>) -> Vec<f64> {
    let mut out = Vec::new();
    for i in rows {
        let mut acc = vec![0.0f64; n];
        for e in a.indptr[i] as usize..a.indptr[i + 1] as usize {
            let (j, v) = (a.indices[e] as usize, a.values[e]);
            for (c, bv) in acc.iter_mut().zip(&b[j * n..(j + 1) * n]) {
                *c += v * bv;
            }
        }
        out.extend(acc);
    }
    out
}

/// The matrix scaled to a largest magnitude of 1 (bcsstk13's 1e12 would be
/// infinite in f16; the product's structure is what is measured), its
/// values rounded to `p`.
fn rounded(coo: &Coo<f64, i64>, p: Precision) -> Coo<f64, i64> {
    let mut out = coo.clone();
    let scale = out.val.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let scale = if scale > 0.0 && scale.is_finite() { scale } else { 1.0 };
    out.val.iter_mut().for_each(|v| *v = round(*v / scale, p));
    out
}

/// A CSR on the host from COO, values rounded to `p`.
fn csr_host(coo: &Coo<f64, i64>, p: Precision) -> Result<CsrHost> {
    let csr = Compressed::from_coo(coo, 0)?;
    Ok(CsrHost {
        rows: coo.shape[0],
        cols: coo.shape[1],
        indptr: csr.pos.iter().map(|&x| i32::try_from(x)).collect::<Result<_, _>>()?,
        indices: csr.crd.iter().map(|&x| i32::try_from(x)).collect::<Result<_, _>>()?,
        values: csr.val.iter().map(|&v| round(v, p)).collect(),
    })
}

/// The SpMM statement prepared by the driver for precision `p`, A stored in
/// `format`.
fn prepare(coo: &Coo<f64, i64>, b: &[f64], n: usize, p: Precision, format: &str) -> Result<Prepared> {
    let (m, k) = (coo.shape[0], coo.shape[1]);
    let dtype = ElemType::Value(dtype_of(p));
    let b = Array2::from_shape_vec((k, n), b.to_vec())?;
    spindle::Problem::new(STATEMENT)
        .tensor("A", Input::from(coo.clone()).with_dtype(dtype))
        .tensor("B", Input::from(b).with_dtype(dtype))
        .tensor("C", Input::shape(&[m, n], dtype))
        .format("A", format)
        .prepare()
        .map_err(|e| anyhow!("{format}: {}", e.render(false).trim_end()))
}

/// Bytes of A's format arrays on the device.
fn a_bytes(prepared: &Prepared) -> usize {
    prepared
        .einsum
        .tensors
        .values()
        .filter(|t| t.name.starts_with("A_"))
        .map(|t| t.shape.iter().product::<usize>() * t.dtype.size_bytes())
        .sum()
}

/// The CUDA source the driver compiles for `schedule` (no GPU needed).
pub fn print(prepared: &Prepared, schedule: &str) -> Result<spindle_cuda::CudaKernel> {
    let parsed: Schedule = schedule.parse().with_context(|| schedule.to_string())?;
    let kernel = prepared.lower(&parsed).map_err(|e| anyhow!("[{schedule}]: {e}"))?;
    Ok(spindle_cuda::print::print_kernel(&kernel, spindle::backend::SYMBOL, &(&parsed).into())?)
}

/// The schedule items every candidate of the SpMM suite at group size `g`
/// starts with: a group is summed in registers before its scatter.
fn spmm_base(g: usize) -> String {
    format!("tile.q={}", g.min(MAX_Q_TILE))
}

/// The SpMM suite's tuning space at group size `g`: tiles and the driver's
/// walk candidates ([`spindle::autotune::walk_candidates`]).
pub fn spmm_space(g: usize) -> Vec<String> {
    let base = spmm_base(g);
    let mut space = tile_space(&base, &[("p", &[1, 4, 16]), ("n", &[32, 128])]);
    // N = 128: B's rows are read in 16-byte vectors in f32 and f16 alike.
    space.extend(spindle::autotune::walk_candidates("p", true).iter().map(|c| format!("{base} {c}")));
    space
}

/// The BSR suite's tuning space: Tensor Core tiles and block rows.
pub fn bsr_space() -> Vec<String> {
    let base = format!("tile.bi={BSR_BLOCK} tile.bj={BSR_BLOCK} tile.q=1");
    let mut space = tile_space(&base, &[("p", &[1, 2]), ("n", &[32, 64, 128])]);
    space.extend(spindle::autotune::block_row_candidates("n"));
    space
}

/// Compiles every candidate of a search at once, unless the search's
/// winner is cached (then only it is compiled, when timed). A candidate
/// that does not parse or compile fails again, with its message, when
/// timed.
fn precompile_unless_tuned(
    backend: &CudaBackend,
    prepared: &Result<Prepared>,
    cache: &TuneCache,
    key: &TuneKey,
    candidates: &[String],
) {
    if let Ok(prepared) = prepared
        && cache.get(key, candidates).is_none()
    {
        let schedules: Vec<Schedule> = candidates.iter().filter_map(|c| c.parse().ok()).collect();
        prepared.precompile(backend, &schedules);
    }
}

/// The BSR suite's roofline with this many stored blocks (f16).
fn bsr_model(blocks: usize) -> Roofline {
    Roofline::bsr(BSR_SIZE, BSR_SIZE, BSR_N, blocks, (BSR_BLOCK, BSR_BLOCK), 2)
}

/// A number for JSON: NaN and infinities become null.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Fraction of the copy bandwidth `bytes` moved in `ms` reaches.
fn bandwidth(bytes: usize, ms: f64, copy_gbs: f64) -> (f64, f64) {
    let gbs = bytes as f64 / (ms * 1e-3) / 1e9;
    (gbs, gbs / copy_gbs)
}

/// One run for the output, then the timing, through the driver.
fn measure(
    backend: &CudaBackend,
    prepared: &Prepared,
    schedule: &str,
    timing: TimingOptions,
) -> Result<(ArrayD<f64>, spindle::Timing, Launch)> {
    let parsed: Schedule = schedule.parse().with_context(|| schedule.to_string())?;
    let compiled = prepared.compile(backend, &parsed).map_err(|e| anyhow!("[{schedule}]: {e}"))?;
    let (out, t) = compiled.run_and_time(timing).map_err(|e| anyhow!("[{schedule}]: {e}"))?;
    let report = compiled.report();
    let launch = Launch {
        launch: report.launch.clone(),
        resources: report.resources.as_ref().map(|r| Resources {
            registers: r.registers,
            shared_bytes: r.shared_mem_bytes,
            spill_bytes: r.spill_stores_bytes,
        }),
        input_sets: t.input_sets,
    };
    Ok((out, t, launch))
}

/// The median time of `schedule`, for a search: no output is read back (on
/// the 8M-non-zero matrix that is 128M values to convert and compare per
/// candidate); the winner is run and checked afterwards.
fn time_only(
    backend: &CudaBackend,
    prepared: &Prepared,
    schedule: &str,
    timing: TimingOptions,
) -> Result<f64> {
    let parsed: Schedule = schedule.parse().with_context(|| schedule.to_string())?;
    let compiled = prepared.compile(backend, &parsed).map_err(|e| anyhow!("[{schedule}]: {e}"))?;
    Ok(compiled.time(timing).map_err(|e| anyhow!("[{schedule}]: {e}"))?.median_ms)
}

/// Spindle as a user gets it: A in CSR, no schedule, the driver's autotuner
/// (cached per statement, shapes and device); `check` turns its output into
/// the max relative error.
fn as_a_user_gets_it(
    backend: &CudaBackend,
    prepared: Result<Prepared>,
    timing: TimingOptions,
    tol: f64,
    check: impl Fn(&ArrayD<f64>) -> f64,
) -> GpuRowTime {
    let run = || -> Result<GpuRowTime> {
        let prepared = prepared?;
        let mut tuner = Tuner::for_target(Target::Cuda);
        let compiled = prepared.autotune(backend, &mut tuner).map_err(|e| anyhow!("{e}"))?;
        let (out, t) = compiled.run_and_time(timing).map_err(|e| anyhow!("{e}"))?;
        let err = check(&out);
        Ok(GpuRowTime {
            format: "csr".into(),
            schedule: Some(compiled.schedule.to_string()),
            timing: Some(t),
            max_rel_error: finite(err),
            pass: Some(err <= tol),
            error: None,
        })
    };
    run().unwrap_or_else(|e| GpuRowTime {
        format: "csr".into(),
        error: Some(format!("{e:#}")),
        pass: Some(false),
        ..GpuRowTime::default()
    })
}

// ---------------------------------------------------------------- SpMM

/// The SpMM suite on the GPU. Failed checks are in the report's
/// `failures`; the caller prints the report, then fails.
pub fn spmm(opts: &GpuSpmmOptions, progress: &mut dyn FnMut(&str)) -> Result<GpuSpmmReport> {
    let mut inputs: Vec<(String, Coo<f64, i64>)> = Vec::new();
    for path in spindle_formats::data::shared_matrices() {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if wanted(&opts.matrices, &name) {
            let coo: Coo<f64, i64> = spindle_formats::io::read_mtx(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            inputs.push((name, coo.canonicalize()));
        }
    }
    for (name, spec) in POWER_LAWS {
        if wanted(&opts.matrices, name) {
            let spec: GeneratorSpec = spec.parse()?;
            inputs.push((name.to_string(), spec.generate::<f64, i64>()?.canonicalize()));
        }
    }

    let backend = match open() {
        Ok(backend) => backend,
        Err(e) => {
            // What the model predicts the kernels cannot beat.
            progress("no GPU: the traffic and roofline model's bounds instead (see bench/src/roofline.rs)");
            for &precision in &opts.precisions {
                let dtype = dtype_of(precision);
                for (name, coo) in &inputs {
                    let (m, k, nnz) = (coo.shape[0], coo.shape[1], coo.nnz());
                    let model = Roofline::spmm(m, k, SPMM_N, nnz, dtype.size_bytes());
                    progress(&format!("  {name} {}: {}", dtype.name(), model.describe()));
                }
            }
            return Err(e);
        }
    };
    if inputs.is_empty() {
        let generated: Vec<&str> = POWER_LAWS.iter().map(|(name, _)| *name).collect();
        return Err(crate::no_matrix_matches(&opts.matrices, &generated));
    }
    let gpu = backend.gpu();
    let info = gpu.info().clone();
    progress(&format!(
        "GPU: {} ({}), {} SMs, L2 {} MiB",
        info.name,
        gpu.arch(),
        info.multiprocessors,
        info.l2_bytes >> 20
    ));
    let copy_gbs = gpu.copy_bandwidth(1 << 30)?;
    progress(&format!("device copy: {copy_gbs:.0} GB/s (read + write)"));
    let timing = TimingOptions { warmup: 3, repeats: opts.repeats.max(1) };
    let cuda_timing = spindle_cuda::runtime::TimingOptions { warmup: 3, repeats: opts.repeats.max(1) };
    let mut cache = TuneCache::load(&TuneCache::default_path(Target::Cuda));

    let mut results = Vec::new();
    let mut failures = Vec::new();
    for &precision in &opts.precisions {
        let pname = dtype_of(precision).name();
        for (name, coo) in &inputs {
            let (m, k) = (coo.shape[0], coo.shape[1]);
            let nnz = coo.nnz();
            progress(&format!("{name} {pname}: {m}x{k}, {nnz} nnz"));
            // Where a lent machine's minutes go, matrix by matrix.
            let started = std::time::Instant::now();
            let elem = dtype_of(precision).size_bytes();
            let a = rounded(coo, precision);
            let b = dense(k, SPMM_N, 7, precision);
            let csr = csr_host(&a, precision)?;
            let want = csr_reference(&csr, &b, SPMM_N, 0..m);
            let dense_bytes = elem * (k * SPMM_N + m * SPMM_N);
            let model = Roofline::spmm(m, k, SPMM_N, nnz, elem);
            progress(&format!("  model: {}", model.describe()));

            // A failing baseline is reported; our kernels still run.
            let mut cusparse = GpuBaseline::default();
            match baseline::cusparse_spmm_csr(gpu, &csr, &b, SPMM_N, precision, cuda_timing) {
                Ok(run) => {
                    let err = rel_error(&run.output, &want);
                    let csr_bytes = 4 * (csr.indptr.len() + csr.indices.len()) + elem * csr.values.len();
                    let (gbs, frac) = bandwidth(csr_bytes + dense_bytes, run.timing.median_ms, copy_gbs);
                    cusparse = GpuBaseline {
                        median_ms: finite(run.timing.median_ms),
                        max_rel_error: finite(err),
                        gbs: finite(gbs),
                        fraction_of_copy: finite(frac),
                        fraction_of_bound: model.fraction(&info.name, Some(run.timing.median_ms)),
                        error: None,
                    };
                    if err.is_nan() || err > tolerance(precision) {
                        failures.push(format!("{name} {pname}: cuSPARSE CSR: error {err:.1e}"));
                    }
                }
                Err(e) => {
                    failures.push(format!("{name} {pname}: cuSPARSE CSR: {e}"));
                    cusparse.error = Some(e.to_string());
                }
            }
            let cusparse_ms = cusparse.median_ms.unwrap_or(f64::NAN);

            let analysis = GroupAnalysis::new(&coo.occupancy(0));
            let g_auto = spindle_formats::stats::auto_group_size(m, &coo.occupancy(0));
            // Tune at g = auto, then reuse its tiles for every g.
            let tuned_tiles = if opts.autotune {
                let format = format!("groupcoo:dim=0,g={g_auto}");
                let space = spmm_space(g_auto);
                let key = TuneKey {
                    kernel: format!("{STATEMENT} A={format}"),
                    shapes: format!("{name} {m}x{k} nnz={nnz} n={SPMM_N} {pname}"),
                    device: info.name.clone(),
                };
                let prepared = prepare(&a, &b, SPMM_N, precision, &format);
                precompile_unless_tuned(&backend, &prepared, &cache, &key, &space);
                let result = tune(&mut cache, &key, &space, |schedule| {
                    let prepared = prepared.as_ref().map_err(|e| format!("{e:#}"))?;
                    time_only(&backend, prepared, schedule, timing).map_err(|e| format!("{e:#}"))
                });
                let _ = cache.save();
                match result {
                    Ok((tuned, hit)) => {
                        progress(&format!(
                            "  tuned: {} (search's best median {:.4} ms{})",
                            tuned.schedule,
                            tuned.median_ms,
                            if hit { ", cached" } else { "" }
                        ));
                        tuned.schedule.replace(&spmm_base(g_auto), "").trim().to_string()
                    }
                    Err(e) => {
                        progress(&format!("  autotuning failed: {e}"));
                        String::new()
                    }
                }
            } else {
                String::new()
            };

            let mut variants = Vec::new();
            let mut gs: Vec<usize> = GROUP_SIZES.to_vec();
            if !gs.contains(&g_auto) {
                gs.push(g_auto);
                gs.sort_unstable();
            }
            // Every g's kernel compiled at once, then each timed.
            let mut runs = Vec::new();
            for g in gs {
                let groups: usize = coo.occupancy(0).iter().map(|o| o.div_ceil(g)).sum();
                if groups * g > MAX_STORED_OVER_NNZ * nnz.max(1) {
                    variants.push(GpuVariant {
                        g,
                        skipped: Some("padding over 16x nnz".into()),
                        ..Default::default()
                    });
                    continue;
                }
                let schedule = format!("{} {tuned_tiles}", spmm_base(g)).trim().to_string();
                let format = format!("groupcoo:dim=0,g={g}");
                runs.push((g, format.clone(), schedule, prepare(&a, &b, SPMM_N, precision, &format)));
            }
            let parsed: Vec<(&Prepared, Schedule)> = runs
                .iter()
                .filter_map(|(_, _, schedule, prepared)| {
                    Some((prepared.as_ref().ok()?, schedule.parse().ok()?))
                })
                .collect();
            Prepared::precompile_all(&backend, &parsed.iter().map(|(p, s)| (*p, s)).collect::<Vec<_>>());
            for (g, format, schedule, prepared) in runs {
                let outcome = prepared.and_then(|prepared| {
                    let r = measure(&backend, &prepared, &schedule, timing)?;
                    Ok((a_bytes(&prepared), prepared.text.clone(), r))
                });
                match outcome {
                    Ok((a_bytes, statement, (out, t, launch))) => {
                        let err = rel_error(out.as_slice().unwrap_or(&[]), &want);
                        let pass = err <= tolerance(precision);
                        if !pass {
                            failures.push(format!("{name} {pname} g={g}: error {err:.1e}"));
                        }
                        let (gbs, frac) = bandwidth(a_bytes + dense_bytes, t.median_ms, copy_gbs);
                        variants.push(GpuVariant {
                            g,
                            auto: Some(g == g_auto),
                            format: Some(format),
                            schedule: Some(schedule),
                            statement: Some(statement),
                            median_ms: Some(t.median_ms),
                            max_rel_error: finite(err),
                            pass: Some(pass),
                            speedup_vs_cusparse_csr: finite(cusparse_ms / t.median_ms),
                            gbs: Some(gbs),
                            fraction_of_copy: Some(frac),
                            fraction_of_bound: model.fraction(&info.name, Some(t.median_ms)),
                            f_of_g: analysis.f_of_g.get(&g).copied(),
                            launch: Some(launch),
                            ..Default::default()
                        });
                    }
                    Err(e) => {
                        failures.push(format!("{name} {pname} g={g}: {e:#}"));
                        variants.push(GpuVariant {
                            g,
                            format: Some(format),
                            schedule: Some(schedule),
                            error: Some(format!("{e:#}")),
                            ..Default::default()
                        });
                    }
                }
            }
            variants.sort_by_key(|v| v.g);
            let best = variants
                .iter()
                .filter(|v| v.pass == Some(true))
                .filter_map(|v| Some((v.median_ms?, v.g)))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(ms, g)| GpuBest {
                    g,
                    median_ms: ms,
                    speedup_vs_cusparse_csr: finite(cusparse_ms / ms),
                });
            let user = as_a_user_gets_it(
                &backend,
                prepare(&a, &b, SPMM_N, precision, "csr"),
                timing,
                tolerance(precision),
                |out| rel_error(out.as_slice().unwrap_or(&[]), &want),
            );
            if user.pass != Some(true) {
                failures.push(format!(
                    "{name} {pname} user csr: {}",
                    user.error.clone().unwrap_or_else(|| format!("error {:?}", user.max_rel_error))
                ));
            }
            // The row's numbers as they come: a run cut short by a time
            // limit (the lent GPU machines allow 10 minutes a command) still
            // leaves them in its log.
            let ms = |t: Option<f64>| {
                t.map_or("n/a".to_string(), |t| match model.fraction(&info.name, Some(t)) {
                    Some(f) => format!("{t:.4} ms ({:.0}% of bound)", f * 100.0),
                    None => format!("{t:.4} ms"),
                })
            };
            let auto_ms = variants.iter().find(|v| v.auto == Some(true)).and_then(|v| v.median_ms);
            progress(&format!(
                "  cuSPARSE {}, ours g={g_auto} {}, best {}, user csr {} ({:.1} s)",
                ms(cusparse.median_ms),
                ms(auto_ms),
                best.as_ref().map_or("n/a".to_string(), |b| format!("g={} {:.4} ms", b.g, b.median_ms)),
                ms(user.median_ms()),
                started.elapsed().as_secs_f64(),
            ));
            results.push(GpuSpmmRow {
                matrix: name.clone(),
                rows: m,
                cols: k,
                nnz,
                precision: pname.into(),
                n: SPMM_N,
                g_auto,
                g_star: analysis.g_star,
                roofline: Some(model),
                cusparse_csr: cusparse,
                tuned_tiles,
                best,
                variants,
                user,
            });
        }
    }
    Ok(GpuSpmmReport {
        suite: "spmm".into(),
        target: "cuda".into(),
        statement: STATEMENT.into(),
        n: SPMM_N,
        device: Device::from(&info),
        arch: gpu.arch().as_str().into(),
        machine: machine(),
        copy_gbs,
        repeats: timing.repeats,
        timing: "CUDA events, median after 3 warm-ups; L2 flushed before each launch, as for the baselines; our output zeroed inside the timed region where its kernel needs it (the walks and block rows write it whole); inputs rotated when they fit in L2".into(),
        bandwidth_model:
            "A's format arrays + B once + C written once, over the device copy bandwidth".into(),
        results,
        failures,
    })
}

// ---------------------------------------------------------------- BSR

/// The BSR suite on the GPU. Failed checks are in the report's `failures`.
pub fn bsr(opts: &BsrOptions, progress: &mut dyn FnMut(&str)) -> Result<BsrReport> {
    let backend = match open() {
        Ok(backend) => backend,
        Err(e) => {
            progress("no GPU: the traffic and roofline model's bounds instead (see bench/src/roofline.rs)");
            let block_rows = BSR_SIZE / BSR_BLOCK;
            for &sparsity in BSR_SPARSITIES {
                let blocks = ((1.0 - sparsity) * (block_rows * block_rows) as f64).round() as usize;
                let model = bsr_model(blocks);
                progress(&format!("  sparsity {:.0}%: {}", sparsity * 100.0, model.describe()));
            }
            return Err(e);
        }
    };
    let gpu = backend.gpu();
    let info = gpu.info().clone();
    progress(&format!("GPU: {} ({})", info.name, gpu.arch()));
    let copy_gbs = gpu.copy_bandwidth(1 << 30)?;
    let timing = TimingOptions { warmup: 3, repeats: opts.repeats.max(1) };
    let cuda_timing = spindle_cuda::runtime::TimingOptions { warmup: 3, repeats: opts.repeats.max(1) };
    let precision = Precision::F16;
    let mut cache = TuneCache::load(&TuneCache::default_path(Target::Cuda));
    let b = dense(BSR_SIZE, BSR_N, 11, precision);
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for &sparsity in BSR_SPARSITIES {
        let density = 1.0 - sparsity;
        let spec: GeneratorSpec = format!(
            "blocks:rows={BSR_SIZE},cols={BSR_SIZE},bm={BSR_BLOCK},bk={BSR_BLOCK},density={density},seed=5"
        )
        .parse()?;
        let coo = rounded(&spec.generate::<f64, i64>()?.canonicalize(), precision);
        progress(&format!("sparsity {:.0}%: {} nnz", sparsity * 100.0, coo.nnz()));
        let bcsr = Bcsr::from_coo(&coo, BSR_BLOCK, BSR_BLOCK)?;
        let bsr_host = bsr_host(&bcsr)?;
        // The reference on a sample of rows spread over the matrix.
        let csr = csr_host(&coo, precision)?;
        let sample: Vec<usize> = bsr_sample().collect();
        let want = csr_reference(&csr, &b, BSR_N, sample.iter().copied());
        let sampled = |out: &[f64]| sampled_rows(out, &sample);
        let mut dense_a = vec![0.0f64; BSR_SIZE * BSR_SIZE];
        for (e, v) in coo.val.iter().enumerate() {
            dense_a[coo.crd[0][e] as usize * BSR_SIZE + coo.crd[1][e] as usize] = *v;
        }
        let gemm =
            baseline::cublas_gemm(gpu, &dense_a, &b, (BSR_SIZE, BSR_SIZE, BSR_N), precision, cuda_timing);
        drop(dense_a);
        let cublas = match &gemm {
            Ok(run) => GpuBaseline {
                median_ms: Some(run.timing.median_ms),
                max_rel_error: Some(rel_error(&sampled(&run.output), &want)),
                ..Default::default()
            },
            Err(e) => {
                progress(&format!("  cuBLAS: {e}"));
                GpuBaseline { error: Some(e.to_string()), ..Default::default() }
            }
        };
        let cusparse = match baseline::cusparse_spmm_bsr(gpu, &bsr_host, &b, BSR_N, precision, cuda_timing) {
            Ok(run) => GpuBaseline {
                median_ms: Some(run.timing.median_ms),
                max_rel_error: Some(rel_error(&sampled(&run.output), &want)),
                ..Default::default()
            },
            Err(e) => {
                progress(&format!("  cuSPARSE BSR: {e}"));
                GpuBaseline { error: Some(e.to_string()), ..Default::default() }
            }
        };
        let format = format!("blockgroupcoo:bm={BSR_BLOCK},bk={BSR_BLOCK},dim=0,g=auto");
        // Block rows: a block per (block row, 128 columns), no atomics.
        let default_schedule = "map=rows tile.n=128".to_string();
        let prepared = prepare(&coo, &b, BSR_N, precision, &format);
        let schedule = if opts.autotune {
            let space = bsr_space();
            let key = TuneKey {
                kernel: format!("{STATEMENT} A={format}"),
                shapes: format!("{BSR_SIZE}x{BSR_SIZE} sparsity={sparsity} n={BSR_N} f16"),
                device: info.name.clone(),
            };
            precompile_unless_tuned(&backend, &prepared, &cache, &key, &space);
            let tuned = tune(&mut cache, &key, &space, |s| {
                let prepared = prepared.as_ref().map_err(|e| format!("{e:#}"))?;
                time_only(&backend, prepared, s, timing).map_err(|e| format!("{e:#}"))
            });
            let _ = cache.save();
            match tuned {
                Ok((t, _)) => t.schedule,
                Err(e) => {
                    progress(&format!("  autotuning failed: {e}"));
                    default_schedule
                }
            }
        } else {
            default_schedule
        };
        let ours = prepared.and_then(|prepared| {
            let dots: Vec<String> =
                print(&prepared, &schedule)?.dots.iter().map(|d| d.path.to_string()).collect();
            let r = measure(&backend, &prepared, &schedule, timing)?;
            Ok((r, a_bytes(&prepared), dots))
        });
        let user = as_a_user_gets_it(
            &backend,
            prepare(&coo, &b, BSR_N, precision, "csr"),
            timing,
            tolerance(precision),
            |out| rel_error(&sampled(out.as_slice().unwrap_or(&[])), &want),
        );
        if user.pass != Some(true) {
            failures.push(format!(
                "sparsity {sparsity} user csr: {}",
                user.error.clone().unwrap_or_else(|| format!("error {:?}", user.max_rel_error))
            ));
        }
        let dense_bytes = 2 * (BSR_SIZE * BSR_N + BSR_SIZE * BSR_N);
        let model = bsr_model(bcsr.crd.len());
        progress(&format!("  model: {}", model.describe()));
        let row = match ours {
            Ok(((out, t, launch), a_bytes, dots)) => {
                let ms = t.median_ms;
                let err = rel_error(&sampled(out.as_slice().unwrap_or(&[])), &want);
                if err > tolerance(precision) {
                    failures.push(format!("sparsity {sparsity}: error {err:.1e}"));
                }
                let (gbs, frac) = bandwidth(a_bytes + dense_bytes, ms, copy_gbs);
                let flops = 2.0 * coo.nnz() as f64 * BSR_N as f64;
                BsrRow {
                    sparsity,
                    nnz: Some(coo.nnz()),
                    blocks: Some(bcsr.crd.len()),
                    schedule: Some(schedule),
                    ours: Some(BsrOurs {
                        median_ms: ms,
                        max_rel_error: err,
                        gbs,
                        fraction_of_copy: frac,
                        tflops: flops / (ms * 1e-3) / 1e12,
                        dots,
                        launch,
                    }),
                    speedup_vs_cusparse_bsr: cusparse.median_ms.map(|c| c / ms),
                    speedup_vs_cublas: cublas.median_ms.map(|c| c / ms),
                    fraction_of_bound: model.fraction(&info.name, Some(ms)),
                    roofline: Some(model),
                    cusparse_bsr: Some(cusparse),
                    cublas_dense: Some(cublas),
                    user: Some(user),
                    error: None,
                }
            }
            Err(e) => {
                failures.push(format!("sparsity {sparsity}: {e:#}"));
                BsrRow {
                    sparsity,
                    user: Some(user),
                    roofline: Some(model),
                    error: Some(format!("{e:#}")),
                    ..Default::default()
                }
            }
        };
        results.push(row);
    }
    let skewed = skewed_bsr(&backend, &b, precision, timing, cuda_timing, progress);
    if let Some(e) = &skewed.error {
        failures.push(format!("skewed: {e}"));
    }
    Ok(BsrReport {
        suite: "bsr".into(),
        target: "cuda".into(),
        statement: STATEMENT.into(),
        size: BSR_SIZE,
        block: BSR_BLOCK,
        n: BSR_N,
        precision: "f16".into(),
        device: Device::from(&info),
        arch: gpu.arch().as_str().into(),
        machine: machine(),
        copy_gbs,
        repeats: timing.repeats,
        results,
        skewed: Some(skewed),
        failures,
        check: format!("{BSR_CHECK_ROWS} sampled rows against an f64 CPU product"),
    })
}

/// The BSR suite's matrix as cuSPARSE takes it.
fn bsr_host(bcsr: &Bcsr<f64, i64>) -> Result<BsrHost> {
    Ok(BsrHost {
        block_rows: BSR_SIZE / BSR_BLOCK,
        block_cols: BSR_SIZE / BSR_BLOCK,
        bm: BSR_BLOCK,
        bk: BSR_BLOCK,
        indptr: bcsr.pos.iter().map(|&x| i32::try_from(x)).collect::<Result<_, _>>()?,
        indices: bcsr.crd.iter().map(|&x| i32::try_from(x)).collect::<Result<_, _>>()?,
        values: bcsr.val.clone(),
    })
}

/// The rows the BSR suite checks against the CPU product: spread over the
/// matrix.
fn bsr_sample() -> impl Iterator<Item = usize> {
    (0..BSR_CHECK_ROWS).map(|i| i * BSR_SIZE / BSR_CHECK_ROWS + i % 7)
}

/// The `sample` rows of a `BSR_N`-column output, in order.
fn sampled_rows(out: &[f64], sample: &[usize]) -> Vec<f64> {
    sample.iter().flat_map(|&r| out.get(r * BSR_N..(r + 1) * BSR_N).unwrap_or(&[]).iter().copied()).collect()
}

/// The 90% matrix with [`SKEWED_ROWS`] made dense: a 32x32 block at every
/// column block of those rows.
fn skewed_matrix(precision: Precision) -> Result<Coo<f64, i64>> {
    let spec: GeneratorSpec =
        format!("blocks:rows={BSR_SIZE},cols={BSR_SIZE},bm={BSR_BLOCK},bk={BSR_BLOCK},density=0.1,seed=5")
            .parse()?;
    let base = spec.generate::<f64, i64>()?;
    let heavy = |r: i64| SKEWED_ROWS.contains(&(r as usize / BSR_BLOCK));
    let mut crd = [Vec::new(), Vec::new()];
    let mut val = Vec::new();
    for e in (0..base.nnz()).filter(|&e| !heavy(base.crd[0][e])) {
        crd[0].push(base.crd[0][e]);
        crd[1].push(base.crd[1][e]);
        val.push(base.val[e]);
    }
    for &br in SKEWED_ROWS {
        for r in br * BSR_BLOCK..(br + 1) * BSR_BLOCK {
            for c in 0..BSR_SIZE {
                crd[0].push(r as i64);
                crd[1].push(c as i64);
                val.push(((r * 7 + c * 13) % 17) as f64 / 17.0 - 0.45);
            }
        }
    }
    let coo = Coo::new(vec![BSR_SIZE, BSR_SIZE], crd.into(), val)?.canonicalize();
    Ok(rounded(&coo, precision))
}

/// Block rows on [`skewed_matrix`] at the untuned schedule, with the
/// split and without, beside cuSPARSE BSR; checked on sampled rows, the
/// dense rows among them.
fn skewed_bsr(
    backend: &CudaBackend,
    b: &[f64],
    precision: Precision,
    timing: TimingOptions,
    cuda_timing: spindle_cuda::runtime::TimingOptions,
    progress: &mut dyn FnMut(&str),
) -> BsrSkewed {
    let schedule = "map=rows tile.n=128".to_string();
    let description = format!(
        "the 90% matrix with block rows {SKEWED_ROWS:?} dense ({} column blocks each)",
        BSR_SIZE / BSR_BLOCK
    );
    progress(&format!("skewed: {description}"));
    let mut report = BsrSkewed { description, schedule: schedule.clone(), ..Default::default() };
    let result = (|| -> Result<()> {
        let coo = skewed_matrix(precision)?;
        let bcsr = Bcsr::from_coo(&coo, BSR_BLOCK, BSR_BLOCK)?;
        report.blocks = bcsr.crd.len();
        let csr = csr_host(&coo, precision)?;
        let sample: Vec<usize> = bsr_sample().chain(SKEWED_ROWS.iter().map(|&r| r * BSR_BLOCK + 5)).collect();
        let want = csr_reference(&csr, b, BSR_N, sample.iter().copied());
        let sampled = |out: &[f64]| sampled_rows(out, &sample);
        let bsr_host = bsr_host(&bcsr)?;
        report.cusparse_bsr = Some(
            match baseline::cusparse_spmm_bsr(backend.gpu(), &bsr_host, b, BSR_N, precision, cuda_timing) {
                Ok(run) => GpuBaseline {
                    median_ms: Some(run.timing.median_ms),
                    max_rel_error: Some(rel_error(&sampled(&run.output), &want)),
                    ..Default::default()
                },
                Err(e) => GpuBaseline { error: Some(e.to_string()), ..Default::default() },
            },
        );
        let format = format!("blockgroupcoo:bm={BSR_BLOCK},bk={BSR_BLOCK},dim=0,g=auto");
        let prepared = prepare(&coo, b, BSR_N, precision, &format)?;
        for split in [true, false] {
            let schedule = if split { schedule.clone() } else { format!("{schedule} split=off") };
            let (out, t, _) = measure(backend, &prepared, &schedule, timing)?;
            let err = rel_error(&sampled(out.as_slice().unwrap_or(&[])), &want);
            if err > tolerance(precision) {
                anyhow::bail!("[{schedule}]: error {err:.1e}");
            }
            if split {
                (report.split_ms, report.split_error) = (Some(t.median_ms), Some(err));
            } else {
                (report.whole_ms, report.whole_error) = (Some(t.median_ms), Some(err));
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        report.error = Some(format!("{e:#}"));
    }
    let ms = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.4} ms"));
    progress(&format!(
        "  split {} / whole rows {} / cuSPARSE BSR {}",
        ms(report.split_ms),
        ms(report.whole_ms),
        ms(report.cusparse_bsr.as_ref().and_then(|c| c.median_ms))
    ));
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csr_reference_is_a_matrix_product() {
        // [[1, 0, 2], [0, 0, 0], [0, 3, 0]] x [[1, 2], [3, 4], [5, 6]]
        let a = CsrHost {
            rows: 3,
            cols: 3,
            indptr: vec![0, 2, 2, 3],
            indices: vec![0, 2, 1],
            values: vec![1.0, 2.0, 3.0],
        };
        let b = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(csr_reference(&a, &b, 2, 0..3), [11.0, 14.0, 0.0, 0.0, 9.0, 12.0]);
        assert_eq!(csr_reference(&a, &b, 2, [2].into_iter()), [9.0, 12.0]);
    }

    #[test]
    fn scaling_keeps_half_finite() {
        // bcsstk13 reaches 1.19e12, far past f16's 65504.
        let coo = Coo::<f64, i64>::from_triplets(2, 2, &[(0, 0, 1.19e12), (1, 1, -3.0e11)]).unwrap();
        let r = rounded(&coo, Precision::F16);
        assert!(r.val.iter().all(|v| v.is_finite() && v.abs() <= 1.0), "{:?}", r.val);
        assert_eq!(r.val[0], 1.0);
    }

    #[test]
    fn groupcoo_kernels_build_for_every_g_and_tuned_tile() {
        // What the GPU suite compiles, through the driver on any machine:
        // the rewrite, lowering and printing of each candidate must succeed.
        let spec: GeneratorSpec = "powerlaw:rows=300,cols=200,nnz=2000,seed=3".parse().unwrap();
        let coo: Coo<f64, i64> = spec.generate().unwrap().canonicalize();
        let b = dense(200, SPMM_N, 7, Precision::F16);
        for g in [1, 4, 32] {
            let prepared =
                prepare(&coo, &b, SPMM_N, Precision::F16, &format!("groupcoo:dim=0,g={g}")).unwrap();
            assert!(a_bytes(&prepared) > 0);
            for tiles in tile_space(&format!("tile.q={g}"), &[("p", &[1, 16]), ("n", &[32, 128])]) {
                let printed = print(&prepared, &tiles).unwrap();
                assert!(printed.source.contains("__global__"), "{tiles}");
            }
            let walk = print(&prepared, &format!("tile.q={g} map=walk tile.p=32")).unwrap();
            assert!(walk.source.contains("warp-walk mapping") && walk.sorted.is_some(), "g={g}");
        }
    }

    /// The skewed BSR case exercises the split: its dense block rows hold
    /// every column block, and the default schedule's work list cuts each
    /// into parts, where `split=off` keeps them whole.
    #[test]
    fn the_skewed_bsr_case_splits_its_dense_rows() {
        let coo = skewed_matrix(Precision::F16).unwrap();
        let bcsr = Bcsr::from_coo(&coo, BSR_BLOCK, BSR_BLOCK).unwrap();
        let column_blocks = (BSR_SIZE / BSR_BLOCK) as i64;
        for &r in SKEWED_ROWS {
            assert_eq!(bcsr.pos[r + 1] - bcsr.pos[r], column_blocks, "block row {r}");
        }
        let average = bcsr.crd.len() as f64 / column_blocks as f64;
        assert!(average * 6.0 < column_blocks as f64, "{average} blocks a row");
        let b = dense(BSR_SIZE, 16, 11, Precision::F16);
        let format = format!("blockgroupcoo:bm={BSR_BLOCK},bk={BSR_BLOCK},dim=0,g=auto");
        let prepared = prepare(&coo, &b, 16, Precision::F16, &format).unwrap();
        for (schedule, split) in [("map=rows tile.n=32", true), ("map=rows tile.n=32 split=off", false)] {
            let printed = print(&prepared, schedule).unwrap();
            let work = printed.split.unwrap().work_for(&prepared.data).unwrap();
            if split {
                assert!(work.slots >= 3 * SKEWED_ROWS.len(), "{schedule}: {} slots", work.slots);
            } else {
                assert_eq!(work.slots, 0, "{schedule}");
            }
        }
    }

    /// Every kernel the GPU suites and the driver's GPU autotuner may time
    /// (each suite's tuning space over every g, f32 and f16, N = 128 and 64;
    /// the driver's space on CSR and BlockGroupCOO), compiled by NVRTC for
    /// sm_80 and sm_90: none spills or keeps a stack frame. (The H100 run of
    /// 2026-11-26 found the warp walk at `tile.p=8`, f32, N = 64 spilling 8
    /// bytes, a configuration no test compiled.)
    #[test]
    fn every_tuning_candidate_compiles_without_spills() {
        use spindle_cuda::cubin_cache::{self, CacheEntry};
        use spindle_cuda::nvrtc::{self, Arch, CompileOptions};
        if !nvrtc::toolchain_or_skip("every_tuning_candidate_compiles_without_spills") {
            return;
        }
        let mut kernels: Vec<(String, spindle_cuda::CudaKernel)> = Vec::new();
        let mut level_kernels: Vec<(String, spindle_cuda::CudaKernel)> = Vec::new();
        let mut add = |what: String, prepared: &Prepared, space: Vec<String>| {
            // A candidate may only fail to print for a tile over the limit
            // (the search then goes on without it).
            for schedule in space {
                match print(prepared, &schedule) {
                    Ok(printed) => kernels.push((format!("{what} [{schedule}]"), printed)),
                    Err(e) => {
                        assert!(format!("{e:#}").contains("is larger than"), "{what} [{schedule}]: {e:#}")
                    }
                }
            }
        };
        let default_space = |prepared: &Prepared| {
            let kernel = prepared.lower(&Schedule::default()).unwrap();
            spindle::autotune::space(&kernel, Target::Cuda, 1)
        };
        let spec: GeneratorSpec = "powerlaw:rows=3000,cols=2000,nnz=20000,seed=3".parse().unwrap();
        let coo: Coo<f64, i64> = spec.generate().unwrap().canonicalize();
        for precision in [Precision::F32, Precision::F16] {
            for n in [SPMM_N, 64] {
                let b = dense(2000, n, 7, precision);
                let what = |format: &str| format!("{format} {} n={n}", dtype_of(precision).name());
                for &g in GROUP_SIZES {
                    let format = format!("groupcoo:dim=0,g={g}");
                    let prepared = prepare(&coo, &b, n, precision, &format).unwrap();
                    add(what(&format), &prepared, spmm_space(g));
                }
                let prepared = prepare(&coo, &b, n, precision, "csr").unwrap();
                add(what("csr"), &prepared, default_space(&prepared));
                // The level path's candidates: a warp's columns print; the
                // splits of a row's positions need the sum innermost.
                for schedule in spindle::autotune::level_candidates(Target::Cuda, 1) {
                    let parsed: Schedule = schedule.parse().unwrap();
                    let lowered = prepared.lower_levels(&parsed).unwrap();
                    match spindle_cuda::print::levels::print_level(&lowered.kernel, spindle::backend::SYMBOL)
                    {
                        Ok(printed) => level_kernels.push((format!("{} [{schedule}]", what("csr")), printed)),
                        Err(e) => assert!(e.to_string().contains("reduce=parallel"), "{schedule}: {e}"),
                    }
                }
            }
        }
        let spec: GeneratorSpec =
            "blocks:rows=4096,cols=4096,bm=32,bk=32,density=0.1,seed=5".parse().unwrap();
        let blocks: Coo<f64, i64> = spec.generate().unwrap().canonicalize();
        let b = dense(BSR_SIZE, BSR_N, 7, Precision::F16);
        let format = format!("blockgroupcoo:bm={BSR_BLOCK},bk={BSR_BLOCK},dim=0,g=auto");
        let prepared = prepare(&blocks, &b, BSR_N, Precision::F16, &format).unwrap();
        add(format.clone(), &prepared, bsr_space());
        add(format!("{format} (driver)"), &prepared, default_space(&prepared));
        assert!(!level_kernels.is_empty());
        kernels.extend(level_kernels);
        assert!(kernels.len() > 300, "{} kernels", kernels.len());
        assert!(kernels.iter().any(|(what, _)| what.contains("l2hints=on")));

        let sources: Vec<(&str, &str)> =
            kernels.iter().map(|(_, k)| (k.symbol.as_str(), k.source.as_str())).collect();
        // A cache of the test's own, so nothing compiled before counts.
        let dir = std::env::temp_dir().join(format!("spindle-spill-test-{}", std::process::id()));
        let (mut spilled, mut bounded) = (Vec::new(), Vec::new());
        for arch in [Arch::Sm80, Arch::Sm90] {
            cubin_cache::precompile_in(&dir, arch, &sources);
            for (what, printed) in &kernels {
                let entry = CacheEntry::in_dir(&dir, arch, &printed.symbol, &printed.source);
                let Some((_, log)) = entry.read(&printed.source) else {
                    // Compiled ahead unless it does not compile: say why.
                    let compiled = nvrtc::compile_spill_free(
                        &printed.source,
                        &printed.symbol,
                        arch,
                        &CompileOptions::default(),
                    );
                    panic!("{what} for {arch}: not in the cache: {:?}", compiled.err());
                };
                let r = nvrtc::parse_ptxas_log(&log)
                    .get(&printed.symbol)
                    .copied()
                    .unwrap_or_else(|| panic!("{what} for {arch}: no resources in {log}"));
                if r.spills() || r.stack_bytes > 0 {
                    spilled.push(format!("{what} for {arch}: {} registers, {r:?}", r.registers));
                }
                if let Some(line) = log.lines().find(|l| l.starts_with("spindle:")) {
                    bounded.push(format!("{what} for {arch}: {line}"));
                }
            }
        }
        eprintln!(
            "{} of {} compiled under a second launch bound:\n{}",
            bounded.len(),
            2 * kernels.len(),
            bounded.join("\n")
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            spilled.is_empty(),
            "{} of {} spill:\n{}",
            spilled.len(),
            2 * kernels.len(),
            spilled.join("\n")
        );
    }

    #[test]
    fn blockgroupcoo_kernels_use_tensor_cores() {
        let spec: GeneratorSpec = "blocks:rows=128,cols=128,bm=32,bk=32,density=0.3,seed=5".parse().unwrap();
        let coo: Coo<f64, i64> = spec.generate().unwrap().canonicalize();
        let b = dense(128, 64, 11, Precision::F16);
        let prepared =
            prepare(&coo, &b, 64, Precision::F16, "blockgroupcoo:bm=32,bk=32,dim=0,g=auto").unwrap();
        for s in tile_space("tile.bi=32 tile.bj=32 tile.q=1", &[("p", &[1, 2]), ("n", &[32, 64])]) {
            let printed = print(&prepared, &s).unwrap();
            assert!(
                printed.dots.iter().any(|d| matches!(d.path, spindle_cuda::DotPath::TensorCores { .. })),
                "{s}: {:?}",
                printed.dots
            );
        }
    }

    #[test]
    fn without_a_gpu_the_suites_say_so() {
        if spindle_cuda::runtime::available() {
            eprintln!("SKIPPED: a GPU is present; this test covers the no-GPU message");
            return;
        }
        let opts = GpuSpmmOptions {
            repeats: 1,
            matrices: vec!["karate".into()],
            precisions: vec![Precision::F32],
            autotune: false,
        };
        let mut said = Vec::new();
        let err = format!("{:#}", spmm(&opts, &mut |l| said.push(l.to_string())).unwrap_err());
        assert!(err.contains("need an NVIDIA GPU") && err.contains("no CUDA driver"), "{err}");
        // The model's predictions instead (karate is in the shared data).
        if spindle_formats::data::shared_matrices().is_empty() {
            eprintln!("SKIPPED part: no shared matrices, so no SpMM prediction to check");
        } else {
            assert!(said.iter().any(|l| l.contains("karate f32") && l.contains("µs on H100")), "{said:?}");
        }
        said.clear();
        let err = format!(
            "{:#}",
            bsr(&BsrOptions { repeats: 1, autotune: false }, &mut |l| said.push(l.to_string())).unwrap_err()
        );
        assert!(err.contains("need an NVIDIA GPU"), "{err}");
        assert!(said.iter().any(|l| l.contains("sparsity 90%") && l.contains("Tensor Cores")), "{said:?}");
    }

    #[test]
    fn reports_keep_the_fields_the_gpu_summary_reads() {
        let v = GpuVariant { g: 4, auto: Some(true), median_ms: Some(1.5), ..Default::default() };
        let json = serde_json::to_value(&v).unwrap();
        for key in ["g", "auto", "median_ms", "error", "pass", "gbs", "fraction_of_copy"] {
            assert!(json.get(key).is_some(), "{key}");
        }
        let row = BsrRow { sparsity: 0.9, ..Default::default() };
        let back: BsrRow = serde_json::from_str(&serde_json::to_string(&row).unwrap()).unwrap();
        assert_eq!(back, row);
    }
}
