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
//!   `atomicAdd` (float, double, `__half`, `__nv_bfloat16`) or a
//!   compare-and-swap loop for max and min.
//!
//! Values are computed in `float` (`double` when a tensor is f64); f16 and
//! bf16 tensors are converted on load and store. Identifiers made from
//! tensor and index names go through [`namer`]. Static shared memory is
//! limited to [`MAX_STATIC_SHARED_BYTES`]; a kernel that needs more is a
//! [`PrintError::SharedMemory`].
//!
//! The output is prepared by the caller before the launch, as for the C
//! backend ([`OutputInit`]).

mod dialect;
pub use spindle_c::namer;
mod plan;

use std::collections::BTreeSet;
use std::fmt::Write as _;

use spindle_ir::formats::{DType, IType};
use spindle_ir::kernel::schedule::Schedule;
use spindle_ir::kernel::*;
use spindle_ir::lang::ElemType;

use dialect::Cuda;
pub use plan::Fragment;
use plan::{AccPlan, Matmul, Plan};
use spindle_c::dialect::{Dialect, Scope, real_of};
use spindle_c::namer::Names;

/// The static shared memory a block may declare (CUDA's limit without
/// opting into dynamic shared memory).
pub const MAX_STATIC_SHARED_BYTES: usize = 48 * 1024;

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
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions { tensor_cores: true, tf32: false, threads: None }
    }
}

impl From<&Schedule> for PrintOptions {
    /// The schedule's CUDA items (`tensorcores=`, `tf32=`, `block=`).
    fn from(s: &Schedule) -> PrintOptions {
        PrintOptions { tensor_cores: s.tensor_cores, tf32: s.tf32, threads: s.block }
    }
}

/// How to launch a printed kernel: a 1-D grid of `grid` blocks of `block`
/// threads. The shared memory is static (nothing to pass at launch);
/// `shared_bytes` bounds it from above (the arrays plus the padding their
/// alignment may need; ptxas reports the exact figure).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchGeometry {
    pub grid: u32,
    pub block: u32,
    pub shared_bytes: usize,
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
}

/// A kernel the printer cannot express.
#[derive(Debug, thiserror::Error)]
pub enum PrintError {
    #[error(
        "cannot print kernel `{kernel}` as CUDA: its shared tiles take {bytes} bytes per block, more than \
         the {limit} bytes of static shared memory ({}); use smaller tiles",
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
    Printer::new(kernel, opts).print(symbol)
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

    // ---- barriers --------------------------------------------------------

    /// Accounts for a step that reads and writes these shared arrays,
    /// emitting `__syncthreads()` first when it reads what was written, or
    /// writes what was read or written, since the last barrier.
    fn step(&mut self, depth: usize, reads: BTreeSet<Arr>, writes: BTreeSet<Arr>) {
        let hazard = reads.iter().any(|r| self.pending_writes.contains(r))
            || writes.iter().any(|w| self.pending_writes.contains(w) || self.pending_reads.contains(w));
        if hazard {
            self.barrier(depth);
        }
        if let Some(body) = &mut self.body {
            body.push((reads.clone(), writes.clone(), hazard));
        }
        self.pending_reads.extend(reads);
        self.pending_writes.extend(writes);
    }

    fn barrier(&mut self, depth: usize) {
        self.line(depth, "__syncthreads();");
        self.pending_reads.clear();
        self.pending_writes.clear();
    }

    // ---- loops over elements ---------------------------------------------

    /// Opens a block in which each thread visits its elements of a tile of
    /// `n` elements, bound to `e`; returns the depth inside.
    fn open_elements(&mut self, depth: usize, n: usize) -> usize {
        let t = self.threads();
        if n == t {
            self.line(depth, "{");
            self.line(depth + 1, "const unsigned e = threadIdx.x;");
        } else if n < t {
            self.line(depth, &format!("if (threadIdx.x < {n}) {{"));
            self.line(depth + 1, "const unsigned e = threadIdx.x;");
        } else if n.is_multiple_of(t) {
            if n / t <= 16 {
                self.line(depth, "#pragma unroll");
            }
            self.line(depth, &format!("for (unsigned k = 0; k < {}; k++) {{", n / t));
            self.line(depth + 1, &format!("const unsigned e = threadIdx.x + k * {t};"));
        } else {
            self.line(depth, &format!("for (unsigned e = threadIdx.x; e < {n}; e += {t}) {{"));
        }
        depth + 1
    }

    /// Opens the loop over the accumulator elements a thread owns: `acc[k]`
    /// is element `e`.
    fn open_owned(&mut self, depth: usize, n: usize) -> usize {
        let t = self.threads();
        let per = n.div_ceil(t);
        if per == 1 {
            self.line(depth, "{");
            self.line(depth + 1, "const int k = 0;");
        } else {
            self.line(depth, "#pragma unroll");
            self.line(depth, &format!("for (int k = 0; k < {per}; k++) {{"));
        }
        if per == 1 {
            self.line(depth + 1, "const unsigned e = threadIdx.x;");
        } else {
            self.line(depth + 1, &format!("const unsigned e = threadIdx.x + k * {t};"));
        }
        if n.is_multiple_of(t) {
            depth + 1
        } else {
            self.line(depth + 1, &format!("if (e < {n}) {{"));
            depth + 2
        }
    }

