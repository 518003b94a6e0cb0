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

/// Max |got − want| over the largest finite |want|; infinite when the
/// shapes differ or a value is NaN or infinite where the reference's is
/// not the same (an infinity, or a NaN, that both sides hold agrees: the
/// reference overflows or divides by zero there too).
pub fn max_rel_error(got: &ArrayD<f64>, want: &ArrayD<f64>) -> f64 {
    if got.shape() != want.shape() {
        return f64::INFINITY;
    }
    relative(got.iter().copied().zip(want.iter().copied()), want.iter().copied())
}

/// Max |got − want| over the largest finite |want| between two sparse
/// outputs' entries (as [`max_rel_error`]); infinite when their coordinates
/// differ.
pub fn max_rel_error_entries(got: &Coo<f64, i64>, want: &Coo<f64, i64>) -> f64 {
    if got.shape != want.shape || got.crd != want.crd {
        return f64::INFINITY;
    }
    relative(got.val.iter().copied().zip(want.val.iter().copied()), want.val.iter().copied())
}

/// Max |got − want| over the largest finite |want| between a sparse
/// output's entries and the reference's (as [`max_rel_error`]), where
/// their coordinates may differ: a coordinate one side lacks holds 0
/// there (a reference entry the kernel did not store is an error of its
/// size, a stored entry off the reference's must be 0).
pub fn max_rel_error_union(got: &Coo<f64, i64>, want: &Coo<f64, i64>) -> f64 {
    if got.shape != want.shape {
        return f64::INFINITY;
    }
    let at = |coo: &Coo<f64, i64>, e: usize| -> Vec<i64> { coo.crd.iter().map(|c| c[e]).collect() };
    let mut wanted: std::collections::HashMap<Vec<i64>, f64> =
        (0..want.val.len()).map(|e| (at(want, e), want.val[e])).collect();
    let mut pairs: Vec<(f64, f64)> =
        (0..got.val.len()).map(|e| (got.val[e], wanted.remove(&at(got, e)).unwrap_or(0.0))).collect();
    pairs.extend(wanted.into_values().map(|w| (0.0, w)));
    relative(pairs.into_iter(), want.val.iter().copied())
}

/// The check of a sparse output `got` against the reference's entries
/// `want` ([`max_rel_error_union`]), the reference rounded to `dtype`.
pub fn check_entries(got: &Assembled, want: Coo<f64, i64>, dtype: ElemType, tolerance: f64) -> Result<Check> {
    let want = Coo { val: want.val.iter().map(|w| as_stored(dtype, *w)).collect(), ..want };
    Ok(Check {
        max_rel_error: max_rel_error_union(&entries(got)?, &want),
        tolerance,
        stored: Some(got.nnz()),
    })
}

/// The largest error over `pairs` (got, want), relative to the largest
/// finite `want`.
fn relative(pairs: impl Iterator<Item = (f64, f64)>, want: impl Iterator<Item = f64>) -> f64 {
    let scale = want.filter(|w| w.is_finite()).fold(0.0f64, |m, w| m.max(w.abs())).max(f64::MIN_POSITIVE);
    let error = |(g, w): (f64, f64)| {
        if g == w || (g.is_nan() && w.is_nan()) {
            0.0
        } else if g.is_finite() && w.is_finite() {
            (g - w).abs()
        } else {
            f64::INFINITY
        }
    };
    // `f64::max` alone would skip a NaN; `error` gives none.
    pairs.map(error).fold(0.0f64, f64::max) / scale
}

/// The entries of a sparse output, after checking that its levels keep
/// their promises (positions ascend, coordinates in range, ordered and
/// unique where the format says so).
pub fn entries(assembled: &Assembled) -> Result<Coo<f64, i64>> {
    assembled.to_coo().map_err(|e| Error::input(format!("the sparse output's structure is wrong: {e}")))
}

/// A sparse output as a dense array, where that fits.
pub fn expand(assembled: &Assembled) -> Result<ArrayD<f64>> {
    fits_dense(assembled)?;
    Ok(entries(assembled)?.to_ndarray()?)
}

