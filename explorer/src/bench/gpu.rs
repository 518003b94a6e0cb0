//! The GPU suites, in one process with their baselines:
//!
//! - `spindle bench spmm --target cuda`: C = A·B with N = 128, A in GroupCOO
//!   over a sweep of g (and g = auto), against cuSPARSE SpMM on CSR, in f32
//!   and f16, on the matrices of `../shared/data` and generated power-law
//!   ones.
//! - `spindle bench bsr --target cuda`: A 4096×4096 with 32×32 blocks at
//!   sparsity 50–99%, in BlockGroupCOO (the block product on Tensor Cores),
//!   against cuSPARSE SpMM on BSR and cuBLAS GEMM on the dense matrix, f16.
//!
//! # What is timed
//!
//! Every kernel and baseline is timed with CUDA events: warm-up launches,
//! then the median of `--repeats`; our outputs are reset before each launch
//! outside the timed region, and inputs that fit in L2 are rotated
//! ([`spindle_cuda::runtime::Gpu::time`]). Our schedule is autotuned over a
//! small tile space at g = auto (cached per kernel, shape and device in
//! `autotune.json` of the CUDA cache folder) and reused for the other g.
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
//! B once, C read and written once.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use rand::{Rng, SeedableRng};
use serde_json::{Value as Json, json};
use spindle::autotune::{TuneCache, TuneKey, tile_space, tune};
use spindle_cuda::baseline::{self, BsrHost, CsrHost, Precision};
use spindle_cuda::runtime::{Gpu, TimingOptions};
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::stats::GroupAnalysis;
use spindle_formats::{Bcsr, Compressed, Coo, DType, FormatSpec};
use spindle_ir::lang::{Declaration, Declarations, Einsum, ElemType, check, parse};
use spindle_ir::tensor::{TensorValue, Tensors};

use super::machine;

const STATEMENT: &str = "C[m,n] += A[m,k] * B[k,n]";
const SYMBOL: &str = "spindle_kernel";

/// Dense columns of the SpMM suite.
const SPMM_N: usize = 128;
/// The generated power-law matrices of the SpMM suite.
const POWER_LAWS: &[(&str, &str)] = &[
    ("powerlaw-1M", "powerlaw:rows=100000,cols=100000,nnz=1000000,seed=1"),
    ("powerlaw-8M", "powerlaw:rows=1000000,cols=1000000,nnz=8000000,seed=2"),
];
const GROUP_SIZES: &[usize] = &[1, 2, 4, 8, 16, 32];
/// GroupCOO sizes whose padded arrays exceed this multiple of nnz are skipped.
const MAX_STORED_OVER_NNZ: usize = 16;
/// The largest q tile: a group is accumulated in registers before its scatter.
const MAX_Q_TILE: usize = 32;

/// The BSR suite's matrix and blocks.
const BSR_SIZE: usize = 4096;
const BSR_BLOCK: usize = 32;
const BSR_N: usize = 1024;
const BSR_SPARSITIES: &[f64] = &[0.5, 0.7, 0.9, 0.95, 0.99];
/// Rows of the BSR product checked against the CPU.
const BSR_CHECK_ROWS: usize = 96;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    F32,
    F16,
}

impl PrecisionArg {
    pub(crate) fn precision(self) -> Precision {
        match self {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F16 => Precision::F16,
        }
    }
}

