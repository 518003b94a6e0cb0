//! Programs and three-address form (paper 003 §4.1.3) on the paper's four
//! kernels: the split text, the temporaries' shapes, and the split program
//! evaluating to the original statement's result on random data.

use ndarray::ArrayD;
use spindle_ir::eval::evaluate;
use spindle_ir::lang::einsum::declarations;
use spindle_ir::lang::{check, parse};
use spindle_ir::program::{evaluate_program, parse_program, split_program};
use spindle_ir::react::{
    dependences, forest_text, index_trees, order_loops, propagate, reduce_dimensions, trie_fuse, unfused,
};
use spindle_ir::tensor::{TensorValue, Tensors};

/// Seeded values in ±[0.5, 1.5).
fn data(shape: &[usize], seed: u64) -> TensorValue {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    TensorValue::Values(ArrayD::from_shape_fn(shape.to_vec(), |_| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let u = (state >> 11) as f64 / (1u64 << 53) as f64;
        if u < 0.5 { -0.5 - u } else { u }
    }))
}

/// Splits `statement`, compares the text with `want`, and evaluates both
/// forms on random inputs.
fn splits(statement: &str, tensors: &[(&str, &[usize])], want: &[&str]) {
    let decls: Vec<(&str, &[usize], &str)> = tensors.iter().map(|(n, s)| (*n, *s, "f64")).collect();
    let decls = declarations(&decls);
    let program = split_program(&parse_program(statement).unwrap(), &decls).unwrap();
    let text: Vec<String> = program.statements.iter().map(|e| e.statement.to_string()).collect();
    assert_eq!(text, want, "{statement}");
    let output = program.statements.last().unwrap().output().name.clone();
    let mut inputs = Tensors::new();
    for (seed, (name, shape)) in tensors.iter().enumerate() {
        if *name != output {
            inputs.insert(name.to_string(), data(shape, seed as u64 + 1));
        }
    }
    let whole = evaluate(&check(&parse(statement).unwrap(), &decls).unwrap(), &inputs).unwrap();
    let written = evaluate_program(&program, &inputs).unwrap();
    let TensorValue::Values(split) = &written[&output] else { panic!("values") };
    let scale = whole.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    for (a, b) in split.iter().zip(whole.iter()) {
        assert!((a - b).abs() <= 1e-12 * scale, "{statement}: {a} vs {b}");
    }
}

#[test]
fn sddmm_stores_the_dense_product_in_a_temporary() {
    splits(
        "A[i,j] = B[i,j] * (C[i,k] * D[k,j])",
        &[("A", &[6, 5]), ("B", &[6, 5]), ("C", &[6, 4]), ("D", &[4, 5])],
        &["T1[i,j] = C[i,k] * D[k,j]", "A[i,j] = B[i,j] * T1[i,j]"],
    );
}

#[test]
fn gnn_kernel_1_multiplies_left_to_right() {
    splits(
        "Z[i,j] = A[i,k] * X[k,h] * W[h,j]",
        &[("Z", &[6, 3]), ("A", &[6, 7]), ("X", &[7, 4]), ("W", &[4, 3])],
        &["T1[i,h] = A[i,k] * X[k,h]", "Z[i,j] = T1[i,h] * W[h,j]"],
    );
}

#[test]
fn gnn_kernel_2_follows_the_parentheses() {
    splits(
        "Z[i,j] = (A[i,h] * (X[i,k] * Y[k,h])) * Y[h,j]",
        &[("Z", &[5, 5]), ("A", &[5, 5]), ("X", &[5, 5]), ("Y", &[5, 5])],
        &["T1[i,h] = X[i,k] * Y[k,h]", "T2[i,h] = A[i,h] * T1[i,h]", "Z[i,j] = T2[i,h] * Y[h,j]"],
    );
}

#[test]
fn mttkrp_keeps_the_indices_used_later() {
    splits(
        "A[i,r] = X[i,j,k] * C[k,r] * B[j,r]",
        &[("A", &[4, 3]), ("X", &[4, 5, 6]), ("C", &[6, 3]), ("B", &[5, 3])],
        &["T1[i,j,r] = X[i,j,k] * C[k,r]", "A[i,r] = T1[i,j,r] * B[j,r]"],
    );
}

