//! Block formats: BCSR and BlockGroupCOO (Insum §4, Figure 6). Both store
//! dense `bm × bk` blocks, row-major inside a block; blocks at ragged matrix
//! edges are padded with zeros.

use crate::group::{check_padded, group_runs, resolve_group_size};
use crate::scalar::{Index, Value};
use crate::spec::GroupSize;
use crate::{Coo, FormatError, Result, check_array};

/// The non-empty blocks of a matrix, sorted by (major block coordinate,
/// minor block coordinate).
struct Blocks<V> {
    major_crd: Vec<usize>,
    minor_crd: Vec<usize>,
    /// `[blocks, bm, bk]` row-major.
    val: Vec<V>,
}

/// Checks a block shape; returns the entries per block.
fn check_block_shape<V>(format: &str, bm: usize, bk: usize) -> Result<usize> {
    if bm == 0 || bk == 0 {
        return Err(FormatError::invalid(format, format!("block shape {bm}x{bk} must be positive")));
    }
    check_array::<V>(&format!("{format} block"), bm.checked_mul(bk))
}

fn blocks<V: Value, I: Index>(coo: &Coo<V, I>, bm: usize, bk: usize, major: usize) -> Result<Blocks<V>> {
    let block_of = |k: usize| [coo.crd[0][k].to_usize() / bm, coo.crd[1][k].to_usize() / bk];
    let mut order: Vec<usize> = (0..coo.nnz()).collect();
    order.sort_by_key(|&k| {
        let b = block_of(k);
        (b[major], b[1 - major])
    });
    let mut out = Blocks { major_crd: Vec::new(), minor_crd: Vec::new(), val: Vec::new() };
    let distinct = (1..order.len()).filter(|&i| block_of(order[i]) != block_of(order[i - 1])).count();
    let blocks = if order.is_empty() { 0 } else { distinct + 1 };
    check_array::<V>("block values", blocks.checked_mul(bm * bk))?;
    let mut current = None;
    for k in order {
        let b = block_of(k);
        if current != Some(b) {
            current = Some(b);
            out.major_crd.push(b[major]);
            out.minor_crd.push(b[1 - major]);
            out.val.extend(std::iter::repeat_n(V::zero(), bm * bk));
        }
        let base = (out.major_crd.len() - 1) * bm * bk;
        let at = base + (coo.crd[0][k].to_usize() % bm) * bk + coo.crd[1][k].to_usize() % bk;
        out.val[at] = out.val[at] + coo.val[k];
    }
    Ok(out)
}

/// Appends the non-zero entries of one stored block to COO arrays.
fn emit_block<V: Value>(
    shape: [usize; 2],
    (bm, bk): (usize, usize),
    (block_row, block_col): (usize, usize),
    vals: &[V],
    out: &mut [Vec<usize>; 2],
    out_val: &mut Vec<V>,
) {
    for (at, &v) in vals.iter().enumerate() {
        let (i, j) = (block_row * bm + at / bk, block_col * bk + at % bk);
        if !v.is_zero() && i < shape[0] && j < shape[1] {
            out[0].push(i);
            out[1].push(j);
            out_val.push(v);
        }
    }
}

fn finish_coo<V: Value, I: Index>(shape: [usize; 2], crd: [Vec<usize>; 2], val: Vec<V>) -> Result<Coo<V, I>> {
    let crd = vec![crate::narrow(&crd[0])?, crate::narrow(&crd[1])?];
    Ok(Coo::new(shape.to_vec(), crd, val)?.canonicalize())
}

/// Block CSR: a CSR over block rows whose entries are dense blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct Bcsr<V, I = i32> {
    pub shape: [usize; 2],
    pub bm: usize,
    pub bk: usize,
    /// `[⌈rows/bm⌉ + 1]`.
    pub pos: Vec<I>,
    /// Block column of each block.
    pub crd: Vec<I>,
    /// `[blocks, bm, bk]` row-major.
    pub val: Vec<V>,
}

