//! Programs: several statements with temporaries, the input of ReACT
//! (paper 003 §4.1.3).
//!
//! - [`parse_program`] reads statements separated by `;` or newlines,
//!   spans kept relative to the whole text.
//! - [`split_program`] checks them in order and breaks every compound
//!   product into three-address form: one product per statement, in the
//!   expression's evaluation order (left to right, parentheses first), each
//!   intermediate stored in a fresh temporary `T1`, `T2`, .... A
//!   temporary keeps the indices of its product that are used outside it
//!   (by the rest of the expression or the output); the others are summed
//!   inside. Its shape follows from those indices' extents. An output of an
//!   earlier statement that no declaration names is a temporary too, its
//!   shape inferred the same way.
//! - [`evaluate_program`] runs a program with the reference evaluator,
//!   statement by statement.
//!
//! SDDMM, `A[i,j] = B[i,j] * (C[i,k] * D[k,j])`, becomes `T1[i,j] = C[i,k]
//! * D[k,j]` then `A[i,j] = B[i,j] * T1[i,j]`:
//!
//! ```
//! use spindle_ir::lang::einsum::declarations;
//! use spindle_ir::program::{parse_program, split_program};
//!
//! let decls = declarations(&[("A", &[4, 5], "f32"), ("B", &[4, 5], "f32"),
//!                            ("C", &[4, 3], "f32"), ("D", &[3, 5], "f32")]);
//! let statements = parse_program("A[i,j] = B[i,j] * (C[i,k] * D[k,j])").unwrap();
//! let program = split_program(&statements, &decls).unwrap();
//! let text: Vec<String> = program.statements.iter().map(|e| e.statement.to_string()).collect();
//! assert_eq!(text, ["T1[i,j] = C[i,k] * D[k,j]", "A[i,j] = B[i,j] * T1[i,j]"]);
//! assert_eq!(program.temporaries["T1"].shape, [4, 5]);
//! ```

use std::collections::{BTreeMap, BTreeSet};

use ndarray::ArrayD;

use crate::lang::einsum::{Declaration, Declarations};
use crate::lang::{
    Access, AssignOp, BinOp, Diagnostic, Einsum, Expr, Span, Statement, Subscript, check, operand_mistake,
    parse,
};
use crate::tensor::{TensorValue, Tensors};

/// Statements in three-address form, checked, with the temporaries they
/// introduced.
#[derive(Clone, Debug)]
pub struct Program {
    /// In order; each reads only declared tensors and earlier outputs.
    pub statements: Vec<Einsum>,
    /// Every tensor the program writes that no declaration named, with its
    /// inferred shape and type.
    pub temporaries: BTreeMap<String, Declaration>,
}

/// Parses statements separated by `;` or newlines (blank ones skipped); a
/// diagnostic's spans point into `src`.
pub fn parse_program(src: &str) -> Result<Vec<Statement>, Diagnostic> {
    let mut out = Vec::new();
    let mut start = 0;
    for piece in src.split_inclusive([';', '\n']) {
        let at = start;
        start += piece.len();
        let text = piece.trim_end_matches([';', '\n']);
        if text.trim().is_empty() {
            continue;
        }
        let mut statement = parse(text).map_err(|d| shift_diagnostic(d, at))?;
        shift_statement(&mut statement, at);
        out.push(statement);
    }
    if out.is_empty() {
        return Err(
            Diagnostic::new("the program has no statement", Span::new(0, src.len())).with_label("empty")
        );
    }
    Ok(out)
}

