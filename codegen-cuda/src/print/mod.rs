//! The CUDA printer: a kernel becomes one `extern "C" __global__` function
//! whose arguments are the kernel's tensors in order (`const T *` inputs,
//! `T *` output; `float`, `double`, `__half`, `__nv_bfloat16`, `int` or
//! `long long` elements).
//!
//! One thread block runs one program: the grid is the product of the
//! parallel axes' tile counts, decoded from `blockIdx.x` (the last parallel
//! axis fastest). The layout mirrors the C printer's: the program values
//! once, the loop over the reduced tiles with the loop values and the fold
//! into the accumulator, then the epilogue and the sink. Each value that is
//! not inlined is a `__shared__` tile filled cooperatively (thread `t`
//! takes elements `t`, `t + blockDim.x`, ...), with `__syncthreads()`
//! where a step reads what another wrote or overwrites what another read.
//!
//! - **Inlining.** Ranges, literals and index arithmetic on them are
//!   expressions of the element's coordinates. A load or arithmetic value
//!   used once, in its own phase, by a consumer that visits exactly its
//!   shape is computed inside that consumer. Anything read by a consumer of
//!   larger shape gets a tile, so a 1-D index tile like `E[r]` is loaded
//!   once per r-tile and read from shared memory wherever it broadcasts.
//! - **Tensor Cores.** A `dot` whose operands are f16 or bf16 (or f32, as
//!   tf32, when [`PrintOptions::tf32`] allows) and whose per-batch product
//!   is (M, K) x (K, N) with M and N multiples of 16 and K of the
//!   instruction's K runs on WMMA 16x16x16 (16x16x8 for tf32). Its operand
//!   tiles are laid out so that they already are row-major (M, K) and
//!   (K, N): the product's K axes last in `a` and first in `b`; fragments
//!   load straight from them, with no transposes or reshapes. A sum of the
//!   product over one more shared axis (BlockGroupCOO's in-group `q`) joins
//!   K. When the product is the accumulator's partial, the accumulator is
//!   WMMA fragments that live in registers across the loop. Other dots are
//!   FMA loops.
//! - **Accumulator.** Otherwise the accumulator is `acc[k]` in registers,
//!   thread `t` owning elements `t + k * blockDim.x`; the sink reads it
//!   there when it visits exactly the accumulator's elements.
//! - **Sink.** After the loop (for the accumulate strategy: one write per
//!   output element of the program), visiting the output's contiguous axis
//!   fastest. A plain read-modify-write when the sink is exclusive, else
//!   `atomicAdd` (float, double) or a compare-and-swap loop for max and
//!   min. A 16-bit output summed by atomics is summed in an f32 buffer and
//!   rounded once by a second kernel of the same source (`wide.rs`).
//!
//! Values are computed in `float` (`double` when a tensor is f64); f16 and
//! bf16 tensors are converted on load and store. Identifiers made from
//! tensor and index names go through [`namer`]. Shared arrays are static
//! up to [`MAX_STATIC_SHARED_BYTES`]; beyond, they are laid out in dynamic
//! shared memory (`SPINDLE_DYNAMIC_SHARED`, each array a reference into it)
//! up to [`MAX_DYNAMIC_SHARED_BYTES`]; a kernel that needs more is a
//! [`PrintError::SharedMemory`].
//!
//! The output is prepared by the caller before the launch, as for the C
//! backend ([`OutputInit`]).
//!
//! Values, addresses, functions, folds and literals are printed by the C
//! family's shared printer ([`spindle_c::dialect::Scope`]) in the CUDA
//! dialect (`dialect.rs`); the inline decision is the kernel IR's
//! ([`Uses::inline`]). The rest is split by job: `plan.rs` decides before a
//! line is written, `program.rs` prints the function and one program,
//! `loops.rs` the element loops and barriers, `matmul.rs` Tensor Core
//! products and `sink.rs` the write of the result.

