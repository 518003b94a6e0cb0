//! Coordinate format of any order: the canonical hub every conversion passes
//! through when no direct route is cheaper.

use crate::scalar::{Index, Value};
use crate::{FormatError, Result};

/// A sparse tensor as coordinate lists, one `crd` array per dimension.
///
/// *Canonical* means sorted lexicographically by coordinate with no
/// duplicates; [`Coo::canonicalize`] gets there by summing duplicates.
#[derive(Clone, Debug, PartialEq)]
pub struct Coo<V, I = i32> {
    pub shape: Vec<usize>,
    /// `crd[d][k]` is the coordinate along dimension `d` of entry `k`.
    pub crd: Vec<Vec<I>>,
    pub val: Vec<V>,
}

impl<V: Value, I: Index> Coo<V, I> {
    /// Checks array lengths and that every coordinate lies inside `shape`.
    pub fn new(shape: Vec<usize>, crd: Vec<Vec<I>>, val: Vec<V>) -> Result<Self> {
        if crd.len() != shape.len() {
            return Err(FormatError::invalid(
                "COO",
                format!("{} coordinate arrays for a tensor of order {}", crd.len(), shape.len()),
            ));
        }
        for (d, c) in crd.iter().enumerate() {
            if c.len() != val.len() {
                return Err(FormatError::invalid(
                    "COO",
                    format!("crd{d} has {} entries but val has {}", c.len(), val.len()),
                ));
            }
            if let Some(k) = c.iter().position(|x| x.to_usize() >= shape[d]) {
                let coord = crd.iter().map(|c| c[k].to_usize()).collect();
                return Err(FormatError::OutOfBounds { coord, shape });
            }
        }
        for &extent in &shape {
            I::from_usize(extent)?;
        }
        Ok(Coo { shape, crd, val })
    }

    /// An empty tensor of the given shape.
    pub fn empty(shape: Vec<usize>) -> Self {
        let crd = vec![Vec::new(); shape.len()];
        Coo { shape, crd, val: Vec::new() }
    }

    /// A matrix from `(row, col, value)` triplets, duplicates kept.
    pub fn from_triplets(rows: usize, cols: usize, entries: &[(usize, usize, V)]) -> Result<Self> {
        let r = entries.iter().map(|e| e.0).collect::<Vec<_>>();
        let c = entries.iter().map(|e| e.1).collect::<Vec<_>>();
        let v = entries.iter().map(|e| e.2).collect();
        Coo::new(vec![rows, cols], vec![crate::narrow(&r)?, crate::narrow(&c)?], v)
    }

    pub fn order(&self) -> usize {
        self.shape.len()
    }

    /// Number of stored entries (duplicates counted separately until
    /// canonicalized).
    pub fn nnz(&self) -> usize {
        self.val.len()
    }

    /// The coordinate of entry `k` as usizes.
    pub fn coord(&self, k: usize) -> Vec<usize> {
        self.crd.iter().map(|c| c[k].to_usize()).collect()
    }

    /// Fails unless the tensor is a matrix; `format` names who asked.
    pub fn expect_matrix(&self, format: &str) -> Result<(usize, usize)> {
        match self.shape[..] {
            [rows, cols] => Ok((rows, cols)),
            _ => Err(FormatError::Order { format: format.into(), expected: 2, got: self.order() }),
        }
    }

    /// True when entries are sorted by coordinate with no duplicates.
    pub fn is_canonical(&self) -> bool {
        (1..self.nnz()).all(|k| self.cmp_entries(k - 1, k) == std::cmp::Ordering::Less)
    }

    fn cmp_entries(&self, a: usize, b: usize) -> std::cmp::Ordering {
        self.crd.iter().map(|c| c[a].cmp(&c[b])).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
    }

    /// Sorts by coordinate and sums duplicates. Explicit zeros stay.
    pub fn canonicalize(self) -> Self {
        if self.is_canonical() {
            return self;
        }
        let order = self.sorted_order();
        self.gather_summing(&order)
    }

    /// The permutation that sorts entries lexicographically, stable.
    /// Matrices use two counting-sort passes (linear) unless an extent
    /// dwarfs the entry count (hypersparse); otherwise a comparison sort.
    fn sorted_order(&self) -> Vec<usize> {
        let small = |extent: usize| extent <= 4 * self.nnz() + 4096;
        if self.order() == 2 && small(self.shape[0]) && small(self.shape[1]) {
            let by_col = counting_sort(&self.crd[1], self.shape[1], (0..self.nnz()).collect());
            counting_sort(&self.crd[0], self.shape[0], by_col)
        } else {
            let mut order: Vec<usize> = (0..self.nnz()).collect();
            order.sort_by(|&a, &b| self.cmp_entries(a, b));
            order
        }
    }