    fn close_owned(&mut self, inner: usize, depth: usize) {
        self.close(inner, depth);
    }

    fn close(&mut self, from: usize, to: usize) {
        for d in (to..from).rev() {
            self.line(d, "}");
        }
    }

    /// Binds the coordinates `i_a` of an element `e` of a tile visited in
    /// `order` (last fastest).
    fn decode(&mut self, depth: usize, order: &[AxisId]) {
        let mut stride = 1;
        let mut lines = Vec::new();
        for (pos, &a) in order.iter().enumerate().rev() {
            let tile = self.tile(a);
            let i = self.axis_var(a);
            let text = if tile == 1 {
                format!("const int {i} = 0;")
            } else {
                let div = if stride == 1 { "e".to_string() } else { format!("e / {stride}") };
                if pos == 0 || order[..pos].iter().all(|&b| self.tile(b) == 1) {
                    format!("const int {i} = {div};")
                } else {
                    format!("const int {i} = {div} % {tile};")
                }
            };
            lines.push(text);
            stride *= tile;
        }
        lines.reverse();
        for l in lines {
            self.line(depth, &l);
        }
    }

    /// The order a value's fill visits its elements: the order of the
    /// tensor its (first) load reads, contiguous axis last.
    fn fill_order(&self, id: ValueId) -> Vec<AxisId> {
        fn driving_load(p: &Printer, id: ValueId) -> Option<ValueId> {
            if let Op::Load { .. } = p.k.value(id).op {
                return Some(id);
            }
            p.k.operands(id)
                .filter(|&o| p.p.inline[o] && p.k.value(o).scalar == Scalar::Float)
                .find_map(|o| driving_load(p, o))
        }
        let shape = &self.k.value(id).shape;
        match driving_load(self, id).map(|l| &self.k.value(l).op) {
            Some(Op::Load { index, .. }) => plan::contiguous_order(self.k, shape, index.last().copied()),
            _ => self.p.layout[id].clone(),
        }
    }

    // ---- printing ---------------------------------------------------------

    fn print(mut self, symbol: &str) -> Result<CudaKernel, PrintError> {
        let k = self.k;
        let programs: u64 = k.parallel_axes().iter().map(|&a| k.axis(a).tiles() as u64).product();
        if programs > i32::MAX as u64 {
            return Err(PrintError::Grid { kernel: k.name.clone(), programs });
        }
        let arrays = self.shared_arrays();
        let bytes: usize = arrays.iter().map(|(_, _, b)| b).sum();
        if bytes > MAX_STATIC_SHARED_BYTES {
            let mut list: Vec<(String, usize)> = arrays.iter().map(|(n, _, b)| (n.clone(), *b)).collect();
            list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            return Err(PrintError::SharedMemory {
                kernel: k.name.clone(),
                bytes,
                limit: MAX_STATIC_SHARED_BYTES,
                arrays: list,
            });
        }
        let launch =
            LaunchGeometry { grid: programs.max(1) as u32, block: self.p.threads, shared_bytes: bytes };
        let dots = self.dot_reports();

        self.line(0, &format!("// Spindle kernel `{}`, generated: do not edit.", k.name));
        for line in format!("{k}").lines() {
            self.line(0, &format!("// {line}"));
        }
        self.line(
            0,
            &format!(
                "// launch: grid {}, block {}, static shared memory {} bytes",
                launch.grid, launch.block, launch.shared_bytes
            ),
        );
        for d in &dots {
            let text = match &d.path {
                DotPath::TensorCores { fragment, batch, m, n, k: kk, into_accumulator } => format!(
                    "// dot {}: Tensor Cores, {} {batch} x ({m}x{kk} * {kk}x{n}){}",
                    d.dot,
                    fragment.name(),
                    if *into_accumulator { ", into the accumulator fragments" } else { "" }
                ),
                DotPath::Fma { reason } => format!("// dot {}: FMA ({reason})", d.dot),
            };
            self.line(0, &text);
        }
        let halves = k.tensors.values().any(|t| matches!(t.dtype, ElemType::Value(DType::F16 | DType::Bf16)));
        if halves || !self.p.matmuls.is_empty() {
            self.line(0, "#include <cuda_fp16.h>");
            self.line(0, "#include <cuda_bf16.h>");
        }
        if !self.p.matmuls.is_empty() {
            self.line(0, "#include <mma.h>");
            self.line(0, "namespace wmma = nvcuda::wmma;");
        }
        self.line(0, "");
        self.atomic_helpers();

        let params: Vec<String> = k
            .tensors
            .iter()
            .map(|(id, t)| {
                let ty = cuda_type(t.dtype);
                let constness = if t.output { "" } else { "const " };
                format!("{constness}{ty} *__restrict__ {}", self.names.tensors[id])
            })
            .collect();
        self.line(
            0,
            &format!("extern \"C\" __global__ void __launch_bounds__({}) {symbol}(", self.p.threads),
        );
        let n = params.len();
        for (i, p) in params.into_iter().enumerate() {
            let end = if i + 1 == n { ") {" } else { "," };
            self.line(2, &format!("{p}{end}"));
        }
        if n == 0 {
            self.line(2, ") {");
        }
        for (name, decl, _) in &arrays {
            let _ = name;
            self.line(1, decl);
        }
        if !self.p.matmuls.is_empty() {
            self.line(1, "const int warp = threadIdx.x / 32;");
        }
        // The program's tile of each parallel axis, last fastest.
        let parallel = k.parallel_axes();
        if !parallel.is_empty() {
            self.line(1, "unsigned pid = blockIdx.x;");
            for (pos, &a) in parallel.iter().enumerate().rev() {
                let t = self.tile_var(a);
                if pos == 0 {
                    self.line(1, &format!("const int {t} = pid;"));
                } else if k.axis(a).tiles() == 1 {
                    self.line(1, &format!("const int {t} = 0;"));
                } else {
                    let tiles = k.axis(a).tiles();
                    self.line(1, &format!("const int {t} = pid % {tiles};"));
                    self.line(1, &format!("pid /= {tiles};"));
                }
            }
        }
        self.program(1);
        self.line(0, "}");
        Ok(CudaKernel { symbol: symbol.to_string(), source: self.out, launch, dots })
    }