mod dialect;
pub mod levels;
mod loops;
mod matmul;
pub use spindle_c::namer;
mod pattern;
mod plan;
mod program;
mod rows;
mod sink;
mod split;
mod walk;
mod wide;
pub use rows::STAGES;
pub use split::{RowSplit, SplitWork};
pub use wide::{
    ROUND_BLOCK, RoundKernel, device_kernel, device_level_kernel, widened_level_output, widened_output,
};

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt::Write as _;

use spindle_ir::formats::{DType, IType};
use spindle_ir::kernel::schedule::{Mapping, Schedule};
use spindle_ir::kernel::*;
use spindle_ir::lang::ElemType;

use dialect::Cuda;
pub use plan::Fragment;
use plan::{AccPlan, Matmul, Plan};
use spindle_c::dialect::{Scope, real_of};
use spindle_c::namer::Names;

/// The static shared memory a block may declare (CUDA's limit without
/// opting into dynamic shared memory).
pub const MAX_STATIC_SHARED_BYTES: usize = 48 * 1024;

/// The dynamic shared memory a block may opt into on every arch the
/// printer targets: 163 KB on sm_80 (227 KB on sm_90).
pub const MAX_DYNAMIC_SHARED_BYTES: usize = 163 * 1024;

/// Choices the kernel IR does not make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrintOptions {
    /// Run eligible `dot`s on Tensor Cores (WMMA).
    pub tensor_cores: bool,
    /// Allow f32 products on Tensor Cores as tf32 (10-bit mantissa).
    pub tf32: bool,
    /// Threads per block (a multiple of 32, at most 1024); by default the
    /// largest tile's element count, 32 to 256.
    pub threads: Option<u32>,
    /// How programs map onto threads: tiles (a block per program), the
    /// warp walk (`walk.rs`) or block rows (`rows.rs`).
    pub map: Mapping,
    /// L2 policies on the walks' B loads and C stores (`l2hints=on`).
    pub l2_hints: bool,
    /// Block rows split a row far above the average (`split=on`).
    pub split_rows: bool,
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions {
            tensor_cores: true,
            tf32: false,
            threads: None,
            map: Mapping::Tiles,
            l2_hints: false,
            split_rows: true,
        }
    }
}

impl From<&Schedule> for PrintOptions {
    /// The schedule's CUDA items (`tensorcores=`, `tf32=`, `block=`, `map=`,
    /// `l2hints=`, `split=`).
    fn from(s: &Schedule) -> PrintOptions {
        PrintOptions {
            tensor_cores: s.tensor_cores,
            tf32: s.tf32,
            threads: s.block,
            map: s.map,
            l2_hints: s.l2_hints,
            split_rows: s.split_rows,
        }
    }
}

/// How to launch a printed kernel: a 1-D grid of `grid` blocks of `block`
/// threads. Up to 48 KB the shared memory is static (nothing to pass at
/// launch) and `shared_bytes` bounds it from above (the arrays plus the
/// padding their alignment may need; ptxas reports the exact figure).
/// Beyond, it is `dynamic`: the launch passes `shared_bytes` and the
/// kernel's limit is raised to it first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchGeometry {
    pub grid: u32,
    pub block: u32,
    pub shared_bytes: usize,
    pub dynamic: bool,
}

/// How a `dot` is computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DotPath {
    /// WMMA: `batch` products of (m x k) by (k x n).
    TensorCores {
        fragment: Fragment,
        batch: usize,
        m: usize,
        n: usize,
        k: usize,
        /// The product accumulates into accumulator fragments.
        into_accumulator: bool,
    },
    /// FMA loops, and why.
    Fma { reason: String },
}

