//! The checker: resolves every tensor against its declaration, every index
//! to an extent, and rejects what cannot run, each with a diagnostic that
//! names the tensor, index and extents involved.

use std::collections::BTreeMap;

use super::ast::*;
use super::diagnostic::Diagnostic;
use super::einsum::*;

/// Checks a statement against the tensors it may name. `where` clauses in
/// the statement set extents and override declared dtypes.
pub fn check(statement: &Statement, declarations: &Declarations) -> Result<Einsum, Diagnostic> {
    let mut dtypes: BTreeMap<&str, ElemType> = BTreeMap::new();
    let mut where_extents: Vec<(&Ident, usize, Span)> = Vec::new();
    for clause in &statement.wheres {
        match clause {
            WhereClause::Dtype { tensor, dtype, .. } => {
                let an_index = std::iter::once(&statement.lhs)
                    .chain(statement.rhs.accesses())
                    .any(|a| a.index_uses().iter().any(|u| u.ident.name == tensor.name));
                if !declarations.contains_key(&tensor.name) && an_index {
                    return Err(Diagnostic::new(
                        format!("`{}` is an index, not a tensor: it has no dtype", tensor.name),
                        tensor.span,
                    )
                    .with_label("an index")
                    .with_note(
                        "a `where` gives tensors dtypes (`where A: f16`) and indices extents (`where i < 8`)",
                    ));
                }
                if !declarations.contains_key(&tensor.name) {
                    return Err(unknown_tensor(&tensor.name, tensor.span, declarations));
                }
                if dtypes.insert(&tensor.name, *dtype).is_some() {
                    return Err(Diagnostic::new(
                        format!("`where` gives `{}` a dtype twice", tensor.name),
                        tensor.span,
                    )
                    .with_label("a second dtype")
                    .with_note("give each tensor one dtype"));
                }
            }
            WhereClause::Extent { index, extent, span } => where_extents.push((index, *extent, *span)),
        }
    }

    // Every access with its role; indirect accesses are found inside
    // subscripts, recursively.
    let mut accesses: Vec<(&Access, Role)> = vec![(&statement.lhs, Role::Output)];
    accesses.extend(statement.rhs.accesses().into_iter().map(|a| (a, Role::Operand)));
    let mut i = 0;
    while i < accesses.len() {
        let (access, _) = accesses[i];
        for s in &access.subscripts {
            for t in &s.terms {
                if let Atom::Indirect(inner) = &t.atom {
                    accesses.push((inner, Role::Index));
                }
            }
        }
        i += 1;
    }

    let mut tensors: BTreeMap<String, TensorInfo> = BTreeMap::new();
    for &(access, role) in &accesses {
        let name = &access.tensor.name;
        let Some(decl) = declarations.get(name) else {
            let is_index = accesses.iter().any(|(a, _)| a.index_uses().iter().any(|u| u.ident.name == *name));
            if access.subscripts.is_empty() && is_index {
                return Err(Diagnostic::new(
                    format!("`{name}` is an index, and indices are not values"),
                    access.span,
                )
                .with_label("used as a value here")
                .with_note("the right-hand side computes with tensor reads and literals"));
            }
            return Err(unknown_tensor(name, access.tensor.span, declarations));
        };
        let dtype = dtypes.get(name.as_str()).copied().unwrap_or(decl.dtype);
        if let Some(mismatch) = rank_mismatch(access, decl) {
            return Err(mismatch);
        }
        match (role, dtype) {
            (Role::Index, ElemType::Value(d)) => {
                return Err(Diagnostic::new(
                    format!("`{name}` is used as an index tensor but holds {} values; index tensors must be i32 or i64", d.name()),
                    access.span,
                )
                .with_label("an indirect subscript reads an integer tensor"));
            }
            (Role::Output, ElemType::Index(i)) => {
                return Err(Diagnostic::new(
                    format!(
                        "the output `{name}` is an {} index tensor; outputs hold values (f64, f32, f16, bf16)",
                        i.name()
                    ),
                    access.span,
                ));
            }
            _ => {}
        }
        let entry = tensors.entry(name.clone()).or_insert(TensorInfo {
            name: name.clone(),
            shape: decl.shape.clone(),
            dtype,
            role,
        });
        // A tensor read both as an index and as a value is an index tensor.
        if role == Role::Index {
            entry.role = Role::Index;
        }
        if role == Role::Output {
            entry.role = Role::Output;
        }
    }
    if accesses.iter().filter(|(a, _)| a.tensor.name == statement.lhs.tensor.name).count() > 1 {
        let again = accesses
            .iter()
            .skip(1)
            .find(|(a, _)| a.tensor.name == statement.lhs.tensor.name)
            .map(|(a, _)| a.span);
        return Err(Diagnostic::new(
            format!("the output `{}` is also read on the right-hand side", statement.lhs.tensor.name),
            again.unwrap_or(statement.lhs.span),
        )
        .with_label("read here")
        .with_secondary(statement.lhs.span, "written here")
        .with_note(match statement.op {
            // `C[i] = C[i] * A[i]`: `+=` adds to the values it holds.
            AssignOp::Assign => format!(
                "use `+=` to accumulate into the output's values, or read a copy of `{}` under another name",
                statement.lhs.tensor.name
            ),
            // `+=` already reads the output once, as do `max=` and `min=`.
            op => format!(
                "`{}` already folds each value into the output's own; to read `{}` in the product, give a copy \
                 of its data another name",
                op.as_str(),
                statement.lhs.tensor.name
            ),
        }));
    }

    // Index names must not shadow tensor names.
    let uses: Vec<IndexUse<'_>> = accesses.iter().flat_map(|(a, _)| direct_uses(a)).collect();
    if let Some(u) = uses.iter().find(|u| declarations.contains_key(&u.ident.name)) {
        return Err(Diagnostic::new(
            format!("`{}` names a tensor, so it cannot be an index", u.ident.name),
            u.ident.span,
        )
        .with_label("used as an index here")
        .with_note(format!("did you mean `{}[...]`?", u.ident.name)));
    }

    // Extents: from subscripts that are an index alone, then `where`. The
    // operands' first: an output given no shape has one worked out from
    // an operand, so a conflict is between operands, and names them.
    let mut extents: BTreeMap<&str, (usize, ExtentSource, Span)> = BTreeMap::new();
    let output = |u: &&IndexUse<'_>| std::ptr::eq(u.access, &statement.lhs);
    let alone = uses.iter().filter(|u| u.alone);
    for u in alone.clone().filter(|u| !output(u)).chain(alone.filter(output)) {
        let extent = tensors[&u.access.tensor.name].shape[u.dim];
        let source = ExtentSource::Tensor { tensor: u.access.tensor.name.clone(), dim: u.dim };
        match extents.get(u.ident.name.as_str()) {
            None => {
                extents.insert(&u.ident.name, (extent, source, u.ident.span));
            }
            Some((first, ExtentSource::Tensor { tensor, dim }, span)) if *first != extent => {
                return Err(Diagnostic::new(
                    format!(
                        "conflicting extents: `{}` is {first} in {tensor} (dimension {dim}) but {extent} in {} (dimension {})",
                        u.ident.name, u.access.tensor.name, u.dim
                    ),
                    u.ident.span,
                )
                .with_label(format!("{} here", extent))
                .with_secondary(*span, format!("{first} here")));
            }
            Some(_) => {}
        }
    }
    for &(index, extent, span) in &where_extents {
        match extents.get(index.name.as_str()) {
            Some((first, ExtentSource::Tensor { tensor, dim }, first_span)) if *first != extent => {
                // An operand's extent rather than an output's, which may
                // have been worked out from that operand.
                let operand = uses.iter().find(|u| {
                    u.alone && u.ident.name == index.name && u.access.tensor.name != statement.lhs.tensor.name
                });
                let (tensor, dim, first_span) = match operand {
                    Some(u) => (&u.access.tensor.name, u.dim, u.ident.span),
                    None => (tensor, *dim, *first_span),
                };
                return Err(Diagnostic::new(
                    format!(
                        "conflicting extents: `{}` is {first} in {tensor} (dimension {dim}) but the `where` clause says {extent}",
                        index.name
                    ),
                    span,
                )
                .with_secondary(first_span, format!("{first} here")));
            }
            Some((first, ExtentSource::Where, _)) if *first != extent => {
                return Err(Diagnostic::new(
                    format!("conflicting extents: `where` gives `{}` both {first} and {extent}", index.name),
                    span,
                ));
            }
            Some(_) => {}
            None => {
                if !uses.iter().any(|u| u.ident.name == index.name) {
                    return Err(Diagnostic::new(
                        format!("`where` names `{}`, which no subscript uses", index.name),
                        index.span,
                    ));
                }
                extents.insert(&index.name, (extent, ExtentSource::Where, span));
            }
        }
    }

    // Indices in order of first appearance, the left-hand side first.
    let lhs_uses = direct_uses(&statement.lhs);
    let lhs_all = statement.lhs.index_uses();
    let mut indices: Vec<IndexInfo> = Vec::new();
    for u in lhs_all.iter().chain(uses.iter()) {
        if indices.iter().any(|i| i.name == u.ident.name) {
            continue;
        }
        let Some((extent, source, _)) = extents.get(u.ident.name.as_str()) else {
            return Err(Diagnostic::new(
                format!(
                    "index `{}` has no extent: it is never a subscript on its own, so no tensor dimension gives its size",
                    u.ident.name
                ),
                u.ident.span,
            )
            .with_label("used only inside an affine or indirect subscript")
            .with_note(format!("give it one with `where {} < N`", u.ident.name)));
        };
        let reduced = !lhs_all.iter().any(|l| l.ident.name == u.ident.name);
        indices.push(IndexInfo {
            name: u.ident.name.clone(),
            extent: *extent,
            reduced,
            source: source.clone(),
        });
    }

    // The kernels compute subscripts in 64-bit integers: one that can
    // leave their range would wrap in a kernel (to an address in range)
    // while the reference evaluator sees it out of range. An index
    // tensor's values are bounded by its data ([`check_subscript_reach`]).
    let extent_of = |name: &str| indices.iter().find(|i| i.name == name).map_or(0, |i| i.extent);
    for &(access, _) in &accesses {
        subscripts_reach(access, &extent_of, &|_| 0)?;
    }

    // A left-hand index only inside a pure affine term (no indirect part)
    // would scatter one contribution to several places: refuse it.
    for u in &lhs_uses {
        let alone_on_lhs = lhs_uses.iter().any(|l| l.alone && l.ident.name == u.ident.name);
        let subscript = &u.access.subscripts[u.dim];
        let pure_affine = subscript.terms.iter().all(|t| matches!(t.atom, Atom::Index(_)));
        if !u.alone && pure_affine && !alone_on_lhs {
            return Err(Diagnostic::new(
                format!(
                    "left-hand index `{}` is used only inside the affine term `{subscript}` of `{}`",
                    u.ident.name, u.access.tensor.name
                ),
                subscript.span,
            )
            .with_label(format!("`{}` is not a subscript on its own here", u.ident.name))
            .with_note("write every left-hand index alone in a subscript, and move the affine term to the right-hand side"));
        }
    }

    Ok(Einsum { statement: statement.clone(), tensors, indices })
}

