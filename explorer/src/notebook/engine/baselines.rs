//! The baselines a statement is timed against when it is an SpMM: sprs and
//! faer on the CPU, cuSPARSE on the GPU.

use std::collections::BTreeSet;

use ndarray::ArrayD;
use spindle_formats::{Coo, DType};
use spindle_ir::lang::{AssignOp, BinOp, Einsum, ElemType, Expr};
use spindle_ir::tensor::TensorValue;

use crate::notebook::output::Baseline;

use super::*;

impl Run<'_> {
    pub(super) fn baselines(
        &mut self,
        prepared: &Prepared,
        data: &Data,
        threads: usize,
        repeats: usize,
    ) -> Step<()> {
        self.step("baselines")?;
        let Some(shape) = &prepared.spmm else { return Ok(()) };
        let (Some(coo), Some(TensorValue::Values(b))) =
            (data.sparse.get(&shape.sparse), data.dense.get(&shape.dense))
        else {
            return Ok(());
        };
        match spmm_baselines(coo, b, threads, repeats) {
            Ok(found) => {
                for (name, ms) in found {
                    if !self.out.sweep.baselines.iter().any(|b| b.name == name) {
                        self.out.sweep.baselines.push(Baseline { name, backend: "c".into(), median_ms: ms });
                    }
                }
            }
            Err(e) => self.out.notes.push(format!("baselines skipped: {e:#}")),
        }
        if let Some(gpu) = gpu() {
            let half = matches!(
                data.declarations.get(&shape.dense).map(|d| d.dtype),
                Some(ElemType::Value(DType::F16 | DType::Bf16))
            );
            match cusparse_baseline(gpu.gpu(), coo, b, half, repeats) {
                Ok(ms) => {
                    let name = "cuSPARSE CSR".to_string();
                    if !self.out.sweep.baselines.iter().any(|b| b.name == name) {
                        self.out.sweep.baselines.push(Baseline {
                            name,
                            backend: "cuda".into(),
                            median_ms: ms,
                        });
                    }
                }
                Err(e) => self.out.notes.push(format!("cuSPARSE baseline skipped: {e:#}")),
            }
        }
        Ok(())
    }
}

/// The sprs and faer times of A·B (f32, A in CSR or CSC), in ms.
pub(super) fn spmm_baselines(
    coo: &Coo<f64, i64>,
    b: &ArrayD<f64>,
    threads: usize,
    repeats: usize,
) -> anyhow::Result<Vec<(String, f64)>> {
    use crate::bench::spmm::{faer_baselines, time_reset};
    let coo = coo.cast::<f32, i32>()?.canonicalize();
    let (m, _) = coo.expect_matrix("spmm")?;
    let b = b.mapv(|x| x as f32).into_dimensionality::<ndarray::Ix2>()?;
    let csr = spindle_formats::Compressed::from_coo(&coo, 0)?;
    let a = csr.to_sprs()?;
    let mut want = ndarray::Array2::<f32>::zeros((m, b.ncols()));
    sprs::prod::csr_mulacc_dense_rowmaj(a.view(), b.view(), want.view_mut());
    let want_flat: Vec<f32> = want.iter().copied().collect();
    let mut c = ndarray::Array2::<f32>::zeros((m, b.ncols()));
    let t_sprs = time_reset(
        repeats,
        &mut c,
        |c| c.fill(0.0),
        |c| sprs::prod::csr_mulacc_dense_rowmaj(a.view(), b.view(), c.view_mut()),
    );
    let faer = faer_baselines(&coo, &b, &want_flat, threads, repeats)?;
    Ok(vec![
        ("sprs CSR (1 thread)".into(), t_sprs * 1e3),
        ("faer CSR".into(), faer.csr_1 * 1e3),
        ("faer CSC".into(), faer.csc_1 * 1e3),
    ])
}

