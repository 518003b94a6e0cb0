//! The reference evaluator's walk with its names looked up once: every
//! access resolved to its data (row-major) and every index to its slot in
//! the point, so that a point costs arithmetic and loads, not map lookups
//! and allocations. It computes exactly what [`super::At`] computes; where
//! `At` would report a diagnostic, a step here gives up ([`GiveUp`]) and
//! the caller asks `At` at that point for the diagnostic.
//!
//! The walk is an odometer over the indices (the last fastest), and a step
//! says which digit it moved; a read, and every sub-expression, keeps its
//! last result and computes again only where a digit it depends on moved
//! (the odometer's digits after the moved one reset, so "depends on a digit
//! at or after the moved one"). The same arithmetic in the same order, not
//! done twice: `W[Map_grp[p],c,m]` at fixed `p` and `c` does not re-read
//! `Map_grp[p]` at every `m`. Where the last index moves by one and a
//! read holds it only as itself, its subscripts' values move by their
//! coefficients of it, not summed again (the point-cloud layer's reference,
//! 227M points: 27.9 s before either, 10.9 s after both).

use std::borrow::Cow;
use std::cell::{Cell, RefCell};

use ndarray::ArrayD;

use crate::lang::{Access, Atom, BinOp, Einsum, Expr, Func, Subscript};
use crate::tensor::{TensorValue, Tensors};

/// A step cannot go on: `At` at the same point says why.
#[derive(Debug)]
pub(super) struct GiveUp;

/// A tensor's elements in row-major order.
enum Data<'t> {
    Values(Cow<'t, [f64]>),
    Indices(Cow<'t, [i64]>),
}

/// Row-major elements of `a` (borrowed when they are already).
fn row_major<T: Clone>(a: &ArrayD<T>) -> Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(a.iter().cloned().collect()),
    }
}

/// One access: its data, and per dimension the subscript, the extent and
/// the row-major stride.
pub(super) struct Read<'t> {
    data: &'t Data<'t>,
    dims: Vec<Dim<'t>>,
    /// The last digit of the point (an index's slot) the offset depends on,
    /// through its indirect reads too; `None` for none.
    depth: Option<usize>,
    /// The offset last computed ([`Read::offset_after`]).
    memo: Cell<Option<Option<usize>>>,
    /// Where the last digit appears, and only as itself (not inside an
    /// indirect read): per dimension, its coefficient there. A step of the
    /// last digit then moves those dimensions' values by their
    /// coefficients ([`Read::stepped`]) instead of summing every subscript.
    step: Option<Vec<(usize, i64)>>,
    /// Per dimension, its value at the last point; how many of them are
    /// outside their extent, and the offset of those inside.
    values: RefCell<Vec<i128>>,
    outside: Cell<usize>,
    inside_offset: Cell<usize>,
}

struct Dim<'t> {
    terms: Vec<(i64, Atom2<'t>)>,
    offset: i64,
    extent: usize,
    stride: usize,
    /// A whole-subscript indirect read (`B[X[p], i]`): out of range is an
    /// error, not the fill value.
    whole: bool,
}

impl Dim<'_> {
    /// `v` as a position in this dimension, if inside it.
    fn inside(&self, v: i128) -> Option<usize> {
        usize::try_from(v).ok().filter(|&u| u < self.extent)
    }
}

/// A subscript's atom: an index's slot in the point, or an integer read.
enum Atom2<'t> {
    Slot(usize),
    Indirect(Box<Read<'t>>),
}

/// A right-hand side with its reads resolved, keeping its last result.
pub(super) struct Value<'t> {
    kind: Kind<'t>,
    /// The last digit of the point it depends on (`None`: none).
    depth: Option<usize>,
    memo: Cell<Option<f64>>,
}

