//! The C printer: a kernel becomes one C11 function with OpenMP,
//! `void NAME(void *const *args, int64_t nthreads)`, whose `args` are the
//! kernel's tensors in order (values as `double` for f64 and `float` for
//! f32, f16 and bf16, which are converted at the boundary; indices as
//! `int32_t` / `int64_t`).
//!
//! Programs become an OpenMP parallel loop over the tiles of the parallel
//! axes; every value becomes a small array over its tile shape, filled by a
//! loop nest the C compiler vectorizes; `dot` becomes a loop nest; the loop
//! over reduced tiles folds into an accumulator; the sink is a plain
//! read-modify-write when the program owns its outputs, and an OpenMP
//! atomic otherwise (plain when the kernel runs on one thread).

use std::fmt::Write as _;

use spindle_ir::formats::{DType, IType};
use spindle_ir::kernel::*;
use spindle_ir::lang::{ElemType, Func};

/// Tiles of one program may not exceed this many bytes in total: they live
/// on the thread's stack.
pub const MAX_PROGRAM_BYTES: usize = 1 << 20;

/// Private output copies are used while `size × threads` stays under this
/// many elements (256 MB of f32).
pub const PRIVATE_LIMIT: usize = 1 << 26;

/// A kernel the printer cannot express.
#[derive(Debug, thiserror::Error)]
#[error("cannot print kernel `{kernel}` as C: {reason}")]
pub struct PrintError {
    pub kernel: String,
    pub reason: String,
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
    Printer::new(kernel).print(symbol)
}

struct Printer<'k> {
    k: &'k Kernel,
    phases: Vec<Phase>,
    /// Values printed as expressions where they are used, not as arrays.
    inline: Vec<bool>,
    real: &'static str,
    out: String,
}

fn v(id: ValueId) -> String {
    format!("v{}", id.0)
}

impl<'k> Printer<'k> {
    fn new(k: &'k Kernel) -> Self {
        let double = k.tensors.iter().any(|t| t.dtype == ElemType::Value(DType::F64));
        let phases = k.phases();
        let inline = inlined(k, &phases);
        Printer { k, phases, inline, real: if double { "double" } else { "float" }, out: String::new() }
    }

    fn line(&mut self, depth: usize, text: &str) {
        let _ = writeln!(self.out, "{}{text}", "  ".repeat(depth));
    }

    /// The loop order (and array layout) of a shape: the parallel axes but
    /// the innermost, the reduced axes, then the innermost parallel axis,
    /// usually the contiguous one (the dense column of an SpMM).
    fn order(&self, shape: &[AxisId]) -> Vec<AxisId> {
        let parallel: Vec<AxisId> =
            shape.iter().copied().filter(|&a| self.k.axis(a).role == AxisRole::Parallel).collect();
        let reduced = shape.iter().copied().filter(|&a| self.k.axis(a).role == AxisRole::Reduced);
        match parallel.split_last() {
            Some((last, rest)) => rest.iter().copied().chain(reduced).chain([*last]).collect(),
            None => reduced.collect(),
        }
    }

    fn axis_var(&self, a: AxisId) -> String {
        format!("i_{}", self.k.axis(a).name)
    }

    fn tile_var(&self, a: AxisId) -> String {
        format!("t_{}", self.k.axis(a).name)
    }

    /// `name[i_a][i_b]` for a value of shape [a, b]; `name` for a scalar.
    fn at(&self, name: &str, shape: &[AxisId]) -> String {
        let mut s = name.to_string();
        for a in self.order(shape) {
            let _ = write!(s, "[{}]", self.axis_var(a));
        }
        s
    }

    /// A value's element inside a loop nest over (at least) its axes:
    /// the inlined expression, or a read of its array.
    fn elem(&self, id: ValueId) -> String {
        if self.inline[id.0 as usize] { self.expr(id) } else { self.array(id) }
    }

