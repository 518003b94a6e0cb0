//! The format-conscious rewrite (DESIGN.md §5, Insum §3.1 and §4): a
//! format-agnostic Einsum plus a format for some of its operands becomes an
//! *indirect* Einsum over the formats' arrays, which evaluates to the same
//! result as the original with those operands dense.
//!
//! # The forms it produces
//!
//! A sparse tensor `T` stored in a format is replaced by the format's arrays,
//! named `{T}_{array}`. SpMM `C[m,n] += A[m,k] * B[k,n]` with `A` sparse
//! becomes, per format:
//!
//! | format | rewritten statement |
//! | --- | --- |
//! | `coo` | `C[A_crd0[p],n] += A_val[p] * B[A_crd1[p],n]` (Insum Figure 2) |
//! | `csr` | `C[A_row[p],n] += A_val[p] * B[A_crd[p],n]` (`A_row` expanded from `pos`) |
//! | `ell` | `C[m,n] += A_val[m,q] * B[A_crd[m,q],n]` (the row index stays) |
//! | `groupcoo:dim=0` | `C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]` (Insum §4.1) |
//! | `groupcoo:dim=1` | `C[A_crd[p,q],n] += A_val[p,q] * B[A_grp[p],n]` |
//! | `blockgroupcoo:bm=32,bk=32,dim=0` | `C[32*A_grp[p]+bi,n] += A_val[p,q,bi,bj] * B[32*A_crd[p,q]+bj,n]` (Figure 6) |
//! | `bcsr:bm=32,bk=32` | `C[32*A_row[p]+bi,n] += A_val[p,bi,bj] * B[32*A_crd[p]+bj,n]` (`A_row` expanded from `pos`) |
//!
//! Tensors of any order work in COO (`T_crd0`, `T_crd1`, …) and GroupCOO
//! grouped along any dimension (`T_grp` for the grouped one, `T_crd{d}` for
//! each other dimension `d` when the order is above 2). The paper's point-cloud
//! convolution with the map grouped by offset (§6.4, `groupcoo:dim=2`):
//!
//! ```text
//! Out[x,m] += Map[x,y,z] * In[y,c] * W[z,c,m]
//! Out[Map_crd0[p,q],m] += Map_val[p,q] * In[Map_crd1[p,q],c] * W[Map_grp[p],c,m]
//! ```
//!
//! and the equivariant tensor product with CG grouped by `l` (§6.5,
//! `groupcoo:dim=3`):
//!
//! ```text
//! Z[b,i,w] += CG[i,j,k,l] * X[b,j,u] * Y[b,k] * W[b,l,u,w]
//! Z[b,CG_crd0[p,q],w] += CG_val[p,q] * X[b,CG_crd1[p,q],u] * Y[b,CG_crd2[p,q]] * W[b,CG_grp[p],u,w]
//! ```
//!
//! # The mechanism
//!
//! The rewrite is one general substitution, not a table of statements. For
//! each sparse `T`, read as `T[i0, i1, …]`:
//!
//! 1. Every index `id` of `T` gets an affine replacement from the format: COO
//!    maps `id ↦ T_crd{d}[p]`; BlockGroupCOO grouped by rows maps
//!    `m ↦ bm*T_grp[p] + bi` and `k ↦ bk*T_crd[p,q] + bj` (the roles swap for
//!    `dim=1`); ELL keeps the row index.
//! 2. The replacement is substituted for the index everywhere: on the left,
//!    on the right, inside other tensors' affine subscripts (a term `c·id`
//!    becomes `c·replacement`, its offset scaled by `c` too) and inside
//!    indirect accesses.
//! 3. `T`'s own read becomes the read of its value array, `T_val[p, q, …]`.
//!
//! The new indices `p`, `q`, `bi`, `bj` take their extents from the arrays
//! (P groups, g per group, the block shape); a name already used by an index
//! or a tensor of the statement is replaced by a fresh one (`p2`, `q2`, …).
//! Several sparse tensors are rewritten one after another, in the order they
//! are read on the right.
//!
//! # When it is valid, and what is refused
//!
//! The rewritten statement visits only the stored entries of `T`, so it drops
//! the contributions of `T`'s zeros. That is exact only when a zero of `T`
//! makes the whole contribution zero, so:
//!
//! - `T` must be read exactly once on the right, as a factor of the top-level
//!   product: `x * T[..] * y`, `-T[..] * x`, `T[..] * x / y` are fine;
//!   `T[..] + x`, `exp(T[..])`, `x / T[..]` are refused.
//! - The statement must reduce with a sum (`=` or `+=`): under `max=` /
//!   `min=` a zero contribution can win, so skipping zeros changes the result.
//! - `T`'s subscripts must be distinct plain indices (`T[m,k]`, not `T[i,i]`
//!   or `T[i+1,k]`): each is replaced by one coordinate array.
//! - Two sparse tensors must not share an index: the second one's subscripts
//!   are no longer plain once the first is rewritten (co-iterating two sparse
//!   operands needs a workspace, DESIGN.md §6).
//! - The formats are COO, CSR, ELL, GroupCOO, BlockGroupCOO and BCSR, the
//!   fixed-length forms an Einsum can loop over (Insum §4; CSR and BCSR once
//!   their row pointers are expanded to a row per entry or block); CSC, DCSR,
//!   DCSC, CSF and dense are refused (the level path walks them).
//!
//! Padding entries (GroupCOO, BlockGroupCOO, ELL) hold value 0 at an in-range
//! coordinate, so they add nothing to finite terms; where another factor
//! holds inf or NaN, a kernel skips ELL's and GroupCOO's padding by the
//! mask [`Padded::live`] builds (the driver decides). Blocks (BlockGroupCOO, BCSR) overrunning a ragged
//! edge rely on the affine rules of §3: a right-hand read out of bounds reads
//! 0 and a left-hand write out of bounds is dropped, and the block holds 0
//! there anyway. As with any sparse kernel, IEEE special values in the other
//! factors (`0 * inf`, `0 / 0`) are not reproduced at `T`'s zeros, and the
//! zeros inside blocks give NaN against them.

