//! What the printed CUDA computes, checked on the CPU (there is no GPU
//! here): each kernel runs under the emulation in `spindle_cuda::emulate`
//! (AddressSanitizer on) and is compared with the reference evaluator on
//! the same inputs, rounded to their dtypes. `SPINDLE_EMU_SANITIZER=thread`
//! runs them under ThreadSanitizer instead, which finds missing barriers.
//!
//! Without a C++ compiler these tests skip visibly.

use ndarray::{ArrayD, Dimension, IxDyn};
use spindle_cuda::emulate::{self, EmulateOptions};
use spindle_cuda::print::{DotPath, PrintOptions, print_kernel};
use spindle_ir::kernel::lower::lower;
use spindle_ir::lang::einsum::declarations;
use spindle_ir::lang::{ElemType, Role, check, parse};
use spindle_ir::tensor::{TensorValue, Tensors};

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// ±[0.1, 1).
    fn value(&mut self) -> f64 {
        let x = 0.1 + 0.9 * (self.next() % 1_000_000) as f64 / 1e6;
        if self.next() & 1 == 0 { x } else { -x }
    }
}

fn round_to(x: f64, dtype: ElemType) -> f64 {
    use spindle_ir::formats::DType;
    match dtype {
        ElemType::Value(DType::F32) => x as f32 as f64,
        ElemType::Value(DType::F16) => {
            // Round to 11 significant bits, as f16 does in this range.
            let e = x.abs().log2().floor();
            let q = 2f64.powf(e - 10.0);
            (x / q).round() * q
        }
        ElemType::Value(DType::Bf16) => {
            let e = x.abs().log2().floor();
            let q = 2f64.powf(e - 7.0);
            (x / q).round() * q
        }
        _ => x,
    }
}

/// Random data for every tensor: values rounded to their dtype, index
/// tensors in `0..max` of the named bound.
fn data(decls: &[(&str, &[usize], &str)], index_max: &[(&str, i64)], seed: u64) -> Tensors {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let d = declarations(decls);
    let mut out = Tensors::new();
    for (name, decl) in &d {
        let n: usize = decl.shape.iter().product();
        let value = if decl.dtype.is_index() {
            let max = index_max
                .iter()
                .find(|(t, _)| t == name)
                .map(|(_, m)| *m)
                .unwrap_or_else(|| panic!("{name}"));
            TensorValue::Indices(
                ArrayD::from_shape_vec(
                    IxDyn(&decl.shape),
                    (0..n).map(|_| (rng.next() % max as u64) as i64).collect(),
                )
                .unwrap(),
            )
        } else {
            TensorValue::Values(
                ArrayD::from_shape_vec(
                    IxDyn(&decl.shape),
                    (0..n).map(|_| round_to(rng.value(), decl.dtype)).collect(),
                )
                .unwrap(),
            )
        };
        out.insert(name.to_string(), value);
    }
    out
}

/// Lowers, prints, emulates and compares; returns the printed kernel.
fn check_against_reference(
    test: &str,
    statement: &str,
    decls: &[(&str, &[usize], &str)],
    index_max: &[(&str, i64)],
    schedule: &str,
    opts: &PrintOptions,
    tolerance: f64,
) -> Option<spindle_cuda::print::CudaKernel> {
    if !emulate::compiler_or_skip(test) {
        return None;
    }
    let einsum = check(&parse(statement).unwrap(), &declarations(decls)).unwrap();
    let kernel = lower(&einsum, &schedule.parse().unwrap(), "k").unwrap();
    let printed = print_kernel(&kernel, "spindle_kernel", opts).unwrap_or_else(|e| panic!("{test}: {e}"));
    let mut tensors = data(decls, index_max, 7);
    // `max=` / `min=` without output data exercise the identity start.
    let out = einsum.tensors.values().find(|t| t.role == Role::Output).unwrap().name.clone();
    if statement.contains("max=") || statement.contains("min=") {
        tensors.remove(&out);
    }
    let want = spindle_ir::eval::evaluate(&einsum, &tensors).unwrap();
    let got = emulate::run(&kernel, &printed, &tensors, &EmulateOptions::from_env())
        .unwrap_or_else(|e| panic!("{test} [{schedule}]: {e}\n{}", printed.source));
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    for ((idx, g), w) in got.indexed_iter().zip(want.iter()) {
        assert!(
            (g - w).abs() <= tolerance * scale,
            "{test} [{schedule}]: at {:?} got {g}, expected {w}\n{}",
            idx.slice(),
            printed.source
        );
    }
    Some(printed)
}

fn tensor_cores(k: &spindle_cuda::print::CudaKernel) -> bool {
    k.dots.iter().any(|d| matches!(d.path, DotPath::TensorCores { .. }))
}

const GDS: &str = "C[D[y],x] += A[y,E[r]] * B[r,x]";

