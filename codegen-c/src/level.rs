//! The C printer of the level path's loop trees ([`LevelKernel`]): dense
//! loops, position loops, merges of several levels with a branch per
//! lattice point, locates, and updates of the dense output. Values, literals
//! and functions are spelled by the shared [`Dialect`].
//!
//! When the kernel's outermost loop writes disjoint output elements per
//! iteration (a dense loop or a position loop over a unique level, bound to
//! an output index), it runs on OpenMP threads with no atomics and no
//! private copies.

use std::fmt::Write as _;

use spindle_ir::formats::DType;
use spindle_ir::kernel::{BinaryOp, TensorId};
use spindle_ir::lang::{BinOp, ElemType, Func};
use spindle_ir::level::{Expr, LevelKernel, LevelRef, Node, Position, Reach, VarId};

use ndarray::ArrayD;
use spindle_ir::tensor::Tensors;

use crate::dialect::{C, Dialect};
use crate::exec::{self, BackendError, SYMBOL};
use crate::namer::{Namer, valid_symbol};
use crate::print::{PrintError, c_type, preamble};
use crate::runtime::{Buffer, BufferKind};

/// Rows handed to a thread at a time: small enough to balance power-law
/// rows, large enough that the hand-out is rare.
const CHUNK: usize = 32;

/// The C source of a level kernel, its function named `symbol`, with the
/// same signature as the tile path's kernels.
pub fn print_level(kernel: &LevelKernel, symbol: &str) -> Result<String, PrintError> {
    if !valid_symbol(symbol) {
        return Err(PrintError {
            kernel: kernel.name.clone(),
            reason: format!("`{symbol}` cannot name a C function"),
        });
    }
    let mut namer = Namer::default();
    let tensors = kernel.tensors.iter().map(|(_, t)| namer.fresh("t_", &t.name)).collect();
    let vars = kernel.vars.iter().map(|(_, v)| namer.fresh("i_", &v.name)).collect();
    let double = kernel.tensors.values().any(|t| t.dtype == ElemType::Value(DType::F64));
    let mut p = Printer {
        k: kernel,
        d: C { real: if double { "double" } else { "float" } },
        tensors,
        vars,
        out: String::new(),
    };
    p.print(symbol);
    Ok(p.out)
}

struct Printer<'k> {
    k: &'k LevelKernel,
    d: C,
    tensors: Vec<String>,
    vars: Vec<String>,
    out: String,
}

