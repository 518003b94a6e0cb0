//! The Einsum corpus (`tests/corpus/*.toml`): every entry parses, checks,
//! is rewritten over its formats' arrays, and evaluates — rewritten and
//! original alike — to what an independent dense computation written here
//! gives; then runs on the C backend under several schedules. Loading the
//! entries and making their data is `spindle_tests::corpus`.

use ndarray::{ArrayD, Dimension, IxDyn};
use spindle_ir::formats::DType;
use spindle_ir::tensor::{TensorValue, Tensors};
use spindle_tests::corpus::{build, entries};

fn value(t: &Tensors, name: &str) -> ArrayD<f64> {
    match &t[name] {
        TensorValue::Values(a) => a.clone(),
        TensorValue::Indices(_) => panic!("{name} holds indices"),
    }
}

fn index(t: &Tensors, name: &str) -> ArrayD<i64> {
    match &t[name] {
        TensorValue::Indices(a) => a.clone(),
        TensorValue::Values(_) => panic!("{name} holds values"),
    }
}

/// Reads with the fill rule: outside the bounds is 0.
fn at(a: &ArrayD<f64>, idx: &[i64]) -> f64 {
    let inside = idx.iter().zip(a.shape()).all(|(&i, &e)| i >= 0 && (i as usize) < e);
    if inside { a[IxDyn(&idx.iter().map(|&i| i as usize).collect::<Vec<_>>())] } else { 0.0 }
}

/// The independent dense computation of each entry, loops written out.
fn expected(name: &str, t: &Tensors, out_shape: &[usize]) -> ArrayD<f64> {
    let mut out = ArrayD::<f64>::zeros(IxDyn(out_shape));
    let matmul = |a: &ArrayD<f64>, b: &ArrayD<f64>, out: &mut ArrayD<f64>| {
        let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
        for i in 0..m {
            for j in 0..n {
                out[[i, j]] = (0..k).map(|p| a[[i, p]] * b[[p, j]]).sum();
            }
        }
    };
    match name {
        "spmm-groupcoo" | "spmm-blockgroupcoo" | "spmm-ell" => {
            matmul(&value(t, "A"), &value(t, "B"), &mut out)
        }
        "spmv-csr" => {
            let (a, x) = (value(t, "A"), value(t, "x"));
            for i in 0..a.shape()[0] {
                out[[i]] = (0..a.shape()[1]).map(|j| a[[i, j]] * x[[j]]).sum();
            }
        }
        "sddmm" => {
            let (m, a, b) = (value(t, "M"), value(t, "A"), value(t, "B"));
            let mut ab = ArrayD::zeros(IxDyn(out_shape));
            matmul(&a, &b, &mut ab);
            out = &m * &ab;
        }
        "mttkrp" => {
            let (x, b, c) = (value(t, "X"), value(t, "B"), value(t, "C"));
            let s = x.shape();
            for i in 0..s[0] {
                for r in 0..out_shape[1] {
                    let mut sum = 0.0;
                    for j in 0..s[1] {
                        for k in 0..s[2] {
                            sum += x[[i, j, k]] * b[[j, r]] * c[[k, r]];
                        }
                    }
                    out[[i, r]] = sum;
                }
            }
        }
        "pointcloud-conv" => {
            let (map, input, w) = (value(t, "Map"), value(t, "In"), value(t, "W"));
            let s = map.shape();
            for x in 0..s[0] {
                for y in 0..s[1] {
                    for z in 0..s[2] {
                        if map[[x, y, z]] == 0.0 {
                            continue;
                        }
                        for c in 0..input.shape()[1] {
                            for m in 0..w.shape()[2] {
                                out[[x, m]] += map[[x, y, z]] * input[[y, c]] * w[[z, c, m]];
                            }
                        }
                    }
                }
            }
        }
        "tensor-product" => {
            let (cg, x, y, w) = (value(t, "CG"), value(t, "X"), value(t, "Y"), value(t, "W"));
            let s = cg.shape();
            for ((i, j, k, l), &c) in cg.view().into_dimensionality::<ndarray::Ix4>().unwrap().indexed_iter()
            {
                if c == 0.0 {
                    continue;
                }
                assert!(i < s[0]);
                for b in 0..x.shape()[0] {
                    for u in 0..x.shape()[2] {
                        for wi in 0..w.shape()[3] {
                            out[[b, i, wi]] += c * x[[b, j, u]] * y[[b, k]] * w[[b, l, u, wi]];
                        }
                    }
                }
            }
        }
        "segment-max" => {
            // A segment's max over its entries; an empty segment is 0.
            let (x, s) = (value(t, "x"), index(t, "S"));
            let mut best = vec![f64::NEG_INFINITY; out_shape[0]];
            for p in 0..x.len() {
                let seg = s[[p]] as usize;
                best[seg] = best[seg].max(x[[p]]);
            }
            for (seg, b) in best.into_iter().enumerate() {
                out[[seg]] = if b == f64::NEG_INFINITY { 0.0 } else { b };
            }
        }
        "conv1d" => {
            let (input, f) = (value(t, "I"), value(t, "F"));
            for i in 0..out_shape[0] {
                out[[i]] = (0..f.len()).map(|p| at(&input, &[i as i64 + p as i64 - 1]) * f[[p]]).sum();
            }
        }
        "conv2d-strided" => {
            let (input, f) = (value(t, "I"), value(t, "F"));
            for i in 0..out_shape[0] {
                for j in 0..out_shape[1] {
                    let mut sum = 0.0;
                    for p in 0..3 {
                        for q in 0..3 {
                            sum += at(&input, &[(2 * i + p) as i64, (2 * j + q) as i64]) * f[[p, q]];
                        }
                    }
                    out[[i, j]] = sum;
                }
            }
        }
        "gather-dot-scatter" => {
            let (a, b, e, d) = (value(t, "A"), value(t, "B"), index(t, "E"), index(t, "D"));
            for y in 0..a.shape()[0] {
                for x in 0..b.shape()[1] {
                    let sum: f64 = (0..b.shape()[0]).map(|r| a[[y, e[[r]] as usize]] * b[[r, x]]).sum();
                    out[[d[[y]] as usize, x]] += sum;
                }
            }
        }
        other => panic!("corpus entry {other} has no independent computation in this test"),
    }
    out
}

