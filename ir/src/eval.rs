//! The reference evaluator: the oracle every test compares against
//! (DESIGN.md §3). It walks the whole index space of a checked [`Einsum`]
//! with a plain odometer loop, in f64, with no cleverness: each access's
//! tensor and each index's slot in the point are looked up once before the
//! walk ([`plan`]), not at every point (15x faster: 0.7 µs a point on
//! indirect reads had made `--check` on GNN kernel 1 over cora take 15 s).

use ndarray::{ArrayD, Dimension, IxDyn};

use crate::lang::{Access, AssignOp, Atom, Diagnostic, Einsum, Expr, Ident, Span, Subscript, Term};
use crate::tensor::{TensorValue, Tensors};

mod plan;

/// Evaluates `einsum` on `tensors` and returns the output tensor.
///
/// - **Start.** For `=` the output starts at zero (data given for it is
///   ignored); for `+=`, `max=` and `min=` it starts from its data in
///   `tensors` when given, else from zeros.
/// - **Loop.** Every point of the index space (the indices of
///   `einsum.indices`, in that order, each over `0..extent`) computes the
///   right-hand side and combines it into the left-hand position: a sum for
///   `=` and `+=`, `f64::max` / `f64::min` for `max=` / `min=`. For `max=`
///   / `min=` with output data an entry is the max / min of its data and
///   every contribution; without data a reached entry is the max / min of
///   its contributions alone (a segment of negative values keeps a negative
///   max), and an entry no point reaches is 0, as torch_scatter does.
/// - **Subscripts** are affine: Σ coeff·atom + offset, where an atom is an
///   index's value or a value read from an integer tensor (indirect, which
///   may nest). A right-hand read outside its tensor's bounds reads 0 (the
///   fill value). A left-hand position outside the output is dropped; only
///   affine subscripts can produce one, since indirect ones are checked.
/// - **Errors, before anything is evaluated.** Every access is checked at
///   every point first. An indirect access that is a whole subscript
///   (`B[X[p], i]`, coefficient 1, no offset) must give a value inside that
///   dimension of its target, and every read of an integer tensor must be
///   inside that tensor; otherwise a [`Diagnostic`] at the indirect access
///   names the index tensor, the position, the value and the target. An
///   indirect atom inside a larger affine subscript only has to be readable;
///   the combined value follows the fill rule. Missing data, wrong shapes
///   and value/index mismatches are diagnostics too.
/// - Division by zero follows IEEE (inf or NaN); it is not an error.
pub fn evaluate(einsum: &Einsum, tensors: &Tensors) -> Result<ArrayD<f64>, Diagnostic> {
    let st = &einsum.statement;
    check_size(einsum)?;
    check_data(einsum, tensors)?;
    let out_shape = einsum.output().shape.clone();
    // (Output data of the wrong kind or shape for `+=` etc. fails check_data.)
    let out = match (st.op, tensors.get(&st.lhs.tensor.name)) {
        (AssignOp::Assign, _) | (_, None) => ArrayD::zeros(IxDyn(&out_shape)),
        (_, Some(TensorValue::Values(data))) => data.clone(),
        (_, Some(TensorValue::Indices(data))) => data.mapv(|x| x as f64),
    };
    // The index space, an odometer over the extents in `einsum.indices` order.
    let extents: Vec<usize> = einsum.indices.iter().map(|i| i.extent).collect();
    let store = plan::Store::new(tensors);
    let resolver = plan::Resolver { einsum, store: &store, shapes: tensors };
    match (resolver.read(&st.lhs, Some(&out_shape)), resolver.value(&st.rhs)) {
        (Some(lhs), Some(rhs)) => walk(einsum, tensors, &extents, &lhs, &rhs, out),
        // Something the plan cannot resolve: the plain walk reports it.
        _ => walk_plainly(einsum, tensors, &extents, out),
    }
}