    /// Takes entries in `order` (sorted), summing runs of equal coordinates.
    fn gather_summing(&self, order: &[usize]) -> Self {
        let mut crd: Vec<Vec<I>> = vec![Vec::with_capacity(order.len()); self.order()];
        let mut val: Vec<V> = Vec::with_capacity(order.len());
        for &k in order {
            let same =
                !val.is_empty() && crd.iter().zip(&self.crd).all(|(out, c)| *out.last().unwrap() == c[k]);
            if same {
                let last = val.last_mut().unwrap();
                *last = *last + self.val[k];
            } else {
                for (out, c) in crd.iter_mut().zip(&self.crd) {
                    out.push(c[k]);
                }
                val.push(self.val[k]);
            }
        }
        Coo { shape: self.shape.clone(), crd, val }
    }

    /// Reorders dimensions: dimension `d` of the result is dimension
    /// `perm[d]` of `self`. The result is canonical.
    pub fn permute(&self, perm: &[usize]) -> Result<Self> {
        check_permutation(perm, self.order())?;
        let shape = perm.iter().map(|&d| self.shape[d]).collect();
        let crd = perm.iter().map(|&d| self.crd[d].clone()).collect();
        Ok(Coo { shape, crd, val: self.val.clone() }.canonicalize())
    }

    /// The same tensor with other value and index types.
    pub fn cast<W: Value, J: Index>(&self) -> Result<Coo<W, J>> {
        let crd = self
            .crd
            .iter()
            .map(|c| c.iter().map(|x| J::from_usize(x.to_usize())).collect::<Result<Vec<_>>>())
            .collect::<Result<Vec<_>>>()?;
        let val = self.val.iter().map(|v| W::from_f64(v.to_f64())).collect();
        Coo::new(self.shape.clone(), crd, val)
    }

    /// Drops entries whose value is zero.
    pub fn without_zeros(self) -> Self {
        let keep: Vec<usize> = (0..self.nnz()).filter(|&k| !self.val[k].is_zero()).collect();
        let crd = self.crd.iter().map(|c| keep.iter().map(|&k| c[k]).collect()).collect();
        let val = keep.iter().map(|&k| self.val[k]).collect();
        Coo { shape: self.shape, crd, val }
    }

    /// Number of entries in each slice along `dim` (row lengths for dim 0).
    /// Allocates one counter per slice: check the extent first where it
    /// comes from user input.
    pub fn occupancy(&self, dim: usize) -> Vec<usize> {
        let mut occ = vec![0usize; self.shape[dim]];
        for c in &self.crd[dim] {
            occ[c.to_usize()] += 1;
        }
        occ
    }
}

/// Validates that `perm` is a permutation of `0..order`, saying how it is
/// not.
pub(crate) fn check_permutation(perm: &[usize], order: usize) -> Result<()> {
    let why = |what: String| Err(FormatError::invalid("mode order", format!("{perm:?} {what}")));
    if perm.len() != order {
        return why(format!(
            "names {} modes, but the tensor has order {order} (modes 0 to {})",
            perm.len(),
            order.saturating_sub(1)
        ));
    }
    let mut seen = vec![false; order];
    for &d in perm {
        if d >= order {
            return why(format!("names mode {d}, past the tensor's order {order}"));
        }
        if std::mem::replace(&mut seen[d], true) {
            return why(format!("names mode {d} twice"));
        }
    }
    Ok(())
}

/// Stable counting sort of `items` by `key[item]`, keys in `0..extent`.
pub(crate) fn counting_sort<I: Index>(key: &[I], extent: usize, items: Vec<usize>) -> Vec<usize> {
    let mut start = vec![0usize; extent + 1];
    for &k in &items {
        start[key[k].to_usize() + 1] += 1;
    }
    for i in 0..extent {
        start[i + 1] += start[i];
    }
    let mut out = vec![0usize; items.len()];
    for &k in &items {
        let slot = &mut start[key[k].to_usize()];
        out[*slot] = k;
        *slot += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonicalize_sorts_and_sums_duplicates() {
        let coo = Coo::<f64, i32>::from_triplets(3, 3, &[(2, 1, 1.0), (0, 2, 2.0), (2, 1, 3.0), (0, 0, 4.0)])
            .unwrap();
        let c = coo.canonicalize();
        assert_eq!(c.crd, vec![vec![0, 0, 2], vec![0, 2, 1]]);
        assert_eq!(c.val, vec![4.0, 2.0, 4.0]);
        assert!(c.is_canonical());
    }

    #[test]
    fn out_of_bounds_coordinate_is_an_error() {
        let err = Coo::<f64, i32>::from_triplets(2, 2, &[(2, 0, 1.0)]).unwrap_err();
        assert_eq!(err.to_string(), "coordinate [2, 0] is outside the shape [2, 2]");
    }

    #[test]
    fn third_order_canonicalize_and_permute() {
        let coo = Coo::<f32, i64>::new(
            vec![2, 2, 2],
            vec![vec![1, 0, 1], vec![0, 1, 0], vec![1, 1, 1]],
            vec![1.0, 2.0, 3.0],
        )
        .unwrap()
        .canonicalize();
        assert_eq!(coo.val, vec![2.0, 4.0]);
        let p = coo.permute(&[2, 0, 1]).unwrap();
        assert_eq!(p.crd, vec![vec![1, 1], vec![0, 1], vec![1, 0]]);
        assert_eq!(p.val, vec![2.0, 4.0]);
    }
}
