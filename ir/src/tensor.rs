//! Tensor data for the reference evaluator and the rewrite: values in f64,
//! indices in i64, whatever dtype they will have in a kernel.

use ndarray::ArrayD;
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

/// Named tensor data.
pub type Tensors = std::collections::BTreeMap<String, TensorValue>;