#[test]
fn several_statements_infer_undeclared_outputs() {
    let decls = declarations(&[
        ("A", &[6, 7], "f32"),
        ("X", &[7, 4], "f32"),
        ("W", &[4, 3], "f32"),
        ("Z", &[6, 3], "f32"),
    ]);
    let program =
        split_program(&parse_program("H[i,h] = A[i,k] * X[k,h];\nZ[i,j] = H[i,h] * W[h,j]").unwrap(), &decls)
            .unwrap();
    assert_eq!(program.temporaries["H"].shape, [6, 4]);
    assert_eq!(program.statements.len(), 2);
}

#[test]
fn errors_point_into_the_whole_program() {
    let src = "H[i,h] = A[i,k] * X[k,h]; Z[i,j] = H[i,h] * ";
    let err = parse_program(src).unwrap_err();
    assert!(err.span.start >= src.find("Z[").unwrap(), "{err:?}");
    let decls = declarations(&[("A", &[6, 7], "f32")]);
    let err = split_program(&parse_program("H[i,h] = A[i,k] * 2").unwrap(), &decls).unwrap_err();
    let text = err.render("H[i,h] = A[i,k] * 2", false);
    assert!(
        text.contains("no operand of `H` fixes the extent of `h`") && text.contains("declare `H`"),
        "{text}"
    );
    // An operand nobody declared is the reason, rather than the extent it
    // would have fixed; so is one a later statement writes.
    for src in ["H[i,h] = A[i,k] * X[k,h]", "Z[i,j] = H[i,h] * A[h,j]; H[i,h] = A[i,k] * A[k,h]"] {
        let err = split_program(&parse_program(src).unwrap(), &decls).unwrap_err();
        let unknown = if src.starts_with('H') { "X" } else { "H" };
        assert_eq!(err.message, format!("unknown tensor `{unknown}`"), "{src}");
        assert_eq!(&src[err.span.start..err.span.end], unknown, "{src}");
    }
}

/// An undeclared output takes its extents as a single statement's does:
/// from `where i < N`, and from an index alone inside an index tensor
/// (both were "no operand of `y` fixes the extent of `i`").
#[test]
fn a_temporary_takes_where_extents_and_index_tensor_extents() {
    let decls = declarations(&[("x", &[4], "f32"), ("X", &[6], "i32")]);
    for (src, shape) in [
        ("y[i,j] = 1 where i < 3, j < 5; z[i,j] = y[i,j] * 2", vec![3, 5]),
        ("y[i] = x[X[i]]; z[i] = y[i] * 2", vec![6]),
    ] {
        let program = split_program(&parse_program(src).unwrap(), &decls).unwrap();
        assert_eq!(program.temporaries["y"].shape, shape, "{src}");
        assert_eq!(program.temporaries["z"].shape, shape, "{src}");
    }
}