/// Checks that no subscript of `einsum` leaves 64-bit integers, given
/// the largest magnitude of each index tensor's values (`largest`): with
/// data, a term `c*X[p]` reaches |c|·max|X|, which [`check`] cannot know.
pub fn check_subscript_reach(einsum: &Einsum, largest: &dyn Fn(&str) -> i128) -> Result<(), Diagnostic> {
    let statement = &einsum.statement;
    let extent_of = |name: &str| einsum.index(name).map_or(0, |i| i.extent);
    for access in statement.all_accesses() {
        subscripts_reach(access, &extent_of, largest)?;
    }
    Ok(())
}

/// Refuses a subscript of `access` whose magnitude can pass `i64::MAX`:
/// Σ |coeff|·(extent − 1) over indices, |coeff|·`largest` over index
/// tensors, plus |offset|.
fn subscripts_reach(
    access: &Access,
    extent_of: &dyn Fn(&str) -> usize,
    largest: &dyn Fn(&str) -> i128,
) -> Result<(), Diagnostic> {
    for subscript in &access.subscripts {
        let reach = subscript.terms.iter().fold(i128::from(subscript.offset).abs(), |sum, t| {
            let bound = match &t.atom {
                Atom::Index(ident) => extent_of(&ident.name).saturating_sub(1) as i128,
                Atom::Indirect(x) => largest(&x.tensor.name),
            };
            sum.saturating_add(i128::from(t.coeff).abs().saturating_mul(bound))
        });
        if reach > i128::from(i64::MAX) {
            return Err(Diagnostic::new(
                format!(
                    "the subscript `{subscript}` of `{}` can reach {reach} in magnitude, beyond 64-bit integers",
                    access.tensor.name
                ),
                subscript.span,
            )
            .with_label("kernels compute subscripts in 64-bit integers")
            .with_note("use smaller coefficients or offsets"));
        }
    }
    Ok(())
}

