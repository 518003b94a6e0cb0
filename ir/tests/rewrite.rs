//! The format-conscious rewrite: the printed forms of the paper's
//! statements, every refusal with its message, and a property test that the
//! rewritten statement evaluates to the original with the operand dense.

use std::collections::BTreeMap;

use ndarray::{ArrayD, Dimension, IxDyn};
use proptest::prelude::*;
use spindle_ir::eval::evaluate;
use spindle_ir::formats::{Coo, DType, Dense, FormatSpec, IType};
use spindle_ir::lang::{Declaration, Declarations, Diagnostic, Einsum, ElemType, check, parse};
use spindle_ir::rewrite::{Rewritten, rewrite};
use spindle_ir::tensor::{TensorValue, Tensors};

// ---- helpers ----

/// splitmix64: deterministic data without extra dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Non-zero: ±[0.5, 2).
    fn nonzero(&mut self) -> f64 {
        let v = 0.5 + 1.5 * self.unit();
        if self.next().is_multiple_of(2) { v } else { -v }
    }
    fn dense(&mut self, shape: &[usize]) -> ArrayD<f64> {
        let n = shape.iter().product();
        ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|_| 2.0 * self.unit() - 1.0).collect()).unwrap()
    }
}

/// Random entries, duplicates and empty slices included.
fn random_coo(rng: &mut Rng, shape: &[usize]) -> Coo<f64, i64> {
    let size: usize = shape.iter().product();
    let n = rng.range(0, 2 * size);
    let crd = shape.iter().map(|&d| (0..n).map(|_| rng.range(0, d - 1) as i64).collect()).collect::<Vec<_>>();
    // Draw coordinates entry by entry so every dimension is independent.
    let val = (0..n).map(|_| rng.nonzero()).collect();
    Coo::new(shape.to_vec(), crd, val).unwrap()
}

/// A fixed pattern: entry (i, j, …) is stored when Σ (d+2)·c ≡ 0 mod 3.
fn pattern_coo(shape: &[usize]) -> Coo<f64, i64> {
    let mut crd: Vec<Vec<i64>> = vec![Vec::new(); shape.len()];
    let mut val = Vec::new();
    for at in ndarray::indices(IxDyn(shape)) {
        let at = at.slice();
        let key: usize = at.iter().enumerate().map(|(d, c)| (d + 2) * c).sum();
        if key.is_multiple_of(3) {
            for (d, c) in at.iter().enumerate() {
                crd[d].push(*c as i64);
            }
            val.push(1.0 + key as f64 / 4.0);
        }
    }
    Coo::new(shape.to_vec(), crd, val).unwrap()
}

fn dense_of(coo: &Coo<f64, i64>) -> ArrayD<f64> {
    Dense::from_coo(coo).unwrap().val
}

fn f64_decls(shapes: &[(&str, &[usize])]) -> Declarations {
    shapes
        .iter()
        .map(|(n, s)| (n.to_string(), Declaration { shape: s.to_vec(), dtype: ElemType::Value(DType::F64) }))
        .collect()
}

fn checked(stmt: &str, decls: &Declarations) -> Einsum {
    let st = parse(stmt).unwrap_or_else(|e| panic!("{stmt}: {}", e.message));
    check(&st, decls).unwrap_or_else(|e| panic!("{stmt}: {}", e.message))
}

fn specs(formats: &[(&str, &str)]) -> BTreeMap<String, FormatSpec> {
    formats.iter().map(|(n, f)| (n.to_string(), f.parse().unwrap())).collect()
}

/// `a` and `b` agree within 1e-9 relative.
fn assert_close(a: &ArrayD<f64>, b: &ArrayD<f64>, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}");
    for ((at, x), y) in a.indexed_iter().zip(b.iter()) {
        let scale = x.abs().max(y.abs()).max(1.0);
        assert!((x - y).abs() <= 1e-9 * scale, "{what}: at {at:?} original {x} but rewritten {y}");
    }
}

/// Evaluates the original with the sparse tensors dense and the rewritten
/// statement with their arrays; both must agree.
fn assert_same_result(
    einsum: &Einsum,
    rewritten: &Rewritten,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
    dense: &Tensors,
    context: &str,
) {
    let mut original_data = dense.clone();
    for name in &rewritten.replaced {
        original_data.insert(name.clone(), TensorValue::Values(dense_of(&sparse[name])));
    }
    let context = format!("{context}\nrewritten: {}", rewritten.statement);
    let expected =
        evaluate(einsum, &original_data).unwrap_or_else(|e| panic!("{context}\noriginal: {}", e.message));
    let checked = rewritten.check(einsum).unwrap_or_else(|e| panic!("{context}\n{}", e.message));
    // The printed form parses back to a statement that checks the same way.
    let reparsed = parse(&rewritten.statement.to_string()).unwrap();
    check(&reparsed, &rewritten.all_declarations(einsum)).unwrap();
    let mut data = dense.clone();
    data.extend(rewritten.tensors.clone());
    let got = evaluate(&checked, &data).unwrap_or_else(|e| panic!("{context}\n{}", e.message));
    assert_close(&expected, &got, &context);
}

