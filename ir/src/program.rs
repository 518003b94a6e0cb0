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
    Access, AssignOp, BinOp, Diagnostic, Einsum, Expr, Span, Statement, Subscript, check, parse,
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
            let declaration = infer(&statement.lhs, &statement.rhs, &known)?;
            known.insert(output.clone(), declaration.clone());
            temporaries.insert(output.clone(), declaration);
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
/// subscripts a plain index whose extent a declared operand fixes.
fn infer(lhs: &Access, rhs: &Expr, known: &Declarations) -> Result<Declaration, Diagnostic> {
    let mut extents: BTreeMap<String, usize> = BTreeMap::new();
    let mut dtype = None;
    for access in rhs.accesses() {
        let Some(d) = known.get(&access.tensor.name) else { continue };
        dtype.get_or_insert(d.dtype);
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
    let dtype = dtype.ok_or_else(|| {
        unknown(format!("`{}` is not declared and reads no declared tensor", lhs.tensor.name), lhs.span)
    })?;
    Ok(Declaration { shape, dtype })
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