use std::collections::{BTreeMap, BTreeSet};

use ndarray::{ArrayD, IxDyn};
use spindle_formats::{Bcsr, BlockGroupCoo, Compressed, Coo, Ell, FormatSpec, GroupCoo, IType};

use crate::lang::{
    Access, AssignOp, Atom, BinOp, Declaration, Declarations, Diagnostic, Einsum, ElemType, Expr, Role, Span,
    Statement, Subscript, Term, WhereClause, check,
};
use crate::tensor::{TensorValue, Tensors};

/// The formats [`rewrite`] supports, as listed in its messages.
pub const SUPPORTED_FORMATS: &str = "coo, csr, ell, groupcoo, blockgroupcoo and bcsr";

/// The result of [`rewrite`].
#[derive(Clone, Debug, PartialEq)]
pub struct Rewritten {
    /// The indirect Einsum, e.g. `C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]`.
    pub statement: Statement,
    /// The new format arrays as data (values f64, indices i64).
    pub tensors: Tensors,
    /// The new arrays' shapes and dtypes: value arrays keep the sparse
    /// tensor's dtype, index arrays are i32 (i64 where a value needs it).
    pub declarations: Declarations,
    /// The sparse tensors the statement no longer reads, in rewrite order.
    pub replaced: Vec<String>,
    /// The rewritten tensors whose arrays hold padding.
    pub padded: Vec<Padded>,
}

/// A format's arrays that hold padding (ELL, GroupCOO): slots of value 0
/// that repeat the coordinates of the slot before them in their group. A
/// kernel may skip them through [`Padded::live`]'s mask.
#[derive(Clone, Debug, PartialEq)]
pub struct Padded {
    /// The stored tensor, as the user names it.
    pub tensor: String,
    /// A free name for the mask array.
    pub mask: String,
    /// The coordinate arrays, `[groups, slots]` each.
    pub crd: Vec<String>,
    /// The indices the value array is read at, group then slot.
    pub at: Vec<String>,
    /// ELL's value array: ELL pads an empty row whole, its first slot
    /// (coordinate 0, value 0) too, which the repeat rule would keep. A
    /// row whose slots share one coordinate and hold 0 is taken as empty,
    /// as ELL's own reading does (it cannot tell an explicit zero from
    /// padding).
    pub empty_rows: Option<String>,
}

impl Padded {
    /// `[groups, slots]`: 1 at an entry, 0 at padding. `tensors` holds the
    /// coordinate arrays.
    pub fn live(&self, tensors: &Tensors) -> TensorValue {
        let crd: Vec<&ArrayD<i64>> = self
            .crd
            .iter()
            .map(|c| match &tensors[c] {
                TensorValue::Indices(a) => a,
                TensorValue::Values(_) => unreachable!("coordinate arrays hold indices"),
            })
            .collect();
        let shape = crd[0].shape().to_vec();
        let slots = shape[1];
        let flat: Vec<&[i64]> =
            crd.iter().map(|a| a.as_slice().expect("arrays are standard layout")).collect();
        let repeats = |s: usize| flat.iter().all(|c| c[s] == c[s - 1]);
        let mut live: Vec<i64> =
            (0..crd[0].len()).map(|s| i64::from(s % slots == 0 || !repeats(s))).collect();
        if let Some(TensorValue::Values(val)) = self.empty_rows.as_ref().map(|v| &tensors[v]) {
            let val = val.as_slice().expect("arrays are standard layout");
            for row in (0..live.len()).step_by(slots.max(1)) {
                let slots = row..row + slots;
                if slots.clone().skip(1).all(repeats) && val[slots].iter().all(|&v| v == 0.0) {
                    live[row] = 0;
                }
            }
        }
        TensorValue::Indices(ArrayD::from_shape_vec(IxDyn(&shape), live).expect("the coordinates' shape"))
    }
}

impl Rewritten {
    /// The declarations the rewritten statement checks against: the new
    /// arrays plus the tensors of `original` that remain.
    pub fn all_declarations(&self, original: &Einsum) -> Declarations {
        let mut all: Declarations = original
            .tensors
            .iter()
            .filter(|(name, _)| !self.replaced.contains(name))
            .map(|(name, info)| (name.clone(), Declaration { shape: info.shape.clone(), dtype: info.dtype }))
            .collect();
        all.extend(self.declarations.iter().map(|(n, d)| (n.clone(), d.clone())));
        all
    }

    /// Checks the rewritten statement against [`Rewritten::all_declarations`].
    pub fn check(&self, original: &Einsum) -> Result<Einsum, Diagnostic> {
        check(&self.statement, &self.all_declarations(original))
    }
}