#[test]
fn gather_dot_scatter_on_tensor_cores_computes_the_reference() {
    for (dtype, tolerance) in [("f16", 1e-2), ("bf16", 5e-2)] {
        // Ragged everywhere (masks in the staged operands), and several r
        // tiles (the accumulator fragments across iterations).
        for (dims, schedule) in [
            ([20, 30, 12, 10, 15], "tile.y=16 tile.x=16 tile.r=16"),
            ([64, 96, 48, 80, 40], "tile.y=32 tile.x=16 tile.r=16"),
            ([50, 70, 40, 36, 30], "tile.y=16 tile.x=32 tile.r=32"),
        ] {
            let [y, a_cols, r, x, c_rows] = dims;
            let decls: &[(&str, &[usize], &str)] = &[
                ("A", &[y, a_cols], dtype),
                ("B", &[r, x], dtype),
                ("C", &[c_rows, x], dtype),
                ("D", &[y], "i32"),
                ("E", &[r], "i32"),
            ];
            let max = [("D", c_rows as i64), ("E", a_cols as i64)];
            let k = check_against_reference(
                "gds",
                GDS,
                decls,
                &max,
                schedule,
                &PrintOptions::default(),
                tolerance,
            );
            assert!(k.is_none_or(|k| tensor_cores(&k)));
        }
    }
}

#[test]
fn gather_dot_scatter_fma_and_tf32_compute_the_reference() {
    let decls: &[(&str, &[usize], &str)] = &[
        ("A", &[40, 50], "f32"),
        ("B", &[36, 48], "f32"),
        ("C", &[30, 48], "f32"),
        ("D", &[40], "i32"),
        ("E", &[36], "i64"),
    ];
    let max = [("D", 30), ("E", 50)];
    let schedule = "tile.y=16 tile.x=16 tile.r=16";
    let fma = check_against_reference("gds_fma", GDS, decls, &max, schedule, &PrintOptions::default(), 1e-5);
    assert!(fma.is_none_or(|k| !tensor_cores(&k)));
    let tf32 = PrintOptions { tf32: true, ..PrintOptions::default() };
    let k = check_against_reference("gds_tf32", GDS, decls, &max, schedule, &tf32, 5e-3);
    assert!(k.is_none_or(|k| tensor_cores(&k)));
    for schedule in [
        "tile.y=4 tile.x=8 tile.r=4 reduce=atomic",
        "broadcast=eager tile.y=4 tile.x=4 tile.r=4",
        "matmul=off",
    ] {
        check_against_reference("gds_schedules", GDS, decls, &max, schedule, &PrintOptions::default(), 1e-5);
    }
}

#[test]
fn blockgroupcoo_on_tensor_cores_computes_the_reference() {
    let decls: &[(&str, &[usize], &str)] = &[
        ("A_grp", &[5], "i32"),
        ("A_crd", &[5, 3], "i32"),
        ("A_val", &[5, 3, 32, 32], "f16"),
        ("B", &[128, 48], "f16"),
        ("C", &[96, 48], "f16"),
    ];
    let max = [("A_grp", 3), ("A_crd", 4)];
    let statement = "C[32*A_grp[p]+bi,n] += A_val[p,q,bi,bj] * B[32*A_crd[p,q]+bj,n]";
    for schedule in [
        "tile.p=1 tile.q=1 tile.bi=32 tile.bj=32 tile.n=16",
        "tile.p=1 tile.q=2 tile.bi=32 tile.bj=32 tile.n=32",
        "tile.p=2 tile.q=1 tile.bi=16 tile.bj=32 tile.n=16",
    ] {
        let k = check_against_reference(
            "bgcoo",
            statement,
            decls,
            &max,
            schedule,
            &PrintOptions::default(),
            1e-2,
        );
        assert!(k.is_none_or(|k| tensor_cores(&k)), "{schedule}");
    }
    // The default schedule: 16 groups a program, FMA.
    check_against_reference("bgcoo_default", statement, decls, &max, "", &PrintOptions::default(), 1e-2);
}

#[test]
fn groupcoo_and_batched_products_compute_the_reference() {
    let decls: &[(&str, &[usize], &str)] = &[
        ("A_grp", &[37], "i32"),
        ("A_val", &[37, 6], "f32"),
        ("A_crd", &[37, 6], "i32"),
        ("B", &[20, 24], "f32"),
        ("C", &[15, 24], "f32"),
    ];
    let max = [("A_grp", 15), ("A_crd", 20)];
    for schedule in ["", "tile.q=4", "tile.p=4 tile.n=8 tile.q=2 reduce=atomic", "parallel=p order=q"] {
        check_against_reference(
            "groupcoo",
            "C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]",
            decls,
            &max,
            schedule,
            &PrintOptions::default(),
            1e-5,
        );
    }
    let decls: &[(&str, &[usize], &str)] =
        &[("A", &[3, 40, 50], "bf16"), ("B", &[3, 50, 70], "bf16"), ("C", &[3, 40, 70], "bf16")];
    let k = check_against_reference(
        "batched",
        "C[b,y,x] += A[b,y,r] * B[b,r,x]",
        decls,
        &[],
        "tile.b=2 tile.y=32 tile.x=64 tile.r=32",
        &PrintOptions::default(),
        5e-2,
    );
    assert!(k.is_none_or(|k| tensor_cores(&k)));
}

