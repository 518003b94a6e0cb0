//! Random sparsity patterns: uniform and power-law.

use rand::Rng;

use super::{Sampler, check_fits, check_shape, matrix, random_values, seeded, with_capacity};
use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

/// The default power-law exponent: the Pareto shape of the row weights,
/// so row lengths have density `∝ k^-3` (the Barabási–Albert exponent) and
/// the longest of `n` rows is about `sqrt(n)/2` times the mean, as in the
/// citation and collaboration graphs in `shared/data`.
pub const DEFAULT_ALPHA: f64 = 2.0;

/// Row weights are clamped here so that sums stay finite when `alpha` is
/// close to 0; rows that heavy are saturated at `cols` anyway.
const MAX_WEIGHT: f64 = 1e150;

/// A `rows x cols` matrix with exactly `nnz` distinct positions chosen
/// uniformly at random (every `nnz`-subset of cells equally likely).
///
/// Sparse requests reject repeated draws; requests filling more than a
/// quarter of the matrix take one selection-sampling pass over it. Either
/// way the work is `O(nnz log nnz)` and no `rows * cols` table is built.
/// Fails when `nnz > rows * cols` or an extent does not fit in `I`.
///
/// ```
/// use spindle_formats::generate::uniform;
///
/// let a = uniform::<f64, i32>(1000, 500, 2000, 1)?;
/// assert_eq!(a.shape, vec![1000, 500]);
/// assert_eq!(a.nnz(), 2000);
/// assert!(a.is_canonical());
/// assert!(a.val.iter().all(|v| v.abs() >= 0.1 && v.abs() < 1.0));
/// assert_eq!(a, uniform::<f64, i32>(1000, 500, 2000, 1)?); // seeded
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn uniform<V: Value, I: Index>(rows: usize, cols: usize, nnz: usize, seed: u64) -> Result<Coo<V, I>> {
    check_uniform(rows, cols, nnz)?;
    uniform_tensor(&[rows, cols], nnz, seed)
}

pub(super) fn check_uniform(rows: usize, cols: usize, nnz: usize) -> Result<()> {
    check_fits("uniform generator", rows, cols, nnz)
}

/// A tensor of any `shape` with exactly `nnz` distinct positions chosen
/// uniformly at random; [`uniform`] is its two-dimensional case. Work is
/// `O(nnz log nnz)`, whatever the number of cells. Fails when `nnz` exceeds
/// the cells or an extent does not fit in `I`.
///
/// ```
/// use spindle_formats::generate::{uniform, uniform_tensor};
///
/// let t = uniform_tensor::<f32, i32>(&[1, 34, 34, 16], 1850, 3)?; // an NHWC activation, 90% zeros
/// assert_eq!((t.shape.clone(), t.nnz()), (vec![1, 34, 34, 16], 1850));
/// assert!(t.is_canonical());
/// assert_eq!(uniform_tensor::<f64, i64>(&[50, 40], 300, 1)?, uniform(50, 40, 300, 1)?);
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn uniform_tensor<V: Value, I: Index>(shape: &[usize], nnz: usize, seed: u64) -> Result<Coo<V, I>> {
    const WHAT: &str = "uniform generator";
    let cells = check_tensor_fits(shape, nnz)?;
    check_shape::<I>(shape)?;
    let mut crd: Vec<Vec<I>> = Vec::with_capacity(shape.len());
    for _ in shape {
        crd.push(with_capacity(nnz, WHAT)?);
    }
    let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut rng = seeded(seed);
    let mut sampler = Sampler::new();
    // A cell is its row-major number; its coordinates are drawn one by one.
    let draw = |rng: &mut rand_chacha::ChaCha8Rng| {
        dims.iter().fold(0u128, |a, &d| a * d as u128 + rng.random_range(0..d) as u128)
    };
    let picked = sampler.sample(&mut rng, nnz, cells, draw, u128::from)?;
    for &cell in picked {
        let mut rest = cell;
        for (d, &n) in dims.iter().enumerate().rev() {
            crd[d].push(I::from_usize((rest % n as u128) as usize)?);
            rest /= n as u128;
        }
    }
    let val = random_values(&mut rng, nnz, WHAT)?;
    let coo = Coo::new(shape.to_vec(), crd, val)?;
    debug_assert!(coo.is_canonical());
    Ok(coo)
}

