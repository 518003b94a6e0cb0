//! The C printer: a kernel becomes one C11 function with OpenMP,
//! `void NAME(void *const *args, int64_t nthreads)`, whose `args` are the
//! kernel's tensors in order (values as `double` for f64 and `float` for
//! f32, f16 and bf16, which are converted at the boundary; indices as
//! `int32_t` / `int64_t`).
//!
//! Every value becomes a small array over its tile shape, filled by a loop
//! nest the C compiler vectorizes; `dot` becomes a loop nest; the loop over
//! reduced tiles folds into an accumulator; the sink is a plain
//! read-modify-write.
//!
//! # Threads
//!
//! The programs (the tiles of the parallel axes, flattened) are split into
//! one contiguous range per OpenMP thread. The rule is that a kernel on
//! `nthreads` threads is never slower than on one, so:
//!
//! - Kernels with little work ([`Options::serial_work`]; the driver sets it
//!   to 0 when the schedule gives a thread count) and kernels whose
//!   programs collide with no cheap way to combine them run on one thread,
//!   with no parallel region at all: waking a team costs tens of µs when
//!   OpenMP waits passively (see [`crate::runtime::wait_passively`]).
//! - When programs own their outputs, each thread writes its range directly.
//! - When programs may collide and the sink's target along one output
//!   dimension is a 1-D index tensor read at a parallel axis `p`
//!   (`C[A_row[p],n]`, `C[A_grp[p],n]`), the targets are sorted for every
//!   format Spindle produces, so a thread owning a contiguous range of
//!   p-tiles owns a contiguous range of rows of which only the first and
//!   the last can be shared with its neighbours. Interior rows are written
//!   directly; the first and last row go to a small per-thread buffer
//!   added in after the region. Each thread first checks that its part of
//!   the index tensor is nondecreasing; if any part is not (a user may
//!   write the indirect form with any indices), every thread falls back.
//! - The fallback, and colliding programs without such a target, use one
//!   private output copy per thread summed at the end when the work is
//!   large against the output ([`PRIVATE_GAIN`]) and the copies fit
//!   ([`PRIVATE_LIMIT`]); otherwise one thread. (OpenMP atomics were
//!   measured 5-25 times slower on two threads than plain writes on one.)

use std::fmt::Write as _;

use spindle_ir::formats::{DType, IType};
use spindle_ir::kernel::*;
use spindle_ir::lang::ElemType;

use crate::dialect::{C, Dialect, Scope, real_of, select_helpers};
use crate::namer::Names;

/// Tiles of one program may not exceed this many bytes in total: they live
/// on the thread's stack.
pub const MAX_PROGRAM_BYTES: usize = 1 << 20;

/// Private output copies are used while `size × threads` stays under this
/// many elements (256 MB of f32).
pub const PRIVATE_LIMIT: usize = 1 << 26;

/// Private output copies are used only when the kernel's [`work`] is at
/// least this many times the output's size: filling and summing the copies
/// costs about two passes over the output per thread.
pub const PRIVATE_GAIN: usize = 4;

/// Below this much work ([`work`]) a kernel runs on one thread. Measured
/// on a 2-core machine with passive OpenMP waiting, where waking the
/// second thread costs 10-80 µs: two threads start to pay at about 80-100
/// µs of one-thread time, which is 180k-230k of work for SpMV and for
/// SpMM with N = 16 and 64 alike (see `bench_threshold` in
/// `tests/threads.rs`).
pub const SERIAL_WORK: usize = 1 << 18;

/// Elements counted as one operation where a loop vectorizes (see [`work`]).
const VECTOR: usize = 4;

/// An estimate of a kernel's work, in operations: every element of every
/// value and of the sink, once per program (per reduced tile in the loop),
/// with `VECTOR` (4) elements counted as one where the innermost loop runs
/// along an output axis written contiguously (`n` of `C[R[p],n]`: those
/// loops vectorize; gathers and scatters along a sparse axis do not). The
/// product of the extents alone put SpMV's break-even 8 times lower than
/// SpMM's.
pub fn work(k: &Kernel) -> usize {
    let phases = k.phases();
    let programs: usize = k.parallel_axes().iter().map(|&a| k.axis(a).tiles()).product();
    let loop_trips: usize = k.reduced_axes().iter().map(|&a| k.axis(a).tiles()).product();
    let contiguous = |a: AxisId| k.sink.index.iter().any(|&ix| k.value(strip(k, ix)).op == Op::Range(a));
    let ops = |shape: &[AxisId], phase: Phase| {
        let elements = shape.iter().fold(1usize, |n, &a| n.saturating_mul(k.axis(a).tile));
        // The innermost loop is over the last parallel axis (see `Printer::order`).
        let last = shape.iter().rev().find(|&&a| k.axis(a).role == AxisRole::Parallel);
        let vectors = if last.is_some_and(|&a| contiguous(a)) { elements.div_ceil(VECTOR) } else { elements };
        let trips = if phase == Phase::Loop { loop_trips } else { 1 };
        vectors.saturating_mul(trips)
    };
    let mut per_program = 0usize;
    for &id in &k.order {
        let v = k.value(id);
        per_program = per_program.saturating_add(ops(&v.shape, phases[id]));
    }
    let s = &k.sink;
    let mut shape: Vec<AxisId> =
        s.index.iter().chain([&s.value]).chain(&s.mask).flat_map(|&i| k.value(i).shape.clone()).collect();
    shape.sort();
    shape.dedup();
    per_program = per_program.saturating_add(ops(&shape, phases[s.value]));
    per_program.saturating_mul(programs)
}

/// Choices of the printer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Kernels whose work is below this run on one thread (0: never for
    /// that reason; tests use it to run small kernels on several threads).
    pub serial_work: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { serial_work: SERIAL_WORK }
    }
}

/// A kernel the printer cannot express.
#[derive(Debug, thiserror::Error)]
#[error("cannot print kernel `{kernel}` as C: {reason}")]
pub struct PrintError {
    pub kernel: String,
    pub reason: String,
}

/// The head of a printed C file: what it is, its IR as a comment, the
/// headers every kernel includes.
pub(crate) fn preamble(what: &str, ir: &str) -> String {
    let mut out = format!("// Spindle {what}, generated: do not edit.\n");
    for line in ir.lines() {
        out += &format!("// {line}\n");
    }
    out + "#include <stdint.h>\n#include <math.h>\n#include <omp.h>\n#include <stdlib.h>\n\n"
}

