//! The f32 accumulator of a 16-bit output summed by atomics.
//!
//! When programs collide on an f16 or bf16 output, every `atomicAdd` rounds
//! the running sum to 11 (8) significant bits, so a row with thousands of
//! contributions drifts by 1e-2 and more (seen on an H100: power-law SpMM
//! rows, 2026-11-25), and the result depends on the order the atomics land
//! in. Instead the kernel sums into an f32 copy of the output, and a second
//! kernel of the same source rounds that copy into the output once: the
//! error of one f16 rounding, whatever the row length. Exclusive sinks (one
//! write per element, already summed in f32 registers) and `max=` / `min=`
//! (exact in any type) keep the output's own type.
//!
//! The level path's warps fold terms into the output in global memory (a
//! row's positions one after another), so a 16-bit output of a level
//! kernel is held in f32 and rounded once, whatever the reduction, except
//! where each warp stores its rows whole from f32 registers.

use std::borrow::Cow;
use std::fmt::Write as _;

use spindle_ir::formats::DType;
use spindle_ir::kernel::{Kernel, Reduction};
use spindle_ir::lang::ElemType;
use spindle_ir::level::LevelKernel;

use super::cuda_type;
use super::dialect::Cuda;

/// Threads per block of the rounding kernel.
pub const ROUND_BLOCK: u32 = 256;

/// The second kernel of a source whose output is accumulated in f32: it
/// rounds the f32 accumulator (`len` elements) into the output's `dtype`.
/// Its arguments are `(const float *acc, T *out, long long len)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundKernel {
    pub symbol: String,
    pub dtype: ElemType,
    pub len: usize,
}

impl RoundKernel {
    /// Blocks of [`ROUND_BLOCK`] threads, one thread per element.
    pub fn grid(&self) -> u32 {
        self.len.div_ceil(ROUND_BLOCK as usize).max(1) as u32
    }
}

/// Whether `kernel`'s output is a 16-bit tensor that programs sum into
/// with atomics: its type, if so.
pub fn widened_output(kernel: &Kernel) -> Option<ElemType> {
    let sink = &kernel.sink;
    let t = kernel.tensor(sink.tensor);
    let sixteen = matches!(t.dtype, ElemType::Value(DType::F16 | DType::Bf16));
    (sixteen && !sink.exclusive && sink.reduction == Reduction::Sum).then_some(t.dtype)
}

/// The kernel as the device runs it: with an f32 output where
/// [`widened_output`] says so, else unchanged. The printer, the runtime's
/// buffers and the emulation all go through this one function.
pub fn device_kernel(kernel: &Kernel) -> Cow<'_, Kernel> {
    if widened_output(kernel).is_none() {
        return Cow::Borrowed(kernel);
    }
    let mut wide = kernel.clone();
    let out = wide.sink.tensor;
    wide.tensors[out].dtype = ElemType::Value(DType::F32);
    Cow::Owned(wide)
}

/// Whether `kernel`'s output is 16-bit, which the level path holds in f32
/// ([`device_level_kernel`]): its type, if so. Not where the warps store
/// their rows whole from f32 registers ([`spindle_c::level::Warps`]'s
/// `writes_output`): each element is then rounded once as it is stored.
pub fn widened_level_output(kernel: &LevelKernel) -> Option<ElemType> {
    let dtype = kernel.tensor(kernel.output).dtype;
    let sixteen = matches!(dtype, ElemType::Value(DType::F16 | DType::Bf16));
    let stored = || {
        let dialect = Cuda { real: "float", wide: true };
        spindle_c::level::print_level_warps(kernel, dialect).is_ok_and(|w| w.writes_output)
    };
    (sixteen && !stored()).then_some(dtype)
}

/// The level kernel as the device runs it: with an f32 output where
/// [`widened_level_output`] says so, else unchanged. The printer, the
/// runtime's buffers and the emulation all go through this one function.
pub fn device_level_kernel(kernel: &LevelKernel) -> Cow<'_, LevelKernel> {
    if widened_level_output(kernel).is_none() {
        return Cow::Borrowed(kernel);
    }
    let mut wide = kernel.clone();
    wide.tensors[kernel.output].dtype = ElemType::Value(DType::F32);
    Cow::Owned(wide)
}

/// The rounding kernel for `kernel`'s output, if it is widened, and its
/// source (appended to the main kernel's).
pub(super) fn round_kernel(kernel: &Kernel, symbol: &str) -> Option<(RoundKernel, String)> {
    let dtype = widened_output(kernel)?;
    Some(rounding(dtype, kernel.tensor(kernel.sink.tensor).shape.iter().product(), symbol))
}

/// The rounding kernel of a level kernel's 16-bit output and its source.
pub(super) fn round_level_kernel(kernel: &LevelKernel, symbol: &str) -> Option<(RoundKernel, String)> {
    let dtype = widened_level_output(kernel)?;
    Some(rounding(dtype, kernel.tensor(kernel.output).shape.iter().product(), symbol))
}

/// The kernel `{symbol}_round` that rounds `len` f32 elements into `dtype`,
/// and its source.
fn rounding(dtype: ElemType, len: usize, symbol: &str) -> (RoundKernel, String) {
    let round = RoundKernel { symbol: format!("{symbol}_round"), dtype, len };
    let ty = cuda_type(dtype);
    // Both round to nearest, ties to even.
    let convert = match dtype {
        ElemType::Value(DType::Bf16) => "__float2bfloat16",
        _ => "__float2half",
    };
    let mut src = String::new();
    let _ = writeln!(src, "\n// The output was held in f32 (`acc`); one rounding into its own type.");
    src.push_str("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n");
    let _ = writeln!(
        src,
        "extern \"C\" __global__ void __launch_bounds__({ROUND_BLOCK}) {}(const float *__restrict__ acc, \
         {ty} *__restrict__ out, long long len) {{",
        round.symbol
    );
    src.push_str("  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n");
    let _ = writeln!(src, "  if (i < len) out[i] = {convert}(acc[i]);");
    src.push_str("}\n");
    (round, src)
}