enum Kind<'t> {
    Literal(f64),
    Read(Read<'t>),
    Neg(Box<Value<'t>>),
    Binary(BinOp, Box<Value<'t>>, Box<Value<'t>>),
    Call(Func, Vec<Value<'t>>),
}

impl<'t> Value<'t> {
    fn new(kind: Kind<'t>) -> Self {
        let depth = match &kind {
            Kind::Literal(_) => None,
            Kind::Read(r) => r.depth,
            Kind::Neg(e) => e.depth,
            Kind::Binary(_, lhs, rhs) => lhs.depth.max(rhs.depth),
            Kind::Call(_, args) => args.iter().filter_map(|a| a.depth).max(),
        };
        Value { kind, depth, memo: Cell::new(None) }
    }
}

/// Whether a result that depends on digits up to `depth` still holds after
/// a step that moved digit `moved` (and reset those after it).
fn holds(depth: Option<usize>, moved: usize) -> bool {
    depth.is_none_or(|d| d < moved)
}

/// The tensors' data in row-major order, by name.
pub(super) struct Store<'t> {
    data: Vec<(&'t str, Data<'t>)>,
}

impl<'t> Store<'t> {
    pub(super) fn new(tensors: &'t Tensors) -> Self {
        let data = tensors
            .iter()
            .map(|(name, v)| {
                let d = match v {
                    TensorValue::Values(a) => Data::Values(row_major(a)),
                    TensorValue::Indices(a) => Data::Indices(row_major(a)),
                };
                (name.as_str(), d)
            })
            .collect();
        Store { data }
    }

    fn get(&self, name: &str) -> Option<&Data<'_>> {
        self.data.iter().find(|(n, _)| *n == name).map(|(_, d)| d)
    }
}

/// Resolves against `store` the reads of `einsum`; `None` where something
/// is missing or of the wrong rank (`At` reports it).
pub(super) struct Resolver<'e, 's, 't> {
    pub einsum: &'e Einsum,
    pub store: &'s Store<'t>,
    pub shapes: &'t Tensors,
}

impl<'s, 't> Resolver<'_, 's, 't> {
    pub(super) fn value(&self, e: &Expr) -> Option<Value<'s>> {
        Some(Value::new(match e {
            Expr::Literal { value, .. } => Kind::Literal(*value),
            Expr::Access(a) => Kind::Read(self.read(a, None)?),
            Expr::Neg { expr, .. } => Kind::Neg(Box::new(self.value(expr)?)),
            Expr::Binary { op, lhs, rhs, .. } => {
                Kind::Binary(*op, Box::new(self.value(lhs)?), Box::new(self.value(rhs)?))
            }
            Expr::Call { func, args, .. } => {
                let args = args.iter().map(|a| self.value(a)).collect::<Option<Vec<_>>>()?;
                (args.len() == func.arity()).then_some(())?;
                Kind::Call(*func, args)
            }
        }))
    }

    /// An access's read, against the data's shape (or `shape`, the
    /// output's, for the left-hand side, which may have no data).
    pub(super) fn read(&self, a: &Access, shape: Option<&[usize]>) -> Option<Read<'s>> {
        let data = self.store.get(&a.tensor.name);
        let shape = match shape {
            Some(s) => s,
            None => self.shapes.get(&a.tensor.name)?.shape(),
        };
        if a.subscripts.len() != shape.len() {
            return None;
        }
        let mut dims = Vec::with_capacity(shape.len());
        let mut stride = 1;
        for (s, &extent) in a.subscripts.iter().zip(shape).rev() {
            dims.push(self.dim(s, extent, stride)?);
            stride *= extent;
        }
        dims.reverse();
        let depth = dims
            .iter()
            .flat_map(|d| &d.terms)
            .filter_map(|(_, atom)| match atom {
                Atom2::Slot(k) => Some(*k),
                Atom2::Indirect(r) => r.depth,
            })
            .max();
        let step = self.einsum.indices.len().checked_sub(1).and_then(|last| step_of(&dims, last));
        // The left-hand side reads no data: a placeholder it never loads.
        static NONE: Data<'static> = Data::Values(Cow::Borrowed(&[]));
        Some(Read {
            data: data.unwrap_or(&NONE),
            values: RefCell::new(vec![0; dims.len()]),
            dims,
            depth,
            memo: Cell::new(None),
            step,
            outside: Cell::new(0),
            inside_offset: Cell::new(0),
        })
    }

    fn dim(&self, s: &Subscript, extent: usize, stride: usize) -> Option<Dim<'s>> {
        let whole = matches!((&s.terms[..], s.offset), ([t], 0) if t.coeff == 1 && matches!(t.atom, Atom::Indirect(_)));
        let terms = s
            .terms
            .iter()
            .map(|t| {
                let atom = match &t.atom {
                    Atom::Index(ident) => {
                        Atom2::Slot(self.einsum.indices.iter().position(|i| i.name == ident.name)?)
                    }
                    Atom::Indirect(x) => {
                        let read = self.read(x, None)?;
                        matches!(read.data, Data::Indices(_)).then_some(())?;
                        Atom2::Indirect(Box::new(read))
                    }
                };
                Some((t.coeff, atom))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Dim { terms, offset: s.offset, extent, stride, whole })
    }
}