/// A level kernel's two C functions: the body, `static`, taking each tensor as a
/// `restrict` parameter, and the entry point `void NAME(void *const *args,
/// int64_t nthreads)` that passes `args` on. GCC (12) honours `restrict` on
/// parameters, not on locals read from `args`: with locals, a store to the
/// output could alias every input, which kept the fused SDDMM's position
/// loop scalar, with C reloaded per entry (0.27 ms on sparse-dnn NK = 16;
/// 0.15 ms as parameters). `tensors` are (name, dtype, output) in argument
/// order. Returns the body's opening line and the entry point, to print
/// after the body's closing brace.
pub(crate) fn entry_point(symbol: &str, tensors: &[(&str, ElemType, bool)]) -> (String, String) {
    let params: Vec<String> = tensors
        .iter()
        .map(|&(name, dtype, output)| {
            let constness = if output { "" } else { "const " };
            format!("{constness}{} *restrict {name}", c_type(dtype))
        })
        .chain(["int64_t nthreads".to_string()])
        .collect();
    let body = format!("static void {symbol}_body({}) {{", params.join(", "));
    let args: Vec<String> =
        (0..tensors.len()).map(|i| format!("args[{i}]")).chain(["nthreads".into()]).collect();
    let entry = format!(
        "\nvoid {symbol}(void *const *args, int64_t nthreads) {{\n    {symbol}_body({});\n}}\n",
        args.join(", ")
    );
    (body, entry)
}

/// The entry point's opening with the tensors as `restrict` locals read
/// from `args` (which GCC treats as possibly aliased), for kernels that ran
/// faster so than with [`entry_point`]'s parameters.
/// The first line opens the function, the others go one level in.
pub(crate) fn entry_with_locals(symbol: &str, tensors: &[(&str, ElemType, bool)]) -> Vec<String> {
    let locals = tensors.iter().enumerate().map(|(i, &(name, dtype, output))| {
        let constness = if output { "" } else { "const " };
        format!("{constness}{} *restrict {name} = args[{i}];", c_type(dtype))
    });
    std::iter::once(format!("void {symbol}(void *const *args, int64_t nthreads) {{")).chain(locals).collect()
}

/// The C type of a tensor argument's elements.
pub fn c_type(dtype: ElemType) -> &'static str {
    match dtype {
        ElemType::Value(DType::F64) => "double",
        ElemType::Value(_) => "float",
        ElemType::Index(IType::I32) => "int32_t",
        ElemType::Index(IType::I64) => "int64_t",
    }
}

/// The C source of `kernel`, with its function named `symbol`.
pub fn print(kernel: &Kernel, symbol: &str) -> Result<String, PrintError> {
    print_with(kernel, symbol, &Options::default())
}

/// [`print()`] with explicit [`Options`].
pub fn print_with(kernel: &Kernel, symbol: &str, options: &Options) -> Result<String, PrintError> {
    Printer::new(kernel).print(symbol, options)
}

/// A sink target that is a 1-D index tensor read at a parallel axis:
/// `C[R[p], n]` has `dim` 0, `rows` R and `axis` p.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Owner {
    dim: usize,
    rows: TensorId,
    axis: AxisId,
}

/// The most copies of a reduction's innermost loop that unrolling the loops
/// around it may make (see [`Printer::reduce`]).
const MAX_UNROLLED: usize = 16;

/// Looks through eager broadcasts.
fn strip(k: &Kernel, mut id: ValueId) -> ValueId {
    while let Op::Broadcast { value } = k.value(id).op {
        id = value;
    }
    id
}

/// The first output dimension whose target is an index tensor `R[p]` with
/// `p` parallel and R as long as p's extent, for a sink whose programs may
/// collide.
fn owner(k: &Kernel) -> Option<Owner> {
    if k.sink.exclusive {
        return None;
    }
    k.sink.index.iter().enumerate().find_map(|(dim, &ix)| {
        let Op::Load { tensor, index, .. } = &k.value(strip(k, ix)).op else { return None };
        let [at] = index[..] else { return None };
        let Op::Range(axis) = k.value(strip(k, at)).op else { return None };
        let rows = k.tensor(*tensor);
        let fits = rows.shape == [k.axis(axis).extent] && k.axis(axis).role == AxisRole::Parallel;
        fits.then_some(Owner { dim, rows: *tensor, axis })
    })
}

struct Printer<'k> {
    k: &'k Kernel,
    d: C,
    names: Names,
    /// The output pointer a program writes through: the output itself, a
    /// thread's private copy.
    out_ptr: String,
    phases: SecondaryMap<ValueId, Phase>,
    /// Values printed as expressions where they are used, not as arrays.
    inline: SecondaryMap<ValueId, bool>,
    out: String,
    /// Set while printing the threaded kernel of a sink with an [`Owner`]:
    /// programs test whether they touch a thread's first or last row.
    owner: Option<Owner>,
}

impl<'k> Printer<'k> {
    fn new(k: &'k Kernel) -> Self {
        let uses = Uses::of(k);
        // A tile is a register array here, as cheap to read as an index is
        // to recompute: only free values are recomputed where they are read.
        let inline = uses.inline(k, 0, |_| false);
        let mut names = Names::new(k, "a_");
        let out_ptr = names.namer.fresh("o_", &k.tensor(k.sink.tensor).name);
        Printer {
            k,
            d: C { real: real_of(k) },
            names,
            out_ptr,
            phases: uses.phases,
            inline,
            out: String::new(),
            owner: None,
        }
    }