/// Declares an undeclared output from its subscripts: when each is a plain
/// index that is a subscript on its own somewhere on the right (also inside
/// index tensors) or given an extent by `where i < N`, the output takes
/// those extents, in its operands' dtype ([`output_dtype`]). Returns whether the output is declared afterwards.
pub fn declare_output(statement: &Statement, declarations: &mut Declarations) -> bool {
    let name = &statement.lhs.tensor.name;
    if declarations.contains_key(name) {
        return true;
    }
    let accesses = statement.rhs.accesses();
    let extent_of = |index: &str| {
        let operand = accesses.iter().flat_map(|a| a.index_uses()).find_map(|u| {
            let decl = declarations.get(&u.access.tensor.name)?;
            (u.alone && u.ident.name == index).then(|| decl.shape.get(u.dim).copied()).flatten()
        });
        operand.or_else(|| {
            statement.wheres.iter().find_map(|w| match w {
                WhereClause::Extent { index: i, extent, .. } if i.name == index => Some(*extent),
                _ => None,
            })
        })
    };
    let shape: Option<Vec<usize>> =
        statement.lhs.subscripts.iter().map(|s| s.as_index().and_then(|i| extent_of(&i.name))).collect();
    let Some(shape) = shape else { return false };
    let dtype = ElemType::Value(output_dtype(statement, declarations));
    declarations.insert(name.clone(), Declaration { shape, dtype });
    true
}