/// Index trees and the dependence graph (paper 003 §4.1) of GNN kernel 2
/// with A in CSR and of MTTKRP with X in CSF.
#[test]
fn index_trees_mark_sparse_loops_and_the_graph_links_the_statements() {
    let decls = declarations(&[
        ("Z", &[5, 5], "f32"),
        ("A", &[5, 5], "f32"),
        ("X", &[5, 5], "f32"),
        ("Y", &[5, 5], "f32"),
    ]);
    let program =
        split_program(&parse_program("Z[i,j] = (A[i,h] * (X[i,k] * Y[k,h])) * Y[h,j]").unwrap(), &decls)
            .unwrap();
    let formats = std::collections::BTreeMap::from([("A".to_string(), "csr".parse().unwrap())]);
    let trees = index_trees(&program, &formats);
    let text: Vec<String> = trees.iter().map(|t| t.to_string()).collect();
    assert_eq!(
        text,
        [
            "for i: for h: for k: T1[i,h] = X[i,k] * Y[k,h]",
            "for i: for h in A: T2[i,h] = A[i,h] * T1[i,h]",
            "for i: for j: for h: Z[i,j] = T2[i,h] * Y[h,j]",
        ]
    );
    // Propagated: T1 only where A is stored (backward, the SDDMM inside),
    // and T2 holds A's pattern, so the last product walks it (forward).
    let text: Vec<String> = propagate(&program, &trees, &formats).iter().map(|t| t.to_string()).collect();
    assert_eq!(
        text,
        [
            "for i: for h in A: for k: T1[i,h] = X[i,k] * Y[k,h]",
            "for i: for h in A: T2[i,h] = A[i,h] * T1[i,h]",
            "for i: for j: for h in A: Z[i,j] = T2[i,h] * Y[h,j]",
        ]
    );
    let edges: Vec<String> = dependences(&program).iter().map(|d| d.to_string()).collect();
    assert_eq!(edges, ["S1 -> S2 flow T1", "S1 -> S3 input Y", "S2 -> S3 flow T2"]);

    let decls = declarations(&[
        ("A", &[4, 3], "f32"),
        ("X", &[4, 5, 6], "f32"),
        ("C", &[6, 3], "f32"),
        ("B", &[5, 3], "f32"),
    ]);
    let program =
        split_program(&parse_program("A[i,r] = X[i,j,k] * C[k,r] * B[j,r]").unwrap(), &decls).unwrap();
    let formats = std::collections::BTreeMap::from([("X".to_string(), "csf".parse().unwrap())]);
    let trees = index_trees(&program, &formats);
    let text: Vec<String> = propagate(&program, &trees, &formats).iter().map(|t| t.to_string()).collect();
    assert_eq!(
        text,
        [
            "for i in X: for j in X: for r: for k in X: T1[i,j,r] = X[i,j,k] * C[k,r]",
            "for i in X: for r: for j in X: A[i,r] = T1[i,j,r] * B[j,r]",
        ]
    );
    // Through a chain of temporaries (SDDMM into SpMM): `S` is computed
    // where `T1` is, at A's entries, so the last product walks them too
    // (a statement that walks A without reading it passes A's pattern on).
    let decls = declarations(&[("A", &[5, 5], "f32"), ("X", &[5, 3], "f32"), ("Y", &[5, 3], "f32")]);
    let program = split_program(
        &parse_program("S[i,j] = A[i,j]*X[i,k]*Y[j,k]; Z[i,n] = S[i,j]*X[j,n]").unwrap(),
        &decls,
    )
    .unwrap();
    let formats = std::collections::BTreeMap::from([("A".to_string(), "csr".parse().unwrap())]);
    let text: Vec<String> = propagate(&program, &index_trees(&program, &formats), &formats)
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(
        text,
        [
            "for i: for j in A: for k: T1[i,j,k] = A[i,j] * X[i,k]",
            "for i: for j in A: for k: S[i,j] = T1[i,j,k] * Y[j,k]",
            "for i: for n: for j in A: Z[i,n] = S[i,j] * X[j,n]",
        ]
    );
    // A sum needs every entry: nothing propagates through it.
    let decls = declarations(&[
        ("A", &[4, 5], "f32"),
        ("B", &[4, 5], "f32"),
        ("C", &[4, 3], "f32"),
        ("D", &[3, 5], "f32"),
    ]);
    let program =
        split_program(&parse_program("T[i,j] = C[i,k] * D[k,j]; A[i,j] = B[i,j] + T[i,j]").unwrap(), &decls)
            .unwrap();
    let formats = std::collections::BTreeMap::from([("B".to_string(), "csr".parse().unwrap())]);
    let trees = index_trees(&program, &formats);
    assert_eq!(propagate(&program, &trees, &formats), trees);
    // A statement that writes what an earlier one read (anti), one that
    // writes the same tensor again (output: `+=`, since a tensor written
    // again with `=` is renamed), two that read one (input).
    let decls = declarations(&[("A", &[4], "f32"), ("B", &[4], "f32")]);
    let program = split_program(
        &parse_program("B[i] = A[i] * 2; A[i] = B[i] * B[i]; B[i] += A[i] * A[i]").unwrap(),
        &decls,
    )
    .unwrap();
    let edges: Vec<String> = dependences(&program).iter().map(|d| d.to_string()).collect();
    assert_eq!(
        edges,
        [
            "S1 -> S2 flow B",
            "S1 -> S2 anti A",
            "S1 -> S3 output B",
            "S1 -> S3 input A",
            "S2 -> S3 flow A",
            "S2 -> S3 anti B"
        ]
    );
}

/// `src` split, its index trees propagated with `formats`, trie-fused.
fn fused_forest(
    src: &str,
    decls: &[(&str, &[usize], &str)],
    formats: &[(&str, &str)],
) -> (spindle_ir::program::Program, Vec<spindle_ir::react::Node>) {
    let program = split_program(&parse_program(src).unwrap(), &declarations(decls)).unwrap();
    let formats = formats.iter().map(|(t, f)| (t.to_string(), f.parse().unwrap())).collect();
    let trees = propagate(&program, &index_trees(&program, &formats), &formats);
    let forest = trie_fuse(&program, unfused(&program, &trees), &formats);
    (program, forest)
}