impl<V: Value, I: Index> Bcsr<V, I> {
    pub fn from_coo(coo: &Coo<V, I>, bm: usize, bk: usize) -> Result<Self> {
        let (rows, cols) = coo.expect_matrix("BCSR")?;
        check_block_shape::<V>("BCSR", bm, bk)?;
        let b = blocks(coo, bm, bk, 0)?;
        check_array::<usize>("BCSR pos", rows.div_ceil(bm).checked_add(1))?;
        let mut pos = vec![0usize; rows.div_ceil(bm) + 1];
        for &r in &b.major_crd {
            pos[r + 1] += 1;
        }
        for i in 1..pos.len() {
            pos[i] += pos[i - 1];
        }
        Ok(Bcsr {
            shape: [rows, cols],
            bm,
            bk,
            pos: crate::narrow(&pos)?,
            crd: crate::narrow(&b.minor_crd)?,
            val: b.val,
        })
    }

    pub fn blocks(&self) -> usize {
        self.crd.len()
    }

    /// Canonical COO of the non-zero entries (zeros inside blocks are fill).
    pub fn to_coo(&self) -> Result<Coo<V, I>> {
        let mut crd = [Vec::new(), Vec::new()];
        let mut val = Vec::new();
        let size = self.bm * self.bk;
        for block_row in 0..self.pos.len().saturating_sub(1) {
            for b in self.pos[block_row].to_usize()..self.pos[block_row + 1].to_usize() {
                let at = (block_row, self.crd[b].to_usize());
                let vals = &self.val[b * size..(b + 1) * size];
                emit_block(self.shape, (self.bm, self.bk), at, vals, &mut crd, &mut val);
            }
        }
        finish_coo(self.shape, crd, val)
    }
}

/// BlockGroupCOO(bm, bk, dim, g): the non-empty blocks grouped `g` at a time
/// along block rows (`dim = 0`) or block columns (`dim = 1`).
#[derive(Clone, Debug, PartialEq)]
pub struct BlockGroupCoo<V, I = i32> {
    pub shape: [usize; 2],
    pub bm: usize,
    pub bk: usize,
    pub dim: usize,
    pub g: usize,
    /// `grp[p]`: the block coordinate along `dim` shared by group `p`.
    pub grp: Vec<I>,
    /// `[P, g]`: the other block coordinate; padding repeats the last one.
    pub crd: Vec<I>,
    /// `[P, g, bm, bk]`; padding blocks are all zero.
    pub val: Vec<V>,
}

impl<V: Value, I: Index> BlockGroupCoo<V, I> {
    pub fn from_coo(coo: &Coo<V, I>, bm: usize, bk: usize, dim: usize, g: GroupSize) -> Result<Self> {
        let (rows, cols) = coo.expect_matrix("BlockGroupCOO")?;
        let size = check_block_shape::<V>("BlockGroupCOO", bm, bk)?;
        if dim > 1 {
            return Err(FormatError::invalid(
                "BlockGroupCOO",
                format!("dim={dim} but a matrix has dims 0 and 1"),
            ));
        }
        let b = blocks(coo, bm, bk, dim)?;
        let n_slices = if dim == 0 { rows.div_ceil(bm) } else { cols.div_ceil(bk) };
        check_array::<usize>("block occupancy", Some(n_slices))?;
        let mut occupancy = vec![0usize; n_slices];
        for &m in &b.major_crd {
            occupancy[m] += 1;
        }
        let g = resolve_group_size(g, occupancy.len(), &occupancy);
        if g == 0 {
            return Err(FormatError::invalid("BlockGroupCOO", "group size must be positive"));
        }
        let groups = group_runs(&b.major_crd, g);
        check_padded::<V>(
            "BlockGroupCOO",
            g,
            groups.len(),
            ("blocks", size),
            occupancy.iter().copied().max().unwrap_or(0),
        )?;
        let mut grp = Vec::with_capacity(groups.len());
        let mut crd = Vec::with_capacity(groups.len() * g);
        let mut val = Vec::with_capacity(groups.len() * g * size);
        for (key, range) in groups {
            grp.push(key);
            let last = b.minor_crd[range.end - 1];
            crd.extend(range.clone().map(|k| b.minor_crd[k]));
            crd.extend(std::iter::repeat_n(last, g - range.len()));
            val.extend_from_slice(&b.val[range.start * size..range.end * size]);
            val.extend(std::iter::repeat_n(V::zero(), (g - range.len()) * size));
        }
        Ok(BlockGroupCoo {
            shape: [rows, cols],
            bm,
            bk,
            dim,
            g,
            grp: crate::narrow(&grp)?,
            crd: crate::narrow(&crd)?,
            val,
        })
    }