/// Rewrites `einsum` so that every tensor in `formats` is stored in its
/// format, with its entries taken from `sparse` (any order, duplicates
/// summed). See the [module documentation](self) for the forms, the
/// mechanism and what is refused; every refusal is a [`Diagnostic`] pointing
/// at the offending text.
pub fn rewrite(
    einsum: &Einsum,
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
) -> Result<Rewritten, Diagnostic> {
    let st = &einsum.statement;
    let mut out = Rewritten {
        statement: st.clone(),
        tensors: Tensors::new(),
        declarations: Declarations::new(),
        replaced: Vec::new(),
        padded: Vec::new(),
    };
    if formats.is_empty() {
        return Ok(out);
    }
    for (name, spec) in formats {
        validate(einsum, name, spec, sparse.get(name))?;
    }
    if matches!(st.op, AssignOp::MaxAssign | AssignOp::MinAssign) {
        let names: Vec<String> = formats.keys().map(|n| format!("`{n}`")).collect();
        return Err(Diagnostic::new(
            format!(
                "`{}` cannot be rewritten over sparse {}: the rewrite skips zeros, but a {} reduction sees them",
                st.op.as_str(),
                names.join(", "),
                if st.op == AssignOp::MaxAssign { "max" } else { "min" }
            ),
            st.op_span,
        )
        .with_label("zeros matter to this reduction")
        .with_note("store the tensor dense, or reduce with `=` or `+=`"));
    }

    // Rewrite in the order the tensors are read on the right.
    let mut order: Vec<&str> = Vec::new();
    for a in st.rhs.accesses() {
        let name = a.tensor.name.as_str();
        if formats.contains_key(name) && !order.contains(&name) {
            order.push(name);
        }
    }
    let mut declarations: Declarations = einsum
        .tensors
        .iter()
        .map(|(name, info)| (name.clone(), Declaration { shape: info.shape.clone(), dtype: info.dtype }))
        .collect();
    let mut current = einsum.clone();
    // Which tensor's rewrite replaced each index, for the shared-index message.
    let mut substituted: BTreeMap<String, String> = BTreeMap::new();
    for name in order {
        let (spec, coo) = (&formats[name], &sparse[name]);
        let step = rewrite_one(&current, einsum, name, spec, coo, &declarations, &substituted)?;
        for index in &step.substituted {
            substituted.insert(index.clone(), name.to_string());
        }
        declarations.remove(name);
        for (array, (data, decl)) in step.arrays {
            declarations.insert(array.clone(), decl.clone());
            out.declarations.insert(array.clone(), decl);
            out.tensors.insert(array, data);
        }
        out.replaced.push(name.to_string());
        out.padded.extend(step.padded);
        current = check(&step.statement, &declarations).map_err(|d| {
            Diagnostic::new(
                format!(
                    "internal error: the rewrite of `{name}` gives `{}`, which does not check: {}",
                    step.statement, d.message
                ),
                st.span,
            )
        })?;
    }
    out.statement = current.statement;
    Ok(out)
}

/// The checks that need no rewriting: the tensor is a value operand of the
/// statement, its format is supported, and its data fit its declaration.
fn validate(
    einsum: &Einsum,
    name: &str,
    spec: &FormatSpec,
    coo: Option<&Coo<f64, i64>>,
) -> Result<(), Diagnostic> {
    let st = &einsum.statement;
    let Some(info) = einsum.tensors.get(name) else {
        let used: Vec<&str> = einsum.tensors.keys().map(String::as_str).collect();
        return Err(Diagnostic::new(
            format!("`{name}` is given a format ({spec}) but the statement does not use it"),
            st.span,
        )
        .with_label(format!("no `{name}` here"))
        .with_note(format!("tensors in the statement: {}", used.join(", "))));
    };
    let read = first_access(st, name).unwrap_or(&st.lhs);
    match info.role {
        Role::Output => {
            return Err(Diagnostic::new(
                format!("`{name}` is the output; the rewrite stores operands sparse, not outputs"),
                st.lhs.span,
            )
            .with_label("written here")
            .with_note("a sparse output needs a workspace (DESIGN.md §6)"));
        }
        Role::Index => {
            return Err(Diagnostic::new(
                format!("`{name}` is an index tensor; only value operands can be stored in a sparse format"),
                read.span,
            )
            .with_label("read as an index here"));
        }
        Role::Operand => {}
    }
    if let ElemType::Index(itype) = info.dtype {
        return Err(Diagnostic::new(
            format!(
                "`{name}` holds {} indices; only value tensors (f64, f32, f16, bf16) can be stored in a sparse format",
                itype.name()
            ),
            read.span,
        ));
    }
    let supported = matches!(
        spec,
        FormatSpec::Coo
            | FormatSpec::Csr
            | FormatSpec::Ell
            | FormatSpec::GroupCoo { .. }
            | FormatSpec::BlockGroupCoo { .. }
            | FormatSpec::Bcsr { .. }
    );
    if !supported {
        let bounds = "its loops have data-dependent bounds, which an Einsum cannot express";
        let note = match spec {
            FormatSpec::Dense => {
                format!("a dense tensor needs no rewrite: leave `{name}` out of the formats")
            }
            FormatSpec::Csc | FormatSpec::Dcsc => {
                format!("{bounds}; to group by columns, use groupcoo:dim=1")
            }
            _ => format!("{bounds}; coo and groupcoo store the same entries with fixed bounds"),
        };
        return Err(Diagnostic::new(
            format!("`{name}` cannot be rewritten in {spec}: the rewrite supports {SUPPORTED_FORMATS}"),
            read.span,
        )
        .with_label(format!("stored as {spec}"))
        .with_note(note));
    }
    let order = info.shape.len();
    if spec.matrix_only() && order != 2 {
        return Err(Diagnostic::new(
            format!("{} needs a matrix, but `{name}` has order {order}", spec.name()),
            read.span,
        )
        .with_label(format!("stored as {spec}"))
        .with_note("coo and groupcoo store tensors of any order"));
    }
    if let FormatSpec::GroupCoo { dim, .. } | FormatSpec::BlockGroupCoo { dim, .. } = spec
        && *dim >= order
    {
        return Err(Diagnostic::new(
            format!("`{name}` cannot be grouped along dimension {dim}: it has order {order}"),
            read.span,
        )
        .with_label(format!("stored as {spec}")));
    }
    let Some(coo) = coo else {
        return Err(Diagnostic::new(
            format!("no sparse data given for `{name}` (stored as {spec})"),
            read.span,
        )
        .with_label("its entries are needed to build the format's arrays"));
    };
    let shape = |s: &[usize]| s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x");
    if coo.shape != info.shape {
        return Err(Diagnostic::new(
            format!(
                "the sparse data for `{name}` have shape {} but the statement has {}",
                shape(&coo.shape),
                shape(&info.shape)
            ),
            read.span,
        ));
    }
    if let Err(e) = check_entries(coo) {
        return Err(Diagnostic::new(format!("the sparse data for `{name}` are invalid: {e}"), read.span));
    }
    Ok(())
}