    fn dot_reports(&self) -> Vec<DotReport> {
        let k = self.k;
        let mut out = Vec::new();
        for &id in &k.order {
            if !matches!(k.value(id).op, Op::Dot { .. }) {
                continue;
            }
            let path = if let Some(mm) = self.p.matmuls.iter().find(|m| m.dot == id) {
                let (batch, m, n, kk) = mm.dims(k);
                DotPath::TensorCores {
                    fragment: mm.fragment,
                    batch,
                    m,
                    n,
                    k: kk,
                    into_accumulator: mm.into_acc,
                }
            } else {
                let reason = self.p.fallbacks.iter().find(|(d, _)| *d == id).map(|(_, r)| r.clone());
                DotPath::Fma { reason: reason.unwrap_or_default() }
            };
            out.push(DotReport { dot: id, path });
        }
        out
    }

    /// Every `__shared__` array: (name, declaration, bytes).
    fn shared_arrays(&self) -> Vec<(String, String, usize)> {
        let k = self.k;
        let mut out = Vec::new();
        for &id in &k.order {
            if !self.has_array(id) {
                continue;
            }
            let v = k.value(id);
            let (ty, size, align) = if let Some(stage) = &self.p.stage[id] {
                (stage.fragment.storage(), stage.fragment.bytes(), true)
            } else if self.p.root_of[id].is_some() {
                ("float", 4, true)
            } else {
                match v.scalar {
                    Scalar::Float => (self.d.real, if self.d.real == "double" { 8 } else { 4 }, false),
                    Scalar::Int => (self.d.int_type(), if self.d.wide { 8 } else { 4 }, false),
                    Scalar::Bool => ("bool", 1, false),
                }
            };
            let name = self.names.values[id].clone();
            out.push(self.declaration(&name, ty, size, align, &self.p.layout[id]));
        }
        let acc_copy = match self.p.acc {
            AccPlan::Fragments(_) => true,
            AccPlan::Registers => !self.p.sink_from_registers,
            AccPlan::None => false,
        };
        if acc_copy {
            let fragments = matches!(self.p.acc, AccPlan::Fragments(_));
            let (ty, size) = if fragments || self.d.real == "float" { ("float", 4) } else { ("double", 8) };
            out.push(self.declaration("acc_s", ty, size, fragments, &self.p.acc_layout));
        }
        out
    }

    fn declaration(
        &self,
        name: &str,
        ty: &str,
        size: usize,
        align: bool,
        layout: &[AxisId],
    ) -> (String, String, usize) {
        let dims: String = if layout.is_empty() {
            "[1]".to_string()
        } else {
            layout.iter().map(|&a| format!("[{}]", self.tile(a))).collect()
        };
        let n = self.elements(layout).max(1);
        // An upper bound whatever order ptxas places the arrays in: each
        // may need padding up to its alignment (32 bytes for WMMA tiles).
        let bytes = n * size + if align { 31 } else { size - 1 };
        let align = if align { "__align__(32) " } else { "" };
        (name.to_string(), format!("__shared__ {align}{ty} {name}{dims};"), bytes)
    }

