//! Lowering a checked Einsum over stored (sparse) operands into a loop
//! tree: choose a loop order concordant with every stored operand's level
//! order, then build each loop from what the levels holding its variable
//! can do (locate a dense level; walk or co-iterate the others), with one
//! branch per lattice point of the expression.

use std::collections::{BTreeMap, BTreeSet};

use cranelift_entity::PrimaryMap;
use spindle_formats::tensor::ArrayData;
use spindle_formats::{Children, Coo, DimPart, FormatSpec, LevelCapabilities, SparseTensor};

use super::{
    Assembly, Expr, LevelKernel, LevelRef, Node, OutLevel, Point, Position, Reach, Var, VarId, WorkspaceKind,
};
use crate::kernel::schedule::{Policy, Schedule, WorkspacePolicy};
use crate::kernel::{OutputInit, Reduction, Strategy, TensorId, TensorParam};
use crate::lang::Einsum;
use crate::lang::{Access, AssignOp, Atom, BinOp, Diagnostic, ElemType, Expr as Ast, Func, Role, Span};
use crate::tensor::{TensorValue, Tensors};
use spindle_formats::IType;

/// A kernel of the level path and the data of its arguments (the stored
/// operands' arrays; dense tensors keep their names and data).
#[derive(Clone, Debug)]
pub struct Lowered {
    pub kernel: LevelKernel,
    /// The format arrays, named `{tensor}_{array}` (values f64, indices
    /// i64), to add to the dense tensors' data.
    pub arrays: Tensors,
    /// The stored tensors the kernel reads through their arrays.
    pub replaced: Vec<String>,
    /// A program kernel's output held in a stored operand's pattern: that
    /// operand; the output argument holds one value per entry of it.
    pub pattern: Option<String>,
}

/// One level of a stored operand: the variable it holds and how it is
/// reached.
#[derive(Clone, Debug)]
pub(super) struct StoredLevel {
    pub(super) var: VarId,
    pub(super) reach: Reach,
    pub(super) ordered: bool,
    pub(super) unique: bool,
    pub(super) extent: usize,
}

#[derive(Clone, Debug)]
pub(super) struct Stored {
    pub(super) levels: Vec<StoredLevel>,
    pub(super) val: TensorId,
    /// The access in the statement, for diagnostics.
    pub(super) access: Access,
}

/// The right-hand side over stored operands, before lowering.
#[derive(Clone, Debug, PartialEq)]
enum Sym {
    Const(f64),
    Stored(String),
    Dense { tensor: TensorId, at: Vec<VarId> },
    Neg(Box<Sym>),
    Binary { op: BinOp, lhs: Box<Sym>, rhs: Box<Sym> },
    Call { func: Func, args: Vec<Sym> },
}

/// Lowers `einsum` with the operands in `formats` stored in them (their
/// entries in `sparse`) into a loop tree over their levels.
pub fn lower(
    einsum: &Einsum,
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
    schedule: &Schedule,
    name: &str,
) -> Result<Lowered, Diagnostic> {
    let Some((diagonal, formats_, sparse_, copies)) = diagonal_reads(einsum, formats, sparse) else {
        return lower_rereads(einsum, formats, sparse, schedule, name, &BTreeSet::new());
    };
    // As written, a repeated index never lowers; the walk's own reason is
    // the one to give, in the names the note explains.
    lower_rereads(&diagonal, &formats_, &sparse_, schedule, name, &copies).map_err(|walked| {
        walked.with_note(format!(
            "a repeated index reads a diagonal, which the level path walks as a product with the identity: \
             `{}`",
            diagonal.statement
        ))
    })
}

/// [`lower`] of `einsum` with its stored operands' rereads walked as
/// copies ([`alias_rereads`]); `pinned` as [`lower_as_read`]'s.
fn lower_rereads(
    einsum: &Einsum,
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
    schedule: &Schedule,
    name: &str,
    pinned: &BTreeSet<String>,
) -> Result<Lowered, Diagnostic> {
    let Some((aliased, formats_, sparse_, renames)) = alias_rereads(einsum, formats, sparse) else {
        return lower_as_read(einsum, formats, sparse, schedule, name, pinned);
    };
    lower_as_read(&aliased, &formats_, &sparse_, schedule, name, pinned).map_err(|copies| {
        // Where the copies do not lower either, the statement as written
        // says why, with the copies' reason beside it in the user's names.
        let mut why = copies.message.clone();
        for ((tensor, read), alias) in &renames {
            why = why.replace(&format!("`{alias}`"), &format!("`{tensor}` as read at [{}]", read.join(",")));
        }
        // (As written, a reread operand always fails to lower.)
        match lower_as_read(einsum, formats, sparse, schedule, name, pinned) {
            Err(d) => d.with_note(format!("walked as a copy for each further read, it cannot either: {why}")),
            Ok(_) => copies,
        }
    })
}

/// [`lower`] of `einsum` with its stored operands read as written.
/// `pinned`: indices a rewrite made that equal another at every point the
/// walk visits (a diagonal's copy `i2` of `i`), which are not points of
/// their own under `max=` / `min=`.
fn lower_as_read(
    einsum: &Einsum,
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
    schedule: &Schedule,
    name: &str,
    pinned: &BTreeSet<String>,
) -> Result<Lowered, Diagnostic> {
    let st = &einsum.statement;
    let (reduction, init) = match st.op {
        AssignOp::Assign => (Reduction::Sum, OutputInit::Zero),
        AssignOp::AddAssign => (Reduction::Sum, OutputInit::Keep),
        AssignOp::MaxAssign => (Reduction::Max, OutputInit::Identity(Reduction::Max)),
        AssignOp::MinAssign => (Reduction::Min, OutputInit::Identity(Reduction::Min)),
    };
    let out_name = &st.lhs.tensor.name;
    let out_spec = formats.get(out_name);
    if reduction != Reduction::Sum && out_spec.is_some() {
        return Err(refuse(
            format!(
                "`{}` into sparse `{out_name}`: sparse outputs are assembled by sums only",
                st.op.as_str()
            ),
            st.op_span,
            "a max/min reduction",
        )
        .with_note(format!("drop `{out_name}`'s format to reduce into a dense output")));
    }
    if out_spec.is_some() && sparse.contains_key(out_name) {
        return Err(refuse(
            format!(
                "`{out_name}` is a sparse output with entries; a sparse output is assembled from nothing, \
                 not accumulated into"
            ),
            st.lhs.span,
            "a sparse output with data",
        )
        .with_note(format!("give `{out_name}` a shape only, or drop its format to accumulate densely")));
    }

    let mut tensors: PrimaryMap<TensorId, TensorParam> = PrimaryMap::new();
    let mut vars: PrimaryMap<VarId, Var> = PrimaryMap::new();
    let mut var_of: BTreeMap<String, VarId> = BTreeMap::new();
    for ix in &einsum.indices {
        var_of.insert(ix.name.clone(), vars.push(Var { name: ix.name.clone(), extent: ix.extent }));
    }
    let plain = |access: &Access| plain_indices(access, &var_of);

    // The stored operands: their arrays become arguments, named apart
    // from the user's tensors.
    let taken: BTreeSet<String> = einsum.tensors.keys().cloned().collect();
    let mut stored: BTreeMap<String, Stored> = BTreeMap::new();
    let mut arrays = Tensors::new();
    let mut replaced = Vec::new();
    for access in st.rhs.accesses() {
        store_operand(
            access,
            einsum,
            formats,
            sparse,
            &var_of,
            &taken,
            &mut tensors,
            &mut arrays,
            &mut stored,
        )?;
    }
    replaced.extend(stored.keys().cloned());

    // Dense operands and the output keep their names.
    let skip = |t: &str| stored.contains_key(t) || (out_spec.is_some() && t == out_name);
    let dense = dense_params(einsum, skip, &mut tensors)?;
    let out_at = plain(&st.lhs)?;
    let (output, mut assembly) = match out_spec {
        None => (dense[out_name], None),
        Some(spec) => {
            let info = &einsum.tensors[out_name];
            let (assembly, val) = assemble(out_name, spec, info, &out_at, &st.lhs, &taken, &mut tensors)?;
            (val, Some(assembly))
        }
    };

    let rhs = symbolic(&st.rhs, &stored, &dense, &plain)?;
    let order = loop_order(einsum, &vars, &var_of, &stored, &out_at, schedule)?;
    concordant(&order, &stored, &vars)?;
    if let Some(a) = &mut assembly {
        let entries = stored.values().map(|s| tensors[s.val].shape[0]).sum();
        place_workspace(&order, a, &vars, &stored, schedule, entries, &st.lhs)?;
    }

    let mut kernel = LevelKernel {
        name: name.to_string(),
        tensors,
        vars,
        output,
        assembly: None,
        reduction,
        init,
        parallel: false,
        row_runs: false,
        lanes_over_positions: matches!(schedule.strategy, Strategy::Parallel(_)),
        lanes: match schedule.strategy {
            Strategy::Parallel(Some(r)) => r,
            _ => 32,
        },
        locals: PrimaryMap::new(),
        affine: Vec::new(),
        body: Vec::new(),
    };
    let lowerer = Lowerer {
        stored: &stored,
        order: &order,
        out_at: &out_at,
        out_levels: assembly.as_ref().map(|a| &a.levels[..]),
        gathered: assembly.as_ref().map_or(0, |a| a.gathered),
    };
    kernel.body = lowerer.at(0, &rhs, false)?;
    kernel.parallel = !kernel.idle() && owns_its_outputs(&kernel.body, &stored, &out_at);
    if reduction != Reduction::Sum {
        let body = std::mem::take(&mut kernel.body);
        let points = kernel
            .vars
            .iter()
            .filter(|(v, var)| !out_at.contains(v) && !pinned.contains(&var.name))
            .map(|(_, var)| var.extent)
            .product();
        let (body, at_top) = count_skipped_zeros(body, &out_at, points);
        kernel.body = body;
        // The counts of the elements of a fill at the top are shared.
        kernel.parallel &= !at_top;
    }
    if let Some(a) = &mut assembly {
        // Rows fill from their own offsets only when the outermost loop
        // walks the output's first level and that level is dense.
        let first = &a.levels[0];
        let outer = match &kernel.body[..] {
            [Node::Dense { var, .. }] | [Node::Merge { var, .. }] => Some(*var),
            _ => None,
        };
        kernel.parallel &= first.format.locate() && outer == Some(first.var);
        // (An output without rows counts as one: nothing runs, and its
        // counts still have a row to hold them.)
        a.rows = if kernel.parallel { first.extent.max(1) } else { 1 };
        let stored_entries = stored.values().map(|s| kernel.tensors[s.val].shape[0]).sum();
        a.bound = walks_each_entry_once(&kernel.body, &a.levels, &order, &out_at).then_some(stored_entries);
    }
    kernel.assembly = assembly;
    Ok(Lowered { kernel, arrays, replaced, pattern: None })
}