/// Checks `stmt` over `shapes` (all f64), stores the tensors of `formats`
/// with a fixed pattern, rewrites, compares results, returns the rewrite.
fn rewrite_ok(stmt: &str, shapes: &[(&str, &[usize])], formats: &[(&str, &str)]) -> Rewritten {
    let decls = f64_decls(shapes);
    let einsum = checked(stmt, &decls);
    let sparse: BTreeMap<String, Coo<f64, i64>> =
        formats.iter().map(|(n, _)| (n.to_string(), pattern_coo(&decls[*n].shape))).collect();
    let rewritten = rewrite(&einsum, &specs(formats), &sparse)
        .unwrap_or_else(|e| panic!("{stmt} with {formats:?}: {}", e.message));
    let mut rng = Rng(7);
    let dense: Tensors = shapes
        .iter()
        .filter(|(n, _)| !formats.iter().any(|(f, _)| f == n))
        .map(|(n, s)| (n.to_string(), TensorValue::Values(rng.dense(s))))
        .collect();
    assert_same_result(&einsum, &rewritten, &sparse, &dense, &format!("{stmt} with {formats:?}"));
    rewritten
}

fn printed(stmt: &str, shapes: &[(&str, &[usize])], formats: &[(&str, &str)]) -> String {
    rewrite_ok(stmt, shapes, formats).statement.to_string()
}

const SPMM: &str = "C[m,n] += A[m,k] * B[k,n]";
const SPMM_SHAPES: &[(&str, &[usize])] = &[("C", &[5, 3]), ("A", &[5, 7]), ("B", &[7, 3])];

// ---- printed forms ----

#[test]
fn spmm_in_each_format() {
    let cases = [
        ("coo", "C[A_crd0[p],n] += A_val[p] * B[A_crd1[p],n]"),
        ("csr", "C[A_row[p],n] += A_val[p] * B[A_crd[p],n]"),
        ("ell", "C[m,n] += A_val[m,q] * B[A_crd[m,q],n]"),
        ("groupcoo:dim=0,g=2", "C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]"),
        ("groupcoo:dim=1,g=2", "C[A_crd[p,q],n] += A_val[p,q] * B[A_grp[p],n]"),
        ("groupcoo:dim=0,g=auto", "C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]"),
        (
            "blockgroupcoo:bm=2,bk=3,dim=0,g=2",
            "C[2*A_grp[p]+bi,n] += A_val[p,q,bi,bj] * B[3*A_crd[p,q]+bj,n]",
        ),
        (
            "blockgroupcoo:bm=2,bk=3,dim=1,g=2",
            "C[2*A_crd[p,q]+bi,n] += A_val[p,q,bi,bj] * B[3*A_grp[p]+bj,n]",
        ),
        ("bcsr:bm=2,bk=3", "C[2*A_row[p]+bi,n] += A_val[p,bi,bj] * B[3*A_crd[p]+bj,n]"),
    ];
    for (format, expected) in cases {
        assert_eq!(printed(SPMM, SPMM_SHAPES, &[("A", format)]), expected, "{format}");
    }
}

#[test]
fn block_sparse_spmm_as_in_the_paper() {
    // Insum §6.2: 32×32 blocks grouped along block rows (Figure 6).
    let shapes: &[(&str, &[usize])] = &[("C", &[64, 2]), ("A", &[64, 96]), ("B", &[96, 2])];
    let r = rewrite_ok(SPMM, shapes, &[("A", "blockgroupcoo:bm=32,bk=32,dim=0,g=2")]);
    assert_eq!(r.statement.to_string(), "C[32*A_grp[p]+bi,n] += A_val[p,q,bi,bj] * B[32*A_crd[p,q]+bj,n]");
    let shape = |n: &str| r.declarations[n].shape.clone();
    assert_eq!((shape("A_grp").len(), shape("A_crd")[1]), (1, 2));
    assert_eq!(&shape("A_val")[1..], &[2, 32, 32]);
}

#[test]
fn arrays_have_the_format_shapes_and_dtypes() {
    let decls = f64_decls(SPMM_SHAPES);
    let mut decls = decls;
    decls.get_mut("A").unwrap().dtype = ElemType::Value(DType::F16);
    let einsum = checked(SPMM, &decls);
    // Rows: [0,0,1,1,2] with row 3 empty and a duplicate summed.
    let a = Coo::new(
        vec![5, 7],
        vec![vec![0, 0, 1, 1, 2, 4, 4], vec![1, 4, 0, 6, 3, 2, 2]],
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.5],
    )
    .unwrap();
    let sparse = BTreeMap::from([("A".to_string(), a)]);
    let r = rewrite(&einsum, &specs(&[("A", "groupcoo:dim=0,g=2")]), &sparse).unwrap();
    assert_eq!(r.replaced, vec!["A"]);
    let summary: Vec<(String, Vec<usize>, &str)> =
        r.declarations.iter().map(|(n, d)| (n.clone(), d.shape.clone(), d.dtype.name())).collect();
    assert_eq!(
        summary,
        vec![
            ("A_crd".into(), vec![4, 2], "i32"),
            ("A_grp".into(), vec![4], "i32"),
            ("A_val".into(), vec![4, 2], "f16"),
        ]
    );
    let TensorValue::Indices(grp) = &r.tensors["A_grp"] else { panic!() };
    assert_eq!(grp.as_slice().unwrap(), &[0, 1, 2, 4]);
    let TensorValue::Values(val) = &r.tensors["A_val"] else { panic!() };
    assert_eq!(val.as_slice().unwrap(), &[1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 6.5, 0.0]);
    let TensorValue::Indices(crd) = &r.tensors["A_crd"] else { panic!() };
    // Padding repeats the group's last coordinate.
    assert_eq!(crd.as_slice().unwrap(), &[1, 4, 0, 6, 3, 3, 2, 2]);
}