    fn real(&self) -> &'static str {
        self.d.real
    }

    fn tensor_name(&self, t: TensorId) -> &str {
        &self.names.tensors[t]
    }

    fn line(&mut self, depth: usize, text: &str) {
        let _ = writeln!(self.out, "{}{text}", "  ".repeat(depth));
    }

    /// The loop order (and array layout) of a shape: the parallel axes but
    /// the innermost, the reduced axes, then the innermost parallel axis,
    /// usually the contiguous one (the dense column of an SpMM).
    fn order(&self, shape: &[AxisId]) -> Vec<AxisId> {
        // An output axis of one element is no loop: the summed axes go
        // inside it, so a dot product is the innermost loop.
        let parallel: Vec<AxisId> = shape
            .iter()
            .copied()
            .filter(|&a| self.k.axis(a).role == AxisRole::Parallel && self.k.axis(a).tile > 1)
            .collect();
        let single = shape
            .iter()
            .copied()
            .filter(|&a| self.k.axis(a).role == AxisRole::Parallel && self.k.axis(a).tile == 1);
        let reduced = shape.iter().copied().filter(|&a| self.k.axis(a).role == AxisRole::Reduced);
        match parallel.split_last() {
            Some((last, rest)) => single.chain(rest.iter().copied()).chain(reduced).chain([*last]).collect(),
            None => single.chain(reduced).collect(),
        }
    }

    /// `name[i_a][i_b]` for a value of shape [a, b]; `name` for a scalar.
    fn at(&self, name: &str, shape: &[AxisId]) -> String {
        let mut s = name.to_string();
        for a in self.order(shape) {
            let _ = write!(s, "[{}]", self.axis_var(a));
        }
        s
    }

    /// Declares the array of a value.
    fn declare(&mut self, depth: usize, id: ValueId) {
        let value = self.k.value(id);
        let dims: String =
            self.order(&value.shape).iter().map(|&a| format!("[{}]", self.k.axis(a).tile)).collect();
        let text = format!("{} {}{dims};", self.d.scalar_type(value.scalar), self.names.values[id]);
        self.line(depth, &text);
    }

    /// Opens loops over a shape; returns the depth inside them.
    fn open(&mut self, depth: usize, shape: &[AxisId]) -> usize {
        self.open_loops(depth, shape, true)
    }

    /// Opens loops over a shape. With `simd`, an innermost loop over an
    /// output index is marked `omp simd`: its iterations write distinct
    /// elements, and the mark keeps gcc from vectorizing an outer loop with
    /// gathers instead of the contiguous inner one.
    fn open_loops(&mut self, depth: usize, shape: &[AxisId], simd: bool) -> usize {
        let order = self.order(shape);
        self.open_ordered(depth, &order, simd)
    }

    /// Opens loops over axes in the given order (see [`Printer::open_loops`]).
    fn open_ordered(&mut self, depth: usize, order: &[AxisId], simd: bool) -> usize {
        let mut d = depth;
        for (n, &a) in order.iter().enumerate() {
            let (i, tile) = (self.axis_var(a), self.k.axis(a).tile);
            let innermost = n + 1 == order.len();
            if simd && innermost && tile > 1 && self.k.axis(a).role == AxisRole::Parallel {
                self.line(d, "#pragma omp simd");
            }
            self.line(d, &format!("for (int64_t {i} = 0; {i} < {tile}; {i}++) {{"));
            d += 1;
        }
        d
    }

    fn close(&mut self, from: usize, to: usize) {
        for d in (to..from).rev() {
            self.line(d, "}");
        }
    }

    fn compute(&mut self, depth: usize, id: ValueId) {
        let text = format!("{} = {};", self.array(id), self.expr(id));
        self.line(depth, &text);
    }

    fn order_index(&self, shape: &[AxisId]) -> String {
        self.at("", shape)
    }

    /// Emits a value: its array and the loops that fill it.
    fn emit(&mut self, depth: usize, id: ValueId) {
        if self.inline[id] || self.k.value(id).op == Op::Accumulator {
            return;
        }
        let value = self.k.value(id).clone();
        if self.folds_into_acc(id) {
            // The accumulator's own partial: reduce straight into it.
            match value.op {
                Op::Reduce { reduction, value: x, axis, mask } => {
                    self.reduce(depth, id, reduction, &[x], axis, mask, true)
                }
                Op::Dot { a, b, axis, mask } => {
                    self.reduce(depth, id, Reduction::Sum, &[a, b], axis, mask, true)
                }
                _ => unreachable!("only reductions fold into the accumulator"),
            }
            return;
        }
        self.declare(depth, id);
        match value.op {
            Op::Reduce { reduction, value: x, axis, mask } => {
                self.reduce(depth, id, reduction, &[x], axis, mask, false);
            }
            Op::Dot { a, b, axis, mask } => {
                self.reduce(depth, id, Reduction::Sum, &[a, b], axis, mask, false)
            }
            _ => {
                let inner = self.open(depth, &value.shape);
                self.compute(inner, id);
                self.close(inner, depth);
            }
        }
    }

    /// Whether `id` is the accumulator's partial and a reduction of the
    /// accumulator's kind, so it can fold straight into `acc`.
    fn folds_into_acc(&self, id: ValueId) -> bool {
        let Some(acc) = &self.k.accumulate else { return false };
        acc.partial == id
            && match self.k.value(id).op {
                Op::Dot { .. } => acc.reduction == Reduction::Sum,
                Op::Reduce { reduction, .. } => reduction == acc.reduction,
                _ => false,
            }
    }

    /// `out[S] = fold over axis of (product of factors)`, masked; with
    /// `into_acc`, folded into the accumulator instead.
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &mut self,
        depth: usize,
        id: ValueId,
        r: Reduction,
        factors: &[ValueId],
        axis: AxisId,
        mask: Option<ValueId>,
        into_acc: bool,
    ) {
        let shape = self.k.value(id).shape.clone();
        if !into_acc {
            let inner = self.open(depth, &shape);
            let init = format!("{} = {};", self.array(id), self.d.float(r.identity()));
            self.line(inner, &init);
            self.close(inner, depth);
        }
        let mut full: Vec<AxisId> = shape.clone();
        for &f in factors {
            full.extend(self.k.value(f).shape.iter().copied());
        }
        full.extend(mask.map(|m| self.k.value(m).shape.clone()).unwrap_or_default());
        full.push(axis);
        full.sort();
        full.dedup();
        // The terms of masks that do not vary along the innermost loop are
        // tested outside it, as the sink's are: the reduction's own mask's,
        // and in a sum those of factors that are masked loads printed in
        // place (where one is off, the term is 0 and skipping it adds
        // nothing). Inside the test the loads read unmasked, and gcc reads
        // their rows contiguously instead of gathering them.
        let order = self.order(&full);
        let innermost = order.last().copied();
        let varies = |m: ValueId| innermost.is_some_and(|a| self.k.value(m).shape.contains(&a));
        let factor_masks = factors.iter().filter_map(|&f| {
            let load = strip(self.k, f);
            match self.k.value(load).op {
                Op::Load { mask, .. } if r == Reduction::Sum && self.inline[load] => mask,
                _ => None,
            }
        });
        let mut terms = Vec::new();
        for m in mask.into_iter().chain(factor_masks) {
            self.k.conjuncts(m, &mut terms);
        }
        terms.retain(|&m| !varies(m));
        terms.sort();
        terms.dedup();
        let split = self.mask_split(&order, &terms);
        let outer = self.open_ordered(depth, &order[..split], split == order.len());
        let tested = match terms.is_empty() {
            true => outer,
            false => {
                let tests: Vec<String> = terms.iter().map(|&m| self.elem(m)).collect();
                self.line(outer, &format!("if ({}) {{", tests.join(" && ")));
                outer + 1
            }
        };
        // The loops around the innermost are unrolled by gcc's late
        // unroller where they are short: left to its early complete
        // peeling, gcc 12 loses the contiguity of some copies of the `omp
        // simd` loop and gathers their rows (GroupCOO's q loop: 3x slower).
        // Unrolled from the innermost out while the copies stay few, where a
        // factor reads a tensor in place (tiles already copied are read
        // contiguously either way, and unrolling them costs a little).
        let reads_in_place = factors.iter().any(|&f| {
            let load = strip(self.k, f);
            self.inline[load] && matches!(self.k.value(load).op, Op::Load { .. })
        });
        let mut inner = tested;
        // A sum over an innermost axis that only the factors move is a dot
        // product: summed in SIMD lanes into `dot` (see
        // `Printer::sums_contiguously`), then added to the target once.
        let dot = r == Reduction::Sum
            && innermost == Some(axis)
            && split < order.len()
            && self.k.axis(axis).tile > 1
            && mask.is_none_or(|m| !varies(m))
            && factors.iter().all(|&f| self.unit_stride(f, axis));
        if let Some((last, around)) = order[split..].split_last() {
            // Copies of the innermost loop made by unrolling each loop
            // around it and those inside that one.
            let copies = |i: usize| around[i..].iter().map(|&a| self.k.axis(a).tile).product::<usize>();
            for (i, &a) in around.iter().enumerate() {
                let tile = self.k.axis(a).tile;
                if reads_in_place && tile > 1 && copies(i) <= MAX_UNROLLED {
                    self.line(inner, &format!("#pragma GCC unroll {tile}"));
                }
                inner = self.open_ordered(inner, &[a], false);
            }
            if dot {
                self.line(inner, "{");
                inner += 1;
                self.open_dot(inner);
            }
            inner = self.open_ordered(inner, &[*last], !dot);
        }
        let hoisted = |m: ValueId| {
            let mut of_m = Vec::new();
            self.k.conjuncts(m, &mut of_m);
            of_m.iter().all(|t| terms.contains(t))
        };
        // A factor loaded under a mask tested outside reads without it: the
        // plainest address is the one gcc sees is contiguous.
        let term: Vec<String> = factors
            .iter()
            .map(|&f| {
                let load = strip(self.k, f);
                match &self.k.value(load).op {
                    Op::Load { tensor, index, mask: Some(m) } if self.inline[load] && hoisted(*m) => {
                        let array = &self.names.tensors[*tensor];
                        self.d.load(self.k.tensor(*tensor).dtype, array, &self.address(*tensor, index))
                    }
                    _ => self.elem(f),
                }
            })
            .collect();
        let term = term.join(" * ");
        let target = if into_acc { format!("acc{}", self.order_index(&shape)) } else { self.array(id) };
        let update = self.d.fold(r, if dot { "dot" } else { &target }, &term);
        let text = match mask.filter(|&m| !hoisted(m)) {
            Some(m) => format!("if ({}) {update}", self.elem(m)),
            None => update,
        };
        self.line(inner, &text);
        if dot {
            self.line(inner - 1, "}");
            self.line(inner - 1, &format!("{target} += dot;"));
            inner -= 1;
        }
        self.close(inner, depth);
    }

    /// How many loops of `order` must be open before `masks` can be tested:
    /// up to the innermost loop over an axis of theirs.
    fn mask_split(&self, order: &[AxisId], masks: &[ValueId]) -> usize {
        masks
            .iter()
            .map(|&m| {
                let shape = &self.k.value(m).shape;
                order.iter().rposition(|a| shape.contains(a)).map_or(0, |i| i + 1)
            })
            .max()
            .unwrap_or(0)
    }

    fn print(mut self, symbol: &str, options: &Options) -> Result<String, PrintError> {
        let k = self.k;
        let bytes: usize = k.order.iter().map(|&id| k.tile_elements(&k.value(id).shape) * 8).sum();
        if bytes > MAX_PROGRAM_BYTES {
            return Err(PrintError {
                kernel: k.name.clone(),
                reason: format!(
                    "its tiles take {bytes} bytes per program, more than {MAX_PROGRAM_BYTES}; use smaller tiles"
                ),
            });
        }
        self.out.push_str(&preamble(&format!("kernel `{}`", k.name), &k.to_string()));
        let helpers = select_helpers();
        self.out.push_str(&helpers);
        self.line(0, "");
        // Tile kernels keep their pointers as locals: as `restrict`
        // parameters (as level kernels take them) GCC vectorised their
        // folds differently, and CSR SpMM on bcsstk13 ran 14% slower.
        let tensors: Vec<(&str, ElemType, bool)> =
            k.tensors.iter().map(|(id, t)| (self.names.tensors[id].as_str(), t.dtype, t.output)).collect();
        for (i, l) in entry_with_locals(symbol, &tensors).iter().enumerate() {
            self.line(usize::from(i > 0), l);
        }
        let out = k.tensor(k.sink.tensor);
        let (name, real) = (self.tensor_name(k.sink.tensor).to_string(), c_type(out.dtype));
        let size: usize = out.shape.iter().product();
        let parallel = k.parallel_axes();
        let owner = owner(k);
        // The programs are flattened with the owner's axis outermost, so
        // that a contiguous range of them is a contiguous range of its tiles.
        let mut order = parallel.clone();
        if let Some(o) = owner {
            order.retain(|&a| a != o.axis);
            order.insert(0, o.axis);
        }
        let programs: usize = order.iter().map(|&a| k.axis(a).tiles()).product();
        let work = work(k);
        let colliding = !k.sink.exclusive;
        // The copies' cost is about two passes over the output per thread,
        // against the work shared out.
        let private = colliding && size > 0 && work / PRIVATE_GAIN >= size && 2 * size <= PRIVATE_LIMIT;
        let serial = if programs < 2 {
            Some("one program")
        } else if work < options.serial_work {
            Some("too little work to wake a second thread")
        } else if colliding && owner.is_none() && !private {
            Some("programs may collide and private output copies would cost more than they save")
        } else {
            None
        };
        match serial {
            Some(why) => {
                self.line(1, &format!("{}{why}.", crate::ONE_THREAD_WHY));
                self.line(1, crate::ONE_THREAD);
                self.line(1, &format!("{real} *restrict {} = {name};", self.out_ptr));
                if parallel.is_empty() {
                    self.program(1);
                } else {
                    self.programs(1, &order, "0", &programs.to_string());
                }
            }
            None => self.threaded(&order, programs, owner, private),
        }
        self.line(0, "}");
        Ok(self.out)
    }

    /// The kernel on up to `nthreads` threads, each running one contiguous
    /// range of the programs (see the module documentation).
    fn threaded(&mut self, order: &[AxisId], programs: usize, owner: Option<Owner>, private: bool) {
        let k = self.k;
        let out = k.tensor(k.sink.tensor);
        let (name, real) = (self.tensor_name(k.sink.tensor).to_string(), c_type(out.dtype));
        let size: usize = out.shape.iter().product();
        let identity = self.d.float(k.sink.reduction.identity());
        let colliding = !k.sink.exclusive;
        // No more threads than there are ranges to give them.
        let cap = match owner {
            Some(o) => programs.min(k.axis(o.axis).tiles()),
            None if colliding => programs.min(PRIVATE_LIMIT / size),
            None => programs,
        };
        self.line(1, &format!("const int64_t out_size = {size};"));
        self.line(1, "int64_t team_max = nthreads;");
        self.line(1, &format!("if (team_max > {cap}) team_max = {cap};"));
        if private {
            self.line(1, &format!("{real} *priv = NULL;"));
        }
        if let Some(o) = owner {
            let slice = size / out.shape[o.dim].max(1);
            self.line(1, "// The first and last row of each thread, and its buffers for them.");
            self.line(1, &format!("{real} *edges = malloc(sizeof *edges * 2 * {slice} * team_max);"));
            self.line(1, "int64_t *edge_rows = malloc(sizeof *edge_rows * 2 * team_max);");
            self.line(1, "if (!edges || !edge_rows) team_max = 1;");
            self.line(1, "int unsorted = 0;");
        }
        self.line(1, "int64_t team_used = 1;");
        self.line(1, "#pragma omp parallel num_threads(team_max) if(team_max > 1)");
        self.line(1, "{");
        self.line(2, "const int64_t tid = omp_get_thread_num(), team = omp_get_num_threads();");
        self.line(2, "if (tid == 0) team_used = team;");
        self.line(2, &format!("{real} *restrict {} = {name};", self.out_ptr));
        self.line(
            2,
            &format!("int64_t first = {programs} * tid / team, last = {programs} * (tid + 1) / team;"),
        );
        if let Some(o) = owner {
            self.owned_range(o, programs);
        }
        if colliding {
            // Without owned rows: private copies when they pay, else one thread.
            let fallback = if owner.is_some() { "team > 1 && !owned" } else { "team > 1" };
            if private {
                self.line(2, "int privatized = 0;");
            }
            self.line(2, &format!("if ({fallback}) {{"));
            if private {
                self.line(3, &format!("if (team * out_size <= {PRIVATE_LIMIT}) {{"));
                self.line(4, "#pragma omp single");
                self.line(4, "priv = malloc(sizeof *priv * out_size * team);");
                self.line(4, "privatized = priv != NULL;");
                self.line(3, "}");
                self.line(3, "if (privatized) {");
                let o = self.out_ptr.clone();
                self.line(4, &format!("{o} = priv + out_size * tid;"));
                self.line(4, &format!("for (int64_t i = 0; i < out_size; i++) {o}[i] = {identity};"));
                self.line(3, "}");
            }
            let serial = format!("first = 0, last = tid == 0 ? {programs} : 0;");
            match private {
                true => self.line(3, &format!("if (!privatized) {serial}")),
                false => self.line(3, &serial),
            }
            self.line(2, "}");
        }
        self.owner = owner;
        self.programs(2, order, "first", "last");
        self.owner = None;
        if private {
            self.line(2, "if (privatized) {");
            self.line(3, "#pragma omp barrier");
            self.line(3, "#pragma omp for schedule(static)");
            self.line(3, "for (int64_t i = 0; i < out_size; i++) {");
            self.line(4, "for (int64_t t = 0; t < team; t++) {");
            let update = self.d.fold(k.sink.reduction, &format!("{name}[i]"), "priv[out_size * t + i]");
            self.line(5, &update);
            self.line(4, "}");
            self.line(3, "}");
            self.line(2, "}");
        }
        self.line(1, "}");
        if let Some(o) = owner {
            self.edges_back(o);
        }
        if private {
            self.line(1, "free(priv);");
        }
    }

    /// Row ownership: each thread takes whole tiles of the owner's axis, in
    /// order, checks that its part of the row tensor is sorted, and, when
    /// every part is, notes its first and last row.
    fn owned_range(&mut self, o: Owner, programs: usize) {
        let k = self.k;
        let out = k.tensor(k.sink.tensor);
        let real = c_type(out.dtype);
        let slice = out.shape.iter().product::<usize>() / out.shape[o.dim].max(1);
        let identity = self.d.float(k.sink.reduction.identity());
        let rows = self.tensor_name(o.rows).to_string();
        let axis = k.axis(o.axis);
        let (tile, extent, tiles) = (axis.tile, axis.extent, axis.tiles());
        self.line(2, "int owned = team > 1;");
        self.line(2, "int64_t row_first = 0, row_last = 0;");
        self.line(2, &format!("{real} *edge_first = NULL, *edge_last = NULL;"));
        self.line(2, "if (owned) {");
        self.line(3, &format!("const int64_t c0 = {tiles} * tid / team, c1 = {tiles} * (tid + 1) / team;"));
        self.line(
            3,
            &format!("const int64_t p0 = c0 * {tile}, p1 = c1 * {tile} < {extent} ? c1 * {tile} : {extent};"),
        );
        self.line(3, "// Sorted up to the next thread's first row?");
        self.line(3, &format!("const int64_t end = p1 < {extent} ? p1 + 1 : p1;"));
        self.line(3, "unsigned char bad = 0;");
        self.line(3, &format!("for (int64_t p = p0; p + 1 < end; p++) bad |= {rows}[p] > {rows}[p + 1];"));
        self.line(3, "if (bad) __atomic_store_n(&unsorted, 1, __ATOMIC_RELAXED);");
        self.line(3, "#pragma omp barrier");
        self.line(3, "owned = !__atomic_load_n(&unsorted, __ATOMIC_RELAXED);");
        self.line(3, "if (owned) {");
        let rest = programs / tiles.max(1);
        self.line(4, &format!("first = c0 * {rest}, last = c1 * {rest};"));
        self.line(4, &format!("row_first = {rows}[p0], row_last = {rows}[p1 - 1];"));
        self.line(4, "edge_rows[2 * tid] = row_first, edge_rows[2 * tid + 1] = row_last;");
        self.line(4, &format!("edge_first = edges + 2 * tid * {slice}, edge_last = edge_first + {slice};"));
        self.line(4, &format!("for (int64_t i = 0; i < 2 * {slice}; i++) edge_first[i] = {identity};"));
        self.line(3, "}");
        self.line(2, "}");
    }

    /// After the region: each thread's first and last row, from its buffers.
    fn edges_back(&mut self, o: Owner) {
        let k = self.k;
        let out = k.tensor(k.sink.tensor);
        let (name, real) = (self.tensor_name(k.sink.tensor).to_string(), c_type(out.dtype));
        let extent = out.shape[o.dim];
        let inner: usize = out.shape[o.dim + 1..].iter().product();
        let slice = out.shape.iter().product::<usize>() / extent.max(1);
        let at = if o.dim == 0 {
            format!("row * {slice} + j")
        } else {
            format!("j / {inner} * {} + row * {inner} + j % {inner}", extent * inner)
        };
        self.line(1, "if (team_used > 1 && !unsorted) {");
        self.line(2, "for (int64_t t = 0; t < team_used; t++) {");
        self.line(3, "for (int64_t e = 0; e < 2; e++) {");
        self.line(4, "const int64_t row = edge_rows[2 * t + e];");
        self.line(4, "if (e == 1 && row == edge_rows[2 * t]) break;");
        self.line(4, &format!("const {real} *src = edges + (2 * t + e) * {slice};"));
        let update = self.d.fold(k.sink.reduction, &format!("{name}[{at}]"), "src[j]");
        self.line(4, &format!("for (int64_t j = 0; j < {slice}; j++) {update}"));
        self.line(3, "}");
        self.line(2, "}");
        self.line(1, "}");
        self.line(1, "free(edges);");
        self.line(1, "free(edge_rows);");
    }

    /// The programs `first..last` of the grid over `order` (outermost
    /// first), flattened: each program's tile indices come from its number.
    fn programs(&mut self, depth: usize, order: &[AxisId], first: &str, last: &str) {
        let k = self.k;
        self.line(depth, &format!("for (int64_t f = {first}; f < {last}; f++) {{"));
        let mut inside = 1;
        let mut tiles = Vec::new();
        for (n, &a) in order.iter().enumerate().rev() {
            let quotient = if inside == 1 { "f".to_string() } else { format!("(f / {inside})") };
            let e = if n == 0 { quotient } else { format!("{quotient} % {}", k.axis(a).tiles()) };
            tiles.push(format!("const int64_t {} = {e};", self.tile_var(a)));
            inside *= k.axis(a).tiles();
        }
        for t in tiles.iter().rev() {
            self.line(depth + 1, t);
        }
        if let Some(o) = self.owner {
            // A program whose rows are all inside the thread's first and last
            // row writes them directly.
            let (axis, rows) = (k.axis(o.axis), self.tensor_name(o.rows).to_string());
            let (t, tile, extent) = (self.tile_var(o.axis), axis.tile, axis.extent);
            self.line(depth + 1, "int edge = 0;");
            self.line(depth + 1, "if (owned) {");
            self.line(
                depth + 2,
                &format!("const int64_t q0 = {t} * {tile}, q1 = (q0 + {tile} < {extent} ? q0 + {tile} : {extent}) - 1;"),
            );
            self.line(depth + 2, &format!("edge = !({rows}[q0] > row_first && {rows}[q1] < row_last);"));
            self.line(depth + 1, "}");
        }
        self.program(depth + 1);
        self.line(depth, "}");
    }

    /// One program: its values, the loop over reduced tiles, the sink.
    fn program(&mut self, depth: usize) {
        let k = self.k;
        let in_phase = |p: &Printer, phase: Phase| -> Vec<ValueId> {
            k.order.iter().copied().filter(|&id| p.phases[id] == phase).collect()
        };
        for id in in_phase(self, Phase::Program) {
            self.emit(depth, id);
        }
        let reduced = k.reduced_axes();
        let sink_phase = self.phases[k.sink.value];
        if let Some(acc) = &k.accumulate {
            let dims: String =
                self.order(&acc.shape).iter().map(|&a| format!("[{}]", k.axis(a).tile)).collect();
            self.line(depth, &format!("{} acc{dims};", self.real()));
            let inner = self.open(depth, &acc.shape);
            let init =
                format!("acc{} = {};", self.order_index(&acc.shape), self.d.float(acc.reduction.identity()));
            self.line(inner, &init);
            self.close(inner, depth);
        }
        if !reduced.is_empty() {
            let mut d = depth;
            for &r in &reduced {
                let (t, tiles) = (self.tile_var(r), k.axis(r).tiles());
                self.line(d, &format!("for (int64_t {t} = 0; {t} < {tiles}; {t}++) {{"));
                d += 1;
            }
            for id in in_phase(self, Phase::Loop) {
                self.emit(d, id);
            }
            if let Some(acc) = k.accumulate.as_ref().filter(|a| !self.folds_into_acc(a.partial)) {
                let inner = self.open(d, &acc.shape);
                let target = format!("acc{}", self.order_index(&acc.shape));
                let update = self.d.fold(acc.reduction, &target, &self.elem(acc.partial));
                self.line(inner, &update);
                self.close(inner, d);
            }
            if sink_phase == Phase::Loop {
                self.sink(d);
            }
            self.close(d, depth);
        }
        for id in in_phase(self, Phase::Epilogue) {
            self.emit(depth, id);
        }
        if sink_phase != Phase::Loop {
            self.sink(depth);
        }
    }

    /// The write of the result: plain, or, for a program that touches its
    /// thread's first or last row, through the row buffers.
    fn sink(&mut self, depth: usize) {
        match self.owner {
            Some(o) => {
                self.line(depth, "if (edge) {");
                self.sink_loops(depth + 1, Some(o));
                self.line(depth, "} else {");
                self.sink_loops(depth + 1, None);
                self.line(depth, "}");
            }
            None => self.sink_loops(depth, None),
        }
    }

    fn sink_loops(&mut self, depth: usize, edge: Option<Owner>) {
        let k = self.k;
        let s = &k.sink;
        if let (Some(group), None) = (s.group, edge) {
            return self.grouped_sink_loops(depth, group);
        }
        let mut shape: Vec<AxisId> = s.index.iter().flat_map(|&i| k.value(i).shape.clone()).collect();
        shape.extend(k.value(s.value).shape.iter().copied());
        shape.extend(s.mask.map(|m| k.value(m).shape.clone()).unwrap_or_default());
        shape.sort();
        shape.dedup();
        // The innermost loop writes distinct elements when the output is
        // owned, or when one of its subscripts is that loop's range.
        let order = self.order(&shape);
        let distinct = s.exclusive
            || order
                .last()
                .is_some_and(|&a| s.index.iter().any(|&ix| k.value(strip(k, ix)).op == Op::Range(a)));
        let simd = edge.is_none() && distinct;
        // The mask is tested once its axes' loops are open, so that a mask
        // that does not vary along the innermost loop is not inside it: in
        // an `omp simd` loop gcc would turn the masked loads into gathers.
        let split = self.mask_split(&order, s.mask.as_slice());
        let outer = self.open_ordered(depth, &order[..split], simd && split == order.len());
        let masked = match s.mask {
            Some(m) => {
                let test = format!("if ({}) {{", self.elem(m));
                self.line(outer, &test);
                outer + 1
            }
            None => outer,
        };
        let target = format!("{}[{}]", self.out_ptr, self.address(s.tensor, &s.index));
        if let (None, Some(&a)) = (edge, order.last())
            && split < order.len()
            && self.sums_contiguously(a)
        {
            let inner = self.open_ordered(masked, &order[split..order.len() - 1], false);
            self.open_dot(inner);
            let body = self.open_ordered(inner, &[a], false);
            let value = self.elem(s.value);
            self.line(body, &format!("dot += {value};"));
            self.line(inner, "}");
            self.line(inner, &format!("{target} += dot;"));
            return self.close(inner, depth);
        }
        let inner = self.open_ordered(masked, &order[split..], simd);
        let out = k.tensor(s.tensor);
        let value = self.elem(s.value);
        let update = match edge {
            None => self.d.fold(s.reduction, &target, &value),
            Some(o) => {
                let real = c_type(out.dtype);
                let row = self.elem(s.index[o.dim]);
                let rest = self.address_without(s.tensor, &s.index, Some(o.dim));
                let to_edge = self.d.fold(s.reduction, &format!("sink_edge[{rest}]"), "sink_value");
                let direct = self.d.fold(s.reduction, &target, "sink_value");
                format!(
                    "const int64_t sink_row = {row};\nconst {real} sink_value = {value};\n\
                     {real} *sink_edge = sink_row == row_first ? edge_first : sink_row == row_last ? edge_last : NULL;\n\
                     if (sink_edge) {to_edge} else {direct}"
                )
            }
        };
        for line in update.lines() {
            self.line(inner, line);
        }
        self.close(inner, depth);
    }
}