/// The kernel arguments of the statement's tensors that keep their names
/// (dense operands and a dense output), but those `skip` says are stored;
/// index tensors are refused (indirect reads run on the tile path).
pub fn dense_params(
    einsum: &Einsum,
    skip: impl Fn(&str) -> bool,
    tensors: &mut PrimaryMap<TensorId, TensorParam>,
) -> Result<BTreeMap<String, TensorId>, Diagnostic> {
    let st = &einsum.statement;
    let mut dense = BTreeMap::new();
    for (tname, info) in einsum.tensors.iter().filter(|(t, _)| !skip(t)) {
        if info.role == Role::Index {
            let span = st.rhs.accesses().iter().find(|a| &a.tensor.name == tname).map_or(st.span, |a| a.span);
            return Err(refuse(
                format!("`{tname}` is an index tensor; indirect subscripts run on the tile path"),
                span,
                "an indirect read",
            ));
        }
        let id = tensors.push(TensorParam {
            name: tname.clone(),
            dtype: info.dtype,
            shape: info.shape.clone(),
            output: info.role == Role::Output,
        });
        dense.insert(tname.clone(), id);
    }
    Ok(dense)
}

/// The variables of an access whose subscripts are distinct plain
/// indices; anything else is refused at its subscript.
pub fn plain_indices(access: &Access, var_of: &BTreeMap<String, VarId>) -> Result<Vec<VarId>, Diagnostic> {
    let mut seen = BTreeSet::new();
    access
        .subscripts
        .iter()
        .map(|s| match &s.terms[..] {
            [t] if t.coeff == 1 && s.offset == 0 => match &t.atom {
                Atom::Index(id) if seen.insert(id.name.clone()) => Ok(var_of[&id.name]),
                Atom::Index(id) => Err(refuse(
                    format!("`{}` indexes two dimensions of `{}`", id.name, access.tensor.name),
                    s.span,
                    "a repeated index",
                )),
                Atom::Indirect(_) => Err(refuse(
                    "the level path reads plain indices; indirect subscripts run on the tile path"
                        .to_string(),
                    s.span,
                    "not a plain index",
                )),
            },
            _ => Err(refuse(
                format!(
                    "the level path reads `{}` at plain indices; affine subscripts are walked on stored operands \
                     (subsection loops)",
                    access.tensor.name
                ),
                s.span,
                "not a plain index",
            )
            .with_note(format!(
                "give `{}` a format, or drop every format to run the statement densely",
                access.tensor.name
            ))),
        })
        .collect()
}

/// `einsum` with a stored operand read at several subscripts (the Gram
/// matrix `A[i,k] * A[j,k]`) read once per subscript: each further
/// subscript reads a copy, `{A}2`, `{A}3`, ..., with the same entries, in
/// the same level formats stored in the order [`copy_format`] gives, which
/// the loops walk by its own indices. `None` where
/// every stored operand is read at one subscript.
#[allow(clippy::type_complexity)]
pub fn alias_rereads(
    einsum: &Einsum,
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
) -> Option<(
    Einsum,
    BTreeMap<String, FormatSpec>,
    BTreeMap<String, Coo<f64, i64>>,
    BTreeMap<(String, Vec<String>), String>,
)> {
    let subscripts = |a: &Access| a.subscripts.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // Per stored tensor, its distinct subscripts in reading order.
    let mut seen: BTreeMap<&str, Vec<Vec<String>>> = BTreeMap::new();
    for a in einsum.statement.rhs.accesses() {
        if formats.contains_key(&a.tensor.name) && sparse.contains_key(&a.tensor.name) {
            let reads = seen.entry(a.tensor.name.as_str()).or_default();
            if !reads.contains(&subscripts(a)) {
                reads.push(subscripts(a));
            }
        }
    }
    if seen.values().all(|reads| reads.len() < 2) {
        return None;
    }
    let taken = |n: &str| einsum.tensors.contains_key(n) || einsum.index(n).is_some();
    let mut renames: BTreeMap<(String, Vec<String>), String> = BTreeMap::new();
    let mut used: BTreeSet<String> = BTreeSet::new();
    for (tensor, reads) in &seen {
        for read in reads.iter().skip(1) {
            // `tensor` itself is taken, so the alias is `{tensor}2`, ...
            let alias = crate::names::first_free(tensor, "", |n| !taken(n) && !used.contains(n));
            used.insert(alias.clone());
            renames.insert((tensor.to_string(), read.clone()), alias);
        }
    }
    let (mut einsum, mut formats, mut sparse) = (einsum.clone(), formats.clone(), sparse.clone());
    for ((tensor, read), alias) in &renames {
        let mut info = einsum.tensors[tensor].clone();
        info.name = alias.clone();
        let format = copy_format(&formats[tensor], &info.shape, &seen[tensor.as_str()][0], read);
        einsum.tensors.insert(alias.clone(), info);
        formats.insert(alias.clone(), format);
        sparse.insert(alias.clone(), sparse[tensor].clone());
    }
    einsum.statement.rhs.for_each_access_mut(&mut |a| {
        if let Some(alias) = renames.get(&(a.tensor.name.clone(), subscripts(a))) {
            a.tensor.name = alias.clone();
        }
    });
    Some((einsum, formats, sparse, renames))
}