#[test]
fn wide_coordinates_get_i64_arrays() {
    let big = 3_000_000_000usize;
    let decls = f64_decls(&[("y", &[2]), ("A", &[2, big]), ("x", &[big])]);
    let einsum = checked("y[i] = A[i,j] * x[j]", &decls);
    let a = Coo::new(vec![2, big], vec![vec![1], vec![big as i64 - 1]], vec![2.0]).unwrap();
    let r = rewrite(&einsum, &specs(&[("A", "coo")]), &BTreeMap::from([("A".to_string(), a)])).unwrap();
    assert_eq!(r.statement.to_string(), "y[A_crd0[p]] = A_val[p] * x[A_crd1[p]]");
    assert_eq!(r.declarations["A_crd0"].dtype, ElemType::Index(IType::I32));
    assert_eq!(r.declarations["A_crd1"].dtype, ElemType::Index(IType::I64));
    r.check(&einsum).unwrap();
}

#[test]
fn sddmm_with_a_sparse_mask() {
    let stmt = "C[i,j] = M[i,j] * A[i,k] * B[k,j]";
    let shapes: &[(&str, &[usize])] = &[("C", &[4, 5]), ("M", &[4, 5]), ("A", &[4, 3]), ("B", &[3, 5])];
    let cases = [
        ("coo", "C[M_crd0[p],M_crd1[p]] = M_val[p] * A[M_crd0[p],k] * B[k,M_crd1[p]]"),
        ("csr", "C[M_row[p],M_crd[p]] = M_val[p] * A[M_row[p],k] * B[k,M_crd[p]]"),
        ("ell", "C[i,M_crd[i,q]] = M_val[i,q] * A[i,k] * B[k,M_crd[i,q]]"),
        ("groupcoo:dim=0,g=2", "C[M_grp[p],M_crd[p,q]] = M_val[p,q] * A[M_grp[p],k] * B[k,M_crd[p,q]]"),
        (
            "blockgroupcoo:bm=3,bk=2,dim=1,g=1",
            "C[3*M_crd[p,q]+bi,2*M_grp[p]+bj] = M_val[p,q,bi,bj] * A[3*M_crd[p,q]+bi,k] * B[k,2*M_grp[p]+bj]",
        ),
    ];
    for (format, expected) in cases {
        assert_eq!(printed(stmt, shapes, &[("M", format)]), expected, "{format}");
    }
}

#[test]
fn spmv() {
    let shapes: &[(&str, &[usize])] = &[("y", &[6]), ("A", &[6, 4]), ("x", &[4])];
    assert_eq!(
        printed("y[i] = A[i,j] * x[j]", shapes, &[("A", "csr")]),
        "y[A_row[p]] = A_val[p] * x[A_crd[p]]"
    );
    assert_eq!(printed("y[i] = A[i,j] * x[j]", shapes, &[("A", "ell")]), "y[i] = A_val[i,q] * x[A_crd[i,q]]");
}

#[test]
fn mttkrp() {
    let stmt = "A[i,r] += X[i,j,k] * B[j,r] * C[k,r]";
    let shapes: &[(&str, &[usize])] = &[("A", &[4, 2]), ("X", &[4, 3, 5]), ("B", &[3, 2]), ("C", &[5, 2])];
    assert_eq!(
        printed(stmt, shapes, &[("X", "coo")]),
        "A[X_crd0[p],r] += X_val[p] * B[X_crd1[p],r] * C[X_crd2[p],r]"
    );
    assert_eq!(
        printed(stmt, shapes, &[("X", "groupcoo:dim=0,g=2")]),
        "A[X_grp[p],r] += X_val[p,q] * B[X_crd1[p,q],r] * C[X_crd2[p,q],r]"
    );
    assert_eq!(
        printed(stmt, shapes, &[("X", "groupcoo:dim=1,g=3")]),
        "A[X_crd0[p,q],r] += X_val[p,q] * B[X_grp[p],r] * C[X_crd2[p,q],r]"
    );
}

#[test]
fn point_cloud_convolution_grouped_by_offset() {
    // Insum §6.4: the map grouped by the offset z.
    let stmt = "Out[x,m] += Map[x,y,z] * In[y,c] * W[z,c,m]";
    let shapes: &[(&str, &[usize])] =
        &[("Out", &[5, 2]), ("Map", &[5, 6, 3]), ("In", &[6, 3]), ("W", &[3, 3, 2])];
    assert_eq!(
        printed(stmt, shapes, &[("Map", "coo")]),
        "Out[Map_crd0[p],m] += Map_val[p] * In[Map_crd1[p],c] * W[Map_crd2[p],c,m]"
    );
    assert_eq!(
        printed(stmt, shapes, &[("Map", "groupcoo:dim=2,g=4")]),
        "Out[Map_crd0[p,q],m] += Map_val[p,q] * In[Map_crd1[p,q],c] * W[Map_grp[p],c,m]"
    );
}

#[test]
fn equivariant_tensor_product_grouped_by_l() {
    // Insum §6.5: CG grouped by l.
    let stmt = "Z[b,i,w] += CG[i,j,k,l] * X[b,j,u] * Y[b,k] * W[b,l,u,w]";
    let shapes: &[(&str, &[usize])] =
        &[("Z", &[2, 3, 2]), ("CG", &[3, 3, 2, 4]), ("X", &[2, 3, 2]), ("Y", &[2, 2]), ("W", &[2, 4, 2, 2])];
    assert_eq!(
        printed(stmt, shapes, &[("CG", "coo")]),
        "Z[b,CG_crd0[p],w] += CG_val[p] * X[b,CG_crd1[p],u] * Y[b,CG_crd2[p]] * W[b,CG_crd3[p],u,w]"
    );
    assert_eq!(
        printed(stmt, shapes, &[("CG", "groupcoo:dim=3,g=2")]),
        "Z[b,CG_crd0[p,q],w] += CG_val[p,q] * X[b,CG_crd1[p,q],u] * Y[b,CG_crd2[p,q]] * W[b,CG_grp[p],u,w]"
    );
}