/// Where digit `last` appears in `dims`, with its coefficient per
/// dimension, when it appears there only as itself; `None` where it does
/// not appear, or appears inside an indirect read.
fn step_of(dims: &[Dim<'_>], last: usize) -> Option<Vec<(usize, i64)>> {
    let mut step = Vec::new();
    for (d, dim) in dims.iter().enumerate() {
        let mut coeff = 0i64;
        for (c, atom) in &dim.terms {
            match atom {
                Atom2::Slot(k) if *k == last => coeff = coeff.checked_add(*c)?,
                Atom2::Slot(_) => {}
                Atom2::Indirect(r) if r.depth.is_some_and(|k| k >= last) => return None,
                Atom2::Indirect(_) => {}
            }
        }
        if coeff != 0 {
            step.push((d, coeff));
        }
    }
    (!step.is_empty()).then_some(step)
}

impl Read<'_> {
    /// The element's offset in row-major order at `point`; `None` outside
    /// the tensor (the fill value). Gives up where `At` reports an error.
    /// (In 128 bits, as in [`super::At`]: a subscript that an index
    /// tensor's value carries past 64 bits is outside the tensor.)
    ///
    /// `moved` is the digit the step to `point` moved (0 for a point on its
    /// own): the last offset is kept where it still holds.
    pub(super) fn offset_after(&self, point: &[usize], moved: usize) -> Result<Option<usize>, GiveUp> {
        if let Some(at) = self.memo.get()
            && holds(self.depth, moved)
        {
            return Ok(at);
        }
        // A step of the last digit (the last one moved, by one, from the
        // point before, where this read was read too: a read that depends
        // on the last digit is read at every point) moves the offset. (At
        // a walk's first point every digit is 0; after a step of the last
        // digit it is not.)
        let last = point.len().wrapping_sub(1);
        let stepped = match (&self.step, self.memo.get()) {
            (Some(step), Some(_)) if moved == last && point[last] > 0 => self.stepped(step),
            _ => None,
        };
        let at = match stepped {
            Some(at) => at,
            None => self.compute_offset(point, moved)?,
        };
        self.memo.set(Some(at));
        Ok(at)
    }

    /// The offset after the last digit moved by one, from the values at
    /// the point before; `None` where a value leaves 128 bits (then summed
    /// afresh, as `At` would report it).
    fn stepped(&self, step: &[(usize, i64)]) -> Option<Option<usize>> {
        let mut values = self.values.borrow_mut();
        let (mut outside, mut at) = (self.outside.get(), self.inside_offset.get());
        for &(d, coeff) in step {
            let dim = &self.dims[d];
            let (old, new) = (values[d], values[d].checked_add(i128::from(coeff))?);
            match dim.inside(old) {
                Some(u) => at -= u * dim.stride,
                None => outside -= 1,
            }
            match dim.inside(new) {
                Some(u) => at += u * dim.stride,
                None => outside += 1,
            }
            values[d] = new;
        }
        self.outside.set(outside);
        self.inside_offset.set(at);
        Some((outside == 0).then_some(at))
    }

    fn compute_offset(&self, point: &[usize], moved: usize) -> Result<Option<usize>, GiveUp> {
        let mut at = 0;
        let mut outside = 0;
        let mut values = self.values.borrow_mut();
        for (d, dim) in self.dims.iter().enumerate() {
            // In 128 bits, as `At` sums: a product of two 64-bit integers
            // fits; a sum past 128 bits is `At`'s overflow error.
            let mut v = i128::from(dim.offset);
            for (coeff, atom) in &dim.terms {
                let x = match atom {
                    Atom2::Slot(k) => point[*k] as i128,
                    Atom2::Indirect(r) => i128::from(r.index(point, moved)?),
                };
                v = v.checked_add(i128::from(*coeff) * x).ok_or(GiveUp)?;
            }
            match dim.inside(v) {
                Some(u) => at += u * dim.stride,
                None if dim.whole => return Err(GiveUp),
                None => outside += 1,
            }
            values[d] = v;
        }
        self.outside.set(outside);
        self.inside_offset.set(at);
        Ok((outside == 0).then_some(at))
    }

    /// Whether the read can give up: only one through an index tensor can
    /// (a read out of the index tensor, or a whole subscript out of its
    /// target's range, or a sum past 128 bits); a subscript past 64 bits is
    /// outside, not an error.
    pub(super) fn fallible(&self) -> bool {
        self.dims.iter().any(|d| d.whole || d.terms.iter().any(|(_, a)| matches!(a, Atom2::Indirect(_))))
    }

    /// The digits of the point the offset depends on, through its indirect
    /// reads too.
    pub(super) fn slots(&self, used: &mut [bool]) {
        for (_, atom) in self.dims.iter().flat_map(|d| &d.terms) {
            match atom {
                Atom2::Slot(k) => used[*k] = true,
                Atom2::Indirect(r) => r.slots(used),
            }
        }
    }

    /// The integer at `point`; gives up outside the tensor (an error).
    fn index(&self, point: &[usize], moved: usize) -> Result<i64, GiveUp> {
        let Data::Indices(x) = self.data else { return Err(GiveUp) };
        self.offset_after(point, moved)?.map(|o| x[o]).ok_or(GiveUp)
    }

    fn load(&self, point: &[usize], moved: usize) -> Result<f64, GiveUp> {
        Ok(match (self.offset_after(point, moved)?, self.data) {
            (None, _) => 0.0,
            (Some(o), Data::Values(v)) => v[o],
            (Some(o), Data::Indices(x)) => x[o] as f64,
        })
    }
}

