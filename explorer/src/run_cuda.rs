//! `spindle run --target cuda`: the kernel printed as CUDA, compiled by
//! NVRTC for the GPU's arch, run and timed with CUDA events, and checked
//! against the reference evaluator.

use anyhow::{Context, Result, bail};
use spindle_cuda::runtime::{Gpu, TimingOptions};
use spindle_ir::kernel::Kernel;

use crate::einsum::{Prepared, RunArgs, emit_output};

/// The GPU, or an error that says why there is none and what runs instead.
pub fn open_gpu() -> Result<Gpu> {
    Gpu::open().context("`--target cuda` needs an NVIDIA GPU")
}

pub fn run(gpu: &Gpu, prepared: &Prepared, kernel: &Kernel, run: &RunArgs<'_>) -> Result<()> {
    if run.threads != 0 {
        bail!("--threads applies to --target c; a CUDA kernel's threads come from its schedule");
    }
    let printed = spindle_cuda::print::print_kernel(kernel, "spindle_kernel", &Default::default())?;
    let loaded = gpu.load(&printed)?;
    let out_name = prepared.einsum.output().name.clone();
    let result = gpu.run(kernel, &printed, &prepared.data)?;
    let timing =
        gpu.time(kernel, &loaded, &prepared.data, TimingOptions { warmup: 3, repeats: run.repeats.max(1) })?;
    let info = gpu.info();
    let resources = loaded
        .resources
        .map(|r| format!(", {} registers, {} spilled bytes", r.registers, r.spill_stores_bytes))
        .unwrap_or_default();
    eprintln!(
        "ran {out_name} on {} ({}): median {:.4} ms over {} runs, {} input set{} rotated; grid {} x block {}{resources} ({})",
        info.name,
        gpu.arch(),
        timing.median_ms,
        timing.runs,
        timing.input_sets,
        if timing.input_sets == 1 { "" } else { "s" },
        loaded.launch.grid,
        loaded.launch.block,
        if loaded.cache_hit { "cached CUBIN" } else { "compiled by NVRTC" },
    );
    if run.check {
        let want =
            spindle_ir::eval::evaluate(&prepared.einsum, &prepared.data).map_err(|d| prepared.report(&d))?;
        let err = crate::einsum::max_rel_error(&result, &want);
        println!("check: max relative error {err:.2e} against the reference evaluator");
        let tolerance = crate::einsum::tolerance(&prepared.einsum);
        if err > tolerance {
            bail!(
                "the GPU kernel's result differs from the reference evaluator (max relative error {err:.2e} > {tolerance:.0e})"
            );
        }
    }
    emit_output(&prepared.einsum, &result, run.out)
}