/// What [`Coo::new`] checks, without copying the arrays: one coordinate
/// array per dimension, all as long as `val`, every coordinate in range.
fn check_entries(coo: &Coo<f64, i64>) -> Result<(), String> {
    let (shape, order) = (&coo.shape, coo.shape.len());
    if coo.crd.len() != order {
        return Err(format!("{} coordinate arrays for a tensor of order {order}", coo.crd.len()));
    }
    for (d, c) in coo.crd.iter().enumerate() {
        if c.len() != coo.val.len() {
            return Err(format!("crd{d} has {} entries but val has {}", c.len(), coo.val.len()));
        }
    }
    for (d, c) in coo.crd.iter().enumerate() {
        if let Some(k) = c.iter().position(|&x| usize::try_from(x).map_or(true, |x| x >= shape[d])) {
            let coord: Vec<i64> = coo.crd.iter().map(|c| c[k]).collect();
            return Err(format!("coordinate {coord:?} is outside the shape {shape:?}"));
        }
    }
    Ok(())
}

fn first_access<'a>(st: &'a Statement, name: &str) -> Option<&'a Access> {
    st.rhs.accesses().into_iter().find(|a| a.tensor.name == name)
}

/// One tensor's rewrite.
struct Step {
    statement: Statement,
    /// `{T}_{array}` → data and declaration.
    arrays: Vec<(String, (TensorValue, Declaration))>,
    /// The indices the rewrite replaced.
    substituted: Vec<String>,
    padded: Option<Padded>,
}

/// The indices a format's rewrite introduces, before a digit makes them
/// fresh (`p2`): positions in its arrays, and a block's rows and columns.
/// Formats the tile path does not rewrite (CSC, DCSR, CSF, level lists)
/// introduce none.
pub fn position_indices(spec: &FormatSpec) -> &'static [&'static str] {
    match spec {
        FormatSpec::Coo | FormatSpec::Csr => &["p"],
        FormatSpec::Ell => &["q"],
        FormatSpec::GroupCoo { .. } => &["p", "q"],
        FormatSpec::BlockGroupCoo { .. } => &["p", "q", "bi", "bj"],
        FormatSpec::Bcsr { .. } => &["p", "bi", "bj"],
        _ => &[],
    }
}

/// A format's arrays and how `T`'s indices map onto them.
struct Layout {
    /// Suffix (`crd0`, `val`, …) → data.
    arrays: Vec<(String, TensorValue)>,
    /// Per dimension of `T`: the replacement of its index (`None`: it stays).
    dims: Vec<Option<Subscript>>,
    /// The subscripts of the value array.
    val: Vec<Subscript>,
}

