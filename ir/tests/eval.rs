//! Hand-written cases for the reference evaluator.

use ndarray::{ArrayD, IxDyn, array};
use spindle_ir::eval::evaluate;
use spindle_ir::formats::DType;
use spindle_ir::lang::{Declaration, Declarations, Diagnostic, ElemType, Span, check, parse};
use spindle_ir::tensor::{TensorValue, Tensors};

fn values<D: ndarray::Dimension>(a: ndarray::Array<f64, D>) -> TensorValue {
    TensorValue::Values(a.into_dyn())
}

fn indices<D: ndarray::Dimension>(a: ndarray::Array<i64, D>) -> TensorValue {
    TensorValue::Indices(a.into_dyn())
}

/// Parses and checks `stmt` against the data (plus `shapes` for tensors
/// declared without data, as f64 values), then evaluates it.
fn run(
    stmt: &str,
    data: Vec<(&str, TensorValue)>,
    shapes: &[(&str, &[usize])],
) -> Result<ArrayD<f64>, Diagnostic> {
    let tensors: Tensors = data.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    let mut decls: Declarations = tensors.iter().map(|(n, t)| (n.clone(), t.declaration())).collect();
    for (name, shape) in shapes {
        decls.insert(
            name.to_string(),
            Declaration { shape: shape.to_vec(), dtype: ElemType::Value(DType::F64) },
        );
    }
    let einsum = check(&parse(stmt)?, &decls)?;
    evaluate(&einsum, &tensors)
}

fn ok(stmt: &str, data: Vec<(&str, TensorValue)>, shapes: &[(&str, &[usize])]) -> ArrayD<f64> {
    run(stmt, data, shapes).unwrap_or_else(|d| panic!("{stmt}: {}", d.message))
}

fn err(stmt: &str, data: Vec<(&str, TensorValue)>, shapes: &[(&str, &[usize])]) -> Diagnostic {
    match run(stmt, data, shapes) {
        Ok(out) => panic!("{stmt}: expected an error, got {out}"),
        Err(d) => d,
    }
}

/// The span of the first occurrence of `text` in `stmt`.
fn span_of(stmt: &str, text: &str) -> Span {
    let start = stmt.find(text).unwrap();
    Span::new(start, start + text.len())
}

#[test]
fn dense_spmv() {
    let a = array![[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]];
    let x = array![1.0, 10.0, 100.0];
    let y = ok("y[i] = A[i,k] * x[k]", vec![("A", values(a)), ("x", values(x))], &[("y", &[2])]);
    assert_eq!(y, array![21.0, 300.0].into_dyn());
}

#[test]
fn coo_spmv() {
    // A = [[1, 2, 0], [0, 0, 3]] as COO.
    let data = vec![
        ("AM", indices(array![0, 0, 1])),
        ("AK", indices(array![0, 1, 2])),
        ("AV", values(array![1.0, 2.0, 3.0])),
        ("x", values(array![1.0, 10.0, 100.0])),
    ];
    let y = ok("y[AM[p]] += AV[p] * x[AK[p]]", data, &[("y", &[2])]);
    assert_eq!(y, array![21.0, 300.0].into_dyn());
}

