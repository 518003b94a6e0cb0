//! Seeded generators of sparse test data.
//!
//! Every generator is deterministic in its seed: the random stream is
//! ChaCha8 seeded with [`rand_chacha::ChaCha8Rng::seed_from_u64`], and every
//! draw is a `u64` range or an `f64`, so the output is the same on every
//! platform. Each returns a *canonical* [`Coo`] (sorted, no duplicate
//! coordinates) whose values are non-zero: magnitudes uniform in
//! `[0.1, 1.0)` with a random sign, converted with [`Value::from_f64`] (so
//! `f16` and `bf16` never round one to zero). Invalid parameters are a
//! [`FormatError::Invalid`], never a panic, and no generator does
//! `rows * cols` work or allocates that much for a sparse output.
//!
//! | generator | models |
//! | --- | --- |
//! | [`uniform`] | `nnz` positions uniformly at random |
//! | [`uniform_tensor`] | the same in a tensor of any shape (a sparse image or activation) |
//! | [`power_law`] | power-law row lengths, like the adjacency of a GNN graph |
//! | [`block_sparse`] | dense blocks on a block grid (Insum's BlockGroupCOO input) |
//! | [`banded`] | a band around the diagonal |
//! | [`voxelize`] | a 3-D occupancy grid from a point cloud |
//!
//! [`GeneratorSpec`] parses the first four from a string such as
//! `powerlaw:rows=100000,cols=100000,nnz=1000000,alpha=2,seed=7`.

pub mod clebsch_gordan;
pub mod kernel_map;
mod random;
mod spec;
mod structured;
mod voxel;

pub use clebsch_gordan::{cg_tensor, real_clebsch_gordan, tensor_product_paths};
pub use kernel_map::{kernel_map, kernel_volume};
pub use random::{DEFAULT_ALPHA, power_law, uniform, uniform_tensor};
pub use spec::{DEFAULT_SEED, GeneratorSpec};
pub use structured::{DEFAULT_BLOCK, banded, block_sparse};
pub use voxel::voxelize;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

/// The random stream of a generator.
fn seeded(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A value with magnitude uniform in `[0.1, 1.0)` and a random sign.
fn random_value<V: Value>(rng: &mut impl Rng) -> V {
    let magnitude: f64 = rng.random_range(0.1..1.0);
    V::from_f64(if rng.random::<bool>() { -magnitude } else { magnitude })
}

/// `n` random non-zero values.
fn random_values<V: Value>(rng: &mut impl Rng, n: usize, what: &str) -> Result<Vec<V>> {
    let mut val = with_capacity(n, what)?;
    val.extend((0..n).map(|_| random_value::<V>(rng)));
    Ok(val)
}

/// A vector with room for `n` items, or an error instead of an abort when
/// `n` is absurd: beyond the limit on one array (a reservation alone
/// passes on Linux, which promises memory it may not have).
fn with_capacity<T>(n: usize, what: &str) -> Result<Vec<T>> {
    crate::check_array::<T>(what, Some(n))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| FormatError::invalid(what, format!("cannot allocate {n} entries")))?;
    Ok(v)
}

/// Fails unless `nnz` distinct positions fit in a `rows x cols` matrix.
fn check_fits(what: &str, rows: usize, cols: usize, nnz: usize) -> Result<()> {
    let cells = rows as u128 * cols as u128;
    if nnz as u128 > cells {
        return Err(FormatError::invalid(
            what,
            format!("nnz {nnz} exceeds rows*cols = {rows}*{cols} = {cells}"),
        ));
    }
    Ok(())
}

/// Fails unless every extent of `shape` fits in the index type, so that
/// every coordinate inside it does too.
fn check_shape<I: Index>(shape: &[usize]) -> Result<()> {
    for &extent in shape {
        I::from_usize(extent)?;
    }
    Ok(())
}

/// Builds a matrix from coordinates already in canonical order.
fn matrix<V: Value, I: Index>(
    rows: usize,
    cols: usize,
    crd0: Vec<I>,
    crd1: Vec<I>,
    rng: &mut impl Rng,
    what: &str,
) -> Result<Coo<V, I>> {
    let val = random_values(rng, crd0.len(), what)?;
    let coo = Coo::new(vec![rows, cols], vec![crd0, crd1], val)?;
    debug_assert!(coo.is_canonical());
    Ok(coo)
}

/// Draws `k`-subsets uniformly at random, reusing its buffers across calls.
///
/// Sparse requests (`k` below a quarter of the population) draw items
/// independently and reject repeats, in rounds: each round draws exactly as
/// many items as are still missing, sorts them and merges the new ones into
/// the picked set. A round can never overshoot, so the result is the first
/// `k` distinct items of an i.i.d. stream: a uniform `k`-subset. Dense
/// requests use selection sampling (Knuth's Algorithm S), one pass over the
/// population, which is then at most `4k` long.
#[derive(Debug)]
struct Sampler<T> {
    picked: Vec<T>,
    batch: Vec<T>,
    merged: Vec<T>,
}

impl<T: Ord + Copy> Sampler<T> {
    fn new() -> Self {
        Sampler { picked: Vec::new(), batch: Vec::new(), merged: Vec::new() }
    }