impl Printer<'_> {
    /// Whether the sink's loop over `a` (its innermost) is a dot product
    /// that can run as SIMD lanes with partial sums: it sums into one
    /// element that `a` does not move, under no mask that changes along
    /// `a`, and every read moves by at most one element per step of `a`.
    /// Without the lanes the sum is one chain of dependent adds (`s[] =
    /// x[i] * y[i]` 3.3 ms for 4M f32, the adds' latency); with them it is
    /// reassociated, which the reference check's tolerance allows, as every
    /// BLAS does. A strided read would be gathered lane by lane, so those
    /// loops stay a chain.
    fn sums_contiguously(&self, a: AxisId) -> bool {
        let (k, s) = (self.k, &self.k.sink);
        s.reduction == Reduction::Sum
            && k.axis(a).tile > 1
            && s.index.iter().all(|&ix| !k.value(ix).shape.contains(&a))
            && self.unit_stride(s.value, a)
    }

    /// Declares a dot product's partial sum and marks the loop that follows
    /// as SIMD lanes summing into it.
    fn open_dot(&mut self, depth: usize) {
        self.line(depth, &format!("{} dot = 0;", self.real()));
        self.line(depth, "#pragma omp simd reduction(+:dot)");
    }

    /// Whether every read of value `id` moves by at most one element per
    /// step of axis `a`, under no mask that changes along `a` (gcc 12 does
    /// not vectorize a sum of loads masked lane by lane, a ragged last
    /// tile's: those stay a chain).
    fn unit_stride(&self, id: ValueId, a: AxisId) -> bool {
        let k = self.k;
        let value = k.value(id);
        if !value.shape.contains(&a) {
            return true;
        }
        if !self.inlined(id) {
            // A tile in a local array, row-major in the printer's order.
            return self.order(&value.shape).last() == Some(&a);
        }
        match &value.op {
            Op::Range(_) | Op::Const(_) | Op::ConstInt(_) => true,
            Op::Load { index, mask, .. } => {
                let Some((last, outer)) = index.split_last() else { return true };
                let moves = |ix: ValueId| k.value(ix).shape.contains(&a);
                outer.iter().all(|&ix| !moves(ix))
                    && (!moves(*last) || k.value(strip(k, *last)).op == Op::Range(a))
                    && mask.is_none_or(|m| !moves(m))
            }
            Op::Unary(_, x) | Op::Broadcast { value: x } => self.unit_stride(*x, a),
            Op::Binary(_, x, y) => self.unit_stride(*x, a) && self.unit_stride(*y, a),
            Op::Reduce { .. } | Op::Dot { .. } | Op::Accumulator => false,
        }
    }

    /// The sequential equivalent of a Sgap group (a program's elements run
    /// on one thread): the group's axis is the innermost loop, which folds
    /// each run of equal targets in a register and writes it once, a run
    /// ending where the target changes or a group of `lanes` ends. (A
    /// parallel group's target never changes within it.)
    fn grouped_sink_loops(&mut self, depth: usize, group: SinkGroup) {
        if self.row_runs(depth, group) {
            return;
        }
        let k = self.k;
        let s = &k.sink;
        let mut shape: Vec<AxisId> = s.operands().flat_map(|o| k.value(o).shape.clone()).collect();
        shape.sort();
        shape.dedup();
        let outer: Vec<AxisId> = self.order(&shape).into_iter().filter(|&a| a != group.axis).collect();
        let d = self.open_ordered(depth, &outer, false);
        let (real, identity) = (self.real(), self.d.float(s.reduction.identity()));
        self.line(d, "{");
        self.line(d + 1, "int64_t run_at = -1;");
        self.line(d + 1, &format!("{real} run_value = {identity};"));
        let i = self.axis_var(group.axis);
        let tile = k.axis(group.axis).tile;
        self.line(d + 1, &format!("for (int64_t {i} = 0; {i} < {tile}; {i}++) {{"));
        let mut inner = d + 2;
        if let Some(m) = s.mask {
            let test = format!("if ({}) {{", self.elem(m));
            self.line(inner, &test);
            inner += 1;
        }
        let flush = self.d.fold(s.reduction, &format!("{}[run_at]", self.out_ptr), "run_value");
        let at = format!("const int64_t at = {};", self.address(s.tensor, &s.index));
        let value = format!("const {real} v = {};", self.elem(s.value));
        let extend = self.d.fold(s.reduction, "run_value", "v");
        for line in [
            at,
            value,
            format!("if (at == run_at && {i} % {} != 0) {{", group.lanes),
            format!("  {extend}"),
            "} else {".to_string(),
            format!("  if (run_at >= 0) {flush}"),
            "  run_at = at;".to_string(),
            "  run_value = v;".to_string(),
            "}".to_string(),
        ] {
            self.line(inner, &line);
        }
        self.close(inner, d + 1);
        self.line(d + 1, &format!("if (run_at >= 0) {flush}"));
        self.line(d, "}");
        self.close(d, depth);
    }
}