/// The dtype an undeclared output of `statement` is given: its operands'
/// dtypes (as declared, or as its `where A: f16` says) promoted
/// ([`spindle_formats::DType::promote`]: f64 operands make an f64 output,
/// f16 ones an f16 output), f32 where it reads none; a `where` naming the
/// output wins. An integer tensor read as a value counts as f64, as NumPy
/// promotes i32 and i64 with any float (f32 would round them past 2^24).
pub fn output_dtype(statement: &Statement, declarations: &Declarations) -> spindle_formats::DType {
    let said = |name: &str| {
        statement.wheres.iter().find_map(|w| match w {
            WhereClause::Dtype { tensor, dtype, .. } if tensor.name == name => Some(*dtype),
            _ => None,
        })
    };
    let value = |dtype: ElemType| match dtype {
        ElemType::Value(d) => d,
        ElemType::Index(_) => spindle_formats::DType::F64,
    };
    if let Some(ElemType::Value(d)) = said(&statement.lhs.tensor.name) {
        return d;
    }
    statement
        .rhs
        .accesses()
        .iter()
        .filter_map(|a| said(&a.tensor.name).or(declarations.get(&a.tensor.name).map(|d| d.dtype)).map(value))
        .reduce(spindle_formats::DType::promote)
        .unwrap_or(spindle_formats::DType::F32)
}

/// Why [`declare_output`] could not give `statement`'s output a shape,
/// pointing at the first output subscript without an extent: a constant,
/// an affine or indirect subscript, or an index that is alone in no
/// subscript on the right and has no `where i < N`.
pub fn output_shape_unknown(statement: &Statement) -> Diagnostic {
    let name = &statement.lhs.tensor.name;
    let alone_on_right = |index: &str| {
        statement.rhs.accesses().iter().flat_map(|a| a.index_uses()).any(|u| u.alone && u.ident.name == index)
            || statement
                .wheres
                .iter()
                .any(|w| matches!(w, WhereClause::Extent { index: i, .. } if i.name == index))
    };
    let (span, label) = statement
        .lhs
        .subscripts
        .iter()
        .find_map(|s| match s.as_index() {
            Some(i) if alone_on_right(&i.name) => None,
            Some(i) => Some((s.span, format!("`{}` is alone in no subscript on the right", i.name))),
            None => Some((s.span, "not an index alone".to_string())),
        })
        .unwrap_or((statement.lhs.span, "unknown shape".to_string()));
    Diagnostic::new(
        format!("the shape of the output `{name}` cannot be worked out from the right-hand side"),
        span,
    )
    .with_label(label)
}

