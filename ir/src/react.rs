//! ReACT's first step (paper 003 §4.1): a program in three-address form
//! ([`crate::program`]) as index trees — per statement, its loops in order,
//! each with a dense or sparse iteration space, over a compute leaf — and
//! the dependence graph between the statements; then sparse iteration-space
//! propagation (§4.2), which restricts the loops that compute a temporary to
//! where its consumer needs it. Fusion and dimension reduction build on
//! these; they are still to come.
//!
//! SDDMM with B in CSR: the product C·D runs over dense loops, the sampling
//! statement's `j` loop walks B's compressed level, and the temporary
//! carries a flow dependence:
//!
//! ```
//! use std::collections::BTreeMap;
//! use spindle_ir::lang::einsum::declarations;
//! use spindle_ir::program::{parse_program, split_program};
//! use spindle_ir::react::{dependences, index_trees, propagate};
//!
//! let decls = declarations(&[("A", &[4, 5], "f32"), ("B", &[4, 5], "f32"),
//!                            ("C", &[4, 3], "f32"), ("D", &[3, 5], "f32")]);
//! let program = split_program(&parse_program("A[i,j] = B[i,j] * (C[i,k] * D[k,j])")?, &decls)?;
//! let formats = BTreeMap::from([("B".to_string(), "csr".parse().unwrap())]);
//! let trees = index_trees(&program, &formats);
//! let text: Vec<String> = trees.iter().map(|t| t.to_string()).collect();
//! assert_eq!(text, ["for i: for j: for k: T1[i,j] = C[i,k] * D[k,j]",
//!                   "for i: for j in B: A[i,j] = B[i,j] * T1[i,j]"]);
//! // Propagated: T1 is needed only where B is stored (no dead values).
//! let text: Vec<String> = propagate(&program, &trees).iter().map(|t| t.to_string()).collect();
//! assert_eq!(text[0], "for i: for j in B: for k: T1[i,j] = C[i,k] * D[k,j]");
//! let edges: Vec<String> = dependences(&program).iter().map(|d| d.to_string()).collect();
//! assert_eq!(edges, ["S1 -> S2 flow T1"]);
//! # Ok::<(), spindle_ir::lang::Diagnostic>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;

use spindle_formats::{Coo, FormatSpec, LevelCapabilities, SparseTensor};

use crate::lang::{Einsum, Statement};
use crate::program::Program;

/// Whether a loop visits every coordinate or only stored ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Space {
    Dense,
    /// The loop walks the stored coordinates of this tensor's level that
    /// holds the index: an operand stored sparse, or (after propagation) the
    /// sparse operand that decides where a temporary is needed.
    Sparse(String),
}

/// An index node: one loop of a statement's nest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    pub index: String,
    pub space: Space,
}

/// A statement's index tree: its loops, outermost first, over its compute
/// node (the statement).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexTree {
    pub loops: Vec<Loop>,
    pub compute: Statement,
}

impl fmt::Display for IndexTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.loops {
            match &l.space {
                Space::Dense => write!(f, "for {}: ", l.index)?,
                Space::Sparse(t) => write!(f, "for {} in {t}: ", l.index)?,
            }
        }
        write!(f, "{}", self.compute)
    }
}

/// The initial index tree of every statement: its indices in the checked
/// order (the output's first, then by first appearance); a loop is sparse
/// where an operand stored in one of `formats` holds its index at a level
/// that is not dense.
pub fn index_trees(program: &Program, formats: &BTreeMap<String, FormatSpec>) -> Vec<IndexTree> {
    program
        .statements
        .iter()
        .map(|einsum| IndexTree {
            loops: einsum
                .indices
                .iter()
                .map(|i| Loop {
                    index: i.name.clone(),
                    space: sparse_walker(einsum, formats, &i.name).map_or(Space::Dense, Space::Sparse),
                })
                .collect(),
            compute: einsum.statement.clone(),
        })
        .collect()
}

/// The first operand of `einsum` stored in a format that holds `index` at
/// a level that is not dense.
fn sparse_walker(einsum: &Einsum, formats: &BTreeMap<String, FormatSpec>, index: &str) -> Option<String> {
    einsum.statement.rhs.accesses().iter().find_map(|access| {
        let spec = formats.get(&access.tensor.name)?;
        let info = einsum.tensors.get(&access.tensor.name)?;
        let levels = SparseTensor::from_coo(&Coo::<f64, i64>::empty(info.shape.clone()), spec).ok()?.levels();
        levels
            .iter()
            .any(|level| {
                !level.format.locate()
                    && access
                        .subscripts
                        .get(level.dim)
                        .and_then(|s| s.as_index())
                        .is_some_and(|i| i.name == index)
            })
            .then(|| access.tensor.name.clone())
    })
}