impl std::fmt::Display for DotPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DotPath::TensorCores { fragment, batch, m, n, k, into_accumulator } => write!(
                f,
                "Tensor Cores, {} {batch} x ({m}x{k} * {k}x{n}){}",
                fragment.name(),
                if *into_accumulator { ", into the accumulator fragments" } else { "" }
            ),
            DotPath::Fma { reason } => write!(f, "FMA ({reason})"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DotReport {
    pub dot: ValueId,
    pub path: DotPath,
}

/// A printed kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernel {
    /// The `extern "C"` name of the `__global__` function.
    pub symbol: String,
    pub source: String,
    pub launch: LaunchGeometry,
    /// Every `dot` of the kernel and how it is computed.
    pub dots: Vec<DotReport>,
    /// Where a 16-bit output is summed by atomics: the main kernel sums
    /// into an f32 buffer (its output parameter is `float *`) and this
    /// kernel, in the same source, rounds it into the output ([`wide`]).
    pub round: Option<RoundKernel>,
    /// The index tensor whose values the kernel needs in nondecreasing
    /// order (the warp-walk and block-row mappings' rows): the caller
    /// checks the data.
    pub sorted: Option<String>,
    /// The kernel writes every output element and never reads the output
    /// (the block-row mapping of an output that starts at zero): nothing
    /// needs zeroing before a launch.
    pub writes_output: bool,
    /// What a mapping other than tiles decided (the walks, block rows): the
    /// mapping, then its launch and what it needs, a line each; empty for
    /// the tile mapping, whose plan is [`plan_text`]'s.
    pub plan: Vec<String>,
    /// The block-row mapping's work list, built from the data at upload:
    /// the list, the partial sums and the counters are the parameters
    /// after the tensors ([`RowSplit`]).
    pub split: Option<RowSplit>,
    /// A level kernel's `max=` / `min=` counters in global memory
    /// ([`spindle_c::level::FillCounts`]): this many zeroed 64-bit
    /// counters, the parameter after the tensors. The kernel leaves them
    /// zero, so one allocation serves every launch.
    pub fill_counts: Option<usize>,
    /// The warp walk's carried rows ([`Carry`]): a scratch buffer, the
    /// parameter after the tensors, and a second kernel of the same
    /// source and parameters launched after this one.
    pub carry: Option<Carry>,
}

/// Where the warp walk (`map=walk`) writes an output that starts at zero
/// with no atomics and no zeroing: each run stores its own rows and the
/// empty rows after them, and puts its sums of a row shared with the
/// neighbouring runs in its two slots of a scratch buffer (`len` elements
/// of `dtype`, f32 or f64, nothing read before it is written); the kernel
/// `symbol`, launched after the walk with the same arguments and launch,
/// adds each shared row's slots in run order (so the result does not
/// depend on which run finished first) and stores the row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carry {
    pub symbol: String,
    pub len: usize,
    pub dtype: ElemType,
}

impl CudaKernel {
    /// A kernel with no `dot`s, no rounding kernel and no order it needs.
    pub(crate) fn plain(symbol: &str, source: String, launch: LaunchGeometry) -> CudaKernel {
        CudaKernel {
            symbol: symbol.to_string(),
            source,
            launch,
            dots: Vec::new(),
            round: None,
            sorted: None,
            writes_output: false,
            plan: Vec::new(),
            split: None,
            fill_counts: None,
            carry: None,
        }
    }
}

/// A kernel the printer cannot express.
#[derive(Debug, thiserror::Error)]
pub enum PrintError {
    #[error(
        "cannot print kernel `{kernel}` as CUDA: its shared tiles take {bytes} bytes per block, more than \
         the {limit} bytes of shared memory a block may have ({}); use smaller tiles",
        arrays_text(.arrays)
    )]
    SharedMemory {
        kernel: String,
        bytes: usize,
        limit: usize,
        /// Each shared array and its bytes, largest first.
        arrays: Vec<(String, usize)>,
    },
    #[error("`{symbol}` cannot name a CUDA kernel: use an identifier without `__` or a leading `_`")]
    Symbol { symbol: String },
    #[error("cannot print kernel `{kernel}` as CUDA: {programs} programs exceed a 1-D grid")]
    Grid { kernel: String, programs: u64 },
    #[error("{threads} threads per block: use a multiple of 32 up to 1024")]
    Threads { threads: u32 },
    #[error(
        "cannot print this kernel with map=walk: {reason} (the warp walk prints C[R[p],n] += V[p,q] * \
         B[K[p,q],n], GroupCOO and COO SpMM; use map=tiles)"
    )]
    Walk { kernel: String, reason: String },
    #[error(
        "cannot print this kernel with map=rows: {reason} (map=rows prints C[bm*R[p]+bi,n] += \
         V[p,q,bi,bj] * B[bk*K[p,q]+bj,n] on Tensor Cores, BlockGroupCOO or BCSR SpMM over block rows, and \
         C[R[p],n] += V[p,q] * B[K[p,q],n] by warps over whole rows, GroupCOO and COO SpMM; use map=tiles)"
    )]
    Rows { kernel: String, reason: String },
    #[error("the GPU's level path cannot print this kernel: {reason}")]
    Levels { kernel: String, reason: String },
}