#[test]
fn scatters_of_every_kind_compute_the_reference() {
    for (op, dtype, tolerance) in [
        ("max=", "f32", 1e-6),
        ("min=", "f16", 1e-2),
        ("max=", "bf16", 5e-2),
        ("min=", "f64", 1e-12),
        ("+=", "f64", 1e-12),
        // Summed in f32 and rounded once: half an f16 (bf16) ulp.
        ("+=", "f16", 1e-3),
        ("+=", "bf16", 8e-3),
    ] {
        let decls: &[(&str, &[usize], &str)] =
            &[("S", &[100], "i64"), ("x", &[100], dtype), ("w", &[100], "f32"), ("y", &[7], dtype)];
        check_against_reference(
            "scatter",
            &format!("y[S[p]] {op} x[p] * w[p]"),
            decls,
            &[("S", 7)],
            "",
            &PrintOptions::default(),
            tolerance,
        );
    }
    let decls: &[(&str, &[usize], &str)] = &[
        ("float", &[20, 24], "f32"),
        ("threadIdx", &[24, 12], "f32"),
        ("_x", &[12], "f32"),
        ("int", &[20, 12], "f32"),
    ];
    check_against_reference(
        "names",
        "int[e,k] += float[e,warp] * threadIdx[warp,k] * _x[k]",
        decls,
        &[],
        "",
        &PrintOptions::default(),
        1e-5,
    );
}

/// Thousands of atomics into a few 16-bit elements: each rounding of the
/// running sum to f16 would drift by about 1e-2 of the result (a power-law
/// row on an H100, 2026-11-25); summed in f32 and rounded once, the error
/// is half an ulp of the output type.
#[test]
fn sixteen_bit_sums_are_rounded_once() {
    for (dtype, tolerance) in [("f16", 1e-3), ("bf16", 8e-3)] {
        let decls: &[(&str, &[usize], &str)] =
            &[("S", &[4096], "i32"), ("x", &[4096], dtype), ("y", &[3], dtype)];
        let Some(printed) = check_against_reference(
            "long rows",
            "y[S[p]] += x[p]",
            decls,
            &[("S", 3)],
            "tile.p=64",
            &PrintOptions::default(),
            tolerance,
        ) else {
            return;
        };
        let round = printed.round.as_ref().expect("a 16-bit sum scatter is widened");
        assert_eq!((round.symbol.as_str(), round.len), ("spindle_kernel_round", 3));
        assert!(printed.source.contains("float *__restrict__ g_y"), "{}", printed.source);
        assert!(
            printed.source.contains("spindle_kernel_round(const float *__restrict__ acc"),
            "{}",
            printed.source
        );
    }
}

/// Functions, division, max/min, literals, affine subscripts with
/// offsets, `where` extents and an exclusive `=` store.
#[test]
fn expressions_compute_the_reference() {
    let decls: &[(&str, &[usize], &str)] =
        &[("V", &[37, 9], "f32"), ("W", &[37], "f32"), ("U", &[45], "f32"), ("O", &[37, 9], "f32")];
    for schedule in ["", "tile.i=4 tile.j=2", "broadcast=eager"] {
        check_against_reference(
            "expressions",
            "O[i,j] = exp(V[i,j]) * sigmoid(W[i]) - relu(U[i+j-1]) / (2.5 + abs(V[i,j])) + max(W[i], sqrt(abs(U[i+2*j])))",
            decls,
            &[],
            schedule,
            &PrintOptions::default(),
            1e-5,
        );
    }
    let decls: &[(&str, &[usize], &str)] = &[("A", &[30], "f32"), ("y", &[30], "f32")];
    for schedule in ["", "tile.p=8 reduce=atomic", "tile.i=32 tile.p=2"] {
        check_against_reference(
            "where",
            "y[i] += min(A[i+p], -A[i-p]) where p < 5",
            decls,
            &[],
            schedule,
            &PrintOptions::default(),
            1e-5,
        );
    }
}

/// Any block size computes the same: fewer threads than elements (strided
/// fills, several accumulator registers and fragments per thread and warp)
/// and more.
#[test]
fn block_sizes_do_not_change_the_result() {
    let decls: &[(&str, &[usize], &str)] = &[
        ("A", &[64, 96], "f16"),
        ("B", &[48, 80], "f16"),
        ("C", &[40, 80], "f16"),
        ("D", &[64], "i32"),
        ("E", &[48], "i32"),
    ];
    let max = [("D", 40), ("E", 96)];
    for threads in [32, 64, 1024] {
        let opts = PrintOptions { threads: Some(threads), ..PrintOptions::default() };
        for schedule in ["tile.y=32 tile.x=32 tile.r=16", "tile.y=32 tile.x=32 tile.r=16 matmul=off"] {
            let k = check_against_reference("block_sizes", GDS, decls, &max, schedule, &opts, 1e-2);
            assert!(k.is_none_or(|k| k.launch.block == threads));
        }
    }
}