/// cuSPARSE SpMM on CSR (f32, or f16 when B is half), in ms.
pub(super) fn cusparse_baseline(
    gpu: &spindle_cuda::runtime::Gpu,
    coo: &Coo<f64, i64>,
    b: &ArrayD<f64>,
    half: bool,
    repeats: usize,
) -> anyhow::Result<f64> {
    use spindle_cuda::baseline::{CsrHost, Precision, cusparse_spmm_csr};
    let coo = coo.clone().canonicalize();
    let (rows, cols) = coo.expect_matrix("spmm")?;
    let csr = spindle_formats::Compressed::from_coo(&coo, 0)?;
    let a = CsrHost {
        rows,
        cols,
        indptr: csr.pos.iter().map(|&x| i32::try_from(x)).collect::<Result<_, _>>()?,
        indices: csr.crd.iter().map(|&x| i32::try_from(x)).collect::<Result<_, _>>()?,
        values: csr.val.clone(),
    };
    let n = b.shape().get(1).copied().unwrap_or(1);
    let dense: Vec<f64> = b.iter().copied().collect();
    let precision = if half { Precision::F16 } else { Precision::F32 };
    let run = cusparse_spmm_csr(
        gpu,
        &a,
        &dense,
        n,
        precision,
        spindle_cuda::runtime::TimingOptions { warmup: 1, repeats },
    )?;
    Ok(run.timing.median_ms)
}

/// Recognises `O[i,j] (+)= A[i,k] * B[k,j]` (either factor first) with A
/// sparse and B dense values.
pub(super) fn spmm_shape(e: &Einsum, data: &Data, formatted: &BTreeSet<String>) -> Option<SpmmShape> {
    let st = &e.statement;
    if !matches!(st.op, AssignOp::Assign | AssignOp::AddAssign) || !st.wheres.is_empty() {
        return None;
    }
    let plain = |a: &spindle_ir::lang::Access| -> Option<Vec<String>> {
        a.subscripts.iter().map(|s| s.as_index().map(|i| i.name.clone())).collect()
    };
    let lhs = plain(&st.lhs)?;
    let Expr::Binary { op: BinOp::Mul, lhs: x, rhs: y, .. } = &st.rhs else { return None };
    let (Expr::Access(x), Expr::Access(y)) = (x.as_ref(), y.as_ref()) else { return None };
    let (xs, ys) = (plain(x)?, plain(y)?);
    if lhs.len() != 2 || xs.len() != 2 || ys.len() != 2 {
        return None;
    }
    let is_sparse = |n: &str| data.sparse.contains_key(n) && formatted.contains(n);
    let is_dense =
        |n: &str| matches!(data.dense.get(n), Some(TensorValue::Values(_))) && !formatted.contains(n);
    let (a, ai, b, bi, dense_first) = if is_sparse(&x.tensor.name) {
        (&x.tensor.name, &xs, &y.tensor.name, &ys, false)
    } else {
        (&y.tensor.name, &ys, &x.tensor.name, &xs, true)
    };
    let (i, j) = (&lhs[0], &lhs[1]);
    let shaped = ai[0] == *i && bi[1] == *j && ai[1] == bi[0] && ai[1] != *i && ai[1] != *j && i != j;
    (shaped && is_sparse(a) && is_dense(b)).then(|| SpmmShape {
        sparse: a.clone(),
        dense: b.clone(),
        _dense_first: dense_first,
    })
}

#[cfg(test)]
mod tests {
    use ndarray::ArrayD;
    use spindle_ir::lang::{Declaration, Declarations, check, parse};
    use spindle_ir::tensor::TensorValue;

    use super::*;

    #[test]
    fn spmm_shapes_are_recognised() {
        let mut data = Data::default();
        data.sparse.insert("A".into(), spindle_formats::generate::uniform(4, 5, 6, 1).unwrap());
        data.dense.insert("B".into(), TensorValue::Values(ArrayD::zeros(vec![5, 3])));
        let decls: Declarations = [("A", vec![4, 5]), ("B", vec![5, 3]), ("C", vec![4, 3])]
            .into_iter()
            .map(|(n, s)| (n.to_string(), Declaration { shape: s, dtype: ElemType::Value(DType::F32) }))
            .collect();
        let formatted = BTreeSet::from(["A".to_string()]);
        let shape = |s: &str| spmm_shape(&check(&parse(s).unwrap(), &decls).unwrap(), &data, &formatted);
        assert_eq!(shape("C[m,n] += A[m,k] * B[k,n]").unwrap().sparse, "A");
        assert_eq!(shape("C[m,n] = B[k,n] * A[m,k]").unwrap().dense, "B");
        assert_eq!(shape("C[m,n] += A[m,k] * B[k,n] * 2"), None);
        assert_eq!(shape("C[m,n] max= A[m,k] * B[k,n]"), None);
    }
}