    /// One program: its values, the loop over reduced tiles, the sink.
    fn program(&mut self, depth: usize) {
        let k = self.k;
        let in_phase = |p: &Printer, phase: Phase| -> Vec<ValueId> {
            k.order.iter().copied().filter(|&id| p.p.uses.phases[id] == phase).collect()
        };
        for id in in_phase(self, Phase::Program) {
            self.emit(depth, id);
        }
        let reduced = k.reduced_axes();
        // The accumulator.
        match self.p.acc {
            AccPlan::None => {}
            AccPlan::Registers => {
                let acc = k.accumulate.as_ref().expect("an accumulator");
                let n = self.elements(&acc.shape);
                let per = n.div_ceil(self.threads());
                let identity = self.d.float(acc.reduction.identity());
                self.line(depth, &format!("{} acc[{per}];", self.d.real));
                self.line(depth, "#pragma unroll");
                self.line(depth, &format!("for (int k = 0; k < {per}; k++) acc[k] = {identity};"));
            }
            AccPlan::Fragments(m) => {
                let mm = self.p.matmuls[m].clone();
                let per = self.fragments_per_warp(&mm);
                let ks = mm.fragment.k_step();
                self.line(
                    depth,
                    &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, float> acc_f[{per}];"),
                );
                self.line(depth, "#pragma unroll");
                self.line(
                    depth,
                    &format!("for (int j = 0; j < {per}; j++) wmma::fill_fragment(acc_f[j], 0.0f);"),
                );
            }
        }
        if !reduced.is_empty() {
            let before = (self.pending_reads.clone(), self.pending_writes.clone());
            self.body = Some(Vec::new());
            let mut d = depth;
            for &r in &reduced {
                let (t, tiles) = (self.tile_var(r), k.axis(r).tiles());
                self.line(d, &format!("for (int {t} = 0; {t} < {tiles}; {t}++) {{"));
                d += 1;
            }
            for id in in_phase(self, Phase::Loop) {
                self.emit(d, id);
            }
            if let Some(acc) = k.accumulate.as_ref().filter(|a| !self.folds_into_acc(a.partial)) {
                let (partial, reduction, shape) = (acc.partial, acc.reduction, acc.shape.clone());
                let reads = self.reads_of(&[partial]);
                self.step(d, reads, BTreeSet::new());
                let n = self.elements(&shape);
                let inner = self.open_owned(d, n);
                let layout = self.p.acc_layout.clone();
                self.decode(inner, &layout);
                let update = self.d.fold(reduction, "acc[k]", &self.elem(partial));
                self.line(inner, &update);
                self.close_owned(inner, d);
            }
            if self.p.uses.sink_phase == Phase::Loop {
                self.sink(d);
            }
            // The next iteration starts from this one's pending accesses: a
            // barrier at the end of the body when one of its steps before
            // its first barrier would conflict with them.
            let body = self.body.take().unwrap_or_default();
            let trips: usize = reduced.iter().map(|&r| k.axis(r).tiles()).product();
            let (mut reads, mut writes) = (self.pending_reads.clone(), self.pending_writes.clone());
            let mut hazard = false;
            for (r, w, barrier_before) in body {
                if barrier_before {
                    break;
                }
                if r.iter().any(|a| writes.contains(a))
                    || w.iter().any(|a| writes.contains(a) || reads.contains(a))
                {
                    hazard = true;
                    break;
                }
                reads.extend(r);
                writes.extend(w);
            }
            if hazard && trips > 1 {
                self.barrier(d);
            }
            for &r in reduced.iter().rev() {
                d -= 1;
                self.line(d, &format!("}} // loop {}", k.axis(r).name));
            }
            if trips == 0 {
                self.pending_reads.extend(before.0);
                self.pending_writes.extend(before.1);
            }
        }
        // The accumulator's copy for the epilogue.
        match self.p.acc {
            AccPlan::Registers if !self.p.sink_from_registers => {
                let acc = k.accumulate.as_ref().expect("an accumulator");
                let n = self.elements(&acc.shape);
                self.step(depth, BTreeSet::new(), BTreeSet::from([Arr::Acc]));
                let inner = self.open_owned(depth, n);
                let layout = self.p.acc_layout.clone();
                self.decode(inner, &layout);
                let target = self.at("acc_s", &layout);
                self.line(inner, &format!("{target} = acc[k];"));
                self.close_owned(inner, depth);
            }
            AccPlan::Fragments(m) => {
                let mm = self.p.matmuls[m].clone();
                self.step(depth, BTreeSet::new(), BTreeSet::from([Arr::Acc]));
                self.for_fragments(depth, &mm, |p, d, mm| {
                    let dst = p.root_pointer("acc_s", &p.p.acc_layout.clone(), mm);
                    let (_, _, n, _) = mm.dims(p.k);
                    p.line(
                        d,
                        &format!("wmma::store_matrix_sync({dst}, acc_f[j], {n}, wmma::mem_row_major);"),
                    );
                });
            }
            _ => {}
        }
        for id in in_phase(self, Phase::Epilogue) {
            self.emit(depth, id);
        }
        if self.p.uses.sink_phase != Phase::Loop {
            self.sink(depth);
        }
    }