#[test]
fn affine_subscripts_are_substituted_with_their_coefficients() {
    // 1-D convolution with a sparse filter.
    let shapes: &[(&str, &[usize])] = &[("O", &[6]), ("I", &[8]), ("F", &[3])];
    assert_eq!(
        printed("O[i] += I[i+k] * F[k]", shapes, &[("F", "coo")]),
        "O[i] += I[i+F_crd0[p]] * F_val[p]"
    );
    assert_eq!(
        printed("O[i] += I[i+k] * F[k] where k < 3", shapes, &[("F", "groupcoo:dim=0,g=1")]),
        "O[i] += I[i+F_grp[p]] * F_val[p,q]"
    );
    // A coefficient scales the block replacement and its offset; blocks of 2
    // overrun the ragged edge of the 5×3 matrix.
    let shapes: &[(&str, &[usize])] = &[("O", &[5]), ("W", &[5, 3]), ("I", &[5, 11])];
    assert_eq!(
        printed("O[i] += W[i,k] * I[i,3*k+1]", shapes, &[("W", "blockgroupcoo:bm=2,bk=2,dim=0,g=2")]),
        "O[2*W_grp[p]+bi] += W_val[p,q,bi,bj] * I[2*W_grp[p]+bi,6*W_crd[p,q]+3*bj+1]"
    );
    // The index is substituted inside indirect accesses too.
    let decls = {
        let mut d = f64_decls(&[("O", &[4]), ("A", &[4, 3]), ("v", &[5])]);
        d.insert("X".into(), Declaration { shape: vec![3], dtype: ElemType::Index(IType::I32) });
        d
    };
    let einsum = checked("O[i] += A[i,k] * v[X[k]]", &decls);
    let sparse = BTreeMap::from([("A".to_string(), pattern_coo(&[4, 3]))]);
    let r = rewrite(&einsum, &specs(&[("A", "csr")]), &sparse).unwrap();
    assert_eq!(r.statement.to_string(), "O[A_row[p]] += A_val[p] * v[X[A_crd[p]]]");
    let mut dense = Tensors::new();
    dense.insert("v".into(), TensorValue::Values(Rng(3).dense(&[5])));
    dense.insert(
        "X".into(),
        TensorValue::Indices(ArrayD::from_shape_vec(IxDyn(&[3]), vec![4, 0, 2]).unwrap()),
    );
    assert_same_result(&einsum, &r, &sparse, &dense, "indirect");
}

#[test]
fn negation_and_division_by_other_factors_are_products() {
    let shapes: &[(&str, &[usize])] = &[("C", &[5, 3]), ("A", &[5, 7]), ("B", &[7, 3]), ("D", &[3])];
    assert_eq!(
        printed("C[m,n] = -A[m,k] * (B[k,n] + 1) / D[n]", shapes, &[("A", "coo")]),
        "C[A_crd0[p],n] = -A_val[p] * (B[A_crd1[p],n] + 1) / D[n]"
    );
    assert_eq!(
        printed("C[m,n] = 2 * exp(B[k,n]) * A[m,k]", shapes, &[("A", "ell")]),
        "C[m,n] = 2 * exp(B[A_crd[m,q],n]) * A_val[m,q]"
    );
}

#[test]
fn where_clauses_of_replaced_tensors_and_indices_go() {
    let decls = f64_decls(SPMM_SHAPES);
    let einsum = checked("C[m,n] += A[m,k] * B[k,n] where A: bf16, B: f16, k < 7", &decls);
    let sparse = BTreeMap::from([("A".to_string(), pattern_coo(&[5, 7]))]);
    let r = rewrite(&einsum, &specs(&[("A", "coo")]), &sparse).unwrap();
    assert_eq!(r.statement.to_string(), "C[A_crd0[p],n] += A_val[p] * B[A_crd1[p],n] where B: f16");
    assert_eq!(r.declarations["A_val"].dtype, ElemType::Value(DType::Bf16));
    let checked = r.check(&einsum).unwrap();
    assert_eq!(checked.tensors["B"].dtype, ElemType::Value(DType::F16));
}

#[test]
fn new_indices_are_fresh() {
    let shapes: &[(&str, &[usize])] = &[("C", &[5, 3]), ("A", &[5, 7]), ("B", &[7, 3])];
    assert_eq!(
        printed("C[p,n] += A[p,q] * B[q,n]", shapes, &[("A", "groupcoo:dim=0,g=2")]),
        "C[A_grp[p2],n] += A_val[p2,q2] * B[A_crd[p2,q2],n]"
    );
    let shapes: &[(&str, &[usize])] = &[("C", &[5, 3]), ("A", &[5, 7]), ("p", &[7, 3])];
    assert_eq!(
        printed("C[bi,bj] += A[bi,k] * p[k,bj]", shapes, &[("A", "blockgroupcoo:bm=2,bk=2,dim=0,g=1")]),
        "C[2*A_grp[p2]+bi2,bj] += A_val[p2,q,bi2,bj2] * p[2*A_crd[p2,q]+bj2,bj]"
    );
}