impl Printer<'_> {
    fn line(&mut self, depth: usize, text: &str) {
        let _ = writeln!(self.out, "{}{text}", "    ".repeat(depth));
    }

    fn tensor(&self, t: TensorId) -> &str {
        &self.tensors[t.as_u32() as usize]
    }

    fn var(&self, v: VarId) -> &str {
        &self.vars[v.as_u32() as usize]
    }

    fn position(p: &Position) -> String {
        match p {
            Position::Root => "0".to_string(),
            Position::Level { tensor, level } => {
                format!("p_{}{level}", crate::namer::sanitize(tensor))
            }
        }
    }

    fn print(&mut self, symbol: &str) {
        let k = self.k;
        self.out.push_str(&preamble(&format!("level kernel `{}`", k.name), &k.to_string()));
        self.line(0, &format!("void {symbol}(void *const *args, int64_t nthreads) {{"));
        for (i, (id, t)) in k.tensors.iter().enumerate() {
            let constness = if t.output { "" } else { "const " };
            let line = format!("{constness}{} *restrict {} = args[{i}];", c_type(t.dtype), self.tensor(id));
            self.line(1, &line);
        }
        if k.parallel {
            self.line(1, "// Each iteration of the outermost loop writes its own output elements.");
            self.line(1, &format!("#pragma omp parallel for num_threads(nthreads) if(nthreads > 1) schedule(dynamic, {CHUNK})"));
        } else {
            self.line(1, "(void)nthreads;");
        }
        for n in &k.body {
            self.node(n, 1);
        }
        self.line(0, "}");
    }

    fn node(&mut self, n: &Node, depth: usize) {
        match n {
            Node::Dense { var, body } => {
                let (v, extent) = (self.var(*var).to_string(), self.k.var(*var).extent);
                self.line(depth, &format!("for (int64_t {v} = 0; {v} < {extent}; {v}++) {{"));
                body.iter().for_each(|b| self.node(b, depth + 1));
                self.line(depth, "}");
            }
            Node::Locate { level, var } => {
                let parent = Self::position(&level.parent());
                let at = match parent.as_str() {
                    "0" => self.var(*var).to_string(),
                    p => format!("{p} * {} + {}", level.extent, self.var(*var)),
                };
                self.line(depth, &format!("const int64_t {} = {at};", Self::position(&level.position())));
            }
            Node::Update { at, value } => {
                let out = self.tensor(self.k.output).to_string();
                let address = self.dense_address(self.k.output, at);
                let value = self.expr(value);
                let fold = self.d.fold(self.k.reduction, &format!("{out}[{address}]"), &value);
                self.line(depth, &fold);
            }
            Node::Merge { var, levels, full, points } => {
                if let ([level], false, [point]) = (&levels[..], full, &points[..]) {
                    self.position_loop(*var, level, &point.body, depth);
                } else {
                    self.merge(*var, levels, *full, points, depth);
                }
            }
        }
    }

    /// `begin` and `end` of a level's positions under its parent.
    fn range(&self, l: &LevelRef) -> (String, String) {
        let parent = Self::position(&l.parent());
        match &l.kind {
            Reach::Compressed { pos: Some(pos), .. } => {
                let pos = self.tensor(*pos);
                (format!("{pos}[{parent}]"), format!("{pos}[{parent} + 1]"))
            }
            Reach::Compressed { pos: None, len, .. } => ("0".to_string(), len.to_string()),
            Reach::Singleton { .. } => (parent.clone(), format!("{parent} + 1")),
            Reach::Padded { g, .. } => (format!("{parent} * {g}"), format!("{parent} * {g} + {g}")),
            Reach::Dense => unreachable!("dense levels are located, not walked"),
        }
    }

    fn crd(&self, l: &LevelRef) -> &str {
        match &l.kind {
            Reach::Compressed { crd, .. } | Reach::Singleton { crd } | Reach::Padded { crd, .. } => {
                self.tensor(*crd)
            }
            Reach::Dense => unreachable!("dense levels have no coordinates"),
        }
    }

    fn position_loop(&mut self, var: VarId, l: &LevelRef, body: &[Node], depth: usize) {
        let p = Self::position(&l.position());
        let (begin, end) = self.range(l);
        self.line(depth, &format!("for (int64_t {p} = {begin}; {p} < {end}; {p}++) {{"));
        let line = format!("const int64_t {} = {}[{p}];", self.var(var), self.crd(l));
        self.line(depth + 1, &line);
        body.iter().for_each(|b| self.node(b, depth + 1));
        self.line(depth, "}");
    }

    /// Co-iteration: every level's position advances when its coordinate
    /// is the current one; the branch taken is the lattice point of the
    /// levels that have it.
    fn merge(
        &mut self,
        var: VarId,
        levels: &[LevelRef],
        full: bool,
        points: &[spindle_ir::level::Point],
        depth: usize,
    ) {
        let v = self.var(var).to_string();
        self.line(depth, "{");
        let d = depth + 1;
        let ps: Vec<String> = levels.iter().map(|l| Self::position(&l.position())).collect();
        for (l, p) in levels.iter().zip(&ps) {
            let (begin, end) = self.range(l);
            self.line(d, &format!("int64_t {p} = {begin};"));
            self.line(d, &format!("const int64_t {p}_end = {end};"));
        }
        let inner = if full {
            let extent = self.k.var(var).extent;
            self.line(d, &format!("for (int64_t {v} = 0; {v} < {extent}; {v}++) {{"));
            for (l, p) in levels.iter().zip(&ps) {
                let crd = self.crd(l).to_string();
                self.line(d + 1, &format!("const int m_{p} = {p} < {p}_end && {crd}[{p}] == {v};"));
            }
            d + 1
        } else {
            let any: Vec<String> = points
                .iter()
                .map(|pt| {
                    let all: Vec<String> = ps
                        .iter()
                        .zip(&pt.present)
                        .filter(|(_, on)| **on)
                        .map(|(p, _)| format!("{p} < {p}_end"))
                        .collect();
                    format!("({})", all.join(" && "))
                })
                .collect();
            self.line(d, &format!("while ({}) {{", any.join(" || ")));
            for (l, p) in levels.iter().zip(&ps) {
                let crd = self.crd(l).to_string();
                self.line(d + 1, &format!("const int64_t c_{p} = {p} < {p}_end ? {crd}[{p}] : INT64_MAX;"));
            }
            let mut min = format!("c_{}", ps[0]);
            for p in &ps[1..] {
                min = format!("(c_{p} < {min} ? c_{p} : {min})");
            }
            self.line(d + 1, &format!("const int64_t {v} = {min};"));
            for p in &ps {
                self.line(d + 1, &format!("const int m_{p} = c_{p} == {v};"));
            }
            d + 1
        };
        let mut first = true;
        for pt in points {
            let cond: Vec<String> = ps
                .iter()
                .zip(&pt.present)
                .map(|(p, on)| if *on { format!("m_{p}") } else { format!("!m_{p}") })
                .collect();
            let keyword = if first { "if" } else { "} else if" };
            first = false;
            self.line(inner, &format!("{keyword} ({}) {{", cond.join(" && ")));
            pt.body.iter().for_each(|b| self.node(b, inner + 1));
        }
        if !points.is_empty() {
            self.line(inner, "}");
        }
        for p in &ps {
            self.line(inner, &format!("{p} += m_{p};"));
        }
        self.line(d, "}");
        self.line(depth, "}");
    }

    /// The row-major address of a dense tensor at loop variables.
    fn dense_address(&self, t: TensorId, at: &[VarId]) -> String {
        let shape = &self.k.tensor(t).shape;
        let mut address = String::new();
        for (dim, v) in at.iter().enumerate() {
            let stride: usize = shape[dim + 1..].iter().product();
            let term =
                if stride == 1 { self.var(*v).to_string() } else { format!("{} * {stride}", self.var(*v)) };
            if !address.is_empty() {
                address.push_str(" + ");
            }
            address.push_str(&term);
        }
        if address.is_empty() { "0".to_string() } else { address }
    }

    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Const(c) => self.d.float(*c),
            Expr::Stored { val, at } => format!("{}[{}]", self.tensor(*val), Self::position(at)),
            Expr::Dense { tensor, at } => {
                format!("{}[{}]", self.tensor(*tensor), self.dense_address(*tensor, at))
            }
            Expr::Neg(x) => format!("(-{})", self.expr(x)),
            Expr::Binary { op, lhs, rhs } => {
                let op = match op {
                    BinOp::Add => BinaryOp::Add,
                    BinOp::Sub => BinaryOp::Sub,
                    BinOp::Mul => BinaryOp::Mul,
                    BinOp::Div => BinaryOp::Div,
                };
                self.d.binary(op, &self.expr(lhs), &self.expr(rhs), spindle_ir::kernel::Scalar::Float)
            }
            Expr::Call { func, args } => {
                let args: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                match (func, &args[..]) {
                    (Func::Max, [x, y]) => {
                        self.d.binary(BinaryOp::Max, x, y, spindle_ir::kernel::Scalar::Float)
                    }
                    (Func::Min, [x, y]) => {
                        self.d.binary(BinaryOp::Min, x, y, spindle_ir::kernel::Scalar::Float)
                    }
                    (f, [x]) => self.d.func(*f, x),
                    _ => unreachable!("the checker fixes every function's arity"),
                }
            }
        }
    }
}