/// The two passes over the index space (see [`evaluate`]) with the reads
/// resolved once ([`plan`]); where a step gives up, [`At`] at that point
/// reports the diagnostic.
fn walk(
    einsum: &Einsum,
    tensors: &Tensors,
    extents: &[usize],
    lhs: &plan::Read<'_>,
    rhs: &plan::Value<'_>,
    out: ArrayD<f64>,
) -> Result<ArrayD<f64>, Diagnostic> {
    let st = &einsum.statement;
    let explained = |point: &[usize], access: Option<&Access>| -> Diagnostic {
        let at = At { einsum, tensors, point };
        let why = match access {
            Some(a) => at.shape(&a.tensor).and_then(|shape| at.position(a, shape)).err(),
            None => at.expr(&st.rhs).err(),
        };
        why.unwrap_or_else(|| Diagnostic::new("the evaluator's plan and its walk disagree here", st.span))
    };
    // Pass 1: check every access at every point; nothing is evaluated.
    // Only a read through an index tensor can fail: the walk is skipped
    // where there is none (half of a convolution's reference time), and
    // walks only the indices such reads depend on, the others at 0 (where
    // each has a point): the first point that fails in that walk is the
    // first in the whole walk, since a failing point with its other
    // indices at 0 still fails and comes no later.
    let accesses: Vec<&Access> = std::iter::once(&st.lhs).chain(st.rhs.accesses()).collect();
    let mut reads = vec![lhs];
    rhs.reads(&mut reads);
    let fallible: Vec<(&&plan::Read<'_>, &&Access)> =
        reads.iter().zip(&accesses).filter(|(r, _)| r.fallible()).collect();
    if !fallible.is_empty() && !extents.contains(&0) {
        let mut used = vec![false; extents.len()];
        fallible.iter().for_each(|(read, _)| read.slots(&mut used));
        let walked: Vec<usize> = extents.iter().zip(&used).map(|(&n, &u)| if u { n } else { 1 }).collect();
        plan::each_point(&walked, |point, moved| {
            match fallible.iter().find(|(read, _)| read.offset_after(point, moved).is_err()) {
                Some((_, access)) => Err(explained(point, Some(access))),
                None => Ok(()),
            }
        })?;
    }
    // Pass 2: evaluate and combine. `fresh` marks max= / min= entries
    // without data that no contribution has reached yet.
    let no_data = !tensors.contains_key(&st.lhs.tensor.name);
    let mut out = out.as_standard_layout().into_owned();
    let mut fresh = vec![no_data; out.len()];
    let slots = out.as_slice_mut().expect("a standard layout");
    plan::each_point(extents, |point, moved| {
        let value = rhs.at(point, moved).map_err(|_| explained(point, None))?;
        if let Some(o) = lhs.offset_after(point, moved).map_err(|_| explained(point, Some(&st.lhs)))? {
            let first = std::mem::replace(&mut fresh[o], false);
            slots[o] = combine(st.op, first, slots[o], value);
        }
        Ok(())
    })?;
    Ok(out)
}

/// An output entry after one more contribution `value` (`first`: the
/// first to reach an entry without data, for max= / min=).
fn combine(op: AssignOp, first: bool, slot: f64, value: f64) -> f64 {
    match op {
        AssignOp::Assign | AssignOp::AddAssign => slot + value,
        AssignOp::MaxAssign | AssignOp::MinAssign if first => value,
        AssignOp::MaxAssign => slot.max(value),
        AssignOp::MinAssign => slot.min(value),
    }
}

/// [`walk`] by names at every point: the plain walk, and what reports
/// what the plan cannot resolve.
fn walk_plainly(
    einsum: &Einsum,
    tensors: &Tensors,
    extents: &[usize],
    mut out: ArrayD<f64>,
) -> Result<ArrayD<f64>, Diagnostic> {
    let st = &einsum.statement;
    let out_shape = out.shape().to_vec();
    let space = || ndarray::indices(IxDyn(extents)).into_iter();
    // Pass 1: check every access at every point; nothing is evaluated.
    let accesses: Vec<&Access> = std::iter::once(&st.lhs).chain(st.rhs.accesses()).collect();
    for point in space() {
        let at = At { einsum, tensors, point: point.slice() };
        for access in &accesses {
            at.position(access, at.shape(&access.tensor)?)?;
        }
    }
    // Pass 2: evaluate and combine.
    let no_data = !tensors.contains_key(&st.lhs.tensor.name);
    let mut fresh = ArrayD::from_elem(IxDyn(&out_shape), no_data);
    for point in space() {
        let at = At { einsum, tensors, point: point.slice() };
        let value = at.expr(&st.rhs)?;
        if let Some(pos) = in_bounds(&at.position(&st.lhs, &out_shape)?, &out_shape) {
            let first = std::mem::replace(&mut fresh[IxDyn(&pos)], false);
            let slot = &mut out[IxDyn(&pos)];
            *slot = combine(st.op, first, *slot, value);
        }
    }
    Ok(out)
}

/// The most index-space points the evaluator walks (about ten minutes).
pub const MAX_POINTS: u128 = 1 << 32;

/// Refuses index spaces and outputs too large to walk or hold.
fn check_size(einsum: &Einsum) -> Result<(), Diagnostic> {
    let st = &einsum.statement;
    let points: u128 = einsum.indices.iter().map(|i| i.extent as u128).product();
    if points > MAX_POINTS {
        let extents: Vec<String> =
            einsum.indices.iter().map(|i| format!("{} {}", i.name, i.extent)).collect();
        return Err(Diagnostic::new(
            format!(
                "the index space has {points} points ({}), more than the reference evaluator walks",
                extents.join(" x ")
            ),
            st.span,
        )
        .with_note(format!(
            "the limit is {MAX_POINTS}; store sparse operands in a format so only their entries are visited"
        )));
    }
    let out = &einsum.output().shape;
    let size = out.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    spindle_formats::check_array::<f64>(&format!("output {}", st.lhs.tensor.name), size)
        .map_err(|e| Diagnostic::new(e.to_string(), st.lhs.span))?;
    Ok(())
}

/// Every tensor the checker knows has data of the checked shape and kind
/// (the output's data is optional, and ignored for `=`).
fn check_data(einsum: &Einsum, tensors: &Tensors) -> Result<(), Diagnostic> {
    let st = &einsum.statement;
    for (name, info) in &einsum.tensors {
        let is_output = *name == st.lhs.tensor.name;
        let data = match tensors.get(name) {
            _ if is_output && st.op == AssignOp::Assign => continue,
            None if is_output => continue,
            None => return fail(format!("no data given for tensor {name}"), st.span),
            Some(data) => data,
        };
        if data.shape() != info.shape.as_slice() {
            let (shape, checked) = (data.shape(), &info.shape);
            return fail(format!("data for {name} has shape {shape:?} but {checked:?} was checked"), st.span);
        }
    }
    check_index_data(einsum, tensors)
}

/// Every index tensor (by its dtype) given integer data: integer data may
/// be read as values, value data cannot index. The diagnostic points at
/// the `where` that gives the dtype, else at the tensor's first read.
pub fn check_index_data(einsum: &Einsum, tensors: &Tensors) -> Result<(), Diagnostic> {
    let st = &einsum.statement;
    for (name, info) in &einsum.tensors {
        if !info.dtype.is_index() || !matches!(tensors.get(name), Some(TensorValue::Values(_))) {
            continue;
        }
        let said = st.wheres.iter().find_map(|w| match w {
            crate::lang::WhereClause::Dtype { tensor, span, .. } if tensor.name == *name => Some(*span),
            _ => None,
        });
        let first = st
            .all_accesses()
            .into_iter()
            .filter(|a| a.tensor.name == *name)
            .map(|a| a.span)
            .min_by_key(|s| s.start);
        let span = said.or(first).unwrap_or(st.span);
        return Err(Diagnostic::new(format!("`{name}` is an index tensor, but its data are values"), span)
            .with_label(format!("{name} is {}", info.dtype.name()))
            .with_note(format!("give `{name}` integer data, or a value dtype")));
    }
    Ok(())
}

/// Every value of an index tensor that is a whole subscript (`x[P[j]]`,
/// `C[AM[p],n]`) and read at plain indices (so at every element) lies in
/// the dimension it indexes: a mistake in the data, said before any kernel
/// runs (each kernel checks too, as it trusts them; [`evaluate`] reports
/// the first bad read in its walk's order instead). Needs only the index
/// tensors' data: the operands may be stored in formats.
pub fn check_index_ranges(einsum: &Einsum, tensors: &Tensors) -> Result<(), Diagnostic> {
    for outer in einsum.statement.all_accesses() {
        let Some(info) = einsum.tensors.get(&outer.tensor.name) else { continue };
        for (dim, sub) in outer.subscripts.iter().enumerate() {
            let ([Term { coeff: 1, atom: Atom::Indirect(inner), .. }], 0) = (&sub.terms[..], sub.offset)
            else {
                continue;
            };
            let plain = inner.subscripts.iter().all(|s| matches!(&s.terms[..], [t] if t.coeff == 1 && s.offset == 0 && matches!(t.atom, Atom::Index(_))));
            let (Some(TensorValue::Indices(data)), true) = (tensors.get(&inner.tensor.name), plain) else {
                continue;
            };
            let Some(&extent) = info.shape.get(dim) else { continue };
            if let Some(message) =
                crate::tensor::out_of_range(&inner.tensor.name, data, &outer.tensor.name, dim, extent)
            {
                return Err(Diagnostic::new(message, inner.span)
                    .with_label(format!("must be below {extent}"))
                    .with_note(format!(
                        "every value of `{}` must index `{}`",
                        inner.tensor.name, outer.tensor.name
                    )));
            }
        }
    }
    Ok(())
}

/// The raw position as `usize`s when it is inside `shape`.
fn in_bounds(raw: &[i128], shape: &[usize]) -> Option<Vec<usize>> {
    raw.iter().zip(shape).map(|(&v, &n)| usize::try_from(v).ok().filter(|&u| u < n)).collect()
}

fn fail<T>(message: String, span: Span) -> Result<T, Diagnostic> {
    Err(Diagnostic::new(message, span))
}

/// `X[3, 1]`, or `X` for a scalar.
fn show(name: &str, pos: &[impl std::fmt::Display]) -> String {
    let parts: Vec<String> = pos.iter().map(ToString::to_string).collect();
    if parts.is_empty() { name.to_string() } else { format!("{name}[{}]", parts.join(", ")) }
}

/// The statement at one point of the index space.
struct At<'a> {
    einsum: &'a Einsum,
    tensors: &'a Tensors,
    point: &'a [usize],
}