fn rewrite_one(
    current: &Einsum,
    original: &Einsum,
    name: &str,
    spec: &FormatSpec,
    coo: &Coo<f64, i64>,
    declarations: &Declarations,
    substituted: &BTreeMap<String, String>,
) -> Result<Step, Diagnostic> {
    let st = &current.statement;
    let reads: Vec<&Access> = st.rhs.accesses().into_iter().filter(|a| a.tensor.name == name).collect();
    let access = match reads[..] {
        [one] => one,
        [] => {
            return Err(Diagnostic::new(
                format!("`{name}` is not read on the right-hand side"),
                st.rhs.span(),
            ));
        }
        [first, second, ..] => {
            return Err(Diagnostic::new(
                format!(
                    "`{name}` is read {} times on the right-hand side; the rewrite needs exactly one read",
                    reads.len()
                ),
                second.span,
            )
            .with_label("read again here")
            .with_secondary(first.span, "first read")
            .with_note("store only one of the operands sparse, or give the other read its own tensor"));
        }
    };
    if let Some(Some((span, what))) = locate(&st.rhs, name, None) {
        return Err(Diagnostic::new(
            format!("`{name}` is not a factor of the top-level product: it is read inside {what}"),
            access.span,
        )
        .with_label(format!("`{name}` read here"))
        .with_secondary(span, what)
        .with_note(format!(
            "the rewrite visits only the stored entries of `{name}`; that is valid only when a zero of `{name}` \
             makes the whole contribution zero, as in `x * {name}[..] * y`"
        )));
    }

    // The subscripts: distinct plain indices.
    let original_read = first_access(&original.statement, name);
    let mut indices: Vec<String> = Vec::new();
    for (dim, s) in access.subscripts.iter().enumerate() {
        let Some(ident) = s.as_index() else {
            let before = original_read.and_then(|a| a.subscripts.get(dim)).and_then(|s| s.as_index());
            if let Some(index) = before
                && let Some(other) = substituted.get(&index.name)
            {
                return Err(Diagnostic::new(
                    format!(
                        "`{name}` shares the index `{}` with `{other}`, also stored in a format: the tile path's \
                         rewrite walks one stored operand's entries per index",
                        index.name
                    ),
                    s.span,
                )
                .with_label(format!("`{}` here", index.name))
                .with_note(
                    "the level path (path=levels) co-iterates the two operands' levels; or store one of them \
                     dense",
                ));
            }
            return Err(Diagnostic::new(
                format!(
                    "subscript `{s}` of `{name}` is not a plain index; the rewrite needs `{name}[i, j, ...]`"
                ),
                s.span,
            )
            .with_label("not a plain index")
            .with_note(
                "each index of a sparse operand is replaced by one of its format's coordinate arrays",
            ));
        };
        if let Some(first) =
            access.subscripts[..dim].iter().find(|t| t.as_index().map(|i| &i.name) == Some(&ident.name))
        {
            return Err(Diagnostic::new(
                format!(
                    "index `{}` appears twice in the subscripts of `{name}`; the rewrite needs distinct indices",
                    ident.name
                ),
                s.span,
            )
            .with_label("again here")
            .with_secondary(first.span, "first here")
            .with_note("a diagonal access would need a constraint between coordinate arrays"));
        }
        indices.push(ident.name.clone());
    }

    // Names: the arrays must be free; the new indices are made fresh.
    let mut used: BTreeSet<String> = declarations.keys().cloned().collect();
    used.extend(current.tensors.keys().cloned());
    used.extend(current.indices.iter().map(|i| i.name.clone()));
    for w in &st.wheres {
        match w {
            WhereClause::Extent { index, .. } => used.insert(index.name.clone()),
            WhereClause::Dtype { tensor, .. } => used.insert(tensor.name.clone()),
        };
    }
    let mut fresh = |base: &str| {
        let name = crate::names::first_free(base, "", |n| !used.contains(n));
        used.insert(name.clone());
        name
    };
    let format_error = |e: spindle_formats::FormatError| {
        Diagnostic::new(format!("cannot store `{name}` as {spec}: {e}"), access.span)
    };
    // The new indices, in `position_indices`'s order, so the two cannot drift.
    let fresh_names: Vec<String> = position_indices(spec).iter().map(|base| fresh(base)).collect();
    let pos = |k: usize| fresh_names[k].as_str();
    // The arrays: `{name}_{suffix}`, or with `_2`, `_3`, ... where the
    // statement has that name (a user's `A_val` beside `A`).
    let array =
        |suffix: &str| crate::names::first_free(&format!("{name}_{suffix}"), "_", |n| !used.contains(n));
    let layout = match spec {
        FormatSpec::Coo => coo_layout(coo, &array, pos(0)),
        FormatSpec::Csr => csr_layout(coo, &array, pos(0)).map_err(format_error)?,
        FormatSpec::Ell => ell_layout(coo, &array, &indices[0], pos(0)).map_err(format_error)?,
        FormatSpec::GroupCoo { dim, g } => {
            let gc = GroupCoo::from_coo(coo, *dim, *g).map_err(format_error)?;
            group_layout(&gc, &array, pos(0), pos(1))
        }
        FormatSpec::BlockGroupCoo { bm, bk, dim, g } => {
            let b = BlockGroupCoo::from_coo(coo, *bm, *bk, *dim, *g).map_err(format_error)?;
            ragged_block_check(st, name, &indices, b.shape, [b.bm, b.bk])?;
            block_layout(&b, &array, [pos(0), pos(1), pos(2), pos(3)])
        }
        FormatSpec::Bcsr { bm, bk } => {
            let b = Bcsr::from_coo(coo, *bm, *bk).map_err(format_error)?;
            ragged_block_check(st, name, &indices, b.shape, [b.bm, b.bk])?;
            bcsr_layout(&b, &array, [pos(0), pos(1), pos(2)])
        }
        _ => unreachable!("validated before"),
    };
    // Substitute every index of `T` everywhere, then read the value array.
    let map: BTreeMap<&str, &Subscript> =
        indices.iter().zip(&layout.dims).filter_map(|(i, r)| r.as_ref().map(|r| (i.as_str(), r))).collect();
    let mut statement = st.clone();
    substitute_access(&mut statement.lhs, &map, st.span)?;
    let mut error = None;
    statement.rhs = map_accesses(&st.rhs, &mut |a: &Access| {
        if a.tensor.name == name {
            let mut val = Access::new(&array("val"), layout.val.clone());
            val.span = a.span;
            val.tensor.span = a.tensor.span;
            return val;
        }
        let mut a = a.clone();
        if let Err(e) = substitute_access(&mut a, &map, st.span) {
            error.get_or_insert(e);
        }
        a
    });
    if let Some(e) = error {
        return Err(e);
    }
    // `where` clauses about the replaced tensor and indices go away; the
    // value array's declaration carries the dtype.
    statement.wheres.retain(|w| match w {
        WhereClause::Extent { index, .. } => !map.contains_key(index.name.as_str()),
        WhereClause::Dtype { tensor, .. } => tensor.name != name,
    });

    let padded = matches!(spec, FormatSpec::Ell | FormatSpec::GroupCoo { .. }).then(|| Padded {
        tensor: name.to_string(),
        mask: array("live"),
        crd: layout
            .arrays
            .iter()
            .filter(|(suffix, _)| suffix.starts_with("crd"))
            .map(|(s, _)| array(s))
            .collect(),
        at: layout.val.iter().filter_map(|s| s.as_index()).map(|i| i.name.clone()).collect(),
        empty_rows: matches!(spec, FormatSpec::Ell).then(|| array("val")),
    });
    let value_dtype = current.tensors[name].dtype;
    let arrays = layout
        .arrays
        .into_iter()
        .map(|(suffix, data)| {
            let dtype = match &data {
                TensorValue::Values(_) => value_dtype,
                TensorValue::Indices(a) => {
                    let wide = a.iter().any(|&v| i32::try_from(v).is_err());
                    ElemType::Index(if wide { IType::I64 } else { IType::I32 })
                }
            };
            let decl = Declaration { shape: data.shape().to_vec(), dtype };
            (array(&suffix), (data, decl))
        })
        .collect();
    Ok(Step { statement, arrays, substituted: map.keys().map(|k| k.to_string()).collect(), padded })
}