    /// `k` distinct items, sorted, out of a population of `total` items.
    /// `draw` gives a uniformly random item; `nth(i)` gives item `i` for
    /// `i` in `0..total`, in sorted order. Needs `k <= total`; fails only
    /// when `k` items cannot be allocated.
    fn sample<R: Rng>(
        &mut self,
        rng: &mut R,
        k: usize,
        total: u128,
        mut draw: impl FnMut(&mut R) -> T,
        mut nth: impl FnMut(u64) -> T,
    ) -> Result<&[T]> {
        debug_assert!(k as u128 <= total);
        self.picked.clear();
        if k == 0 {
            return Ok(&self.picked);
        }
        let too_many = |_| FormatError::invalid("generator", format!("cannot allocate {k} positions"));
        self.picked.try_reserve(k).map_err(too_many)?;
        if total <= 4 * k as u128 {
            // Fits in u64: at most four times a length that is in memory.
            let total = total as u64;
            let mut needed = k as u64;
            for i in 0..total {
                if rng.random_range(0..total - i) < needed {
                    self.picked.push(nth(i));
                    needed -= 1;
                    if needed == 0 {
                        break;
                    }
                }
            }
            return Ok(&self.picked);
        }
        self.batch.try_reserve(k).map_err(too_many)?;
        self.merged.try_reserve(k).map_err(too_many)?;
        while self.picked.len() < k {
            let missing = k - self.picked.len();
            self.batch.clear();
            self.batch.extend((0..missing).map(|_| draw(rng)));
            self.batch.sort_unstable();
            self.batch.dedup();
            if self.picked.is_empty() {
                std::mem::swap(&mut self.picked, &mut self.batch);
                continue;
            }
            self.merged.clear();
            let (old, new) = (&self.picked, &self.batch);
            let (mut a, mut b) = (0, 0);
            while a < old.len() && b < new.len() {
                match old[a].cmp(&new[b]) {
                    std::cmp::Ordering::Less => {
                        self.merged.push(old[a]);
                        a += 1;
                    }
                    std::cmp::Ordering::Greater => {
                        self.merged.push(new[b]);
                        b += 1;
                    }
                    std::cmp::Ordering::Equal => {
                        self.merged.push(old[a]);
                        a += 1;
                        b += 1;
                    }
                }
            }
            self.merged.extend_from_slice(&old[a..]);
            self.merged.extend_from_slice(&new[b..]);
            std::mem::swap(&mut self.picked, &mut self.merged);
        }
        Ok(&self.picked)
    }
}

/// `k` distinct cells of a `rows x cols` grid, sorted row-major, uniformly
/// among all `k`-subsets. Needs `k <= rows * cols`.
fn sample_cells(rng: &mut ChaCha8Rng, rows: usize, cols: usize, k: usize) -> Result<Vec<(u64, u64)>> {
    let (r, c) = (rows as u64, cols as u64);
    let mut sampler = Sampler::new();
    sampler.sample(
        rng,
        k,
        rows as u128 * cols as u128,
        |rng| (rng.random_range(0..r), rng.random_range(0..c)),
        |i| (i / c, i % c),
    )?;
    Ok(sampler.picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subset_counts(n: u64, k: usize, trials: u64) -> std::collections::HashMap<Vec<u64>, u64> {
        let mut counts = std::collections::HashMap::new();
        let mut sampler = Sampler::new();
        for seed in 0..trials {
            let mut rng = seeded(seed);
            let s =
                sampler.sample(&mut rng, k, n as u128, |rng| rng.random_range(0..n), |i| i).unwrap().to_vec();
            assert_eq!(s.len(), k);
            assert!(s.windows(2).all(|w| w[0] < w[1]));
            *counts.entry(s).or_insert(0) += 1;
        }
        counts
    }

    /// Both sampling paths hit every subset about equally often.
    #[test]
    fn sampler_is_uniform_over_subsets() {
        for (n, k, subsets) in [(5u64, 2usize, 10usize), (12, 2, 66)] {
            let trials = 20_000;
            let counts = subset_counts(n, k, trials);
            assert_eq!(counts.len(), subsets, "n={n} k={k}");
            let expected = trials as f64 / subsets as f64;
            for (s, &c) in &counts {
                assert!(
                    (c as f64 - expected).abs() < 0.2 * expected,
                    "{s:?} drawn {c} times, expected {expected}"
                );
            }
        }
    }

    #[test]
    fn sampler_takes_everything_when_k_is_total() {
        let mut sampler = Sampler::new();
        let s = sampler.sample(&mut seeded(3), 7, 7, |rng| rng.random_range(0..7u64), |i| i).unwrap();
        assert_eq!(s, &[0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn cells_are_sorted_distinct_and_inside() {
        let cells = sample_cells(&mut seeded(1), 1000, 3, 200).unwrap();
        assert_eq!(cells.len(), 200);
        assert!(cells.windows(2).all(|w| w[0] < w[1]));
        assert!(cells.iter().all(|&(r, c)| r < 1000 && c < 3));
    }

    #[test]
    fn values_are_nonzero_in_every_dtype() {
        let mut rng = seeded(9);
        for _ in 0..10_000 {
            let v: half::bf16 = random_value(&mut rng);
            assert!(v.to_f64().abs() >= 0.09 && v.to_f64().abs() <= 1.0);
            let v: half::f16 = random_value(&mut rng);
            assert!(v.to_f64().abs() >= 0.09 && v.to_f64().abs() <= 1.0);
        }
    }
}