fn arrays_text(arrays: &[(String, usize)]) -> String {
    let parts: Vec<String> = arrays.iter().map(|(n, b)| format!("{n}: {b} B")).collect();
    parts.join(", ")
}

/// The CUDA source of `kernel`, with its `__global__` function named
/// `symbol`, under the default options.
pub fn print(kernel: &Kernel, symbol: &str) -> Result<String, PrintError> {
    print_kernel(kernel, symbol, &PrintOptions::default()).map(|k| k.source)
}

/// The CUDA source of `kernel` with its launch geometry and how each `dot`
/// is computed.
pub fn print_kernel(kernel: &Kernel, symbol: &str, opts: &PrintOptions) -> Result<CudaKernel, PrintError> {
    if !namer::valid_symbol(symbol) {
        return Err(PrintError::Symbol { symbol: symbol.to_string() });
    }
    if let Some(t) = opts.threads
        && (t == 0 || !t.is_multiple_of(32) || t > 1024)
    {
        return Err(PrintError::Threads { threads: t });
    }
    let kernel = mapped(kernel, opts);
    let device = device_kernel(&kernel);
    let mut printed = match opts.map {
        Mapping::Walk => walk::print(&device, symbol, opts, false)?,
        Mapping::Rows if rows_mapping(&kernel) == Some(RowsMapping::Walk) => {
            walk::print(&device, symbol, opts, true)?
        }
        // Block rows, or why the kernel is neither.
        Mapping::Rows => match (rows::recognise(&device), walk::recognise(&device)) {
            (Err(blocks), Err(walk)) => {
                return Err(PrintError::Rows {
                    kernel: kernel.name.clone(),
                    reason: format!("not block rows ({blocks}), nor the row walk ({walk})"),
                });
            }
            _ => rows::print(&device, symbol, opts)?,
        },
        Mapping::Tiles => Printer::new(&device, opts).print(symbol)?,
    };
    if let Some((round, source)) = wide::round_kernel(&kernel, symbol) {
        printed.source.push_str(&source);
        printed.round = Some(round);
    }
    Ok(printed)
}

/// The kernel as `opts`' mapping runs it. Under `map=rows` (block rows,
/// or the row walk), and `map=walk` of an output that starts at zero (its
/// shared rows carried, [`Carry`]), one thread writes each output element,
/// so the sink is exclusive: no atomics, and a 16-bit output is not summed
/// in an f32 copy.
/// The printer, the runtime's buffers and the emulation all take the kernel
/// from here.
pub fn mapped<'k>(kernel: &'k Kernel, opts: &PrintOptions) -> Cow<'k, Kernel> {
    let owns = match opts.map {
        Mapping::Rows => rows_mapping(kernel).is_some(),
        // The warp walk of an output that starts at zero carries its
        // shared rows to a second kernel ([`Carry`]).
        Mapping::Walk => kernel.init == OutputInit::Zero && walk::recognise(&device_kernel(kernel)).is_ok(),
        Mapping::Tiles => false,
    };
    if kernel.sink.exclusive || !owns {
        return Cow::Borrowed(kernel);
    }
    let mut owned = kernel.clone();
    owned.sink.exclusive = true;
    Cow::Owned(owned)
}

/// What `map=rows` prints a kernel as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowsMapping {
    /// Block rows: BlockGroupCOO, a block's Tensor Core tiles over whole
    /// block rows.
    Blocks,
    /// The row walk: GroupCOO or COO, a warp's whole rows.
    Walk,
}

