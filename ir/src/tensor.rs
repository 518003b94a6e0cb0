//! Tensor data for the reference evaluator and the rewrite: values in f64,
//! indices in i64, whatever dtype they will have in a kernel.

use ndarray::{ArrayD, Dimension};
use spindle_formats::{DType, IType};

use crate::lang::{Declaration, ElemType};

#[derive(Clone, Debug, PartialEq)]
pub enum TensorValue {
    Values(ArrayD<f64>),
    Indices(ArrayD<i64>),
}

impl TensorValue {
    pub fn shape(&self) -> &[usize] {
        match self {
            TensorValue::Values(a) => a.shape(),
            TensorValue::Indices(a) => a.shape(),
        }
    }

    /// The declaration the checker needs: the shape, with f32 for values
    /// and i32 for indices unless told otherwise.
    pub fn declaration(&self) -> Declaration {
        let dtype = match self {
            TensorValue::Values(_) => ElemType::Value(DType::F32),
            TensorValue::Indices(_) => ElemType::Index(IType::I32),
        };
        Declaration { shape: self.shape().to_vec(), dtype }
    }
}

/// The first value of an index tensor outside `0..extent`, with where it
/// is and what it says: `X[3, 1] = 12 is out of range for dimension 0 of
/// B (extent 10)`. The prepare step's check and every kernel's share it.
pub fn out_of_range(
    name: &str,
    data: &ArrayD<i64>,
    target: &str,
    dim: usize,
    extent: usize,
) -> Option<String> {
    let (pos, &v) = data.indexed_iter().find(|(_, v)| !(0..extent as i64).contains(v))?;
    let pos: Vec<String> = pos.slice().iter().map(ToString::to_string).collect();
    let at = if pos.is_empty() { name.to_string() } else { format!("{name}[{}]", pos.join(", ")) };
    Some(format!("{at} = {v} is out of range for dimension {dim} of {target} (extent {extent})"))
}

/// Named tensor data.
pub type Tensors = std::collections::BTreeMap<String, TensorValue>;