impl At<'_> {
    fn shape(&self, tensor: &Ident) -> Result<&[usize], Diagnostic> {
        match self.einsum.tensors.get(&tensor.name) {
            Some(info) => Ok(&info.shape),
            None => fail(format!("unknown tensor {}", tensor.name), tensor.span),
        }
    }

    fn data(&self, tensor: &Ident) -> Result<&TensorValue, Diagnostic> {
        let msg = || format!("no data given for tensor {}", tensor.name);
        self.tensors.get(&tensor.name).ok_or_else(|| Diagnostic::new(msg(), tensor.span))
    }

    fn expr(&self, e: &Expr) -> Result<f64, Diagnostic> {
        Ok(match e {
            Expr::Literal { value, .. } => *value,
            Expr::Access(a) => {
                // An integer tensor read as a value reads its integers.
                let data = self.data(&a.tensor)?;
                match (in_bounds(&self.position(a, data.shape())?, data.shape()), data) {
                    (None, _) => 0.0,
                    (Some(pos), TensorValue::Values(v)) => v[IxDyn(&pos)],
                    (Some(pos), TensorValue::Indices(x)) => x[IxDyn(&pos)] as f64,
                }
            }
            Expr::Neg { expr, .. } => -self.expr(expr)?,
            Expr::Binary { op, lhs, rhs, .. } => op.apply(self.expr(lhs)?, self.expr(rhs)?),
            Expr::Call { func, args, span } => {
                let args = args.iter().map(|a| self.expr(a)).collect::<Result<Vec<f64>, _>>()?;
                if args.len() != func.arity() {
                    return fail(format!("{} takes {} arguments", func.name(), func.arity()), *span);
                }
                func.apply(&args)
            }
        })
    }

    /// The position `access` names in a tensor of `shape`, unchecked
    /// against the bounds except for whole-subscript indirect accesses.
    fn position(&self, access: &Access, shape: &[usize]) -> Result<Vec<i128>, Diagnostic> {
        if access.subscripts.len() != shape.len() {
            return fail(format!("{} has rank {}", access.tensor.name, shape.len()), access.span);
        }
        let mut raw = Vec::with_capacity(shape.len());
        for (dim, s) in access.subscripts.iter().enumerate() {
            if let ([Term { coeff: 1, atom: Atom::Indirect(x), .. }], 0) = (&s.terms[..], s.offset) {
                let (pos, v) = self.read_index(x)?;
                if usize::try_from(v).map_or(true, |u| u >= shape[dim]) {
                    let (at, target, n) = (show(&x.tensor.name, &pos), &access.tensor.name, shape[dim]);
                    let msg =
                        format!("{at} = {v} is out of range for dimension {dim} of {target} (extent {n})");
                    return fail(msg, x.span);
                }
                raw.push(i128::from(v));
            } else {
                raw.push(self.subscript(s)?);
            }
        }
        Ok(raw)
    }

    /// Σ coeff·atom + offset.
    fn subscript(&self, s: &Subscript) -> Result<i128, Diagnostic> {
        let mut sum = i128::from(s.offset);
        for t in &s.terms {
            let v = match &t.atom {
                Atom::Index(ident) => self.index(ident)? as i128,
                Atom::Indirect(x) => i128::from(self.read_index(x)?.1),
            };
            let overflow = || Diagnostic::new("subscript value overflows", s.span);
            sum = sum.checked_add(i128::from(t.coeff) * v).ok_or_else(overflow)?;
        }
        Ok(sum)
    }

    fn index(&self, ident: &Ident) -> Result<usize, Diagnostic> {
        match self.einsum.indices.iter().position(|i| i.name == ident.name) {
            Some(k) => Ok(self.point[k]),
            None => fail(format!("unknown index {}", ident.name), ident.span),
        }
    }

    /// Reads the integer tensor `x`: its position and the value there.
    fn read_index(&self, x: &Access) -> Result<(Vec<usize>, i64), Diagnostic> {
        let TensorValue::Indices(data) = self.data(&x.tensor)? else {
            return fail(format!("{} holds values, not indices", x.tensor.name), x.span);
        };
        let raw = self.position(x, data.shape())?;
        let Some(pos) = in_bounds(&raw, data.shape()) else {
            let (at, shape) = (show(&x.tensor.name, &raw), data.shape());
            return fail(format!("{at} is outside {} (shape {shape:?})", x.tensor.name), x.span);
        };
        let value = data[IxDyn(&pos)];
        Ok((pos, value))
    }
}