/// The first tensor the right-hand side reads (or indexes by) that is not
/// declared, or that is read with another number of subscripts than its
/// rank: why an output's shape could not be worked out, where that is the
/// reason (a scalar read as `A[i]` gives `i` no extent).
pub fn operand_mistake(statement: &Statement, declarations: &Declarations) -> Option<Diagnostic> {
    let accesses = statement.rhs.accesses();
    accesses.iter().flat_map(|a| a.index_uses().into_iter().map(|u| u.access).chain([*a])).find_map(|a| {
        match declarations.get(&a.tensor.name) {
            None => Some(unknown_tensor(&a.tensor.name, a.tensor.span, declarations)),
            Some(decl) => rank_mismatch(a, decl),
        }
    })
}

/// `access` reads `decl` with another number of subscripts than its rank.
fn rank_mismatch(access: &Access, decl: &Declaration) -> Option<Diagnostic> {
    let (given, rank) = (access.subscripts.len(), decl.shape.len());
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    (given != rank).then(|| {
        Diagnostic::new(
            format!(
                "rank mismatch: `{}` has rank {rank} (shape {}) but is indexed with {given} subscript{}",
                access.tensor.name,
                shape_text(&decl.shape),
                plural(given)
            ),
            access.span,
        )
        .with_label(format!("{given} subscript{} here, {rank} expected", plural(given)))
    })
}

/// Index uses directly in this access's subscripts (not inside indirect
/// accesses, which are visited on their own).
fn direct_uses(access: &Access) -> Vec<IndexUse<'_>> {
    access.index_uses().into_iter().filter(|u| std::ptr::eq(u.access, access)).collect()
}

fn unknown_tensor(name: &str, span: Span, declarations: &Declarations) -> Diagnostic {
    let known: Vec<&str> = declarations.keys().map(String::as_str).collect();
    let note = if known.is_empty() {
        "no tensors are declared".to_string()
    } else {
        format!("declared tensors: {}", known.join(", "))
    };
    Diagnostic::new(format!("unknown tensor `{name}`"), span).with_label("not declared").with_note(note)
}

fn shape_text(shape: &[usize]) -> String {
    if shape.is_empty() {
        return "scalar".to_string();
    }
    shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
}

#[cfg(test)]
mod tests {
    use spindle_formats::{DType, IType};

    use super::*;
    use crate::lang::parse;

    fn decls(list: &[(&str, &[usize], &str)]) -> Declarations {
        crate::lang::einsum::declarations(list)
    }

    fn spmm() -> Declarations {
        decls(&[
            ("C", &[8, 16], "f32"),
            ("A", &[8, 4], "f32"),
            ("B", &[4, 16], "f32"),
            ("AM", &[10], "i32"),
            ("AK", &[10], "i32"),
            ("AV", &[10], "f16"),
            ("F", &[3, 3], "f32"),
        ])
    }

    fn err(src: &str, d: &Declarations) -> Diagnostic {
        let s = parse(src).unwrap();
        check(&s, d).unwrap_err()
    }

    #[test]
    fn spmm_extents_and_reductions() {
        let e = check(&parse("C[m,n] += A[m,k] * B[k,n]").unwrap(), &spmm()).unwrap();
        let summary: Vec<(String, usize, bool)> =
            e.indices.iter().map(|i| (i.name.clone(), i.extent, i.reduced)).collect();
        assert_eq!(summary, vec![("m".into(), 8, false), ("n".into(), 16, false), ("k".into(), 4, true)]);
        assert_eq!(e.tensors["A"].role, Role::Operand);
        assert_eq!(e.output().name, "C");
    }

    #[test]
    fn indirect_statements_check() {
        let e = check(&parse("C[AM[p],n] += AV[p] * B[AK[p],n]").unwrap(), &spmm()).unwrap();
        assert_eq!(e.tensors["AM"].role, Role::Index);
        assert_eq!(e.tensors["AV"].dtype, ElemType::Value(DType::F16));
        let p = e.index("p").unwrap();
        assert_eq!((p.extent, p.reduced), (10, false));
        assert_eq!(p.source, ExtentSource::Tensor { tensor: "AV".into(), dim: 0 });
    }

