//! `spindle bench spmm --target cuda` and `spindle bench bsr`: arguments
//! and tables of the GPU suites in `spindle_bench::gpu`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use spindle_bench::gpu::{
    BSR_BLOCK, BSR_N, BSR_SIZE, BsrOptions, BsrReport, GpuSpmmOptions, GpuSpmmReport, SPMM_N,
};
use spindle_cuda::baseline::Precision;

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

/// `spindle bench bsr` options.
#[derive(Debug, clap::Args)]
pub struct BsrArgs {
    /// Where our kernels run (only cuda: the suite compares against
    /// cuSPARSE BSR and cuBLAS).
    #[arg(long, value_enum, default_value_t = BsrTarget::Cuda)]
    pub target: BsrTarget,
    /// Timed repetitions per measurement (the median is reported).
    #[arg(long, default_value_t = 20, value_parser = crate::repeats)]
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

/// The SpMM suite on the GPU: the report first, then an error when a check
/// failed.
pub fn spmm(args: &super::spmm::SpmmArgs) -> Result<()> {
    let precisions = if args.precisions.is_empty() {
        vec![Precision::F32, Precision::F16]
    } else {
        args.precisions.iter().map(|p| p.precision()).collect()
    };
    let opts = GpuSpmmOptions {
        repeats: args.repeats,
        matrices: args.matrices.clone(),
        precisions,
        autotune: !args.no_autotune,
    };
    let report = spindle_bench::gpu::spmm(&opts, &mut |line| eprintln!("{line}"))?;
    super::finish(&report, args.json, args.record.as_deref(), "spmm-cuda", print_spmm)?;
    if !report.failures.is_empty() {
        bail!("{} checks failed: {}", report.failures.len(), report.failures.join("; "));
    }
    Ok(())
}

/// The BSR suite on the GPU.
pub fn bsr(args: &BsrArgs) -> Result<()> {
    let BsrTarget::Cuda = args.target;
    let opts = BsrOptions { repeats: args.repeats, autotune: !args.no_autotune };
    let report = spindle_bench::gpu::bsr(&opts, &mut |line| eprintln!("{line}"))?;
    super::finish(&report, args.json, args.record.as_deref(), "bsr-cuda", print_bsr)?;
    if !report.failures.is_empty() {
        bail!("{} checks failed: {}", report.failures.len(), report.failures.join("; "));
    }
    Ok(())
}

fn num(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

fn print_spmm(report: &GpuSpmmReport) {
    println!(
        "SpMM on {} (N = {SPMM_N}), device copy {:.0} GB/s; ratios are cuSPARSE CSR time / ours (> 1: we are faster)",
        report.device.name, report.copy_gbs
    );
    println!(
        "{:<22} {:<4} {:>9} {:>10} {:>7} {:>10} {:>9} {:>7} {:>8} {:>10} {:>9}",
        "matrix",
        "type",
        "nnz",
        "cuSPARSE",
        "g auto",
        "ours auto",
        "ratio",
        "best g",
        "best",
        "user",
        "ratio"
    );
    for r in &report.results {
        let auto_ms = r.variants.iter().find(|v| v.auto == Some(true)).and_then(|v| v.median_ms);
        let cus = num(r.cusparse_csr.median_ms);
        let user_ms = r.user.median_ms();
        println!(
            "{:<22} {:<4} {:>9} {:>8.4}ms {:>7} {:>8.4}ms {:>8.2}x {:>7} {:>7.2}x {:>8.4}ms {:>8.2}x",
            r.matrix,
            r.precision,
            r.nnz,
            cus,
            r.g_auto,
            num(auto_ms),
            auto_ms.map_or(f64::NAN, |ms| cus / ms),
            r.best.as_ref().map_or_else(|| "-".into(), |b| b.g.to_string()),
            num(r.best.as_ref().and_then(|b| b.speedup_vs_cusparse_csr)),
            num(user_ms),
            user_ms.map_or(f64::NAN, |ms| cus / ms),
        );
    }
    println!("user: `spindle run` with --format A=csr and no schedule (the driver's autotuner)");
}

fn print_bsr(report: &BsrReport) {
    println!(
        "Block-sparse SpMM {BSR_SIZE}x{BSR_SIZE} ({BSR_BLOCK}x{BSR_BLOCK} blocks) x {BSR_SIZE}x{BSR_N}, f16, on {}; ratios are baseline time / ours",
        report.device.name
    );
    println!(
        "{:>9} {:>10} {:>12} {:>10} {:>12} {:>10} {:>8} {:>10}",
        "sparsity", "ours", "cuSPARSE BSR", "ratio", "cuBLAS", "ratio", "TFLOP/s", "user csr"
    );
    for r in &report.results {
        let ours = r.ours.as_ref();
        println!(
            "{:>8.0}% {:>8.4}ms {:>10.4}ms {:>9.2}x {:>10.4}ms {:>9.2}x {:>8.1} {:>8.4}ms",
            r.sparsity * 100.0,
            num(ours.map(|o| o.median_ms)),
            num(r.cusparse_bsr.as_ref().and_then(|b| b.median_ms)),
            num(r.speedup_vs_cusparse_bsr),
            num(r.cublas_dense.as_ref().and_then(|b| b.median_ms)),
            num(r.speedup_vs_cublas),
            num(ours.map(|o| o.tflops)),
            num(r.user.as_ref().and_then(|u| u.median_ms())),
        );
    }
}
