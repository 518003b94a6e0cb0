//! Comparing a kernel's output with the reference evaluator.

use ndarray::ArrayD;
use serde::Serialize;
use spindle_formats::{Assembled, Coo, DType};
use spindle_ir::lang::{Einsum, ElemType};

use crate::error::{Error, Result};
use crate::problem::MAX_DENSE_ELEMENTS;

/// The result of checking an output against the reference evaluator.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Check {
    /// Max |got − want| over max |want|.
    pub max_rel_error: f64,
    /// The largest error accepted for the statement's dtypes.
    pub tolerance: f64,
    /// Entries a sparse output stored (its structure was checked level by
    /// level); `None` for a dense output.
    pub stored: Option<usize>,
}

impl Check {
    pub fn passed(&self) -> bool {
        self.max_rel_error <= self.tolerance
    }
}

/// Max |got − want| over max |want|; infinite when the shapes differ or a
/// value is NaN or infinite where the reference is finite.
pub fn max_rel_error(got: &ArrayD<f64>, want: &ArrayD<f64>) -> f64 {
    if got.shape() != want.shape() {
        return f64::INFINITY;
    }
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(f64::MIN_POSITIVE);
    // `f64::max` alone would skip a NaN.
    let diff = |g: f64, w: f64| if g.is_finite() || !w.is_finite() { (g - w).abs() } else { f64::INFINITY };
    got.iter().zip(want.iter()).fold(0.0f64, |m, (g, w)| m.max(diff(*g, *w))) / scale
}

/// Max |got − want| over max |want| between two sparse outputs' entries;
/// infinite when their coordinates differ.
pub fn max_rel_error_entries(got: &Coo<f64, i64>, want: &Coo<f64, i64>) -> f64 {
    if got.shape != want.shape || got.crd != want.crd {
        return f64::INFINITY;
    }
    let scale = want.val.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(f64::MIN_POSITIVE);
    let diff = |g: f64, w: f64| if g.is_finite() || !w.is_finite() { (g - w).abs() } else { f64::INFINITY };
    got.val.iter().zip(&want.val).fold(0.0f64, |m, (g, w)| m.max(diff(*g, *w))) / scale
}

/// The entries of a sparse output, after checking that its levels keep
/// their promises (positions ascend, coordinates in range, ordered and
/// unique where the format says so).
pub fn entries(assembled: &Assembled) -> Result<Coo<f64, i64>> {
    assembled.to_coo().map_err(|e| Error::input(format!("the sparse output's structure is wrong: {e}")))
}

/// A sparse output as a dense array, where that fits.
pub fn expand(assembled: &Assembled) -> Result<ArrayD<f64>> {
    let elements = assembled.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if elements.is_none_or(|n| n > MAX_DENSE_ELEMENTS) {
        let dims: Vec<String> = assembled.shape.iter().map(usize::to_string).collect();
        return Err(Error::input(format!(
            "the sparse output ({}, {} entries) has more than {MAX_DENSE_ELEMENTS} elements dense: \
             write it with --out NAME=file.mtx (or .tns) instead",
            dims.join("x"),
            assembled.nnz()
        )));
    }
    Ok(entries(assembled)?.to_ndarray()?)
}

/// 1e-3, or 1e-2 when a value tensor is f16 or bf16 (their 11 or 8
/// significant bits round every input).
pub fn tolerance(einsum: &Einsum) -> f64 {
    let half = einsum
        .tensors
        .values()
        .any(|t| matches!(t.dtype, ElemType::Value(DType::F16) | ElemType::Value(DType::Bf16)));
    if half { 1e-2 } else { 1e-3 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_relative_and_nan_is_infinite() {
        let want = ArrayD::from_shape_vec(vec![2], vec![2.0, -4.0]).unwrap();
        let got = ArrayD::from_shape_vec(vec![2], vec![2.0, -3.0]).unwrap();
        assert_eq!(max_rel_error(&got, &want), 0.25);
        let nan = ArrayD::from_shape_vec(vec![2], vec![f64::NAN, -4.0]).unwrap();
        assert_eq!(max_rel_error(&nan, &want), f64::INFINITY);
        let short = ArrayD::from_shape_vec(vec![1], vec![2.0]).unwrap();
        assert_eq!(max_rel_error(&short, &want), f64::INFINITY);
    }
}