/// The format of the copy [`alias_rereads`] makes of an operand stored in
/// `spec` (of `shape`) for its read at `read`, the first read being at
/// `first`. Where the first read has indices of some of its dimensions,
/// the copy stores those dimensions first, in dense levels (the walk
/// locates them: their indices are bound when the copy is reached) while
/// they hold at most [`LOCATED_POSITIONS`] positions, its other dimensions
/// in compressed levels: `A[i,j] * A[i1,j]` with A in CSR (or DCSR, COO,
/// ...) walks column j's entries of a copy in CSC under A's (i, j), nnz
/// times a column's length, where a copy in CSR would merge every row i1
/// with A's row i, rows squared times a merge; `A[i,j] * A[j,k]` with A in
/// DCSR or COO locates row j of a copy in CSR, where a copy in A's format
/// would merge j with every stored row. The bound dimensions go in the
/// order the first read binds them (`A[i,j] * A[j,i]`: the copy in CSC).
/// Where no dimension is bound, the copy keeps `spec`.
fn copy_format(spec: &FormatSpec, shape: &[usize], first: &[String], read: &[String]) -> FormatSpec {
    let Ok(levels) = spec.levels(shape) else { return spec.clone() };
    let order: Vec<usize> = levels.iter().map(|l| l.dim).collect();
    let shared = |d: &usize| read.get(*d).is_some_and(|x| first.contains(x));
    // The bound dimensions in the order the first read's walk binds their
    // indices (`A[j,i]` beside `A[i,j]` in CSR: i, then j).
    let bound_at = |d: &usize| order.iter().position(|&l| first.get(l) == read.get(*d));
    let mut bound: Vec<usize> = order.iter().copied().filter(shared).collect();
    bound.sort_by_key(bound_at);
    let modes: Vec<usize> = bound.into_iter().chain(order.iter().copied().filter(|d| !shared(d))).collect();
    let located = order.iter().filter(|d| shared(d)).count();
    if located == 0 || matches!(spec, FormatSpec::Dense) {
        return spec.clone();
    }
    let mut positions = 1usize;
    let dense: Vec<bool> = modes
        .iter()
        .enumerate()
        .map(|(l, &d)| {
            let fits = positions.checked_mul(shape[d]).filter(|&n| l < located && n <= LOCATED_POSITIONS);
            positions = fits.unwrap_or(usize::MAX);
            fits.is_some()
        })
        .collect();
    let copy = match (&dense[..], &modes[..]) {
        ([true, false], [0, 1]) => FormatSpec::Csr,
        ([true, false], [1, 0]) => FormatSpec::Csc,
        ([false, false], [0, 1]) => FormatSpec::Dcsr,
        ([false, false], [1, 0]) => FormatSpec::Dcsc,
        _ => FormatSpec::Levels { dense, modes },
    };
    // (Where the copy's levels are `spec`'s, `spec` keeps its name.)
    let same = |a: &[spindle_formats::Level], b: &[spindle_formats::Level]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.dim == y.dim && x.format == y.format)
    };
    match copy.levels(shape) {
        Ok(copied) if same(&copied, &levels) => spec.clone(),
        _ => copy,
    }
}

/// The most positions [`copy_format`] gives a copy's dense levels.
const LOCATED_POSITIONS: usize = 1 << 22;

/// An operand read with an index repeated (its diagonal: `A[i,i]`) as a
/// sum over a fresh index times the identity, stored in CSR (CSC where the
/// operand stores the repeat's dimension above the first's, as CSC does):
/// `y[i] = f(A[i,i], ..)` is `y[i] = f(A[i,i2], ..) * Eye[i,i2]` (summed
/// over `i2`, as every index missing from the output is), exact
/// for any `f`, since only `i2 = i` is not multiplied by 0. The level
/// path then walks `A`'s row and `Eye`'s together (an intersection: a
/// row's entries up to its diagonal). Each repeat gets its own identity
/// (one identity read twice would be a reread). Under `max=` / `min=`
/// each copy (returned last) is pinned to its index: the walk visits only
/// `i2 = i`, and the zeros it skips are counted over the other indices.
/// `None` where no stored operand repeats an index.
#[allow(clippy::type_complexity)]
fn diagonal_reads(
    einsum: &Einsum,
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
) -> Option<(Einsum, BTreeMap<String, FormatSpec>, BTreeMap<String, Coo<f64, i64>>, BTreeSet<String>)> {
    let mut names: BTreeSet<String> = einsum.tensors.keys().cloned().collect();
    names.extend(einsum.indices.iter().map(|i| i.name.clone()));
    // From `base` itself (first = 1) or from `base2` (first = 2).
    let mut fresh = |base: &str, first: usize| {
        let name = crate::names::first_free(base, "", |n| (first == 1 || n != base) && !names.contains(n));
        names.insert(name.clone());
        name
    };
    // (index, its fresh copy, extent, the access's span, the identity's
    // format: column-major where the operand stores the repeat's dimension
    // above the first's) per repeat.
    let mut repeats: Vec<(String, String, usize, Span, FormatSpec)> = Vec::new();
    let mut statement = einsum.statement.clone();
    statement.rhs.for_each_access_mut(&mut |a| {
        let Some(info) = einsum.tensors.get(&a.tensor.name).filter(|t| !t.dtype.is_index()) else { return };
        // The level of each dimension (dense tensors: row-major).
        let levels = formats.get(&a.tensor.name).and_then(|f| f.levels(&info.shape).ok());
        let level_of =
            |dim: usize| levels.as_ref().map_or(Some(dim), |ls| ls.iter().position(|l| l.dim == dim));
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (dim, s) in a.subscripts.iter_mut().enumerate() {
            if let ([t], 0) = (&mut s.terms[..], s.offset)
                && t.coeff == 1
                && let Atom::Index(id) = &mut t.atom
            {
                let Some(&first) = seen.get(&id.name) else {
                    seen.insert(id.name.clone(), dim);
                    continue;
                };
                let extent = einsum.index(&id.name).map_or(0, |i| i.extent);
                let copy = fresh(&id.name, 2);
                let eye = match level_of(dim) < level_of(first) {
                    true => FormatSpec::Csc,
                    false => FormatSpec::Csr,
                };
                repeats.push((id.name.clone(), copy.clone(), extent, a.span, eye));
                id.name = copy;
            }
        }
    });
    if repeats.is_empty() {
        return None;
    }
    let dtype = einsum.output().dtype;
    let mut declarations: crate::lang::einsum::Declarations = einsum
        .tensors
        .iter()
        .map(|(n, t)| {
            (n.clone(), crate::lang::einsum::Declaration { shape: t.shape.clone(), dtype: t.dtype })
        })
        .collect();
    let (mut formats, mut sparse) = (formats.clone(), sparse.clone());
    let copies = repeats.iter().map(|r| r.1.clone()).collect();
    for (index, copy, extent, span, format) in repeats {
        let eye = fresh("Eye", 1);
        let ident = |name: &str| crate::lang::ast::Ident { name: name.to_string(), span };
        let subscript = |name: &str| crate::lang::ast::Subscript {
            terms: vec![crate::lang::ast::Term { coeff: 1, atom: Atom::Index(ident(name)), span }],
            offset: 0,
            span,
        };
        let read = Ast::Access(Access {
            tensor: ident(&eye),
            subscripts: vec![subscript(&index), subscript(&copy)],
            span,
        });
        let rhs = std::mem::replace(&mut statement.rhs, Ast::Literal { value: 0.0, span });
        statement.rhs = Ast::Binary { op: BinOp::Mul, lhs: Box::new(rhs), rhs: Box::new(read), span };
        declarations
            .insert(eye.clone(), crate::lang::einsum::Declaration { shape: vec![extent, extent], dtype });
        let diagonal: Vec<(usize, usize, f64)> = (0..extent).map(|i| (i, i, 1.0)).collect();
        sparse.insert(eye.clone(), Coo::from_triplets(extent, extent, &diagonal).ok()?);
        formats.insert(eye, format);
    }
    let einsum = crate::lang::check(&statement, &declarations).ok()?;
    Some((einsum, formats, sparse, copies))
}

