//! A Rust executor for the loop trees [`lower`](crate::lower) makes: a
//! convolution runs for a library user without a C compiler, and the C
//! backend's kernel is checked against it (both walk the same tree with the
//! same primitives).

use ndarray::ArrayD;
use spindle_ir::kernel::{OutputInit, Reduction};
use spindle_ir::level::{AffineOperand, Expr, LevelKernel, Node, Position, Reach, VarId, taps_order};
use spindle_ir::tensor::{TensorValue, Tensors};

use crate::subsect::{LevelView, Subsections, dense_values, lower_bound, ranges, ranges_from};

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("argument `{0}` of the kernel has no data")]
    Missing(String),
    #[error("argument `{name}` has {got} elements; the kernel reads {want}")]
    Shape { name: String, got: usize, want: usize },
    #[error("the executor runs subsection loop trees; this kernel has {0}")]
    Unsupported(&'static str),
}

/// Runs `kernel` on `data` (its arguments by name: the stored operands'
/// format arrays and the dense tensors, with the output's values where the
/// kernel accumulates into them) and returns the output.
///
/// ```
/// use std::collections::BTreeMap;
/// use spindle_formats::{Coo, FormatSpec};
/// use spindle_ir::kernel::schedule::Schedule;
/// use spindle_ir::lang::{check, declarations, parse};
/// use spindle_ir::tensor::{TensorValue, Tensors};
///
/// // A 1-D convolution over a sparse signal with entries at 2 and 8.
/// let st = parse("O[i] += I[i+p] * F[p]").unwrap();
/// let decl = declarations(&[("O", &[8], "f64"), ("I", &[10], "f64"), ("F", &[3], "f64")]);
/// let einsum = check(&st, &decl).unwrap();
/// let signal = Coo::new(vec![10], vec![vec![2, 8]], vec![1.0, 2.0]).unwrap();
/// let sparse = BTreeMap::from([("I".to_string(), signal)]);
/// let formats = BTreeMap::from([("I".to_string(), FormatSpec::Coo)]);
/// let lowered = spindle_conv::lower(&einsum, &formats, &sparse, &Schedule::default(), "conv").unwrap();
/// let mut data = lowered.arrays.clone();
/// data.insert("F".into(), TensorValue::Values(ndarray::arr1(&[1.0, 10.0, 100.0]).into_dyn()));
/// let out = spindle_conv::execute(&lowered.kernel, &data).unwrap();
/// assert_eq!(out.as_slice().unwrap(), [100.0, 10.0, 1.0, 0.0, 0.0, 0.0, 200.0, 20.0]);
/// ```
pub fn execute(kernel: &LevelKernel, data: &Tensors) -> Result<ArrayD<f64>, ExecError> {
    let mut values = Vec::new();
    let mut indices = Vec::new();
    for t in kernel.tensors.values() {
        let (v, i) = match data.get(&t.name) {
            Some(TensorValue::Values(a)) => (Some(standard(a.as_slice(), &t.name)?), None),
            Some(TensorValue::Indices(a)) => (None, Some(standard(a.as_slice(), &t.name)?)),
            None if t.output => (None, None),
            None => return Err(ExecError::Missing(t.name.clone())),
        };
        let want: usize = t.shape.iter().product();
        let got = v.map(<[f64]>::len).or(i.map(<[i64]>::len)).unwrap_or(want);
        if got != want {
            return Err(ExecError::Shape { name: t.name.clone(), got, want });
        }
        values.push(v);
        indices.push(i);
    }
    if kernel.assembly.is_some() || !kernel.locals.is_empty() {
        return Err(ExecError::Unsupported("a sparse output or temporaries"));
    }
    let views = kernel
        .affine
        .iter()
        .map(|o| {
            o.levels
                .iter()
                .map(|l| {
                    let index = |t: spindle_ir::kernel::TensorId| indices[t.as_u32() as usize].unwrap_or(&[]);
                    match &l.kind {
                        Reach::Dense => Ok(LevelView::Dense { extent: l.extent }),
                        Reach::Compressed { pos, crd, .. } => {
                            Ok(LevelView::Compressed { pos: pos.map(index), crd: index(*crd) })
                        }
                        Reach::Singleton { crd } => Ok(LevelView::Singleton { crd: index(*crd) }),
                        Reach::Padded { .. } => Err(ExecError::Unsupported("a padded level")),
                    }
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out_param = &kernel.tensors[kernel.output];
    let mut out = match kernel.init {
        OutputInit::Identity(r) => ArrayD::from_elem(out_param.shape.clone(), r.identity()),
        _ => ArrayD::<f64>::zeros(out_param.shape.clone()),
    };
    if kernel.init != OutputInit::Zero
        && let Some(TensorValue::Values(a)) = data.get(&out_param.name)
    {
        out.assign(a);
    }
    let mut run = Run {
        k: kernel,
        values,
        views,
        at: vec![0; kernel.vars.len()],
        bound: vec![false; kernel.vars.len()],
        resolved: vec![0; kernel.affine.len()],
        pos: kernel.affine.iter().map(|o| vec![0; o.levels.len()]).collect(),
        cursors: Vec::new(),
        hits: Vec::new(),
        out: out.as_slice_mut().expect("a new array is contiguous"),
    };
    run.nodes(&kernel.body)?;
    Ok(out)
}

fn standard<'a, T>(slice: Option<&'a [T]>, name: &str) -> Result<&'a [T], ExecError> {
    slice.ok_or_else(|| ExecError::Missing(format!("{name} (in row-major order)")))
}

/// An enclosing subsection loop of `level` of affine operand `operand`:
/// where its ranges stand (a resolve loop of its level, or the gathering of
/// a deeper subsection loop, starts there instead of searching), opened
/// with `bound` variables bound (its own included) and `resolved` levels of
/// the operand resolved.
struct Opened {
    operand: usize,
    level: usize,
    at: Cursor,
    bound: usize,
    resolved: usize,
}

/// Where a subsection loop's ranges stand.
enum Cursor {
    /// One range (every level above resolved).
    One(i64),
    /// Several: per range, its parent position (ascending) and cursor.
    Ranges(Vec<(i64, i64)>),
}

/// The updates a [`Node::Fill`] counts: one count per element of the
/// output indices bound inside it (`inner`, row-major), one in all where
/// none is.
struct Counted {
    inner: Vec<VarId>,
    counts: Vec<usize>,
}

struct Run<'a> {
    k: &'a LevelKernel,
    values: Vec<Option<&'a [f64]>>,
    views: Vec<Vec<LevelView<'a>>>,
    /// The bound variables' values.
    at: Vec<i64>,
    bound: Vec<bool>,
    /// Per affine operand: how many of its levels are resolved, and the
    /// position each resolved level is at.
    resolved: Vec<usize>,
    pos: Vec<Vec<i64>>,
    /// The enclosing subsection loops, innermost last.
    cursors: Vec<Opened>,
    /// The updates counted by each enclosing [`Node::Fill`].
    hits: Vec<Counted>,
    out: &'a mut [f64],
}

impl Run<'_> {
    fn nodes(&mut self, nodes: &[Node]) -> Result<(), ExecError> {
        nodes.iter().try_for_each(|n| self.node(n))
    }

    fn bind(&mut self, var: VarId, value: i64) {
        self.at[var.as_u32() as usize] = value;
        self.bound[var.as_u32() as usize] = true;
    }

    fn unbind(&mut self, var: VarId) {
        self.bound[var.as_u32() as usize] = false;
    }

    /// The window of a level of an operand under the bound variables.
    fn window(&self, o: &AffineOperand, level: usize) -> (i64, i64) {
        o.window(level, &self.k.vars, |v| {
            self.bound[v.as_u32() as usize].then(|| self.at[v.as_u32() as usize])
        })
    }

    fn parent(&self, operand: usize, level: usize) -> i64 {
        if level == 0 { 0 } else { self.pos[operand][level - 1] }
    }

    fn bound_count(&self) -> usize {
        self.bound.iter().filter(|b| **b).count()
    }

    /// The ranges' starts (cursor, end) at `level` of the enclosing
    /// subsection loop of that level, where a deeper one can gather from
    /// them: opened with the same levels resolved and no variable bound
    /// since, so its ranges are the positions the levels above reach now.
    fn reusable(&self, operand: usize, level: usize) -> Option<Vec<(i64, i64)>> {
        let o = self.opened(operand, level)?;
        if o.bound != self.bound_count() || o.resolved != self.resolved[operand] {
            return None;
        }
        let view = &self.views[operand][level];
        let starts = match &o.at {
            Cursor::One(cur) => vec![(*cur, view.children(self.parent(operand, level)).1)],
            Cursor::Ranges(by_parent) => {
                by_parent.iter().map(|&(p, cur)| (cur, view.children(p).1)).collect()
            }
        };
        Some(starts)
    }

    /// The innermost enclosing subsection loop of `level` of `operand`.
    fn opened(&self, operand: usize, level: usize) -> Option<&Opened> {
        self.cursors.iter().rev().find(|o| (o.operand, o.level) == (operand, level))
    }

    fn node(&mut self, n: &Node) -> Result<(), ExecError> {
        match n {
            Node::Dense { var, body } => {
                for x in 0..self.k.var(*var).extent as i64 {
                    self.bind(*var, x);
                    self.nodes(body)?;
                }
                self.unbind(*var);
            }
            Node::Subsect { var, operand, level, body } => {
                let o = &self.k.affine[*operand];
                let (lo, hi) = self.window(o, *level);
                let (coeff, extent) = (o.subscripts[*level].coeff(*var), self.k.var(*var).extent);
                let span = hi - lo - coeff * (extent as i64 - 1);
                let first = self.resolved[*operand];
                match self.views[*operand][*level] {
                    LevelView::Dense { extent: n } => {
                        for v in dense_values(n, lo, coeff, span, extent) {
                            self.bind(*var, v);
                            self.nodes(body)?;
                        }
                    }
                    view => {
                        let windows: Vec<(i64, i64)> = (0..=*level).map(|m| self.window(o, m)).collect();
                        let found = match (first..*level)
                            .rev()
                            .find_map(|m| self.reusable(*operand, m).map(|starts| (m, starts)))
                        {
                            Some((m, starts)) => {
                                ranges_from(&self.views[*operand], m, &starts, &windows, *level)
                            }
                            None => {
                                let parent = self.parent(*operand, first);
                                ranges(&self.views[*operand], first, parent, &windows, *level)
                            }
                        };
                        let parents: Vec<i64> = found.iter().map(|(p, _)| *p).collect();
                        let one = first == *level;
                        let found = found.into_iter().map(|(_, r)| r).collect();
                        let mut ss = Subsections::begin(view.crd(), found, lo, coeff, span, extent, 0);
                        while !ss.end() {
                            self.bind(*var, ss.offset());
                            let cursor = match one {
                                true => Cursor::One(ss.cursor(0)),
                                false => Cursor::Ranges(
                                    parents.iter().enumerate().map(|(r, &p)| (p, ss.cursor(r))).collect(),
                                ),
                            };
                            let bound = self.bound_count();
                            self.cursors.push(Opened {
                                operand: *operand,
                                level: *level,
                                at: cursor,
                                bound,
                                resolved: first,
                            });
                            self.nodes(body)?;
                            self.cursors.pop();
                            ss.next();
                        }
                    }
                }
                self.unbind(*var);
            }
            Node::Resolve { var, operand, level, body } => {
                let o = &self.k.affine[*operand];
                let (base, _) = self.window(o, *level);
                let (coeff, extent) = (o.subscripts[*level].coeff(*var), self.k.var(*var).extent);
                let parent = self.parent(*operand, *level);
                self.resolved[*operand] = level + 1;
                match self.views[*operand][*level] {
                    LevelView::Dense { extent: n } => {
                        for v in dense_values(n, base, coeff, 0, extent) {
                            self.bind(*var, v);
                            self.pos[*operand][*level] = parent * n as i64 + base + coeff * v;
                            self.nodes(body)?;
                        }
                    }
                    view => {
                        let crd = view.crd();
                        let (b, e) = view.children(parent);
                        let last = base + coeff * (extent as i64 - 1);
                        // Under a subsection loop of this level, from its
                        // cursor (at most this window's start).
                        let mut p = match self.opened(*operand, *level).map(|o| &o.at) {
                            Some(Cursor::One(cur)) => *cur,
                            Some(Cursor::Ranges(by_parent)) => {
                                match by_parent.binary_search_by_key(&parent, |(p, _)| *p) {
                                    Ok(k) => by_parent[k].1,
                                    Err(_) => lower_bound(crd, b, e, base),
                                }
                            }
                            None => lower_bound(crd, b, e, base),
                        };
                        while p < e && crd[p as usize] < base {
                            p += 1;
                        }
                        while p < e && crd[p as usize] <= last {
                            let d = crd[p as usize] - base;
                            if d % coeff == 0 {
                                self.bind(*var, d / coeff);
                                self.pos[*operand][*level] = p;
                                self.nodes(body)?;
                            }
                            p += 1;
                        }
                    }
                }
                self.resolved[*operand] = *level;
                self.unbind(*var);
            }
            Node::Taps { outer, inner, operand, level, body } => {
                let o = &self.k.affine[*operand];
                let (base, _) = self.window(o, *level);
                let (tried, solved) = taps_order(&self.k.vars, *outer, *inner);
                let coeff = |v: VarId| o.subscripts[*level].coeff(v);
                let extent = |v: VarId| self.k.var(v).extent as i64;
                let last = coeff(tried) * (extent(tried) - 1) + coeff(solved) * (extent(solved) - 1);
                let view = self.views[*operand][*level];
                let (crd, (b, e)) = (view.crd(), view.children(self.parent(*operand, *level)));
                self.resolved[*operand] = level + 1;
                let mut p = lower_bound(crd, b, e, base);
                while p < e && crd[p as usize] - base <= last {
                    let d = crd[p as usize] - base;
                    for x in 0..extent(tried) {
                        let rest = d - coeff(tried) * x;
                        if rest < 0 || rest % coeff(solved) != 0 || rest / coeff(solved) >= extent(solved) {
                            continue;
                        }
                        self.bind(tried, x);
                        self.bind(solved, rest / coeff(solved));
                        self.pos[*operand][*level] = p;
                        self.nodes(body)?;
                    }
                    p += 1;
                }
                self.resolved[*operand] = *level;
                self.unbind(*outer);
                self.unbind(*inner);
            }
            Node::Update { at, value } => {
                let v = self.expr(value);
                self.fold(at, v);
                let element = self.hits.last().map(|c| self.element(&c.inner));
                if let (Some(e), Some(c)) = (element, self.hits.last_mut()) {
                    c.counts[e] += 1;
                }
            }
            Node::Find { operand, level, body } => {
                let o = &self.k.affine[*operand];
                let (at, _) = self.window(o, *level);
                let parent = self.parent(*operand, *level);
                // Every entry at the coordinate: one on a unique level, a
                // run of them where coordinates repeat (COO's rows).
                let found = match self.views[*operand][*level] {
                    LevelView::Dense { extent } => match (0..extent as i64).contains(&at) {
                        true => parent * extent as i64 + at..parent * extent as i64 + at + 1,
                        false => 0..0,
                    },
                    view => {
                        let (b, e) = view.children(parent);
                        let first = lower_bound(view.crd(), b, e, at);
                        let run =
                            view.crd()[first as usize..e as usize].iter().take_while(|&&c| c == at).count();
                        first..first + run as i64
                    }
                };
                self.resolved[*operand] = level + 1;
                for p in found {
                    self.pos[*operand][*level] = p;
                    self.nodes(body)?;
                }
                self.resolved[*operand] = *level;
            }
            Node::Fill { at, points, body } => {
                let inner: Vec<VarId> =
                    at.iter().copied().filter(|v| !self.bound[v.as_u32() as usize]).collect();
                let len = inner.iter().map(|&v| self.k.vars[v].extent).product();
                self.hits.push(Counted { inner, counts: vec![0; len] });
                self.nodes(body)?;
                let Some(Counted { inner, counts }) = self.hits.pop() else { unreachable!("pushed above") };
                for (e, _) in counts.iter().enumerate().filter(|(_, n)| **n < *points) {
                    let mut rest = e;
                    for &v in inner.iter().rev() {
                        let extent = self.k.vars[v].extent;
                        self.bind(v, (rest % extent) as i64);
                        rest /= extent;
                    }
                    self.fold(at, 0.0);
                    inner.iter().for_each(|&v| self.unbind(v));
                }
            }
            Node::Merge { .. } => return Err(ExecError::Unsupported("a merge")),
            Node::Locate { .. } => return Err(ExecError::Unsupported("a located level")),
            Node::Entry { .. } | Node::Workspace { .. } | Node::Accumulate { .. } => {
                return Err(ExecError::Unsupported("a sparse output"));
            }
            Node::Store { .. } | Node::Clear { .. } | Node::Strip { .. } | Node::Rows { .. } => {
                return Err(ExecError::Unsupported("temporaries"));
            }
        }
        Ok(())
    }

    fn fold(&mut self, at: &[VarId], v: f64) {
        let shape = &self.k.tensors[self.k.output].shape;
        let address = self.address(shape, at);
        let slot = &mut self.out[address];
        *slot = match self.k.reduction {
            Reduction::Sum => *slot + v,
            Reduction::Max => slot.max(v),
            Reduction::Min => slot.min(v),
        };
    }

    /// The row-major number of the element `vars` are at.
    fn element(&self, vars: &[VarId]) -> usize {
        vars.iter().fold(0, |a, &v| a * self.k.vars[v].extent + self.at[v.as_u32() as usize] as usize)
    }

    fn address(&self, shape: &[usize], at: &[VarId]) -> usize {
        at.iter().zip(shape).fold(0, |a, (v, &n)| a * n + self.at[v.as_u32() as usize] as usize)
    }

    fn expr(&self, e: &Expr) -> f64 {
        match e {
            Expr::Const(c) => *c,
            Expr::Stored { val, at } => {
                let p = match at {
                    Position::Root => 0,
                    Position::Level { tensor, level } => {
                        let operand =
                            self.k.affine.iter().position(|o| &o.tensor == tensor).expect("a walked operand");
                        self.pos[operand][*level]
                    }
                };
                self.values[val.as_u32() as usize].expect("values")[p as usize]
            }
            Expr::Dense { tensor, at } => {
                let shape = &self.k.tensors[*tensor].shape;
                self.values[tensor.as_u32() as usize].expect("values")[self.address(shape, at)]
            }
            Expr::Local { .. } => unreachable!("the executor refuses temporaries"),
            Expr::Neg(x) => -self.expr(x),
            Expr::Binary { op, lhs, rhs } => op.apply(self.expr(lhs), self.expr(rhs)),
            Expr::Call { func, args } => {
                let args: Vec<f64> = args.iter().map(|a| self.expr(a)).collect();
                func.apply(&args)
            }
        }
    }
}