    /// Emits a value: its tile and what fills it.
    fn emit(&mut self, depth: usize, id: ValueId) {
        if self.p.inline[id] || self.p.absorbed[id] || matches!(self.k.value(id).op, Op::Accumulator) {
            return;
        }
        if let Some(m) = self.p.root_of[id] {
            let mm = self.p.matmuls[m].clone();
            self.matmul(depth, &mm);
            return;
        }
        let value = self.k.value(id).clone();
        if let Some(chain) = self.p.chain[id].clone() {
            let mut ids = chain.factors.clone();
            ids.extend(chain.axes.iter().filter_map(|(_, m)| *m));
            let reads = self.reads_of(&ids);
            if self.folds_into_acc(id) {
                let acc = self.k.accumulate.as_ref().expect("an accumulator");
                let shape = acc.shape.clone();
                self.step(depth, reads, BTreeSet::new());
                let n = self.elements(&shape);
                let inner = self.open_owned(depth, n);
                let layout = self.p.acc_layout.clone();
                self.decode(inner, &layout);
                self.reduce_loop(inner, &chain, "acc[k]");
                self.close_owned(inner, depth);
            } else {
                self.step(depth, reads, BTreeSet::from([Arr::Value(id)]));
                let n = self.elements(&value.shape);
                let inner = self.open_elements(depth, n);
                let layout = self.p.layout[id].clone();
                self.decode(inner, &layout);
                let identity = self.d.float(chain.reduction.identity());
                self.line(inner, &format!("{} s = {identity};", self.d.real));
                self.reduce_loop(inner, &chain, "s");
                let target = self.array(id);
                self.line(inner, &format!("{target} = s;"));
                self.close(inner, depth);
            }
            return;
        }
        let mut reads = self.reads_of(&self.k.operands(id).collect::<Vec<_>>());
        if let Some(stage) = &self.p.stage[id] {
            reads.extend(self.reads_of(&stage.masks));
        }
        self.step(depth, reads, BTreeSet::from([Arr::Value(id)]));
        let n = self.elements(&value.shape);
        let inner = self.open_elements(depth, n);
        let order = self.fill_order(id);
        self.decode(inner, &order);
        let text = match &self.p.stage[id] {
            Some(stage) => self.staged(id, stage),
            None => self.expr(id),
        };
        let target = self.array(id);
        self.line(inner, &format!("{target} = {text};"));
        self.close(inner, depth);
    }

    /// An operand element of a Tensor Core product in its fragment type,
    /// masked by the product's masks.
    fn staged(&self, id: ValueId, stage: &plan::Stage) -> String {
        let f = stage.fragment;
        let zero = match f {
            plan::Fragment::Half => "__float2half(0.0f)",
            plan::Fragment::Bf16 => "__float2bfloat16(0.0f)",
            plan::Fragment::Tf32 => "0.0f",
        };
        let v = self.k.value(id);
        let raw = match &v.op {
            Op::Load { tensor, index, mask } => {
                let same = matches!(
                    (f, self.k.tensor(*tensor).dtype),
                    (plan::Fragment::Half, ElemType::Value(DType::F16))
                        | (plan::Fragment::Bf16, ElemType::Value(DType::Bf16))
                        | (plan::Fragment::Tf32, ElemType::Value(DType::F32))
                );
                same.then(|| {
                    let read = format!("{}[{}]", self.names.tensors[*tensor], self.address(*tensor, index));
                    match mask {
                        None => read,
                        Some(m) => format!("({} ? {read} : {zero})", self.elem(*m)),
                    }
                })
            }
            _ => None,
        };
        let inner = raw.unwrap_or_else(|| {
            let x = self.expr(id);
            match f {
                plan::Fragment::Half => format!("__float2half({x})"),
                plan::Fragment::Bf16 => format!("__float2bfloat16({x})"),
                plan::Fragment::Tf32 => format!("(float)({x})"),
            }
        });
        if stage.masks.is_empty() {
            return inner;
        }
        let masks: Vec<String> = stage.masks.iter().map(|&m| self.elem(m)).collect();
        format!("({} ? {inner} : {zero})", masks.join(" && "))
    }

    /// `target = fold over the chain's axes of (product of its factors)`,
    /// where its masks hold.
    fn reduce_loop(&mut self, depth: usize, chain: &plan::Chain, target: &str) {
        let mut d = depth;
        for &(axis, _) in &chain.axes {
            let i = self.axis_var(axis);
            let tile = self.tile(axis);
            if tile == 1 {
                self.line(d, "{");
                self.line(d + 1, &format!("const int {i} = 0;"));
            } else {
                if tile <= 32 {
                    self.line(d, "#pragma unroll");
                }
                self.line(d, &format!("for (int {i} = 0; {i} < {tile}; {i}++) {{"));
            }
            d += 1;
        }
        let term: Vec<String> = chain.factors.iter().map(|&f| self.elem(f)).collect();
        let update = self.d.fold(chain.reduction, target, &term.join(" * "));
        let masks: Vec<String> = chain.axes.iter().filter_map(|(_, m)| m.map(|m| self.elem(m))).collect();
        let text = if masks.is_empty() { update } else { format!("if ({}) {update}", masks.join(" && ")) };
        self.line(d, &text);
        self.close(d, depth);
    }