/// Checks `statements` in order against `declarations` (earlier outputs
/// declared as they are written) and splits each into three-address form.
pub fn split_program(statements: &[Statement], declarations: &Declarations) -> Result<Program, Diagnostic> {
    let mut known = declarations.clone();
    let statements = &versions(statements, &mut known)[..];
    let mut temporaries = BTreeMap::new();
    let mut out = Vec::new();
    let mut fresh = 0usize;
    let mut name = |known: &Declarations| loop {
        fresh += 1;
        let candidate = format!("T{fresh}");
        if !known.contains_key(&candidate) && !statements.iter().any(|s| mentions(s, &candidate)) {
            return candidate;
        }
    };
    for statement in statements {
        let output = &statement.lhs.tensor.name;
        if !known.contains_key(output) {
            // An operand nobody declared (or that a later statement
            // writes) is the reason, where there is one.
            let declaration =
                infer(statement, &known).map_err(|why| operand_mistake(statement, &known).unwrap_or(why))?;
            known.insert(output.clone(), declaration.clone());
            temporaries.insert(output.clone(), declaration);
        }
        // A program renames a tensor written again with `=` ([`versions`]);
        // one left as written that a statement reads and writes again is
        // the user's to rename (check's advice, `+=`, is for one statement).
        if statements.len() > 1
            && statement.op == AssignOp::Assign
            && let Some(read) = statement.rhs.accesses().into_iter().find(|a| a.tensor.name == *output)
        {
            return Err(Diagnostic::new(
                format!("`{output}` is read by the statement that writes it with `=`"),
                read.span,
            )
            .with_label("read here")
            .with_secondary(statement.lhs.span, "written here")
            .with_note(
                "a program renames a tensor written again with `=`, except one whose data is read first or that a \
                 `+=`, `max=` or `min=` adds into before: give the new value another name",
            ));
        }
        let einsum = check(statement, &known)?;
        let extent = |i: &str| einsum.index(i).map(|x| x.extent);
        let dtype = einsum.output().dtype;
        let mut split = Vec::new();
        let rhs = three_address(&statement.rhs, &lhs_indices(&statement.lhs), &mut |expr, indices| {
            let temp = name(&known);
            let shape: Vec<usize> =
                indices.iter().map(|i| extent(i).expect("an index of the statement")).collect();
            let declaration = Declaration { shape, dtype };
            known.insert(temp.clone(), declaration.clone());
            temporaries.insert(temp.clone(), declaration);
            let lhs = Access::new(&temp, indices.iter().map(|i| Subscript::index(i)).collect());
            split.push(Statement {
                lhs: lhs.clone(),
                op: AssignOp::Assign,
                op_span: expr.span(),
                rhs: expr,
                wheres: Vec::new(),
                span: statement.span,
            });
            Expr::Access(lhs)
        });
        split.push(Statement { rhs, ..statement.clone() });
        for s in &split {
            out.push(check(s, &known)?);
        }
    }
    Ok(Program { statements: out, temporaries })
}

/// The program with each tensor that a later statement writes again with
/// `=` (which replaces its value) renamed up to that write: `t = A*x;
/// t = t*2; y = t + 1` becomes `t_1 = A*x; t = t_1*2; y = t + 1`. A read
/// refers to the version written last before it, and a tensor's last
/// version keeps its name (the program's result is the last statement's
/// output, whatever it is called). Left as written: a tensor whose first
/// mention reads it (its data) or whose first write is a `+=`, `max=` or
/// `min=` (which adds to its data), since data has one name, and one with
/// a `+=` (or `max=`, `min=`) into a version before its last. A renamed
/// version of the declared rank takes the tensor's declaration into `known`.
fn versions(statements: &[Statement], known: &mut Declarations) -> Vec<Statement> {
    let mut out = statements.to_vec();
    let written: BTreeSet<&str> = statements.iter().map(|s| s.lhs.tensor.name.as_str()).collect();
    for name in written {
        let first = statements.iter().position(|s| mentions(s, name)).expect("a written tensor is mentioned");
        let reads_first = statements[first].rhs.accesses().iter().any(|a| a.tensor.name == name);
        if reads_first || statements[first].op != AssignOp::Assign {
            continue;
        }
        // The statements that start a version: each `=` write. A version
        // with a `+=` besides is left as written: a program kernel writes
        // a temporary once, and its refusal had better name the tensor as
        // the user wrote it.
        let writes: Vec<usize> =
            (0..statements.len()).filter(|&k| statements[k].lhs.tensor.name == name).collect();
        let starts: Vec<usize> =
            writes.iter().copied().filter(|&k| statements[k].op == AssignOp::Assign).collect();
        let last = *starts.last().expect("the first write is an `=`");
        if writes.iter().any(|&k| k < last && !starts.contains(&k)) {
            continue;
        }
        let mut taken = 0usize;
        for pair in starts.windows(2) {
            let fresh = loop {
                taken += 1;
                let candidate = format!("{name}_{taken}");
                if !known.contains_key(&candidate) && !statements.iter().any(|s| mentions(s, &candidate)) {
                    break candidate;
                }
            };
            // A declaration (`--shape t=..`) is the last version's; an
            // earlier one of the same rank takes it too, where its shape
            // may not be worked out otherwise (`t[i] = x[i+1]`).
            let rank = statements[pair[0]].lhs.subscripts.len();
            if let Some(declaration) = known.get(name).filter(|d| d.shape.len() == rank).cloned() {
                known.insert(fresh.clone(), declaration);
            }
            // Version `v` is written from its start up to the next one's
            // start (whose reads, before its own write, see it too).
            let renamed = |a: &Access| {
                let mut a = a.clone();
                if a.tensor.name == name {
                    a.tensor.name = fresh.clone();
                }
                a
            };
            for (k, s) in out.iter_mut().enumerate().take(pair[1] + 1).skip(pair[0]) {
                s.rhs = crate::rewrite::map_accesses(&s.rhs, &mut |a| renamed(a));
                if k < pair[1] && s.lhs.tensor.name == name {
                    s.lhs = renamed(&s.lhs);
                }
            }
        }
    }
    out
}