/// Trie-like fusion (Algorithms 1 and 2): only common prefixes fuse.
#[test]
fn trie_fusion_shares_common_prefix_loops_only() {
    let fused = |src: &str, decls: &[(&str, &[usize], &str)], formats: &[(&str, &str)]| {
        forest_text(&fused_forest(src, decls, formats).1)
    };
    // SDDMM: the k sum completes before the product with B (no reduction
    // redundancy), inside the shared i and j loops over B's pattern.
    let sddmm = fused(
        "A[i,j] = B[i,j] * (C[i,k] * D[k,j])",
        &[("A", &[4, 5], "f32"), ("B", &[4, 5], "f32"), ("C", &[4, 3], "f32"), ("D", &[3, 5], "f32")],
        &[("B", "csr")],
    );
    assert_eq!(
        sddmm,
        "for i\n  for j in B\n    for k\n      S1: T1[i,j] = C[i,k] * D[k,j]\n    S2: A[i,j] = B[i,j] * T1[i,j]\n"
    );
    // GNN kernel 1: rows shared, then each statement's own loops (T1 a row
    // at a time, not the whole intermediate matrix).
    let gnn = fused(
        "Z[i,j] = A[i,k] * X[k,h] * W[h,j]",
        &[("Z", &[6, 3], "f32"), ("A", &[6, 7], "f32"), ("X", &[7, 4], "f32"), ("W", &[4, 3], "f32")],
        &[("A", "csr")],
    );
    assert_eq!(
        gnn,
        "for i\n  for h\n    for k in A\n      S1: T1[i,h] = A[i,k] * X[k,h]\n  for j\n    for h\n      S2: Z[i,j] = T1[i,h] * W[h,j]\n"
    );
    // The paper's Listing 9: the scalar statement between two i loops
    // cannot fuse with them (no loop), and fusing the first and the third
    // without it would make a dependence cycle: all three stay apart.
    let apart = fused(
        "a = A[i] * B[i]; c = b * a; D[i] = c * A[i]",
        &[("A", &[4], "f32"), ("B", &[4], "f32"), ("b", &[], "f32"), ("D", &[4], "f32")],
        &[],
    );
    assert_eq!(apart, "for i\n  S1: a = A[i] * B[i]\nS2: c = b * a\nfor i\n  S3: D[i] = c * A[i]\n");
    // Without the scalar in between, two readers of A share its loop.
    let shared = fused(
        "D[i] = A[i] * B[i]; E[i] = A[i] * B[i] * 2",
        &[("A", &[4], "f32"), ("B", &[4], "f32"), ("D", &[4], "f32"), ("E", &[4], "f32")],
        &[],
    );
    assert_eq!(
        shared,
        "for i\n  S1: D[i] = A[i] * B[i]\n  S2: T1[i] = A[i] * B[i]\n  S3: E[i] = T1[i] * 2\n"
    );
}

/// Dimension reduction (Algorithm 3): temporaries lose the dimensions of the
/// loops shared by their producer and every consumer.
#[test]
fn temporaries_keep_only_dimensions_not_shared_with_their_users() {
    let reduced = |src: &str, decls: &[(&str, &[usize], &str)], formats: &[(&str, &str)]| {
        let (program, forest) = fused_forest(src, decls, formats);
        reduce_dimensions(&program, &forest)
    };
    // SDDMM: T1 is one value per (i, j).
    let sddmm = reduced(
        "A[i,j] = B[i,j] * (C[i,k] * D[k,j])",
        &[("A", &[4, 5], "f32"), ("B", &[4, 5], "f32"), ("C", &[4, 3], "f32"), ("D", &[3, 5], "f32")],
        &[("B", "csr")],
    );
    assert_eq!(sddmm["T1"], Vec::<String>::new());
    assert!(!sddmm.contains_key("A"), "a result is kept whole: {sddmm:?}");
    // GNN kernel 1: T1 is one row, indexed by h.
    let gnn = reduced(
        "Z[i,j] = A[i,k] * X[k,h] * W[h,j]",
        &[("Z", &[6, 3], "f32"), ("A", &[6, 7], "f32"), ("X", &[7, 4], "f32"), ("W", &[4, 3], "f32")],
        &[("A", "csr")],
    );
    assert_eq!(gnn["T1"], ["h"]);
    // Statements whose outer loops differ share none: H keeps both.
    let apart = reduced(
        "H[i,h] = A[i,k] * X[k,h]; Z[h,j] = H[i,h] * W[i,j]",
        &[("A", &[6, 7], "f32"), ("X", &[7, 4], "f32"), ("W", &[6, 3], "f32")],
        &[],
    );
    assert_eq!(apart["H"], ["i", "h"]);
}