/// Whether `name` is read in `e` as a factor of its top-level product (the
/// rewrite's condition for visiting only the stored entries).
pub fn is_top_level_factor(e: &Expr, name: &str) -> bool {
    matches!(locate(e, name, None), Some(None))
}

/// Where the read of `name` sits in `e`: `None` when it is not there,
/// `Some(None)` when it is a factor of the top-level product, and
/// `Some(Some((span, what)))` naming the first construct on the way down
/// that is not a product (a sum, a function, a denominator).
fn locate(e: &Expr, name: &str, blocker: Option<(Span, String)>) -> Option<Option<(Span, String)>> {
    match e {
        Expr::Literal { .. } => None,
        Expr::Access(a) => (a.tensor.name == name).then_some(blocker),
        Expr::Neg { expr, .. } => locate(expr, name, blocker),
        Expr::Binary { op: BinOp::Mul, lhs, rhs, .. } => {
            locate(lhs, name, blocker.clone()).or_else(|| locate(rhs, name, blocker))
        }
        Expr::Binary { op: BinOp::Div, lhs, rhs, .. } => locate(lhs, name, blocker.clone()).or_else(|| {
            locate(rhs, name, blocker.or_else(|| Some((rhs.span(), "the denominator of a division".into()))))
        }),
        Expr::Binary { op, lhs, rhs, span } => {
            let what = if *op == BinOp::Add { "a sum" } else { "a difference" };
            let blocker = blocker.or_else(|| Some((*span, what.into())));
            locate(lhs, name, blocker.clone()).or_else(|| locate(rhs, name, blocker))
        }
        Expr::Call { func, args, span } => {
            let blocker = blocker.or_else(|| Some((*span, format!("the function `{}`", func.name()))));
            args.iter().find_map(|a| locate(a, name, blocker.clone()))
        }
    }
}

/// `e` with every access (not the indirect ones, which are inside
/// subscripts) replaced by `f` of it.
pub(crate) fn map_accesses(e: &Expr, f: &mut impl FnMut(&Access) -> Access) -> Expr {
    match e {
        Expr::Literal { .. } => e.clone(),
        Expr::Access(a) => Expr::Access(f(a)),
        Expr::Neg { expr, span } => Expr::Neg { expr: Box::new(map_accesses(expr, f)), span: *span },
        Expr::Binary { op, lhs, rhs, span } => Expr::Binary {
            op: *op,
            lhs: Box::new(map_accesses(lhs, f)),
            rhs: Box::new(map_accesses(rhs, f)),
            span: *span,
        },
        Expr::Call { func, args, span } => {
            Expr::Call { func: *func, args: args.iter().map(|a| map_accesses(a, f)).collect(), span: *span }
        }
    }
}