    #[test]
    fn where_sets_extents_and_dtypes() {
        let d =
            decls(&[("O", &[6, 6], "f32"), ("I", &[8, 8], "f32"), ("W", &[9], "f32"), ("X", &[4], "f32")]);
        let e = check(&parse("O[i,j] += I[i+p, j+q] * W[p] where q < 3").unwrap(), &d).unwrap();
        assert_eq!(e.index("q").unwrap().extent, 3);
        assert_eq!(e.index("q").unwrap().source, ExtentSource::Where);
        let e = check(&parse("O[i,j] = X[X2[i]] where X2: i64").unwrap(), &{
            let mut d = d.clone();
            d.insert("X2".into(), Declaration { shape: vec![6], dtype: ElemType::Value(DType::F32) });
            d
        })
        .unwrap();
        assert_eq!(e.tensors["X2"].dtype, ElemType::Index(IType::I64));
    }

    #[test]
    fn diagnostics_name_what_is_wrong() {
        let d = spmm();
        let e = err("C[m,n] += A[m,k] * Q[k,n]", &d);
        assert_eq!(e.message, "unknown tensor `Q`");
        assert_eq!(e.notes, vec!["declared tensors: A, AK, AM, AV, B, C, F"]);
        // 2^62 * m wraps to 0 at m = 4 in a kernel's 64-bit arithmetic.
        let e = err("C[m,n] = B[4611686018427387904*m, n]", &d);
        assert_eq!(
            e.message,
            "the subscript `4611686018427387904*m` of `B` can reach 32281802128991715328 in magnitude, beyond 64-bit integers"
        );
        assert!(check(&parse("C[m,n] += B[1152921504606846975*m, n]").unwrap(), &d).is_ok());
        assert_eq!(
            err("C[m,n] += A[m,k,j] * B[k,n]", &d).message,
            "rank mismatch: `A` has rank 2 (shape 8x4) but is indexed with 3 subscripts"
        );
        assert_eq!(
            err("C[m,n] += A[m,k] * B[n,k]", &d).message,
            "conflicting extents: `k` is 4 in A (dimension 1) but 16 in B (dimension 1)"
        );
        let e = err("C[m,n] += A[m,k+p] * B[k,n]", &d);
        assert_eq!(
            e.message,
            "index `p` has no extent: it is never a subscript on its own, so no tensor dimension gives its size"
        );
        assert_eq!(e.notes, vec!["give it one with `where p < N`"]);
        assert_eq!(
            err("C[AV[p],n] += A[p,n]", &d).message,
            "`AV` is used as an index tensor but holds f16 values; index tensors must be i32 or i64"
        );
        assert_eq!(
            err("C[m+p,n] += A[m,p] * B[p,n]", &d).message,
            "left-hand index `m` is used only inside the affine term `m+p` of `C`"
        );
        assert_eq!(
            err("C[m,n] = A[m,k] * B[k,n] where k < 5", &d).message,
            "conflicting extents: `k` is 4 in A (dimension 1) but the `where` clause says 5"
        );
        assert_eq!(
            err("AM[p] = A[p,k]", &d).message,
            "the output `AM` is an i32 index tensor; outputs hold values (f64, f32, f16, bf16)"
        );
        assert_eq!(
            err("C[m,n] = C[m,n] * 2", &d).message,
            "the output `C` is also read on the right-hand side"
        );
        assert!(err("C[m,n] = C[m,n] * 2", &d).notes[0].starts_with("use `+=` to accumulate"));
        // `+=` already accumulates: its note says what else to do.
        assert_eq!(
            err("C[m,n] += C[m,n] * 2", &d).notes,
            vec![
                "`+=` already folds each value into the output's own; to read `C` in the product, give a copy of \
                 its data another name"
            ]
        );
        assert_eq!(err("C[m,n] = A[m,B]", &d).message, "`B` names a tensor, so it cannot be an index");
        assert_eq!(
            err("C[m,n] = A[m,k] * B[k,n] where z < 3", &d).message,
            "`where` names `z`, which no subscript uses"
        );
        assert_eq!(err("C[m,n] = A[m,k] * B[k,n] where Z: f16", &d).message, "unknown tensor `Z`");
        let twice = err("C[m,n] = A[m,k] * B[k,n] where A: f64, A: f16", &d);
        assert_eq!((twice.message.as_str(), twice.span.start), ("`where` gives `A` a dtype twice", 39));
        assert_eq!(err("C[m,n] = A[m,n] * m", &d).message, "`m` is an index, and indices are not values");
    }

