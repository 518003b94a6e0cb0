//! Compressed matrices: CSR / CSC (`pos`, `crd`, `val`) and their doubly
//! compressed forms DCSR / DCSC, which also compress away empty rows
//! (columns) with a `crd0` array.

use crate::coo::counting_sort;
use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result, check_array};

/// CSR when `major == 0` (rows compressed), CSC when `major == 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct Compressed<V, I = i32> {
    pub shape: [usize; 2],
    /// The dimension `pos` runs over: 0 for CSR, 1 for CSC.
    pub major: usize,
    /// `pos[i]..pos[i+1]` are the entries of major slice `i`.
    pub pos: Vec<I>,
    /// Minor coordinate of each entry, sorted within a slice.
    pub crd: Vec<I>,
    pub val: Vec<V>,
}

impl<V: Value, I: Index> Compressed<V, I> {
    /// Builds from COO entries in any order; duplicates are summed (in file
    /// order), explicit zeros kept. Linear time: a counting pass over the
    /// major coordinate, then a sort of each (short) slice.
    pub fn from_coo(coo: &Coo<V, I>, major: usize) -> Result<Self> {
        let (rows, cols) = coo.expect_matrix(if major == 0 { "CSR" } else { "CSC" })?;
        let shape = [rows, cols];
        let minor = 1 - major;
        let (majors, minors) = (&coo.crd[major], &coo.crd[minor]);
        check_array::<usize>("CSR/CSC pos", shape[major].checked_add(1))?;
        let mut count = vec![0usize; shape[major] + 1];
        for m in majors {
            count[m.to_usize() + 1] += 1;
        }
        for i in 0..shape[major] {
            count[i + 1] += count[i];
        }
        let mut next = count.clone();
        let mut crd = vec![I::default(); coo.nnz()];
        let mut val = vec![V::zero(); coo.nnz()];
        for k in 0..coo.nnz() {
            let slot = &mut next[majors[k].to_usize()];
            crd[*slot] = minors[k];
            val[*slot] = coo.val[k];
            *slot += 1;
        }
        // Sort each slice by minor coordinate and sum duplicates, compacting
        // in place; `write` trails `read`.
        let mut pos = Vec::with_capacity(shape[major] + 1);
        pos.push(I::default());
        let mut write = 0;
        let mut pairs: Vec<(I, V)> = Vec::new();
        for i in 0..shape[major] {
            let (start, end) = (count[i], count[i + 1]);
            let slice_sorted = crd[start..end].windows(2).all(|w| w[0] < w[1]);
            if slice_sorted {
                crd.copy_within(start..end, write);
                val.copy_within(start..end, write);
                write += end - start;
            } else {
                pairs.clear();
                pairs.extend((start..end).map(|k| (crd[k], val[k])));
                pairs.sort_by_key(|p| p.0); // stable: duplicates sum in input order
                let slice_start = write;
                for &(c, v) in &pairs {
                    if write > slice_start && crd[write - 1] == c {
                        val[write - 1] = val[write - 1] + v;
                    } else {
                        crd[write] = c;
                        val[write] = v;
                        write += 1;
                    }
                }
            }
            pos.push(I::from_usize(write)?);
        }
        crd.truncate(write);
        val.truncate(write);
        Ok(Compressed { shape, major, pos, crd, val })
    }

    pub fn nnz(&self) -> usize {
        self.val.len()
    }

    /// The range of entries in major slice `i`.
    pub fn slice(&self, i: usize) -> std::ops::Range<usize> {
        self.pos[i].to_usize()..self.pos[i + 1].to_usize()
    }

    /// Canonical COO (sorted row-major).
    pub fn to_coo(&self) -> Coo<V, I> {
        let mut majors = Vec::with_capacity(self.nnz());
        for i in 0..self.shape[self.major] {
            let m = I::from_usize(i).unwrap_or_default();
            majors.extend(std::iter::repeat_n(m, self.slice(i).len()));
        }
        let mut crd = vec![majors, self.crd.clone()];
        if self.major == 1 {
            crd.swap(0, 1);
        }
        let coo = Coo { shape: self.shape.to_vec(), crd, val: self.val.clone() };
        if self.major == 0 { coo } else { coo.canonicalize() }
    }

    /// CSR ↔ CSC directly: a counting transpose, already sorted.
    pub fn transpose_storage(&self) -> Result<Self> {
        let major = 1 - self.major;
        let n_major = self.shape[major];
        let mut majors = Vec::with_capacity(self.nnz());
        for i in 0..self.shape[self.major] {
            majors.extend(std::iter::repeat_n(i, self.slice(i).len()));
        }
        let order = counting_sort(&self.crd, n_major, (0..self.nnz()).collect());
        let mut pos = vec![0usize; n_major + 1];
        for c in &self.crd {
            pos[c.to_usize() + 1] += 1;
        }
        for i in 0..n_major {
            pos[i + 1] += pos[i];
        }
        let crd = order.iter().map(|&k| I::from_usize(majors[k])).collect::<Result<_>>()?;
        let val = order.iter().map(|&k| self.val[k]).collect();
        Ok(Compressed { shape: self.shape, major, pos: crate::narrow(&pos)?, crd, val })
    }
}