/// The names [`split_program`] gives the earlier versions of tensors
/// written again with `=` ([`versions`]): each version's name, the
/// tensor's, the statement that writes the version and the one that writes
/// the tensor again (from 1), for messages that quote a version's name.
pub fn version_names(
    statements: &[Statement],
    declarations: &Declarations,
) -> Vec<(String, String, usize, usize)> {
    let mut known = declarations.clone();
    let renamed = versions(statements, &mut known);
    renamed
        .iter()
        .zip(statements)
        .enumerate()
        .filter(|(_, (v, s))| v.lhs.tensor.name != s.lhs.tensor.name)
        .filter_map(|(k, (v, s))| {
            let name = &s.lhs.tensor.name;
            let again = (k + 1..statements.len())
                .find(|&l| statements[l].lhs.tensor.name == *name && statements[l].op == AssignOp::Assign)?;
            Some((v.lhs.tensor.name.clone(), name.clone(), k + 1, again + 1))
        })
        .collect()
}

/// Runs `program` with the reference evaluator on `data` (which holds the
/// declared inputs); returns every tensor the program wrote.
pub fn evaluate_program(program: &Program, data: &Tensors) -> Result<Tensors, Diagnostic> {
    let mut all = data.clone();
    let mut written = Tensors::new();
    for einsum in &program.statements {
        let out = &einsum.output().name;
        let result: ArrayD<f64> = crate::eval::evaluate(einsum, &all)?;
        all.insert(out.clone(), TensorValue::Values(result.clone()));
        written.insert(out.clone(), TensorValue::Values(result));
    }
    Ok(written)
}

/// The right-hand side with every product below the top one stored in a
/// temporary: `store(product, indices)` records `T[indices] = product` and
/// returns the access `T[indices]`. `outside` holds the indices used
/// outside `e` (the output's, and the rest of the expression's).
fn three_address(
    e: &Expr,
    outside: &BTreeSet<String>,
    store: &mut dyn FnMut(Expr, Vec<String>) -> Expr,
) -> Expr {
    let Expr::Binary { op: BinOp::Mul, lhs, rhs, span } = e else { return e.clone() };
    let split = |side: &Expr, other: &Expr, store: &mut dyn FnMut(Expr, Vec<String>) -> Expr| {
        let mut around = outside.clone();
        around.extend(indices_of(other));
        let inner = three_address(side, &around, store);
        match side {
            // A product inside a product: its own statement.
            Expr::Binary { op: BinOp::Mul, .. } => {
                let kept: Vec<String> =
                    ordered_indices(&inner).into_iter().filter(|i| around.contains(i)).collect();
                store(inner, kept)
            }
            _ => inner,
        }
    };
    let l = split(lhs, rhs, store);
    let r = split(rhs, lhs, store);
    Expr::Binary { op: BinOp::Mul, lhs: Box::new(l), rhs: Box::new(r), span: *span }
}