/// The stored operand `access` reads, where it has a format and is not
/// stored yet: its arrays become arguments (data in `arrays`) and its
/// levels go into `stored`. A stored operand is read at one subscript: the
/// same read again is the same entry at every point.
#[allow(clippy::too_many_arguments)]
pub(super) fn store_operand(
    access: &Access,
    einsum: &Einsum,
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
    var_of: &BTreeMap<String, VarId>,
    taken: &BTreeSet<String>,
    tensors: &mut PrimaryMap<TensorId, TensorParam>,
    arrays: &mut Tensors,
    stored: &mut BTreeMap<String, Stored>,
) -> Result<(), Diagnostic> {
    let tname = &access.tensor.name;
    let Some(spec) = formats.get(tname) else { return Ok(()) };
    if let Some(first) = stored.get(tname) {
        if first
            .access
            .subscripts
            .iter()
            .map(|s| s.to_string())
            .eq(access.subscripts.iter().map(|s| s.to_string()))
        {
            return Ok(());
        }
        return Err(refuse(
            format!(
                "`{tname}` is read at two subscripts; a kernel walks each stored operand by one set of indices"
            ),
            access.span,
            "a second read",
        ));
    }
    let coo = sparse
        .get(tname)
        .ok_or_else(|| refuse(format!("`{tname}` has a format but no entries"), access.span, "no data"))?;
    let at = plain_indices(access, var_of)?;
    let info = &einsum.tensors[tname];
    let ElemType::Value(dtype) = info.dtype else {
        return Err(refuse(format!("`{tname}` holds indices"), access.span, "not a value tensor"));
    };
    let (levels, val) = store(tname, spec, coo, dtype, &info.shape, &at, access, taken, tensors, arrays)?;
    stored.insert(tname.clone(), Stored { levels, val, access: access.clone() });
    Ok(())
}

/// Stores `coo` in `spec` as `tname`: its arrays become kernel arguments
/// (`{tname}_{array}`) with their data in `arrays`; returns its levels, as
/// the statement's variables `at` index them, and its value array.
#[allow(clippy::too_many_arguments)]
pub(super) fn store(
    tname: &str,
    spec: &FormatSpec,
    coo: &Coo<f64, i64>,
    dtype: spindle_formats::DType,
    shape: &[usize],
    at: &[VarId],
    access: &Access,
    taken: &BTreeSet<String>,
    tensors: &mut PrimaryMap<TensorId, TensorParam>,
    arrays: &mut Tensors,
) -> Result<(Vec<StoredLevel>, TensorId), Diagnostic> {
    let (levels, val) = store_levels(tname, spec, coo, dtype, shape, access, taken, tensors, arrays)?;
    let levels = levels
        .into_iter()
        .map(|l| StoredLevel {
            var: at[l.dim],
            reach: l.level.kind,
            ordered: l.ordered,
            unique: l.unique,
            extent: l.level.extent,
        })
        .collect();
    Ok((levels, val))
}

/// A level of a stored operand as a kernel reads it, with the dimension
/// it stores.
#[derive(Clone, Debug)]
pub struct OperandLevel {
    pub dim: usize,
    pub level: LevelRef,
    /// Its coordinates ascend under each parent.
    pub ordered: bool,
    pub unique: bool,
}

/// The kernel argument of `tensor`'s `array`: `{tensor}_{array}`, or with
/// `_2`, `_3`, ... where one of the user's tensors (`taken`) or another
/// argument has that name (a user's `A_val` beside `A` in a format was read
/// as `A`'s values).
pub fn array_name(
    tensor: &str,
    array: &str,
    taken: &BTreeSet<String>,
    tensors: &PrimaryMap<TensorId, TensorParam>,
) -> String {
    let free = |n: &str| !taken.contains(n) && !tensors.values().any(|t| t.name == n);
    crate::names::first_free(&format!("{tensor}_{array}"), "_", free)
}

/// Stores `coo` in `spec` as `tname` (read by `access`, for diagnostics):
/// its arrays become kernel arguments ([`array_name`], beside the user's
/// tensors `taken`) with their data in `arrays`; returns its levels,
/// outermost first, and its value array.
#[allow(clippy::too_many_arguments)]
pub fn store_levels(
    tname: &str,
    spec: &FormatSpec,
    coo: &Coo<f64, i64>,
    dtype: spindle_formats::DType,
    shape: &[usize],
    access: &Access,
    taken: &BTreeSet<String>,
    tensors: &mut PrimaryMap<TensorId, TensorParam>,
    arrays: &mut Tensors,
) -> Result<(Vec<OperandLevel>, TensorId), Diagnostic> {
    let tensor = SparseTensor::from_coo(coo, spec)
        .map_err(|e| refuse(format!("`{tname}` in {spec}: {e}"), access.span, "cannot store"))?;
    let mut ids: BTreeMap<String, TensorId> = BTreeMap::new();
    for (array, data) in tensor.arrays() {
        let name = array_name(tname, &array, taken, tensors);
        let (dtype, value) = match data {
            ArrayData::Value(v) => {
                (ElemType::Value(dtype), TensorValue::Values(ndarray::Array1::from(v.to_vec()).into_dyn()))
            }
            ArrayData::Index(ix) => {
                let wide = ix.iter().any(|&x| x > i32::MAX as i64);
                let itype = if wide { IType::I64 } else { IType::I32 };
                (ElemType::Index(itype), TensorValue::Indices(ndarray::Array1::from(ix.to_vec()).into_dyn()))
            }
        };
        let len = value_len(&value);
        ids.insert(
            array,
            tensors.push(TensorParam { name: name.clone(), dtype, shape: vec![len], output: false }),
        );
        arrays.insert(name, value);
    }
    let val = ids["val"];
    let mut levels = Vec::new();
    for (level, names) in tensor.levels().iter().zip(&tensor.level_arrays()) {
        if level.part != DimPart::Whole {
            return Err(refuse(
                format!(
                    "`{tname}` in {} has blocked levels, which the level path does not walk \
                     (block-sparse products run on the tile path)",
                    spec.name()
                ),
                access.span,
                "blocked levels",
            ));
        }
        let id = |n: &Option<String>| n.as_deref().map(|n| ids[n]);
        let f = level.format;
        let reach = match (f.locate(), f.children(), id(&names.crd)) {
            (true, ..) | (_, Children::All, _) => Reach::Dense,
            (_, Children::Range, Some(crd)) => {
                Reach::Compressed { pos: id(&names.pos), crd, len: tensors[crd].shape[0] }
            }
            (_, Children::One, Some(crd)) => Reach::Singleton { crd },
            (_, Children::Fixed(g), Some(crd)) => {
                Reach::Padded { g, crd, empty: matches!(spec, FormatSpec::Ell).then_some(val) }
            }
            (_, _, None) => unreachable!("a stored level has coordinates"),
        };
        levels.push(OperandLevel {
            dim: level.dim,
            level: LevelRef {
                tensor: tname.to_string(),
                level: levels.len(),
                extent: shape[level.dim],
                kind: reach,
                unique: f.unique(),
            },
            ordered: f.ordered(),
            unique: f.unique(),
        });
    }
    Ok((levels, val))
}

fn value_len(v: &TensorValue) -> usize {
    match v {
        TensorValue::Values(a) => a.len(),
        TensorValue::Indices(a) => a.len(),
    }
}

