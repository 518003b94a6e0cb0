//! The level path on the C backend: every statement is lowered to a loop
//! tree over its stored operands' levels, printed as C, compiled, run on
//! random non-zero data on one and two threads, and compared with the
//! reference evaluator on the dense operands. Refusals carry a location and
//! a reason.

use std::collections::BTreeMap;

use ndarray::ArrayD;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_c::Compiler;
use spindle_c::level::CLevelKernel;
use spindle_formats::{Coo, FormatSpec};
use spindle_ir::kernel::schedule::Schedule;
use spindle_ir::lang::einsum::declarations;
use spindle_ir::lang::{Einsum, check, parse};
use spindle_ir::level::lower;
use spindle_ir::tensor::{TensorValue, Tensors};
use spindle_tests::random_sparse as sparse;

fn dense(shape: &[usize], seed: u64) -> ArrayD<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    ArrayD::from_shape_fn(shape.to_vec(), |_| rng.random_range(-1.0..1.0))
}

#[derive(Clone)]
struct Case {
    statement: &'static str,
    /// (name, shape, density): density 1 is a dense operand without a
    /// format; below 1 the tensor is stored in `formats`.
    tensors: Vec<(&'static str, Vec<usize>, f64)>,
    formats: Vec<(&'static str, &'static str)>,
    schedule: &'static str,
}

fn case(
    statement: &'static str,
    tensors: &[(&'static str, &[usize], f64)],
    formats: &[(&'static str, &'static str)],
) -> Case {
    Case {
        statement,
        tensors: tensors.iter().map(|(n, s, d)| (*n, s.to_vec(), *d)).collect(),
        formats: formats.to_vec(),
        schedule: "",
    }
}

/// A case made concrete: the checked statement, its dense data (for the
/// reference), the stored operands' entries and their formats.
type Prepared = (Einsum, Tensors, BTreeMap<String, Coo<f64, i64>>, BTreeMap<String, FormatSpec>);

fn prepare(c: &Case) -> Prepared {
    let decls: Vec<(&str, &[usize], &str)> = c.tensors.iter().map(|(n, s, _)| (*n, &s[..], "f64")).collect();
    let einsum =
        check(&parse(c.statement).unwrap(), &declarations(&decls)).unwrap_or_else(|d| panic!("{d:?}"));
    let mut data = Tensors::new();
    let mut entries = BTreeMap::new();
    for (seed, (name, shape, density)) in c.tensors.iter().enumerate() {
        let seed = seed as u64 + 1;
        if *density < 1.0 {
            let coo = sparse(shape, *density, seed);
            data.insert(name.to_string(), TensorValue::Values(coo.to_ndarray().unwrap()));
            entries.insert(name.to_string(), coo);
        } else {
            data.insert(name.to_string(), TensorValue::Values(dense(shape, seed)));
        }
    }
    let formats = c.formats.iter().map(|(n, f)| (n.to_string(), f.parse::<FormatSpec>().unwrap())).collect();
    (einsum, data, entries, formats)
}

/// Lowers, prints, compiles and runs `c` on 1 and 2 threads against the
/// reference; returns the loop tree's text.
fn runs(c: &Case) -> String {
    let (einsum, data, entries, formats) = prepare(c);
    let schedule: Schedule = c.schedule.parse().unwrap();
    let lowered = lower(&einsum, &formats, &entries, &schedule, "k")
        .unwrap_or_else(|d| panic!("{}: {d:?}", c.statement));
    let want = spindle_ir::eval::evaluate(&einsum, &data).unwrap();
    let mut inputs = data.clone();
    for name in &lowered.replaced {
        inputs.remove(name);
    }
    inputs.extend(lowered.arrays.clone());
    if einsum.statement.op == spindle_ir::lang::AssignOp::Assign {
        inputs.remove(&einsum.output().name);
    }
    let compiled = CLevelKernel::compile_with(&lowered.kernel, &Compiler::from_env(), 0)
        .unwrap_or_else(|e| panic!("{}: {e}", c.statement));
    for threads in [1, 2] {
        let got = compiled.run(&inputs, threads).unwrap_or_else(|e| panic!("{}: {e}", c.statement));
        assert_eq!(got.shape(), want.shape());
        let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
        for (g, w) in got.iter().zip(want.iter()) {
            assert!(
                (g - w).abs() <= 1e-5 * scale,
                "{} on {threads} threads: got {g}, expected {w}\n{}\n{}",
                c.statement,
                lowered.kernel,
                compiled.source
            );
        }
    }
    lowered.kernel.to_string()
}

#[test]
fn position_loops_compute_spmv_and_spmm_in_every_unique_format() {
    for format in ["csr", "dcsr", "coo", "csf", "groupcoo:dim=0,g=2", "ell"] {
        let tree = runs(&case(
            "y[i] = A[i,j] * x[j]",
            &[("y", &[37], 1.0), ("A", &[37, 23], 0.2), ("x", &[23], 1.0)],
            &[("A", format)],
        ));
        assert!(tree.contains("merge j") || tree.contains("for j"), "{format}:\n{tree}");
    }
    // `+=` keeps the output's values; CSR rows run in parallel.
    let tree = runs(&case(
        "C[m,n] += A[m,k] * B[k,n]",
        &[("C", &[41, 9], 1.0), ("A", &[41, 30], 0.15), ("B", &[30, 9], 1.0)],
        &[("A", "csr")],
    ));
    assert!(tree.contains("parallel outermost loop"), "{tree}");
    assert!(tree.find("merge k").unwrap() < tree.find("for n").unwrap(), "k before n:\n{tree}");
}

#[test]
fn csc_is_walked_column_first() {
    let tree = runs(&case(
        "C[m,n] = A[m,k] * B[k,n]",
        &[("C", &[20, 6], 1.0), ("A", &[20, 25], 0.2), ("B", &[25, 6], 1.0)],
        &[("A", "csc")],
    ));
    assert!(tree.find("for k").unwrap() < tree.find("merge m").unwrap(), "{tree}");
    assert!(!tree.contains("parallel"), "columns collide on output rows:\n{tree}");
}

#[test]
fn co_iteration_takes_one_branch_per_lattice_point() {
    // Intersection: one point.
    let tree = runs(&case(
        "C[i,j] = A[i,j] * B[i,j]",
        &[("C", &[30, 40], 1.0), ("A", &[30, 40], 0.3), ("B", &[30, 40], 0.3)],
        &[("A", "csr"), ("B", "dcsr")],
    ));
    assert_eq!(tree.matches("case {A, B}").count(), 1, "{tree}");
    assert!(!tree.contains("case {A}\n"), "{tree}");
    // Union: three points at j, under a merge of B's rows.
    let tree = runs(&case(
        "C[i,j] = A[i,j] + B[i,j]",
        &[("C", &[30, 40], 1.0), ("A", &[30, 40], 0.3), ("B", &[30, 40], 0.3)],
        &[("A", "dcsr"), ("B", "dcsr")],
    ));
    for point in ["case {A, B}", "case {A}", "case {B}"] {
        assert!(tree.contains(point), "{point}:\n{tree}");
    }
    // Subtraction and a scaled operand.
    runs(&case(
        "C[i,j] = 2 * A[i,j] - B[i,j]",
        &[("C", &[12, 50], 1.0), ("A", &[12, 50], 0.2), ("B", &[12, 50], 0.4)],
        &[("A", "csr"), ("B", "csr")],
    ));
    // A union with a dense term sweeps every coordinate.
    let tree = runs(&case(
        "C[i,j] = A[i,j] + D[i,j]",
        &[("C", &[15, 33], 1.0), ("A", &[15, 33], 0.2), ("D", &[15, 33], 1.0)],
        &[("A", "csr")],
    ));
    assert!(tree.contains("sweep j"), "{tree}");
    // Three operands: a loop per lattice point, the largest first; each
    // loop ends with one operand run out, whose points' loop comes later.
    let tree = runs(&case(
        "C[i,j] = A[i,j] + B[i,j] + E[i,j]",
        &[("C", &[20, 64], 1.0), ("A", &[20, 64], 0.3), ("B", &[20, 64], 0.2), ("E", &[20, 64], 0.4)],
        &[("A", "csr"), ("B", "csr"), ("E", "dcsr")],
    ));
    assert!(tree.contains("case {A, B, E}") && tree.contains("case {E}"), "{tree}");
    // A product of a sum: A is in every point; the loops stop when A does.
    let tree = runs(&case(
        "C[i,j] = A[i,j] * (B[i,j] + E[i,j])",
        &[("C", &[20, 64], 1.0), ("A", &[20, 64], 0.5), ("B", &[20, 64], 0.3), ("E", &[20, 64], 0.3)],
        &[("A", "csr"), ("B", "csr"), ("E", "csr")],
    ));
    assert!(tree.contains("case {A, B, E}") && !tree.contains("case {B, E}"), "{tree}");
    // Vectors in COO: its one level is unique, so it co-iterates (it was
    // refused as "not ordered and unique").
    let tree = runs(&case(
        "z[i] = x[i] + y[i]",
        &[("z", &[40], 1.0), ("x", &[40], 0.3), ("y", &[40], 0.4)],
        &[("x", "coo"), ("y", "coo")],
    ));
    assert!(tree.contains("case {x, y}") && tree.contains("case {y}"), "{tree}");
    // exp(0) is 1: every coordinate counts.
    runs(&case(
        "C[i,j] = exp(A[i,j]) * B[i,j] + relu(B[i,j])",
        &[("C", &[10, 20], 1.0), ("A", &[10, 20], 0.3), ("B", &[10, 20], 0.3)],
        &[("A", "csr"), ("B", "csr")],
    ));
}

#[test]
fn two_stored_operands_multiply_with_a_dense_output() {
    // SpGEMM with a dense output: B's rows are located by A's columns.
    let tree = runs(&case(
        "C[i,j] += A[i,k] * B[k,j]",
        &[("C", &[25, 22], 1.0), ("A", &[25, 30], 0.15), ("B", &[30, 22], 0.2)],
        &[("A", "csr"), ("B", "csr")],
    ));
    assert!(tree.contains("pB0 = 0 * 30 + k") || tree.contains("pB0"), "{tree}");
    // A dot product of two sparse vectors, and a third-order CSF operand.
    runs(&case(
        "s[] = a[i] * b[i]",
        &[("s", &[], 1.0), ("a", &[200], 0.3), ("b", &[200], 0.3)],
        &[("a", "csf"), ("b", "csf")],
    ));
    runs(&case(
        "Y[i,j] = T[i,j,k] * v[k]",
        &[("Y", &[7, 8], 1.0), ("T", &[7, 8, 9], 0.2), ("v", &[9], 1.0)],
        &[("T", "csf")],
    ));
    runs(&case(
        "Y[k,r] = T[i,j,k] * U[i,r] * V[j,r]",
        &[("Y", &[9, 4], 1.0), ("T", &[7, 8, 9], 0.2), ("U", &[7, 4], 1.0), ("V", &[8, 4], 1.0)],
        &[("T", "csf")],
    ));
}

#[test]
fn a_given_loop_order_is_kept_or_refused_with_a_caret() {
    let mut c = case(
        "y[i] = A[i,j] * x[j]",
        &[("y", &[10], 1.0), ("A", &[10, 12], 0.3), ("x", &[12], 1.0)],
        &[("A", "csr")],
    );
    c.schedule = "order=j+i";
    let (einsum, _, entries, formats) = prepare(&c);
    let err = lower(&einsum, &formats, &entries, &c.schedule.parse().unwrap(), "k").unwrap_err();
    let text = err.render(c.statement, false);
    assert!(text.contains("visits `j` before `i`, but `A` stores `i` above `j`"), "{text}");
    assert!(text.contains("order=i+j"), "{text}");
    assert_eq!(&c.statement[err.span.start..err.span.end], "j", "{text}");
    c.formats = vec![("A", "csc")];
    runs(&c);
    // Two operands stored the other way round: no order serves both (the
    // note named an order that then refused the other operand).
    let mut c = case(
        "C[i,j] = A[i,j] + B[i,j]",
        &[("C", &[10, 12], 1.0), ("A", &[10, 12], 0.3), ("B", &[10, 12], 0.3)],
        &[("A", "csr"), ("B", "csc")],
    );
    for order in ["", "order=i+j", "order=j+i"] {
        c.schedule = order;
        let (einsum, _, entries, formats) = prepare(&c);
        let err = lower(&einsum, &formats, &entries, &c.schedule.parse().unwrap(), "k").unwrap_err();
        let text = err.render(c.statement, false);
        assert!(text.contains("no loop order walks both in their storage order"), "{order}: {text}");
    }
    // One of them in dense levels alone: it needs no format (the note sent
    // the user to "both csr, or both csc").
    c.statement = "C[i,j] = A[i,j] * B[j,i]";
    c.formats = vec![("A", "csr"), ("B", "dense")];
    let mut tensors = c.tensors.clone();
    tensors[2].1 = vec![12, 10];
    c.tensors = tensors;
    c.schedule = "";
    let (einsum, _, entries, formats) = prepare(&c);
    let err = lower(&einsum, &formats, &entries, &Schedule::default(), "k").unwrap_err();
    let text = err.render(c.statement, false);
    assert!(text.contains("`B` is stored in dense levels: give it no format"), "{text}");
}

#[test]
fn what_the_level_path_refuses_it_says_where_and_why() {
    let refused =
        |statement: &'static str, tensors: &[(&'static str, &[usize], f64)], formats, needle: &str| {
            let c = case(statement, tensors, formats);
            let (einsum, _, entries, formats) = prepare(&c);
            let err = lower(&einsum, &formats, &entries, &Schedule::default(), "k").unwrap_err();
            let text = err.render(statement, false);
            assert!(text.contains(needle), "{statement}: {text}");
        };
    let ab: &[(&str, &[usize], f64)] = &[("C", &[6, 6], 1.0), ("A", &[6, 6], 0.3), ("B", &[6, 6], 0.3)];
    refused("C[i,j] max= A[i,j] * B[i,j]", ab, &[("A", "csr"), ("C", "csr")], "assembled by sums only");
    refused("C[i,j] = A[i,j] / B[i,j]", ab, &[("B", "csr")], "divides by its zeros");
    refused("C[i,j] = A[i,j] / (B[i,j] * 2)", ab, &[("B", "csr")], "divides by its zeros");
    // A divisor that is not 0 where B has no entry runs (it was refused).
    for statement in ["C[i,j] = A[i,j] / (B[i,j] + 3)", "C[i,j] = 1 / (1 + B[i,j])"] {
        runs(&case(statement, ab, &[("B", "csr")]));
    }
    refused("C[i,j] = A[i,j] + B[i,j]", ab, &[("A", "coo"), ("B", "csr")], "ordered and unique");
    refused("C[i,j] = A[i,j] * B[i,j]", ab, &[("A", "csr"), ("C", "ell")], "which appending cannot fill");
    refused("C[i,j] = A[i,j] * B[i,j]", ab, &[("A", "csr"), ("C", "dense")], "every level is dense");
    refused("C[i,j] = A[i+1,j] * B[i,j]", ab, &[("A", "csr")], "not a plain index");
}

/// Lowers, compiles and runs `c` (its output `C` stored in a format) on 1
/// and 2 threads; the assembled structure must keep its levels' promises
/// and hold exactly the reference's non-zeros (random values do not
/// cancel), with their values. Returns the loop tree and its C.
fn assembles(c: &Case) -> (String, String) {
    let (einsum, mut data, entries, formats) = prepare(c);
    let out = einsum.output().name.clone();
    data.remove(&out);
    let schedule: Schedule = c.schedule.parse().unwrap();
    let lowered = lower(&einsum, &formats, &entries, &schedule, "k")
        .unwrap_or_else(|d| panic!("{}: {}", c.statement, d.render(c.statement, false)));
    let want = spindle_ir::eval::evaluate(&einsum, &data).unwrap();
    let mut inputs = data.clone();
    for name in &lowered.replaced {
        inputs.remove(name);
    }
    inputs.extend(lowered.arrays.clone());
    let compiled = CLevelKernel::compile_with(&lowered.kernel, &Compiler::from_env(), 0)
        .unwrap_or_else(|e| panic!("{}: {e}", c.statement));
    let tree = lowered.kernel.to_string();
    for threads in [1, 2] {
        let assembled =
            compiled.run_assembled(&inputs, threads).unwrap_or_else(|e| panic!("{}: {e}", c.statement));
        let coo = assembled
            .to_coo()
            .unwrap_or_else(|e| panic!("{} on {threads} threads: {e}\n{tree}", c.statement));
        let stored = coo.nnz();
        let nonzeros = want.iter().filter(|w| **w != 0.0).count();
        assert_eq!(
            stored, nonzeros,
            "{} on {threads} threads: stored entries\n{tree}\n{}",
            c.statement, compiled.source
        );
        let got = coo.to_ndarray().unwrap();
        for (g, w) in got.iter().zip(want.iter()) {
            assert!(
                (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                "{} on {threads} threads: got {g}, expected {w}\n{tree}",
                c.statement
            );
        }
    }
    (tree, compiled.source.clone())
}

#[test]
fn elementwise_sums_and_products_assemble_sparse_outputs() {
    let ab: &[(&str, &[usize], f64)] = &[("C", &[40, 50], 1.0), ("A", &[40, 50], 0.1), ("B", &[40, 50], 0.1)];
    for out in ["csr", "dcsr", "coo"] {
        for (statement, inputs) in [
            ("C[i,j] = A[i,j] + B[i,j]", ("csr", "csr")),
            ("C[i,j] = A[i,j] - B[i,j]", ("dcsr", "csr")),
            ("C[i,j] = A[i,j] * B[i,j]", ("csr", "dcsr")),
        ] {
            let (tree, _) = assembles(&case(statement, ab, &[("A", inputs.0), ("B", inputs.1), ("C", out)]));
            assert!(tree.contains("assembles C"), "{tree}");
            if out == "csr" && inputs.0 == "csr" {
                assert!(
                    tree.contains("parallel outermost loop"),
                    "rows fill from their own offsets:\n{tree}"
                );
            }
        }
    }
    // Empty rows, and patterns that barely meet (intersections mostly
    // empty).
    for (out, seedless) in [("dcsr", "dcsr"), ("csr", "csr"), ("coo", "dcsr")] {
        assembles(&case(
            "C[i,j] = A[i,j] * B[i,j] + A[i,j]",
            &[("C", &[30, 9], 1.0), ("A", &[30, 9], 0.04), ("B", &[30, 9], 0.04)],
            &[("A", seedless), ("B", "dcsr"), ("C", out)],
        ));
    }
    // Order 3: sparse tensor plus sparse tensor into CSF.
    assembles(&case(
        "C[i,j,k] = A[i,j,k] + B[i,j,k]",
        &[("C", &[6, 7, 8], 1.0), ("A", &[6, 7, 8], 0.1), ("B", &[6, 7, 8], 0.1)],
        &[("A", "csf"), ("B", "csf"), ("C", "csf")],
    ));
}

#[test]
fn row_wise_spgemm_gathers_rows_in_a_dense_workspace() {
    for (a, out) in [("csr", "csr"), ("csr", "coo"), ("dcsr", "dcsr")] {
        let (tree, source) = assembles(&case(
            "C[i,j] = A[i,k] * B[k,j]",
            &[("C", &[45, 38], 1.0), ("A", &[45, 60], 0.08), ("B", &[60, 38], 0.08)],
            &[("A", a), ("B", "csr"), ("C", out)],
        ));
        assert!(tree.contains("workspace C over j"), "{tree}");
        assert!(source.contains("spindle_sort_i64"), "{source}");
    }
    // Over 2^18 columns a row far shorter than the marks' summary is
    // sorted instead of read off the marks; longer ones still are.
    let (_, source) = assembles(&case(
        "C[i,j] = A[i,k] * B[k,j]",
        &[("C", &[6, 270_000], 1.0), ("A", &[6, 12], 0.3), ("B", &[12, 270_000], 0.000_03)],
        &[("A", "csr"), ("B", "csr"), ("C", "csr")],
    ));
    assert!(source.contains("if (w_n * 32 < 66)"), "{source}");
    // Dense rows take the marks in order rather than a sort.
    assembles(&case(
        "C[i,j] = A[i,k] * B[k,j]",
        &[("C", &[20, 16], 1.0), ("A", &[20, 30], 0.5), ("B", &[30, 16], 0.5)],
        &[("A", "csr"), ("B", "csr"), ("C", "csr")],
    ));
}

#[test]
fn inner_products_and_sampled_products_assemble_by_intersection() {
    // CSR x CSC: each (i, j) is the intersection of row i and column j.
    let (tree, _) = assembles(&case(
        "C[i,j] = A[i,k] * B[k,j]",
        &[("C", &[25, 20], 1.0), ("A", &[25, 40], 0.05), ("B", &[40, 20], 0.05)],
        &[("A", "csr"), ("B", "csc"), ("C", "csr")],
    ));
    assert!(tree.contains("merge k over"), "{tree}");
    // SDDMM: the output has the sampling matrix's pattern.
    assembles(&case(
        "C[i,j] = S[i,j] * A[i,k] * B[k,j]",
        &[("C", &[30, 24], 1.0), ("S", &[30, 24], 0.1), ("A", &[30, 8], 1.0), ("B", &[8, 24], 1.0)],
        &[("S", "csr"), ("C", "csr")],
    ));
}

/// Every policy of the ISM runtime, with each optimization switched off in
/// turn, and a first capacity small enough that the accumulation array
/// fills and merges many times.
const POLICIES: [&str; 10] = [
    "workspace=coord ws.cap=4",
    "workspace=hash ws.cap=4",
    "workspace=bucket ws.cap=4",
    "workspace=map",
    "workspace=vector",
    "workspace=dense",
    "workspace=coord ws.cap=4 ws.indexing=off ws.double_buffer=off",
    "workspace=bucket ws.cap=4 ws.realloc=off",
    "workspace=coord ws.cap=4 ws.pipeline=on ws.pipeline_min=1",
    "workspace=hash ws.cap=8 ws.pipeline=on ws.pipeline_min=2 ws.realloc=off",
];

/// `c` under every policy of [`POLICIES`] (and `auto`), each checked
/// against the reference on 1 and 2 threads; the loop tree under `auto`.
fn assembles_under_every_policy(c: &Case) -> String {
    let mut c = c.clone();
    for policy in POLICIES {
        c.schedule = policy;
        let (tree, _) = assembles(&c);
        let name = policy.split_whitespace().next().unwrap().trim_start_matches("workspace=");
        assert!(tree.contains(&format!("workspace: {name} (asked)")), "{policy}:\n{tree}");
    }
    c.schedule = "";
    assembles(&c).0
}

#[test]
fn discordant_outputs_gather_in_an_ism_workspace_under_every_policy() {
    // Row-wise products into a column-first output: the transposed SpGEMM
    // of the paper's Fig. 11, a second-order workspace read back j first.
    let tree = assembles_under_every_policy(&case(
        "C[i,j] = A[i,k] * B[k,j]",
        &[("C", &[21, 17], 1.0), ("A", &[21, 30], 0.15), ("B", &[30, 17], 0.15)],
        &[("A", "csr"), ("B", "csr"), ("C", "csc")],
    ));
    assert!(tree.contains("order 2 over (j, i), filled in loop order (i, j), ow_order [1, 0]"), "{tree}");
    // Elementwise into the other order.
    assembles_under_every_policy(&case(
        "C[i,j] = A[i,j] * B[i,j] + A[i,j]",
        &[("C", &[12, 19], 1.0), ("A", &[12, 19], 0.3), ("B", &[12, 19], 0.3)],
        &[("A", "csr"), ("B", "dcsr"), ("C", "dcsc")],
    ));
    // COO's rows repeat: the output's rows cannot be appended by that walk,
    // so both levels are gathered (and deduplicated), here for SpGEMM too.
    assembles_under_every_policy(&case(
        "C[i,j] = A[i,k] * B[k,j]",
        &[("C", &[13, 12], 1.0), ("A", &[13, 15], 0.3), ("B", &[15, 12], 0.3)],
        &[("A", "coo"), ("B", "csr"), ("C", "csr")],
    ));
    let tree = assembles_under_every_policy(&case(
        "C[i,j] = A[i,j] * x[j]",
        &[("C", &[14, 11], 1.0), ("A", &[14, 11], 0.3), ("x", &[11], 1.0)],
        &[("A", "coo"), ("C", "csr")],
    ));
    assert!(tree.contains("over (i, j)"), "{tree}");
    // Outer products: one gathering of about 1,000 labels arriving in no
    // order, so Map's leaves of 128 split many times, in the middle too.
    let tree = assembles_under_every_policy(&case(
        "C[i,j] = A[i,k] * B[k,j]",
        &[("C", &[40, 40], 1.0), ("A", &[40, 12], 0.15), ("B", &[12, 40], 0.15)],
        &[("A", "dcsc"), ("B", "dcsr"), ("C", "csr")],
    ));
    assert!(tree.contains("order 2"), "{tree}");
}

/// Row-wise SpGEMM through the hash workspace, with rows of C that take
/// each way its drain sorts a row:
/// - B's rows repeat every 16 columns: under `label mod L` a row's labels
///   crowd a few home slots and probe far (while the table fills, merges
///   and grows, `ws.cap=8`, its drains are short runs), and the long rows
///   are ranked in a bitmap of their span;
/// - B's rows hold a few columns spread over 200,000: rows of C of 17 to
///   64 labels too far apart for the bitmap are ranked by comparisons, and
///   longer ones radix sorted.
///
/// Every row as the reference has it.
#[test]
fn the_hash_workspace_assembles_labels_that_collide_or_lie_far_apart() {
    let (n, k) = (9, 6);
    let strided = |m: usize| {
        let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..k {
            for c in (r..m).step_by(16) {
                rows.push(r as i64);
                cols.push(c as i64);
                vals.push(0.25 + ((r * m + c) % 7) as f64 / 8.0);
            }
        }
        Coo::new(vec![k, m], vec![rows, cols], vals).unwrap()
    };
    // B's rows hold 6, 12, 20, 30, 45 and 70 columns at random, and A's
    // rows pick which meet: rows of C of 0 and 6 labels, 18 to 57 (ranked
    // by comparisons: more than 8 words of the span per label) and 70 to
    // 183 (radix sorted).
    let spread = |m: usize| {
        let mut rng = ChaCha8Rng::seed_from_u64(43);
        let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
        for (r, len) in [6, 12, 20, 30, 45, 70].into_iter().enumerate() {
            let mut mine: Vec<i64> = (0..len).map(|_| rng.random_range(0..m as i64)).collect();
            mine.sort_unstable();
            mine.dedup();
            for c in mine {
                rows.push(r as i64);
                cols.push(c);
                vals.push(rng.random_range(0.1..1.0));
            }
        }
        let b = Coo::new(vec![k, m], vec![rows, cols], vals).unwrap();
        let picks: [&[i64]; 9] =
            [&[0], &[0, 1], &[2, 3], &[1, 4], &[4, 5], &[0, 1, 2, 3, 4, 5], &[], &[5], &[3]];
        let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
        for (i, pick) in picks.iter().enumerate() {
            for &c in *pick {
                rows.push(i as i64);
                cols.push(c);
                vals.push(rng.random_range(0.1..1.0));
            }
        }
        (Coo::new(vec![n, k], vec![rows, cols], vals).unwrap(), b)
    };
    let (a_spread, b_spread) = spread(200_000);
    for (a, b, m) in [(sparse(&[n, k], 0.7, 41), strided(320), 320), (a_spread, b_spread, 200_000)] {
        let decls = declarations(&[("C", &[n, m], "f64"), ("A", &[n, k], "f64"), ("B", &[k, m], "f64")]);
        let einsum = check(&parse("C[i,j] = A[i,k] * B[k,j]").unwrap(), &decls).unwrap();
        let mut data = Tensors::new();
        for (name, coo) in [("A", &a), ("B", &b)] {
            data.insert(name.to_string(), TensorValue::Values(coo.to_ndarray().unwrap()));
        }
        let want = spindle_ir::eval::evaluate(&einsum, &data).unwrap();
        let entries = BTreeMap::from([("A".to_string(), a), ("B".to_string(), b)]);
        let formats: BTreeMap<String, FormatSpec> = [("A", "csr"), ("B", "csr"), ("C", "csr")]
            .iter()
            .map(|(t, f)| (t.to_string(), f.parse().unwrap()))
            .collect();
        for items in ["workspace=hash", "workspace=hash ws.cap=8"] {
            let schedule: Schedule = items.parse().unwrap();
            let lowered = lower(&einsum, &formats, &entries, &schedule, "k").unwrap();
            let mut inputs = Tensors::new();
            inputs.extend(lowered.arrays.clone());
            let compiled = CLevelKernel::compile_with(&lowered.kernel, &Compiler::from_env(), 0).unwrap();
            for threads in [1, 2] {
                let got = compiled.run_assembled(&inputs, threads).unwrap().to_coo().unwrap();
                let what = format!("{items}, {m} columns, {threads} threads");
                assert_eq!(got.nnz(), want.iter().filter(|w| **w != 0.0).count(), "{what}");
                for (g, w) in got.to_ndarray().unwrap().iter().zip(want.iter()) {
                    assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{what}: {g} vs {w}");
                }
            }
        }
    }
}

#[test]
fn outer_product_spgemm_gathers_the_whole_output_in_a_second_order_workspace() {
    for out in ["csr", "dcsr", "coo", "csc"] {
        let tree = assembles_under_every_policy(&case(
            "C[i,j] = A[i,k] * B[k,j]",
            &[("C", &[26, 23], 1.0), ("A", &[26, 31], 0.12), ("B", &[31, 23], 0.12)],
            &[("A", "dcsc"), ("B", "dcsr"), ("C", out)],
        ));
        assert!(tree.contains("merge k over pA0 = A"), "k outermost, walked in A's columns:\n{tree}");
        assert!(tree.contains("workspace C over"), "{tree}");
        assert!(!tree.contains("parallel outermost loop"), "{tree}");
    }
}

/// The kernels' ISM runtime and the Rust library (`spindle_workspaces::ism`)
/// under the same policy, fed the same products in the same order, give
/// the same components: same coordinates, values equal to rounding.
#[test]
fn kernels_and_the_rust_library_agree_under_every_policy() {
    use spindle_workspaces::ism::{self, Accumulation, Ism, Labels, Options};
    let (n, k, m) = (23, 19, 21);
    let a = sparse(&[n, k], 0.15, 31);
    let b = sparse(&[k, m], 0.15, 32);
    // The outer product's inserts in its loop order: k, then A's column,
    // then B's row.
    let mut products = Vec::new();
    for kk in 0..k as i64 {
        for (p, _) in a.crd[1].iter().enumerate().filter(|(_, c)| **c == kk) {
            for (q, _) in b.crd[0].iter().enumerate().filter(|(_, r)| **r == kk) {
                products.push(([a.crd[0][p] as usize, b.crd[1][q] as usize], a.val[p] * b.val[q]));
            }
        }
    }
    let labels = Labels::new(&[n, m]).unwrap();
    let library = |policy: &str| -> Vec<(u64, f64)> {
        fn fill<P: Accumulation>(labels: &Labels, p: P, products: &[([usize; 2], f64)]) -> Vec<(u64, f64)> {
            let mut ws = Ism::new(labels.clone(), p, Options::default());
            for (at, v) in products {
                ws.insert(at, *v);
            }
            ws.finish()
        }
        match policy {
            "bucket" => fill(&labels, ism::Bucket::new(labels.clone(), 4), &products),
            "hash" => fill(&labels, ism::Hash::new(4), &products),
            "coord" => fill(&labels, ism::Coord::new(4, true), &products),
            "map" => fill(&labels, ism::Map::default(), &products),
            "vector" => fill(&labels, ism::Coord::vector(true), &products),
            _ => fill(&labels, ism::Dense::new(&labels).unwrap(), &products),
        }
    };
    let decls = declarations(&[("C", &[n, m], "f64"), ("A", &[n, k], "f64"), ("B", &[k, m], "f64")]);
    let einsum = check(&parse("C[i,j] = A[i,k] * B[k,j]").unwrap(), &decls).unwrap();
    let entries = BTreeMap::from([("A".to_string(), a.clone()), ("B".to_string(), b.clone())]);
    let formats: BTreeMap<String, FormatSpec> = [("A", "dcsc"), ("B", "dcsr"), ("C", "coo")]
        .iter()
        .map(|(t, f)| (t.to_string(), f.parse().unwrap()))
        .collect();
    for policy in ["bucket", "hash", "coord", "map", "vector", "dense"] {
        let schedule: Schedule = format!("workspace={policy} ws.cap=4").parse().unwrap();
        let lowered = lower(&einsum, &formats, &entries, &schedule, "k").unwrap();
        let mut inputs = Tensors::new();
        inputs.extend(lowered.arrays.clone());
        let compiled = CLevelKernel::compile_with(&lowered.kernel, &Compiler::from_env(), 0).unwrap();
        let got = compiled.run_assembled(&inputs, 1).unwrap().to_coo().unwrap();
        let want = library(policy);
        let labels_got: Vec<u64> =
            (0..got.nnz()).map(|e| labels.label(&[got.crd[0][e] as usize, got.crd[1][e] as usize])).collect();
        assert_eq!(labels_got, want.iter().map(|c| c.0).collect::<Vec<_>>(), "{policy}: coordinates");
        for (g, w) in got.val.iter().zip(&want) {
            assert!((g - w.1).abs() <= 1e-12 * w.1.abs().max(1.0), "{policy}: {g} vs {}", w.1);
        }
    }
}

#[test]
fn tensor_kernels_gather_higher_order_workspaces() {
    let b: &[usize] = &[7, 9, 8];
    // SpMTTKRP, A[i,j] = B[k,l,i] C[k,j] D[l,j] in the order k, l, i, j.
    let tree = assembles_under_every_policy(&case(
        "A[i,j] = B[k,l,i] * C[k,j] * D[l,j]",
        &[("A", &[8, 6], 1.0), ("B", b, 0.1), ("C", &[7, 6], 0.4), ("D", &[9, 6], 0.4)],
        &[("B", "csf"), ("C", "csr"), ("D", "csr"), ("A", "coo")],
    ));
    assert!(tree.contains("order 2 over (i, j)"), "{tree}");
    // SpTTM, A[i,j,l] = B[k,i,j] C[k,l]: a third-order workspace.
    for out in ["coo", "csf"] {
        let tree = assembles_under_every_policy(&case(
            "A[i,j,l] = B[k,i,j] * C[k,l]",
            &[("A", &[9, 8, 5], 1.0), ("B", b, 0.1), ("C", &[7, 5], 0.5)],
            &[("B", "csf"), ("C", "csr"), ("A", out)],
        ));
        assert!(tree.contains("order 3 over (i, j, l)"), "{tree}");
    }
    // SpTTM-I, A[k,j,l] = B[k,i,j] C[i,l]: k hoisted, (j, l) gathered.
    for out in ["coo", "csf"] {
        let tree = assembles_under_every_policy(&case(
            "A[k,j,l] = B[k,i,j] * C[i,l]",
            &[("A", &[7, 8, 5], 1.0), ("B", b, 0.1), ("C", &[9, 5], 0.5)],
            &[("B", "csf"), ("C", "csr"), ("A", out)],
        ));
        assert!(tree.contains("order 2 over (j, l) inside the shared loops of k"), "{tree}");
    }
    // Tensor addition into a discordant mode order.
    for modes in ["2-1-0", "1-0-2", "0-2-1"] {
        let format: &'static str = Box::leak(format!("csf:modes={modes}").into_boxed_str());
        assembles_under_every_policy(&case(
            "A[i,j,k] = B[i,j,k] + C[i,j,k]",
            &[("A", &[6, 7, 8], 1.0), ("B", &[6, 7, 8], 0.1), ("C", &[6, 7, 8], 0.1)],
            &[("B", "csf"), ("C", "csf"), ("A", format)],
        ));
    }
}

#[test]
fn workspaces_too_large_to_label_are_refused_with_a_caret() {
    let big = 1usize << 32;
    let c = case(
        "C[i,j] = A[k,i] * B[k,j]",
        &[("C", &[big, big], 1.0), ("A", &[3, big], 0.5), ("B", &[3, big], 0.5)],
        &[("C", "csr")],
    );
    let decls = declarations(&[("C", &[big, big], "f64"), ("A", &[3, big], "f64"), ("B", &[3, big], "f64")]);
    let einsum = check(&parse(c.statement).unwrap(), &decls).unwrap();
    let a = Coo::new(vec![3, big], vec![vec![0], vec![5]], vec![1.0]).unwrap();
    let entries = BTreeMap::from([("A".to_string(), a.clone()), ("B".to_string(), a)]);
    let formats: BTreeMap<String, FormatSpec> =
        ["A", "B", "C"].iter().map(|n| (n.to_string(), FormatSpec::Dcsr)).collect();
    let err = lower(&einsum, &formats, &entries, &Schedule::default(), "k").unwrap_err();
    let text = err.render(c.statement, false);
    assert!(text.contains("more coordinates than 64 bits hold"), "{text}");
    assert_eq!(&c.statement[err.span.start..err.span.end], "C[i,j]", "{text}");
}

/// A warp per row (or per iteration of the outermost loop) on the GPU:
/// printed as CUDA, run in the CPU emulation (under AddressSanitizer)
/// against the reference, and compiled by NVRTC for sm_80 and sm_90 where
/// the toolchain is installed.
#[test]
fn cuda_rows_per_warp_compute_spmv_and_spmm() {
    use spindle_cuda::emulate::{EmulateOptions, run_level};
    use spindle_cuda::nvrtc::{self, Arch, CompileOptions};
    use spindle_cuda::print::levels::print_level;

    let nvrtc = nvrtc::toolchain_or_skip("cuda_rows_per_warp_compute_spmv_and_spmm");
    let cases = [
        // SpMV: lanes over the row's positions, added with shuffles, and
        // the sum stored (y starts at zero; each row is a warp's whole).
        (
            case(
                "y[i] = A[i,j] * x[j]",
                &[("y", &[37], 1.0), ("A", &[37, 90], 0.2), ("x", &[90], 1.0)],
                &[("A", "csr")],
            ),
            "__shfl_down_sync(0xffffffffu, acc, offset);\n            if (lane == 0) t_y[i_i] = acc;",
        ),
        // (Rows with no entries stored as zeros: the emulation starts y at
        // NaN.)
        (
            case(
                "y[i] = A[i,j] * x[j]",
                &[("y", &[50], 1.0), ("A", &[50, 20], 0.05), ("x", &[20], 1.0)],
                &[("A", "csr")],
            ),
            "if (lane == 0) t_y[i_i] = acc;",
        ),
        // SpMM: lanes over the dense columns, each lane's two slots of
        // the row (40 columns: the second ragged) summed in registers, the
        // row's entries taken 32 at a time.
        (
            case(
                "C[m,n] += A[m,k] * B[k,n]",
                &[("C", &[21, 40], 1.0), ("A", &[21, 30], 0.2), ("B", &[30, 40], 1.0)],
                &[("A", "csr")],
            ),
            "const int64_t i_n = lane + c_i_n * 32;\n                        if (i_n < 40) {",
        ),
        // DCSR rows (a position per warp), and a CSF tensor times a vector.
        (
            case(
                "y[i] = A[i,j] * x[j]",
                &[("y", &[50], 1.0), ("A", &[50, 20], 0.05), ("x", &[20], 1.0)],
                &[("A", "dcsr")],
            ),
            "__shfl_down_sync",
        ),
        (
            case(
                "Y[i,j] = T[i,j,k] * v[k]",
                &[("Y", &[7, 8], 1.0), ("T", &[7, 8, 9], 0.3), ("v", &[9], 1.0)],
                &[("T", "csf")],
            ),
            "__shfl_down_sync",
        ),
        // Co-iteration into a dense output: lane 0 walks the row.
        (
            case(
                "C[i,j] = A[i,j] + B[i,j]",
                &[("C", &[12, 30], 1.0), ("A", &[12, 30], 0.2), ("B", &[12, 30], 0.2)],
                &[("A", "csr"), ("B", "csr")],
            ),
            "if (lane == 0)",
        ),
        // Iterations that share output rows update them atomically: a
        // column of CSC per warp (a sum outermost), an entry of COO per
        // warp (its rows repeat), and a GroupCOO fallback.
        (
            case(
                "y[i] = A[i,j] * x[j]",
                &[("y", &[40], 1.0), ("A", &[40, 35], 0.2), ("x", &[35], 1.0)],
                &[("A", "csc")],
            ),
            "atomicAdd(&",
        ),
        (
            case(
                "C[i,j] = relu(A[i,k] * B[k,j])",
                &[("C", &[19, 33], 1.0), ("A", &[19, 25], 0.3), ("B", &[25, 33], 1.0)],
                &[("A", "coo")],
            ),
            "atomicAdd(&",
        ),
        (
            case(
                "C[i,j] = relu(A[i,k]) * B[k,j]",
                &[("C", &[17, 9], 1.0), ("A", &[17, 12], 0.3), ("B", &[12, 9], 1.0)],
                &[("A", "groupcoo:dim=0,g=4")],
            ),
            "atomicAdd(&",
        ),
        // The trace: the identity walked beside A's rows, each warp
        // adding its row's diagonal entry to the one output atomically.
        (case("s = A[i,i]", &[("s", &[], 1.0), ("A", &[23, 23], 0.5)], &[("A", "csr")]), "t_Eye_crd"),
        // A union at the top (DCSR beside a dense operand, CSR beside
        // DCSR): a warp per row, each level's row found by binary search.
        (
            case(
                "C[i,j] = A[i,j] + D[i,j]",
                &[("C", &[30, 20], 1.0), ("A", &[30, 20], 0.1), ("D", &[30, 20], 1.0)],
                &[("A", "dcsr")],
            ),
            "else hi = mid;",
        ),
        (
            case(
                "C[i,j] = A[i,j] + B[i,j]",
                &[("C", &[30, 20], 1.0), ("A", &[30, 20], 0.1), ("B", &[30, 20], 0.05)],
                &[("A", "csr"), ("B", "dcsr")],
            ),
            "else hi = mid;",
        ),
        // `max=` / `min=` count a row's updates in the warp's registers and
        // fold zero in where some point was skipped: summed over the lanes
        // where they split the row's positions, each lane's own where they
        // split the output's columns (into data, random signs).
        (
            case(
                "y[i] max= A[i,j] * x[j]",
                &[("y", &[37], 1.0), ("A", &[37, 90], 0.2), ("x", &[90], 1.0)],
                &[("A", "csr")],
            ),
            "f0_hits += __shfl_down_sync",
        ),
        (
            Case {
                schedule: "order=m+n+k",
                ..case(
                    "C[m,n] min= A[m,k] * B[k,n]",
                    &[("C", &[21, 40], 1.0), ("A", &[21, 30], 0.2), ("B", &[30, 40], 1.0)],
                    &[("A", "csr")],
                )
            },
            "if (f0_hits < 30)",
        ),
        (
            case(
                "y[i] max= A[i,j] + B[i,j]",
                &[("y", &[12], 1.0), ("A", &[12, 30], 0.2), ("B", &[12, 30], 0.2)],
                &[("A", "csr"), ("B", "csr")],
            ),
            "if (lane == 0 && f0_hits < 30)",
        ),
        // Full merges over output indices (exp(0) = 1): a register count
        // below them (an array in the kernel did not compile).
        (
            case(
                "Y[i,j] min= exp(T[i,j,k])",
                &[("Y", &[7, 8], 1.0), ("T", &[7, 8, 9], 0.3)],
                &[("T", "dcc")],
            ),
            "int64_t f0_hits = 0;",
        ),
        // reduce=parallel(R): groups of R lanes, 32 / R rows to a warp (37
        // rows: the last warp's groups past them repeat the last row and
        // do not write), shuffles of width R; R = 1 walks a row per thread.
        (
            Case {
                schedule: "reduce=parallel(4)",
                ..case(
                    "y[i] = A[i,j] * x[j]",
                    &[("y", &[37], 1.0), ("A", &[37, 90], 0.2), ("x", &[90], 1.0)],
                    &[("A", "csr")],
                )
            },
            "__shfl_down_sync(0xffffffffu, acc, offset, 4)",
        ),
        (
            Case {
                schedule: "reduce=parallel(1)",
                ..case(
                    "y[i] = A[i,j] * x[j]",
                    &[("y", &[37], 1.0), ("A", &[37, 90], 0.2), ("x", &[90], 1.0)],
                    &[("A", "csr")],
                )
            },
            "if (lane == 0 && owner)",
        ),
        (
            Case {
                schedule: "reduce=parallel(16)",
                ..case(
                    "y[i] = A[i,j] * x[j]",
                    &[("y", &[50], 1.0), ("A", &[50, 20], 0.05), ("x", &[20], 1.0)],
                    &[("A", "dcsr")],
                )
            },
            "const bool owner = warp <",
        ),
        // CSF's root level has a `pos` ([0, len]): its rows are known
        // before the launch too (it was refused). Sparse enough that some
        // slices are empty.
        (
            Case {
                schedule: "reduce=parallel(4)",
                ..case(
                    "y[i] = B[i,j,k] * c[k]",
                    &[("y", &[45], 1.0), ("B", &[45, 10, 12], 0.02), ("c", &[12], 1.0)],
                    &[("B", "csf")],
                )
            },
            "const bool owner = warp <",
        ),
        (
            Case {
                schedule: "reduce=parallel(8) order=m+n+k",
                ..case(
                    "C[m,n] += A[m,k] * B[k,n]",
                    &[("C", &[21, 6], 1.0), ("A", &[21, 30], 0.2), ("B", &[30, 6], 1.0)],
                    &[("A", "csr")],
                )
            },
            "offset, 8)",
        ),
        (
            Case {
                schedule: "reduce=parallel(8)",
                ..case(
                    "y[i] max= A[i,j] * x[j]",
                    &[("y", &[37], 1.0), ("A", &[37, 90], 0.2), ("x", &[90], 1.0)],
                    &[("A", "csr")],
                )
            },
            "f0_hits += __shfl_down_sync(0xffffffffu, f0_hits, offset, 8)",
        ),
        // max= / min= whose counts are one array: in global memory, each
        // update counted atomically, zero folded in by the last block. A
        // column's maximum over CSR (sparse enough that some columns hold
        // only negative entries, where the zeros decide), a row's over COO
        // (warps share rows), DCSR's (rows skipped), a scalar, and a
        // transpose (the counts below CSR's rows, hoisted around them).
        (
            case("y[j] max= A[i,j]", &[("y", &[30], 1.0), ("A", &[40, 30], 0.05)], &[("A", "csr")]),
            "atomicAdd(&fill_hits[i_j], 1ull)",
        ),
        (
            case(
                "y[i] min= A[i,j] * x[j]",
                &[("y", &[37], 1.0), ("A", &[37, 20], 0.1), ("x", &[20], 1.0)],
                &[("A", "coo")],
            ),
            "fill_hits[37]",
        ),
        (
            case("y[i] max= A[i,j]", &[("y", &[6], 1.0), ("A", &[6, 6], 0.3)], &[("A", "dcsr")]),
            "fill_hits[6]",
        ),
        (case("s[] max= A[i,j]", &[("s", &[], 1.0), ("A", &[50, 9], 0.2)], &[("A", "csr")]), "fill_hits[1]"),
        (case("s[] min= A[i,j]", &[("s", &[], 1.0), ("A", &[50, 9], 0.2)], &[("A", "coo")]), "fill_hits[1]"),
        (
            case("Y[j,i] min= A[i,j]", &[("Y", &[12, 35], 1.0), ("A", &[35, 12], 0.1)], &[("A", "csr")]),
            "fill_hits[420]",
        ),
        // Groups of 8 lanes over DCSR's rows: the groups past the last row
        // walk it again and must not count it again.
        (
            Case {
                schedule: "reduce=parallel(8)",
                ..case(
                    "y[i] max= A[i,j] * x[j]",
                    &[("y", &[45], 1.0), ("A", &[45, 3], 0.6), ("x", &[3], 1.0)],
                    &[("A", "dcsr")],
                )
            },
            "if (owner) atomicAdd(&fill_hits[i_i], 1ull);",
        ),
    ];
    for (c, needle) in &cases {
        let (einsum, data, entries, formats) = prepare(c);
        let schedule: Schedule = c.schedule.parse().unwrap();
        let lowered = lower(&einsum, &formats, &entries, &schedule, "k").unwrap();
        let printed =
            print_level(&lowered.kernel, "spindle_level").unwrap_or_else(|e| panic!("{}: {e}", c.statement));
        assert!(printed.source.contains(needle), "{}: {needle}\n{}", c.statement, printed.source);
        // A warp per coordinate of a merge at the top owns its rows.
        if *needle == "else hi = mid;" {
            assert!(!printed.source.contains("atomicAdd"), "{}\n{}", c.statement, printed.source);
        }
        let want = spindle_ir::eval::evaluate(&einsum, &data).unwrap();
        let mut inputs = data.clone();
        for name in &lowered.replaced {
            inputs.remove(name);
        }
        inputs.extend(lowered.arrays.clone());
        if einsum.statement.op == spindle_ir::lang::AssignOp::Assign {
            inputs.remove(&einsum.output().name);
        }
        let got = run_level(&lowered.kernel, &printed, &inputs, &EmulateOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", c.statement, printed.source));
        let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
        for (g, w) in got.iter().zip(want.iter()) {
            assert!(
                (g - w).abs() <= 1e-5 * scale,
                "{}: got {g}, expected {w}\n{}",
                c.statement,
                printed.source
            );
        }
        if nvrtc {
            for arch in [Arch::Sm80, Arch::Sm90] {
                nvrtc::compile(&printed.source, &printed.symbol, arch, &CompileOptions::default())
                    .unwrap_or_else(|e| panic!("{} on {arch}: {e}\n{}", c.statement, printed.source));
            }
        }
    }
    // Sparse outputs stay on the CPU, saying why.
    let c = case(
        "C[i,j] = A[i,j] * B[i,j]",
        &[("C", &[6, 6], 1.0), ("A", &[6, 6], 0.3), ("B", &[6, 6], 0.3)],
        &[("A", "csr"), ("B", "csr"), ("C", "csr")],
    );
    let (einsum, _, entries, formats) = prepare(&c);
    let lowered = lower(&einsum, &formats, &entries, &Schedule::default(), "k").unwrap();
    let err = print_level(&lowered.kernel, "k").unwrap_err().to_string();
    assert!(err.contains("sparse outputs are assembled on the C backend only"), "{err}");
    // Groups of lanes whose rows walk loops of their own before the split
    // (CSF's fibres) would reach the shuffles apart.
    let c = Case {
        schedule: "reduce=parallel(8)",
        ..case(
            "Y[i,j] = T[i,j,k] * v[k]",
            &[("Y", &[7, 8], 1.0), ("T", &[7, 8, 9], 0.3), ("v", &[9], 1.0)],
            &[("T", "csf")],
        )
    };
    let (einsum, _, entries, formats) = prepare(&c);
    let lowered = lower(&einsum, &formats, &entries, &c.schedule.parse().unwrap(), "k").unwrap();
    let err = print_level(&lowered.kernel, "k").unwrap_err().to_string();
    assert!(err.contains("must all reach the shuffles"), "{err}");
}

/// TTV, TTM and MTTKRP over a FROSTT tensor of the shared data folder in
/// CSF, through the driver as a user runs them (f32 and f64, 1 and 2
/// threads). Its dense index space is past the reference evaluator, so each
/// output is checked against a loop over the tensor's entries.
#[test]
fn csf_kernels_on_a_shared_tensor() {
    use spindle::{CBackend, ElemType, Input, Problem, Schedule};
    use spindle_formats::DType;

    let Some(path) = spindle_formats::data::shared_file("tensors/med.tns") else {
        eprintln!("SKIPPED: csf_kernels_on_a_shared_tensor: ../shared/data/tensors/med.tns not found");
        return;
    };
    // Its first 256 slices keep the dense outputs small (TTM's is i x j x r).
    let all: Coo<f64, i64> = spindle_formats::io::read_tns(&path).unwrap();
    let keep: Vec<usize> = (0..all.nnz()).filter(|&e| all.crd[0][e] < 256).collect();
    let crd = (0..3).map(|d| keep.iter().map(|&e| all.crd[d][e]).collect()).collect();
    let val = keep.iter().map(|&e| all.val[e]).collect();
    let t = Coo::new(vec![256, all.shape[1], all.shape[2]], crd, val).unwrap();
    assert!(t.nnz() > 1000, "{} entries", t.nnz());
    let [ni, nj, nk] = [t.shape[0], t.shape[1], t.shape[2]];
    let r = 4;
    let v = dense(&[nk], 11);
    let u = dense(&[nk, r], 12);
    let (b, c) = (dense(&[nj, r], 13), dense(&[nk, r], 14));
    // The oracle: one pass over the entries.
    let mut ttv = ArrayD::<f64>::zeros(vec![ni, nj]);
    let mut ttm = ArrayD::<f64>::zeros(vec![ni, nj, r]);
    let mut mttkrp = ArrayD::<f64>::zeros(vec![ni, r]);
    for e in 0..t.nnz() {
        let (i, j, k, x) = (t.crd[0][e] as usize, t.crd[1][e] as usize, t.crd[2][e] as usize, t.val[e]);
        ttv[[i, j]] += x * v[[k]];
        for q in 0..r {
            ttm[[i, j, q]] += x * u[[k, q]];
            mttkrp[[i, q]] += x * b[[j, q]] * c[[k, q]];
        }
    }
    // (statement, its dense operands, the oracle's output)
    type CsfCase<'a> = (&'a str, Vec<(&'a str, &'a ArrayD<f64>)>, &'a ArrayD<f64>);
    let cases: [CsfCase; 3] = [
        ("Y[i,j] = T[i,j,k] * v[k]", vec![("v", &v)], &ttv),
        ("Y[i,j,q] = T[i,j,k] * U[k,q]", vec![("U", &u)], &ttm),
        ("Y[i,q] = T[i,j,k] * B[j,q] * C[k,q]", vec![("B", &b), ("C", &c)], &mttkrp),
    ];
    let backend = CBackend::new();
    for (statement, operands, want) in &cases {
        for dtype in [DType::F32, DType::F64] {
            let mut problem = Problem::new(*statement)
                .tensor("T", t.clone())
                .tensor("Y", Input::shape(want.shape(), ElemType::Value(dtype)))
                .format("T", "csf");
            for (name, data) in operands {
                problem =
                    problem.tensor(*name, Input::from((*data).clone()).with_dtype(ElemType::Value(dtype)));
            }
            let prepared = problem.dtype("T", ElemType::Value(dtype)).prepare().unwrap();
            for threads in [1, 2] {
                let schedule: Schedule = format!("path=levels threads={threads}").parse().unwrap();
                let got = prepared.compile(&backend, &schedule).unwrap().run().unwrap();
                let err = spindle::check::max_rel_error(&got, want);
                let tolerance = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
                assert!(err <= tolerance, "{statement} {dtype:?} on {threads} threads: error {err:.2e}");
            }
        }
    }
}

/// Random patterns, formats, output formats and loop orders: every
/// combination the lowering takes matches the reference on 1 and 2 threads
/// (a sparse output's structure checked level by level); every one it
/// refuses says why at a place in the statement.
#[test]
fn random_formats_and_orders_match_the_reference_or_are_refused_with_a_reason() {
    type TensorList<'a> = &'a [(&'a str, &'a [usize], f64)];
    let statements: [(&str, TensorList); 5] = [
        ("y[i] = A[i,j] * x[j]", &[("y", &[13], 1.0), ("A", &[13, 17], 0.2), ("x", &[17], 1.0)]),
        ("C[i,j] = A[i,j] + B[i,j]", &[("C", &[11, 14], 1.0), ("A", &[11, 14], 0.2), ("B", &[11, 14], 0.3)]),
        ("C[i,j] = A[i,j] * B[i,j]", &[("C", &[11, 14], 1.0), ("A", &[11, 14], 0.4), ("B", &[11, 14], 0.4)]),
        ("C[i,j] = A[i,k] * B[k,j]", &[("C", &[9, 12], 1.0), ("A", &[9, 10], 0.3), ("B", &[10, 12], 0.3)]),
        ("C[i,j] = A[i,k] * D[k,j]", &[("C", &[9, 12], 1.0), ("A", &[9, 10], 0.3), ("D", &[10, 12], 1.0)]),
    ];
    let inputs = ["csr", "csc", "dcsr", "dcsc", "coo", "csf"];
    let outputs = [None, Some("csr"), Some("dcsr"), Some("coo"), Some("csc")];
    let mut rng = ChaCha8Rng::seed_from_u64(2026);
    let (mut ran, mut refused) = (0, 0);
    for _ in 0..120 {
        let (statement, tensors) = statements[rng.random_range(0..statements.len())];
        let mut formats: Vec<(&'static str, &'static str)> = tensors
            .iter()
            .filter(|(_, _, density)| *density < 1.0)
            .map(|(name, _, _)| (*name, inputs[rng.random_range(0..inputs.len())]))
            .collect();
        if let Some(out) = outputs[rng.random_range(0..outputs.len())] {
            formats.push(("C", out));
        }
        let c = case(statement, tensors, &formats);
        let (einsum, mut data, entries, formats) = prepare(&c);
        let sparse_out = formats.contains_key(&einsum.output().name);
        data.remove(&einsum.output().name);
        let mut order: Vec<String> = einsum.indices.iter().map(|i| i.name.clone()).collect();
        let schedule = match rng.random_range(0..3) {
            0 | 1 => Schedule::default(),
            _ => {
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.random_range(0..=i));
                }
                format!("order={}", order.join("+")).parse().unwrap()
            }
        };
        let label = format!("{statement} {formats:?} {schedule}");
        let lowered = match lower(&einsum, &formats, &entries, &schedule, "k") {
            Ok(lowered) => lowered,
            Err(d) => {
                assert!(!d.message.is_empty() && d.span.end <= statement.len(), "{label}: {d:?}");
                refused += 1;
                continue;
            }
        };
        let want = spindle_ir::eval::evaluate(&einsum, &data).unwrap();
        let mut inputs = data.clone();
        for name in &lowered.replaced {
            inputs.remove(name);
        }
        inputs.extend(lowered.arrays.clone());
        let compiled = CLevelKernel::compile_with(&lowered.kernel, &Compiler::from_env(), 0)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        for threads in [1, 2] {
            let got =
                compiled.run(&inputs, threads).unwrap_or_else(|e| panic!("{label}: {e}\n{}", lowered.kernel));
            for (g, w) in got.iter().zip(want.iter()) {
                assert!(
                    (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                    "{label} on {threads}: {g} vs {w}\n{}",
                    lowered.kernel
                );
            }
            if sparse_out {
                let stored = compiled.run_assembled(&inputs, threads).unwrap().to_coo().unwrap().nnz();
                assert_eq!(stored, want.iter().filter(|w| **w != 0.0).count(), "{label}: stored entries");
            }
        }
        ran += 1;
    }
    eprintln!("{ran} ran, {refused} refused");
    assert!(ran >= 30 && refused >= 10, "{ran} ran, {refused} refused");
}

/// `workspace=hash`: the row's coordinates gathered in a growing hash
/// table and sorted when drained, into CSR, COO and DCSR, on 1 and 2
/// threads; `auto` takes it for a level too wide for a dense workspace.
#[test]
fn a_hash_workspace_gathers_rows_too_wide_for_a_dense_one() {
    for out in ["csr", "coo", "dcsr"] {
        for (shape_b, density) in [([60, 38], 0.08), ([60, 2000], 0.05)] {
            let mut c = case(
                "C[i,j] = A[i,k] * B[k,j]",
                &[("C", &[45, shape_b[1]], 1.0), ("A", &[45, 60], 0.2), ("B", &shape_b, density)],
                &[("A", "csr"), ("B", "csr"), ("C", out)],
            );
            c.schedule = "workspace=hash";
            let (tree, source) = assembles(&c);
            assert!(tree.contains("workspace C over j (hash)"), "{tree}");
            assert!(source.contains("spindle_ism_insert"), "{source}");
        }
    }
    // A level of 2^24 + 1 columns is too wide for a dense workspace.
    let wide = (1usize << 24) + 1;
    let decls = declarations(&[("C", &[3, wide], "f64"), ("A", &[3, 4], "f64"), ("B", &[4, wide], "f64")]);
    let einsum = check(&parse("C[i,j] = A[i,k] * B[k,j]").unwrap(), &decls).unwrap();
    let a = Coo::new(vec![3, 4], vec![vec![0, 2], vec![1, 3]], vec![1.0, 2.0]).unwrap();
    let b = Coo::new(vec![4, wide], vec![vec![1, 3], vec![7, wide as i64 - 1]], vec![3.0, 4.0]).unwrap();
    let entries = BTreeMap::from([("A".to_string(), a), ("B".to_string(), b)]);
    let formats: BTreeMap<String, FormatSpec> =
        ["A", "B", "C"].iter().map(|n| (n.to_string(), FormatSpec::Csr)).collect();
    let lowered = lower(&einsum, &formats, &entries, &Schedule::default(), "k").unwrap();
    assert!(lowered.kernel.to_string().contains("(hash)"), "{}", lowered.kernel);
    let mut inputs = Tensors::new();
    inputs.extend(lowered.arrays.clone());
    let compiled = CLevelKernel::compile_with(&lowered.kernel, &Compiler::from_env(), 0).unwrap();
    let coo = compiled.run_assembled(&inputs, 2).unwrap().to_coo().unwrap();
    assert_eq!(
        (coo.crd.clone(), coo.val.clone()),
        (vec![vec![0, 2], vec![7, wide as i64 - 1]], vec![3.0, 8.0])
    );
}

/// A stored operand read at two subscripts walks a copy for the second
/// (`A[i,k] * A2[j,k]`): the Gram matrix by rows and A squared, which were
/// refused ("read at two subscripts"); the same subscripts twice stay one
/// operand. The copy stores first the dimension the first read has bound
/// (the Gram matrix's k: a copy in CSC, whose column k the walk locates
/// under A's entry), so nothing merges A with its copy (a copy in A's own
/// format merged every row j with A's row i: maximal fusion of `y = A^T
/// x; z = A y` took minutes on ca-CondMat).
#[test]
fn a_stored_operand_read_at_two_subscripts_walks_a_copy() {
    let a: &[(&str, &[usize], f64)] = &[("C", &[9, 9], 1.0), ("A", &[9, 9], 0.3)];
    let ata: &[(&str, &[usize], f64)] = &[("z", &[9], 1.0), ("A", &[9, 9], 0.3), ("x", &[9], 1.0)];
    for (statement, tensors, format) in [
        ("C[i,j] = A[i,k] * A[j,k]", a, "csr"),
        ("C[i,j] = A[i,k] * A[k,j]", a, "csr"),
        ("C[i,j] = A[i,k] * A[j,k]", a, "dcsr"),
        ("C[i,j] = A[i,k] * A[j,k]", a, "coo"),
        ("C[i,j] = A[i,k] * A[j,k]", a, "csc"),
        ("z[i] = A[i,j] * A[i1,j] * x[i1]", ata, "csr"),
        ("z[i] = A[i,j] * A[i1,j] * x[i1]", ata, "groupcoo:dim=0,g=2"),
        // The copy's row located, not merged with every stored row.
        ("C[i,k] = A[i,j] * A[j,k]", a, "dcsr"),
        ("C[i,k] = A[i,j] * A[j,k]", a, "coo"),
        ("C[i,j] = A[k,i] * A[k,j]", a, "coo"),
        // Both dimensions bound, in the order A's walk binds them.
        ("z[i] = A[i,j] * A[j,i] * x[j]", ata, "csr"),
        ("z[i] = A[i,j] * A[j,i] * x[j]", ata, "dcsr"),
    ] {
        let tree = runs(&case(statement, tensors, &[("A", format)]));
        assert!(tree.contains("A2") && !tree.contains("{A, A2}"), "{statement} over {format}:\n{tree}");
    }
    let tree = runs(&case("C[i,j] = A[i,j] * A[i,j]", a, &[("A", "csr")]));
    assert!(!tree.contains("A2"), "{tree}");
}

/// A stored operand read with an index repeated (its diagonal) is walked
/// as a product with the identity, `A[i,i2] * Eye[i,i2]`: the trace, the
/// diagonal, a function of it, rows scaled by it, in row- and
/// column-major formats, and beside a second read of the same operand
/// (they were refused: "`i` indexes two dimensions of `A`"). Under `max=`
/// the identity's zeros would count, so the refusal stands.
#[test]
fn a_diagonal_read_walks_the_identity_beside_the_operand() {
    let a = ("A", &[12usize, 12][..], 0.6);
    type Operands<'a> = Vec<(&'a str, &'a [usize], f64)>;
    let cases: [(&str, Operands, &str); 10] = [
        ("s = A[i,i]", vec![("s", &[], 1.0), a], "csr"),
        ("y[i] = A[i,i]", vec![("y", &[12], 1.0), a], "csr"),
        ("y[i] = A[i,i]", vec![("y", &[12], 1.0), a], "csc"),
        ("y[i] = A[i,i]", vec![("y", &[12], 1.0), a], "dcsr"),
        ("y[i] = exp(A[i,i]) + x[i]", vec![("y", &[12], 1.0), a, ("x", &[12], 1.0)], "csr"),
        ("C[i,j] = A[i,i] * D[i,j]", vec![("C", &[12, 5], 1.0), a, ("D", &[12, 5], 1.0)], "csr"),
        ("C[i,j] = A[i,i] * A[i,j]", vec![("C", &[12, 12], 1.0), a], "csr"),
        // Column-major by its level order, not its name.
        ("y[i] = A[i,i]", vec![("y", &[12], 1.0), a], "dc:modes=1-0"),
        ("Y[i,k] = T[i,i,k]", vec![("Y", &[12, 5], 1.0), ("T", &[12, 12, 5], 0.5)], "csf:modes=1-2-0"),
        // A dense operand's diagonal beside a stored one's.
        ("y[i] = A[i,i] * D[i,i]", vec![("y", &[12], 1.0), a, ("D", &[12, 12], 1.0)], "csr"),
    ];
    for (statement, tensors, format) in &cases {
        let stored = if statement.contains('T') { "T" } else { "A" };
        let tree = runs(&case(statement, tensors, &[(stored, format)]));
        assert!(tree.contains("Eye"), "{statement} over {format}:\n{tree}");
    }
}

/// `max=` / `min=` over stored operands: the walk skips points where an
/// operand is zero, and the value there is zero, which the reduction sees:
/// each output element counts its updates and folds zero in where they were
/// fewer than its points (a count in a register below loops over every
/// output coordinate; per element where a loop may skip output rows). Into
/// data (random signs, so the zero decides many elements), on 1 and 2
/// threads, against the reference. A diagonal's copy of its index is no
/// point of its own. Each was refused ("iteration skips zeros").
#[test]
fn max_and_min_over_stored_operands_see_the_zeros_they_skip() {
    type Operands<'a> = Vec<(&'a str, &'a [usize], f64)>;
    type Formats<'a> = Vec<(&'a str, &'a str)>;
    let (y, a, x) = (("y", &[30usize][..], 1.0), ("A", &[30usize, 20][..], 0.15), ("x", &[20usize][..], 1.0));
    let cases: Vec<(&str, Operands, Formats, &str)> = vec![
        ("y[i] max= A[i,j] * x[j]", vec![y, a, x], vec![("A", "csr")], "f0_hits <"),
        ("y[i] min= A[i,j] * x[j]", vec![y, a, x], vec![("A", "dcsr")], "f0_hits["),
        ("y[i] max= A[i,j] * x[j]", vec![y, a, x], vec![("A", "coo")], "f0_hits["),
        ("y[i] max= A[i,j] * x[j]", vec![y, a, x], vec![("A", "csc")], "f0_hits["),
        ("y[i] min= A[i,j] * x[j]", vec![y, a, x], vec![("A", "groupcoo:dim=0,g=2")], "f0_hits["),
        ("y[i] max= A[i,j] * x[j]", vec![y, a, x], vec![("A", "ell")], "f0_hits"),
        // Rows and columns that store every coordinate, in formats that
        // pad (the padding repeats a coordinate with 0, which a maximum
        // took as an entry: y = 0 over a row of negatives).
        ("y[i] max= A[i,j]", vec![y, ("A", &[30, 5], 0.9)], vec![("A", "groupcoo:dim=0,g=4")], "// padding"),
        ("y[i] min= A[i,j]", vec![y, ("A", &[30, 5], 0.9)], vec![("A", "groupcoo:dim=0,g=2")], "// padding"),
        ("z[j] max= A[i,j]", vec![("z", &[5], 1.0), ("A", &[30, 5], 0.9)], vec![("A", "ell")], "// padding"),
        // Rows mostly empty.
        ("y[i] max= A[i,j]", vec![y, ("A", &[30, 20], 0.02)], vec![("A", "csr")], "f0_hits <"),
        ("s min= A[i,j]", vec![("s", &[], 1.0), a], vec![("A", "csr")], "f0_hits"),
        (
            "C[i,n] max= A[i,k] * B[k,n]",
            vec![("C", &[30, 7], 1.0), ("A", &[30, 20], 0.15), ("B", &[20, 7], 1.0)],
            vec![("A", "csr")],
            "f0_hits",
        ),
        // A union and an intersection of two stored operands.
        (
            "y[i] max= A[i,j] + B[i,j]",
            vec![y, a, ("B", &[30, 20], 0.1)],
            vec![("A", "csr"), ("B", "csr")],
            "f0",
        ),
        (
            "y[i] min= A[i,j] * B[i,j]",
            vec![y, a, ("B", &[30, 20], 0.5)],
            vec![("A", "csr"), ("B", "dcsr")],
            "f0",
        ),
        (
            "Y[i,j] max= T[i,j,k] * v[k]",
            vec![("Y", &[6, 7], 1.0), ("T", &[6, 7, 8], 0.2), ("v", &[8], 1.0)],
            vec![("T", "csf")],
            "f0_hits[",
        ),
        // Where the value at a zero is not zero (exp, a dense addend), a
        // full walk visits every point: nothing to fold, counted in a
        // register below the full merges (their rows were counted in an
        // array shadowing the row's index, folding zero into every other).
        ("y[i] min= exp(A[i,j])", vec![y, a], vec![("A", "dcsr")], "f0_hits <"),
        (
            "Y[i,j] min= exp(T[i,j,k])",
            vec![("Y", &[6, 7], 1.0), ("T", &[6, 7, 8], 0.2)],
            vec![("T", "csf")],
            "f0_hits <",
        ),
        ("y[i] max= A[i,j] + D[i,j]", vec![y, a, ("D", &[30, 20], 1.0)], vec![("A", "dcsr")], "f0_hits <"),
        // Diagonals: one point per row, and the trace's n.
        ("y[i] max= A[i,i]", vec![y, ("A", &[30, 30], 0.5)], vec![("A", "csr")], "< 1)"),
        ("s min= A[i,i]", vec![("s", &[], 1.0), ("A", &[30, 30], 0.9)], vec![("A", "csr")], "< 30)"),
    ];
    for (statement, tensors, formats, needle) in &cases {
        let mut c = case(statement, tensors, formats);
        c.formats = formats.clone();
        let (einsum, _, entries, formats_) = prepare(&c);
        let lowered = lower(&einsum, &formats_, &entries, &Schedule::default(), "k").unwrap();
        let source = spindle_c::level::print_level(&lowered.kernel, "k").unwrap();
        assert!(source.contains(needle), "{statement} over {formats:?}: {needle}\n{source}");
        runs(&c);
    }
    // A loop order that visits the summed index outside an output index:
    // the count is per element of the inner output index.
    let mut spmm = case(
        "C[i,n] max= A[i,k] * B[k,n]",
        &[("C", &[30, 7], 1.0), ("A", &[30, 20], 0.15), ("B", &[20, 7], 1.0)],
        &[("A", "csr")],
    );
    spmm.schedule = "order=i+k+n";
    runs(&spmm);
}

/// A second read that binds every dimension (`A[j,i]` beside `A[i,j]`)
/// walks a copy stored in the order the first read binds them (CSC for
/// CSR), merged with it: the symmetric part runs (it was refused: no loop
/// order fits both). Where the copy cannot be walked either (A in ELL,
/// whose padded rows are not merged), the refusal names the reads as
/// written, not the copy.
#[test]
fn a_reread_of_every_dimension_walks_a_copy_in_the_first_reads_order() {
    let a: &[(&str, &[usize], f64)] = &[("C", &[6, 6], 1.0), ("A", &[6, 6], 0.3)];
    for format in ["csr", "dcsr", "csc"] {
        let tree = runs(&case("C[i,j] = A[i,j] + A[j,i]", a, &[("A", format)]));
        assert!(tree.contains("A2"), "{format}:\n{tree}");
    }
    let c = case("C[i,j] = A[i,j] + A[j,i]", a, &[("A", "ell")]);
    let (einsum, _, entries, formats) = prepare(&c);
    let err = lower(&einsum, &formats, &entries, &Schedule::default(), "k").unwrap_err();
    let text = err.render(c.statement, false);
    assert!(text.contains("`A` is read at two subscripts"), "{text}");
    assert!(!text.contains("A2"), "{text}");
}