/// A product of three or more factors over a stored operand, reordered so
/// that the three-address split sums the operand's levels from the
/// innermost out, where the written order sums a level while a deeper one
/// stays free: MTTKRP written `A[i,r] = T[i,j,k] * B[j,r] * C[k,r]` over a
/// CSF `T` (levels i, j, k) splits as `T1[i,k,r] = T[i,j,k] * B[j,r]`, a
/// temporary over all of `k` for each `i`, where `T[i,j,k] * C[k,r] *
/// B[j,r]` splits as `T1[i,j,r]`, which trie fusion keeps to one row of
/// `r` per fiber (SPLATT's order). The other factors follow the stored
/// operand, the one holding its deepest level first (ties, and factors
/// that share none of its levels, in the written order); a parenthesised
/// product is one factor. Returns the statement and a note saying what
/// changed, or `None` where the written order is kept.
///
/// ```
/// use std::collections::BTreeMap;
/// use spindle_ir::lang::{einsum::declarations, parse};
/// use spindle_ir::program::reorder_products;
///
/// let decls = declarations(&[("A", &[4, 2], "f32"), ("T", &[4, 5, 6], "f32"),
///                            ("B", &[5, 2], "f32"), ("C", &[6, 2], "f32")]);
/// let formats = BTreeMap::from([("T".to_string(), "csf".parse().unwrap())]);
/// let mttkrp = parse("A[i,r] = T[i,j,k] * B[j,r] * C[k,r]").unwrap();
/// let (reordered, _) = reorder_products(&mttkrp, &formats, &decls).unwrap();
/// assert_eq!(reordered.to_string(), "A[i,r] = T[i,j,k] * C[k,r] * B[j,r]");
/// ```
pub fn reorder_products(
    statement: &Statement,
    formats: &BTreeMap<String, spindle_formats::FormatSpec>,
    declarations: &Declarations,
) -> Option<(Statement, String)> {
    let factors = product_chain(&statement.rhs);
    if factors.len() < 3 {
        return None;
    }
    let (at, stored) = factors.iter().enumerate().find_map(|(n, f)| match f {
        Expr::Access(a) if formats.contains_key(&a.tensor.name) => Some((n, a)),
        _ => None,
    })?;
    let name = &stored.tensor.name;
    let output = lhs_indices(&statement.lhs);
    // A stored operand that holds only output indices, beside dense
    // factors that sum one (SDDMM's mask, `S[i,j] = A[i,j] * U[i,k] *
    // V[j,k]`), multiplies once the sum is done: last, one product an
    // entry. First, it multiplied every term of the sum (`T1[i,j,k] =
    // A[i,j] * U[i,k]`, the sum then over a product per term, not a dot
    // product): 2x the time on ca-CondMat.
    let others = || factors.iter().enumerate().filter(|(n, _)| *n != at).map(|(_, f)| *f);
    let dense = others().all(|f| f.accesses().iter().all(|a| !formats.contains_key(&a.tensor.name)));
    let summed = others().flat_map(indices_of).any(|i| !output.contains(&i));
    if at + 1 < factors.len() && dense && summed && indices_of(factors[at]).is_subset(&output) {
        let order: Vec<&Expr> = others().chain([factors[at]]).collect();
        let reordered = Statement { rhs: product_of(&order), ..statement.clone() };
        let note = format!(
            "the product is split as `{}`: `{name}` holds only the output's indices, so it multiplies each \
             sum once it is done (as written, it multiplied every term of the sum)",
            reordered.rhs
        );
        return Some((reordered, note));
    }
    // The operand's index at each level, outermost first.
    let levels: Vec<String> = formats[name]
        .levels(&declarations.get(name)?.shape)
        .ok()?
        .iter()
        .map(|l| stored.subscripts.get(l.dim)?.as_index().map(|i| i.name.clone()))
        .collect::<Option<_>>()?;
    let depth = |f: &Expr| indices_of(f).iter().filter_map(|i| levels.iter().position(|l| l == i)).max();
    let mut order: Vec<&Expr> = vec![factors[at]];
    let mut others: Vec<&Expr> =
        factors.iter().enumerate().filter(|(n, _)| *n != at).map(|(_, f)| *f).collect();
    // Deepest first; `None` (no level shared) sorts last.
    others.sort_by_key(|f| std::cmp::Reverse(depth(f)));
    order.extend(others);
    let early = early_sum(&factors, &levels, &output)?;
    if early_sum(&order, &levels, &output).is_some() {
        return None;
    }
    let reordered = Statement { rhs: product_of(&order), ..statement.clone() };
    let (summed, free) = early;
    let note = format!(
        "the product is split as `{}`: its sums run from `{name}`'s innermost level out (as written, the sum \
         over `{summed}` came before the one over `{free}`, a deeper level of `{name}`, and left a temporary \
         over all of `{free}`)",
        reordered.rhs
    );
    Some((reordered, note))
}