/// The sparse output `name` in `spec`: its levels (asked what they can
/// do, never named), and their arrays as kernel arguments (`{name}_pos1`,
/// `{name}_crd1`, `{name}_val`, the counts and the phase), sized when the
/// kernel runs.
fn assemble(
    name: &str,
    spec: &FormatSpec,
    info: &crate::lang::einsum::TensorInfo,
    at: &[VarId],
    access: &Access,
    taken: &BTreeSet<String>,
    tensors: &mut PrimaryMap<TensorId, TensorParam>,
) -> Result<(Assembly, TensorId), Diagnostic> {
    let cannot = |why: String| {
        refuse(format!("`{name}` in {spec}: {why}"), access.span, "a sparse output").with_note(
            "a sparse output is assembled in csr, csc, dcsr, dcsc, coo, csf, or a level list whose dense \
             levels come first (dc, dcc, cc, ...)",
        )
    };
    let ElemType::Value(_) = info.dtype else {
        return Err(cannot("an output holds values".to_string()));
    };
    let levels = spec.levels(&info.shape).map_err(|e| {
        // The format's structure at this size: too big, not unassemblable.
        match spec.levels(&vec![1; info.shape.len()]) {
            Ok(_) => refuse(format!("`{name}` in {spec}: {e}"), access.span, "a sparse output").with_note(
                "dcsr and dcsc (or a level list with a compressed outer level) keep positions only for the \
                 rows or columns that have entries",
            ),
            Err(_) => cannot(e.to_string()),
        }
    })?;
    let mut out = Vec::new();
    let mut sparse_above = false;
    for (l, level) in levels.iter().enumerate() {
        let f = level.format;
        if level.part != DimPart::Whole {
            return Err(cannot("blocked levels cannot be assembled by appending".to_string()));
        }
        if f.locate() {
            if sparse_above {
                return Err(cannot(format!("level {l} is dense below a sparse level")));
            }
        } else if !f.append() {
            return Err(cannot(format!(
                "level {l} is padded to a fixed number of entries per parent, which appending cannot fill"
            )));
        } else if f.children() == Children::One {
            // A singleton repeats its parent's entry: the parent must take
            // one entry per child (COO's non-unique rows).
            if l == 0 || (levels[l - 1].format.unique() && levels[l - 1].format.children() != Children::One) {
                return Err(cannot(format!("level {l} is a singleton below a unique level")));
            }
        } else if !f.unique() && levels[l + 1..].iter().any(|b| b.format.children() != Children::One) {
            return Err(cannot(format!(
                "level {l} repeats coordinates above a level that is not a singleton"
            )));
        }
        sparse_above |= !f.locate();
        let mut array = |what: &str, dtype: ElemType| {
            let name = array_name(name, &format!("{what}{l}"), taken, tensors);
            tensors.push(TensorParam { name, dtype, shape: vec![0], output: true })
        };
        let index = ElemType::Index(IType::I64);
        let pos = (f.children() == Children::Range).then(|| array("pos", index));
        // Coordinates fit the narrower type when the dimension does.
        let narrow =
            if info.shape[level.dim] <= i32::MAX as usize { ElemType::Index(IType::I32) } else { index };
        let crd = f.append().then(|| array("crd", narrow));
        out.push(OutLevel {
            var: at[level.dim],
            dim: level.dim,
            extent: info.shape[level.dim],
            format: f,
            pos,
            crd,
        });
    }
    if !sparse_above {
        return Err(
            cannot("every level is dense".to_string()).with_note(format!("drop the format of `{name}`"))
        );
    }
    let mut param = |what: &str, dtype: ElemType, len: usize| {
        let name = array_name(name, what, taken, tensors);
        tensors.push(TensorParam { name, dtype, shape: vec![len], output: true })
    };
    let val = param("val", info.dtype, 0);
    let counts = param("counts", ElemType::Index(IType::I64), 0);
    let phase = param("phase", ElemType::Index(IType::I64), 4);
    let assembly = Assembly {
        tensor: name.to_string(),
        shape: info.shape.clone(),
        levels: out,
        rows: 1,
        bound: None,
        gathered: 0,
        workspace: WorkspaceKind::Dense,
        options: Default::default(),
        note: String::new(),
        counts,
        phase,
    };
    Ok((assembly, val))
}

/// Whether every entry of a sparse output is appended in its own step of a
/// walk over stored positions, so the stored operands' entries bound the
/// output's at every level: no summed variable (each visit of the leaf is
/// one entry), and every sparse output level's variable walked by merges
/// that never sweep all coordinates.
fn walks_each_entry_once(body: &[Node], levels: &[OutLevel], order: &[VarId], out_at: &[VarId]) -> bool {
    fn walks(nodes: &[Node], sparse: &[VarId]) -> bool {
        nodes.iter().all(|n| match n {
            Node::Dense { var, body } => !sparse.contains(var) && walks(body, sparse),
            Node::Merge { var, full, points, .. } => {
                !(*full && sparse.contains(var)) && points.iter().all(|p| walks(&p.body, sparse))
            }
            Node::Entry { body, .. } => walks(body, sparse),
            Node::Workspace { .. }
            | Node::Subsect { .. }
            | Node::Resolve { .. }
            | Node::Taps { .. }
            | Node::Find { .. }
            | Node::Fill { .. }
            | Node::Strip { .. }
            | Node::Rows { .. } => false,
            Node::Locate { .. }
            | Node::Update { .. }
            | Node::Accumulate { .. }
            | Node::Store { .. }
            | Node::Clear { .. } => true,
        })
    }
    let sparse: Vec<VarId> = levels.iter().filter(|l| !l.format.locate()).map(|l| l.var).collect();
    order.iter().all(|v| out_at.contains(v)) && walks(body, &sparse)
}