#[cfg(test)]
mod tests {
    use ndarray::{ArrayD, IxDyn};

    use super::*;
    use crate::lang::{Declaration, Declarations, ElemType, check, parse};

    /// A tensor's name, shape and whether it holds indices.
    type Operand<'a> = (&'a str, &'a [usize], bool);

    /// The planned walk and the plain one agree (the plain one stays what
    /// reports what a plan cannot resolve): indirect, nested and affine
    /// reads, reads outside (the fill), max=, functions.
    #[test]
    fn the_planned_walk_computes_what_the_plain_walk_does() {
        let cases: [(&str, &[Operand]); 6] = [
            (
                "C[AM[p],n] += AV[p,q] * B[AK[p,q],n]",
                &[
                    ("C", &[5, 3], false),
                    ("AM", &[4], true),
                    ("AV", &[4, 2], false),
                    ("AK", &[4, 2], true),
                    ("B", &[5, 3], false),
                ],
            ),
            (
                "O[i] max= I[2*i+p-1] * F[p] - 0.5",
                &[("O", &[4], false), ("I", &[9], false), ("F", &[3], false)],
            ),
            (
                "y[i] = exp(A[i,X[j]]) + max(x[j], 0.3)",
                &[("y", &[3], false), ("A", &[3, 4], false), ("X", &[4], true), ("x", &[4], false)],
            ),
            // The last index stepping in and out of a read's range (the
            // offset moved, not summed again), at two dimensions at once,
            // with a negative coefficient, and beside an index read.
            (
                "O[i,j] += I[i+2*q-2,j-q+1] * F[q] * W[X[i],q]",
                &[
                    ("O", &[4, 3], false),
                    ("I", &[5, 4], false),
                    ("F", &[4], false),
                    ("W", &[3, 4], false),
                    ("X", &[4], true),
                ],
            ),
            // One index: every step is of the last digit.
            ("y[i] = x[2*i-1] + x[X[i]]", &[("y", &[5], false), ("x", &[6], false), ("X", &[5], true)]),
            (
                "C[m,n] += A[m,k] * B[k,n] + A[n,m+k]",
                &[("C", &[4, 4], false), ("A", &[4, 5], false), ("B", &[5, 4], false)],
            ),
        ];
        for (statement, shapes) in cases {
            let mut decls = Declarations::new();
            let mut tensors = Tensors::new();
            for (n, &(name, shape, index)) in shapes.iter().enumerate() {
                let dtype = if index {
                    ElemType::Index(crate::formats::IType::I32)
                } else {
                    ElemType::Value(crate::formats::DType::F64)
                };
                decls.insert(name.to_string(), Declaration { shape: shape.to_vec(), dtype });
                let len: usize = shape.iter().product();
                let value = match index {
                    true => TensorValue::Indices(ArrayD::from_shape_fn(IxDyn(shape), |p| {
                        ((p.slice().iter().sum::<usize>() + n) % 5 % shapes[0].1[0].max(1)) as i64
                    })),
                    false => TensorValue::Values(
                        ArrayD::from_shape_vec(
                            IxDyn(shape),
                            (0..len).map(|v| 0.25 + ((v * 7 + n) % 11) as f64 / 8.0).collect(),
                        )
                        .unwrap(),
                    ),
                };
                tensors.insert(name.to_string(), value);
            }
            let einsum = check(&parse(statement).unwrap(), &decls).unwrap();
            let planned = evaluate(&einsum, &tensors).unwrap();
            let extents: Vec<usize> = einsum.indices.iter().map(|i| i.extent).collect();
            let start = match &tensors[&einsum.statement.lhs.tensor.name] {
                TensorValue::Values(v) if einsum.statement.op != AssignOp::Assign => v.clone(),
                _ => ArrayD::zeros(IxDyn(&einsum.output().shape)),
            };
            let plain = walk_plainly(&einsum, &tensors, &extents, start).unwrap();
            assert_eq!(planned, plain, "{statement}");
            assert!(planned.iter().any(|&v| v != 0.0), "{statement}");
        }
    }