fn dtype_of(p: Precision) -> DType {
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

/// Options the GPU suites share.
#[derive(Debug, Clone)]
pub struct GpuOptions {
    pub repeats: usize,
    pub json: bool,
    pub record: Option<PathBuf>,
    pub matrices: Vec<String>,
    pub precisions: Vec<Precision>,
    /// Autotune at g = auto (else the default schedule).
    pub autotune: bool,
}

/// `spindle bench bsr` options.
#[derive(Debug, clap::Args)]
pub struct BsrArgs {
    /// Where our kernels run (only cuda: the suite compares against
    /// cuSPARSE BSR and cuBLAS).
    #[arg(long, value_enum, default_value_t = BsrTarget::Cuda)]
    pub target: BsrTarget,
    /// Timed repetitions per measurement (the median is reported).
    #[arg(long, default_value_t = 20)]
    pub repeats: usize,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this folder as `bsr-cuda-<date>.json`.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Skip the autotuning search and use the default block schedule.
    #[arg(long)]
    pub no_autotune: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BsrTarget {
    /// CUDA on an NVIDIA GPU.
    Cuda,
}

fn open() -> Result<Gpu> {
    Gpu::open().context("the GPU suites need an NVIDIA GPU (`--target c` runs the CPU suite)")
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

/// Max |got − want| / max |want|; infinite when a value is not finite
/// where the reference is (`f64::max` would skip a NaN).
fn rel_error(got: &[f64], want: &[f64]) -> f64 {
    if got.len() != want.len() || want.iter().any(|w| !w.is_finite()) {
        return f64::INFINITY;
    }
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    let diff = |g: f64, w: f64| if g.is_finite() { (g - w).abs() } else { f64::INFINITY };
    got.iter().zip(want).fold(0.0f64, |m, (g, w)| m.max(diff(*g, *w))) / scale
}

/// A CSR on the host from COO, values rounded to `p`.
fn csr_host(coo: &Coo<f64, i64>, p: Precision) -> Result<CsrHost> {
    let csr = Compressed::from_coo(coo, 0)?;
    Ok(CsrHost {
        rows: coo.shape[0],
        cols: coo.shape[1],
        indptr: csr.pos.iter().map(|&x| x as i32).collect(),
        indices: csr.crd.iter().map(|&x| x as i32).collect(),
        values: csr.val.iter().map(|&v| round(v, p)).collect(),
    })
}

/// The SpMM statement typed for `p`: A m×k, B k×n, C m×n.
fn spmm_einsum(m: usize, k: usize, n: usize, p: Precision) -> Result<Einsum> {
    let dtype = ElemType::Value(dtype_of(p));
    let declarations: Declarations = [("A", vec![m, k]), ("B", vec![k, n]), ("C", vec![m, n])]
        .into_iter()
        .map(|(name, shape)| (name.to_string(), Declaration { shape, dtype }))
        .collect();
    let statement = parse(STATEMENT).map_err(|d| anyhow!("{}", d.render(STATEMENT, false)))?;
    check(&statement, &declarations).map_err(|d| anyhow!("{}", d.render(STATEMENT, false)))
}

/// Our kernel for one format and schedule: rewritten, lowered, printed;
/// with the data it reads.
struct Built {
    kernel: spindle_ir::kernel::Kernel,
    printed: spindle_cuda::CudaKernel,
    data: Tensors,
    /// Bytes of A's format arrays on the device.
    a_bytes: usize,
    statement: String,
}

fn build(einsum: &Einsum, a: &Coo<f64, i64>, b: &[f64], format: &str, schedule: &str) -> Result<Built> {
    let what = format!("{format} [{schedule}]");
    let spec: FormatSpec = format.parse().with_context(|| what.clone())?;
    let sparse = BTreeMap::from([("A".to_string(), a.clone())]);
    let formats = BTreeMap::from([("A".to_string(), spec)]);
    let rewritten =
        spindle_ir::rewrite::rewrite(einsum, &formats, &sparse).map_err(|d| anyhow!("{what}: {d}"))?;
    let typed = rewritten.check(einsum).map_err(|d| anyhow!("{what}: {d}"))?;
    let parsed: spindle_ir::kernel::schedule::Schedule = schedule.parse().with_context(|| what.clone())?;
    let kernel =
        spindle_ir::kernel::lower::lower(&typed, &parsed, SYMBOL).map_err(|d| anyhow!("{what}: {d}"))?;
    let printed = spindle_cuda::print::print_kernel(&kernel, SYMBOL, &Default::default())
        .with_context(|| what.clone())?;
    let a_bytes = kernel
        .tensors
        .values()
        .filter(|t| t.name.starts_with("A_"))
        .map(|t| t.shape.iter().product::<usize>() * t.dtype.size_bytes())
        .sum();
    let mut data: Tensors = rewritten.tensors;
    let k = einsum.tensors["B"].shape[0];
    let n = einsum.tensors["B"].shape[1];
    data.insert("B".into(), TensorValue::Values(ndarray::ArrayD::from_shape_vec(vec![k, n], b.to_vec())?));
    Ok(Built { kernel, printed, data, a_bytes, statement: rewritten.statement.to_string() })
}

/// A number for JSON: NaN and infinities become null.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Runs `built` once (its output for checking) and times it.
fn measure(gpu: &Gpu, built: &Built, opts: TimingOptions) -> Result<(Vec<f64>, f64, Json)> {
    let loaded = gpu.load(&built.printed)?;
    let (out, timing) = gpu.run_and_time(&built.kernel, &loaded, &built.data, opts)?;
    let resources = loaded.resources.map(|r| {
        json!({ "registers": r.registers, "shared_bytes": r.shared_mem_bytes, "spill_bytes": r.spill_stores_bytes })
    });
    let info = json!({
        "launch": format!("{} x {}", loaded.launch.grid, loaded.launch.block),
        "resources": resources,
        "input_sets": timing.input_sets,
    });
    Ok((out.iter().copied().collect(), timing.median_ms, info))
}

/// The median ms of one autotuning candidate, or why it failed.
fn time_candidate(
    gpu: &Gpu,
    einsum: &Einsum,
    a: &Coo<f64, i64>,
    b: &[f64],
    format: &str,
    schedule: &str,
    timing: TimingOptions,
) -> Result<f64, String> {
    let built = build(einsum, a, b, format, schedule).map_err(|e| format!("{e:#}"))?;
    measure(gpu, &built, timing).map(|(_, ms, _)| ms).map_err(|e| format!("{e:#}"))
}

/// Fraction of the copy bandwidth `bytes` moved in `ms` reaches.
fn bandwidth(bytes: usize, ms: f64, copy_gbs: f64) -> (f64, f64) {
    let gbs = bytes as f64 / (ms * 1e-3) / 1e9;
    (gbs, gbs / copy_gbs)
}

/// The SpMM suite on the GPU.
pub fn spmm(opts: &GpuOptions) -> Result<()> {
    let gpu = open()?;
    let info = gpu.info().clone();
    eprintln!(
        "GPU: {} ({}), {} SMs, L2 {} MiB",
        info.name,
        gpu.arch(),
        info.multiprocessors,
        info.l2_bytes >> 20
    );
    let copy_gbs = gpu.copy_bandwidth(1 << 30)?;
    eprintln!("device copy: {copy_gbs:.0} GB/s (read + write)");
    let timing = TimingOptions { warmup: 3, repeats: opts.repeats.max(1) };
    let mut cache = TuneCache::load(&TuneCache::default_path(spindle::Target::Cuda));

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
    if inputs.is_empty() {
        bail!("no matrix matches --matrix {}", opts.matrices.join(", "));
    }

    let mut results = Vec::new();
    let mut failures = Vec::new();
    for &precision in &opts.precisions {
        for (name, coo) in &inputs {
            let (m, k) = (coo.shape[0], coo.shape[1]);
            let nnz = coo.nnz();
            eprintln!("{name} {}: {m}x{k}, {nnz} nnz", dtype_of(precision).name());
            let elem = dtype_of(precision).size_bytes();
            let a = rounded(coo, precision);
            let b = dense(k, SPMM_N, 7, precision);
            let csr = csr_host(&a, precision)?;
            let want = csr_reference(&csr, &b, SPMM_N, 0..m);
            let dense_bytes = elem * (k * SPMM_N + 2 * m * SPMM_N);

            // A failing baseline is reported; our kernels still run.
            let (cusparse_ms, cusparse_err, cusparse_error) =
                match baseline::cusparse_spmm_csr(&gpu, &csr, &b, SPMM_N, precision, timing) {
                    Ok(run) => (run.timing.median_ms, rel_error(&run.output, &want), None),
                    Err(e) => (f64::NAN, f64::NAN, Some(e.to_string())),
                };
            let csr_bytes = 4 * (csr.indptr.len() + csr.indices.len()) + elem * csr.values.len();
            if cusparse_error.is_some() || cusparse_err.is_nan() || cusparse_err > tolerance(precision) {
                failures.push(format!(
                    "{name} {}: cuSPARSE CSR: {}",
                    dtype_of(precision).name(),
                    cusparse_error.clone().unwrap_or_else(|| format!("error {cusparse_err:.1e}"))
                ));
            }

            let einsum = spmm_einsum(m, k, SPMM_N, precision)?;
            let analysis = GroupAnalysis::new(&coo.occupancy(0));
            let g_auto = spindle_formats::stats::auto_group_size(m, &coo.occupancy(0));
            // Tune at g = auto, then reuse its tiles for every g.
            let base = |g: usize| format!("tile.q={}", g.min(MAX_Q_TILE));
            let space = tile_space(&base(g_auto), &[("p", &[1, 4, 16]), ("n", &[32, 128])]);
            let tuned_tiles = if opts.autotune {
                let key = TuneKey {
                    kernel: format!("{STATEMENT} A=groupcoo:dim=0,g={g_auto}"),
                    shapes: format!("{name} {m}x{k} nnz={nnz} n={SPMM_N} {}", dtype_of(precision).name()),
                    device: info.name.clone(),
                };
                let format = format!("groupcoo:dim=0,g={g_auto}");
                let result = tune(&mut cache, &key, &space, |schedule| {
                    time_candidate(&gpu, &einsum, &a, &b, &format, schedule, timing)
                });
                let _ = cache.save();
                match result {
                    Ok((tuned, hit)) => {
                        eprintln!(
                            "  tuned: {} ({:.4} ms{})",
                            tuned.schedule,
                            tuned.median_ms,
                            if hit { ", cached" } else { "" }
                        );
                        tuned.schedule.replace(&base(g_auto), "").trim().to_string()
                    }
                    Err(e) => {
                        eprintln!("  autotuning failed: {e}");
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
            for g in gs {
                let groups: usize = coo.occupancy(0).iter().map(|o| o.div_ceil(g)).sum();
                if groups * g > MAX_STORED_OVER_NNZ * nnz.max(1) {
                    variants.push(json!({ "g": g, "skipped": "padding over 16x nnz" }));
                    continue;
                }
                let schedule = format!("{} {tuned_tiles}", base(g)).trim().to_string();
                let format = format!("groupcoo:dim=0,g={g}");
                let outcome = build(&einsum, &a, &b, &format, &schedule).and_then(|built| {
                    measure(&gpu, &built, timing).map(|r| (built.a_bytes, built.statement, r))
                });
                match outcome {
                    Ok((a_bytes, statement, (out, ms, launch))) => {
                        let err = rel_error(&out, &want);
                        let pass = err <= tolerance(precision);
                        if !pass {
                            failures.push(format!(
                                "{name} {} g={g}: error {err:.1e}",
                                dtype_of(precision).name()
                            ));
                        }
                        let (gbs, frac) = bandwidth(a_bytes + dense_bytes, ms, copy_gbs);
                        variants.push(json!({
                            "g": g, "auto": g == g_auto, "format": format, "schedule": schedule,
                            "statement": statement, "median_ms": ms, "max_rel_error": err, "pass": pass,
                            "speedup_vs_cusparse_csr": finite(cusparse_ms / ms), "gbs": gbs, "fraction_of_copy": frac,
                            "f_of_g": analysis.f_of_g.get(&g), "launch": launch,
                        }));
                    }
                    Err(e) => {
                        failures.push(format!("{name} {} g={g}: {e:#}", dtype_of(precision).name()));
                        variants.push(json!({ "g": g, "format": format, "schedule": schedule, "error": format!("{e:#}") }));
                    }
                }
            }
            let best = variants
                .iter()
                .filter_map(|v| Some((v["median_ms"].as_f64()?, v["g"].as_u64()?)))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            let (cusparse_gbs, cusparse_frac) = bandwidth(csr_bytes + dense_bytes, cusparse_ms, copy_gbs);
            results.push(json!({
                "matrix": name, "rows": m, "cols": k, "nnz": nnz, "precision": dtype_of(precision).name(),
                "n": SPMM_N, "g_auto": g_auto, "g_star": analysis.g_star,
                "cusparse_csr": { "median_ms": finite(cusparse_ms), "max_rel_error": finite(cusparse_err),
                    "gbs": finite(cusparse_gbs), "fraction_of_copy": finite(cusparse_frac), "error": cusparse_error },
                "tuned_tiles": tuned_tiles,
                "best": best.map(|(ms, g)| json!({ "g": g, "median_ms": ms, "speedup_vs_cusparse_csr": finite(cusparse_ms / ms) })),
                "variants": variants,
            }));
        }
    }
    let report = json!({
        "suite": "spmm", "target": "cuda", "statement": STATEMENT, "n": SPMM_N,
        "device": info, "arch": gpu.arch().as_str(), "machine": machine(), "copy_gbs": copy_gbs,
        "repeats": timing.repeats, "timing": "CUDA events, median after 3 warm-ups; inputs rotated when they fit in L2",
        "bandwidth_model": "A's format arrays + B once + C read and written once, over the device copy bandwidth",
        "results": results, "failures": failures,
    });
    finish(&report, opts, "spmm-cuda", print_spmm)?;
    if !failures.is_empty() {
        bail!("{} checks failed: {}", failures.len(), failures.join("; "));
    }
    Ok(())
}

fn print_spmm(report: &Json) {
    println!(
        "SpMM on {} (N = {SPMM_N}), device copy {:.0} GB/s; ratios are cuSPARSE CSR time / ours (> 1: we are faster)",
        report["device"]["name"].as_str().unwrap_or("?"),
        report["copy_gbs"].as_f64().unwrap_or(0.0)
    );
    println!(
        "{:<22} {:<4} {:>9} {:>10} {:>7} {:>10} {:>9} {:>7} {:>8}",
        "matrix", "type", "nnz", "cuSPARSE", "g auto", "ours auto", "ratio", "best g", "best"
    );
    for r in report["results"].as_array().into_iter().flatten() {
        let auto = r["variants"].as_array().and_then(|v| v.iter().find(|x| x["auto"] == json!(true)));
        let auto_ms = auto.and_then(|a| a["median_ms"].as_f64());
        let cus = r["cusparse_csr"]["median_ms"].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:<22} {:<4} {:>9} {:>8.4}ms {:>7} {:>8.4}ms {:>8.2}x {:>7} {:>7.2}x",
            r["matrix"].as_str().unwrap_or("?"),
            r["precision"].as_str().unwrap_or("?"),
            r["nnz"],
            cus,
            r["g_auto"],
            auto_ms.unwrap_or(f64::NAN),
            auto_ms.map_or(f64::NAN, |ms| cus / ms),
            r["best"]["g"],
            r["best"]["speedup_vs_cusparse_csr"].as_f64().unwrap_or(f64::NAN),
        );
    }
}

/// The BSR suite on the GPU.
pub fn bsr(args: &BsrArgs) -> Result<()> {
    let BsrTarget::Cuda = args.target;
    let gpu = open()?;
    let info = gpu.info().clone();
    eprintln!("GPU: {} ({})", info.name, gpu.arch());
    let copy_gbs = gpu.copy_bandwidth(1 << 30)?;
    let timing = TimingOptions { warmup: 3, repeats: args.repeats.max(1) };
    let precision = Precision::F16;
    let mut cache = TuneCache::load(&TuneCache::default_path(spindle::Target::Cuda));
    let b = dense(BSR_SIZE, BSR_N, 11, precision);
    let einsum = spmm_einsum(BSR_SIZE, BSR_SIZE, BSR_N, precision)?;
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for &sparsity in BSR_SPARSITIES {
        let density = 1.0 - sparsity;
        let spec: GeneratorSpec = format!(
            "blocks:rows={BSR_SIZE},cols={BSR_SIZE},bm={BSR_BLOCK},bk={BSR_BLOCK},density={density},seed=5"
        )
        .parse()?;
        let coo = rounded(&spec.generate::<f64, i64>()?.canonicalize(), precision);
        eprintln!("sparsity {:.0}%: {} nnz", sparsity * 100.0, coo.nnz());
        let bcsr = Bcsr::from_coo(&coo, BSR_BLOCK, BSR_BLOCK)?;
        let bsr_host = BsrHost {
            block_rows: BSR_SIZE / BSR_BLOCK,
            block_cols: BSR_SIZE / BSR_BLOCK,
            bm: BSR_BLOCK,
            bk: BSR_BLOCK,
            indptr: bcsr.pos.iter().map(|&x| x as i32).collect(),
            indices: bcsr.crd.iter().map(|&x| x as i32).collect(),
            values: bcsr.val.clone(),
        };
        // The reference on a sample of rows spread over the matrix.
        let csr = csr_host(&coo, precision)?;
        let sample: Vec<usize> = (0..BSR_CHECK_ROWS).map(|i| i * BSR_SIZE / BSR_CHECK_ROWS + i % 7).collect();
        let want = csr_reference(&csr, &b, BSR_N, sample.iter().copied());
        let sampled = |out: &[f64]| -> Vec<f64> {
            sample.iter().flat_map(|&r| out[r * BSR_N..(r + 1) * BSR_N].iter().copied()).collect()
        };
        let mut dense_a = vec![0.0f64; BSR_SIZE * BSR_SIZE];
        for (e, v) in coo.val.iter().enumerate() {
            dense_a[coo.crd[0][e] as usize * BSR_SIZE + coo.crd[1][e] as usize] = *v;
        }
        let gemm = baseline::cublas_gemm(&gpu, &dense_a, &b, (BSR_SIZE, BSR_SIZE, BSR_N), precision, timing);
        drop(dense_a);
        let (gemm_ms, gemm_err, gemm_error) = match &gemm {
            Ok(run) => (Some(run.timing.median_ms), Some(rel_error(&sampled(&run.output), &want)), None),
            Err(e) => {
                eprintln!("  cuBLAS: {e}");
                (None, None, Some(e.to_string()))
            }
        };
        let cusparse = baseline::cusparse_spmm_bsr(&gpu, &bsr_host, &b, BSR_N, precision, timing);
        let (cusparse_ms, cusparse_err) = match &cusparse {
            Ok(run) => (Some(run.timing.median_ms), Some(rel_error(&sampled(&run.output), &want))),
            Err(e) => {
                eprintln!("  cuSPARSE BSR: {e}");
                (None, None)
            }
        };
        let format = format!("blockgroupcoo:bm={BSR_BLOCK},bk={BSR_BLOCK},dim=0,g=auto");
        let base = format!("tile.bi={BSR_BLOCK} tile.bj={BSR_BLOCK} tile.q=1");
        let space = tile_space(&base, &[("p", &[1, 2]), ("n", &[32, 64, 128])]);
        let schedule = if args.no_autotune {
            format!("{base} tile.p=1 tile.n=64")
        } else {
            let key = TuneKey {
                kernel: format!("{STATEMENT} A={format}"),
                shapes: format!("{BSR_SIZE}x{BSR_SIZE} sparsity={sparsity} n={BSR_N} f16"),
                device: info.name.clone(),
            };
            let tuned = tune(&mut cache, &key, &space, |s| {
                time_candidate(&gpu, &einsum, &coo, &b, &format, s, timing)
            });
            let _ = cache.save();
            match tuned {
                Ok((t, _)) => t.schedule,
                Err(e) => {
                    eprintln!("  autotuning failed: {e}");
                    format!("{base} tile.p=1 tile.n=64")
                }
            }
        };
        let ours = build(&einsum, &coo, &b, &format, &schedule).and_then(|built| {
            let dots: Vec<String> = built.printed.dots.iter().map(|d| format!("{:?}", d.path)).collect();
            measure(&gpu, &built, timing).map(|r| (r, built.a_bytes, dots))
        });
        let elem = 2;
        let dense_bytes = elem * (BSR_SIZE * BSR_N + 2 * BSR_SIZE * BSR_N);
        let row = match ours {
            Ok(((out, ms, launch), a_bytes, dots)) => {
                let err = rel_error(&sampled(&out), &want);
                if err > tolerance(precision) {
                    failures.push(format!("sparsity {sparsity}: error {err:.1e}"));
                }
                let (gbs, frac) = bandwidth(a_bytes + dense_bytes, ms, copy_gbs);
                let flops = 2.0 * coo.nnz() as f64 * BSR_N as f64;
                json!({
                    "sparsity": sparsity, "nnz": coo.nnz(), "blocks": bcsr.crd.len(), "schedule": schedule,
                    "ours": { "median_ms": ms, "max_rel_error": err, "gbs": gbs, "fraction_of_copy": frac,
                        "tflops": flops / (ms * 1e-3) / 1e12, "dots": dots, "launch": launch },
                    "cusparse_bsr": { "median_ms": cusparse_ms, "max_rel_error": cusparse_err,
                        "error": cusparse.as_ref().err().map(|e| e.to_string()) },
                    "cublas_dense": { "median_ms": gemm_ms, "max_rel_error": gemm_err, "error": gemm_error },
                    "speedup_vs_cusparse_bsr": cusparse_ms.map(|c| c / ms),
                    "speedup_vs_cublas": gemm_ms.map(|c| c / ms),
                })
            }
            Err(e) => {
                failures.push(format!("sparsity {sparsity}: {e:#}"));
                json!({ "sparsity": sparsity, "error": format!("{e:#}") })
            }
        };
        results.push(row);
    }
    let report = json!({
        "suite": "bsr", "target": "cuda", "statement": STATEMENT, "size": BSR_SIZE, "block": BSR_BLOCK,
        "n": BSR_N, "precision": "f16", "device": info, "arch": gpu.arch().as_str(), "machine": machine(),
        "copy_gbs": copy_gbs, "repeats": timing.repeats, "results": results, "failures": failures,
        "check": format!("{BSR_CHECK_ROWS} sampled rows against an f64 CPU product"),
    });
    let opts = GpuOptions {
        repeats: args.repeats,
        json: args.json,
        record: args.record.clone(),
        matrices: Vec::new(),
        precisions: vec![precision],
        autotune: !args.no_autotune,
    };
    finish(&report, &opts, "bsr-cuda", print_bsr)?;
    if !failures.is_empty() {
        bail!("{} checks failed: {}", failures.len(), failures.join("; "));
    }
    Ok(())
}

fn print_bsr(report: &Json) {
    println!(
        "Block-sparse SpMM {BSR_SIZE}x{BSR_SIZE} ({BSR_BLOCK}x{BSR_BLOCK} blocks) x {BSR_SIZE}x{BSR_N}, f16, on {}; ratios are baseline time / ours",
        report["device"]["name"].as_str().unwrap_or("?")
    );
    println!(
        "{:>9} {:>10} {:>12} {:>10} {:>12} {:>10} {:>8}",
        "sparsity", "ours", "cuSPARSE BSR", "ratio", "cuBLAS", "ratio", "TFLOP/s"
    );
    for r in report["results"].as_array().into_iter().flatten() {
        let f = |v: &Json| v.as_f64().unwrap_or(f64::NAN);
        println!(
            "{:>8.0}% {:>8.4}ms {:>10.4}ms {:>9.2}x {:>10.4}ms {:>9.2}x {:>8.1}",
            f(&r["sparsity"]) * 100.0,
            f(&r["ours"]["median_ms"]),
            f(&r["cusparse_bsr"]["median_ms"]),
            f(&r["speedup_vs_cusparse_bsr"]),
            f(&r["cublas_dense"]["median_ms"]),
            f(&r["speedup_vs_cublas"]),
            f(&r["ours"]["tflops"]),
        );
    }
}

/// Prints (table or JSON) and records the report.
fn finish(report: &Json, opts: &GpuOptions, stem: &str, table: fn(&Json)) -> Result<()> {
    if opts.json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        table(report);
    }
    if let Some(dir) = &opts.record {
        std::fs::create_dir_all(dir)?;
        let date = jiff::Zoned::now().strftime("%Y-%m-%d").to_string();
        let path = dir.join(format!("{stem}-{date}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("recorded {}", path.display());
    }
    Ok(())
}

fn wanted(filter: &[String], name: &str) -> bool {
    filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(name))
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
    fn errors_see_nan_and_scaling_keeps_half_finite() {
        assert_eq!(rel_error(&[f64::NAN, 1.0], &[1.0, 1.0]), f64::INFINITY);
        assert_eq!(rel_error(&[1.0], &[f64::INFINITY]), f64::INFINITY);
        assert!((rel_error(&[1.5, 2.0], &[1.0, 2.0]) - 0.25).abs() < 1e-12);
        // bcsstk13 reaches 1.19e12, far past f16's 65504.
        let coo = Coo::<f64, i64>::from_triplets(2, 2, &[(0, 0, 1.19e12), (1, 1, -3.0e11)]).unwrap();
        let r = rounded(&coo, Precision::F16);
        assert!(r.val.iter().all(|v| v.is_finite() && v.abs() <= 1.0), "{:?}", r.val);
        assert_eq!(r.val[0], 1.0);
    }

    #[test]
    fn groupcoo_kernels_build_for_every_g_and_tuned_tile() {
        // What the GPU suite compiles, built on any machine: the rewrite,
        // lowering and printing of each candidate must succeed.
        let spec: GeneratorSpec = "powerlaw:rows=300,cols=200,nnz=2000,seed=3".parse().unwrap();
        let coo: Coo<f64, i64> = spec.generate().unwrap().canonicalize();
        let b = dense(200, SPMM_N, 7, Precision::F16);
        let einsum = spmm_einsum(300, 200, SPMM_N, Precision::F16).unwrap();
        for g in [1, 4, 32] {
            for tiles in tile_space(&format!("tile.q={g}"), &[("p", &[1, 16]), ("n", &[32, 128])]) {
                let built = build(&einsum, &coo, &b, &format!("groupcoo:dim=0,g={g}"), &tiles).unwrap();
                assert!(built.printed.source.contains("__global__"), "{tiles}");
                assert!(built.a_bytes > 0);
            }
        }
    }

    #[test]
    fn blockgroupcoo_kernels_use_tensor_cores() {
        let spec: GeneratorSpec = "blocks:rows=128,cols=128,bm=32,bk=32,density=0.3,seed=5".parse().unwrap();
        let coo: Coo<f64, i64> = spec.generate().unwrap().canonicalize();
        let b = dense(128, 64, 11, Precision::F16);
        let einsum = spmm_einsum(128, 128, 64, Precision::F16).unwrap();
        let format = "blockgroupcoo:bm=32,bk=32,dim=0,g=auto";
        for s in tile_space("tile.bi=32 tile.bj=32 tile.q=1", &[("p", &[1, 2]), ("n", &[32, 64])]) {
            let built = build(&einsum, &coo, &b, format, &s).unwrap();
            assert!(
                built
                    .printed
                    .dots
                    .iter()
                    .any(|d| matches!(d.path, spindle_cuda::DotPath::TensorCores { .. })),
                "{s}: {:?}",
                built.printed.dots
            );
        }
    }

    #[test]
    fn without_a_gpu_the_suites_say_so() {
        if spindle_cuda::runtime::available() {
            eprintln!("SKIPPED: a GPU is present; this test covers the no-GPU message");
            return;
        }
        let opts = GpuOptions {
            repeats: 1,
            json: false,
            record: None,
            matrices: vec!["karate".into()],
            precisions: vec![Precision::F32],
            autotune: false,
        };
        let err = format!("{:#}", spmm(&opts).unwrap_err());
        assert!(err.contains("need an NVIDIA GPU") && err.contains("no CUDA driver"), "{err}");
    }
}