/// The cells of `shape`, when `nnz` distinct positions fit in them.
pub(super) fn check_tensor_fits(shape: &[usize], nnz: usize) -> Result<u128> {
    let cells = shape.iter().try_fold(1u128, |a, &d| a.checked_mul(d as u128));
    let shown = shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x");
    match cells {
        Some(cells) if nnz as u128 <= cells => Ok(cells),
        Some(cells) => Err(FormatError::invalid(
            "uniform generator",
            format!("nnz {nnz} exceeds the {cells} cells of {shown}"),
        )),
        None => Err(FormatError::invalid("uniform generator", format!("{shown} has too many cells"))),
    }
}

/// A `rows x cols` matrix with exactly `nnz` entries whose row lengths
/// follow a power law with exponent `alpha`, like the adjacency matrix of a
/// scale-free graph (the GNN setting).
///
/// Each row draws a Pareto weight of shape `alpha`, `w = u^(-1/alpha)`
/// with `u` uniform in `(0, 1]`, so `P(w > x) = x^-alpha` (density
/// `∝ x^-(alpha+1)`; ranked, the `r`-th longest row is `∝ r^(-1/alpha)`,
/// Zipf-like). Smaller `alpha` means a heavier tail; at `alpha <= 1` the
/// longest rows hold a fixed share of all entries. Lengths are the weights
/// scaled to sum to `nnz`, with the heaviest rows saturated at `cols` and
/// the rest rescaled (water-filling), then rounded by largest remainder so
/// the total is exactly `nnz`. Rows keep their random order; within a row
/// the columns are distinct and uniform. Work is `O(rows log rows + nnz)`
/// and memory `O(rows + nnz)`:
/// a million entries take tens of milliseconds in release mode.
///
/// Fails when `alpha` is not a finite positive number, when
/// `nnz > rows * cols` or when an extent does not fit in `I`.
///
/// ```
/// use spindle_formats::generate::{DEFAULT_ALPHA, power_law};
///
/// let a = power_law::<f32, i32>(2000, 2000, 20_000, DEFAULT_ALPHA, 7)?;
/// assert_eq!(a.nnz(), 20_000);
/// assert!(a.is_canonical());
/// let rows = a.occupancy(0);
/// let longest = *rows.iter().max().unwrap();
/// assert!(longest > 10 * 20_000 / 2000); // a heavy tail: far above the mean of 10
/// assert_eq!(rows.iter().sum::<usize>(), 20_000);
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn power_law<V: Value, I: Index>(
    rows: usize,
    cols: usize,
    nnz: usize,
    alpha: f64,
    seed: u64,
) -> Result<Coo<V, I>> {
    const WHAT: &str = "power-law generator";
    check_power_law(rows, cols, nnz, alpha)?;
    check_shape::<I>(&[rows, cols])?;
    let (mut crd0, mut crd1) = (with_capacity(nnz, WHAT)?, with_capacity(nnz, WHAT)?);
    let mut rng = seeded(seed);
    let lengths = row_lengths(&mut rng, rows, cols, nnz, alpha)?;
    let mut sampler = Sampler::new();
    let c = cols as u64;
    for (r, &len) in lengths.iter().enumerate() {
        if len == 0 {
            continue;
        }
        let row = I::from_usize(r)?;
        for &j in sampler.sample(&mut rng, len, c as u128, |rng| rng.random_range(0..c), |j| j)? {
            crd0.push(row);
            crd1.push(I::from_usize(j as usize)?);
        }
    }
    matrix(rows, cols, crd0, crd1, &mut rng, WHAT)
}

