//! ELL: every row padded to the same width w (the maximum row occupancy).
//! GroupCOO with g = w and one group per row, so no row array is needed.

use crate::scalar::{Index, Value};
use crate::{Coo, Result, check_array};

#[derive(Clone, Debug, PartialEq)]
pub struct Ell<V, I = i32> {
    pub shape: [usize; 2],
    /// Entries per row, padding included.
    pub width: usize,
    /// `[rows, width]` row-major column coordinates; padding repeats the
    /// row's last coordinate (0 in an empty row).
    pub crd: Vec<I>,
    /// `[rows, width]` row-major; padding is 0.
    pub val: Vec<V>,
}

impl<V: Value, I: Index> Ell<V, I> {
    pub fn from_csr(csr: &crate::Compressed<V, I>) -> Result<Self> {
        let csr = if csr.major == 0 { csr.clone() } else { csr.transpose_storage()? };
        let rows = csr.shape[0];
        let width = (0..rows).map(|i| csr.slice(i).len()).max().unwrap_or(0);
        check_array::<V>("ELL val", rows.checked_mul(width))?;
        let mut crd = Vec::with_capacity(rows * width);
        let mut val = Vec::with_capacity(rows * width);
        for i in 0..rows {
            let r = csr.slice(i);
            let pad = csr.crd[r.clone()].last().copied().unwrap_or_default();
            crd.extend_from_slice(&csr.crd[r.clone()]);
            crd.extend(std::iter::repeat_n(pad, width - r.len()));
            val.extend_from_slice(&csr.val[r.clone()]);
            val.extend(std::iter::repeat_n(V::zero(), width - r.len()));
        }
        Ok(Ell { shape: csr.shape, width, crd, val })
    }

    /// Canonical COO of the non-zero entries. ELL cannot tell an explicit
    /// zero from padding, so zeros are dropped.
    pub fn to_coo(&self) -> Result<Coo<V, I>> {
        let mut rows = Vec::new();
        let mut crd = Vec::new();
        let mut val = Vec::new();
        for i in 0..self.shape[0] {
            for k in i * self.width..(i + 1) * self.width {
                if !self.val[k].is_zero() {
                    rows.push(I::from_usize(i)?);
                    crd.push(self.crd[k]);
                    val.push(self.val[k]);
                }
            }
        }
        Ok(Coo { shape: self.shape.to_vec(), crd: vec![rows, crd], val })
    }
}