    fn array(&self, id: ValueId) -> String {
        self.at(&v(id), &self.k.value(id).shape)
    }

    fn ctype(&self, scalar: Scalar) -> &'static str {
        match scalar {
            Scalar::Float => self.real,
            Scalar::Int => "int64_t",
            Scalar::Bool => "unsigned char",
        }
    }

    /// Declares the array of a value.
    fn declare(&mut self, depth: usize, id: ValueId) {
        let value = self.k.value(id);
        let dims: String =
            self.order(&value.shape).iter().map(|&a| format!("[{}]", self.k.axis(a).tile)).collect();
        let text = format!("{} {}{dims};", self.ctype(value.scalar), v(id));
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

    fn func(&self, f: Func, x: &str) -> String {
        let single = self.real == "float";
        let call = |name: &str| format!("{name}{}({x})", if single { "f" } else { "" });
        match f {
            Func::Exp => call("exp"),
            Func::Sqrt => call("sqrt"),
            Func::Abs => call("fabs"),
            Func::Relu => format!("({x} > 0 ? {x} : 0)"),
            Func::Sigmoid => format!("(1 / (1 + {}))", call_neg_exp(x, single)),
            Func::Max | Func::Min => unreachable!("binary functions are binary ops"),
        }
    }

    /// The flat offset of a tensor element from index tiles.
    fn address(&self, tensor: TensorId, index: &[ValueId]) -> String {
        let dims = &self.k.tensor(tensor).shape;
        let mut terms = Vec::new();
        for (d, &ix) in index.iter().enumerate() {
            let stride: usize = dims[d + 1..].iter().product();
            let e = self.elem(ix);
            terms.push(if stride == 1 { e } else { format!("{e} * {stride}") });
        }
        if terms.is_empty() { "0".to_string() } else { terms.join(" + ") }
    }

    /// The statement that computes one element of a value.
    /// The C expression of one element of a value, in terms of the loop
    /// variables of its axes.
    fn expr(&self, id: ValueId) -> String {
        let value = self.k.value(id);
        match &value.op {
            Op::Range(a) => {
                let (t, tile, i) = (self.tile_var(*a), self.k.axis(*a).tile, self.axis_var(*a));
                format!("({t} * {tile} + {i})")
            }
            Op::Const(c) => c_float(*c),
            Op::ConstInt(c) => format!("(int64_t){c}"),
            Op::Load { tensor, index, mask } => {
                let t = self.k.tensor(*tensor);
                let address = self.address(*tensor, index);
                match mask {
                    None => format!("a_{}[{address}]", t.name),
                    // A masked load reads a safe element unconditionally and
                    // selects 0 where the mask is off: a contiguous load and a
                    // blend, which vectorize, instead of a masked gather.
                    Some(m) if t.shape.iter().product::<usize>() > 0 => {
                        let m = self.elem(*m);
                        let kind = if value.scalar == Scalar::Int { "int64_t" } else { self.real };
                        format!("select_{}({m}, a_{}[{m} ? {address} : 0])", kind.replace(' ', "_"), t.name)
                    }
                    Some(m) => format!("({} ? a_{}[{address}] : 0)", self.elem(*m), t.name),
                }
            }
            Op::Unary(UnaryOp::Neg, a) => format!("(-{})", self.elem(*a)),
            Op::Unary(UnaryOp::Func(f), a) => self.func(*f, &self.elem(*a)),
            Op::Binary(op, a, b) => {
                op.c_expr(&self.elem(*a), &self.elem(*b), self.real, self.ctype(value.scalar))
            }
            Op::Broadcast { value: a } => self.elem(*a),
            Op::Accumulator => format!("acc{}", self.order_index(&value.shape)),
            Op::Reduce { .. } | Op::Dot { .. } => unreachable!("reductions are always materialized"),
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
        if self.inline[id.0 as usize] {
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
            let init = format!("{} = {};", self.array(id), c_float(r.identity()));
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
        let inner = self.open(depth, &full);
        let term: Vec<String> = factors.iter().map(|&f| self.elem(f)).collect();
        let term = term.join(" * ");
        let target = if into_acc { format!("acc{}", self.order_index(&shape)) } else { self.array(id) };
        let update = fold(r, &target, &term, self.real);
        let text = match mask {
            Some(m) => format!("if ({}) {update}", self.elem(m)),
            None => update,
        };
        self.line(inner, &text);
        self.close(inner, depth);
    }

    fn print(mut self, symbol: &str) -> Result<String, PrintError> {
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
        self.line(0, &format!("// Spindle kernel `{}`, generated: do not edit.", k.name));
        for line in format!("{k}").lines() {
            self.line(0, &format!("// {line}"));
        }
        self.line(0, "#include <stdint.h>");
        self.line(0, "#include <math.h>");
        self.line(0, "#include <omp.h>");
        self.line(0, "#include <stdlib.h>");
        self.line(0, "");
        self.atomic_helpers();
        self.line(0, &format!("void {symbol}(void *const *args, int64_t nthreads) {{"));
        for (i, t) in k.tensors.iter().enumerate() {
            let constness = if t.output { "" } else { "const " };
            let line = format!("{constness}{} *restrict a_{} = args[{i}];", c_type(t.dtype), t.name);
            self.line(1, &line);
        }
        let parallel = k.parallel_axes();
        let out = k.tensor(k.sink.tensor);
        let size: usize = out.shape.iter().product();
        // Programs that may collide write through atomics only when several
        // threads run; when the output is small enough each thread gets a
        // private copy instead (no atomics at all), summed at the end.
        let colliding = !k.sink.exclusive && !parallel.is_empty();
        self.line(1, &format!("const int64_t out_size = {size};"));
        self.line(
            1,
            &format!(
                "int privatize = {} && nthreads > 1 && out_size * nthreads <= {PRIVATE_LIMIT};",
                colliding as u8
            ),
        );
        self.line(1, &format!("{} *priv = NULL;", self.real));
        self.line(1, "if (privatize) priv = malloc(sizeof *priv * out_size * nthreads);");
        self.line(1, "if (!priv) privatize = 0;");
        self.line(1, &format!("const int atomic = {} && nthreads > 1 && !privatize;", colliding as u8));
        self.line(1, "(void)atomic;");
        let real = self.real;
        let identity = c_float(k.sink.reduction.identity());
        let name = out.name.clone();
        let mut depth = 1;
        if parallel.is_empty() {
            self.line(1, &format!("{real} *restrict o_{name} = a_{name};"));
            self.program(1);
        } else {
            self.line(1, "#pragma omp parallel num_threads(nthreads)");
            self.line(1, "{");
            self.line(2, &format!("{real} *restrict o_{name} = a_{name};"));
            self.line(2, "if (privatize) {");
            self.line(3, &format!("o_{name} = priv + out_size * omp_get_thread_num();"));
            self.line(3, &format!("for (int64_t i = 0; i < out_size; i++) o_{name}[i] = {identity};"));
            self.line(2, "}");
            self.line(2, &format!("#pragma omp for collapse({}) schedule(static)", parallel.len()));
            depth = 2;
            for &a in &parallel {
                let (t, tiles) = (self.tile_var(a), k.axis(a).tiles());
                self.line(depth, &format!("for (int64_t {t} = 0; {t} < {tiles}; {t}++) {{"));
                depth += 1;
            }
            self.program(depth);
            for d in (2..depth).rev() {
                self.line(d, "}");
            }
            self.line(1, "}");
            self.line(1, "if (privatize) {");
            self.line(2, "#pragma omp parallel for num_threads(nthreads) schedule(static)");
            self.line(2, "for (int64_t i = 0; i < out_size; i++) {");
            self.line(3, "for (int64_t t = 0; t < nthreads; t++) {");
            let update = fold(k.sink.reduction, &format!("a_{name}[i]"), "priv[out_size * t + i]", real);
            self.line(4, &update);
            self.line(3, "}");
            self.line(2, "}");
            self.line(1, "}");
        }
        let _ = depth;
        self.line(1, "free(priv);");
        self.line(0, "}");
        Ok(self.out)
    }

    /// One program: its values, the loop over reduced tiles, the sink.
    fn program(&mut self, depth: usize) {
        let k = self.k;
        let in_phase = |p: &Printer, phase: Phase| -> Vec<ValueId> {
            k.order.iter().copied().filter(|id| p.phases[id.0 as usize] == phase).collect()
        };
        for id in in_phase(self, Phase::Program) {
            self.emit(depth, id);
        }
        let reduced = k.reduced_axes();
        let sink_phase = self.phases[k.sink.value.0 as usize];
        if let Some(acc) = &k.accumulate {
            let dims: String =
                self.order(&acc.shape).iter().map(|&a| format!("[{}]", k.axis(a).tile)).collect();
            self.line(depth, &format!("{} acc{dims};", self.real));
            let inner = self.open(depth, &acc.shape);
            let init =
                format!("acc{} = {};", self.order_index(&acc.shape), c_float(acc.reduction.identity()));
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
                let update = fold(acc.reduction, &target, &self.elem(acc.partial), self.real);
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

    /// The write of the result. When programs may collide, the atomic
    /// and the plain form are two loop nests chosen once, so the plain one
    /// (one thread) vectorizes.
    fn sink(&mut self, depth: usize) {
        let k = self.k;
        let s = &k.sink;
        if s.exclusive {
            self.sink_loops(depth, false);
        } else {
            self.line(depth, "if (atomic) {");
            self.sink_loops(depth + 1, true);
            self.line(depth, "} else {");
            self.sink_loops(depth + 1, false);
            self.line(depth, "}");
        }
    }

    fn sink_loops(&mut self, depth: usize, atomic: bool) {
        let k = self.k;
        let s = &k.sink;
        let mut shape: Vec<AxisId> = s.index.iter().flat_map(|&i| k.value(i).shape.clone()).collect();
        shape.extend(k.value(s.value).shape.iter().copied());
        shape.extend(s.mask.map(|m| k.value(m).shape.clone()).unwrap_or_default());
        shape.sort();
        shape.dedup();
        // Only an owned output is sure to be written at distinct places.
        let inner = self.open_loops(depth, &shape, s.exclusive && !atomic);
        let name = &k.tensor(s.tensor).name;
        let target = format!("o_{name}[{}]", self.address(s.tensor, &s.index));
        let value = self.elem(s.value);
        let update = match (atomic, s.reduction) {
            (false, r) => fold(r, &target, &value, self.real),
            (true, Reduction::Sum) => format!("{{\n#pragma omp atomic update\n{target} += {value};\n}}"),
            (true, Reduction::Max) => format!("atomic_max_{}(&{target}, {value});", self.real),
            (true, Reduction::Min) => format!("atomic_min_{}(&{target}, {value});", self.real),
        };
        let text = match s.mask {
            Some(m) => format!("if ({}) {{ {update} }}", self.elem(m)),
            None => update,
        };
        for line in text.lines() {
            self.line(inner, line);
        }
        self.close(inner, depth);
    }

    /// Atomic max / min on floats by compare-and-swap of their bits.
    fn atomic_helpers(&mut self) {
        for (real, bits) in [("float", "uint32_t"), ("double", "uint64_t")] {
            for (name, cmp) in [("max", ">"), ("min", "<")] {
                let text = format!(
                    "static inline void atomic_{name}_{real}({real} *p, {real} v) {{
  {bits} expected = __atomic_load_n(({bits} *)p, __ATOMIC_RELAXED);
  for (;;) {{
    {real} old;
    __builtin_memcpy(&old, &expected, sizeof old);
    if (!(v {cmp} old)) return;
    {bits} desired;
    __builtin_memcpy(&desired, &v, sizeof v);
    if (__atomic_compare_exchange_n(({bits} *)p, &expected, desired, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return;
  }}
}}"
                );
                for line in text.lines() {
                    self.line(0, line);
                }
            }
        }
        for kind in ["float", "double", "int64_t"] {
            self.line(
                0,
                &format!(
                    "static inline {kind} select_{kind}(unsigned char m, {kind} x) {{ return m ? x : 0; }}"
                ),
            );
        }
        self.line(0, "");
    }
}

fn call_neg_exp(x: &str, single: bool) -> String {
    format!("exp{}(-{x})", if single { "f" } else { "" })
}

/// Which values are printed inline: ranges, constants and the accumulator
/// always (they are expressions of loop variables); loads and arithmetic
/// used exactly once by a value of the same phase, so a gather feeding a
/// `dot` is read where the dot needs it instead of being copied first.
fn inlined(k: &Kernel, phases: &[Phase]) -> Vec<bool> {
    let mut uses = vec![0usize; k.values.len()];
    let mut user_phase = vec![None; k.values.len()];
    // A value read by a consumer of a larger shape would be recomputed for
    // every element it is broadcast over: keep it in its array.
    let mut broadcast = vec![false; k.values.len()];
    for &id in &k.order {
        let consumer = &k.value(id).shape;
        let loops = match &k.value(id).op {
            // A reduction's loops run over its operands' axes too.
            Op::Reduce { value, .. } => k.value(*value).shape.len(),
            Op::Dot { a, b, .. } => {
                let mut s: Vec<_> = k.value(*a).shape.iter().chain(&k.value(*b).shape).collect();
                s.sort();
                s.dedup();
                s.len()
            }
            _ => consumer.len(),
        };
        for o in k.operands(id) {
            uses[o.0 as usize] += 1;
            user_phase[o.0 as usize] = Some(phases[id.0 as usize]);
            if k.value(o).shape.len() < loops {
                broadcast[o.0 as usize] = true;
            }
        }
    }
    // The sink runs in its value's phase (in the loop for atomic per
    // element, after it otherwise), printed twice when it may be atomic.
    let sink = &k.sink;
    let sink_phase = phases[sink.value.0 as usize].max(Phase::Program);
    let sink_uses = 1;
    for o in sink.index.iter().chain([&sink.value]).chain(sink.mask.iter()) {
        uses[o.0 as usize] += sink_uses;
        user_phase[o.0 as usize] = Some(sink_phase);
    }
    // The accumulator folds its partial directly (see `Printer::program`).
    if let Some(acc) = &k.accumulate {
        uses[acc.partial.0 as usize] += 2;
    }
    k.values
        .iter()
        .enumerate()
        .map(|(i, v)| match v.op {
            Op::Range(_) | Op::Const(_) | Op::ConstInt(_) | Op::Accumulator => true,
            Op::Reduce { .. } | Op::Dot { .. } => false,
            _ => uses[i] == 1 && user_phase[i] == Some(phases[i]) && !broadcast[i],
        })
        .collect()
}

/// `target op= value` for a reduction, as a C statement.
fn fold(r: Reduction, target: &str, value: &str, real: &str) -> String {
    let f = if real == "float" { "f" } else { "" };
    match r {
        Reduction::Sum => format!("{target} += {value};"),
        Reduction::Max => format!("{target} = fmax{f}({target}, {value});"),
        Reduction::Min => format!("{target} = fmin{f}({target}, {value});"),
    }
}

/// A C literal for a float, infinities included.
fn c_float(x: f64) -> String {
    if x == f64::INFINITY {
        "INFINITY".to_string()
    } else if x == f64::NEG_INFINITY {
        "-INFINITY".to_string()
    } else {
        format!("{x:?}")
    }
}