fn close(got: &ArrayD<f64>, want: &ArrayD<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    for ((idx, g), w) in got.indexed_iter().zip(want.iter()) {
        assert!((g - w).abs() <= 1e-9 * scale, "{what}: at {:?} got {g}, expected {w}", idx.slice());
    }
    assert!(want.iter().any(|x| *x != 0.0), "{what}: the expected result is all zeros, which tests nothing");
}

#[test]
fn every_corpus_entry_matches_its_dense_computation() {
    let entries = entries();
    assert!(entries.len() >= 12, "the corpus lost entries");
    let mut runs = Vec::new();
    for (name, entry) in entries {
        eprintln!("{name}: {}", entry.description);
        let built = build(&name, &entry);
        let want = expected(&name, &built.original_data, &built.out_shape);

        let original = spindle_ir::eval::evaluate(&built.original, &built.original_data)
            .unwrap_or_else(|d| panic!("{name}: {d}"));
        close(&original, &want, &format!("{name} (original statement)"));

        if let Some(text) = &built.rewritten {
            let got = spindle_ir::eval::evaluate(&built.einsum, &built.data)
                .unwrap_or_else(|d| panic!("{name}: {d}"));
            close(&got, &want, &format!("{name} (rewritten: {text})"));
        }
        runs.push((name.clone(), built.einsum, built.data, want));
    }
    c_backend(&runs);
}

/// Schedules every corpus entry runs under on the C backend.
const SCHEDULES: &[&str] = &["", "reduce=atomic", "matmul=off"];

/// Eager broadcasting gives every value every axis, so its tiles are small.
const EAGER: &[&str] = &["broadcast=eager matmul=off", "reduce=atomic broadcast=eager"];