    /// A subscript that an index tensor's value carries past 64 bits is
    /// outside its tensor (the fill value), in the planned walk as in the
    /// plain one's 128 bits (the plan gave up, and the user read "the
    /// evaluator's plan and its walk disagree").
    #[test]
    fn an_index_value_past_64_bits_reads_the_fill_value() {
        let mut decls = Declarations::new();
        decls.insert(
            "y".into(),
            Declaration { shape: vec![2], dtype: ElemType::Value(crate::formats::DType::F64) },
        );
        decls.insert(
            "x".into(),
            Declaration { shape: vec![4], dtype: ElemType::Value(crate::formats::DType::F64) },
        );
        decls.insert(
            "X".into(),
            Declaration { shape: vec![2], dtype: ElemType::Index(crate::formats::IType::I64) },
        );
        let einsum = check(&parse("y[i] = x[2*X[i]]").unwrap(), &decls).unwrap();
        let mut tensors = Tensors::new();
        tensors.insert("x".into(), TensorValue::Values(ArrayD::from_elem(IxDyn(&[4]), 1.5)));
        tensors.insert(
            "X".into(),
            TensorValue::Indices(ArrayD::from_shape_vec(IxDyn(&[2]), vec![1i64 << 62, 1]).unwrap()),
        );
        let planned = evaluate(&einsum, &tensors).unwrap();
        assert_eq!(planned.as_slice().unwrap(), [0.0, 1.5]);
    }
}