/// Whether a sparse output fits a dense array ([`expand`]), as an error
/// that says why not (its first line; the next is the CLI's advice):
/// asked before a dense reference is built for it.
pub fn fits_dense(assembled: &Assembled) -> Result<()> {
    if !crate::problem::fits_dense(&assembled.shape) {
        let dims: Vec<String> = assembled.shape.iter().map(usize::to_string).collect();
        return Err(Error::input(format!(
            "the sparse output ({}, {} entries) has more than {MAX_DENSE_ELEMENTS} elements dense, too many \
             to compare with the reference (which is dense)\nrun it without a check, and write it with --out \
             NAME=file.mtx (or .tns)",
            dims.join("x"),
            assembled.nnz()
        )));
    }
    Ok(())
}

/// `x` as a tensor of `dtype` stores it: rounded to it (beyond its range,
/// infinite); index values as they are. Kernels are compared with the
/// reference so (an f16 output's overflow is the dtype's, not the
/// kernel's fault), and `eval` shows and writes its values so.
pub fn as_stored(dtype: ElemType, x: f64) -> f64 {
    match dtype {
        ElemType::Value(d) => d.round(x),
        ElemType::Index(_) => x,
    }
}

/// 1e-3, or 1e-2 when a value tensor is f16 or bf16 (their 11 or 8
/// significant bits round every input).
pub fn tolerance(einsum: &Einsum) -> f64 {
    tolerance_of([einsum])
}

/// [`tolerance`] over several statements (a program's): a 16-bit tensor in
/// any of them rounds what flows into the last.
pub fn tolerance_of<'a>(einsums: impl IntoIterator<Item = &'a Einsum>) -> f64 {
    let half = einsums
        .into_iter()
        .flat_map(|e| e.tensors.values())
        .any(|t| matches!(t.dtype, ElemType::Value(DType::F16) | ElemType::Value(DType::Bf16)));
    if half { 1e-2 } else { 1e-3 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_16_bit_tensor_in_any_statement_widens_the_tolerance() {
        use spindle_ir::lang::{check, einsum::declarations, parse};
        let decls = declarations(&[
            ("U", &[2, 3], "bf16"),
            ("V", &[3, 2], "bf16"),
            ("T", &[2, 2], "f32"),
            ("C", &[2, 2], "f32"),
        ]);
        let first = check(&parse("T[i,j] = U[i,k] * V[k,j]").unwrap(), &decls).unwrap();
        let last = check(&parse("C[i,j] = T[i,j] * T[i,j]").unwrap(), &decls).unwrap();
        assert_eq!(tolerance(&last), 1e-3);
        assert_eq!(tolerance_of([&first, &last]), 1e-2);
    }

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

    /// Infinities and NaNs that both sides hold agree, and do not make the
    /// scale infinite (which read every other error as 0, or inf/inf as
    /// NaN); one on a side alone is an infinite error.
    #[test]
    fn infinities_both_sides_hold_agree() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let want = ArrayD::from_shape_vec(vec![4], vec![inf, -inf, nan, 4.0]).unwrap();
        let same = ArrayD::from_shape_vec(vec![4], vec![inf, -inf, nan, 4.0]).unwrap();
        assert_eq!(max_rel_error(&same, &want), 0.0);
        let off = ArrayD::from_shape_vec(vec![4], vec![inf, -inf, nan, 3.0]).unwrap();
        assert_eq!(max_rel_error(&off, &want), 0.25);
        for bad in
            [[-inf, -inf, nan, 4.0], [inf, 1.0, nan, 4.0], [inf, -inf, 0.0, 4.0], [inf, -inf, nan, inf]]
        {
            let bad = ArrayD::from_shape_vec(vec![4], bad.to_vec()).unwrap();
            assert_eq!(max_rel_error(&bad, &want), inf, "{bad}");
        }
        let entries = |val: Vec<f64>| Coo::new(vec![4], vec![vec![0, 1, 2, 3]], val).unwrap();
        let (got, want) = (entries(vec![inf, -inf, nan, 3.0]), entries(vec![inf, -inf, nan, 4.0]));
        assert_eq!(max_rel_error_entries(&got, &want), 0.25);
    }
}
