//! Comparing a kernel's output with the reference evaluator.

use ndarray::ArrayD;
use serde::Serialize;
use spindle_formats::DType;
use spindle_ir::lang::{Einsum, ElemType};

/// The result of checking an output against the reference evaluator.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Check {
    /// Max |got − want| over max |want|.
    pub max_rel_error: f64,
    /// The largest error accepted for the statement's dtypes.
    pub tolerance: f64,
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