pub(super) fn check_power_law(rows: usize, cols: usize, nnz: usize, alpha: f64) -> Result<()> {
    if !(alpha.is_finite() && alpha > 0.0) {
        return Err(FormatError::invalid(
            "power-law generator",
            format!("alpha must be a finite positive number, got {alpha}"),
        ));
    }
    check_fits("power-law generator", rows, cols, nnz)
}

/// Power-law row lengths, each at most `cols`, summing to exactly `nnz`.
/// Needs `nnz <= rows * cols`.
/// Takes `O(rows)` memory; fails when that cannot be allocated.
fn row_lengths(rng: &mut impl Rng, rows: usize, cols: usize, nnz: usize, alpha: f64) -> Result<Vec<usize>> {
    // Several arrays of `rows` words follow; five times this one.
    with_capacity::<[usize; 5]>(rows, "power-law generator")?;
    let mut lengths = vec![0usize; rows];
    if nnz == 0 {
        return Ok(lengths);
    }
    let exponent = -1.0 / alpha;
    let weights: Vec<f64> = (0..rows)
        .map(|_| {
            let u = 1.0 - rng.random::<f64>(); // in (0, 1]
            u.powf(exponent).min(MAX_WEIGHT)
        })
        .collect();
    // Heaviest first; `rest[p]` is the weight of rows `order[p..]`.
    let mut order: Vec<usize> = (0..rows).collect();
    order.sort_unstable_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
    let mut rest = vec![0.0; rows + 1];
    for p in (0..rows).rev() {
        rest[p] = rest[p + 1] + weights[order[p]];
    }
    // Water-filling: saturate rows whose share of what is left reaches cols.
    let mut budget = nnz;
    let mut saturated = 0;
    while saturated < rows && weights[order[saturated]] * budget as f64 >= cols as f64 * rest[saturated] {
        lengths[order[saturated]] = cols;
        budget = budget.saturating_sub(cols);
        saturated += 1;
    }
    let scale = if saturated < rows { budget as f64 / rest[saturated] } else { 0.0 };
    let mut fraction = vec![0.0; rows];
    for &r in &order[saturated..] {
        let share = weights[r] * scale;
        lengths[r] = (share.floor() as usize).min(cols);
        fraction[r] = share - share.floor();
    }
    // Largest remainder: the rows that lost most to rounding get one more.
    // Rounding error in floating point may also leave a small surplus.
    let assigned: usize = lengths.iter().sum();
    let mut by_fraction = order;
    by_fraction.sort_by(|&a, &b| fraction[b].total_cmp(&fraction[a]).then(a.cmp(&b)));
    if assigned < nnz {
        let mut deficit = nnz - assigned;
        while deficit > 0 {
            for &r in &by_fraction {
                if deficit > 0 && lengths[r] < cols {
                    lengths[r] += 1;
                    deficit -= 1;
                }
            }
        }
    } else {
        let mut surplus = assigned - nnz;
        while surplus > 0 {
            for &r in by_fraction.iter().rev() {
                if surplus > 0 && lengths[r] > 0 {
                    lengths[r] -= 1;
                    surplus -= 1;
                }
            }
        }
    }
    Ok(lengths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_lengths_are_exact_and_capped() {
        for (rows, cols, nnz, alpha) in [
            (100, 100, 10_000, 2.0),
            (100, 5, 499, 2.0),
            (1000, 1000, 12_345, 0.01),
            (7, 3, 20, 3.5),
            (1, 9, 9, 2.0),
        ] {
            let mut rng = super::super::seeded(5);
            let lengths = row_lengths(&mut rng, rows, cols, nnz, alpha).unwrap();
            assert_eq!(lengths.iter().sum::<usize>(), nnz);
            assert!(lengths.iter().all(|&l| l <= cols));
        }
    }
}