/// Every entry, as it runs (rewritten when it has formats), compiled to C
/// under several schedules and tile sizes, on one and two threads, against
/// the entry's dense computation.
fn c_backend(runs: &[(String, spindle_ir::lang::Einsum, Tensors, ArrayD<f64>)]) {
    for (name, einsum, data, want) in runs {
        let mut schedules: Vec<String> = SCHEDULES.iter().map(|s| s.to_string()).collect();
        // Tiles that are ragged on every axis, and tiles of one.
        let ragged: Vec<String> = einsum.indices.iter().map(|i| format!("tile.{}=4", i.name)).collect();
        let ones: Vec<String> = einsum.indices.iter().map(|i| format!("tile.{}=1", i.name)).collect();
        schedules.push(ragged.join(" "));
        // Programs over the first output index only, and the reduced loops
        // in reverse order.
        let parallel: Vec<&str> =
            einsum.indices.iter().filter(|i| !i.reduced).map(|i| i.name.as_str()).collect();
        let reduced: Vec<&str> =
            einsum.indices.iter().filter(|i| i.reduced).map(|i| i.name.as_str()).rev().collect();
        let mut knobs = Vec::new();
        if let Some(first) = parallel.first() {
            knobs.push(format!("parallel={first}"));
        }
        if !reduced.is_empty() {
            knobs.push(format!("order={}", reduced.join("+")));
        }
        schedules.push(knobs.join(" "));
        let small: Vec<String> = einsum.indices.iter().map(|i| format!("tile.{}=2", i.name)).collect();
        schedules.extend(EAGER.iter().map(|e| format!("{} {e}", small.join(" "))));
        schedules.push(ones.join(" ") + " reduce=atomic");
        // Sgap's strategies on ragged tiles, and on tiles of 8.
        let eights: Vec<String> = einsum.indices.iter().map(|i| format!("tile.{}=8", i.name)).collect();
        for reduce in spindle_tests::corpus::sgap_strategies(einsum) {
            schedules.push(format!("{} {reduce}", ragged.join(" ")));
            schedules.push(format!("{} {reduce}", eights.join(" ")));
        }
        for schedule in &schedules {
            let kernel = spindle_ir::kernel::lower::lower(einsum, &schedule.parse().unwrap(), "corpus")
                .unwrap_or_else(|d| panic!("{name} [{schedule}]: {d}"));
            // No work threshold: small corpus kernels would otherwise run
            // on one thread whatever they are given, and the threaded
            // paths (row ownership, per-thread buffers) would go untested.
            let compiled = spindle_c::exec::CKernel::compile_with_options(
                &kernel,
                &spindle_c::Compiler::from_env(),
                &spindle_c::print::Options { serial_work: 0 },
            )
            .unwrap_or_else(|e| panic!("{name} [{schedule}]: {e}"));
            for threads in [1, 2] {
                let got = compiled.run(data, threads).unwrap_or_else(|e| panic!("{name} [{schedule}]: {e}"));
                close_to(&got, want, 1e-4, &format!("{name} on C [{schedule}] with {threads} threads"));
            }
        }
        // Every value dtype, under the default schedule: f64 computes in
        // double, f16 and bf16 travel as f32 and round at the boundary. The
        // reference sees the same rounded inputs.
        for (dtype, tolerance) in [(DType::F64, 1e-9), (DType::F16, 1e-2), (DType::Bf16, 5e-2)] {
            let (typed, rounded) = spindle_tests::corpus::typed(einsum, data, dtype);
            let want = spindle_ir::eval::evaluate(&typed, &rounded).unwrap();
            let kernel = spindle_ir::kernel::lower::lower(&typed, &Default::default(), "corpus").unwrap();
            let got = spindle_c::exec::CKernel::compile(&kernel).unwrap().run(&rounded, 2).unwrap();
            close_to(&got, &want, tolerance, &format!("{name} on C in {}", dtype.name()));
        }
    }
}

/// Within `tolerance` of the largest magnitude.
fn close_to(got: &ArrayD<f64>, want: &ArrayD<f64>, tolerance: f64, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    for ((idx, g), w) in got.indexed_iter().zip(want.iter()) {
        assert!((g - w).abs() <= tolerance * scale, "{what}: at {:?} got {g}, expected {w}", idx.slice());
    }
}