/// Loop order after propagation: the loop that is the contiguous dimension
/// of the most dense accesses goes innermost, a walk over stored
/// coordinates counting none; stored levels stay in order; `order=` first.
#[test]
fn loops_are_ordered_for_rows_of_dense_operands() {
    let ordered = |src: &str, decls: &[(&str, &[usize], &str)], formats: &[(&str, &str)], hint: &[&str]| {
        let program = split_program(&parse_program(src).unwrap(), &declarations(decls)).unwrap();
        let formats = formats.iter().map(|(t, f)| (t.to_string(), f.parse().unwrap())).collect();
        let hint: Vec<String> = hint.iter().map(|h| h.to_string()).collect();
        let trees = propagate(&program, &index_trees(&program, &formats), &formats);
        order_loops(&program, &trees, &formats, &hint).iter().map(|t| t.to_string()).collect::<Vec<_>>()
    };
    let gnn =
        [("Z", &[6, 3][..], "f32"), ("A", &[6, 7], "f32"), ("X", &[7, 4], "f32"), ("W", &[4, 3], "f32")];
    assert_eq!(
        ordered("Z[i,j] = A[i,k] * X[k,h] * W[h,j]", &gnn, &[("A", "csr")], &[]),
        [
            "for i: for k in A: for h: T1[i,h] = A[i,k] * X[k,h]",
            "for i: for h: for j: Z[i,j] = T1[i,h] * W[h,j]"
        ]
    );
    // SDDMM's sum stays innermost: j walks B's pattern (a gather).
    let sddmm =
        [("A", &[4, 5][..], "f32"), ("B", &[4, 5], "f32"), ("C", &[4, 3], "f32"), ("D", &[3, 5], "f32")];
    assert_eq!(
        ordered("A[i,j] = B[i,j] * (C[i,k] * D[k,j])", &sddmm, &[("B", "csr")], &[])[0],
        "for i: for j in B: for k: T1[i,j] = C[i,k] * D[k,j]"
    );
    // `order=k` puts k first where B's levels allow: i still comes before j.
    assert_eq!(
        ordered("A[i,j] = B[i,j] * (C[i,k] * D[k,j])", &sddmm, &[("B", "csr")], &["k", "j"])[0],
        "for k: for i: for j in B: T1[i,j] = C[i,k] * D[k,j]"
    );
}

/// A tensor written again with `=` is renamed up to that write, each read
/// seeing the version written last before it (as the reference evaluates
/// the statements in order); the last version keeps the name. A version
/// with a `+=` into it, and a tensor whose data is read first, are left as
/// written.
#[test]
fn a_tensor_written_again_is_renamed_up_to_the_write() {
    let decls = declarations(&[("A", &[4, 5], "f64"), ("x", &[5], "f64"), ("t_1", &[4], "f64")]);
    let text = |src: &str| -> Vec<String> {
        let program = split_program(&parse_program(src).unwrap(), &decls).unwrap();
        program.statements.iter().map(|e| e.statement.to_string()).collect()
    };
    // `t_1` is taken (declared), so the first version is `t_2`.
    assert_eq!(
        text("t[i] = A[i,j] * x[j]; u[i] = t[i] * 3; t[i] = t[i] * 2; y[i] = t[i] + u[i]"),
        ["t_2[i] = A[i,j] * x[j]", "u[i] = t_2[i] * 3", "t[i] = t_2[i] * 2", "y[i] = t[i] + u[i]"]
    );
    assert_eq!(
        text("y[i] = A[i,j] * x[j]; y[i] = A[i,j] * A[i,j]"),
        ["y_1[i] = A[i,j] * x[j]", "y[i] = A[i,j] * A[i,j]"]
    );
    for kept in [
        "y[i] = A[i,j] * x[j]; y[i] += A[i,j] * x[j]; y[i] = A[i,j] * A[i,j]",
        "y[i] = A[i,j] * x[j]; x[j] = A[i,j] * y[i]; z[j] = x[j] * 2",
    ] {
        let program = split_program(&parse_program(kept).unwrap(), &decls).unwrap();
        let text: Vec<String> = program.statements.iter().map(|e| e.statement.to_string()).collect();
        assert!(text.iter().all(|s| !s.contains("y_") && !s.contains("x_")), "{kept}: {text:?}");
    }
    // The split program evaluates as the statements in order.
    let program =
        split_program(&parse_program("t[i] = A[i,j] * x[j]; t[i] = t[i] * 2").unwrap(), &decls).unwrap();
    let inputs: Tensors = [("A", &[4usize, 5][..]), ("x", &[5][..])]
        .iter()
        .enumerate()
        .map(|(k, (n, s))| (n.to_string(), data(s, k as u64 + 1)))
        .collect();
    let written = evaluate_program(&program, &inputs).unwrap();
    let (TensorValue::Values(a), TensorValue::Values(x)) = (&inputs["A"], &inputs["x"]) else { panic!() };
    let TensorValue::Values(t) = &written["t"] else { panic!() };
    for i in 0..4 {
        let want: f64 = (0..5).map(|j| a[[i, j]] * x[[j]]).sum::<f64>() * 2.0;
        assert!((t[[i]] - want).abs() < 1e-12);
    }
}

