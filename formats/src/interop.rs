//! Interop with sprs (CsMat, TriMat) and ndarray.

use ndarray::ArrayD;
use sprs::{CsMatI, SpIndex, TriMatI};

use crate::scalar::{Index, Value};
use crate::{Compressed, Coo, Dense, FormatError, Result};

impl<V: Value, I: Index + SpIndex> Compressed<V, I> {
    /// A sprs matrix sharing nothing with `self` (arrays are copied).
    pub fn to_sprs(&self) -> Result<CsMatI<V, I>> {
        let shape = (self.shape[0], self.shape[1]);
        let arrays = (self.pos.clone(), self.crd.clone(), self.val.clone());
        let m = if self.major == 0 {
            CsMatI::try_new(shape, arrays.0, arrays.1, arrays.2)
        } else {
            CsMatI::try_new_csc(shape, arrays.0, arrays.1, arrays.2)
        };
        m.map_err(|(.., e)| FormatError::invalid("sprs matrix", e.to_string()))
    }

    pub fn from_sprs(m: &CsMatI<V, I>) -> Self {
        Compressed {
            shape: [m.rows(), m.cols()],
            major: if m.is_csr() { 0 } else { 1 },
            pos: m.indptr().raw_storage().to_vec(),
            crd: m.indices().to_vec(),
            val: m.data().to_vec(),
        }
    }
}

impl<V: Value, I: Index + SpIndex> Coo<V, I> {
    pub fn to_trimat(&self) -> Result<TriMatI<V, I>> {
        let (rows, cols) = self.expect_matrix("TriMat")?;
        Ok(TriMatI::from_triplets((rows, cols), self.crd[0].clone(), self.crd[1].clone(), self.val.clone()))
    }

    /// Triplets in their order, duplicates kept.
    pub fn from_trimat(t: &TriMatI<V, I>) -> Result<Self> {
        let rows = t.row_inds().to_vec();
        let cols = t.col_inds().to_vec();
        Coo::new(vec![t.rows(), t.cols()], vec![rows, cols], t.data().to_vec())
    }
}

impl<V: Value> Dense<V> {
    pub fn from_ndarray(val: ArrayD<V>) -> Self {
        Dense { val }
    }

    pub fn into_ndarray(self) -> ArrayD<V> {
        self.val
    }
}

impl<V: Value, I: Index> Coo<V, I> {
    /// The non-zero entries of a dense array, canonical.
    pub fn from_ndarray(a: &ArrayD<V>) -> Result<Self> {
        Dense::from_ndarray(a.clone()).to_coo()
    }

    /// A dense array with duplicates summed.
    pub fn to_ndarray(&self) -> Result<ArrayD<V>> {
        Ok(Dense::from_coo(self)?.val)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sprs_round_trips() {
        let coo = Coo::<f64, i32>::from_triplets(3, 4, &[(0, 1, 1.0), (2, 3, 2.0), (2, 0, 3.0), (0, 1, 1.5)])
            .unwrap();
        let ours = Compressed::from_coo(&coo, 0).unwrap();
        let theirs: CsMatI<f64, i32> = coo.to_trimat().unwrap().to_csr();
        assert_eq!(Compressed::from_sprs(&theirs), ours);
        assert_eq!(ours.to_sprs().unwrap(), theirs);
        let csc = Compressed::from_coo(&coo, 1).unwrap();
        assert_eq!(Compressed::from_sprs(&csc.to_sprs().unwrap()), csc);
        assert_eq!(Coo::from_trimat(&coo.to_trimat().unwrap()).unwrap(), coo);
    }

    #[test]
    fn ndarray_round_trips() {
        let coo = Coo::<f32, i64>::from_triplets(2, 3, &[(1, 2, 4.0), (0, 0, 1.0)]).unwrap().canonicalize();
        let a = coo.to_ndarray().unwrap();
        assert_eq!(a[[1, 2]], 4.0);
        assert_eq!(Coo::from_ndarray(&a).unwrap(), coo);
    }
}
