//! Dense tensors: every entry stored, row-major, on ndarray.

use ndarray::{ArrayD, IxDyn};

use crate::scalar::{Index, Value};
use crate::{Coo, Result, check_array};

#[derive(Clone, Debug, PartialEq)]
pub struct Dense<V> {
    pub val: ArrayD<V>,
}

impl<V: Value> Dense<V> {
    /// Scatters COO entries into zeros; duplicates are summed.
    pub fn from_coo<I: Index>(coo: &Coo<V, I>) -> Result<Self> {
        let size = coo.shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        check_array::<V>(&format!("dense storage of shape {:?}", coo.shape), size)?;
        let mut val = ArrayD::from_elem(IxDyn(&coo.shape), V::zero());
        let mut at = vec![0usize; coo.order()];
        for k in 0..coo.nnz() {
            for (a, c) in at.iter_mut().zip(&coo.crd) {
                *a = c[k].to_usize();
            }
            let slot = &mut val[IxDyn(&at)];
            *slot = *slot + coo.val[k];
        }
        Ok(Dense { val })
    }

    /// The non-zero entries as canonical COO (explicit zeros cannot survive
    /// a dense round trip).
    pub fn to_coo<I: Index>(&self) -> Result<Coo<V, I>> {
        let shape = self.val.shape().to_vec();
        let mut crd: Vec<Vec<usize>> = vec![Vec::new(); shape.len()];
        let mut val = Vec::new();
        for (at, &v) in self.val.indexed_iter() {
            if !v.is_zero() {
                for (d, c) in crd.iter_mut().enumerate() {
                    c.push(at[d]);
                }
                val.push(v);
            }
        }
        let crd = crd.iter().map(|c| crate::narrow(c)).collect::<Result<_>>()?;
        Coo::new(shape, crd, val)
    }
}