/// A tensor left as written (a `+=` into it) that a statement reads and
/// writes again with `=` is the user's to rename; the refusal says so (it
/// gave the single statement's advice, to use `+=`). A declaration of
/// another rank stays with the last version.
#[test]
fn a_rewrite_left_as_written_is_refused_with_the_program_s_reason() {
    let decls = declarations(&[("A", &[4, 5], "f64"), ("x", &[5], "f64"), ("P", &[4, 5], "f64")]);
    let err = split_program(
        &parse_program("t[i] = A[i,j] * x[j]; t[i] += A[i,j] * x[j]; t[i] = t[i] * 2").unwrap(),
        &decls,
    )
    .unwrap_err();
    assert_eq!(err.message, "`t` is read by the statement that writes it with `=`");
    assert!(err.notes[0].contains("give the new value another name"), "{:?}", err.notes);
    let mut declared = decls.clone();
    declared.extend(declarations(&[("t", &[4, 5], "f64")]));
    let program = split_program(
        &parse_program("t[i] = A[i,j] * x[j]; t[i,j] = t[i] * P[i,j]; y[i] = t[i,j] * x[j]").unwrap(),
        &declared,
    )
    .unwrap();
    assert_eq!(program.temporaries["t_1"].shape, [4]);
}

/// Maximal fusion renames a substituted statement's summed index that the
/// statement it goes into already uses, and says so (it printed `k1`
/// unexplained).
#[test]
fn a_renamed_summed_index_is_named() {
    use spindle_ir::program::{inline, inline_renames};
    let decls = declarations(&[("A", &[4, 5], "f32"), ("B", &[5, 3], "f32"), ("x", &[3], "f32")]);
    let program =
        split_program(&parse_program("T[i,j] = A[i,k] * B[k,j]; y[i] = T[i,k] * x[k]").unwrap(), &decls)
            .unwrap();
    assert_eq!(inline(&program).unwrap().to_string(), "y[i] = A[i,k1] * B[k1,k] * x[k]");
    assert_eq!(
        inline_renames(&program),
        ["`T`'s sum over `k` is over `k1` in the substituted statement (`k` is taken there)"]
    );
    // Chained: U's own `k` and the `k` T brought into U's body are each
    // named against the final statement.
    let decls = declarations(&[
        ("A", &[4, 5], "f32"),
        ("B", &[5, 3], "f32"),
        ("C", &[3, 3], "f32"),
        ("D", &[3, 3], "f32"),
        ("x", &[3], "f32"),
    ]);
    let chained = split_program(
        &parse_program("T[i,j] = A[i,k] * B[k,j]; U[i,j] = T[i,k] * C[k,j]; y[i] = U[i,k1] * D[k1,k] * x[k]")
            .unwrap(),
        &decls,
    )
    .unwrap();
    assert_eq!(
        inline(&chained).unwrap().to_string(),
        "y[i] = A[i,k11] * B[k11,k2] * C[k2,k1] * D[k1,k] * x[k]"
    );
    assert_eq!(
        inline_renames(&chained),
        [
            "`T`'s sum over `k` is over `k11` in the substituted statement (`k` is taken there)",
            "`U`'s sum over `k` is over `k2` in the substituted statement (`k` is taken there)"
        ]
    );
    let plain =
        split_program(&parse_program("T[i,j] = A[i,h] * B[h,j]; y[i] = T[i,k] * x[k]").unwrap(), &decls)
            .unwrap();
    assert!(inline_renames(&plain).is_empty());
}