/// The one decision of `map=rows` (block rows first), or `None` where the
/// kernel is neither; [`mapped`] and [`print_kernel`] both ask it.
fn rows_mapping(kernel: &Kernel) -> Option<RowsMapping> {
    if rows::recognise(kernel).is_ok() {
        Some(RowsMapping::Blocks)
    } else {
        walk::recognise(&device_kernel(kernel)).is_ok().then_some(RowsMapping::Walk)
    }
}

/// The column index whose tile the block-row mapping (`map=rows`) makes
/// a block's columns (`n` of `C[bm*R[p]+bi,n]`; 32 to 256 of them print),
/// or why it does not print `kernel` (f32 operands need `tf32`).
pub fn rows_printable(kernel: &Kernel, tf32: bool) -> Result<String, String> {
    // As the printer takes it: the kernel as written, else the device's,
    // whose bf16 output is summed in an f32 copy (a fragment stores no bf16).
    let w =
        rows::recognise(kernel).or_else(|why| rows::recognise(&device_kernel(kernel)).map_err(|_| why))?;
    if w.operand == DType::F32 && !tf32 {
        return Err("f32 operands run on Tensor Cores as tf32: say tf32=on".into());
    }
    Ok(kernel.axis(w.columns).name.clone())
}

/// The axis the warp-walk mapping (`map=walk`) would walk (`p` of
/// `C[R[p],n]`), or why it does not print `kernel`.
pub fn walkable(kernel: &Kernel) -> Result<String, String> {
    let device = device_kernel(kernel);
    walk::recognise(&device).map(|w| device.axis(w.p).name.clone())
}

/// Whether `l2hints=on` changes the walks' kernel of `kernel`: where B's
/// rows are read in 16-byte vectors (else the hinted kernel is the plain
/// one, and a search need not time it twice).
pub fn l2_hints_apply(kernel: &Kernel) -> bool {
    let device = device_kernel(kernel);
    walk::recognise(&device).is_ok_and(|w| walk::sixteen_byte_rows(&device, &w))
}

/// The printer's plan for `kernel` under `opts`, as text (see
/// `Plan::describe`): what it decided before writing a line. The plan
/// needs no symbol and nothing here compiles.
pub fn plan_text(kernel: &Kernel, opts: &PrintOptions) -> String {
    let device = device_kernel(kernel);
    let (mut text, rounded) = match opts.map {
        Mapping::Tiles => (Plan::new(&device, opts).describe(&device), widened_output(kernel)),
        // The walks and block rows lay out the kernel as they print it
        // (the row walk and block rows write a 16-bit output directly).
        Mapping::Walk | Mapping::Rows => match print_kernel(kernel, "plan", opts) {
            Ok(printed) => (
                printed.plan.iter().map(|l| format!("{l}\n")).collect(),
                printed.round.as_ref().and(widened_output(kernel)),
            ),
            Err(e) => (format!("not printed: {e}\n"), None),
        },
    };
    if let Some(dtype) = rounded {
        let _ = writeln!(
            text,
            "output: summed in f32 by atomics, then rounded to {} by a second kernel",
            dtype.name()
        );
    }
    text
}

/// A shared array: a value's tile, or the accumulator's copy after the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Arr {
    Value(ValueId),
    Acc,
}

/// A step of the loop body: the arrays it reads and writes, and whether a
/// barrier precedes it.
type Step = (BTreeSet<Arr>, BTreeSet<Arr>, bool);

struct Printer<'k> {
    k: &'k Kernel,
    p: Plan,
    d: Cuda,
    names: Names,
    out: String,
    pending_reads: BTreeSet<Arr>,
    pending_writes: BTreeSet<Arr>,
    /// The steps inside the loop over reduced tiles: what each reads and
    /// writes, and whether a barrier precedes it.
    body: Option<Vec<Step>>,
}

