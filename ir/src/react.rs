//! ReACT's first step (paper 003 §4.1): a program in three-address form
//! ([`crate::program`]) as index trees — per statement, its loops in order,
//! each with a dense or sparse iteration space, over a compute leaf — and
//! the dependence graph between the statements. Iteration-space
//! propagation, fusion and dimension reduction build on these; they are
//! still to come.
//!
//! SDDMM with B in CSR: the product C·D runs over dense loops, the sampling
//! statement's `j` loop walks B's compressed level, and the temporary
//! carries a flow dependence:
//!
//! ```
//! use std::collections::BTreeMap;
//! use spindle_ir::lang::einsum::declarations;
//! use spindle_ir::program::{parse_program, split_program};
//! use spindle_ir::react::{dependences, index_trees};
//!
//! let decls = declarations(&[("A", &[4, 5], "f32"), ("B", &[4, 5], "f32"),
//!                            ("C", &[4, 3], "f32"), ("D", &[3, 5], "f32")]);
//! let program = split_program(&parse_program("A[i,j] = B[i,j] * (C[i,k] * D[k,j])")?, &decls)?;
//! let formats = BTreeMap::from([("B".to_string(), "csr".parse().unwrap())]);
//! let trees: Vec<String> = index_trees(&program, &formats).iter().map(|t| t.to_string()).collect();
//! assert_eq!(trees, ["for i: for j: for k: T1[i,j] = C[i,k] * D[k,j]",
//!                    "for i: for j (sparse): A[i,j] = B[i,j] * T1[i,j]"]);
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    Dense,
    /// The loop walks a compressed level of an operand stored sparse.
    Sparse,
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
            match l.space {
                Space::Dense => write!(f, "for {}: ", l.index)?,
                Space::Sparse => write!(f, "for {} (sparse): ", l.index)?,
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
                    space: if walks_sparse(einsum, formats, &i.name) { Space::Sparse } else { Space::Dense },
                })
                .collect(),
            compute: einsum.statement.clone(),
        })
        .collect()
}

/// Whether an operand of `einsum` stored in a format holds `index` at a
/// level that is not dense.
fn walks_sparse(einsum: &Einsum, formats: &BTreeMap<String, FormatSpec>, index: &str) -> bool {
    einsum.statement.rhs.accesses().iter().any(|access| {
        let Some(spec) = formats.get(&access.tensor.name) else { return false };
        let Some(info) = einsum.tensors.get(&access.tensor.name) else { return false };
        let Ok(levels) =
            SparseTensor::from_coo(&Coo::<f64, i64>::empty(info.shape.clone()), spec).map(|t| t.levels())
        else {
            return false;
        };
        levels.iter().any(|level| {
            !level.format.locate()
                && access
                    .subscripts
                    .get(level.dim)
                    .and_then(|s| s.as_index())
                    .is_some_and(|i| i.name == index)
        })
    })
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