/// A level kernel compiled for the CPU.
#[derive(Debug)]
pub struct CLevelKernel {
    pub kernel: LevelKernel,
    pub source: String,
    pub program: crate::CProgram,
}

impl CLevelKernel {
    pub fn compile(kernel: &LevelKernel, compiler: &crate::Compiler) -> Result<CLevelKernel, BackendError> {
        let source = print_level(kernel, SYMBOL)?;
        let kinds = kernel.tensors.values().map(|t| BufferKind::for_elem(t.dtype)).collect();
        let program = compiler.compile(&source, SYMBOL)?.with_signature(kinds);
        Ok(CLevelKernel { kernel: kernel.clone(), source, program })
    }

    /// The buffers of a run, in argument order (see [`exec::buffers`]).
    pub fn buffers(&self, tensors: &Tensors) -> Result<Vec<Buffer>, BackendError> {
        exec::buffers(self.kernel.tensors.values(), self.kernel.init, tensors)
    }

    pub fn launch(&self, buffers: &mut [Buffer], threads: usize) -> Result<(), BackendError> {
        Ok(self.program.run(buffers, threads)?)
    }

    pub fn output(&self, buffers: &[Buffer], had_data: bool) -> Result<ArrayD<f64>, BackendError> {
        exec::output(self.kernel.tensors.values(), self.kernel.init, buffers, had_data)
    }

    /// Runs once on `tensors` and returns the output.
    pub fn run(&self, tensors: &Tensors, threads: usize) -> Result<ArrayD<f64>, BackendError> {
        let mut buffers = self.buffers(tensors)?;
        self.launch(&mut buffers, threads)?;
        let out = &self.kernel.tensor(self.kernel.output).name;
        self.output(&buffers, tensors.contains_key(out))
    }
}