impl Printer<'_> {
    /// The grouped sink where the target splits into a row that varies
    /// along the group's axis alone (`R[p]` of `C[R[p],n]`) and columns
    /// that do not vary along it (`n`): a run keeps a row of sums, the
    /// column loops innermost so they vectorize, and writes it once when
    /// the row changes or a group ends. False (nothing printed) where the
    /// target or the mask mixes the two.
    fn row_runs(&mut self, depth: usize, group: SinkGroup) -> bool {
        let k = self.k;
        let s = &k.sink;
        let g = group.axis;
        let varies = |id: ValueId| k.value(id).shape.contains(&g);
        let only_g = |id: ValueId| k.value(id).shape.iter().all(|&a| a == g);
        if s.index.iter().any(|&ix| varies(ix) && !only_g(ix)) {
            return false;
        }
        // The mask's factors: on the row alone, or off it.
        let mut masks = Vec::new();
        if let Some(m) = s.mask {
            k.conjuncts(m, &mut masks);
        }
        if masks.iter().any(|&m| varies(m) && !only_g(m)) {
            return false;
        }
        let (row_masks, col_masks): (Vec<ValueId>, Vec<ValueId>) =
            masks.into_iter().partition(|&m| varies(m));
        let mut shape: Vec<AxisId> = s.operands().flat_map(|o| k.value(o).shape.clone()).collect();
        shape.sort();
        shape.dedup();
        let cols: Vec<AxisId> = self.order(&shape).into_iter().filter(|&a| a != g).collect();
        // The flat offset split into the row's part and the columns'.
        let dims = &k.tensor(s.tensor).shape;
        let part = |p: &Self, row: bool| -> String {
            let terms: Vec<String> = s
                .index
                .iter()
                .enumerate()
                .filter(|&(_, &ix)| varies(ix) == row)
                .map(|(d, &ix)| {
                    let stride: usize = dims[d + 1..].iter().product();
                    let e = p.elem(ix);
                    if stride == 1 { e } else { p.d.scaled(&e, stride) }
                })
                .collect();
            if terms.is_empty() { "0".to_string() } else { terms.join(" + ") }
        };
        // The innermost column loop writes distinct elements where one of
        // the target's subscripts is its range.
        let distinct =
            cols.last().is_some_and(|&a| s.index.iter().any(|&ix| k.value(strip(k, ix)).op == Op::Range(a)));
        let (real, identity) = (self.real(), self.d.float(s.reduction.identity()));
        let run_dims: String = cols.iter().map(|&a| format!("[{}]", k.axis(a).tile)).collect();
        let run_at: String = cols.iter().map(|&a| format!("[{}]", self.axis_var(a))).collect();
        let test = |p: &Self, ms: &[ValueId]| -> Option<String> {
            (!ms.is_empty()).then(|| ms.iter().map(|&m| p.elem(m)).collect::<Vec<_>>().join(" && "))
        };
        // Column loops around `body`, each column mask tested once the
        // loops over its axes are open (as in the sink without groups).
        let columns = |p: &mut Self, d: usize, body: &str| {
            let split = p.mask_split(&cols, &col_masks);
            let outer = p.open_ordered(d, &cols[..split], distinct && split == cols.len());
            let tested = match test(p, &col_masks) {
                Some(t) => {
                    p.line(outer, &format!("if ({t}) {{"));
                    outer + 1
                }
                None => outer,
            };
            let inner = p.open_ordered(tested, &cols[split..], distinct);
            p.line(inner, body);
            p.close(inner, d);
        };
        let target = format!("{}[run_row + {}]", self.out_ptr, part(self, false));
        let flush = self.d.fold(s.reduction, &target, &format!("run{run_at}"));
        self.line(depth, "{");
        let d = depth + 1;
        self.line(d, "int64_t run_row = -1;");
        self.line(d, &format!("{real} run{run_dims};"));
        let i = self.axis_var(g);
        let tile = k.axis(g).tile;
        self.line(d, &format!("for (int64_t {i} = 0; {i} < {tile}; {i}++) {{"));
        if let Some(t) = test(self, &row_masks) {
            self.line(d + 1, &format!("if (!({t})) continue;"));
        }
        let row = part(self, true);
        self.line(d + 1, &format!("const int64_t row = {row};"));
        self.line(d + 1, &format!("if (row != run_row || {i} % {} == 0) {{", group.lanes));
        self.line(d + 2, "if (run_row >= 0) {");
        columns(self, d + 3, &flush);
        self.line(d + 2, "}");
        self.line(d + 2, "run_row = row;");
        columns(self, d + 2, &format!("run{run_at} = {identity};"));
        self.line(d + 1, "}");
        let add = self.d.fold(s.reduction, &format!("run{run_at}"), &self.elem(s.value));
        columns(self, d + 1, &add);
        self.line(d, "}");
        self.line(d, "if (run_row >= 0) {");
        columns(self, d + 1, &flush);
        self.line(d, "}");
        self.line(depth, "}");
        true
    }
}

impl Scope for Printer<'_> {
    type Dialect = C;

    fn kernel(&self) -> &Kernel {
        self.k
    }

    fn dialect(&self) -> &C {
        &self.d
    }

    fn names(&self) -> &Names {
        &self.names
    }

    fn inlined(&self, id: ValueId) -> bool {
        self.inline[id]
    }

    fn array(&self, id: ValueId) -> String {
        let value = self.k.value(id);
        match value.op {
            Op::Accumulator => self.at("acc", &value.shape),
            _ => self.at(&self.names.values[id], &value.shape),
        }
    }
}