#[test]
fn several_sparse_tensors_one_after_another() {
    let stmt = "Y[i,l] += A[i,j] * X[j,k] * B[k,l]";
    let shapes: &[(&str, &[usize])] = &[("Y", &[4, 5]), ("A", &[4, 3]), ("X", &[3, 6]), ("B", &[6, 5])];
    let r = rewrite_ok(stmt, shapes, &[("A", "coo"), ("B", "groupcoo:dim=1,g=2")]);
    assert_eq!(
        r.statement.to_string(),
        "Y[A_crd0[p],B_grp[p2]] += A_val[p] * X[A_crd1[p],B_crd[p2,q]] * B_val[p2,q]"
    );
    assert_eq!(r.replaced, vec!["A", "B"]);
    let names: Vec<&str> = r.declarations.keys().map(String::as_str).collect();
    assert_eq!(names, ["A_crd0", "A_crd1", "A_val", "B_crd", "B_grp", "B_val"]);
    // Rewritten in the order they are read, whatever the map's order.
    let r = rewrite_ok("Y[i,l] += B[k,l] * X[j,k] * A[i,j]", shapes, &[("A", "csr"), ("B", "ell")]);
    assert_eq!(r.statement.to_string(), "Y[A_row[p],B_crd[k,q]] += B_val[k,q] * X[A_crd[p],k] * A_val[p]");
    assert_eq!(r.replaced, vec!["B", "A"]);
}

#[test]
fn no_formats_leave_the_statement_alone() {
    let einsum = checked("C[m] max= A[m,k]", &f64_decls(&[("C", &[2]), ("A", &[2, 3])]));
    let r = rewrite(&einsum, &BTreeMap::new(), &BTreeMap::new()).unwrap();
    assert_eq!(r.statement, einsum.statement);
    assert!(r.tensors.is_empty() && r.declarations.is_empty() && r.replaced.is_empty());
}

#[test]
fn a_scalar_and_a_vector_in_coo_and_groupcoo() {
    let shapes: &[(&str, &[usize])] = &[("y", &[4]), ("s", &[]), ("x", &[4])];
    assert_eq!(printed("y[i] = s * x[i]", shapes, &[("s", "coo")]), "y[i] = s_val[p] * x[i]");
    let shapes: &[(&str, &[usize])] = &[("y", &[]), ("v", &[7]), ("x", &[7])];
    assert_eq!(
        printed("y = v[i] * x[i]", shapes, &[("v", "groupcoo:dim=0,g=2")]),
        "y = v_val[p,q] * x[v_grp[p]]"
    );
}

#[test]
fn empty_tensors_give_empty_arrays() {
    let decls = f64_decls(SPMM_SHAPES);
    let einsum = checked(SPMM, &decls);
    let sparse = BTreeMap::from([("A".to_string(), Coo::empty(vec![5, 7]))]);
    let mut dense = Tensors::new();
    dense.insert("B".into(), TensorValue::Values(Rng(1).dense(&[7, 3])));
    dense.insert("C".into(), TensorValue::Values(Rng(2).dense(&[5, 3])));
    for format in [
        "coo",
        "csr",
        "ell",
        "groupcoo:dim=0,g=auto",
        "groupcoo:dim=1,g=3",
        "blockgroupcoo:bm=2,bk=2,dim=1,g=auto",
    ] {
        let r = rewrite(&einsum, &specs(&[("A", format)]), &sparse).unwrap();
        let TensorValue::Values(val) = &r.tensors["A_val"] else { panic!() };
        assert_eq!(val.len(), 0, "{format}");
        assert_same_result(&einsum, &r, &sparse, &dense, format);
    }
}

// ---- refusals ----

/// The refusal for `stmt` over SpMM-like shapes, and the text under its caret.
fn refusal(
    stmt: &str,
    decls: &Declarations,
    formats: &[(&str, &str)],
    sparse: &BTreeMap<String, Coo<f64, i64>>,
) -> (Diagnostic, String) {
    let einsum = checked(stmt, decls);
    let d = rewrite(&einsum, &specs(formats), sparse).expect_err(stmt);
    let caret = stmt.get(d.span.start..d.span.end).unwrap_or("").to_string();
    // It renders with the statement.
    assert!(d.render(stmt, false).contains(&d.message));
    (d, caret)
}

fn spmm_refusal(stmt: &str, formats: &[(&str, &str)]) -> (Diagnostic, String) {
    let decls = f64_decls(&[("C", &[5, 3]), ("A", &[5, 7]), ("B", &[7, 3]), ("D", &[3]), ("v", &[7])]);
    let sparse = formats.iter().map(|(n, _)| (n.to_string(), pattern_coo(&decls[*n].shape))).collect();
    refusal(stmt, &decls, formats, &sparse)
}

#[test]
fn refuses_max_and_min() {
    let (d, caret) = spmm_refusal("C[m,n] max= A[m,k] * B[k,n]", &[("A", "coo")]);
    assert_eq!(
        d.message,
        "`max=` cannot be rewritten over sparse `A`: the rewrite skips zeros, but a max reduction sees them"
    );
    assert_eq!(caret, "max=");
    let (d, caret) = spmm_refusal("C[m,n] min= A[m,k] * B[k,n]", &[("A", "csr")]);
    assert_eq!(
        d.message,
        "`min=` cannot be rewritten over sparse `A`: the rewrite skips zeros, but a min reduction sees them"
    );
    assert_eq!(caret, "min=");
}