    #[test]
    fn outputs_are_declared_from_the_right_hand_side() {
        let mut d = spmm();
        d.remove("C");
        assert!(declare_output(&parse("C[m,n] += A[m,k] * B[k,n]").unwrap(), &mut d));
        assert_eq!(d["C"].shape, vec![8, 16]);
        let mut d = decls(&[("A", &[5], "f32"), ("X", &[7], "i32")]);
        assert!(declare_output(&parse("y[i] = A[X[i]]").unwrap(), &mut d));
        assert_eq!(d["y"].shape, vec![7]);
        assert!(!declare_output(&parse("z[X[i]] = A[i]").unwrap(), &mut d));
        // `where` gives an extent no operand does.
        assert!(declare_output(&parse("w[i,j] = A[i] * 2 where j < 4").unwrap(), &mut d));
        assert_eq!(d["w"].shape, vec![5, 4]);
        assert!(declare_output(&parse("v[m,n] = 1 where m < 3, n < 2").unwrap(), &mut d));
        assert_eq!(d["v"].shape, vec![3, 2]);
        // In its operands' dtype (an index tensor has none); f32 without one.
        assert_eq!(d["y"].dtype, ElemType::Value(DType::F32));
        assert_eq!(d["v"].dtype, ElemType::Value(DType::F32));
        let mut d = decls(&[("A", &[5], "f64"), ("H", &[5], "f16"), ("G", &[5], "bf16"), ("X", &[5], "i32")]);
        for (statement, dtype) in [
            ("y[i] = A[X[i]]", DType::F64),
            ("h[i] = H[i] * H[X[i]]", DType::F16),
            ("g[i] = H[i] * G[i]", DType::F32),
            ("a[i] = H[i] + A[i]", DType::F64),
            // A `where` on an operand, or on the output, counts.
            ("b[i] = G[i] * G[i] where G: f16", DType::F16),
            ("c[i] = A[i] * A[i] where c: bf16", DType::Bf16),
        ] {
            assert!(declare_output(&parse(statement).unwrap(), &mut d));
            let name = &statement[..1];
            assert_eq!(d[name].dtype, ElemType::Value(dtype), "{statement}");
        }
        // An operand nobody declared is the reason to give, at its place.
        let st = parse("u[i,j] = A[i] * Z[j]").unwrap();
        assert!(!declare_output(&st, &mut d));
        let why = operand_mistake(&st, &d).unwrap();
        assert_eq!((why.message.as_str(), why.span.start), ("unknown tensor `Z`", 16));
        assert!(operand_mistake(&parse("u[i] = A[X[i]]").unwrap(), &d).is_none());
        assert!(operand_mistake(&parse("u[i] = A[Q[i]]").unwrap(), &d).is_some());
        // So is an operand read at more subscripts than its rank (it was
        // blamed on the output's shape).
        let st = parse("u[i,j] = A[i,j]").unwrap();
        assert!(!declare_output(&st, &mut d));
        let why = operand_mistake(&st, &d).unwrap();
        assert!(why.message.starts_with("rank mismatch: `A` has rank 1"), "{}", why.message);
    }

    #[test]
    fn diagnostics_point_at_the_text() {
        let src = "C[m,n] += A[m,k] * B[n,k]";
        let e = err(src, &spmm());
        // Between operands first (an output's shape may be worked out
        // from one): B's k against A's.
        assert_eq!(&src[e.span.start..e.span.end], "k");
        assert_eq!(e.span.start, 23);
        assert_eq!((&src[e.secondary[0].0.start..e.secondary[0].0.end], e.secondary[0].0.start), ("k", 14));
        let text = e.render(src, false);
        assert!(text.contains("16 here") && text.contains("4 here"), "{text}");
    }

    /// A `where` giving an index a dtype names it an index ("unknown
    /// tensor `j`" said it was a tensor nobody declared); a rank mismatch
    /// counts one subscript in the singular.
    #[test]
    fn a_dtype_on_an_index_and_one_subscript_are_said_as_they_are() {
        let d = decls(&[("y", &[3], "f32"), ("A", &[3, 4], "f32"), ("x", &[4], "f32")]);
        let err = check(&parse("y[i] = A[i,j] * x[j] where j: f16").unwrap(), &d).unwrap_err();
        assert_eq!(err.message, "`j` is an index, not a tensor: it has no dtype");
        let err = check(&parse("y[i] = A[i] * 2").unwrap(), &d).unwrap_err();
        assert_eq!(err.label, "1 subscript here, 2 expected");
    }
}
