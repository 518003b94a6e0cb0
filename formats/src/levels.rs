//! Level lists of any order: each level dense or compressed, in a chosen
//! mode order. These are the `DDDC`, `DCCC`, `DCC`, … formats of sparse
//! convolution, where an activation tensor (NHWC) keeps its batch and
//! spatial dimensions dense and compresses only the channels. Two letters
//! give the familiar matrix formats: `dc` is CSR, `cc` DCSR, `dc` with
//! modes 1-0 CSC; all-`c` lists are CSF.

use crate::coo::check_permutation;
use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result, check_array};

/// A tensor stored as a list of levels, outermost first.
///
/// Positions name the nodes of each level. The root has one position, 0.
/// A dense level of extent `n` gives parent position `p` the children
/// `p * n .. p * n + n` (the coordinate is the offset, `child - p * n`); a
/// compressed level gives it `pos[l][p] .. pos[l][p + 1]`, with ascending
/// unique coordinates in `crd[l]`. `val` holds one value per position of
/// the last level, so a dense last level stores zeros where no entry is.
///
/// ```
/// use spindle_formats::{Coo, LevelTensor};
///
/// // An NHWC activation, 1×2×2×3, with channels compressed (`dddc`).
/// let x = Coo::<f32, i32>::new(
///     vec![1, 2, 2, 3],
///     vec![vec![0, 0, 0], vec![0, 1, 1], vec![1, 0, 1], vec![2, 0, 1]],
///     vec![1.0, 2.0, 3.0],
/// )?;
/// let t = LevelTensor::from_coo(&x, &[], &[true, true, true, false])?;
/// assert_eq!(t.letters(), "dddc");
/// // Four dense (n, h, w) positions; the first holds no channel.
/// assert_eq!(t.pos[3], [0, 0, 1, 2, 3]);
/// assert_eq!(t.crd[3], [2, 0, 1]);
/// assert_eq!(t.to_coo()?, x.clone().canonicalize());
///
/// // Channels outermost and compressed, then dense n, h, w under each.
/// let t = LevelTensor::from_coo(&x, &[3, 0, 1, 2], &[false, true, true, true])?;
/// assert_eq!(t.crd[0], [0, 1, 2]);
/// assert_eq!(t.val.len(), 3 * 1 * 2 * 2); // explicit zeros fill the dense levels
/// assert_eq!(t.nnz(), 3);
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LevelTensor<V, I = i32> {
    pub shape: Vec<usize>,
    /// Level `l` stores dimension `modes[l]` of the tensor.
    pub modes: Vec<usize>,
    /// Per level: dense (every coordinate, no arrays) or compressed.
    pub dense: Vec<bool>,
    /// Per level: the children ranges of a compressed level, one more entry
    /// than the level above has positions (`[0, len]` at the root); empty
    /// at a dense level.
    pub pos: Vec<Vec<I>>,
    /// Per level: the coordinate of each position of a compressed level;
    /// empty at a dense level.
    pub crd: Vec<Vec<I>>,
    /// One value per position of the last level.
    pub val: Vec<V>,
}

/// The letters of a level list, `d` for dense and `c` for compressed.
pub(crate) fn letters(dense: &[bool]) -> String {
    dense.iter().map(|&d| if d { 'd' } else { 'c' }).collect()
}