impl<'k> Printer<'k> {
    fn new(k: &'k Kernel, opts: &PrintOptions) -> Self {
        let p = Plan::new(k, opts);
        let wide = k.tensors.values().any(|t| {
            t.dtype == ElemType::Index(IType::I64) || t.shape.iter().product::<usize>() > i32::MAX as usize
        });
        Printer {
            k,
            p,
            d: Cuda { real: real_of(k), wide },
            names: Names::new(k, "g_"),
            out: String::new(),
            pending_reads: BTreeSet::new(),
            pending_writes: BTreeSet::new(),
            body: None,
        }
    }

    fn line(&mut self, depth: usize, text: &str) {
        for l in text.lines() {
            let _ = writeln!(self.out, "{}{l}", "  ".repeat(depth));
        }
    }

    fn threads(&self) -> usize {
        self.p.threads as usize
    }

    fn tile(&self, a: AxisId) -> usize {
        self.k.axis(a).tile
    }

    fn elements(&self, shape: &[AxisId]) -> usize {
        self.k.tile_elements(&shape.to_vec())
    }

    // ---- values as expressions -------------------------------------------

    fn has_array(&self, id: ValueId) -> bool {
        !self.p.inline[id]
            && !self.p.absorbed[id]
            && !self.folds_into_acc(id)
            && !matches!(self.k.value(id).op, Op::Accumulator)
    }

    /// Whether `id` is the accumulator's partial and folds straight into
    /// it (a reduction of its kind, or a product on its fragments).
    fn folds_into_acc(&self, id: ValueId) -> bool {
        let Some(acc) = &self.k.accumulate else { return false };
        if acc.partial != id {
            return false;
        }
        if let Some(m) = self.p.root_of[id] {
            return self.p.matmuls[m].into_acc;
        }
        match self.k.value(id).op {
            Op::Dot { .. } => acc.reduction == Reduction::Sum,
            Op::Reduce { reduction, .. } => reduction == acc.reduction,
            _ => false,
        }
    }

    fn at(&self, name: &str, layout: &[AxisId]) -> String {
        let mut s = name.to_string();
        for &a in layout {
            let _ = write!(s, "[{}]", self.axis_var(a));
        }
        if layout.is_empty() {
            s.push_str("[0]");
        }
        s
    }

    /// The shared arrays reading `elem(id)` touches.
    fn reads(&self, id: ValueId, out: &mut BTreeSet<Arr>) {
        if self.p.inline[id] {
            for o in self.k.operands(id) {
                self.reads(o, out);
            }
        } else if matches!(self.k.value(id).op, Op::Accumulator) {
            if !self.p.sink_from_registers {
                out.insert(Arr::Acc);
            }
        } else {
            out.insert(Arr::Value(id));
        }
    }

    fn reads_of(&self, ids: &[ValueId]) -> BTreeSet<Arr> {
        let mut out = BTreeSet::new();
        for &id in ids {
            self.reads(id, &mut out);
        }
        out
    }
}

/// The CUDA type of a tensor argument's elements.
pub fn cuda_type(dtype: ElemType) -> &'static str {
    match dtype {
        ElemType::Value(DType::F64) => "double",
        ElemType::Value(DType::F32) => "float",
        ElemType::Value(DType::F16) => "__half",
        ElemType::Value(DType::Bf16) => "__nv_bfloat16",
        ElemType::Index(IType::I32) => "int",
        ElemType::Index(IType::I64) => "long long",
    }
}

impl Scope for Printer<'_> {
    type Dialect = Cuda;

    fn kernel(&self) -> &Kernel {
        self.k
    }

    fn dialect(&self) -> &Cuda {
        &self.d
    }

    fn names(&self) -> &Names {
        &self.names
    }

    fn inlined(&self, id: ValueId) -> bool {
        self.p.inline[id]
    }

    fn array(&self, id: ValueId) -> String {
        if matches!(self.k.value(id).op, Op::Accumulator) {
            return if self.p.sink_from_registers {
                "acc[k]".to_string()
            } else {
                self.at("acc_s", &self.p.acc_layout)
            };
        }
        self.at(&self.names.values[id], &self.p.layout[id])
    }
}
