//! A checked Einsum: the statement plus what the checker learned about its
//! tensors and indices. Everything downstream (the reference evaluator, the
//! rewrite, lowering) starts from this.

use std::collections::BTreeMap;

use super::ast::{ElemType, Statement};

/// What a tensor is in the statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The left-hand tensor.
    Output,
    /// A value tensor read on the right.
    Operand,
    /// An integer tensor read inside a subscript.
    Index,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: ElemType,
    pub role: Role,
}

/// Where an index variable's extent comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtentSource {
    /// Dimension `dim` of `tensor`, where the index is a subscript alone.
    Tensor { tensor: String, dim: usize },
    /// A `where i < n` clause.
    Where,
}

#[derive(Clone, Debug, PartialEq)]
pub struct IndexInfo {
    pub name: String,
    pub extent: usize,
    /// True when the index does not appear on the left: it is reduced.
    pub reduced: bool,
    pub source: ExtentSource,
}

/// A statement whose tensors and indices are all known and consistent.
#[derive(Clone, Debug, PartialEq)]
pub struct Einsum {
    pub statement: Statement,
    pub tensors: BTreeMap<String, TensorInfo>,
    /// Every index variable, in order of first appearance (left-hand side
    /// first): the loop order of the reference evaluator.
    pub indices: Vec<IndexInfo>,
}

impl Einsum {
    pub fn index(&self, name: &str) -> Option<&IndexInfo> {
        self.indices.iter().find(|i| i.name == name)
    }

    pub fn output(&self) -> &TensorInfo {
        &self.tensors[&self.statement.lhs.tensor.name]
    }
}

/// The shape and element type of one tensor, as the caller declares it
/// (from files, `--shape`, or generated data).
#[derive(Clone, Debug, PartialEq)]
pub struct Declaration {
    pub shape: Vec<usize>,
    pub dtype: ElemType,
}

/// The tensors a statement may name.
pub type Declarations = BTreeMap<String, Declaration>;

/// Declarations from `(name, shape, dtype)` triples, for tests and quick
/// programs: `declarations(&[("A", &[64, 32], "f32"), ("AM", &[100], "i32")])`.
///
/// # Panics
/// On a dtype name that is not f64, f32, f16, bf16, i32 or i64.
pub fn declarations(list: &[(&str, &[usize], &str)]) -> Declarations {
    list.iter()
        .map(|(name, shape, dtype)| {
            let dtype = ElemType::parse(dtype).unwrap_or_else(|| panic!("unknown dtype `{dtype}`"));
            (name.to_string(), Declaration { shape: shape.to_vec(), dtype })
        })
        .collect()
}