/// DCSR when `major == 0`, DCSC when `major == 1`: only non-empty major
/// slices are stored, their coordinates in `crd0`.
#[derive(Clone, Debug, PartialEq)]
pub struct DoublyCompressed<V, I = i32> {
    pub shape: [usize; 2],
    pub major: usize,
    /// Coordinates of the non-empty major slices.
    pub crd0: Vec<I>,
    /// `pos[s]..pos[s+1]` are the entries of stored slice `s`.
    pub pos: Vec<I>,
    pub crd1: Vec<I>,
    pub val: Vec<V>,
}

impl<V: Value, I: Index> DoublyCompressed<V, I> {
    /// Builds from COO in any order without a per-row array, so
    /// hypersparse matrices stay cheap.
    pub fn from_coo(coo: &Coo<V, I>, major: usize) -> Result<Self> {
        let (rows, cols) = coo.expect_matrix(if major == 0 { "DCSR" } else { "DCSC" })?;
        let sorted = if major == 0 { coo.clone().canonicalize() } else { coo.permute(&[1, 0])? };
        let mut crd0 = Vec::new();
        let mut pos = vec![I::default()];
        for k in 0..sorted.nnz() {
            if k == 0 || sorted.crd[0][k] != sorted.crd[0][k - 1] {
                if k > 0 {
                    pos.push(I::from_usize(k)?);
                }
                crd0.push(sorted.crd[0][k]);
            }
        }
        if sorted.nnz() > 0 {
            pos.push(I::from_usize(sorted.nnz())?);
        }
        let mut crd = sorted.crd;
        Ok(DoublyCompressed {
            shape: [rows, cols],
            major,
            crd0,
            pos,
            crd1: crd.swap_remove(1),
            val: sorted.val,
        })
    }

    /// Drops the empty slices of a CSR / CSC.
    pub fn from_compressed(c: &Compressed<V, I>) -> Self {
        let mut crd0 = Vec::new();
        let mut pos = vec![I::default()];
        for i in 0..c.shape[c.major] {
            if !c.slice(i).is_empty() {
                crd0.push(I::from_usize(i).unwrap_or_default());
                pos.push(c.pos[i + 1]);
            }
        }
        DoublyCompressed {
            shape: c.shape,
            major: c.major,
            crd0,
            pos,
            crd1: c.crd.clone(),
            val: c.val.clone(),
        }
    }

    /// Canonical COO, without a per-row array.
    pub fn to_coo(&self) -> Result<Coo<V, I>> {
        let mut majors = Vec::with_capacity(self.nnz());
        for (s, &m) in self.crd0.iter().enumerate() {
            let len = self.pos[s + 1].to_usize().saturating_sub(self.pos[s].to_usize());
            majors.extend(std::iter::repeat_n(m, len));
        }
        let mut crd = vec![majors, self.crd1.clone()];
        if self.major == 1 {
            crd.swap(0, 1);
        }
        let coo = Coo::new(self.shape.to_vec(), crd, self.val.clone())?;
        Ok(if self.major == 0 { coo } else { coo.canonicalize() })
    }

    /// Puts the empty slices back.
    pub fn to_compressed(&self) -> Result<Compressed<V, I>> {
        let n = self.shape[self.major];
        check_array::<I>("CSR/CSC pos", n.checked_add(1))?;
        let mut pos = vec![I::default(); n + 1];
        let mut stored = 0;
        for i in 0..n {
            if stored < self.crd0.len() && self.crd0[stored].to_usize() == i {
                stored += 1;
            }
            pos[i + 1] = self.pos[stored];
        }
        if stored != self.crd0.len() {
            return Err(FormatError::invalid(
                "DCSR",
                "crd0 is not sorted or holds a coordinate out of range",
            ));
        }
        Ok(Compressed {
            shape: self.shape,
            major: self.major,
            pos,
            crd: self.crd1.clone(),
            val: self.val.clone(),
        })
    }

    pub fn nnz(&self) -> usize {
        self.val.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Coo<f64, i32> {
        // [[1 0 2]
        //  [0 0 0]
        //  [3 4 0]] with a duplicate at (2,1) and entries out of order.
        Coo::from_triplets(3, 3, &[(2, 1, 1.0), (0, 2, 2.0), (2, 0, 3.0), (0, 0, 1.0), (2, 1, 3.0)]).unwrap()
    }

    #[test]
    fn csr_from_unsorted_coo_sums_duplicates() {
        let csr = Compressed::from_coo(&example(), 0).unwrap();
        assert_eq!(csr.pos, vec![0, 2, 2, 4]);
        assert_eq!(csr.crd, vec![0, 2, 0, 1]);
        assert_eq!(csr.val, vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn csc_and_transpose_agree() {
        let csr = Compressed::from_coo(&example(), 0).unwrap();
        let csc = Compressed::from_coo(&example(), 1).unwrap();
        assert_eq!(csc.pos, vec![0, 2, 3, 4]);
        assert_eq!(csc.crd, vec![0, 2, 2, 0]);
        assert_eq!(csr.transpose_storage().unwrap(), csc);
        assert_eq!(csc.transpose_storage().unwrap(), csr);
        assert_eq!(csc.to_coo(), csr.to_coo());
    }

    #[test]
    fn dcsr_skips_empty_rows() {
        let csr = Compressed::from_coo(&example(), 0).unwrap();
        let dcsr = DoublyCompressed::from_compressed(&csr);
        assert_eq!(dcsr.crd0, vec![0, 2]);
        assert_eq!(dcsr.pos, vec![0, 2, 4]);
        assert_eq!(dcsr.to_compressed().unwrap(), csr);
    }
}