impl Value<'_> {
    /// The value at `point`, reached by a step that moved digit `moved`
    /// (0 for a point on its own).
    pub(super) fn at(&self, point: &[usize], moved: usize) -> Result<f64, GiveUp> {
        if let Some(v) = self.memo.get()
            && holds(self.depth, moved)
        {
            return Ok(v);
        }
        let v = match &self.kind {
            Kind::Literal(v) => *v,
            Kind::Read(r) => r.load(point, moved)?,
            Kind::Neg(e) => -e.at(point, moved)?,
            Kind::Binary(op, lhs, rhs) => op.apply(lhs.at(point, moved)?, rhs.at(point, moved)?),
            Kind::Call(func, args) => match &args[..] {
                [x] => func.apply(&[x.at(point, moved)?]),
                [x, y] => func.apply(&[x.at(point, moved)?, y.at(point, moved)?]),
                _ => {
                    let args = args.iter().map(|a| a.at(point, moved)).collect::<Result<Vec<f64>, _>>()?;
                    func.apply(&args)
                }
            },
        };
        self.memo.set(Some(v));
        Ok(v)
    }

    /// Every read of this value, in [`Expr::accesses`] order.
    pub(super) fn reads<'a>(&'a self, out: &mut Vec<&'a Read<'a>>) {
        match &self.kind {
            Kind::Literal(_) => {}
            Kind::Read(r) => out.push(r),
            Kind::Neg(e) => e.reads(out),
            Kind::Binary(_, lhs, rhs) => {
                lhs.reads(out);
                rhs.reads(out);
            }
            Kind::Call(_, args) => args.iter().for_each(|a| a.reads(out)),
        }
    }
}

/// Calls `f` at every point of the index space over `extents`, the last
/// index fastest (as `ndarray::indices`), with the digit the step to it
/// moved (0 for the first), until it fails.
pub(super) fn each_point<E>(
    extents: &[usize],
    mut f: impl FnMut(&[usize], usize) -> Result<(), E>,
) -> Result<(), E> {
    if extents.contains(&0) {
        return Ok(());
    }
    let mut point = vec![0; extents.len()];
    let mut moved = 0;
    loop {
        f(&point, moved)?;
        // The odometer: the last digit that can still move moves.
        let Some(digit) = (0..point.len()).rev().find(|&d| point[d] + 1 < extents[d]) else {
            return Ok(());
        };
        point[digit] += 1;
        point[digit + 1..].fill(0);
        moved = digit;
    }
}