impl<V: Value, I: Index> LevelTensor<V, I> {
    /// Builds from COO in any order (duplicates summed, explicit zeros
    /// kept where a compressed last level stores them); `modes` empty
    /// means the identity, `dense[l]` says whether level `l` is dense.
    ///
    /// Sorting dominates: O(nnz log nnz), then one pass per level over the
    /// entries and O(positions) for the arrays. Nothing is dense unless a
    /// level is.
    pub fn from_coo(coo: &Coo<V, I>, modes: &[usize], dense: &[bool]) -> Result<Self> {
        let order = coo.order();
        if dense.len() != order {
            return Err(FormatError::Order {
                format: format!("{} (one d/c letter per dimension)", letters(dense)),
                expected: dense.len(),
                got: order,
            });
        }
        if order == 0 {
            return Err(FormatError::invalid("level list", "a tensor of order 0 has no levels"));
        }
        let modes: Vec<usize> = if modes.is_empty() { (0..order).collect() } else { modes.to_vec() };
        check_permutation(&modes, order)?;
        // Canonical in level order: the entries under one position are
        // contiguous and visited in position order at every level.
        let sorted = coo.permute(&modes)?;
        let nnz = sorted.nnz();
        // parent[k]: the position of entry k at the level above, then at
        // this level once the level is built.
        let mut parent = vec![0usize; nnz];
        let mut parents = 1usize;
        let mut pos = vec![Vec::new(); order];
        let mut crd = vec![Vec::new(); order];
        for l in 0..order {
            let (c, n) = (&sorted.crd[l], sorted.shape[l]);
            if dense[l] {
                // No array has one entry per position here: the next level's
                // `pos` or the values check their own sizes.
                let Some(p) = parents.checked_mul(n) else {
                    return Err(FormatError::invalid(
                        "level list",
                        "its dense levels have over usize::MAX positions",
                    ));
                };
                parents = p;
                for (p, c) in parent.iter_mut().zip(c) {
                    *p = *p * n + c.to_usize();
                }
                continue;
            }
            check_array::<I>(&format!("level list pos{l}"), parents.checked_add(1))?;
            let mut count = vec![0usize; parents + 1];
            let mut level_crd: Vec<I> = Vec::new();
            let mut previous: Option<(usize, I)> = None;
            for (p, &c) in parent.iter_mut().zip(c) {
                // A new node wherever the (parent, coordinate) pair changes.
                if previous != Some((*p, c)) {
                    previous = Some((*p, c));
                    count[*p + 1] += 1;
                    level_crd.push(c);
                }
                *p = level_crd.len() - 1;
            }
            for p in 0..parents {
                count[p + 1] += count[p];
            }
            parents = level_crd.len();
            pos[l] = crate::narrow(&count)?;
            crd[l] = level_crd;
        }
        let val = if dense[order - 1] {
            check_array::<V>("level list val", Some(parents))?;
            let mut val = vec![V::zero(); parents];
            for (&p, &v) in parent.iter().zip(&sorted.val) {
                val[p] = val[p] + v;
            }
            val
        } else {
            // A compressed last level has one position per canonical entry.
            sorted.val
        };
        Ok(LevelTensor { shape: coo.shape.clone(), modes, dense: dense.to_vec(), pos, crd, val })
    }

    pub fn order(&self) -> usize {
        self.shape.len()
    }

    /// `dddc`, `dc`, …: one letter per level.
    pub fn letters(&self) -> String {
        letters(&self.dense)
    }

    /// True when the last level is dense, so `val` holds fill: zeros where
    /// no entry is, which cannot be told from explicit zeros.
    pub fn stores_fill(&self) -> bool {
        self.dense.last().copied().unwrap_or(false)
    }

    /// Entries: every stored value under a compressed last level, the
    /// non-zero values under a dense one.
    pub fn nnz(&self) -> usize {
        if self.stores_fill() { self.val.iter().filter(|v| !v.is_zero()).count() } else { self.val.len() }
    }

    /// The number of positions of each level, outermost first.
    pub fn positions(&self) -> Vec<usize> {
        let mut parents = 1usize;
        (0..self.order())
            .map(|l| {
                parents = match self.dense[l] {
                    true => parents.saturating_mul(self.shape[self.modes[l]]),
                    false => self.crd[l].len(),
                };
                parents
            })
            .collect()
    }

    /// Canonical COO in the tensor's own dimension order. A dense last
    /// level's zeros are dropped (fill and explicit zeros look the same);
    /// under a compressed last level explicit zeros stay.
    pub fn to_coo(&self) -> Result<Coo<V, I>> {
        let order = self.order();
        let mut out: Vec<Vec<I>> = vec![Vec::new(); order];
        let mut val = Vec::new();
        let mut path = vec![I::default(); order];
        // The coordinates of each dense level, narrowed once.
        let dense_crd: Vec<Vec<I>> = (0..order)
            .map(|l| match self.dense[l] {
                true => (0..self.shape[self.modes[l]]).map(I::from_usize).collect::<Result<_>>(),
                false => Ok(Vec::new()),
            })
            .collect::<Result<_>>()?;
        self.walk(0, 0, &dense_crd, &mut path, &mut out, &mut val);
        let mut crd = vec![Vec::new(); order];
        for (l, c) in out.into_iter().enumerate() {
            crd[self.modes[l]] = c;
        }
        Ok(Coo { shape: self.shape.clone(), crd, val }.canonicalize())
    }