/// `factors` multiplied left to right.
fn product_of(factors: &[&Expr]) -> Expr {
    let mut rhs = factors[0].clone();
    for f in &factors[1..] {
        let span = rhs.span().to(f.span());
        rhs = Expr::Binary { op: BinOp::Mul, lhs: Box::new(rhs), rhs: Box::new((*f).clone()), span };
    }
    rhs
}

/// The factors of a product as [`three_address`] splits it, left to right
/// (`a * b * c` is `(a * b) * c`; a product on the right is parenthesised,
/// one factor).
fn product_chain(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Binary { op: BinOp::Mul, lhs, rhs, .. } => {
            let mut chain = product_chain(lhs);
            chain.push(rhs);
            chain
        }
        _ => vec![e],
    }
}

/// Where the left-to-right split of `factors` first sums an index of a
/// stored operand's `levels` while a deeper level's index stays in use by
/// the factors after it: that index and the deeper one.
fn early_sum(factors: &[&Expr], levels: &[String], output: &BTreeSet<String>) -> Option<(String, String)> {
    let mut running: BTreeSet<String> = BTreeSet::new();
    for (k, f) in factors.iter().enumerate() {
        running.extend(indices_of(f));
        let mut alive = output.clone();
        factors[k + 1..].iter().for_each(|g| alive.extend(indices_of(g)));
        let position = |i: &String| levels.iter().position(|l| l == i);
        for summed in running.iter().filter(|i| !alive.contains(*i)) {
            let Some(d) = position(summed) else { continue };
            if let Some(free) =
                alive.iter().filter(|i| running.contains(*i)).find(|i| position(i).is_some_and(|e| e > d))
            {
                return Some((summed.clone(), free.clone()));
            }
        }
        running.retain(|i| alive.contains(i));
    }
    None
}

/// The index variables of `e`, in order of first appearance.
fn ordered_indices(e: &Expr) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for access in e.accesses() {
        for u in access.index_uses() {
            if !out.contains(&u.ident.name) {
                out.push(u.ident.name.clone());
            }
        }
    }
    out
}

fn indices_of(e: &Expr) -> BTreeSet<String> {
    ordered_indices(e).into_iter().collect()
}

fn lhs_indices(lhs: &Access) -> BTreeSet<String> {
    lhs.index_uses().iter().map(|u| u.ident.name.clone()).collect()
}

/// Whether `s` names the tensor `name` anywhere.
fn mentions(s: &Statement, name: &str) -> bool {
    s.lhs.tensor.name == name || s.rhs.accesses().iter().any(|a| a.tensor.name == name)
}