/// Decides where a sparse output needs a workspace (paper 001's insertion
/// analysis, [`spindle_workspaces::insert`]) and which one: sets the first
/// gathered level, the kind and the note saying why.
fn place_workspace(
    order: &[VarId],
    assembly: &mut Assembly,
    vars: &PrimaryMap<VarId, Var>,
    stored: &BTreeMap<String, Stored>,
    schedule: &Schedule,
    entries: usize,
    lhs: &Access,
) -> Result<(), Diagnostic> {
    use spindle_workspaces::insert::{Ability, Decision, OutputLevel, decide};
    let name = |v: VarId| vars[v].name.clone();
    let var_named = |n: &str| vars.keys().find(|&v| vars[v].name == n).expect("a variable of the statement");
    let levels = &assembly.levels;
    let output: Vec<OutputLevel> = levels
        .iter()
        .map(|level| {
            let ability = if level.format.locate() { Ability::Insert } else { Ability::Append };
            OutputLevel::new(&vars[level.var].name, ability)
        })
        .collect();
    // A loop appends in order where it visits each coordinate once, in
    // increasing order: a dense loop, or walks of ordered, unique levels.
    // An output level whose coordinates repeat (COO's rows, appended with
    // the singleton levels below it, one entry per leaf) takes a walk of a
    // stored level whose coordinates repeat too where the stored levels
    // below it are singletons of the output's next coordinates, down to a
    // unique one: each position is then one element, and positions come
    // in the output's order (stored data are canonical).
    let head = assembly.leaf_head();
    let run_of = |s: &Stored, at: usize| {
        let Some(out) = levels.iter().position(|l| l.var == s.levels[at].var) else { return false };
        let below = &s.levels[at..];
        out >= head
            && levels.len() - out == below.len()
            && below.iter().zip(&levels[out..]).all(|(b, o)| b.var == o.var && b.ordered)
            && below[1..].iter().all(|b| matches!(b.reach, Reach::Singleton { .. }))
            && below.last().is_some_and(|b| b.unique)
    };
    let in_order = |n: &str| {
        let v = var_named(n);
        let walks: Vec<(&Stored, usize)> = stored
            .values()
            .flat_map(|s| (0..s.levels.len()).map(move |at| (s, at)))
            .filter(|(s, at)| s.levels[*at].var == v && !matches!(s.levels[*at].reach, Reach::Dense))
            .collect();
        walks.iter().all(|(s, at)| s.levels[*at].ordered && s.levels[*at].unique)
            || matches!(walks[..], [(s, at)] if run_of(s, at))
    };
    let names: Vec<String> = order.iter().map(|&v| name(v)).collect();
    let decision = decide(&names, &output, &in_order);
    let tensor = assembly.tensor.clone();
    let (gathered, one_level_after_sum) = match &decision {
        Decision::None => (levels.len(), false),
        Decision::Dense { hoisted } => (*hoisted, true),
        Decision::Sparse { hoisted, .. } => (*hoisted, false),
    };
    assembly.gathered = gathered;
    let over: Vec<String> = levels[gathered..].iter().map(|l| name(l.var)).collect();
    let hoisted: Vec<String> = levels[..gathered].iter().map(|l| name(l.var)).collect();
    let shared = match hoisted.is_empty() {
        true => String::new(),
        false => format!(" inside the shared loops of {}", hoisted.join(", ")),
    };
    let why = match &decision {
        Decision::None => {
            assembly.note = format!("none: the loops visit the levels of `{tensor}` in order");
            return Ok(());
        }
        Decision::Dense { .. } => format!("one level ({}) after a sum{shared}", over[0]),
        Decision::Sparse { order, ow_order, .. } => {
            let ow: Vec<String> = ow_order.iter().map(|o| o.to_string()).collect();
            format!(
                "order {} over ({}){shared}, filled in loop order ({}), ow_order [{}]",
                over.len(),
                over.join(", "),
                order.join(", "),
                ow.join(", ")
            )
        }
    };
    let range = levels[gathered..]
        .iter()
        .try_fold(1usize, |r, l| r.checked_mul(l.extent))
        .filter(|&r| r < i64::MAX as usize);
    let Some(range) = range else {
        return Err(refuse(
            format!(
                "a workspace over ({}) of `{tensor}` would label more coordinates than 64 bits hold",
                over.join(", ")
            ),
            lhs.span,
            "too large to gather",
        ));
    };
    let dense_fits = range <= super::DENSE_WORKSPACE_LIMIT;
    let (kind, picked) = match schedule.workspace {
        WorkspacePolicy::Use(Policy::Dense) if over.len() == 1 => (WorkspaceKind::Dense, "asked".to_string()),
        WorkspacePolicy::Use(Policy::Dense) if range > 1 << 28 => {
            return Err(refuse(
                format!("a dense workspace over ({}) of `{tensor}` needs {range} slots", over.join(", ")),
                lhs.span,
                "too large for a dense workspace",
            )
            .with_note("pick a sparse policy: workspace=hash (or bucket, coord, map, vector)".to_string()));
        }
        WorkspacePolicy::Use(Policy::Bucket) if levels[gathered].extent > 1 << 28 => {
            return Err(refuse(
                format!(
                    "a bucket workspace keeps a bucket per coordinate of `{}`: {} buckets",
                    over[0], levels[gathered].extent
                ),
                lhs.span,
                "too many buckets",
            )
            .with_note("pick workspace=hash or coord".to_string()));
        }
        WorkspacePolicy::Use(p) => (WorkspaceKind::Ism(p), "asked".to_string()),
        // One level after a sum: coordinates repeat across the sum.
        WorkspacePolicy::Auto if (one_level_after_sum || over.len() == 1) && dense_fits => {
            (WorkspaceKind::Dense, format!("auto: {range} coordinates fit a dense workspace"))
        }
        // Several levels: dense where the stored entries fill much of the
        // range, so coordinates repeat (high deduplication).
        WorkspacePolicy::Auto if dense_fits && range <= 16 * entries => (
            WorkspaceKind::Ism(Policy::Dense),
            format!("auto: {range} coordinates, {entries} stored entries: coordinates repeat"),
        ),
        // Sparse: gathering several levels (an outer product's rows and
        // columns), sorting the coordinates beat hashing them at every size
        // of `bench workspaces`' outer sweep (1.1-1.5x; 1.3-1.9x on a
        // power-law SpGEMM of 20,000 entries a side); one level keeps hash, which wins where rows repeat.
        WorkspacePolicy::Auto => {
            let policy = if over.len() > 1 { Policy::Coord } else { Policy::Hash };
            let why = match dense_fits {
                true => format!("auto: {range} coordinates, far more than {entries} stored entries"),
                false => format!("auto: {range} coordinates, past the dense limit"),
            };
            (WorkspaceKind::Ism(policy), why)
        }
    };
    assembly.workspace = kind;
    assembly.options = schedule.ws;
    let kind = match kind {
        WorkspaceKind::Dense => "dense".to_string(),
        WorkspaceKind::Ism(p) => p.to_string(),
    };
    assembly.note = format!("{kind} ({picked}), {why}");
    Ok(())
}

/// Whether every iteration of the outermost loop writes its own output
/// elements: a single dense loop, or a position loop over a unique level,
/// bound to an output index.
fn owns_its_outputs(body: &[Node], stored: &BTreeMap<String, Stored>, out_at: &[VarId]) -> bool {
    match body {
        [Node::Dense { var, .. }] => out_at.contains(var),
        [Node::Merge { var, levels, full: false, .. }] => {
            matches!(&levels[..], [l] if stored[&l.tensor].levels[l.level].unique) && out_at.contains(var)
        }
        _ => false,
    }
}

/// Under `max=` / `min=` the walk skips points where a stored operand is
/// zero, and there the value is zero too (the lattice skips only those),
/// which the reduction must see: wraps the loops in a [`Node::Fill`] that
/// counts each output element's updates and folds in zero where they were
/// fewer than its points. The fill goes below the loops that bind output
/// variables at every coordinate (dense loops, full merges), so a row's
/// count is a register; a loop that may skip an output coordinate (a
/// compressed level's rows: all zero) stays inside, counted per element.
/// `points`: an element's points. Whether the fill is at the top.
fn count_skipped_zeros(body: Vec<Node>, out_at: &[VarId], points: usize) -> (Vec<Node>, bool) {
    fn wrap(nodes: Vec<Node>, out_at: &[VarId], points: usize) -> Vec<Node> {
        let loops = nodes.iter().filter(|n| !matches!(n, Node::Locate { .. })).count();
        let descends = |n: &Node| match n {
            Node::Dense { var, .. } | Node::Merge { var, full: true, .. } => out_at.contains(var),
            _ => false,
        };
        if loops != 1 || !nodes.iter().any(descends) {
            return vec![Node::Fill { at: out_at.to_vec(), points, body: nodes }];
        }
        nodes
            .into_iter()
            .map(|n| match n {
                Node::Dense { var, body } => Node::Dense { var, body: wrap(body, out_at, points) },
                Node::Merge { var, levels, full, points: cases } => Node::Merge {
                    var,
                    levels,
                    full,
                    points: cases
                        .into_iter()
                        .map(|c| Point { present: c.present, body: wrap(c.body, out_at, points) })
                        .collect(),
                },
                other => other,
            })
            .collect()
    }
    let at_top = {
        let loops: Vec<&Node> = body.iter().filter(|n| !matches!(n, Node::Locate { .. })).collect();
        !matches!(&loops[..], [Node::Dense { var, .. } | Node::Merge { var, full: true, .. }] if out_at.contains(var))
    };
    (wrap(body, out_at, points), at_top)
}

/// Why a statement cannot take the level path, at `span`.
/// A diagnostic at `span` with `label` under it.
pub fn refuse(message: String, span: Span, label: &str) -> Diagnostic {
    Diagnostic::new(message, span).with_label(label)
}

