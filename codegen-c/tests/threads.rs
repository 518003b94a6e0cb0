//! Printed kernels on several threads against the reference evaluator,
//! with the scatter shapes that decide how threads share the output:
//! sorted scatter targets (row ownership), unsorted ones (the fallback),
//! one row spanning every thread, empty rows, rows at the chunk
//! boundaries, `max=` / `min=`, f16 outputs and tiles spanning rows.
//! `bench_threads` (ignored) times 1 against 2 threads.

use std::collections::BTreeMap;
use std::time::Duration;

use ndarray::{ArrayD, Dimension, IxDyn};
use spindle_c::exec::CKernel;
use spindle_c::ir::formats::{Coo, FormatSpec};
use spindle_c::ir::kernel::Kernel;
use spindle_c::ir::lang::{Einsum, declarations, declare_output, parse};
use spindle_c::ir::tensor::{TensorValue, Tensors};
use spindle_c::print::Options;
use spindle_c::time_median;
use spindle_c::{Compiler, print};

/// A small deterministic generator (xorshift64*), so the tests need no
/// extra dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> i64 {
        (self.next() % n) as i64
    }

    /// A value in ±[0.1, 1), never zero.
    fn value(&mut self) -> f64 {
        let x = 0.1 + 0.9 * (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        if self.next() & 1 == 0 { x } else { -x }
    }
}

fn values(shape: &[usize], rng: &mut Rng) -> TensorValue {
    let n = shape.iter().product();
    let data = (0..n).map(|_| rng.value()).collect();
    TensorValue::Values(ArrayD::from_shape_vec(IxDyn(shape), data).unwrap())
}

fn indices(data: Vec<i64>) -> TensorValue {
    TensorValue::Indices(ArrayD::from_shape_vec(IxDyn(&[data.len()]), data).unwrap())
}

/// A checked statement over the given declarations (the output's shape is
/// worked out when it is not declared).
fn einsum(statement: &str, decls: &[(&str, &[usize], &str)]) -> Einsum {
    let st = parse(statement).unwrap_or_else(|d| panic!("{statement}: {}", d.message));
    let mut d = declarations(decls);
    assert!(declare_output(&st, &mut d), "{statement}: give the output a shape");
    spindle_c::ir::lang::check(&st, &d).unwrap_or_else(|d| panic!("{statement}: {}", d.message))
}

fn lower(e: &Einsum, schedule: &str) -> Kernel {
    spindle_c::ir::kernel::lower::lower(e, &schedule.parse().unwrap(), "threads")
        .unwrap_or_else(|d| panic!("[{schedule}]: {}", d.message))
}

/// The CSR SpMM (`n > 1`) or SpMV (`n == 1`) of a sparse matrix, in the
/// indirect form the rewrite gives for CSR, with `B` random.
fn csr_product(coo: &Coo<f64, i64>, n: usize) -> (Einsum, Tensors) {
    let (rows, cols) = (coo.shape[0], coo.shape[1]);
    let nnz = coo.nnz();
    let mut rng = Rng(7);
    let mut data = Tensors::new();
    data.insert("R".into(), indices(coo.crd[0].clone()));
    data.insert("K".into(), indices(coo.crd[1].clone()));
    data.insert(
        "V".into(),
        TensorValue::Values(ArrayD::from_shape_vec(IxDyn(&[nnz]), coo.val.clone()).unwrap()),
    );
    let e = if n == 1 {
        data.insert("x".into(), values(&[cols], &mut rng));
        einsum(
            "y[R[p]] += V[p] * x[K[p]]",
            &[
                ("R", &[nnz], "i32"),
                ("K", &[nnz], "i32"),
                ("V", &[nnz], "f32"),
                ("x", &[cols], "f32"),
                ("y", &[rows], "f32"),
            ],
        )
    } else {
        data.insert("B".into(), values(&[cols, n], &mut rng));
        einsum(
            "C[R[p],n] += V[p] * B[K[p],n]",
            &[
                ("R", &[nnz], "i32"),
                ("K", &[nnz], "i32"),
                ("V", &[nnz], "f32"),
                ("B", &[cols, n], "f32"),
                ("C", &[rows, n], "f32"),
            ],
        )
    };
    (e, data)
}

