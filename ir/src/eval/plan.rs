//! The reference evaluator's walk with its names looked up once: every
//! access resolved to its data (row-major) and every index to its slot in
//! the point, so that a point costs arithmetic and loads, not map lookups
//! and allocations. It computes exactly what [`super::At`] computes; where
//! `At` would report a diagnostic, a step here gives up ([`GiveUp`]) and
//! the caller asks `At` at that point for the diagnostic.

use std::borrow::Cow;

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

/// A subscript's atom: an index's slot in the point, or an integer read.
enum Atom2<'t> {
    Slot(usize),
    Indirect(Box<Read<'t>>),
}

/// A right-hand side with its reads resolved.
pub(super) enum Value<'t> {
    Literal(f64),
    Read(Read<'t>),
    Neg(Box<Value<'t>>),
    Binary(BinOp, Box<Value<'t>>, Box<Value<'t>>),
    Call(Func, Vec<Value<'t>>),
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
        Some(match e {
            Expr::Literal { value, .. } => Value::Literal(*value),
            Expr::Access(a) => Value::Read(self.read(a, None)?),
            Expr::Neg { expr, .. } => Value::Neg(Box::new(self.value(expr)?)),
            Expr::Binary { op, lhs, rhs, .. } => {
                Value::Binary(*op, Box::new(self.value(lhs)?), Box::new(self.value(rhs)?))
            }
            Expr::Call { func, args, .. } => {
                let args = args.iter().map(|a| self.value(a)).collect::<Option<Vec<_>>>()?;
                (args.len() == func.arity()).then_some(())?;
                Value::Call(*func, args)
            }
        })
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
        // The left-hand side reads no data: a placeholder it never loads.
        static NONE: Data<'static> = Data::Values(Cow::Borrowed(&[]));
        Some(Read { data: data.unwrap_or(&NONE), dims })
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

impl Read<'_> {
    /// The element's offset in row-major order at `point`; `None` outside
    /// the tensor (the fill value). Gives up where `At` reports an error.
    /// (In 64 bits: a subscript of indices alone stays inside them, which
    /// the checker ensures; one that an index tensor's value carries past
    /// them is outside the tensor, as it is in [`super::At`]'s 128 bits.)
    pub(super) fn offset(&self, point: &[usize]) -> Result<Option<usize>, GiveUp> {
        let mut at = 0;
        let mut inside = true;
        for d in &self.dims {
            let mut v = Some(d.offset);
            for (coeff, atom) in &d.terms {
                let x = match atom {
                    Atom2::Slot(k) => point[*k] as i64,
                    Atom2::Indirect(r) => r.index(point)?,
                };
                v = v.and_then(|v| coeff.checked_mul(x).and_then(|t| v.checked_add(t)));
            }
            match v.and_then(|v| usize::try_from(v).ok()).filter(|&u| u < d.extent) {
                Some(u) => at += u * d.stride,
                None if d.whole => return Err(GiveUp),
                None => inside = false,
            }
        }
        Ok(inside.then_some(at))
    }

    /// Whether the read can give up: only one through an index tensor can
    /// (a read out of the index tensor, or a whole subscript out of its
    /// target's range); a subscript past 64 bits is outside, not an error.
    pub(super) fn fallible(&self) -> bool {
        self.dims.iter().any(|d| d.whole || d.terms.iter().any(|(_, a)| matches!(a, Atom2::Indirect(_))))
    }

    /// The integer at `point`; gives up outside the tensor (an error).
    fn index(&self, point: &[usize]) -> Result<i64, GiveUp> {
        let Data::Indices(x) = self.data else { return Err(GiveUp) };
        self.offset(point)?.map(|o| x[o]).ok_or(GiveUp)
    }

    fn load(&self, point: &[usize]) -> Result<f64, GiveUp> {
        Ok(match (self.offset(point)?, self.data) {
            (None, _) => 0.0,
            (Some(o), Data::Values(v)) => v[o],
            (Some(o), Data::Indices(x)) => x[o] as f64,
        })
    }
}

impl Value<'_> {
    pub(super) fn at(&self, point: &[usize]) -> Result<f64, GiveUp> {
        Ok(match self {
            Value::Literal(v) => *v,
            Value::Read(r) => r.load(point)?,
            Value::Neg(e) => -e.at(point)?,
            Value::Binary(op, lhs, rhs) => op.apply(lhs.at(point)?, rhs.at(point)?),
            Value::Call(func, args) => match &args[..] {
                [x] => func.apply(&[x.at(point)?]),
                [x, y] => func.apply(&[x.at(point)?, y.at(point)?]),
                _ => {
                    let args = args.iter().map(|a| a.at(point)).collect::<Result<Vec<f64>, _>>()?;
                    func.apply(&args)
                }
            },
        })
    }

    /// Every read of this value, in [`Expr::accesses`] order.
    pub(super) fn reads<'a>(&'a self, out: &mut Vec<&'a Read<'a>>) {
        match self {
            Value::Literal(_) => {}
            Value::Read(r) => out.push(r),
            Value::Neg(e) => e.reads(out),
            Value::Binary(_, lhs, rhs) => {
                lhs.reads(out);
                rhs.reads(out);
            }
            Value::Call(_, args) => args.iter().for_each(|a| a.reads(out)),
        }
    }
}

/// Calls `f` at every point of the index space over `extents`, the last
/// index fastest (as `ndarray::indices`), until it fails.
pub(super) fn each_point<E>(
    extents: &[usize],
    mut f: impl FnMut(&[usize]) -> Result<(), E>,
) -> Result<(), E> {
    if extents.contains(&0) {
        return Ok(());
    }
    let mut point = vec![0; extents.len()];
    loop {
        f(&point)?;
        // The odometer: the last digit that can still move moves.
        let mut moved = false;
        for (p, &n) in point.iter_mut().zip(extents).rev() {
            *p += 1;
            if *p < n {
                moved = true;
                break;
            }
            *p = 0;
        }
        if !moved {
            return Ok(());
        }
    }
}