/// The declaration of an output no declaration names: each of its
/// subscripts a plain index whose extent a declared operand, or a `where`,
/// fixes.
fn infer(statement: &Statement, known: &Declarations) -> Result<Declaration, Diagnostic> {
    // As a single statement's output is declared (its `where i < N`
    // extents, and indices alone inside index tensors, count).
    let mut declared = known.clone();
    if crate::lang::declare_output(statement, &mut declared) {
        return Ok(declared[&statement.lhs.tensor.name].clone());
    }
    let (lhs, rhs) = (&statement.lhs, &statement.rhs);
    let mut extents: BTreeMap<String, usize> = BTreeMap::new();
    let mut read = false;
    for access in rhs.accesses() {
        let Some(d) = known.get(&access.tensor.name) else { continue };
        read = true;
        for (s, &n) in access.subscripts.iter().zip(&d.shape) {
            if let Some(i) = s.as_index() {
                extents.entry(i.name.clone()).or_insert(n);
            }
        }
    }
    let unknown = |why: String, span: Span| {
        Diagnostic::new(why, span)
            .with_label("shape unknown")
            .with_note(format!("declare `{}` with its shape", lhs.tensor.name))
    };
    let shape = lhs
        .subscripts
        .iter()
        .map(|s| match s.as_index() {
            Some(i) => extents.get(&i.name).copied().ok_or_else(|| {
                unknown(
                    format!("no operand of `{}` fixes the extent of `{}`", lhs.tensor.name, i.name),
                    s.span,
                )
            }),
            None => Err(unknown(
                format!("`{}` is not declared, and its subscript is not a plain index", lhs.tensor.name),
                s.span,
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !read {
        return Err(unknown(
            format!("`{}` is not declared and reads no declared tensor", lhs.tensor.name),
            lhs.span,
        ));
    }
    Ok(Declaration {
        shape,
        dtype: crate::lang::ElemType::Value(crate::lang::output_dtype(statement, known)),
    })
}

fn shift(span: &mut Span, by: usize) {
    span.start += by;
    span.end += by;
}

fn shift_diagnostic(mut d: Diagnostic, by: usize) -> Diagnostic {
    shift(&mut d.span, by);
    d.secondary.iter_mut().for_each(|(s, _)| shift(s, by));
    d
}

fn shift_access(a: &mut Access, by: usize) {
    shift(&mut a.span, by);
    shift(&mut a.tensor.span, by);
    for s in &mut a.subscripts {
        shift(&mut s.span, by);
        for t in &mut s.terms {
            shift(&mut t.span, by);
            match &mut t.atom {
                crate::lang::Atom::Index(i) => shift(&mut i.span, by),
                crate::lang::Atom::Indirect(inner) => shift_access(inner, by),
            }
        }
    }
}

fn shift_expr(e: &mut Expr, by: usize) {
    match e {
        Expr::Literal { span, .. } => shift(span, by),
        Expr::Access(a) => shift_access(a, by),
        Expr::Neg { expr, span } => {
            shift(span, by);
            shift_expr(expr, by);
        }
        Expr::Binary { lhs, rhs, span, .. } => {
            shift(span, by);
            shift_expr(lhs, by);
            shift_expr(rhs, by);
        }
        Expr::Call { args, span, .. } => {
            shift(span, by);
            args.iter_mut().for_each(|a| shift_expr(a, by));
        }
    }
}

fn shift_statement(s: &mut Statement, by: usize) {
    shift(&mut s.span, by);
    shift(&mut s.op_span, by);
    shift_access(&mut s.lhs, by);
    shift_expr(&mut s.rhs, by);
    for w in &mut s.wheres {
        match w {
            crate::lang::WhereClause::Extent { index, span, .. } => {
                shift(&mut index.span, by);
                shift(span, by);
            }
            crate::lang::WhereClause::Dtype { tensor, span, .. } => {
                shift(&mut tensor.span, by);
                shift(span, by);
            }
        }
    }
}

/// Maximal fusion's one statement (TACO's fully fused nest): each
/// temporary's product substituted where it is read, its summed indices
/// renamed apart. A temporary must be a product written once with `=` and
/// read as a factor (or hold no sum): a sum distributes over a product, not
/// over a sum. Every statement but the last must feed the last.
///
/// GNN kernel 1 split and put back:
///
/// ```
/// use spindle_ir::lang::einsum::declarations;
/// use spindle_ir::program::{inline, parse_program, split_program};
///
/// let decls = declarations(&[("Z", &[4, 2], "f32"), ("A", &[4, 4], "f32"),
///                            ("X", &[4, 3], "f32"), ("W", &[3, 2], "f32")]);
/// let program = split_program(&parse_program("H[i,h] = A[i,k] * X[k,h]; Z[i,j] = H[i,h] * W[h,j]")?, &decls)?;
/// assert_eq!(inline(&program)?.to_string(), "Z[i,j] = A[i,k] * X[k,h] * W[h,j]");
/// # Ok::<(), spindle_ir::lang::Diagnostic>(())
/// ```
pub fn inline(program: &Program) -> Result<Statement, Diagnostic> {
    inline_noting(program).map(|(statement, _)| statement)
}

/// What [`inline`] renamed, one line each: a substituted statement's
/// summed index under another name in the final statement, where the
/// name was taken (`k` of `T[i,j] = A[i,k] * B[k,j]` is `k1` in `y[i] =
/// T[i,k] * x[k]`). Empty where nothing was renamed or the program cannot
/// be inlined.
pub fn inline_renames(program: &Program) -> Vec<String> {
    inline_noting(program).map(|(_, renamed)| renamed).unwrap_or_default()
}

/// Where a summed index that substitution brought in came from: its name
/// in an expression, to the statement's output that summed it and the
/// name that statement wrote.
type Origins = BTreeMap<String, (String, String)>;

fn inline_noting(program: &Program) -> Result<(Statement, Vec<String>), Diagnostic> {
    let statements = &program.statements;
    let last = statements.last().expect("a program has a statement");
    // Each substitutable output: its subscripts' index names, product and
    // the origins of the summed indices substituted into it.
    let mut bodies: BTreeMap<String, (Vec<String>, Expr, Origins)> = BTreeMap::new();
    let mut origins = Origins::new();
    let mut rhs = Expr::Literal { value: 0.0, span: last.statement.span };
    for (s, e) in statements.iter().enumerate() {
        let st = &e.statement;
        let mut used: BTreeSet<String> = indices_of(&st.rhs);
        used.extend(lhs_indices(&st.lhs));
        // A sum distributes over a product, not over `max=`: max over k of
        // (sum over j) is not the max over (k, j) of the terms.
        if matches!(st.op, AssignOp::MaxAssign | AssignOp::MinAssign) {
            for a in st.rhs.accesses() {
                let Some((free, body, _)) = bodies.get(&a.tensor.name) else { continue };
                let summed: Vec<String> =
                    ordered_indices(body).into_iter().filter(|i| !free.contains(i)).collect();
                if !summed.is_empty() {
                    return Err(Diagnostic::new(
                        format!(
                            "maximal fusion cannot substitute `{}` into a `{}` statement: it sums over {}, and a \
                             sum does not distribute over a maximum",
                            a.tensor.name,
                            st.op.as_str(),
                            summed.join(", ")
                        ),
                        a.span,
                    )
                    .with_label(format!("a sum under {}", st.op.as_str()))
                    .with_note("run the program with fusion=trie or fusion=none"));
                }
            }
        }
        origins.clear();
        let substituted = substitute(&st.rhs, &bodies, true, &mut (&mut used, &mut origins))?;
        if s + 1 == statements.len() {
            rhs = substituted;
            break;
        }
        let name = &st.lhs.tensor.name;
        let refuse = |why: &str| {
            Diagnostic::new(format!("maximal fusion cannot substitute `{name}`: {why}"), st.lhs.span)
                .with_label("not substituted")
                .with_note("run the program with fusion=trie or fusion=none")
        };
        if matches!(st.op, AssignOp::MaxAssign | AssignOp::MinAssign) {
            return Err(refuse(&format!(
                "it is written with `{}`, which a product with the statements that read it cannot hold",
                st.op.as_str()
            )));
        }
        if st.op != AssignOp::Assign || bodies.contains_key(name) {
            return Err(refuse("it is written more than once, or with `+=`"));
        }
        if statements[s + 1..].iter().any(|later| later.output().name == *name) {
            return Err(refuse("a later statement writes it again, and a substitution writes it once"));
        }
        if !statements[s + 1..]
            .iter()
            .any(|later| later.statement.rhs.accesses().iter().any(|a| a.tensor.name == *name))
        {
            return Err(refuse(
                "no later statement reads it, and maximal fusion keeps only the last statement's output",
            ));
        }
        let indices: Option<Vec<String>> =
            st.lhs.subscripts.iter().map(|x| x.as_index().map(|i| i.name.clone())).collect();
        let Some(indices) = indices else { return Err(refuse("its subscripts are not plain indices")) };
        bodies.insert(name.clone(), (indices, substituted, origins.clone()));
    }
    let renamed = origins
        .iter()
        .filter(|(now, (_, written))| now != &written)
        .map(|(now, (tensor, written))| {
            format!(
                "`{tensor}`'s sum over `{written}` is over `{now}` in the substituted statement (`{written}` is \
                 taken there)"
            )
        })
        .collect();
    Ok((Statement { rhs, ..last.statement.clone() }, renamed))
}

/// `e` with every access to a tensor in `bodies` replaced by its product
/// (parenthesised), its indices renamed to the access's and its summed
/// ones to names `e` does not use. `factor`: whether `e` sits where a sum
/// inside it distributes (a factor of the statement's product).
/// `names`: the indices taken, and the origins of the summed indices
/// brought in.
fn substitute(
    e: &Expr,
    bodies: &BTreeMap<String, (Vec<String>, Expr, Origins)>,
    factor: bool,
    names: &mut (&mut BTreeSet<String>, &mut Origins),
) -> Result<Expr, Diagnostic> {
    Ok(match e {
        Expr::Access(a) => match bodies.get(&a.tensor.name) {
            None => e.clone(),
            Some((free, body, brought)) => {
                let summed: Vec<String> =
                    ordered_indices(body).into_iter().filter(|i| !free.contains(i)).collect();
                if !factor && !summed.is_empty() {
                    return Err(Diagnostic::new(
                        format!(
                            "maximal fusion cannot substitute `{}` here: it sums over {}, and it is read outside a product",
                            a.tensor.name,
                            summed.join(", ")
                        ),
                        a.span,
                    )
                    .with_label("not a factor")
                    .with_note("run the program with fusion=trie or fusion=none"));
                }
                let mut map = BTreeMap::new();
                for (name, sub) in free.iter().zip(&a.subscripts) {
                    let Some(i) = sub.as_index() else {
                        return Err(Diagnostic::new(
                            format!("maximal fusion substitutes `{}` only at plain indices", a.tensor.name),
                            sub.span,
                        )
                        .with_label("not a plain index"));
                    };
                    map.insert(name.clone(), i.name.clone());
                }
                let (used, origins) = names;
                for name in summed {
                    let mut fresh = name.clone();
                    let mut n = 0;
                    while used.contains(&fresh) {
                        n += 1;
                        fresh = format!("{name}{n}");
                    }
                    used.insert(fresh.clone());
                    // Brought into the body by an earlier substitution, or
                    // the body's own statement's sum.
                    let origin =
                        brought.get(&name).cloned().unwrap_or_else(|| (a.tensor.name.clone(), name.clone()));
                    origins.insert(fresh.clone(), origin);
                    map.insert(name, fresh);
                }
                rename(body, &map)
            }
        },
        Expr::Literal { .. } => e.clone(),
        Expr::Neg { expr, span } => {
            Expr::Neg { expr: Box::new(substitute(expr, bodies, factor, names)?), span: *span }
        }
        Expr::Binary { op, lhs, rhs, span } => {
            let (l, r) = match op {
                BinOp::Mul => (factor, factor),
                BinOp::Div => (factor, false),
                _ => (false, false),
            };
            Expr::Binary {
                op: *op,
                lhs: Box::new(substitute(lhs, bodies, l, names)?),
                rhs: Box::new(substitute(rhs, bodies, r, names)?),
                span: *span,
            }
        }
        Expr::Call { func, args, span } => Expr::Call {
            func: *func,
            args: args.iter().map(|a| substitute(a, bodies, false, names)).collect::<Result<_, _>>()?,
            span: *span,
        },
    })
}

/// `e` with its indices renamed by `map` (others kept).
fn rename(e: &Expr, map: &BTreeMap<String, String>) -> Expr {
    fn access(a: &mut Access, map: &BTreeMap<String, String>) {
        for s in &mut a.subscripts {
            for t in &mut s.terms {
                match &mut t.atom {
                    crate::lang::Atom::Index(i) => {
                        if let Some(to) = map.get(&i.name) {
                            i.name = to.clone();
                        }
                    }
                    crate::lang::Atom::Indirect(inner) => access(inner, map),
                }
            }
        }
    }
    fn walk(e: &mut Expr, map: &BTreeMap<String, String>) {
        match e {
            Expr::Literal { .. } => {}
            Expr::Access(a) => access(a, map),
            Expr::Neg { expr, .. } => walk(expr, map),
            Expr::Binary { lhs, rhs, .. } => {
                walk(lhs, map);
                walk(rhs, map);
            }
            Expr::Call { args, .. } => args.iter_mut().for_each(|a| walk(a, map)),
        }
    }
    let mut out = e.clone();
    walk(&mut out, map);
    out
}