    fn fragments_per_warp(&self, mm: &Matmul) -> usize {
        mm.items(self.k).div_ceil(self.threads() / 32)
    }

    /// Runs `body` once per output fragment of the accumulator this warp
    /// owns (`acc_f[j]`, item `it`), with `bt`, `mt`, `nt` bound.
    fn for_fragments(&mut self, depth: usize, mm: &Matmul, body: impl Fn(&mut Self, usize, &Matmul)) {
        let warps = self.threads() / 32;
        let items = mm.items(self.k);
        let per = self.fragments_per_warp(mm);
        self.line(depth, "#pragma unroll");
        self.line(depth, &format!("for (int j = 0; j < {per}; j++) {{"));
        self.line(depth + 1, &format!("const int it = warp + j * {warps};"));
        let d = if items.is_multiple_of(warps) {
            depth + 1
        } else {
            self.line(depth + 1, &format!("if (it < {items}) {{"));
            depth + 2
        };
        self.decode_item(d, mm);
        body(self, d, mm);
        self.close(d, depth);
    }

    /// Binds the batch element and the fragment's row and column tile of
    /// item `it`.
    fn decode_item(&mut self, depth: usize, mm: &Matmul) {
        let (batch, m, n, _) = mm.dims(self.k);
        let (mt, nt) = (m / 16, n / 16);
        if batch > 1 {
            self.line(depth, &format!("const int bt = it / {};", mt * nt));
        }
        let (mt_text, nt_text) = match (mt, nt) {
            (1, 1) => ("0".to_string(), "0".to_string()),
            (1, _) => ("0".to_string(), format!("it % {nt}")),
            (_, 1) => (format!("it % {mt}"), "0".to_string()),
            _ => (format!("it / {nt} % {mt}"), format!("it % {nt}")),
        };
        self.line(depth, &format!("const int mt = {mt_text};"));
        self.line(depth, &format!("const int nt = {nt_text};"));
    }

    fn base(&self, name: &str, layout: &[AxisId]) -> String {
        let zeros: String = if layout.is_empty() { "[0]".to_string() } else { "[0]".repeat(layout.len()) };
        format!("&{name}{zeros}")
    }

    /// The pointer to the current output fragment in a [batch, m, n] tile.
    fn root_pointer(&self, name: &str, layout: &[AxisId], mm: &Matmul) -> String {
        let (batch, m, n, _) = mm.dims(self.k);
        let mut s = self.base(name, layout);
        if batch > 1 {
            let _ = write!(s, " + bt * {}", m * n);
        }
        let _ = write!(s, " + mt * {} + nt * 16", 16 * n);
        s
    }

    /// The multiply-accumulate of one output fragment `c` over K.
    fn mma_k(&mut self, depth: usize, mm: &Matmul, c: &str) {
        let (batch, m, n, kk) = mm.dims(self.k);
        let f = mm.fragment;
        let ks = f.k_step();
        let (an, bn) = (self.names.values[mm.a].clone(), self.names.values[mm.b].clone());
        let a_base = self.base(&an, &self.p.layout[mm.a].clone());
        let b_base = self.base(&bn, &self.p.layout[mm.b].clone());
        let (a_batch, b_batch) = if batch > 1 {
            (format!(" + bt * {}", m * kk), format!(" + bt * {}", kk * n))
        } else {
            Default::default()
        };
        let ty = f.wmma_type();
        if kk / ks > 1 {
            self.line(depth, "#pragma unroll");
        }
        self.line(depth, &format!("for (int kt = 0; kt < {}; kt++) {{", kk / ks));
        let d = depth + 1;
        self.line(d, &format!("wmma::fragment<wmma::matrix_a, 16, 16, {ks}, {ty}, wmma::row_major> fa;"));
        self.line(d, &format!("wmma::fragment<wmma::matrix_b, 16, 16, {ks}, {ty}, wmma::row_major> fb;"));
        self.line(
            d,
            &format!("wmma::load_matrix_sync(fa, {a_base}{a_batch} + mt * {} + kt * {ks}, {kk});", 16 * kk),
        );
        self.line(
            d,
            &format!("wmma::load_matrix_sync(fb, {b_base}{b_batch} + kt * {} + nt * 16, {n});", ks * n),
        );
        if f == plan::Fragment::Tf32 {
            self.line(
                d,
                "for (int t = 0; t < fa.num_elements; t++) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);",
            );
            self.line(
                d,
                "for (int t = 0; t < fb.num_elements; t++) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);",
            );
        }
        self.line(d, &format!("wmma::mma_sync({c}, fa, fb, {c});"));
        self.line(depth, "}");
    }