/// Sparse iteration-space propagation (paper 003 §4.2), masks combined by
/// `∧` through products (a sum, `∨`, needs every entry and stops it):
///
/// - backward: in a product, a factor walked sparse (an operand stored
///   sparse, or a temporary already sparsified) decides where the other
///   factors are needed; a temporary among them is needed only at that
///   factor's stored coordinates, so its producer's loop over the index
///   they share walks that factor's coordinates too;
/// - forward: a temporary whose producer walks sparse coordinates in some
///   of its dimensions holds entries only there, and its consumers' dense
///   loops over those dimensions walk it.
///
/// Both repeat until nothing changes.
pub fn propagate(program: &Program, trees: &[IndexTree]) -> Vec<IndexTree> {
    let mut trees = trees.to_vec();
    let products: Vec<bool> = program.statements.iter().map(|e| is_product(&e.statement.rhs)).collect();
    let writer =
        |t: &str, before: usize| (0..before).rev().find(|&s| program.statements[s].output().name == t);
    let index_at = |access: &crate::lang::Access, at: usize| {
        access.subscripts.get(at).and_then(|s| s.as_index()).map(|i| i.name.clone())
    };
    loop {
        let mut changed = false;
        // Backward, consumers first.
        for s in (0..trees.len()).rev() {
            if !products[s] {
                continue;
            }
            let masks: Vec<(String, String)> = trees[s]
                .loops
                .iter()
                .filter_map(|l| match &l.space {
                    Space::Sparse(t) => Some((l.index.clone(), t.clone())),
                    Space::Dense => None,
                })
                .collect();
            for access in program.statements[s].statement.rhs.accesses() {
                let Some(p) = writer(&access.tensor.name, s).filter(|&p| products[p]) else { continue };
                let lhs = &program.statements[p].statement.lhs;
                for (index, mask) in masks.iter().filter(|(_, m)| *m != access.tensor.name) {
                    let Some(at) =
                        (0..access.subscripts.len()).find(|&d| index_at(access, d).as_ref() == Some(index))
                    else {
                        continue;
                    };
                    // The producer writes that dimension with its own index.
                    let Some(own) = index_at(lhs, at) else { continue };
                    if let Some(l) =
                        trees[p].loops.iter_mut().find(|l| l.index == own && l.space == Space::Dense)
                    {
                        l.space = Space::Sparse(mask.clone());
                        changed = true;
                    }
                }
            }
        }
        // Forward: a temporary computed over sparse coordinates in some of
        // its dimensions holds entries only there.
        for p in 0..trees.len() {
            let lhs = &program.statements[p].statement.lhs;
            let sparse_dims: Vec<usize> = (0..lhs.subscripts.len())
                .filter(|&d| {
                    index_at(lhs, d).is_some_and(|i| {
                        trees[p].loops.iter().any(|l| l.index == i && matches!(l.space, Space::Sparse(_)))
                    })
                })
                .collect();
            if !products[p] || sparse_dims.is_empty() {
                continue;
            }
            let name = lhs.tensor.name.clone();
            for c in p + 1..trees.len() {
                if !products[c] || writer(&name, c) != Some(p) {
                    continue;
                }
                let reads: Vec<String> = program.statements[c]
                    .statement
                    .rhs
                    .accesses()
                    .iter()
                    .filter(|a| a.tensor.name == name)
                    .flat_map(|a| sparse_dims.iter().filter_map(|&d| index_at(a, d)))
                    .collect();
                for l in
                    trees[c].loops.iter_mut().filter(|l| reads.contains(&l.index) && l.space == Space::Dense)
                {
                    l.space = Space::Sparse(name.clone());
                    changed = true;
                }
            }
        }
        if !changed {
            return trees;
        }
    }
}

/// Whether `e` is a product of factors (accesses, literals, negations).
fn is_product(e: &crate::lang::Expr) -> bool {
    use crate::lang::{BinOp, Expr};
    match e {
        Expr::Binary { op: BinOp::Mul, lhs, rhs, .. } => is_product(lhs) && is_product(rhs),
        Expr::Neg { expr, .. } => is_product(expr),
        Expr::Access(_) | Expr::Literal { .. } => true,
        _ => false,
    }
}

/// The kinds of dependence paper 003 keeps (input dependence included, as
/// fusing two readers of a tensor improves locality).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DependenceKind {
    /// The later statement reads what the earlier one wrote.
    Flow,
    /// The later statement writes what the earlier one read.
    Anti,
    /// Both write.
    Output,
    /// Both read.
    Input,
}

/// An edge of the dependence graph: statements by their position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependence {
    pub from: usize,
    pub to: usize,
    pub kind: DependenceKind,
    pub tensor: String,
}

impl fmt::Display for Dependence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DependenceKind::Flow => "flow",
            DependenceKind::Anti => "anti",
            DependenceKind::Output => "output",
            DependenceKind::Input => "input",
        };
        write!(f, "S{} -> S{} {kind} {}", self.from + 1, self.to + 1, self.tensor)
    }
}

/// Every dependence between two statements of `program`, in statement
/// order, one edge per (pair, kind, tensor).
pub fn dependences(program: &Program) -> Vec<Dependence> {
    let reads = |e: &Einsum| -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for a in e.statement.rhs.accesses() {
            if !names.contains(&a.tensor.name) {
                names.push(a.tensor.name.clone());
            }
        }
        names
    };
    let mut out = Vec::new();
    let statements = &program.statements;
    for (a, first) in statements.iter().enumerate() {
        let (w1, r1) = (first.output().name.clone(), reads(first));
        for (b, second) in statements.iter().enumerate().skip(a + 1) {
            let (w2, r2) = (second.output().name.clone(), reads(second));
            let mut edge = |kind, tensor: &str| {
                out.push(Dependence { from: a, to: b, kind, tensor: tensor.to_string() });
            };
            if r2.contains(&w1) {
                edge(DependenceKind::Flow, &w1);
            }
            if r1.contains(&w2) {
                edge(DependenceKind::Anti, &w2);
            }
            if w1 == w2 {
                edge(DependenceKind::Output, &w1);
            }
            for t in r1.iter().filter(|t| r2.contains(t)) {
                edge(DependenceKind::Input, t);
            }
        }
    }
    out
}