fn shared_matrix(name: &str) -> Option<Coo<f64, i64>> {
    let path = spindle_c::ir::formats::data::shared_file(&format!("matrices/{name}"))?;
    let coo: Coo<f64, i64> = spindle_c::ir::formats::io::read_tensor(&path).unwrap();
    Some(coo.canonicalize())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Times SpMM (N = 64) and SpMV on cora and ca-CondMat, tile.p = 1 and
/// 16, on 1 and 2 threads, as kernels are printed by default. Run with
/// `cargo test -p spindle-c --release --test threads bench_threads -- --ignored --nocapture`
/// (idle, then with two `yes > /dev/null` running, to see a busy machine).
#[test]
#[ignore]
fn bench_threads() {
    println!(
        "{:<14} {:>4} {:>20} {:>10} {:>10} {:>6}",
        "matrix", "N", "schedule", "1 thr µs", "2 thr µs", "2/1"
    );
    for name in ["cora.mtx", "ca-CondMat.mtx"] {
        let Some(coo) = shared_matrix(name) else {
            println!("{name}: shared data absent");
            continue;
        };
        for n in [64, 1] {
            let (e, data) = csr_product(&coo, n);
            let schedules: &[&str] = if n == 1 {
                &["tile.p=1", "tile.p=16"]
            } else {
                &["tile.p=1 tile.n=64", "tile.p=16 tile.n=64", "tile.p=1", "tile.p=16"]
            };
            for schedule in schedules {
                let kernel = lower(&e, schedule);
                let compiled = CKernel::compile(&kernel).unwrap();
                let mut buffers = compiled.buffers(&data).unwrap();
                // The best median of 5 rounds, 1 and 2 threads interleaved:
                // other processes come and go on a shared machine.
                let repeats = if coo.nnz() * n > 1 << 22 { 21 } else { 101 };
                let (mut one, mut two) = (Duration::MAX, Duration::MAX);
                for _ in 0..5 {
                    for (threads, best) in [(1, &mut one), (2, &mut two)] {
                        let t = time_median(repeats, 3, || compiled.launch(&mut buffers, threads).unwrap());
                        *best = (*best).min(t);
                    }
                }
                println!(
                    "{name:<14} {n:>4} {schedule:>20} {:>10.1} {:>10.1} {:>6.2}",
                    micros(one),
                    micros(two),
                    two.as_secs_f64() / one.as_secs_f64()
                );
            }
        }
    }
}

/// Compiled to run on several threads whatever its size.
fn compile_threaded(kernel: &Kernel) -> CKernel {
    CKernel::compile_with_options(kernel, &Compiler::from_env(), &Options { serial_work: 0 })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `e` under each schedule on 1 to 4 threads against the reference
/// evaluator, within `tolerance` of the largest magnitude. Returns the C
/// sources, for checks of which path was printed.
fn check(e: &Einsum, data: &Tensors, schedules: &[&str], tolerance: f64) -> Vec<String> {
    let want = spindle_c::ir::eval::evaluate(e, data).unwrap_or_else(|d| panic!("{}", d.message));
    assert!(want.iter().any(|&x| x != 0.0), "an all-zero result tests nothing");
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    let mut sources = Vec::new();
    for schedule in schedules {
        let compiled = compile_threaded(&lower(e, schedule));
        for threads in 1..=4 {
            let got = compiled.run(data, threads).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got.shape(), want.shape());
            for ((at, g), w) in got.indexed_iter().zip(want.iter()) {
                assert!(
                    (g - w).abs() <= tolerance * scale,
                    "{} [{schedule}] on {threads} threads: at {:?} got {g}, expected {w}\n{}",
                    e.statement,
                    at.slice(),
                    compiled.source
                );
            }
        }
        sources.push(compiled.source);
    }
    sources
}

/// Row indices of `nnz` entries over `rows` rows, sorted, every fifth row
/// empty.
fn sorted_rows(rows: usize, nnz: usize, rng: &mut Rng) -> Vec<i64> {
    let mut r: Vec<i64> = (0..nnz)
        .map(|_| {
            loop {
                let row = rng.below(rows as u64);
                if row % 5 != 2 {
                    break row;
                }
            }
        })
        .collect();
    r.sort_unstable();
    r
}

const SPMM: &str = "C[R[p],n] += V[p] * B[K[p],n]";

/// The CSR-like SpMM over the given row indices, `n` columns, f32.
fn spmm(statement: &str, rows: usize, r: Vec<i64>, n: usize, dtype: &str, seed: u64) -> (Einsum, Tensors) {
    let (nnz, cols) = (r.len(), 13);
    let mut rng = Rng(seed);
    let k = (0..nnz).map(|_| rng.below(cols as u64)).collect();
    let mut data = Tensors::new();
    data.insert("R".into(), indices(r));
    data.insert("K".into(), indices(k));
    data.insert("V".into(), values(&[nnz], &mut rng));
    data.insert("B".into(), values(&[cols, n], &mut rng));
    let transposed = statement.starts_with("C[n,");
    let c: &[usize] = if transposed { &[n, rows] } else { &[rows, n] };
    let e = einsum(
        statement,
        &[
            ("R", &[nnz], "i32"),
            ("K", &[nnz], "i64"),
            ("V", &[nnz], dtype),
            ("B", &[cols, n], dtype),
            ("C", c, dtype),
        ],
    );
    (e, data)
}

/// Schedules with tiles of p spanning rows, ragged tiles, atomic per
/// element (the sink inside the loop) and eager broadcasting.
const SCHEDULES: &[&str] = &[
    "tile.p=1",
    "tile.p=4 tile.n=2",
    "tile.p=16",
    "tile.p=8 tile.n=4 reduce=atomic",
    "tile.p=4 tile.n=4 broadcast=eager matmul=off",
];

#[test]
fn sorted_rows_are_owned() {
    let mut rng = Rng(1);
    for (rows, nnz, n) in [(37, 150, 5), (40, 400, 1), (9, 61, 3)] {
        let (e, data) = spmm(SPMM, rows, sorted_rows(rows, nnz, &mut rng), n, "f32", 2);
        for source in check(&e, &data, SCHEDULES, 1e-5) {
            assert!(source.contains("edge_first"), "the row-ownership path is printed:\n{source}");
        }
    }
}

#[test]
fn a_row_spanning_every_thread() {
    for (r, what) in
        [(vec![3; 200], "one row"), ((0..200).map(|p| if p < 190 { 1 } else { 4 }).collect(), "a long row")]
    {
        let (e, data) = spmm(SPMM, 7, r, 6, "f32", 3);
        eprintln!("{what}");
        check(&e, &data, SCHEDULES, 1e-5);
    }
}

#[test]
fn rows_changing_at_the_chunk_boundaries() {
    // 48 entries in 12 tiles of 4: two threads split at p = 24, three at
    // 16 and 32, four at 12, 24 and 36. Rows change exactly there (with
    // empty rows between), or every 10 entries, or every entry.
    let cases: Vec<Vec<i64>> = vec![
        (0..48).map(|p| 2 * [12, 16, 24, 32, 36].iter().filter(|&&b| p >= b).count() as i64).collect(),
        (0..48).map(|p| p / 10).collect(),
        (0..48).map(|p| p * 2).collect(),
        (0..48).map(|p| (p + 1) / 4 * 3).collect(),
    ];
    for r in cases {
        let rows = *r.iter().max().unwrap() as usize + 2;
        let (e, data) = spmm(SPMM, rows, r, 3, "f32", 4);
        check(&e, &data, &["tile.p=4", "tile.p=1", "tile.p=4 tile.n=1 reduce=atomic"], 1e-5);
    }
}

#[test]
fn unsorted_rows_fall_back() {
    let mut rng = Rng(5);
    // Work against output size: 10 per row takes private copies, 1.2
    // one thread.
    for (rows, nnz) in [(10, 100), (50, 60)] {
        let sorted = sorted_rows(rows, nnz, &mut rng);
        // Shuffled; out of order only across the boundary of two threads'
        // halves; only in the last thread's part.
        let mut shuffled = sorted.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut at_boundary = sorted.clone();
        at_boundary[nnz / 2 - 1] = rows as i64 - 1;
        let mut at_end = sorted.clone();
        at_end[nnz - 1] = 0;
        for r in [shuffled, at_boundary, at_end] {
            assert!(r.windows(2).any(|w| w[0] > w[1]));
            let (e, data) = spmm(SPMM, rows, r, 4, "f32", 6);
            for source in check(&e, &data, &["tile.p=1", "tile.p=4"], 1e-5) {
                assert!(source.contains("edge_first"));
                assert_eq!(source.contains("privatized"), nnz >= 4 * rows, "{source}");
            }
        }
    }
}

#[test]
fn max_and_min_reductions() {
    let mut rng = Rng(7);
    for op in ["max=", "min="] {
        let statement = SPMM.replace("+=", op);
        let sorted = sorted_rows(30, 200, &mut rng);
        let mut unsorted = sorted.clone();
        unsorted.reverse();
        for r in [sorted, unsorted, vec![4; 50]] {
            let (e, data) = spmm(&statement, 30, r, 3, "f32", 8);
            check(&e, &data, SCHEDULES, 1e-6);
        }
    }
}

#[test]
fn half_and_double_outputs() {
    let mut rng = Rng(9);
    let r = sorted_rows(20, 120, &mut rng);
    let (e, data) = spmm(SPMM, 20, r.clone(), 8, "f16", 10);
    check(&e, &data, SCHEDULES, 2e-2);
    let (e, data) = spmm(SPMM, 20, r, 8, "f64", 10);
    check(&e, &data, SCHEDULES, 1e-12);
}

#[test]
fn rows_along_a_later_dimension() {
    let mut rng = Rng(11);
    let (e, data) = spmm("C[n,R[p]] += V[p] * B[K[p],n]", 25, sorted_rows(25, 90, &mut rng), 3, "f32", 12);
    for source in check(&e, &data, SCHEDULES, 1e-5) {
        assert!(source.contains("edge_first"));
    }
}

#[test]
fn spmv_assign_and_accumulate_into_data() {
    let mut rng = Rng(13);
    let r = sorted_rows(31, 140, &mut rng);
    let nnz = r.len();
    let mut data = Tensors::new();
    data.insert("K".into(), indices((0..nnz).map(|_| rng.below(17)).collect()));
    data.insert("R".into(), indices(r));
    data.insert("V".into(), values(&[nnz], &mut rng));
    data.insert("x".into(), values(&[17], &mut rng));
    let decls: &[(&str, &[usize], &str)] = &[
        ("R", &[nnz], "i32"),
        ("K", &[nnz], "i32"),
        ("V", &[nnz], "f32"),
        ("x", &[17], "f32"),
        ("y", &[31], "f32"),
    ];
    check(&einsum("y[R[p]] = V[p] * x[K[p]]", decls), &data, &["tile.p=1", "tile.p=16"], 1e-5);
    data.insert("y".into(), values(&[31], &mut rng));
    check(&einsum("y[R[p]] += V[p] * x[K[p]]", decls), &data, &["tile.p=2", "tile.p=8"], 1e-5);
}

/// The formats' own rewrites: CSR, COO and GroupCOO / BlockGroupCOO by
/// rows have sorted targets; GroupCOO by columns scatters through a 2-D
/// array and takes the fallback.
#[test]
fn rewritten_formats() {
    let mut rng = Rng(15);
    let (rows, cols, n) = (29, 19, 6);
    let mut entries: Vec<(usize, usize, f64)> = Vec::new();
    for _ in 0..160 {
        let (r, c) = (rng.below(rows as u64) as usize, rng.below(cols as u64) as usize);
        if r % 7 != 3 && !entries.iter().any(|e| (e.0, e.1) == (r, c)) {
            entries.push((r, c, rng.value()));
        }
    }
    entries.push((0, 0, 0.5));
    for c in 0..cols {
        entries.push((11, c, rng.value()));
    }
    let coo: Coo<f64, i64> = Coo::from_triplets(rows, cols, &entries).unwrap().canonicalize();
    let original =
        einsum("C[m,n] += A[m,k] * B[k,n]", &[("A", &[rows, cols], "f32"), ("B", &[cols, n], "f32")]);
    let b = values(&[cols, n], &mut rng);
    for (format, owned) in [
        ("csr", true),
        ("coo", true),
        ("groupcoo:dim=0,g=2", true),
        ("groupcoo:dim=0,g=4", true),
        ("blockgroupcoo:bm=2,bk=2", false),
        ("groupcoo:dim=1,g=2", false),
    ] {
        let formats: BTreeMap<String, FormatSpec> = [("A".to_string(), format.parse().unwrap())].into();
        let sparse: BTreeMap<String, Coo<f64, i64>> = [("A".to_string(), coo.clone())].into();
        let rewritten = spindle_c::ir::rewrite::rewrite(&original, &formats, &sparse).unwrap();
        let e = rewritten.check(&original).unwrap();
        let mut data = rewritten.tensors.clone();
        data.insert("B".into(), b.clone());
        eprintln!("{format}: {}", e.statement);
        for source in check(&e, &data, &["", "tile.p=1", "tile.p=4 reduce=atomic", "tile.p=2 tile.n=2"], 1e-5)
        {
            assert_eq!(source.contains("edge_first"), owned, "{format}");
        }
    }
}

#[test]
fn owned_outputs_and_collisions_without_rows() {
    let mut rng = Rng(17);
    // Dense: every program owns its outputs.
    let mut data = Tensors::new();
    data.insert("A".into(), values(&[33, 20], &mut rng));
    data.insert("B".into(), values(&[20, 9], &mut rng));
    let e = einsum("C[m,n] += A[m,k] * B[k,n]", &[("A", &[33, 20], "f32"), ("B", &[20, 9], "f32")]);
    check(&e, &data, &["tile.m=4 tile.n=4", "tile.m=1 tile.n=8 tile.k=4"], 1e-5);
    // Scatter through a random index: private copies, or one thread.
    let mut data = Tensors::new();
    data.insert("A".into(), values(&[40, 12], &mut rng));
    data.insert("D".into(), indices((0..40).map(|_| rng.below(7)).collect()));
    let e = einsum(
        "C[D[y],x] += A[y,x]",
        &[("A", &[40, 12], "f32"), ("D", &[40], "i32"), ("C", &[7, 12], "f32")],
    );
    let sources = check(&e, &data, &["tile.y=4 tile.x=4"], 1e-5);
    assert!(sources[0].contains("edge_first"), "D[y] is a candidate, found unsorted at run time");
    let e = einsum(
        "C[D[y]+1,x] += A[y,x]",
        &[("A", &[40, 12], "f32"), ("D", &[40], "i32"), ("C", &[8, 12], "f32")],
    );
    let sources = check(&e, &data, &["tile.y=4 tile.x=4"], 1e-5);
    assert!(sources[0].contains("privatized") && !sources[0].contains("edge_first"), "{}", sources[0]);
}

#[test]
fn little_work_runs_without_a_parallel_region() {
    let mut rng = Rng(19);
    let (e, _) = spmm(SPMM, 20, sorted_rows(20, 50, &mut rng), 4, "f32", 20);
    let small = print::print(&lower(&e, "tile.p=1"), "k").unwrap();
    assert!(!small.contains("omp parallel"), "{small}");
    assert!(small.contains("One thread: too little work"), "{small}");
    let (e, _) = spmm(SPMM, 2000, sorted_rows(2000, 10000, &mut rng), 64, "f32", 20);
    let large = print::print(&lower(&e, "tile.p=1"), "k").unwrap();
    assert!(large.contains("omp parallel") && large.contains("edge_first"), "{large}");
}

/// Enough entries on shared rows that a race on them (a wrong ownership)
/// loses updates in practice: one row for everything, and rows of a few
/// thousand entries whose boundaries fall inside tiles.
#[test]
fn shared_rows_under_contention() {
    let nnz = 1 << 16;
    for r in [vec![5; nnz], (0..nnz as i64).map(|p| p / 3000).collect()] {
        let (e, data) = spmm(SPMM, 30, r, 16, "f32", 21);
        check(&e, &data, &["tile.p=1", "tile.p=16"], 1e-4);
    }
    // Two sorted halves: out of order only where two threads' parts meet.
    let half = nnz as i64 / 2;
    let r = (0..nnz as i64).map(|p| (p % half) * 30 / half).collect();
    let (e, data) = spmm(SPMM, 30, r, 16, "f32", 22);
    check(&e, &data, &["tile.p=1", "tile.p=16"], 1e-4);
    let mut rng = Rng(22);
    let mut r: Vec<i64> = (0..nnz).map(|_| rng.below(30)).collect();
    r[..nnz / 2].sort_unstable();
    let (e, data) = spmm(SPMM, 30, r, 16, "f32", 23);
    check(&e, &data, &["tile.p=1"], 1e-4);
}

/// Where two threads start to pay: SpMV and SpMM on growing prefixes of
/// ca-CondMat's rows, 1 against 2 threads with the threshold off, against
/// the kernel's work (the product of its extents). Run with
/// `cargo test -p spindle-c --release --test threads bench_threshold -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_threshold() {
    let Some(coo) = shared_matrix("ca-CondMat.mtx") else { return };
    println!(
        "{:>8} {:>4} {:>20} {:>10} {:>9} {:>9} {:>6}",
        "nnz", "N", "schedule", "work", "1 thr µs", "2 thr µs", "2/1"
    );
    for nnz in [2500, 5000, 10000, 20000, 40000, 80000, 186936] {
        let nnz = nnz.min(coo.nnz());
        let rows = coo.crd[0][nnz - 1] as usize + 1;
        let part = Coo::new(
            vec![rows, coo.shape[1]],
            coo.crd.iter().map(|c| c[..nnz].to_vec()).collect(),
            coo.val[..nnz].to_vec(),
        )
        .unwrap();
        for (n, schedule) in [
            (1, "tile.p=1"),
            (1, "tile.p=16"),
            (64, "tile.p=1 tile.n=64"),
            (64, "tile.p=16 tile.n=64"),
            (16, "tile.p=1 tile.n=16"),
        ] {
            let (e, data) = csr_product(&part, n);
            let kernel = lower(&e, schedule);
            let work = print::work(&kernel);
            let compiled = compile_threaded(&kernel);
            let mut buffers = compiled.buffers(&data).unwrap();
            let mut time = |threads| {
                let repeats = if work > 1 << 22 { 31 } else { 301 };
                time_median(repeats, 10, || compiled.launch(&mut buffers, threads).unwrap())
            };
            let (one, two) = (time(1), time(2));
            println!(
                "{nnz:>8} {n:>4} {schedule:>20} {work:>10} {:>9.1} {:>9.1} {:>6.2}",
                micros(one),
                micros(two),
                two.as_secs_f64() / one.as_secs_f64()
            );
        }
    }
}
