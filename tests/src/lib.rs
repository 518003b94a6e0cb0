//! `spindle-tests`: cross-crate tests.
//!
//! This crate holds the Einsum corpus (`corpus/*.toml`), one snapshot of
//! emitted code per fixture (`tests/snapshots.rs`), and differential tests
//! across backends (`tests/corpus.rs`). Its library part holds only
//! helpers shared by those tests: [`corpus`] loads the entries and makes
//! their data.

pub mod corpus;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_formats::Coo;

pub use spindle_formats::data::shared_data_dir;

/// A random sparse tensor of `shape` with about `density` of its entries
/// stored, values in ±[0.5, 1.5).
pub fn random_sparse(shape: &[usize], density: f64, seed: u64) -> Coo<f64, i64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let total: usize = shape.iter().product();
    let mut crd = vec![Vec::new(); shape.len()];
    let mut val = Vec::new();
    for flat in 0..total {
        if rng.random::<f64>() < density {
            let mut rest = flat;
            for d in (0..shape.len()).rev() {
                crd[d].push((rest % shape[d]) as i64);
                rest /= shape[d];
            }
            let sign = if rng.random::<bool>() { 1.0 } else { -1.0 };
            val.push(sign * rng.random_range(0.5..1.5));
        }
    }
    Coo::new(shape.to_vec(), crd, val).unwrap()
}