/// Replaces the indices in `map` inside `access`'s subscripts, recursing
/// into indirect accesses: a term `c·i` becomes `c·(Σ cⱼ·atomⱼ + o)`.
fn substitute_access(
    access: &mut Access,
    map: &BTreeMap<&str, &Subscript>,
    span: Span,
) -> Result<(), Diagnostic> {
    for s in &mut access.subscripts {
        let mut terms = Vec::with_capacity(s.terms.len());
        let mut offset = s.offset;
        for mut term in std::mem::take(&mut s.terms) {
            match &mut term.atom {
                Atom::Index(ident) => {
                    if let Some(rep) = map.get(ident.name.as_str()) {
                        let overflow =
                            || Diagnostic::new("subscript coefficient overflows in the rewrite", span);
                        for r in &rep.terms {
                            let coeff = term.coeff.checked_mul(r.coeff).ok_or_else(overflow)?;
                            terms.push(Term { coeff, atom: r.atom.clone(), span: term.span });
                        }
                        let shift = term.coeff.checked_mul(rep.offset).ok_or_else(overflow)?;
                        offset = offset.checked_add(shift).ok_or_else(overflow)?;
                        continue;
                    }
                }
                Atom::Indirect(inner) => substitute_access(inner, map, span)?,
            }
            terms.push(term);
        }
        s.terms = terms;
        s.offset = offset;
    }
    Ok(())
}

/// Blocks (BlockGroupCOO, BCSR) overrun a ragged edge, where the rewrite
/// relies on out-of-bounds reads giving 0. Reads of index tensors must stay
/// in bounds, so an index of `T` used inside an indirect access needs an
/// extent that is a multiple of its block size.
fn ragged_block_check(
    st: &Statement,
    name: &str,
    indices: &[String],
    shape: [usize; 2],
    block: [usize; 2],
) -> Result<(), Diagnostic> {
    for (dim, index) in indices.iter().enumerate() {
        if shape[dim].is_multiple_of(block[dim]) {
            continue;
        }
        // Past the edge every read is the fill value 0: fine for products,
        // but a division or a function could make inf or NaN of it.
        if let Some((span, what)) = not_zero_preserving(&st.rhs, index) {
            return Err(Diagnostic::new(
                format!(
                    "blocks of {} overrun the extent {} of `{name}` (a ragged edge), where reads give 0 and {what} \
                     could turn that into inf or NaN",
                    block[dim], shape[dim]
                ),
                span,
            )
            .with_note(format!("use a block size that divides {}, or groupcoo", shape[dim])));
        }
        let mut inside: Vec<&Access> = Vec::new();
        for a in std::iter::once(&st.lhs).chain(st.rhs.accesses()) {
            collect_indirect(a, &mut inside);
        }
        let hit = inside.into_iter().find(|x| x.index_uses().iter().any(|u| u.ident.name == *index));
        if let Some(x) = hit {
            return Err(Diagnostic::new(
                format!(
                    "`{index}` is used inside the index tensor `{}`, whose reads must stay in bounds, but blocks of {} \
                     overrun its extent {} at the ragged edge of `{name}`",
                    x.tensor.name, block[dim], shape[dim]
                ),
                x.span,
            )
            .with_note(format!("use a block size that divides {}, or groupcoo", shape[dim])));
        }
    }
    Ok(())
}

/// The first division whose denominator, or function call whose argument,
/// reads through `index`: where a read of 0 past a ragged edge need not
/// give 0.
fn not_zero_preserving(e: &Expr, index: &str) -> Option<(Span, String)> {
    let reads = |e: &Expr| e.accesses().iter().any(|a| a.index_uses().iter().any(|u| u.ident.name == index));
    match e {
        Expr::Literal { .. } | Expr::Access(_) => None,
        Expr::Neg { expr, .. } => not_zero_preserving(expr, index),
        Expr::Binary { op: BinOp::Div, rhs, span, .. } if reads(rhs) => Some((*span, "a division".into())),
        Expr::Call { func, span, .. } if reads(e) => Some((*span, format!("the function `{}`", func.name()))),
        Expr::Binary { lhs, rhs, .. } => {
            not_zero_preserving(lhs, index).or_else(|| not_zero_preserving(rhs, index))
        }
        Expr::Call { .. } => None,
    }
}

/// The indirect accesses inside `a`'s subscripts, outermost first.
fn collect_indirect<'a>(a: &'a Access, out: &mut Vec<&'a Access>) {
    for s in &a.subscripts {
        for t in &s.terms {
            if let Atom::Indirect(x) = &t.atom {
                out.push(x);
                collect_indirect(x, out);
            }
        }
    }
}

// ---- the formats' arrays and index maps ----

fn indices_array(shape: &[usize], data: Vec<i64>) -> TensorValue {
    TensorValue::Indices(ArrayD::from_shape_vec(IxDyn(shape), data).expect("array length matches its shape"))
}

fn values_array(shape: &[usize], data: Vec<f64>) -> TensorValue {
    TensorValue::Values(ArrayD::from_shape_vec(IxDyn(shape), data).expect("array length matches its shape"))
}

/// `X[i, j, ...]` as a subscript.
fn read(array: &str, indices: &[&str]) -> Subscript {
    Subscript::indirect(Access::new(array, indices.iter().map(|i| Subscript::index(i)).collect()))
}

/// `c*X[...] + i` as a subscript.
fn scaled_plus(c: usize, x: Subscript, index: &str) -> Subscript {
    let mut s = x;
    s.terms[0].coeff = i64::try_from(c).unwrap_or(i64::MAX);
    s.terms.extend(Subscript::index(index).terms);
    s
}