/// The statement's right-hand side over stored and dense operands.
fn symbolic(
    e: &Ast,
    stored: &BTreeMap<String, Stored>,
    dense: &BTreeMap<String, TensorId>,
    plain: &dyn Fn(&Access) -> Result<Vec<VarId>, Diagnostic>,
) -> Result<Sym, Diagnostic> {
    let go = |e: &Ast| symbolic(e, stored, dense, plain);
    Ok(match e {
        Ast::Literal { value, .. } => Sym::Const(*value),
        Ast::Access(a) if stored.contains_key(&a.tensor.name) => Sym::Stored(a.tensor.name.clone()),
        Ast::Access(a) => Sym::Dense { tensor: dense[&a.tensor.name], at: plain(a)? },
        Ast::Neg { expr, .. } => Sym::Neg(Box::new(go(expr)?)),
        Ast::Binary { op, lhs, rhs, span } => {
            let divisor = go(rhs)?;
            // A divisor that is 0 where its stored operands have no entry
            // divides by zeros the iteration skips; one that is not there
            // (`1 + A[i,j]`) is iterated as any other value.
            if *op == BinOp::Div
                && zero_where_absent(rhs, &|t| stored.contains_key(t))
                && mentions_stored(rhs, stored)
            {
                return Err(refuse(
                    "dividing by a stored operand divides by its zeros, which iteration skips".to_string(),
                    rhs.span().to(*span),
                    "a stored divisor",
                ));
            }
            Sym::Binary { op: *op, lhs: Box::new(go(lhs)?), rhs: Box::new(divisor) }
        }
        Ast::Call { func, args, .. } => {
            Sym::Call { func: *func, args: args.iter().map(go).collect::<Result<_, _>>()? }
        }
    })
}

fn mentions_stored(e: &Ast, stored: &BTreeMap<String, Stored>) -> bool {
    e.accesses().iter().any(|a| stored.contains_key(&a.tensor.name))
}

/// Whether `e` is 0 where the operands `absent` names have no entry,
/// whatever the other values ([`restrict`]'s `None` with them absent): a
/// divisor whose zeros iteration would skip (`A[i,j]`; not
/// `exp(A[i,j]) + 1`), a product a search may skip where it finds no entry
/// of one factor.
pub(super) fn zero_where_absent(e: &Ast, absent: &dyn Fn(&str) -> bool) -> bool {
    let zero = |e: &Ast| zero_where_absent(e, absent);
    match e {
        Ast::Literal { value, .. } => *value == 0.0,
        Ast::Access(a) => absent(&a.tensor.name),
        Ast::Neg { expr, .. } => zero(expr),
        Ast::Binary { op: BinOp::Mul, lhs, rhs, .. } => zero(lhs) || zero(rhs),
        // A quotient is 0 where its dividend is, not where its divisor is.
        Ast::Binary { op: BinOp::Div, lhs, .. } => zero(lhs),
        Ast::Binary { lhs, rhs, .. } => zero(lhs) && zero(rhs),
        Ast::Call { func, args, .. } => keeps_zero(*func) && args.iter().all(zero),
    }
}

/// Whether `f(0, 0, ...) = 0`, so a call of absent operands is absent.
fn keeps_zero(f: Func) -> bool {
    !matches!(f, Func::Exp | Func::Sigmoid)
}

/// `e` where the stored operands `absent` have no entry (read as 0);
/// `None` where it is 0 for every value of the others.
fn restrict(e: &Sym, absent: &dyn Fn(&str) -> bool) -> Option<Sym> {
    match e {
        Sym::Const(c) if *c == 0.0 => None,
        Sym::Stored(t) if absent(t) => None,
        Sym::Const(_) | Sym::Stored(_) | Sym::Dense { .. } => Some(e.clone()),
        Sym::Neg(x) => restrict(x, absent).map(|x| Sym::Neg(Box::new(x))),
        Sym::Binary { op, lhs, rhs } => {
            let (l, r) = (restrict(lhs, absent), restrict(rhs, absent));
            match (op, l, r) {
                (BinOp::Mul | BinOp::Div, Some(l), Some(r)) => {
                    Some(Sym::Binary { op: *op, lhs: Box::new(l), rhs: Box::new(r) })
                }
                // A divisor that is 0 (a literal; a stored divisor is
                // refused) does not make the quotient 0: it divides by 0.
                (BinOp::Div, Some(l), None) => {
                    Some(Sym::Binary { op: BinOp::Div, lhs: Box::new(l), rhs: Box::new(Sym::Const(0.0)) })
                }
                (BinOp::Mul | BinOp::Div, _, _) => None,
                (_, None, None) => None,
                (_, Some(l), None) => Some(l),
                (BinOp::Sub, None, Some(r)) => Some(Sym::Neg(Box::new(r))),
                (_, None, Some(r)) => Some(r),
                (_, Some(l), Some(r)) => Some(Sym::Binary { op: *op, lhs: Box::new(l), rhs: Box::new(r) }),
            }
        }
        Sym::Call { func, args } => {
            let restricted: Vec<Option<Sym>> = args.iter().map(|a| restrict(a, absent)).collect();
            if keeps_zero(*func) && restricted.iter().all(Option::is_none) {
                return None;
            }
            Some(Sym::Call {
                func: *func,
                args: restricted.into_iter().map(|a| a.unwrap_or(Sym::Const(0.0))).collect(),
            })
        }
    }
}

/// The stored operands an expression reads.
fn stored_in(e: &Sym, out: &mut BTreeSet<String>) {
    match e {
        Sym::Stored(t) => {
            out.insert(t.clone());
        }
        Sym::Const(_) | Sym::Dense { .. } => {}
        Sym::Neg(x) => stored_in(x, out),
        Sym::Binary { lhs, rhs, .. } => {
            stored_in(lhs, out);
            stored_in(rhs, out);
        }
        Sym::Call { args, .. } => args.iter().for_each(|a| stored_in(a, out)),
    }
}

/// The loop order: the schedule's `order=` first, then, one at a time, a
/// variable whose stored levels above are all bound, preferring the next
/// level of a stored operand, then output variables, then the statement's
/// order.
fn loop_order(
    einsum: &Einsum,
    vars: &PrimaryMap<VarId, Var>,
    var_of: &BTreeMap<String, VarId>,
    stored: &BTreeMap<String, Stored>,
    out_at: &[VarId],
    schedule: &Schedule,
) -> Result<Vec<VarId>, Diagnostic> {
    let mut order = named_order(einsum, var_of, schedule)?;
    while order.len() < vars.len() {
        let ready = |v: VarId| {
            !order.contains(&v)
                && stored.values().all(|s| match s.levels.iter().position(|l| l.var == v) {
                    Some(l) => s.levels[..l].iter().all(|above| order.contains(&above.var)),
                    None => true,
                })
        };
        let next_level = |v: VarId| {
            stored
                .values()
                .any(|s| s.levels.iter().find(|l| !order.contains(&l.var)).is_some_and(|l| l.var == v))
        };
        let candidates: Vec<VarId> = vars.keys().filter(|&v| ready(v)).collect();
        let pick = candidates
            .iter()
            .copied()
            .max_by_key(|&v| (next_level(v), out_at.contains(&v), std::cmp::Reverse(v)))
            .unwrap_or_else(|| vars.keys().find(|v| !order.contains(v)).expect("a variable is left"));
        order.push(pick);
    }
    Ok(order)
}

/// The variables `order=` names, in its order.
pub fn named_order(
    einsum: &Einsum,
    var_of: &BTreeMap<String, VarId>,
    schedule: &Schedule,
) -> Result<Vec<VarId>, Diagnostic> {
    let mut order: Vec<VarId> = Vec::new();
    for name in &schedule.order {
        let Some(&v) = var_of.get(name) else {
            return Err(refuse(
                format!(
                    "`order={}` names `{name}`, which is not an index of the statement",
                    schedule.order.join("+")
                ),
                einsum.statement.span,
                "the statement",
            ));
        };
        if !order.contains(&v) {
            order.push(v);
        }
    }
    Ok(order)
}