#[test]
fn refuses_a_tensor_that_is_not_a_top_level_factor() {
    let cases = [
        ("C[m,n] += (A[m,k] + 1) * B[k,n]", "a sum", "A[m,k] + 1"),
        ("C[m,n] += B[k,n] - A[m,k] * B[k,n]", "a difference", "B[k,n] - A[m,k] * B[k,n]"),
        ("C[m,n] += exp(A[m,k]) * B[k,n]", "the function `exp`", "exp(A[m,k])"),
        ("C[m,n] += relu(-A[m,k]) * B[k,n]", "the function `relu`", "relu(-A[m,k])"),
        ("C[m,n] += B[k,n] / A[m,k]", "the denominator of a division", "A[m,k]"),
        ("C[m,n] += B[k,n] / (D[n] * A[m,k])", "the denominator of a division", "D[n] * A[m,k]"),
    ];
    for (stmt, what, blocker) in cases {
        let (d, caret) = spmm_refusal(stmt, &[("A", "coo")]);
        assert_eq!(
            d.message,
            format!("`A` is not a factor of the top-level product: it is read inside {what}")
        );
        assert_eq!(caret, "A[m,k]", "{stmt}");
        let (span, label) = &d.secondary[0];
        assert_eq!((&stmt[span.start..span.end], label.as_str()), (blocker, what), "{stmt}");
        assert!(d.notes[0].contains("valid only when a zero of `A` makes the whole contribution zero"));
    }
}

#[test]
fn refuses_a_tensor_read_twice() {
    let (d, caret) = spmm_refusal("C[m,n] += A[m,k] * B[k,n] * A[m,k]", &[("A", "coo")]);
    assert_eq!(d.message, "`A` is read 2 times on the right-hand side; the rewrite needs exactly one read");
    assert_eq!((caret.as_str(), d.span.start), ("A[m,k]", 28));
}

#[test]
fn refuses_repeated_and_non_plain_subscripts() {
    let decls = f64_decls(&[("y", &[5]), ("A", &[5, 5]), ("x", &[5])]);
    let sparse = BTreeMap::from([("A".to_string(), pattern_coo(&[5, 5]))]);
    let (d, caret) = refusal("y[i] = A[i,i] * x[i]", &decls, &[("A", "coo")], &sparse);
    assert_eq!(
        d.message,
        "index `i` appears twice in the subscripts of `A`; the rewrite needs distinct indices"
    );
    assert_eq!((caret.as_str(), d.span.start), ("i", 11));
    let (d, caret) = refusal("y[i] = A[i,j+1] * x[j]", &decls, &[("A", "coo")], &sparse);
    assert_eq!(d.message, "subscript `j+1` of `A` is not a plain index; the rewrite needs `A[i, j, ...]`");
    assert_eq!(caret, "j+1");
    let mut decls = decls;
    decls.insert("X".into(), Declaration { shape: vec![5], dtype: ElemType::Index(IType::I32) });
    let (d, caret) = refusal("y[i] = A[X[i],j] * x[j]", &decls, &[("A", "csr")], &sparse);
    assert_eq!(d.message, "subscript `X[i]` of `A` is not a plain index; the rewrite needs `A[i, j, ...]`");
    assert_eq!(caret, "X[i]");
}

#[test]
fn refuses_unsupported_formats() {
    for format in ["csc", "dcsr", "dcsc", "csf", "dense"] {
        let (d, caret) = spmm_refusal(SPMM, &[("A", format)]);
        assert_eq!(
            d.message,
            format!(
                "`A` cannot be rewritten in {format}: the rewrite supports coo, csr, ell, groupcoo, blockgroupcoo and bcsr"
            )
        );
        assert_eq!(caret, "A[m,k]");
    }
    let note = |format: &str| spmm_refusal(SPMM, &[("A", format)]).0.notes.join("\n");
    assert!(note("csc").ends_with("to group by columns, use groupcoo:dim=1"));
    assert_eq!(note("dense"), "a dense tensor needs no rewrite: leave `A` out of the formats");
}

#[test]
fn refuses_matrix_formats_on_other_orders_and_bad_dims() {
    let decls = f64_decls(&[("A", &[4, 2]), ("X", &[4, 3, 5]), ("B", &[3, 2]), ("C", &[5, 2])]);
    let sparse = BTreeMap::from([("X".to_string(), pattern_coo(&[4, 3, 5]))]);
    let stmt = "A[i,r] += X[i,j,k] * B[j,r] * C[k,r]";
    for format in ["csr", "ell", "blockgroupcoo:bm=2,bk=2,dim=0,g=1"] {
        let (d, caret) = refusal(stmt, &decls, &[("X", format)], &sparse);
        let name = format.split(':').next().unwrap();
        assert_eq!(d.message, format!("{name} needs a matrix, but `X` has order 3"));
        assert_eq!(caret, "X[i,j,k]");
    }
    let (d, _) = refusal(stmt, &decls, &[("X", "groupcoo:dim=3,g=2")], &sparse);
    assert_eq!(d.message, "`X` cannot be grouped along dimension 3: it has order 3");
    let (d, _) = spmm_refusal(SPMM, &[("A", "blockgroupcoo:bm=2,bk=2,dim=2,g=1")]);
    assert_eq!(d.message, "`A` cannot be grouped along dimension 2: it has order 2");
}