fn coo_layout(coo: &Coo<f64, i64>, array: &dyn Fn(&str) -> String, p: &str) -> Layout {
    let c = coo.clone().canonicalize();
    let nnz = c.nnz();
    let mut arrays: Vec<(String, TensorValue)> = c
        .crd
        .into_iter()
        .enumerate()
        .map(|(d, crd)| (format!("crd{d}"), indices_array(&[nnz], crd)))
        .collect();
    let dims = (0..arrays.len()).map(|d| Some(read(&array(&format!("crd{d}")), &[p]))).collect();
    arrays.push(("val".into(), values_array(&[nnz], c.val)));
    Layout { arrays, dims, val: vec![Subscript::index(p)] }
}

fn csr_layout(
    coo: &Coo<f64, i64>,
    array: &dyn Fn(&str) -> String,
    p: &str,
) -> spindle_formats::Result<Layout> {
    let csr = Compressed::from_coo(coo, 0)?;
    let mut row = Vec::with_capacity(csr.nnz());
    for i in 0..csr.shape[0] {
        row.extend(std::iter::repeat_n(i as i64, csr.slice(i).len()));
    }
    let nnz = csr.nnz();
    Ok(Layout {
        arrays: vec![
            ("row".into(), indices_array(&[nnz], row)),
            ("crd".into(), indices_array(&[nnz], csr.crd)),
            ("val".into(), values_array(&[nnz], csr.val)),
        ],
        dims: vec![Some(read(&array("row"), &[p])), Some(read(&array("crd"), &[p]))],
        val: vec![Subscript::index(p)],
    })
}

fn ell_layout(
    coo: &Coo<f64, i64>,
    array: &dyn Fn(&str) -> String,
    m: &str,
    q: &str,
) -> spindle_formats::Result<Layout> {
    let ell = Ell::from_csr(&Compressed::from_coo(coo, 0)?)?;
    let shape = [ell.shape[0], ell.width];
    Ok(Layout {
        arrays: vec![
            ("crd".into(), indices_array(&shape, ell.crd)),
            ("val".into(), values_array(&shape, ell.val)),
        ],
        dims: vec![None, Some(read(&array("crd"), &[m, q]))],
        val: vec![Subscript::index(m), Subscript::index(q)],
    })
}

fn group_layout(gc: &GroupCoo<f64, i64>, array: &dyn Fn(&str) -> String, p: &str, q: &str) -> Layout {
    let order = gc.shape.len();
    let shape = [gc.groups(), gc.g];
    let others: Vec<usize> = (0..order).filter(|&d| d != gc.dim).collect();
    let crd_name = |d: usize| if others.len() == 1 { "crd".to_string() } else { format!("crd{d}") };
    let mut arrays = vec![("grp".to_string(), indices_array(&[gc.groups()], gc.grp.clone()))];
    let mut dims = vec![None; order];
    dims[gc.dim] = Some(read(&array("grp"), &[p]));
    for (&d, crd) in others.iter().zip(&gc.crd) {
        arrays.push((crd_name(d), indices_array(&shape, crd.clone())));
        dims[d] = Some(read(&array(&crd_name(d)), &[p, q]));
    }
    arrays.push(("val".into(), values_array(&shape, gc.val.clone())));
    Layout { arrays, dims, val: vec![Subscript::index(p), Subscript::index(q)] }
}

fn block_layout(b: &BlockGroupCoo<f64, i64>, array: &dyn Fn(&str) -> String, names: [&str; 4]) -> Layout {
    let [p, q, bi, bj] = names;
    let grp = read(&array("grp"), &[p]);
    let crd = read(&array("crd"), &[p, q]);
    let dims = if b.dim == 0 {
        vec![Some(scaled_plus(b.bm, grp, bi)), Some(scaled_plus(b.bk, crd, bj))]
    } else {
        vec![Some(scaled_plus(b.bm, crd, bi)), Some(scaled_plus(b.bk, grp, bj))]
    };
    Layout {
        arrays: vec![
            ("grp".into(), indices_array(&[b.groups()], b.grp.clone())),
            ("crd".into(), indices_array(&[b.groups(), b.g], b.crd.clone())),
            ("val".into(), values_array(&[b.groups(), b.g, b.bm, b.bk], b.val.clone())),
        ],
        dims,
        val: [p, q, bi, bj].iter().map(|i| Subscript::index(i)).collect(),
    }
}

/// BCSR as block COO: `pos` expanded to the block row of every block, as
/// [`csr_layout`] expands CSR's.
fn bcsr_layout(b: &Bcsr<f64, i64>, array: &dyn Fn(&str) -> String, names: [&str; 3]) -> Layout {
    let [p, bi, bj] = names;
    let blocks = b.blocks();
    let mut row = Vec::with_capacity(blocks);
    for (r, w) in b.pos.windows(2).enumerate() {
        row.extend(std::iter::repeat_n(r as i64, (w[1] - w[0]) as usize));
    }
    Layout {
        arrays: vec![
            ("row".into(), indices_array(&[blocks], row)),
            ("crd".into(), indices_array(&[blocks], b.crd.clone())),
            ("val".into(), values_array(&[blocks, b.bm, b.bk], b.val.clone())),
        ],
        dims: vec![
            Some(scaled_plus(b.bm, read(&array("row"), &[p]), bi)),
            Some(scaled_plus(b.bk, read(&array("crd"), &[p]), bj)),
        ],
        val: [p, bi, bj].iter().map(|i| Subscript::index(i)).collect(),
    }
}