/// Every stored operand's levels are bound in storage order: a level is
/// reached from its parent's position, so its parent's variable must be
/// bound first.
fn concordant(
    order: &[VarId],
    stored: &BTreeMap<String, Stored>,
    vars: &PrimaryMap<VarId, Var>,
) -> Result<(), Diagnostic> {
    let rank = |v: VarId| order.iter().position(|&o| o == v).expect("every variable is ordered");
    for (tname, s) in stored {
        for pair in s.levels.windows(2) {
            let (above, below) = (&pair[0], &pair[1]);
            if rank(below.var) < rank(above.var) {
                let (a, b) = (&vars[above.var].name, &vars[below.var].name);
                let span = s
                    .access
                    .subscripts
                    .iter()
                    .find(|sub| matches!(&sub.terms[..], [t] if matches!(&t.atom, Atom::Index(id) if id.name == *b)))
                    .map_or(s.access.span, |sub| sub.span);
                // An operand in dense levels alone needs no format: read
                // as a plain dense operand, it is read in any order.
                let all_dense =
                    |name: &str| stored[name].levels.iter().all(|l| matches!(l.reach, Reach::Dense));
                let dense_note = |name: &str| {
                    format!(
                        "`{name}` is stored in dense levels: give it no format, and it is read in any order"
                    )
                };
                // Another operand storing the two the other way round: no
                // order serves both, and naming one would send the user
                // round in a circle.
                let level_of = |s: &Stored, v: VarId| s.levels.iter().position(|l| l.var == v);
                let crossed = stored.iter().find(|(_, o)| {
                    level_of(o, below.var).zip(level_of(o, above.var)).is_some_and(|(b, a)| b < a)
                });
                if let Some((other, _)) = crossed {
                    return Err(refuse(
                        format!(
                            "`{tname}` stores `{a}` above `{b}` and `{other}` stores `{b}` above `{a}`: no loop order \
                             walks both in their storage order"
                        ),
                        span,
                        "stored the other way round",
                    )
                    .with_note(match [tname.as_str(), other.as_str()].into_iter().find(|n| all_dense(n)) {
                        Some(dense) => dense_note(dense),
                        None => format!(
                            "store `{tname}` and `{other}` with their levels in the same order (both csr, or both csc)"
                        ),
                    }));
                }
                return Err(refuse(
                    format!(
                        "the loop order visits `{b}` before `{a}`, but `{tname}` stores `{a}` above `{b}`"
                    ),
                    span,
                    "discordant index",
                )
                .with_note(match all_dense(tname) {
                    true => dense_note(tname),
                    false => format!(
                        "put `{a}` before `{b}` (schedule `order={a}+{b}`), or store `{tname}` with `{b}` first"
                    ),
                }));
            }
        }
    }
    Ok(())
}

struct Lowerer<'a> {
    stored: &'a BTreeMap<String, Stored>,
    order: &'a [VarId],
    out_at: &'a [VarId],
    /// The sparse output's levels; `None` for a dense output.
    out_levels: Option<&'a [OutLevel]>,
    /// The first output level a workspace gathers (the loops above it are
    /// the hoisted levels').
    gathered: usize,
}

/// Level `level` of stored operand `tensor`, as a kernel reads it.
pub(super) fn level_ref(stored: &BTreeMap<String, Stored>, tensor: &str, level: usize) -> LevelRef {
    let l = &stored[tensor].levels[level];
    LevelRef { tensor: tensor.to_string(), level, extent: l.extent, kind: l.reach.clone(), unique: l.unique }
}

impl Lowerer<'_> {
    fn level_ref(&self, tensor: &str, level: usize) -> LevelRef {
        level_ref(self.stored, tensor, level)
    }

    /// The loops from variable `d` of the order inward, for `e`; `in_ws`
    /// when a workspace gathers the output's last level.
    fn at(&self, d: usize, e: &Sym, in_ws: bool) -> Result<Vec<Node>, Diagnostic> {
        let Some(&var) = self.order.get(d) else {
            let value = self.expr(e);
            return Ok(vec![match self.out_levels {
                None => Node::Update { at: self.out_at.to_vec(), value },
                Some(_) => Node::Accumulate { value },
            }]);
        };
        if let Some(levels) = self.out_levels
            && !in_ws
            && d == self.gathered
            && self.gathered < levels.len()
        {
            return Ok(vec![Node::Workspace { body: self.at(d, e, true)? }]);
        }
        // The hoisted levels' loops append their entries; a workspace
        // gathers the others.
        let out_level = self
            .out_levels
            .and_then(|ls| ls.iter().position(|l| l.var == var))
            .filter(|&l| l < self.gathered);
        let entry = |body: Vec<Node>| -> Vec<Node> {
            match out_level {
                Some(l) => vec![Node::Entry { level: l, body }],
                None => body,
            }
        };
        let mut present = BTreeSet::new();
        stored_in(e, &mut present);
        let mut locates = Vec::new();
        let mut walks = Vec::new();
        for t in &present {
            if let Some(l) = self.stored[t].levels.iter().position(|l| l.var == var) {
                match self.stored[t].levels[l].reach {
                    Reach::Dense => locates.push((t.clone(), l)),
                    _ => walks.push((t.clone(), l)),
                }
            }
        }
        let located = |e: &Sym, inner: Vec<Node>| -> Vec<Node> {
            let mut still = BTreeSet::new();
            stored_in(e, &mut still);
            let mut body: Vec<Node> = locates
                .iter()
                .filter(|(t, _)| still.contains(t))
                .map(|(t, l)| Node::Locate { level: self.level_ref(t, *l), var })
                .collect();
            body.extend(inner);
            body
        };
        if walks.is_empty() {
            return Ok(vec![Node::Dense { var, body: entry(located(e, self.at(d + 1, e, in_ws)?)) }]);
        }
        let full = restrict(e, &|t| walks.iter().any(|(w, _)| w == t)).is_some();
        if walks.len() > 1 || full {
            for (t, l) in &walks {
                let level = &self.stored[t].levels[*l];
                if !(level.ordered && level.unique) {
                    // (One operand alone is co-iterated with every
                    // coordinate where the value is not zero without it.)
                    let why = match full {
                        true => format!(
                            "the value is not zero where `{t}` has no entry, so the walk visits every coordinate \
                             and `{t}`'s entries beside them; that"
                        ),
                        false => format!("co-iterating `{t}` with another operand"),
                    };
                    return Err(refuse(
                        format!("{why} needs `{t}`'s level {l} ordered and unique; this format's is not"),
                        self.stored[t].access.span,
                        "cannot co-iterate",
                    )
                    .with_note(format!(
                        "store `{t}` in a format with unique levels ({})",
                        match self.stored[t].levels.len() {
                            1 => "c",
                            2 => "csr, dcsr",
                            _ => "csf",
                        }
                    )));
                }
            }
        }
        let n = walks.len();
        let mut subsets: Vec<u32> = (if full { 0 } else { 1 }..(1u32 << n)).collect();
        subsets.sort_by_key(|s| std::cmp::Reverse(s.count_ones()));
        let mut points = Vec::new();
        for s in subsets {
            let present: Vec<bool> = (0..n).map(|i| s & (1 << i) != 0).collect();
            let absent = |t: &str| walks.iter().enumerate().any(|(i, (w, _))| w == t && !present[i]);
            let Some(restricted) = restrict(e, &absent) else { continue };
            let body = located(&restricted, self.at(d + 1, &restricted, in_ws)?);
            points.push(Point { present, body: entry(body) });
        }
        let levels = walks.iter().map(|(t, l)| self.level_ref(t, *l)).collect();
        Ok(vec![Node::Merge { var, levels, full, points }])
    }

    fn expr(&self, e: &Sym) -> Expr {
        match e {
            Sym::Const(c) => Expr::Const(*c),
            Sym::Stored(t) => {
                let s = &self.stored[t];
                Expr::Stored {
                    val: s.val,
                    at: Position::Level { tensor: t.clone(), level: s.levels.len() - 1 },
                }
            }
            Sym::Dense { tensor, at } => Expr::Dense { tensor: *tensor, at: at.clone() },
            Sym::Neg(x) => Expr::Neg(Box::new(self.expr(x))),
            Sym::Binary { op, lhs, rhs } => {
                Expr::Binary { op: *op, lhs: Box::new(self.expr(lhs)), rhs: Box::new(self.expr(rhs)) }
            }
            Sym::Call { func, args } => {
                Expr::Call { func: *func, args: args.iter().map(|a| self.expr(a)).collect() }
            }
        }
    }
}