#[test]
fn coo_spmm_sums_duplicate_targets() {
    // Entries (0,1) and (0,1) again, (2,0): duplicates add up.
    let data = vec![
        ("AM", indices(array![0, 2, 0])),
        ("AK", indices(array![1, 0, 1])),
        ("AV", values(array![2.0, 5.0, 3.0])),
        ("B", values(array![[1.0, 2.0], [10.0, 20.0]])),
        ("C", values(array![[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])),
    ];
    let c = ok("C[AM[p],n] += AV[p] * B[AK[p],n]", data, &[]);
    // Row 0: 1 + (2 + 3) * [10, 20]; row 1 untouched; row 2: 1 + 5 * [1, 2].
    assert_eq!(c, array![[51.0, 101.0], [1.0, 1.0], [6.0, 11.0]].into_dyn());
}

#[test]
fn nested_indirect() {
    // O[i] = Σ_{p,q} A[X[p, Y[q]], i]
    let data = vec![
        ("A", values(array![[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])),
        ("X", indices(array![[0, 1, 2], [2, 2, 2]])),
        ("Y", indices(array![2, 0])),
    ];
    let o = ok("O[i] = A[X[p, Y[q]], i]", data, &[("O", &[2])]);
    // (p, q) → X[p, Y[q]]: (0,0)→2, (0,1)→0, (1,0)→2, (1,1)→2.
    assert_eq!(o, array![301.0, 602.0].into_dyn());
}

#[test]
fn affine_conv_reads_zero_outside() {
    let data = vec![("I", values(array![1.0, 2.0, 3.0, 4.0])), ("F", values(array![1.0, 10.0, 100.0]))];
    let o = ok("O[i] += I[i+p-1] * F[p]", data, &[("O", &[4])]);
    // O[i] = I[i-1] + 10 I[i] + 100 I[i+1], with I[-1] = I[4] = 0.
    assert_eq!(o, array![210.0, 321.0, 432.0, 43.0].into_dyn());
}

#[test]
fn affine_2d_with_coefficient() {
    let i: ndarray::Array2<f64> = ndarray::Array::from_shape_fn((3, 5), |(r, c)| (10 * r + c) as f64);
    let data = vec![("I", values(i.clone())), ("F", values(array![[1.0, -1.0]]))];
    // O[r, c] = I[r, 2c+q-1] - ... with q in 0..2: I[r, 2c-1] - I[r, 2c].
    let o = ok("O[r, c] = I[r+p, 2*c+q-1] * F[p, q]", data, &[("O", &[3, 3])]);
    let at = |r: usize, c: i64| if (0..5).contains(&c) { i[[r, c as usize]] } else { 0.0 };
    let want = ndarray::Array::from_shape_fn((3, 3), |(r, c)| at(r, 2 * c as i64 - 1) - at(r, 2 * c as i64));
    assert_eq!(o, want.into_dyn());
}

#[test]
fn segment_max_and_min() {
    let data =
        || vec![("S", indices(array![0, 0, 2, 2, 2])), ("V", values(array![-3.0, -1.0, 4.0, 9.0, 2.0]))];
    // Without output data a reached entry is the max / min of what reaches
    // it (negative values stay negative); an untouched entry is 0.
    let o = ok("O[S[p]] max= V[p]", data(), &[("O", &[4])]);
    assert_eq!(o, array![-1.0, 0.0, 9.0, 0.0].into_dyn());
    let o = ok("O[S[p]] min= V[p]", data(), &[("O", &[4])]);
    assert_eq!(o, array![-3.0, 0.0, 2.0, 0.0].into_dyn());
    // With output data the starting values take part.
    let start = f64::NEG_INFINITY;
    let mut with_out = data();
    with_out.push(("O", values(array![start, start, start, 5.0])));
    let o = ok("O[S[p]] max= V[p]", with_out, &[]);
    assert_eq!(o, array![-1.0, start, 9.0, 5.0].into_dyn());
    let mut with_out = data();
    with_out.push(("O", values(array![f64::INFINITY, 7.0, 3.0, -5.0])));
    let o = ok("O[S[p]] min= V[p]", with_out, &[]);
    assert_eq!(o, array![-3.0, 7.0, 2.0, -5.0].into_dyn());
}

#[test]
fn assign_ignores_output_data_add_assign_accumulates() {
    let data = || vec![("A", values(array![[1.0, 2.0], [3.0, 4.0]])), ("O", values(array![100.0, 200.0]))];
    assert_eq!(ok("O[i] = A[i, j]", data(), &[]), array![3.0, 7.0].into_dyn());
    assert_eq!(ok("O[i] += A[i, j]", data(), &[]), array![103.0, 207.0].into_dyn());
    // += without output data starts at zero.
    let o = ok("O[i] += A[i, j]", vec![("A", values(array![[1.0, 2.0], [3.0, 4.0]]))], &[("O", &[2])]);
    assert_eq!(o, array![3.0, 7.0].into_dyn());
}

#[test]
fn scalar_output_and_expressions() {
    let data = || vec![("V", values(array![1.0, -2.0, 3.0])), ("W", values(array![4.0, 5.0, 6.0]))];
    let s = ok("s = V[i] * W[i]", data(), &[("s", &[])]);
    assert_eq!(s, ArrayD::from_elem(IxDyn(&[]), 12.0));
    let o = ok("O[i] = -(V[i] - 2) * 3 + W[i] / 4", data(), &[("O", &[3])]);
    assert_eq!(o, array![4.0, 13.25, -1.5].into_dyn());
    let o = ok("O[i] = max(relu(V[i]), abs(V[i]) - 1) + min(V[i], 0) + sqrt(W[i])", data(), &[("O", &[3])]);
    let want = array![1.0 + 0.0 + 2.0, 1.0 - 2.0 + 5f64.sqrt(), 3.0 + 0.0 + 6f64.sqrt()];
    assert_eq!(o, want.into_dyn());
    let o = ok("O[i] = exp(V[i]) + sigmoid(W[i])", data(), &[("O", &[3])]);
    let want =
        array![1f64, -2.0, 3.0].mapv(f64::exp) + array![4f64, 5.0, 6.0].mapv(|w| 1.0 / (1.0 + (-w).exp()));
    assert_eq!(o, want.into_dyn());
    // A literal right-hand side over the output's index space.
    assert_eq!(ok("O[i] = 2", vec![], &[("O", &[3])]), array![2.0, 2.0, 2.0].into_dyn());
}

#[test]
fn division_by_zero_is_ieee() {
    let data = vec![("V", values(array![1.0, -1.0, 0.0])), ("W", values(array![0.0, 0.0, 0.0]))];
    let o = ok("O[i] = V[i] / W[i]", data, &[("O", &[3])]);
    assert_eq!(o[[0]], f64::INFINITY);
    assert_eq!(o[[1]], f64::NEG_INFINITY);
    assert!(o[[2]].is_nan());
}

#[test]
fn left_hand_positions_outside_are_dropped() {
    // O[i, j, i+j]: the entry with i + j = 2 falls off the last dimension.
    let a = array![[1.0, 2.0], [3.0, 4.0]];
    let o = ok("O[i, j, i+j] = A[i, j]", vec![("A", values(a))], &[("O", &[2, 2, 2])]);
    let want = array![[[1.0, 0.0], [0.0, 2.0]], [[0.0, 3.0], [0.0, 0.0]]];
    assert_eq!(o, want.into_dyn());
    // An indirect atom inside an affine left-hand subscript follows the same rule.
    let data = vec![("X", indices(array![0, 1, 2])), ("V", values(array![1.0, 2.0, 3.0]))];
    let o = ok("O[X[p]+1] += V[p]", data, &[("O", &[3])]);
    assert_eq!(o, array![0.0, 1.0, 2.0].into_dyn());
}

#[test]
fn indirect_inside_affine_uses_fill() {
    let data = vec![("X", indices(array![0, 2, 1])), ("V", values(array![1.0, 2.0, 3.0]))];
    let o = ok("O[i] = V[X[i] + 1]", data, &[("O", &[3])]);
    assert_eq!(o, array![2.0, 0.0, 3.0].into_dyn());
}

#[test]
fn out_of_range_indirect_is_an_error() {
    let stmt = "C[AM[p,j],n] += AV[p,j] * B[AK[p,j],n]";
    let mut ak = ndarray::Array2::<i64>::zeros((4, 2));
    ak[[3, 1]] = 70;
    let data = vec![
        ("AM", indices(ndarray::Array2::<i64>::zeros((4, 2)))),
        ("AK", indices(ak)),
        ("AV", values(ndarray::Array2::<f64>::ones((4, 2)))),
        ("B", values(ndarray::Array2::<f64>::ones((64, 3)))),
    ];
    let d = err(stmt, data, &[("C", &[8, 3])]);
    assert_eq!(d.message, "AK[3, 1] = 70 is out of range for dimension 0 of B (extent 64)");
    assert_eq!(d.span, span_of(stmt, "AK[p,j]"));
}

#[test]
fn out_of_range_negative_and_on_the_left() {
    let stmt = "O[S[p]] max= V[p]";
    let data = vec![("S", indices(array![0, -1])), ("V", values(array![1.0, 2.0]))];
    let d = err(stmt, data, &[("O", &[4])]);
    assert_eq!(d.message, "S[1] = -1 is out of range for dimension 0 of O (extent 4)");
    assert_eq!(d.span, span_of(stmt, "S[p]"));
    // The extent itself is one past the end.
    let data = vec![("S", indices(array![3, 4])), ("V", values(array![1.0, 2.0]))];
    let d = err(stmt, data, &[("O", &[4])]);
    assert_eq!(d.message, "S[1] = 4 is out of range for dimension 0 of O (extent 4)");
}

#[test]
fn nested_out_of_range_names_the_inner_tensor() {
    let stmt = "O[i] = A[X[p, Y[q]], i]";
    let data = vec![
        ("A", values(ndarray::Array2::<f64>::ones((3, 2)))),
        ("X", indices(ndarray::Array2::<i64>::zeros((2, 3)))),
        ("Y", indices(array![2, 3])),
    ];
    let d = err(stmt, data, &[("O", &[2])]);
    assert_eq!(d.message, "Y[1] = 3 is out of range for dimension 1 of X (extent 3)");
    assert_eq!(d.span, span_of(stmt, "Y[q]"));
}

#[test]
fn index_tensor_read_outside_is_an_error() {
    let stmt = "O[i] = V[X[i+1] + 0*i]";
    let data = vec![("X", indices(array![0, 1, 2])), ("V", values(array![1.0, 2.0, 3.0]))];
    let d = err(stmt, data, &[("O", &[3])]);
    assert_eq!(d.message, "X[3] is outside X (shape [3])");
    assert_eq!(d.span, span_of(stmt, "X[i+1]"));
}

#[test]
fn bad_data_is_a_diagnostic() {
    let stmt = "y[i] = A[i,k] * x[k]";
    let tensors = |x: TensorValue| -> Tensors {
        [("A".to_string(), values(array![[1.0, 2.0], [3.0, 4.0]])), ("x".to_string(), x)].into()
    };
    let decls: Declarations = [
        ("A", Declaration { shape: vec![2, 2], dtype: ElemType::Value(DType::F64) }),
        ("x", Declaration { shape: vec![2], dtype: ElemType::Value(DType::F64) }),
        ("y", Declaration { shape: vec![2], dtype: ElemType::Value(DType::F64) }),
    ]
    .into_iter()
    .map(|(n, d)| (n.to_string(), d))
    .collect();
    let einsum = check(&parse(stmt).unwrap(), &decls).unwrap();
    assert_eq!(evaluate(&einsum, &tensors(values(array![1.0, 1.0]))).unwrap(), array![3.0, 7.0].into_dyn());

    let mut missing = tensors(values(array![1.0, 1.0]));
    missing.remove("x");
    assert_eq!(evaluate(&einsum, &missing).unwrap_err().message, "no data given for tensor x");
    let d = evaluate(&einsum, &tensors(values(array![1.0, 1.0, 1.0]))).unwrap_err();
    assert_eq!(d.message, "data for x has shape [3] but [2] was checked");
    // Integer data read as values reads its integers.
    assert_eq!(evaluate(&einsum, &tensors(indices(array![1, 1]))).unwrap(), array![3.0, 7.0].into_dyn());
    let mut out = tensors(values(array![1.0, 1.0]));
    out.insert("y".into(), indices(array![1, 2]));
    assert_eq!(evaluate(&einsum, &out).unwrap(), array![3.0, 7.0].into_dyn());
    let acc = check(&parse("y[i] += A[i,k] * x[k]").unwrap(), &decls).unwrap();
    assert_eq!(evaluate(&acc, &out).unwrap(), array![4.0, 9.0].into_dyn());
}

#[test]
fn index_spaces_too_large_to_walk_are_refused() {
    let decls: spindle_ir::lang::Declarations = [
        (
            "y".to_string(),
            spindle_ir::lang::Declaration { shape: vec![3], dtype: ElemType::parse("f64").unwrap() },
        ),
        (
            "A".to_string(),
            spindle_ir::lang::Declaration { shape: vec![3], dtype: ElemType::parse("f64").unwrap() },
        ),
    ]
    .into();
    let einsum = check(&parse("y[i] = A[i+p] where p < 4611686018427387904").unwrap(), &decls).unwrap();
    let d = evaluate(&einsum, &Default::default()).unwrap_err();
    assert_eq!(
        d.message,
        "the index space has 13835058055282163712 points (i 3 x p 4611686018427387904), more than the reference evaluator walks"
    );
    // Larger, its subscript `i+p` leaves 64-bit integers: refused by the check.
    let d = check(&parse("y[i] = A[i+p] where p < 18446744073709551615").unwrap(), &decls).unwrap_err();
    assert!(d.message.contains("beyond 64-bit integers"), "{}", d.message);
}

/// The check walks only the indices index tensors are read at (the others
/// at 0), and still reports the first bad read of the whole walk: here `X`
/// fails at j = 2 and `Y` at k = 1, with i before j before k, so the first
/// failing point is (i 0, j 0, k 1), `Y`'s.
#[test]
fn the_first_bad_read_in_walk_order_is_reported() {
    let stmt = "O[i] += A[i,X[j]] * B[Y[k],i]";
    let data = vec![
        ("A", values(ndarray::Array2::<f64>::ones((3, 4)))),
        ("B", values(ndarray::Array2::<f64>::ones((5, 3)))),
        ("X", indices(array![0, 1, 9])),
        ("Y", indices(array![0, 7])),
    ];
    let d = err(stmt, data, &[("O", &[3])]);
    assert_eq!(d.message, "Y[1] = 7 is out of range for dimension 0 of B (extent 5)");
    assert_eq!(d.span, span_of(stmt, "Y[k]"));
    // With Y in range, X's bad value at j = 2 is the first.
    let data = vec![
        ("A", values(ndarray::Array2::<f64>::ones((3, 4)))),
        ("B", values(ndarray::Array2::<f64>::ones((5, 3)))),
        ("X", indices(array![0, 1, 9])),
        ("Y", indices(array![0, 4])),
    ];
    let d = err(stmt, data, &[("O", &[3])]);
    assert_eq!(d.message, "X[2] = 9 is out of range for dimension 1 of A (extent 4)");
}