    pub fn groups(&self) -> usize {
        self.grp.len()
    }

    /// Slot `q` of group `p` is padding when it repeats the previous slot's
    /// block coordinate.
    pub fn is_padding(&self, p: usize, q: usize) -> bool {
        q > 0 && self.crd[p * self.g + q] == self.crd[p * self.g + q - 1]
    }

    /// Non-padding blocks in group `p`.
    fn blocks_in_group(&self, p: usize) -> usize {
        (0..self.g).filter(|&q| !self.is_padding(p, q)).count()
    }

    /// Stored blocks that are not padding.
    pub fn real_blocks(&self) -> usize {
        (0..self.groups()).map(|p| self.blocks_in_group(p)).sum()
    }

    /// Non-empty blocks per block row (`dim = 0`) or block column.
    pub fn block_occupancy(&self) -> Vec<usize> {
        let slices =
            if self.dim == 0 { self.shape[0].div_ceil(self.bm) } else { self.shape[1].div_ceil(self.bk) };
        let mut occ = vec![0usize; slices];
        for p in 0..self.groups() {
            occ[self.grp[p].to_usize()] += self.blocks_in_group(p);
        }
        occ
    }

    /// Canonical COO of the non-zero entries (zeros inside blocks are fill).
    pub fn to_coo(&self) -> Result<Coo<V, I>> {
        let mut crd = [Vec::new(), Vec::new()];
        let mut val = Vec::new();
        let size = self.bm * self.bk;
        for p in 0..self.groups() {
            for q in (0..self.g).filter(|&q| !self.is_padding(p, q)) {
                let (major, minor) = (self.grp[p].to_usize(), self.crd[p * self.g + q].to_usize());
                let at = if self.dim == 0 { (major, minor) } else { (minor, major) };
                let slot = p * self.g + q;
                let vals = &self.val[slot * size..(slot + 1) * size];
                emit_block(self.shape, (self.bm, self.bk), at, vals, &mut crd, &mut val);
            }
        }
        finish_coo(self.shape, crd, val)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 5×5 matrix with 2×2 blocks: blocks (0,0), (0,2), (2,1) are non-empty.
    fn example() -> Coo<f64, i32> {
        Coo::from_triplets(5, 5, &[(0, 0, 1.0), (1, 1, 2.0), (0, 4, 3.0), (4, 2, 4.0), (4, 3, 5.0)])
            .unwrap()
            .canonicalize()
    }

    #[test]
    fn bcsr_blocks_and_round_trip() {
        let b = Bcsr::from_coo(&example(), 2, 2).unwrap();
        assert_eq!(b.pos, vec![0, 2, 2, 3]);
        assert_eq!(b.crd, vec![0, 2, 1]);
        assert_eq!(&b.val[..4], &[1.0, 0.0, 0.0, 2.0]);
        assert_eq!(&b.val[4..8], &[3.0, 0.0, 0.0, 0.0]);
        assert_eq!(b.to_coo().unwrap(), example());
    }

    #[test]
    fn block_group_coo_pads_whole_blocks() {
        let b = BlockGroupCoo::from_coo(&example(), 2, 2, 0, GroupSize::Fixed(2)).unwrap();
        assert_eq!(b.grp, vec![0, 2]);
        assert_eq!(b.crd, vec![0, 2, 1, 1]);
        assert_eq!(b.val.len(), 2 * 2 * 4);
        assert!(b.val[12..].iter().all(|v| *v == 0.0));
        assert_eq!(b.real_blocks(), 3);
        assert_eq!(b.to_coo().unwrap(), example());
        let by_cols = BlockGroupCoo::from_coo(&example(), 2, 2, 1, GroupSize::Fixed(1)).unwrap();
        assert_eq!(by_cols.grp, vec![0, 1, 2]);
        assert_eq!(by_cols.crd, vec![0, 2, 0]);
        assert_eq!(by_cols.to_coo().unwrap(), example());
    }
}