    /// Visits the children of position `p` at `level`, depth first, so
    /// entries come out sorted in level order.
    fn walk(
        &self,
        level: usize,
        p: usize,
        dense_crd: &[Vec<I>],
        path: &mut [I],
        out: &mut [Vec<I>],
        val: &mut Vec<V>,
    ) {
        if level == self.order() {
            if !(self.stores_fill() && self.val[p].is_zero()) {
                for (o, c) in out.iter_mut().zip(path.iter()) {
                    o.push(*c);
                }
                val.push(self.val[p]);
            }
            return;
        }
        if self.dense[level] {
            let coords = &dense_crd[level];
            for (i, &c) in coords.iter().enumerate() {
                path[level] = c;
                self.walk(level + 1, p * coords.len() + i, dense_crd, path, out, val);
            }
        } else {
            let (start, end) = (self.pos[level][p].to_usize(), self.pos[level][p + 1].to_usize());
            for q in start..end {
                path[level] = self.crd[level][q];
                self.walk(level + 1, q, dense_crd, path, out, val);
            }
        }
    }

    /// The logical shape of `val`: the positions above the trailing dense
    /// levels, then their extents (the dense shape, in level order, when
    /// every level is dense).
    pub fn val_shape(&self) -> Vec<usize> {
        let tail = self.dense.iter().rev().take_while(|&&d| d).count();
        let head = self.order() - tail;
        let mut shape = Vec::with_capacity(tail + 1);
        if head > 0 {
            shape.push(self.crd[head - 1].len());
        }
        shape.extend(self.modes[head..].iter().map(|&d| self.shape[d]));
        shape
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix() -> Coo<f64, i32> {
        // [[1 0 2]
        //  [0 0 0]
        //  [3 4 0]] with a duplicate at (2,1).
        Coo::from_triplets(3, 3, &[(2, 1, 1.0), (0, 2, 2.0), (2, 0, 3.0), (0, 0, 1.0), (2, 1, 3.0)]).unwrap()
    }

    #[test]
    fn dc_is_csr_and_cc_is_dcsr() {
        let dc = LevelTensor::from_coo(&matrix(), &[], &[true, false]).unwrap();
        assert_eq!(dc.pos, [vec![], vec![0, 2, 2, 4]]);
        assert_eq!(dc.crd, [vec![], vec![0, 2, 0, 1]]);
        assert_eq!(dc.val, [1.0, 2.0, 3.0, 4.0]);
        let cc = LevelTensor::from_coo(&matrix(), &[], &[false, false]).unwrap();
        assert_eq!(cc.pos, [vec![0, 2], vec![0, 2, 4]]);
        assert_eq!(cc.crd, [vec![0, 2], vec![0, 2, 0, 1]]);
        assert_eq!(cc.positions(), [2, 4]);
    }

    #[test]
    fn dense_last_level_stores_fill() {
        let cd = LevelTensor::from_coo(&matrix(), &[1, 0], &[false, true]).unwrap();
        // Columns 0, 1, 2 are non-empty; each holds a dense column of 3.
        assert_eq!(cd.crd[0], [0, 1, 2]);
        assert_eq!(cd.val, [1.0, 0.0, 3.0, 0.0, 0.0, 4.0, 2.0, 0.0, 0.0]);
        assert_eq!(cd.val_shape(), [3, 3]);
        assert_eq!((cd.nnz(), cd.to_coo().unwrap()), (4, matrix().canonicalize()));
    }

    #[test]
    fn wrong_letter_count_and_modes_are_errors() {
        let err = LevelTensor::from_coo(&matrix(), &[], &[true, false, false]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dcc (one d/c letter per dimension) needs a tensor of order 3, got order 2"
        );
        let err = LevelTensor::from_coo(&matrix(), &[1, 1], &[true, false]).unwrap_err();
        assert_eq!(err.to_string(), "invalid mode order: [1, 1] names mode 1 twice");
    }
}
