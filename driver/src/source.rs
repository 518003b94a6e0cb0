//! Kernels as text, without running them: the source a backend would
//! compile, and what NVRTC says of a CUDA kernel on an architecture. Neither
//! needs a GPU.

use spindle_cuda::nvrtc::{Arch, Resources};
use spindle_cuda::print::{DotReport, LaunchGeometry, PrintOptions, plan_text, print_kernel};
use spindle_ir::kernel::Kernel;
use spindle_ir::kernel::schedule::Schedule;

use crate::backend::SYMBOL;
use crate::error::Result;
use crate::target::Target;

/// The source `target` compiles for `kernel` lowered under `schedule`: C
/// for the C backend, CUDA C for a GPU and its emulation.
///
/// ```
/// use spindle::{ElemType, Input, Problem, Schedule, Target};
/// use spindle_formats::DType;
///
/// let f32 = ElemType::Value(DType::F32);
/// let schedule = Schedule::default();
/// let kernel = Problem::new("y[i] = A[i,j] * x[j]")
///     .tensor("A", Input::shape(&[8, 4], f32))
///     .tensor("x", Input::shape(&[4], f32))
///     .prepare()?
///     .lower(&schedule)?;
/// assert!(spindle::print(&kernel, &schedule, Target::C)?.contains("void spindle_kernel"));
/// assert!(spindle::print(&kernel, &schedule, Target::Cuda)?.contains("__global__"));
/// # Ok::<(), spindle::Error>(())
/// ```
pub fn print(kernel: &Kernel, schedule: &Schedule, target: Target) -> Result<String> {
    Ok(match target {
        Target::C => spindle_c::print::print(kernel, SYMBOL).map_err(spindle_c::exec::BackendError::from)?,
        Target::Cuda | Target::Emulate => print_kernel(kernel, SYMBOL, &PrintOptions::from(schedule))?.source,
    })
}

/// What the CUDA printer decides for `kernel` under `schedule`'s CUDA
/// items before it writes a line: the block size, which values are inlined
/// and which get a shared tile in which layout, which products run on
/// Tensor Cores (and why the others do not), where the accumulator lives.
///
/// ```
/// use spindle::{ElemType, Input, Problem, Schedule};
/// use spindle_formats::DType;
///
/// let f16 = ElemType::Value(DType::F16);
/// let schedule: Schedule = "tile.i=16 tile.j=16 tile.k=16".parse()?;
/// let kernel = Problem::new("C[i,j] += A[i,k] * B[k,j]")
///     .tensor("A", Input::shape(&[64, 64], f16))
///     .tensor("B", Input::shape(&[64, 64], f16))
///     .prepare()?
///     .lower(&schedule)?;
/// let plan = spindle::cuda_plan(&kernel, &schedule);
/// assert!(plan.contains("on Tensor Cores (f16)"), "{plan}");
/// # Ok::<(), spindle::Error>(())
/// ```
pub fn cuda_plan(kernel: &Kernel, schedule: &Schedule) -> String {
    plan_text(kernel, &PrintOptions::from(schedule))
}

/// The C source of a level-path kernel (`path=levels`).
pub fn print_levels(kernel: &spindle_ir::level::LevelKernel) -> Result<String> {
    Ok(spindle_c::level::print_level(kernel, SYMBOL).map_err(spindle_c::exec::BackendError::from)?)
}

/// The CUDA source of a level-path kernel: a warp per row.
pub fn print_levels_cuda(kernel: &spindle_ir::level::LevelKernel) -> Result<String> {
    Ok(spindle_cuda::print::levels::print_level(kernel, SYMBOL)?.source)
}

/// What compiling a kernel's CUDA for one architecture reports.
#[derive(Clone, Debug)]
pub struct CudaReport {
    pub arch: Arch,
    /// Grid, block and the bound on static shared memory.
    pub launch: LaunchGeometry,
    /// What ptxas reported, per function.
    pub resources: Vec<(String, Resources)>,
    /// How each `dot` is computed (Tensor Cores or CUDA cores).
    pub dots: Vec<DotReport>,
}

/// Prints `kernel` as CUDA (under `schedule`'s CUDA items) and compiles it
/// with NVRTC for `arch` (no GPU needed, only the toolchain `cargo xtask
/// test` installs).
pub fn cuda_report(kernel: &Kernel, schedule: &Schedule, arch: Arch) -> Result<CudaReport> {
    let printed = print_kernel(kernel, SYMBOL, &PrintOptions::from(schedule))?;
    let compiled =
        spindle_cuda::nvrtc::compile_spill_free(&printed.source, SYMBOL, arch, &Default::default())?;
    Ok(CudaReport {
        arch,
        launch: printed.launch,
        resources: compiled.resources.into_iter().collect(),
        dots: printed.dots,
    })
}

/// The machine code (SASS) of `kernel` compiled by NVRTC for `arch`, one
/// instruction a line with its byte offset, read by the toolchain's
/// `cuobjdump` (no GPU needed).
pub fn cuda_sass(kernel: &Kernel, schedule: &Schedule, arch: Arch) -> Result<String> {
    let printed = print_kernel(kernel, SYMBOL, &PrintOptions::from(schedule))?;
    let compiled =
        spindle_cuda::nvrtc::compile_spill_free(&printed.source, SYMBOL, arch, &Default::default())?;
    let toolchain = spindle_cuda::nvrtc::load()?;
    let sass = spindle_cuda::sass::disassemble(toolchain, &compiled.cubin, SYMBOL)?;
    let mut out = format!("// {SYMBOL} for {arch}: {} instructions\n", sass.instructions.len());
    for i in &sass.instructions {
        out += &format!("/*{:04x}*/ {}\n", i.offset, i.text);
    }
    Ok(out)
}