#[test]
fn refuses_tensors_the_statement_does_not_read() {
    let (d, caret) = spmm_refusal(SPMM, &[("D", "coo")]);
    assert_eq!(d.message, "`D` is given a format (coo) but the statement does not use it");
    assert_eq!(caret, SPMM);
    assert_eq!(d.notes, vec!["tensors in the statement: A, B, C"]);
    let (d, caret) = spmm_refusal(SPMM, &[("C", "coo")]);
    assert_eq!(d.message, "`C` is the output; the rewrite stores operands sparse, not outputs");
    assert_eq!(caret, "C[m,n]");
    let mut decls = f64_decls(&[("C", &[5]), ("v", &[4])]);
    decls.insert("X".into(), Declaration { shape: vec![4], dtype: ElemType::Index(IType::I32) });
    let sparse = BTreeMap::from([("X".to_string(), pattern_coo(&[4]))]);
    let (d, caret) = refusal("C[X[i]] += v[i]", &decls, &[("X", "coo")], &sparse);
    assert_eq!(d.message, "`X` is an index tensor; only value operands can be stored in a sparse format");
    assert_eq!(caret, "C[X[i]]");
}

#[test]
fn refuses_missing_or_mismatched_data() {
    let decls = f64_decls(SPMM_SHAPES);
    let (d, caret) = refusal(SPMM, &decls, &[("A", "groupcoo:dim=0,g=4")], &BTreeMap::new());
    assert_eq!(d.message, "no sparse data given for `A` (stored as groupcoo:dim=0,g=4)");
    assert_eq!(caret, "A[m,k]");
    let sparse = BTreeMap::from([("A".to_string(), pattern_coo(&[7, 5]))]);
    let (d, _) = refusal(SPMM, &decls, &[("A", "coo")], &sparse);
    assert_eq!(d.message, "the sparse data for `A` have shape 7x5 but the statement has 5x7");
    let bad = Coo { shape: vec![5, 7], crd: vec![vec![0, 9], vec![1, 1]], val: vec![1.0, 2.0] };
    let (d, _) = refusal(SPMM, &decls, &[("A", "coo")], &BTreeMap::from([("A".to_string(), bad)]));
    assert_eq!(
        d.message,
        "the sparse data for `A` are invalid: coordinate [9, 1] is outside the shape [5, 7]"
    );
}

#[test]
fn refuses_sparse_tensors_that_share_an_index() {
    let (d, caret) = spmm_refusal("C[m,n] += A[m,k] * B[k,n]", &[("A", "coo"), ("B", "csr")]);
    assert_eq!(
        d.message,
        "`B` shares the index `k` with `A`, also stored in a format: the tile path's rewrite walks one stored \
         operand's entries per index"
    );
    assert_eq!((caret.as_str(), d.span.start), ("k", 21));
}

#[test]
fn refuses_ragged_blocks_under_an_index_tensor() {
    let mut decls = f64_decls(&[("C", &[4]), ("A", &[4, 5]), ("v", &[9])]);
    decls.insert("X".into(), Declaration { shape: vec![5], dtype: ElemType::Index(IType::I32) });
    let sparse = BTreeMap::from([("A".to_string(), pattern_coo(&[4, 5]))]);
    let (d, caret) =
        refusal("C[m] += A[m,k] * v[X[k]]", &decls, &[("A", "blockgroupcoo:bm=2,bk=2,dim=0,g=1")], &sparse);
    assert_eq!(
        d.message,
        "`k` is used inside the index tensor `X`, whose reads must stay in bounds, but blocks of 2 overrun \
         its extent 5 at the ragged edge of `A`"
    );
    assert_eq!(caret, "X[k]");
    // Blocks that divide the extent are fine.
    let einsum = checked("C[m] += A[m,k] * v[X[k]]", &decls);
    let r = rewrite(&einsum, &specs(&[("A", "blockgroupcoo:bm=3,bk=5,dim=0,g=1")]), &sparse).unwrap();
    assert_eq!(r.statement.to_string(), "C[3*A_grp[p]+bi] += A_val[p,q,bi,bj] * v[X[5*A_crd[p,q]+bj]]");
}

/// An array whose name the statement has takes a numbered one (it was
/// refused; the level path it fell back to read the user's `A_val` as A's
/// values).
#[test]
fn array_names_the_statement_has_are_numbered() {
    let decls = f64_decls(&[("C", &[5, 3]), ("A", &[5, 7]), ("A_val", &[7, 3]), ("A_val_2", &[7, 3])]);
    let sparse = BTreeMap::from([("A".to_string(), pattern_coo(&[5, 7]))]);
    let einsum = checked("C[m,n] += A[m,k] * A_val[k,n] * A_val_2[k,n]", &decls);
    let r = rewrite(&einsum, &specs(&[("A", "coo")]), &sparse).unwrap();
    assert_eq!(
        r.statement.to_string(),
        "C[A_crd0[p],n] += A_val_3[p] * A_val[A_crd1[p],n] * A_val_2[A_crd1[p],n]"
    );
}

// ---- the property: rewritten statements evaluate to the original ----

/// A random supported format for a tensor of `shape`.
fn random_format(rng: &mut Rng, shape: &[usize]) -> String {
    let order = shape.len();
    let g = |rng: &mut Rng| match rng.range(0, 4) {
        0 => "1".to_string(),
        1 => "auto".to_string(),
        2 => "40".to_string(), // above any occupancy here
        _ => rng.range(1, 5).to_string(),
    };
    let kinds = if order == 2 { 6 } else { 2 };
    match rng.range(0, kinds - 1) {
        0 => "coo".into(),
        1 => format!("groupcoo:dim={},g={}", rng.range(0, order - 1), g(rng)),
        2 => "csr".into(),
        3 => "ell".into(),
        4 => format!("bcsr:bm={},bk={}", rng.range(1, 3), rng.range(1, 3)),
        _ => format!(
            "blockgroupcoo:bm={},bk={},dim={},g={}",
            rng.range(1, 3),
            rng.range(1, 3),
            rng.range(0, 1),
            g(rng)
        ),
    }
}

