//! Structured sparsity patterns: dense blocks and bands.

use super::{check_shape, matrix, sample_cells, seeded, with_capacity};
use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

/// The default block edge of [`block_sparse`] specs: Insum's 32x32.
pub const DEFAULT_BLOCK: usize = 32;

/// A `rows x cols` matrix of dense `bm x bk` blocks.
///
/// The matrix is cut into a `ceil(rows/bm) x ceil(cols/bk)` block grid;
/// `round(block_density * blocks)` of the blocks are chosen uniformly at
/// random (an exact count) and every position of a chosen block is stored,
/// blocks on the ragged right and bottom edges clipped to the matrix.
/// Sparsity in the Insum sense is `1 - block_density`: its BlockGroupCOO
/// benchmark is 4096x4096 with 32x32 blocks at 50–99% sparsity.
///
/// Fails when a block edge is 0, when `block_density` is not in `[0, 1]`
/// or when an extent does not fit in `I`.
///
/// ```
/// use spindle_formats::generate::block_sparse;
///
/// // 8x8 grid of 32x32 blocks, 20% of them: round(0.2 * 64) = 13 blocks.
/// let a = block_sparse::<f32, i32>(256, 256, 32, 32, 0.2, 1)?;
/// assert_eq!(a.nnz(), 13 * 32 * 32);
/// assert!(a.is_canonical());
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn block_sparse<V: Value, I: Index>(
    rows: usize,
    cols: usize,
    bm: usize,
    bk: usize,
    block_density: f64,
    seed: u64,
) -> Result<Coo<V, I>> {
    const WHAT: &str = "block-sparse generator";
    check_block_sparse(bm, bk, block_density)?;
    check_shape::<I>(&[rows, cols])?;
    let (grid_rows, grid_cols) = (rows.div_ceil(bm), cols.div_ceil(bk));
    let blocks = grid_rows as u128 * grid_cols as u128;
    let chosen = ((block_density * blocks as f64).round() as u128).min(blocks);
    let chosen = usize::try_from(chosen)
        .map_err(|_| FormatError::invalid(WHAT, format!("{chosen} blocks do not fit in memory")))?;
    let mut rng = seeded(seed);
    let picked = sample_cells(&mut rng, grid_rows, grid_cols, chosen)?;
    // Clipped block extents along each axis.
    let height = |br: usize| bm.min(rows - br * bm);
    let width = |bc: usize| bk.min(cols - bc * bk);
    let nnz = picked
        .iter()
        .try_fold(0usize, |n, &(br, bc)| n.checked_add(height(br as usize).checked_mul(width(bc as usize))?))
        .ok_or_else(|| FormatError::invalid(WHAT, "the number of entries overflows usize"))?;
    let (mut crd0, mut crd1) = (with_capacity(nnz, WHAT)?, with_capacity(nnz, WHAT)?);
    // Blocks come sorted row-major, so walking a block row's rows and, in
    // each, its blocks left to right emits entries in canonical order.
    for block_row in picked.chunk_by(|a, b| a.0 == b.0) {
        let br = block_row[0].0 as usize;
        for i in br * bm..br * bm + height(br) {
            let row = I::from_usize(i)?;
            for &(_, bc) in block_row {
                let bc = bc as usize;
                for j in bc * bk..bc * bk + width(bc) {
                    crd0.push(row);
                    crd1.push(I::from_usize(j)?);
                }
            }
        }
    }
    matrix(rows, cols, crd0, crd1, &mut rng, WHAT)
}

pub(super) fn check_block_sparse(bm: usize, bk: usize, block_density: f64) -> Result<()> {
    const WHAT: &str = "block-sparse generator";
    if bm == 0 || bk == 0 {
        return Err(FormatError::invalid(WHAT, format!("blocks must be at least 1x1, got {bm}x{bk}")));
    }
    if !(0.0..=1.0).contains(&block_density) {
        return Err(FormatError::invalid(
            WHAT,
            format!("block density must be a fraction in [0, 1], got {block_density}"),
        ));
    }
    Ok(())
}

/// An `n x n` band matrix: every position with `-lower <= j - i <= upper`
/// is stored. `lower` and `upper` may exceed `n`; the band is clipped to
/// the matrix. The seed only chooses the values.
///
/// ```
/// use spindle_formats::generate::banded;
///
/// // Tridiagonal: n + 2(n - 1) entries.
/// let a = banded::<f64, i64>(100, 1, 1, 0)?;
/// assert_eq!(a.nnz(), 100 + 2 * 99);
/// assert!((0..a.nnz()).all(|k| a.coord(k)[0].abs_diff(a.coord(k)[1]) <= 1));
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn banded<V: Value, I: Index>(n: usize, lower: usize, upper: usize, seed: u64) -> Result<Coo<V, I>> {
    const WHAT: &str = "banded generator";
    check_shape::<I>(&[n, n])?;
    // Called for i < n only.
    let span = |i: usize| (i.saturating_sub(lower), i.saturating_add(upper).min(n - 1));
    // Diagonal d in -lower..=upper holds n - |d| entries (counted in
    // closed form: a loop over 2^62 rows never ended).
    let (l, u, rows) =
        (lower.min(n.saturating_sub(1)) as u128, upper.min(n.saturating_sub(1)) as u128, n as u128);
    let nnz = (l + u + 1) * rows - l * (l + 1) / 2 - u * (u + 1) / 2;
    let nnz = usize::try_from(nnz)
        .map_err(|_| FormatError::invalid(WHAT, "the number of entries overflows usize"))?;
    let (mut crd0, mut crd1) = (with_capacity(nnz, WHAT)?, with_capacity(nnz, WHAT)?);
    for i in 0..n {
        let row = I::from_usize(i)?;
        let (lo, hi) = span(i);
        for j in lo..=hi {
            crd0.push(row);
            crd1.push(I::from_usize(j)?);
        }
    }
    matrix(n, n, crd0, crd1, &mut seeded(seed), WHAT)
}