    /// A product on Tensor Cores: into the accumulator fragments, or into
    /// the root's shared tile.
    fn matmul(&mut self, depth: usize, mm: &Matmul) {
        let operands = BTreeSet::from([Arr::Value(mm.a), Arr::Value(mm.b)]);
        if mm.into_acc {
            self.step(depth, operands, BTreeSet::new());
            self.for_fragments(depth, mm, |p, d, mm| p.mma_k(d, mm, "acc_f[j]"));
            return;
        }
        self.step(depth, operands, BTreeSet::from([Arr::Value(mm.root)]));
        let warps = self.threads() / 32;
        let items = mm.items(self.k);
        let ks = mm.fragment.k_step();
        let (_, _, n, _) = mm.dims(self.k);
        let d = if items <= warps {
            self.line(depth, &format!("if (warp < {items}) {{"));
            self.line(depth + 1, "const int it = warp;");
            depth + 1
        } else {
            self.line(depth, &format!("for (int it = warp; it < {items}; it += {warps}) {{"));
            depth + 1
        };
        self.decode_item(d, mm);
        self.line(d, &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, float> c;"));
        self.line(d, "wmma::fill_fragment(c, 0.0f);");
        self.mma_k(d, mm, "c");
        let name = self.names.values[mm.root].clone();
        let dst = self.root_pointer(&name, &self.p.layout[mm.root].clone(), mm);
        self.line(d, &format!("wmma::store_matrix_sync({dst}, c, {n}, wmma::mem_row_major);"));
        self.line(depth, "}");
    }

    /// The write of the result.
    fn sink(&mut self, depth: usize) {
        let k = self.k;
        let s = &k.sink;
        let ids: Vec<ValueId> = s.index.iter().copied().chain([s.value]).chain(s.mask).collect();
        let reads = self.reads_of(&ids);
        self.step(depth, reads, BTreeSet::new());
        if let Some(axis) = self.paired_axis() {
            self.sink_pairs(depth, axis);
            return;
        }
        let inner = if self.p.sink_from_registers {
            let n = self.elements(&self.p.uses.sink_shape);
            let inner = self.open_owned(depth, n);
            let order = self.p.acc_layout.clone();
            self.decode(inner, &order);
            inner
        } else {
            let n = self.elements(&self.p.uses.sink_shape);
            let inner = self.open_elements(depth, n);
            let order = self.p.sink_order.clone();
            self.decode(inner, &order);
            inner
        };
        let t = self.k.tensor(s.tensor);
        let name = &self.names.tensors[s.tensor];
        let address = self.address(s.tensor, &s.index);
        let target = format!("{name}[{address}]");
        let value = self.elem(s.value);
        let update = if s.exclusive {
            let current = self.d.load(t.dtype, name, &address);
            let sfx = self.d.math_suffix();
            let combined = match s.reduction {
                Reduction::Sum => format!("{current} + {value}"),
                Reduction::Max => format!("fmax{sfx}({current}, {value})"),
                Reduction::Min => format!("fmin{sfx}({current}, {value})"),
            };
            format!("{target} = {};", self.d.store_as(t.dtype, &combined))
        } else {
            let v = self.d.store_as(t.dtype, &value);
            match s.reduction {
                Reduction::Sum => format!("atomicAdd(&{target}, {v});"),
                Reduction::Max => format!("spindle_atomic_max(&{target}, {v});"),
                Reduction::Min => format!("spindle_atomic_min(&{target}, {v});"),
            }
        };
        let text = match s.mask {
            Some(m) => format!("if ({}) {update}", self.elem(m)),
            None => update,
        };
        self.line(inner, &text);
        if self.p.sink_from_registers {
            self.close_owned(inner, depth);
        } else {
            self.close(inner, depth);
        }
    }

    /// The axis along which a 16-bit sum scatter adds pairs of neighbours
    /// with one `__half2` / `__nv_bfloat162` atomic: the sink's fastest
    /// axis, when it is the output's last subscript alone, the other
    /// subscripts do not vary along it, and the last dimension is even (so
    /// every pair is 4-byte aligned).
    fn paired_axis(&self) -> Option<AxisId> {
        let k = self.k;
        let s = &k.sink;
        let t = k.tensor(s.tensor);
        if s.exclusive
            || s.reduction != Reduction::Sum
            || self.p.sink_from_registers
            || !matches!(t.dtype, ElemType::Value(DType::F16 | DType::Bf16))
            || !t.shape.last().is_some_and(|d| d.is_multiple_of(2))
        {
            return None;
        }
        let &axis = self.p.sink_order.last()?;
        let (last, rest) = s.index.split_last()?;
        let plain = matches!(k.value(*last).op, Op::Range(a) if a == axis) && self.p.inline[*last];
        let tile = self.tile(axis);
        (plain
            && tile >= 2
            && tile.is_multiple_of(2)
            && rest.iter().all(|i| !k.value(*i).shape.contains(&axis)))
        .then_some(axis)
    }

    /// The sum scatter of a 16-bit output by pairs along `axis`: one vector
    /// atomic where both elements are inside the mask, scalar ones at
    /// the edges.
    fn sink_pairs(&mut self, depth: usize, axis: AxisId) {
        let k = self.k;
        let s = &k.sink;
        let n = self.elements(&self.p.uses.sink_shape) / 2;
        let inner = self.open_elements(depth, n);
        // Decode the pair: the paired axis counts in twos.
        let order = self.p.sink_order.clone();
        let mut stride = 1;
        let mut lines = Vec::new();
        for (pos, &a) in order.iter().enumerate().rev() {
            let tile = if a == axis { self.tile(a) / 2 } else { self.tile(a) };
            let div = if stride == 1 { "e".to_string() } else { format!("e / {stride}") };
            let outer = pos == 0 || order[..pos].iter().all(|&b| self.tile(b) == 1);
            let coordinate = if tile == 1 && a != axis {
                "0".to_string()
            } else if outer {
                div
            } else {
                format!("{div} % {tile}")
            };
            lines.push(if a == axis {
                format!("const int pair = {coordinate} * 2;")
            } else {
                format!("const int {} = {coordinate};", self.axis_var(a))
            });
            stride *= tile;
        }
        lines.reverse();
        for l in lines {
            self.line(inner, &l);
        }
        let (vector, pack, scalar) = match k.tensor(s.tensor).dtype {
            ElemType::Value(DType::Bf16) => ("__nv_bfloat162", "__floats2bfloat162_rn", "__float2bfloat16"),
            _ => ("__half2", "__floats2half2_rn", "__float2half"),
        };
        let i = self.axis_var(axis);
        self.line(inner, "float sv[2];");
        if s.mask.is_some() {
            self.line(inner, "bool sm[2];");
        }
        self.line(inner, "#pragma unroll");
        self.line(inner, "for (int h = 0; h < 2; h++) {");
        self.line(inner + 1, &format!("const int {i} = pair + h;"));
        let value = self.elem(s.value);
        self.line(inner + 1, &format!("sv[h] = (float)({value});"));
        if let Some(m) = s.mask {
            let mask = self.elem(m);
            self.line(inner + 1, &format!("sm[h] = {mask};"));
        }
        self.line(inner, "}");
        self.line(inner, "{");
        self.line(inner + 1, &format!("const int {i} = pair;"));
        let name = &self.names.tensors[s.tensor];
        let ty = match k.tensor(s.tensor).dtype {
            ElemType::Value(DType::Bf16) => "__nv_bfloat16",
            _ => "__half",
        };
        self.line(inner + 1, &format!("{ty} *at = &{name}[{}];", self.address(s.tensor, &s.index)));
        let both = format!("atomicAdd(reinterpret_cast<{vector} *>(at), {pack}(sv[0], sv[1]));");
        if s.mask.is_none() {
            self.line(inner + 1, &both);
        } else {
            self.line(inner + 1, &format!("if (sm[0] && sm[1]) {both}"));
            self.line(inner + 1, "else {");
            self.line(inner + 2, &format!("if (sm[0]) atomicAdd(at, {scalar}(sv[0]));"));
            self.line(inner + 2, &format!("if (sm[1]) atomicAdd(at + 1, {scalar}(sv[1]));"));
            self.line(inner + 1, "}");
        }
        self.line(inner, "}");
        self.close(inner, depth);
    }

    /// Atomic max / min by compare-and-swap, for the output's type. The
    /// first read bypasses L1 (`__ldcg`): other blocks update the element
    /// through L2.
    fn atomic_helpers(&mut self) {
        let s = &self.k.sink;
        if s.exclusive || s.reduction == Reduction::Sum {
            return;
        }
        let (ty, bits, to_bits, from_bits, widen) = match self.k.tensor(s.tensor).dtype {
            ElemType::Value(DType::F64) => {
                ("double", "unsigned long long", "__double_as_longlong", "__longlong_as_double", "")
            }
            ElemType::Value(DType::F16) => {
                ("__half", "unsigned short", "__half_as_ushort", "__ushort_as_half", "__half2float")
            }
            ElemType::Value(DType::Bf16) => (
                "__nv_bfloat16",
                "unsigned short",
                "__bfloat16_as_ushort",
                "__ushort_as_bfloat16",
                "__bfloat162float",
            ),
            _ => ("float", "unsigned int", "__float_as_uint", "__uint_as_float", ""),
        };
        let (name, cmp) = match s.reduction {
            Reduction::Max => ("max", ">"),
            _ => ("min", "<"),
        };
        let text = format!(
            "__device__ __forceinline__ void spindle_atomic_{name}({ty} *p, {ty} v) {{
  {bits} *bits = reinterpret_cast<{bits} *>(p);
  {bits} old = __ldcg(bits);
  while ({widen}(v) {cmp} {widen}({from_bits}(old))) {{
    const {bits} seen = atomicCAS(bits, old, ({bits}){to_bits}(v));
    if (seen == old) return;
    old = seen;
  }}
}}
"
        );
        self.line(0, &text);
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