/// (statement, its sparse tensors); every other tensor, the output
/// included (a starting value for `+=`), gets random dense data.
const FAMILIES: &[(&str, &[&str])] = &[
    ("C[m,n] += A[m,k] * B[k,n]", &["A"]),
    ("y[i] = A[i,j] * x[j]", &["A"]),
    ("C[i,j] = M[i,j] * A[i,k] * B[k,j]", &["M"]),
    ("A[i,r] += X[i,j,k] * B[j,r] * C[k,r]", &["X"]),
    ("Out[x,m] += Map[x,y,z] * In[y,c] * W[z,c,m]", &["Map"]),
    ("Y[i,l] += A[i,j] * X[j,k] * B[k,l]", &["A", "B"]),
    ("C[k,n] += B[m,n] * A[m,k]", &["A"]),
    ("O[i,j] += W[k,l] * I[2*i+k,j-l+1]", &["W"]),
    ("O[i] += I[3*i+k-1] * F[k]", &["F"]),
    ("C[m,n] = -A[m,k] * B[k,n] / (D[n] + 3)", &["A"]),
];

fn property_case(family: usize, seed: u64) {
    let (stmt, sparse_names) = FAMILIES[family];
    let mut rng = Rng(seed);
    let st = parse(stmt).unwrap();
    // One extent per index, 1..=6, then each tensor's shape from them.
    let mut extents: BTreeMap<String, usize> = BTreeMap::new();
    let mut shapes: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for a in std::iter::once(&st.lhs).chain(st.rhs.accesses()) {
        let shape = a
            .subscripts
            .iter()
            .map(|s| match s.as_index() {
                Some(index) => *extents.entry(index.name.clone()).or_insert_with(|| rng.range(1, 6)),
                // An affine subscript: any extent, so reads overrun or fall short.
                None => rng.range(1, 12),
            })
            .collect();
        shapes.insert(a.tensor.name.clone(), shape);
    }
    let decls: Declarations = shapes
        .iter()
        .map(|(n, s)| (n.clone(), Declaration { shape: s.clone(), dtype: ElemType::Value(DType::F64) }))
        .collect();
    let einsum = check(&st, &decls).unwrap();
    let sparse: BTreeMap<String, Coo<f64, i64>> =
        sparse_names.iter().map(|n| (n.to_string(), random_coo(&mut rng, &shapes[*n]))).collect();
    let formats: Vec<(&str, String)> =
        sparse_names.iter().map(|n| (*n, random_format(&mut rng, &shapes[*n]))).collect();
    let formats_ref: Vec<(&str, &str)> = formats.iter().map(|(n, f)| (*n, f.as_str())).collect();
    let dense: Tensors = shapes
        .iter()
        .filter(|(n, _)| !sparse_names.contains(&n.as_str()))
        .map(|(n, s)| (n.clone(), TensorValue::Values(rng.dense(s))))
        .collect();
    let context = format!("{stmt} with {formats:?}, extents {extents:?}, data {sparse:?}");
    let rewritten = rewrite(&einsum, &specs(&formats_ref), &sparse)
        .unwrap_or_else(|e| panic!("{context}: {}", e.message));
    assert_same_result(&einsum, &rewritten, &sparse, &dense, &context);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rewritten_statements_evaluate_to_the_original(family in 0..FAMILIES.len(), seed in any::<u64>()) {
        property_case(family, seed);
    }
}

/// Every family with many seeds, so each format and parameter is reached
/// whatever proptest draws.
#[test]
fn every_family_and_format_agrees() {
    for family in 0..FAMILIES.len() {
        for seed in 0..40 {
            property_case(family, seed * 7919 + family as u64);
        }
    }
}

#[test]
fn refuses_ragged_blocks_under_a_division() {
    use spindle_ir::lang::{Declaration, ElemType, check, parse};
    let decl =
        |shape: &[usize]| Declaration { shape: shape.to_vec(), dtype: ElemType::parse("f64").unwrap() };
    let declarations =
        [("c".to_string(), decl(&[5])), ("A".to_string(), decl(&[5, 5])), ("B".to_string(), decl(&[5]))]
            .into();
    let src = "c[m] += A[m,k] / B[k]";
    let einsum = check(&parse(src).unwrap(), &declarations).unwrap();
    let a = spindle_formats::Coo::<f64, i64>::from_triplets(5, 5, &[(0, 0, 1.0), (4, 4, 2.0)]).unwrap();
    let formats = [("A".to_string(), "blockgroupcoo:bm=2,bk=2,dim=0,g=1".parse().unwrap())].into();
    let err =
        spindle_ir::rewrite::rewrite(&einsum, &formats, &[("A".to_string(), a.clone())].into()).unwrap_err();
    assert!(
        err.message.starts_with("blocks of 2 overrun the extent 5 of `A` (a ragged edge)"),
        "{}",
        err.message
    );
    assert_eq!(&src[err.span.start..err.span.end], "A[m,k] / B[k]");
    // A block size that divides the extents is fine.
    let formats = [("A".to_string(), "blockgroupcoo:bm=5,bk=5,dim=0,g=1".parse().unwrap())].into();
    assert!(spindle_ir::rewrite::rewrite(&einsum, &formats, &[("A".to_string(), a)].into()).is_ok());
}
