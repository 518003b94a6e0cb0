//! The CUDA backend on every corpus entry, lowered under the default
//! schedule as it runs (rewritten over its formats' arrays):
//!
//! - the NVRTC gate: the printed kernel compiles for sm_80 and sm_90, the
//!   compile result carries registers, shared memory, stack and spills, and
//!   nothing spills;
//! - one insta snapshot of the CUDA source per entry
//!   (`snapshots_cuda/cuda__NAME.snap`; regenerate with `INSTA_UPDATE=always
//!   cargo test -p spindle-tests --test cuda` and review the diff);
//! - one snapshot of the printer's plan per entry, in f32 and f16
//!   (`snapshots_plan/cuda__NAME.snap`): block size, inlined values and
//!   tiles, Tensor Core products and the reasons a dot stays on CUDA cores;
//! - what the kernels compute, run on the CPU under the CUDA emulation
//!   (`spindle_cuda::emulate`, AddressSanitizer on; ThreadSanitizer with
//!   `SPINDLE_EMU_SANITIZER=thread`) in f32 and f16 and under several
//!   schedules, against the reference evaluator.
//!
//! Without the CUDA toolchain the gate skips visibly ("SKIPPED: ..."),
//! except under CI (`CI=true`), where a missing toolchain is a failure: CI
//! runs `cargo xtask test`, which installs it. Without a C++ compiler the
//! emulation skips visibly.

use ndarray::{ArrayD, Dimension};
use spindle_cuda::emulate::{self, EmulateOptions};
use std::io::Write;

use spindle_cuda::nvrtc::{self, Arch, CompileOptions, Resources};
use spindle_cuda::print::{CudaKernel, DotPath, PrintOptions, plan_text, print_kernel};
use spindle_formats::DType;
use spindle_ir::kernel::lower::lower;
use spindle_ir::kernel::schedule::{Mapping, Schedule};
use spindle_tests::corpus::{CheckRun, Entry, build, check_runs, entries, typed};

const SYMBOL: &str = "spindle_kernel";

/// The entry's kernel under the default schedule, printed as CUDA.
fn cuda(name: &str, entry: &Entry) -> (String, CudaKernel) {
    cuda_under(name, entry, &Schedule::default())
}

/// The entry's kernel under `schedule`, printed as CUDA.
fn cuda_under(name: &str, entry: &Entry, schedule: &Schedule) -> (String, CudaKernel) {
    let built = build(name, entry);
    let kernel =
        lower(&built.einsum, schedule, SYMBOL).unwrap_or_else(|d| panic!("{name} [{schedule}]: {d}"));
    let printed =
        print_kernel(&kernel, SYMBOL, &PrintOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let statement = built.rewritten.unwrap_or_else(|| entry.statement.clone());
    (statement, printed)
}

/// True when the test should go on (see `nvrtc::toolchain_or_skip`).
fn toolchain_available(test: &str) -> bool {
    spindle_cuda::nvrtc::toolchain_or_skip(test)
}

#[test]
fn every_corpus_entry_compiles_with_nvrtc_without_spills() {
    let test = "every_corpus_entry_compiles_with_nvrtc_without_spills";
    if !toolchain_available(test) {
        return;
    }
    let entries = entries();
    assert!(entries.len() >= 12, "the corpus lost entries");
    let mut report = Vec::new();
    // The default schedule, and each of Sgap's strategies the entry admits
    // (their shuffle scans must not spill either).
    let mut kernels = Vec::new();
    for (name, entry) in &entries {
        kernels.push((name.clone(), cuda(name, entry).1));
        let built = build(name, entry);
        for reduce in spindle_tests::corpus::sgap_strategies(&built.einsum) {
            let schedule: Schedule = reduce.parse().unwrap();
            kernels.push((format!("{name} {reduce}"), cuda_under(name, entry, &schedule).1));
        }
    }
    assert!(kernels.iter().filter(|(n, _)| n.contains("segment")).count() >= 6, "few segment kernels");
    for (name, printed) in &kernels {
        for arch in [Arch::Sm80, Arch::Sm90] {
            let compiled = nvrtc::compile(&printed.source, name, arch, &CompileOptions::default())
                .unwrap_or_else(|e| panic!("{name} for {arch}: {e}"));
            assert_eq!(&compiled.cubin[..4], b"\x7fELF", "{name} for {arch}: not a CUBIN");
            let r: Resources = *compiled
                .resources_of(SYMBOL)
                .unwrap_or_else(|| panic!("{name} for {arch}: no resources in {:?}", compiled.log));
            assert!(r.registers > 0 && r.registers <= 255, "{name} for {arch}: {r:?}");
            assert!(!r.spills(), "{name} for {arch}: spills: {r:?}");
            assert_eq!(r.stack_bytes, 0, "{name} for {arch}: a stack frame: {r:?}");
            assert!(
                r.shared_mem_bytes as usize <= printed.launch.shared_bytes,
                "{name} for {arch}: ptxas reports more shared memory than the printer's bound: {r:?}"
            );
            report.push(format!(
                "{name:>20} {arch}: {:>3} registers, {:>5} B shared, {} B stack, grid {}, block {}",
                r.registers, r.shared_mem_bytes, r.stack_bytes, printed.launch.grid, printed.launch.block
            ));
        }
    }
    let _ = writeln!(std::io::stderr(), "{}", report.join("\n"));
}

#[test]
fn every_corpus_entry_has_a_cuda_snapshot() {
    for (name, entry) in &entries() {
        let (statement, printed) = cuda(name, entry);
        let text = format!("// {statement}\n// schedule: {}\n\n{}", Schedule::default(), printed.source);
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path("snapshots_cuda");
        settings.set_description(entry.description.clone());
        settings.set_omit_expression(true);
        settings.bind(|| insta::assert_snapshot!(name.as_str(), text));
    }
}

#[test]
fn every_corpus_entry_has_a_plan_snapshot() {
    for (name, entry) in &entries() {
        let built = build(name, entry);
        let mut text = String::new();
        for dtype in [DType::F32, DType::F16] {
            let (einsum, _) = typed(&built.einsum, &built.data, dtype);
            let kernel =
                lower(&einsum, &Schedule::default(), SYMBOL).unwrap_or_else(|d| panic!("{name}: {d}"));
            text += &format!("{}:\n{}\n", dtype.name(), plan_text(&kernel, &PrintOptions::default()));
        }
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path("snapshots_plan");
        settings.set_description(entry.statement.clone());
        settings.set_omit_expression(true);
        settings.bind(|| insta::assert_snapshot!(name.as_str(), text));
    }
}

/// No snapshot outlives its entry: every file in the folders names one.
#[test]
fn every_cuda_snapshot_file_belongs_to_an_entry() {
    let names: Vec<String> = entries().into_iter().map(|(n, _)| format!("cuda__{n}.snap")).collect();
    for folder in ["tests/snapshots_cuda", "tests/snapshots_plan"] {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
        let Ok(files) = std::fs::read_dir(&dir) else { continue };
        for file in files {
            let file = file.unwrap().file_name().to_string_lossy().into_owned();
            assert!(names.contains(&file), "{folder}/{file} belongs to no corpus entry: delete it");
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

/// Every entry on the emulated GPU: the default schedule in f32 and f16
/// (f16 products run on Tensor Cores where the tiles allow), ragged tiles,
/// atomic updates per element and eager broadcasting.
#[test]
fn every_corpus_entry_computes_its_reference_on_the_emulated_gpu() {
    if !emulate::compiler_or_skip("every_corpus_entry_computes_its_reference_on_the_emulated_gpu") {
        return;
    }
    let entries = entries();
    let mut runs = Vec::new();
    for (name, entry) in &entries {
        let built = build(name, entry);
        for CheckRun { dtype, tolerance, schedule } in check_runs(&built) {
            runs.push((name.clone(), built.einsum.clone(), built.data.clone(), dtype, tolerance, schedule));
        }
    }
    let tensor_core_runs = std::sync::atomic::AtomicUsize::new(0);
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while let Some((name, einsum, data, dtype, tolerance, schedule)) =
                    runs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let what = format!("{name} in {} [{schedule}]", dtype.name());
                    let (einsum, data) = typed(einsum, data, *dtype);
                    let want = spindle_ir::eval::evaluate(&einsum, &data).unwrap();
                    let kernel = lower(&einsum, &schedule.parse().unwrap(), SYMBOL)
                        .unwrap_or_else(|d| panic!("{what}: {d}"));
                    let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::default())
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    if printed.dots.iter().any(|d| matches!(d.path, DotPath::TensorCores { .. })) {
                        tensor_core_runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    let got = emulate::run(&kernel, &printed, &data, &EmulateOptions::from_env())
                        .unwrap_or_else(|e| panic!("{what}: {e}\n{}", printed.source));
                    close_to(&got, &want, *tolerance, &what);
                }
            });
        }
    });
    assert!(tensor_core_runs.into_inner() > 0, "no corpus run used Tensor Cores");
}

/// GroupCOO (and COO) SpMM of `dtype` with `n` columns, prepared by the
/// driver: a power-law matrix, so rows are long and short and some empty.
fn walk_problem(format: &str, dtype: DType, n: usize) -> spindle::Prepared {
    use spindle::{ElemType, Input};
    let spec: spindle_formats::generate::GeneratorSpec =
        "powerlaw:rows=160,cols=96,nnz=1400,seed=4".parse().unwrap();
    let coo = spec.generate::<f64, i64>().unwrap().canonicalize();
    let values = ElemType::Value(dtype);
    let b = ndarray::Array2::from_shape_fn((96, n), |(i, j)| ((i * 7 + j * 3) % 11) as f64 / 11.0 - 0.4);
    spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", Input::from(coo).with_dtype(values))
        .tensor("B", Input::from(b).with_dtype(values))
        .tensor("C", Input::shape(&[160, n], values))
        .format("A", format)
        .prepare()
        .unwrap_or_else(|e| panic!("{format}: {}", e.render(false)))
}

/// GroupCOO and COO SpMM under `map={map}` on the emulated GPU against the
/// reference evaluator: runs of 1 to 16 groups (so runs end inside rows and
/// rows span runs), `n` ragged against the lanes' 16-byte vectors, f16,
/// bf16 and f64; `inspect` looks at each printed source first.
fn walk_cases_agree(backend: &spindle::EmulateBackend, map: &str, inspect: &dyn Fn(&str, &str)) {
    // The last fields: sub-warps a warp splits into (a row of B takes at
    // most half its lanes and a group has entries to share), and the lanes
    // of a team that walks its own run (where lanes are idle still).
    let cases = [
        ("groupcoo:dim=0,g=4", DType::F32, 64, 4, 2, 32),
        ("groupcoo:dim=0,g=1", DType::F32, 13, 1, 1, 16),
        ("groupcoo:dim=0,g=8", DType::F16, 128, 16, 2, 32),
        ("groupcoo:dim=0,g=32", DType::F32, 40, 2, 2, 32),
        ("groupcoo:dim=0,g=16", DType::Bf16, 24, 8, 8, 32),
        ("groupcoo:dim=0,g=3", DType::F32, 16, 4, 4, 16),
        ("groupcoo:dim=0,g=8", DType::F32, 128, 8, 1, 32),
        ("csr", DType::F16, 128, 8, 1, 16),
        ("coo", DType::F16, 64, 16, 1, 8),
        ("coo", DType::F64, 6, 4, 1, 4),
    ];
    for (format, dtype, n, run, split, team) in cases {
        let what = format!("map={map} {format} {} n={n} tile.p={run}", dtype.name());
        let prepared = walk_problem(format, dtype, n);
        let schedule: Schedule = format!("map={map} tile.p={run}").parse().unwrap();
        let compiled = prepared.compile(backend, &schedule).unwrap_or_else(|e| panic!("{what}: {e}"));
        let split_note = format!("entries q % {split} == sub");
        assert_eq!(compiled.source().contains(&split_note), split > 1, "{what}: not in {split} sub-warps");
        let team_note = format!("team w of {team} lanes ({} a warp)", 32 / team);
        assert_eq!(compiled.source().contains(&team_note), team < 32, "{what}: not in teams of {team}");
        inspect(&what, compiled.source());
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(check.max_rel_error <= check.tolerance, "{what}: error {:.2e}", check.max_rel_error);
    }
}

/// A program on the emulated GPU under `path=levels`, its statements apart
/// (`fusion=none`): SDDMM's dense product reads no stored operand, so it
/// runs on the tile path and the masked product on the level path (it was
/// refused: "give an operand a format").
#[test]
fn a_program_under_path_levels_runs_its_dense_statement_on_tiles() {
    use spindle::Input;
    if !emulate::compiler_or_skip("a_program_under_path_levels_runs_its_dense_statement_on_tiles") {
        return;
    }
    let entries: Vec<(usize, usize, f64)> =
        (0..30).map(|e| (e % 12, (e * 7) % 10, 0.5 + e as f64 / 30.0)).collect();
    let a = spindle_formats::Coo::<f64, i64>::from_triplets(12, 10, &entries).unwrap();
    let problem = spindle::Problem::new("C[i,j] = A[i,j] * (P[i,k] * Q[k,j])")
        .tensor("A", Input::from(a))
        .format("A", "csr")
        .tensor("P", Input::random(&[12, 4], DType::F32, 1))
        .tensor("Q", Input::random(&[4, 10], DType::F32, 2));
    let schedule: Schedule = "path=levels fusion=none".parse().unwrap();
    let opts = spindle::TimingOptions { warmup: 0, repeats: 1 };
    let ran = problem.run_program(&spindle::EmulateBackend::from_env(), &schedule, opts, true).unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}", ran.checks);
    assert!(ran.notes.iter().any(|n| n.contains("reads no stored operand")), "{:?}", ran.notes);
}

/// On a GPU, ReACT's program kernel (the default `fusion=trie`) runs
/// where its temporaries are each lane's own: SDDMM's product reduced to a
/// scalar per entry, lanes over a row's entries (the statements ran apart,
/// or substituted into one); the same under a function (`exp`), which no
/// substitution takes (it ran apart, an M x N dense temporary); GNN's
/// `A * X * W`, its row of `X * W` a slice of 16 in each lane, lanes over
/// the output's columns; a 16-bit program (input-sensitive fusion
/// substitutes its one-term sum) on one kernel.
#[test]
fn a_gpu_program_runs_reacts_kernel_where_its_temporaries_are_each_lanes() {
    use spindle::Input;
    if !emulate::compiler_or_skip("a_gpu_program_runs_reacts_kernel_where_its_temporaries_are_each_lanes") {
        return;
    }
    let a = a_12x10();
    let opts = spindle::TimingOptions { warmup: 0, repeats: 1 };
    let backend = spindle::EmulateBackend::from_env();
    let sddmm = [
        "C[i,j] = A[i,j] * (P[i,k] * Q[k,j])",
        "C[i,j] = A[i,j] * P[i,k] * Q[k,j]",
        "T[i,j] = P[i,k] * Q[k,j]; C[i,j] = A[i,j] * exp(T[i,j])",
    ];
    for program in sddmm {
        let problem = spindle::Problem::new(program)
            .tensor("A", Input::from(a.clone()))
            .format("A", "csr")
            .tensor("P", Input::random(&[12, 4], DType::F32, 1))
            .tensor("Q", Input::random(&[4, 10], DType::F32, 2));
        let ran = problem.run_program(&backend, &Schedule::default(), opts, true).unwrap();
        assert!(ran.checks.iter().all(|c| c.passed()), "{program}: {:?}", ran.checks);
        assert_eq!(ran.kernels.len(), 1, "{program}: {:?}", ran.notes);
        assert!(ran.sources[0].contains("lanes over the row's entries"), "{program}: {}", ran.sources[0]);
        assert!(ran.kernels[0].contains("(a scalar)"), "{program}: {}", ran.kernels[0]);
    }
    let gnn = spindle::Problem::new("Z[i,h] = A[i,j] * X[j,k] * W[k,h]")
        .tensor("A", Input::from(a))
        .format("A", "csr")
        .tensor("X", Input::random(&[10, 16], DType::F32, 3))
        .tensor("W", Input::random(&[16, 8], DType::F32, 4));
    let ran = gnn.run_program(&backend, &Schedule::default(), opts, true).unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}", ran.checks);
    assert_eq!(ran.kernels.len(), 1, "{:?}", ran.notes);
    assert!(ran.sources[0].contains("lanes over the dense columns"), "{}", ran.sources[0]);
    // A row's sum into a scalar, outside the loop the lanes split: the
    // lanes split its entries too and add their sums with shuffles (each
    // lane walked the row whole).
    let row_sum = spindle::Problem::new("t[i] = A[i,j] * x[j]; y[i,n] = t[i] * B[i,n]")
        .tensor("A", Input::from(wide_rows()))
        .format("A", "csr")
        .tensor("x", Input::random(&[40], DType::F32, 7))
        .tensor("B", Input::random(&[12, 8], DType::F32, 8));
    let ran = row_sum.run_program(&backend, &Schedule::default(), opts, true).unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}", ran.checks);
    assert_eq!(ran.kernels.len(), 1, "{:?}", ran.notes);
    assert!(ran.sources[0].contains("__shfl_xor_sync"), "{}", ran.sources[0]);
    // Two loops over a row's entries, the first summing `t`, the second
    // writing y: the lanes split the second, each entry its own element,
    // and add the first's sums (every loop over `j` counted as split, and
    // the kernel was refused).
    let siblings = spindle::Problem::new("t[i] = A[i,j] * x[j]; y[i,j] = A[i,j] / t[i]")
        .tensor("A", Input::from(a_12x10()))
        .format("A", "csr")
        .tensor("x", Input::random(&[10], DType::F32, 9));
    let ran = siblings.run_program(&backend, &Schedule::default(), opts, true).unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}", ran.checks);
    assert_eq!(ran.kernels.len(), 1, "{:?}", ran.notes);
    let source = &ran.sources[0];
    assert!(
        source.contains("__shfl_xor_sync") && source.contains("lanes over the row's entries"),
        "{source}"
    );
    let f16 = spindle::Problem::new("t[i] = A[i,j] * x[j]; y[i] = t[i] * A[i,k] * z[k]")
        .tensor("A", Input::from(a_square()))
        .format("A", "csr")
        .tensor("x", Input::random(&[10], DType::F16, 5))
        .tensor("z", Input::random(&[10], DType::F16, 6));
    let ran = f16.run_program(&backend, &Schedule::default(), opts, true).unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}", ran.checks);
    assert_eq!(ran.kernels.len(), 1, "{:?}", ran.notes);
}

/// SDDMM with two masks, `S = A*B*(P*Q)` with S in A's format: ReACT's
/// kernel walks A's row and searches B's for each entry (a device
/// function, the C backend's macro being a GNU statement expression),
/// checked on the emulated GPU and compiled by NVRTC for sm_80 and sm_90
/// without spills.
#[test]
fn a_gpu_program_searches_a_second_mask() {
    use spindle::Input;
    if !emulate::compiler_or_skip("a_gpu_program_searches_a_second_mask") {
        return;
    }
    let toolchain = nvrtc::toolchain_or_skip("a_gpu_program_searches_a_second_mask");
    let opts = spindle::TimingOptions { warmup: 0, repeats: 1 };
    let backend = spindle::EmulateBackend::from_env();
    let b = spindle_formats::generate::uniform::<f64, i64>(12, 10, 50, 4).unwrap();
    let problem = spindle::Problem::new("S[i,j] = A[i,j] * B[i,j] * (P[i,k] * Q[k,j])")
        .tensor("A", Input::from(a_12x10()))
        .tensor("B", b)
        .format("A", "csr")
        .format("B", "csr")
        .format("S", "csr")
        .tensor("P", Input::random(&[12, 4], DType::F32, 1))
        .tensor("Q", Input::random(&[4, 10], DType::F32, 2));
    let ran = problem.run_program(&backend, &Schedule::default(), opts, true).unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}", ran.checks);
    assert!(ran.result.iter().any(|x| *x != 0.0));
    let source = ran.sources.last().unwrap();
    assert!(source.contains("spindle_search(") && source.contains("t_S[p_A1]"), "{source}");
    if toolchain {
        for arch in [Arch::Sm80, Arch::Sm90] {
            let compiled = nvrtc::compile(source, SYMBOL, arch, &CompileOptions::default())
                .unwrap_or_else(|e| panic!("{arch}: {e}\n{source}"));
            let r = compiled.resources_of(SYMBOL).unwrap_or_else(|| panic!("{arch}: {:?}", compiled.log));
            assert!(!r.spills(), "{arch}: spills: {r:?}");
        }
    }
}

/// A program kernel over COO (`y = A*D*x`, the sum over each entry's one
/// column): each thread takes an entry of A, where a warp took it and 31
/// of its lanes had no term; checked on the emulated GPU.
#[test]
fn a_gpu_level_kernel_over_coo_entries_gives_each_thread_one() {
    use spindle::Input;
    if !emulate::compiler_or_skip("a_gpu_level_kernel_over_coo_entries_gives_each_thread_one") {
        return;
    }
    let opts = spindle::TimingOptions { warmup: 0, repeats: 1 };
    let backend = spindle::EmulateBackend::from_env();
    let problem = spindle::Problem::new("y[i] = A[i,j] * D[i,j] * x[j]")
        .tensor("A", Input::from(a_12x10()))
        .format("A", "coo")
        .tensor("D", Input::random(&[12, 10], DType::F32, 1))
        .tensor("x", Input::random(&[10], DType::F32, 2));
    let ran = problem.run_program(&backend, &Schedule::default(), opts, true).unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}", ran.checks);
    assert!(ran.result.iter().any(|x| *x != 0.0));
    let source = ran.sources.last().unwrap();
    assert!(source.contains("a thread per iteration of the outermost loop"), "{source}");
    assert!(!source.contains("__shfl"), "{source}");
}

/// Where ReACT's program kernel does not print for a GPU, the run says
/// why, and `fusion=trie` runs the statements substituted into one where
/// that does fewer products than the statements apart with dense
/// temporaries: SDDMM over CSC (its columns outermost, the rows of the
/// product inside), 30 entries x 4 against a 12 x 10 x 4 dense product.
/// GNN's `A * X * W` with a row of 80 (more than a lane keeps), whose
/// substituted statement multiplies every entry of A by all of X * W,
/// stays apart.
#[test]
fn where_reacts_kernel_does_not_print_on_a_gpu_the_products_decide() {
    use spindle::Input;
    if !emulate::compiler_or_skip("where_reacts_kernel_does_not_print_on_a_gpu_the_products_decide") {
        return;
    }
    let opts = spindle::TimingOptions { warmup: 0, repeats: 1 };
    let backend = spindle::EmulateBackend::from_env();
    let problem = spindle::Problem::new("C[i,j] = A[i,j] * (P[i,k] * Q[k,j])")
        .tensor("A", Input::from(a_12x10()))
        .format("A", "csc")
        .tensor("P", Input::random(&[12, 4], DType::F32, 1))
        .tensor("Q", Input::random(&[4, 10], DType::F32, 2));
    let ran = problem.run_program(&backend, &Schedule::default(), opts, true).unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}", ran.checks);
    assert_eq!(ran.kernels.len(), 1, "{:?}", ran.notes);
    let note = ran.notes.iter().find(|n| n.contains("fused maximally")).expect("a note says why");
    assert!(note.contains("ReACT's program kernel does not run on CUDA emulation"), "{note}");
    assert!(note.contains("about 1.200e2 products"), "{note}");
    let gnn = spindle::Problem::new("Z[i,h] = A[i,j] * X[j,k] * W[k,h]")
        .tensor("A", Input::from(a_12x10()))
        .format("A", "csr")
        .tensor("X", Input::random(&[10, 80], DType::F32, 3))
        .tensor("W", Input::random(&[80, 8], DType::F32, 4));
    let ran = gnn.run_program(&backend, &Schedule::default(), opts, true).unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}", ran.checks);
    assert_eq!(ran.kernels.len(), 2, "{:?}", ran.notes);
    assert!(ran.notes.iter().any(|n| n.contains("holds 80 elements")), "{:?}", ran.notes);
    assert!(ran.notes.iter().any(|n| n.contains("so they run apart")), "{:?}", ran.notes);
}

/// A 12 x 40 matrix whose rows hold 0 to 39 entries (more than a warp's
/// lanes in some).
fn wide_rows() -> spindle_formats::Coo<f64, i64> {
    let entries: Vec<(usize, usize, f64)> = (0..12)
        .flat_map(|r| (0..(r * 37) % 40).map(move |c| (r, c, 0.5 + ((r * 7 + c) % 11) as f64 / 11.0)))
        .collect();
    spindle_formats::Coo::<f64, i64>::from_triplets(12, 40, &entries).unwrap()
}

/// A 12 x 10 matrix of 30 entries.
fn a_12x10() -> spindle_formats::Coo<f64, i64> {
    let entries: Vec<(usize, usize, f64)> =
        (0..30).map(|e| (e % 12, (e * 7) % 10, 0.5 + e as f64 / 30.0)).collect();
    spindle_formats::Coo::<f64, i64>::from_triplets(12, 10, &entries).unwrap()
}

/// A 10 x 10 matrix of 30 entries, every row and column stored.
fn a_square() -> spindle_formats::Coo<f64, i64> {
    let entries: Vec<(usize, usize, f64)> =
        (0..30).map(|e| (e % 10, (e * 7) % 10, 0.5 + e as f64 / 30.0)).collect();
    spindle_formats::Coo::<f64, i64>::from_triplets(10, 10, &entries).unwrap()
}

/// Operands with no entries, or no rows at all: the kernel launches no
/// block where its iteration space is empty (a grid of 0, which the runtime
/// skips; one block ran a tile of unmasked loads past the arrays' ends) and
/// the harness reads and writes empty arrays; the output is the reference's
/// zeros under the tile path, the warp walk, the row walk (which writes
/// every row: one run launches) and the level path.
#[test]
fn empty_operands_launch_nothing_on_the_emulated_gpu() {
    use spindle::Input;
    if !emulate::compiler_or_skip("empty_operands_launch_nothing_on_the_emulated_gpu") {
        return;
    }
    let backend = spindle::EmulateBackend::from_env();
    let empty = |rows: usize, cols: usize| {
        spindle_formats::Coo::<f64, i64>::new(vec![rows, cols], vec![vec![], vec![]], vec![]).unwrap()
    };
    let b = |rows: usize| ndarray::Array2::from_shape_fn((rows, 8), |(i, j)| (i + j) as f64 / 8.0 + 0.1);
    let spmm = |rows: usize, cols: usize, format: &str| {
        spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
            .tensor("A", Input::from(empty(rows, cols)))
            .tensor("B", Input::from(b(cols)))
            .tensor("C", Input::shape(&[rows, 8], spindle::ElemType::Value(DType::F32)))
            .format("A", format)
            .prepare()
            .unwrap()
    };
    let cases = [
        (spmm(50, 40, "csr"), "tile.p=16"),
        (spmm(50, 40, "coo"), "map=walk"),
        (spmm(50, 40, "groupcoo:dim=0,g=2"), "tile.p=4"),
        (spmm(50, 40, "csr"), "path=levels"),
        // The row walk writes every row (C is not zeroed first), so it
        // launches one run even with no groups.
        (spmm(50, 40, "coo"), "map=rows tile.p=2"),
        (spmm(50, 40, "groupcoo:dim=0,g=2"), "map=rows tile.p=8"),
        (spmm(0, 0, "csr"), "tile.p=16"),
        (
            spindle::Problem::new("y[i] = A[i,j] * x[j]")
                .tensor("A", Input::from(ndarray::Array2::<f64>::zeros((0, 0))))
                .tensor("x", Input::from(ndarray::Array1::<f64>::zeros(0)))
                .prepare()
                .unwrap(),
            "tile.i=16",
        ),
    ];
    for (prepared, items) in cases {
        let schedule: Schedule = items.parse().unwrap();
        let compiled = prepared.compile(&backend, &schedule).unwrap_or_else(|e| panic!("{items}: {e}"));
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{items}: {e}"));
        assert!(check.max_rel_error <= check.tolerance, "{items}: error {:.2e}", check.max_rel_error);
    }
}

/// The warp walk (`map=walk`) on GroupCOO and COO SpMM: on the emulated
/// GPU against the reference evaluator (runs of 1 to 16 groups, so runs
/// end inside rows and rows span runs; `n` ragged against the lanes' 16-byte
/// vectors; f16 and bf16). Where C starts at zero (the emulation starts it
/// at NaN, and the carried slots too) a run stores its rows and the empty
/// rows after them without reading C, and its sums of the rows it shares
/// go to the second kernel: no atomics, no f32 copy of a 16-bit C; under
/// `+=` into given data a run's interior rows are added to and its shared
/// rows added by atomics; unsorted rows are refused.
#[test]
fn the_warp_walk_computes_spmm_on_the_emulated_gpu() {
    if !emulate::compiler_or_skip("the_warp_walk_computes_spmm_on_the_emulated_gpu") {
        return;
    }
    let backend = spindle::EmulateBackend::from_env();
    walk_cases_agree(&backend, "walk", &|what, source| {
        assert!(source.contains("warp-walk mapping"), "{what}: not the walk");
        assert!(!source.contains("= *to;"), "{what}: an interior row read before it is stored\n{source}");
        assert!(!source.contains("atomicAdd") && !source.contains("_round("), "{what}: an atomic\n{source}");
        assert!(source.contains("spindle_kernel_carry("), "{what}: no second kernel\n{source}");
    });
    let given = spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", spindle::Input::from(a_square()))
        .tensor("B", spindle::Input::random(&[10, 64], DType::F32, 2))
        .tensor("C", spindle::Input::random(&[10, 64], DType::F32, 3))
        .format("A", "groupcoo:dim=0,g=2")
        .prepare()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    // Runs of 4 rows (2 groups each): 2 interior rows a run.
    let compiled = given.compile(&backend, &"map=walk tile.p=8".parse().unwrap()).unwrap();
    assert!(compiled.source().contains("*reinterpret_cast<uint4 *>(o) = *to;"), "{}", compiled.source());
    assert!(compiled.source().contains("atomicAdd(&"), "{}", compiled.source());
    let (_, given_check) = compiled.check().unwrap();
    let error = given_check.max_rel_error;
    assert!(error <= given_check.tolerance, "+= into given C: error {error:.2e}");
    // Rows out of order (an indirect statement's own data) are refused
    // before the kernel runs: its interior rows would race.
    let rows = ndarray::Array1::from(vec![0i64, 2, 1, 3]);
    let unsorted = spindle::Problem::new("C[R[p],n] += V[p] * B[K[p],n]")
        .tensor("R", spindle::Input::indices(rows))
        .tensor("K", spindle::Input::indices(ndarray::Array1::from(vec![0i64, 1, 2, 3])))
        .tensor("V", spindle::Input::random(&[4], DType::F32, 1))
        .tensor("B", spindle::Input::random(&[4, 8], DType::F32, 2))
        .tensor("C", spindle::Input::shape(&[4, 8], spindle::ElemType::Value(DType::F32)))
        .prepare()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let compiled = unsorted.compile(&backend, &"map=walk".parse().unwrap()).unwrap();
    let err = compiled.run().unwrap_err().to_string();
    assert!(err.contains("needs R in nondecreasing order, but R[2] = 1 follows R[1] = 2"), "{err}");

    // A statement the walk does not print: refused with the reason.
    use spindle_ir::lang::{check, declarations, parse};
    let decls = declarations(&[("y", &[10], "f32"), ("A", &[10, 12], "f32"), ("x", &[12], "f32")]);
    let spmv = check(&parse("y[i] += A[i,k] * x[k]").unwrap(), &decls).unwrap();
    let kernel = lower(&spmv, &Schedule::default(), SYMBOL).unwrap();
    let walk = PrintOptions { map: Mapping::Walk, ..PrintOptions::default() };
    let err = print_kernel(&kernel, SYMBOL, &walk).unwrap_err().to_string();
    assert!(err.contains("the output is not a matrix C[R[p],n]") && err.contains("use map=tiles"), "{err}");
}

/// The row walk (`map=rows` on GroupCOO and COO SpMM): each warp writes
/// whole rows, so no atomics, no f32 copy of a 16-bit output and no zeroing
/// first. On the emulated GPU against the reference evaluator: runs of 1 to
/// 16 groups (rows longer than a run go whole to the warp where they start,
/// runs inside a long row own nothing), ragged `n`, f16/bf16 outputs stored
/// directly, empty rows before the first group, between groups and after
/// the last (written as zeros by their owner), and `+=` into given data.
#[test]
fn the_row_walk_computes_spmm_on_the_emulated_gpu() {
    if !emulate::compiler_or_skip("the_row_walk_computes_spmm_on_the_emulated_gpu") {
        return;
    }
    let backend = spindle::EmulateBackend::from_env();
    walk_cases_agree(&backend, "rows", &|what, source| {
        assert!(source.contains("row-walk mapping"), "{what}: not the row walk");
        assert!(!source.contains("atomicAdd"), "{what}: an atomic\n{source}");
    });
    // Rows 0-1, 3-4 and 7-8 empty; `+=` into data (kept where no group
    // writes) and into no data (zeros written by the rows' owners). Then
    // rows of 40 and 50 groups: a run's first row start lies more than 32
    // entries ahead, past the one-load look, so the search finds it.
    let problem = |rows: Vec<i64>, m: usize, with_data: bool| {
        let f32 = spindle::ElemType::Value(DType::F32);
        let p = rows.len();
        let c = if with_data {
            spindle::Input::random(&[m, 8], DType::F32, 3)
        } else {
            spindle::Input::shape(&[m, 8], f32)
        };
        let crd: Vec<i64> = (0..p as i64).map(|i| i % 4).collect();
        spindle::Problem::new("C[R[p],n] += V[p] * B[K[p],n]")
            .tensor("R", spindle::Input::indices(ndarray::Array1::from(rows)))
            .tensor("K", spindle::Input::indices(ndarray::Array1::from(crd)))
            .tensor("V", spindle::Input::random(&[p], DType::F32, 1))
            .tensor("B", spindle::Input::random(&[4, 8], DType::F32, 2))
            .tensor("C", c)
            .prepare()
            .unwrap_or_else(|e| panic!("{}", e.render(false)))
    };
    let gaps = vec![2i64, 2, 5, 6];
    let long: Vec<i64> =
        [(0i64, 40), (1, 3), (3, 50), (4, 1)].iter().flat_map(|&(r, k)| vec![r; k]).collect();
    let cases = [
        (&gaps, 9, false, 1),
        (&gaps, 9, false, 2),
        (&gaps, 9, false, 8),
        (&gaps, 9, true, 1),
        (&gaps, 9, true, 2),
        (&long, 6, false, 1),
        (&long, 6, false, 2),
        (&long, 6, true, 8),
    ];
    for (rows, m, with_data, run) in cases {
        let what = format!("rows {rows:?}, data {with_data}, tile.p={run}");
        let schedule: Schedule = format!("map=rows tile.p={run}").parse().unwrap();
        let prepared = problem(rows.clone(), m, with_data);
        let compiled = prepared.compile(&backend, &schedule).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(check.max_rel_error <= check.tolerance, "{what}: error {:.2e}", check.max_rel_error);
    }
}

/// The machine code of `source` for `arch` as the runtime compiles it
/// ([`nvrtc::compile_spill_free`]), after asserting that nothing spills and
/// there is no stack frame.
fn spill_free_sass(
    toolchain: &nvrtc::Toolchain,
    source: &str,
    arch: Arch,
    what: &str,
) -> spindle_cuda::sass::Sass {
    let compiled = nvrtc::compile_spill_free(source, SYMBOL, arch, &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let r = compiled.resources_of(SYMBOL).unwrap_or_else(|| panic!("{what}: no resources"));
    assert!(!r.spills() && r.stack_bytes == 0, "{what}: {r:?}");
    spindle_cuda::sass::disassemble(toolchain, &compiled.cubin, SYMBOL)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The machine code as text, an instruction a line with its offset, for
/// failure messages.
fn listing(sass: &spindle_cuda::sass::Sass) -> String {
    sass.instructions.iter().map(|i| format!("{:04x} {}", i.offset, i.text)).collect::<Vec<_>>().join("\n")
}

/// Asserts that `what` writes by atomics (`RED`/`ATOM`), none of them on
/// a control-flow cycle.
fn atomics_outside_loops(sass: &spindle_cuda::sass::Sass, what: &str) {
    let atomics: Vec<_> = sass.memory_atomics().collect();
    outside_loops(sass, &atomics, &format!("{what}: atomics"));
}

/// Asserts that there are `found` instructions, none of them on a
/// control-flow cycle.
fn outside_loops(sass: &spindle_cuda::sass::Sass, found: &[&spindle_cuda::sass::Instruction], what: &str) {
    assert!(!found.is_empty(), "{what}: none\n{}", listing(sass));
    for a in found {
        assert!(
            !sass.in_loop(a),
            "{what}: {} at {:#x} is inside a loop\n{}",
            a.text,
            a.offset,
            listing(sass)
        );
    }
}

/// The walks under L2 policies (`l2hints=on`: B's rows read with
/// `evict_last`, C's rows stored with `evict_first`) on the emulated GPU
/// against the reference evaluator, in f32, f16 and bf16; where B's rows
/// are not read in 16-byte vectors (13 columns) the kernel is the plain
/// one. In machine code the hinted kernel still reads B in 16-byte loads.
#[test]
fn l2_hints_keep_the_walks_results() {
    if !emulate::compiler_or_skip("l2_hints_keep_the_walks_results") {
        return;
    }
    let backend = spindle::EmulateBackend::from_env();
    let cases = [
        ("groupcoo:dim=0,g=4", DType::F32, 64, "map=walk tile.p=4"),
        ("groupcoo:dim=0,g=8", DType::F16, 128, "map=walk tile.p=16"),
        ("coo", DType::Bf16, 64, "map=rows tile.p=8"),
        ("groupcoo:dim=0,g=4", DType::F32, 128, "map=rows tile.p=2"),
        ("groupcoo:dim=0,g=1", DType::F32, 13, "map=walk tile.p=4"),
    ];
    for (format, dtype, n, items) in cases {
        let what = format!("{format} {} n={n} [{items} l2hints=on]", dtype.name());
        let prepared = walk_problem(format, dtype, n);
        let schedule: Schedule = format!("{items} l2hints=on").parse().unwrap();
        let plain = print_kernel(
            &prepared.lower(&schedule).unwrap(),
            SYMBOL,
            &PrintOptions::from(&items.parse::<Schedule>().unwrap()),
        )
        .unwrap();
        let compiled = prepared.compile(&backend, &schedule).unwrap_or_else(|e| panic!("{what}: {e}"));
        let hinted = compiled.source().contains("spindle_ld16_hint(&");
        // `--emit plan` describes the walk that prints, not a tile plan.
        let plan = plan_text(&prepared.lower(&schedule).unwrap(), &PrintOptions::from(&schedule));
        let mapping = if items.starts_with("map=walk") { "warp-walk mapping" } else { "row-walk mapping" };
        assert!(plan.starts_with(mapping) && plan.contains("launch: grid"), "{what}: {plan}");
        assert_eq!(plan.contains("L2 policies"), hinted, "{what}: {plan}");
        assert_eq!(hinted, n % (16 / dtype.size_bytes()) == 0, "{what}: hints where B is read in 16 bytes");
        assert_eq!(compiled.source() == plain.source, !hinted, "{what}");
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(check.max_rel_error <= check.tolerance, "{what}: error {:.2e}", check.max_rel_error);
        if hinted && toolchain_available("l2_hints_keep_the_walks_results (machine code)") {
            let toolchain = nvrtc::Toolchain::locate().unwrap();
            let machine_code = |source: &str, arch: Arch| spill_free_sass(&toolchain, source, arch, &what);
            for arch in [Arch::Sm80, Arch::Sm90] {
                let sass = machine_code(compiled.source(), arch);
                assert!(sass.with_opcode("LDG.E.128").count() >= 1, "{what} for {arch}: no 16-byte loads");
                // The policies reach the machine code (the memory
                // descriptors of the loads and stores), which then differs
                // from the plain kernel's.
                let texts = |s: &spindle_cuda::sass::Sass| {
                    s.instructions.iter().map(|i| i.text.clone()).collect::<Vec<_>>()
                };
                assert_ne!(texts(&sass), texts(&machine_code(&plain.source, arch)), "{what} for {arch}");
            }
        }
    }
}

/// The warp walk in machine code as the runtime compiles it
/// ([`nvrtc::compile_spill_free`]), for sm_80 and sm_90: no spills, B read in
/// 16-byte loads (`LDG.E.128`), interior rows written with 16-byte stores,
/// f16 rows of 128 walked by two sub-warps (their sums added by `SHFL.BFLY`;
/// CSR's groups of one entry by two teams instead, with no such shuffle).
/// Where C starts at zero neither the warp walk (its shared rows carried to
/// a second kernel) nor the row walk (`map=rows`) has an atomic
/// (`RED`/`ATOM`); under `+=` into given data the warp walk adds the
/// run's first and last rows atomically, outside every loop.
#[test]
fn the_warp_walk_loads_16_bytes_and_keeps_atomics_out_of_its_loops() {
    let test = "the_warp_walk_loads_16_bytes_and_keeps_atomics_out_of_its_loops";
    if !toolchain_available(test) {
        return;
    }
    let toolchain = nvrtc::Toolchain::locate().unwrap();
    // (CSR in f16: a row of B takes 16 lanes, and a group has one entry:
    // a warp is two teams that walk apart.)
    let cases = [
        ("groupcoo:dim=0,g=8", DType::F32),
        ("groupcoo:dim=0,g=4", DType::F16),
        ("coo", DType::F32),
        ("csr", DType::F16),
    ];
    for ((format, dtype), map) in cases.into_iter().flat_map(|c| [(c, "walk"), (c, "rows")]) {
        let prepared = walk_problem(format, dtype, 128);
        let schedule: Schedule = format!("map={map} tile.p=16").parse().unwrap();
        let kernel = prepared.lower(&schedule).unwrap();
        let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::from(&schedule)).unwrap();
        for arch in [Arch::Sm80, Arch::Sm90] {
            let what = format!("map={map} {format} {} for {arch}", dtype.name());
            let sass = spill_free_sass(&toolchain, &printed.source, arch, &what);
            assert!(
                sass.with_opcode("LDG.E.128").count() >= 1,
                "{what}: no 16-byte loads\n{}",
                listing(&sass)
            );
            assert!(
                sass.with_opcode("STG.E.128").count() >= 1,
                "{what}: no 16-byte stores\n{}",
                listing(&sass)
            );
            // f16 rows of 128 take 16 lanes: two sub-warps, whose sums meet by butterfly shuffles.
            let split = dtype == DType::F16 && format != "csr";
            assert_eq!(
                sass.with_opcode("SHFL.BFLY").count() > 0,
                split,
                "{what}: sub-warps\n{}",
                listing(&sass)
            );
            let atomics: Vec<_> = sass.memory_atomics().collect();
            assert!(atomics.is_empty(), "{what}: an atomic\n{}", listing(&sass));
        }
    }
    let given = spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", spindle::Input::from(a_square()))
        .tensor("B", spindle::Input::random(&[10, 128], DType::F32, 2))
        .tensor("C", spindle::Input::random(&[10, 128], DType::F32, 3))
        .format("A", "groupcoo:dim=0,g=2")
        .prepare()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let schedule: Schedule = "map=walk tile.p=4".parse().unwrap();
    let printed =
        print_kernel(&given.lower(&schedule).unwrap(), SYMBOL, &PrintOptions::from(&schedule)).unwrap();
    assert!(printed.carry.is_none(), "+= into given C: carried");
    for arch in [Arch::Sm80, Arch::Sm90] {
        let what = format!("map=walk, += into given C, for {arch}");
        let sass = spill_free_sass(&toolchain, &printed.source, arch, &what);
        assert!(!sass.loops().is_empty(), "{what}: no loop found\n{}", listing(&sass));
        atomics_outside_loops(&sass, &format!("{what}: the run's boundary rows"));
    }
}

/// Sgap's segment reduction (`reduce=segment(R)`) in machine code, for
/// sm_80 and sm_90, GroupCOO and COO SpMM in f32 and f16 (summed in the f32
/// copy) with groups of 2 to 32 lanes: the segmented scan's shuffles run
/// before any write, and the atomics (`RED`/`ATOM`), one per run head, sit
/// outside every loop; nothing spills.
#[test]
fn segment_reductions_keep_atomics_out_of_their_loops() {
    let test = "segment_reductions_keep_atomics_out_of_their_loops";
    if !toolchain_available(test) {
        return;
    }
    let toolchain = nvrtc::Toolchain::locate().unwrap();
    let cases = [
        ("groupcoo:dim=0,g=4", DType::F32, 128, "reduce=segment(4) tile.p=16 tile.n=8"),
        ("groupcoo:dim=0,g=4", DType::F16, 128, "reduce=segment(8) tile.p=32"),
        ("groupcoo:dim=0,g=2", DType::F32, 64, "reduce=segment(2) tile.p=4 tile.n=32"),
        ("coo", DType::F32, 24, "reduce=segment(32) tile.p=32 tile.n=8"),
        ("coo", DType::F16, 64, "reduce=segment(16) tile.p=16 tile.n=16"),
    ];
    for (format, dtype, n, items) in cases {
        let prepared = walk_problem(format, dtype, n);
        let schedule: Schedule = items.parse().unwrap();
        let kernel = prepared.lower(&schedule).unwrap();
        let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::from(&schedule)).unwrap();
        assert!(printed.source.contains("__ballot_sync"), "{items}: no run heads");
        for arch in [Arch::Sm80, Arch::Sm90] {
            let what = format!("{format} {} n={n} [{items}] for {arch}", dtype.name());
            let sass = spill_free_sass(&toolchain, &printed.source, arch, &what);
            assert!(sass.with_opcode("SHFL").count() > 0, "{what}: no segmented scan\n{}", listing(&sass));
            atomics_outside_loops(&sass, &format!("{what}: run heads"));
        }
    }
}

/// BlockGroupCOO SpMM (32x32 blocks, f16) in machine code for sm_80 and
/// sm_90: the block products are `HMMA.16816` (inside the loop over
/// groups, or in its copies where ptxas unrolls a short constant loop),
/// their fragments come from shared memory through `LDSM`, the operand
/// tiles arrive by 16-byte loads (`LDG.E.128`), and nothing goes to local
/// memory (`LDL`/`STL`: spills or stack arrays).
#[test]
fn blockgroupcoo_runs_hmma_16816_from_ldsm_without_local_memory() {
    let test = "blockgroupcoo_runs_hmma_16816_from_ldsm_without_local_memory";
    if !toolchain_available(test) {
        return;
    }
    let toolchain = nvrtc::Toolchain::locate().unwrap();
    let spec: spindle_formats::generate::GeneratorSpec =
        "blocks:rows=512,cols=512,bm=32,bk=32,density=0.3,seed=5".parse().unwrap();
    let coo = spec.generate::<f64, i64>().unwrap().canonicalize();
    let values = spindle::ElemType::Value(DType::F16);
    let b = ndarray::Array2::from_shape_fn((512, 256), |(i, j)| ((i + j) % 7) as f64 / 7.0 - 0.5);
    let prepared = spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", spindle::Input::from(coo).with_dtype(values))
        .tensor("B", spindle::Input::from(b).with_dtype(values))
        .tensor("C", spindle::Input::shape(&[512, 256], values))
        .format("A", "blockgroupcoo:bm=32,bk=32,dim=0,g=auto")
        .prepare()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    for tiles in ["tile.p=1 tile.n=64", "tile.p=2 tile.n=32"] {
        let schedule: Schedule = format!("tile.bi=32 tile.bj=32 tile.q=1 {tiles}").parse().unwrap();
        let kernel = prepared.lower(&schedule).unwrap();
        let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::from(&schedule)).unwrap();
        for arch in [Arch::Sm80, Arch::Sm90] {
            let what = format!("[{schedule}] for {arch}");
            let compiled = nvrtc::compile(&printed.source, "bgc", arch, &CompileOptions::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let sass = spindle_cuda::sass::disassemble(&toolchain, &compiled.cubin, SYMBOL)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let hmma: Vec<_> = sass.with_opcode("HMMA.16816").collect();
            assert!(!hmma.is_empty(), "{what}: no HMMA.16816");
            let loops = !sass.loops().is_empty();
            assert!(
                !loops || hmma.iter().all(|i| sass.in_loop(i)),
                "{what}: an HMMA outside the loop over groups: HMMA at {:x?}, back branches {:x?}",
                hmma.iter().map(|i| i.offset).collect::<Vec<_>>(),
                sass.loops(),
            );
            assert!(
                sass.with_opcode("LDG.E.128").count() > 0,
                "{what}: operand tiles not loaded in 16 bytes"
            );
            assert!(sass.with_opcode("LDSM").count() > 0, "{what}: fragments not loaded by LDSM");
            let local: Vec<&str> =
                sass.with_opcode("LDL").chain(sass.with_opcode("STL")).map(|i| i.text.as_str()).collect();
            assert!(local.is_empty(), "{what}: local memory: {local:?}");
        }
    }
}

/// Sgap's shuffle groups and the warp walk under ThreadSanitizer: lanes
/// exchange through shuffles and ballots, and the walk mixes plain and
/// atomic writes of one output, so a write of a row that another warp also
/// writes shows up here (it did once: the walk wrote its first row again,
/// zeros, with a plain store racing the previous run's atomics); the row
/// walk's warps must write disjoint rows.
#[test]
fn sgap_groups_and_the_warp_walk_have_no_data_race() {
    if !emulate::compiler_or_skip("sgap_groups_and_the_warp_walk_have_no_data_race") {
        return;
    }
    let backend = spindle::EmulateBackend::with(EmulateOptions { sanitizer: emulate::Sanitizer::Thread });
    let cases = [
        ("groupcoo:dim=0,g=4", DType::F32, 24, "map=walk tile.p=4"),
        ("coo", DType::F16, 16, "map=walk tile.p=8"),
        ("groupcoo:dim=0,g=4", DType::F32, 24, "map=rows tile.p=2"),
        ("coo", DType::F16, 16, "map=rows tile.p=8"),
        ("groupcoo:dim=0,g=4", DType::F32, 24, "reduce=segment(4) tile.p=16 tile.n=8"),
        ("groupcoo:dim=0,g=4", DType::F32, 24, "reduce=parallel tile.p=8 tile.n=8"),
    ];
    for (format, dtype, n, schedule) in cases {
        let what = format!("{format} {} n={n} [{schedule}]", dtype.name());
        let prepared = walk_problem(format, dtype, n);
        let compiled =
            prepared.compile(&backend, &schedule.parse().unwrap()).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(check.max_rel_error <= check.tolerance, "{what}: error {:.2e}", check.max_rel_error);
    }
}

/// Paper 004's SpMM algorithms (Fig. 9, after DA-SpMM) as Spindle
/// schedules, each on the emulated GPU against the reference evaluator:
/// - EB+SR ⟨g nnz, c col⟩, r = 1: COO, a warp's lanes walk `tile.p`
///   non-zeros in order, each its own columns (`map=walk`);
/// - EB with a segment group ⟨1 nnz, c col⟩, r = 32: COO, one non-zero per
///   lane, runs of a row summed across 32 lanes (`reduce=segment(32)`);
/// - RB+SR ⟨1 row, c col⟩, r = 1: CSR on the level path, a warp per row
///   whose lanes own columns;
/// - RB+PR ⟨1/32 row, c col⟩, r = 32: the level path's SpMV, lanes split
///   a row and add by shuffles (for SpMM the level path splits columns).
#[test]
fn sgap_spmm_algorithms_are_schedules() {
    if !emulate::compiler_or_skip("sgap_spmm_algorithms_are_schedules") {
        return;
    }
    let backend = spindle::EmulateBackend::from_env();
    let algorithms = [
        ("EB+SR", "coo", 24, "map=walk tile.p=32"),
        ("EB, segment group of 32", "coo", 24, "reduce=segment(32) tile.p=32 tile.n=8"),
        ("RB+SR", "csr", 24, "path=levels"),
        ("RB+PR (SpMV)", "csr", 1, "path=levels"),
        ("RB+PR", "csr", 24, "path=levels order=m+n+k reduce=parallel"),
    ];
    for (name, format, n, schedule) in algorithms {
        let what = format!("{name}: {format} n={n} [{schedule}]");
        let prepared = if n == 1 {
            let spec: spindle_formats::generate::GeneratorSpec =
                "powerlaw:rows=160,cols=96,nnz=1400,seed=4".parse().unwrap();
            let f32s = spindle::ElemType::Value(DType::F32);
            spindle::Problem::new("y[m] = A[m,k] * x[k]")
                .tensor(
                    "A",
                    spindle::Input::from(spec.generate::<f64, i64>().unwrap().canonicalize())
                        .with_dtype(f32s),
                )
                .tensor("x", spindle::Input::random(&[96], DType::F32, 3))
                .tensor("y", spindle::Input::shape(&[160], f32s))
                .format("A", format)
                .prepare()
                .unwrap_or_else(|e| panic!("{what}: {}", e.render(false)))
        } else {
            walk_problem(format, DType::F32, n)
        };
        let compiled =
            prepared.compile(&backend, &schedule.parse().unwrap()).unwrap_or_else(|e| panic!("{what}: {e}"));
        let source = compiled.source().to_string();
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(check.max_rel_error <= check.tolerance, "{what}: error {:.2e}", check.max_rel_error);
        // Lanes add each other's values (down or butterfly shuffles) exactly
        // where the algorithm reduces across lanes (r > 1).
        let across = source.contains("__shfl_down_sync") || source.contains("__shfl_xor_sync");
        assert_eq!(across, name.contains("32") || name.contains("PR"), "{what}\n{source}");
    }
    // RB+PR's lanes split a row's positions: refused where the row's update
    // varies inside that loop (columns innermost); groups of 4 lanes take
    // 8 rows to a warp (they were refused).
    let prepared = walk_problem("csr", DType::F32, 24);
    let err = match prepared.compile(&backend, &"path=levels reduce=parallel".parse().unwrap()) {
        Ok(_) => panic!("reduce=parallel with the columns innermost: compiled"),
        Err(e) => e.render(false),
    };
    assert!(err.contains("positions holds one update at an output element"), "{err}");
    assert!(err.contains("order= can put it there: order=m+n+k"), "{err}");
    // Already in that order (a co-iteration of two operands): no advice to
    // reorder (it advised the order given).
    let both = spindle::Problem::new("y[i] = A[i,j] * B[i,j]")
        .tensor("A", spindle::Input::random(&[12, 9], DType::F32, 1))
        .tensor("B", spindle::Input::random(&[12, 9], DType::F32, 2))
        .format("A", "csr")
        .format("B", "csr");
    let err =
        match both.prepare().unwrap().compile(&backend, &"path=levels reduce=parallel(4)".parse().unwrap()) {
            Ok(_) => panic!("a co-iteration with reduce=parallel(4): compiled"),
            Err(e) => e.render(false),
        };
    assert!(err.contains("the loops already run the summed indices innermost (order=i+j)"), "{err}");
    // COO's columns are a singleton level, one position per entry: lanes
    // over it would each sum one term (it compiled so, 31 of 32 lanes
    // idle, and its emulated run took minutes).
    let coo = walk_problem("coo", DType::F32, 24);
    let err = match coo.compile(&backend, &"path=levels order=m+n+k reduce=parallel".parse().unwrap()) {
        Ok(_) => panic!("reduce=parallel over COO's singleton level: compiled"),
        Err(e) => e.render(false),
    };
    assert!(err.contains("walks `A`'s singleton level") && err.contains("store `A` in csr"), "{err}");
    // An elementwise product sums nothing: said so (it called the stored
    // first level's `i` summed, or the order with no summed index right).
    let elementwise = spindle::Problem::new("S[i,j] = A[i,j] * D[i,j]")
        .tensor("A", spindle::Input::random(&[12, 9], DType::F32, 1))
        .tensor("D", spindle::Input::random(&[12, 9], DType::F32, 2))
        .format("A", "dcsr");
    let err = match elementwise
        .prepare()
        .unwrap()
        .compile(&backend, &"path=levels reduce=parallel".parse().unwrap())
    {
        Ok(_) => panic!("an elementwise product with reduce=parallel: compiled"),
        Err(e) => e.render(false),
    };
    assert!(err.contains("sums no index, so it has no sum to split: drop reduce=parallel"), "{err}");
    assert!(!err.contains("summed `"), "{err}");
    // max= over DCSR counts its skipped zeros in global memory: groups of
    // 4 lanes split its rows (it was refused).
    let max = spindle::Problem::new("y[i] max= A[i,j] * x[j]")
        .tensor("A", spindle::Input::random(&[12, 9], DType::F32, 1))
        .tensor("x", spindle::Input::random(&[9], DType::F32, 2))
        .format("A", "dcsr");
    let max = max.prepare().unwrap();
    let compiled = max.compile(&backend, &"path=levels reduce=parallel(4)".parse().unwrap()).unwrap();
    let (_, check) = compiled.check().unwrap();
    assert!(check.passed(), "max= over DCSR with reduce=parallel(4): {check:?}");
    let groups =
        prepared.compile(&backend, &"path=levels order=m+n+k reduce=parallel(4)".parse().unwrap()).unwrap();
    assert!(groups.source().contains("__shfl_down_sync(0xffffffffu, acc, offset, 4)"), "{}", groups.source());
    let (_, check) = groups.check().unwrap();
    assert!(check.max_rel_error <= check.tolerance, "parallel(4): error {:.2e}", check.max_rel_error);
}

/// Every corpus entry under the default schedule, in f32 and f16 (Tensor
/// Cores where the tiles allow), on the emulated GPU under
/// ThreadSanitizer: a step that reads a shared tile before the barrier
/// after its fill, or refills it while others still read it, is a race.
#[test]
fn every_corpus_entry_is_race_free_under_thread_sanitizer() {
    if !emulate::compiler_or_skip("every_corpus_entry_is_race_free_under_thread_sanitizer") {
        return;
    }
    let options = EmulateOptions { sanitizer: emulate::Sanitizer::Thread };
    let mut runs = Vec::new();
    for (name, entry) in &entries() {
        let built = build(name, entry);
        for dtype in [DType::F32, DType::F16] {
            runs.push((name.clone(), built.einsum.clone(), built.data.clone(), dtype));
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while let Some((name, einsum, data, dtype)) =
                    runs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let what = format!("{name} in {} under TSan", dtype.name());
                    let (einsum, data) = typed(einsum, data, *dtype);
                    let want = spindle_ir::eval::evaluate(&einsum, &data).unwrap();
                    let kernel = lower(&einsum, &Schedule::default(), SYMBOL)
                        .unwrap_or_else(|d| panic!("{what}: {d}"));
                    let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::default())
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let got = emulate::run(&kernel, &printed, &data, &options)
                        .unwrap_or_else(|e| panic!("{what}: {e}\n{}", printed.source));
                    let tolerance = if *dtype == DType::F16 { 1e-2 } else { 1e-4 };
                    close_to(&got, &want, tolerance, &what);
                }
            });
        }
    });
}

/// A kernel whose tiles need more than 48 KB: its arrays live in dynamic
/// shared memory; NVRTC compiles it for sm_80 and sm_90 without spills or
/// static shared memory, and it computes the reference on the emulated GPU
/// (ragged tiles on every axis).
#[test]
fn kernels_over_48_kb_use_dynamic_shared_memory() {
    let test = "kernels_over_48_kb_use_dynamic_shared_memory";
    let f32s = spindle::ElemType::Value(DType::F32);
    let prepared = spindle::Problem::new("C[y,x] += A[y,r] * B[r,x]")
        .tensor("A", spindle::Input::random(&[200, 150], DType::F32, 1))
        .tensor("B", spindle::Input::random(&[150, 130], DType::F32, 2))
        .tensor("C", spindle::Input::shape(&[200, 130], f32s))
        .prepare()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let schedule: Schedule = "tile.y=128 tile.x=128 tile.r=64".parse().unwrap();
    let kernel = prepared.lower(&schedule).unwrap();
    let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::from(&schedule)).unwrap();
    assert!(printed.launch.dynamic && printed.launch.shared_bytes > 48 * 1024, "{:?}", printed.launch);
    if toolchain_available(test) {
        for arch in [Arch::Sm80, Arch::Sm90] {
            let compiled = nvrtc::compile(&printed.source, "dynamic", arch, &CompileOptions::default())
                .unwrap_or_else(|e| panic!("{arch}: {e}\n{}", printed.source));
            let r = compiled.resources_of(SYMBOL).unwrap();
            assert!(!r.spills() && r.shared_mem_bytes == 0, "{arch}: {r:?}");
        }
    }
    if !emulate::compiler_or_skip(test) {
        return;
    }
    let compiled = prepared.compile(&spindle::EmulateBackend::from_env(), &schedule).unwrap();
    let (_, check) = compiled.check().unwrap();
    assert!(check.max_rel_error <= check.tolerance, "error {:.2e}", check.max_rel_error);
}

/// Block-sparse SpMM in BlockGroupCOO over rows (32x32 blocks, 192 x 128,
/// block rows 1 and 4 empty), prepared by the driver: operands of
/// `operands`, C of `output` with `n` columns; with `c_data` C holds values
/// that `+=` adds to.
fn block_problem(n: usize, operands: DType, output: DType, g: &str, c_data: bool) -> spindle::Prepared {
    let spec: spindle_formats::generate::GeneratorSpec =
        "blocks:rows=192,cols=128,bm=32,bk=32,density=0.6,seed=9".parse().unwrap();
    let full = spec.generate::<f64, i64>().unwrap().canonicalize();
    let keep: Vec<usize> = (0..full.nnz()).filter(|&e| ![1, 4].contains(&(full.crd[0][e] / 32))).collect();
    let crd = full.crd.iter().map(|c| keep.iter().map(|&e| c[e]).collect()).collect();
    let coo = spindle_formats::Coo::new(full.shape.clone(), crd, keep.iter().map(|&e| full.val[e]).collect())
        .unwrap();
    block_spmm(coo, n, operands, output, g, c_data)
}

/// `C[m,n] += A[m,k] * B[k,n]` with A of `coo` in 32x32 BlockGroupCOO over
/// rows (`g`; or BCSR where `g` is "bcsr"), B and C seeded: operands of `operands`, C of `output` with
/// `n` columns; with `c_data` C holds values that `+=` adds to.
fn block_spmm(
    coo: spindle_formats::Coo<f64, i64>,
    n: usize,
    operands: DType,
    output: DType,
    g: &str,
    c_data: bool,
) -> spindle::Prepared {
    use spindle::{ElemType, Input};
    let (m, k) = (coo.shape[0], coo.shape[1]);
    let b = ndarray::Array2::from_shape_fn((k, n), |(i, j)| ((i * 5 + j * 3) % 13) as f64 / 13.0 - 0.45);
    let c = if c_data {
        Input::from(ndarray::Array2::from_shape_fn((m, n), |(i, j)| ((i + 2 * j) % 5) as f64 / 5.0 - 0.3))
            .with_dtype(ElemType::Value(output))
    } else {
        Input::shape(&[m, n], ElemType::Value(output))
    };
    spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", Input::from(coo).with_dtype(ElemType::Value(operands)))
        .tensor("B", Input::from(b).with_dtype(ElemType::Value(operands)))
        .tensor("C", c)
        .format(
            "A",
            if g == "bcsr" {
                "bcsr:bm=32,bk=32".into()
            } else {
                format!("blockgroupcoo:bm=32,bk=32,dim=0,{g}")
            },
        )
        .prepare()
        .unwrap_or_else(|e| panic!("{}", e.render(false)))
}

/// The block-row mapping (`map=rows`) on the emulated GPU against the
/// reference evaluator, where the emulated `cp.async` lands a copy only at
/// its wait: empty block rows (written as zeros, the output is not zeroed
/// first), slabs wider than the columns left (ragged n, whole warps past
/// the end), `+=` into given values, f16 and f32 outputs, bf16 operands,
/// tf32 (checked to f16's 1e-2: tf32 keeps f16's 11 significant bits), and
/// the copy ring in dynamic shared memory (tile.n = 256).
#[test]
fn block_rows_compute_block_sparse_spmm_on_the_emulated_gpu() {
    if !emulate::compiler_or_skip("block_rows_compute_block_sparse_spmm_on_the_emulated_gpu") {
        return;
    }
    let backend = spindle::EmulateBackend::from_env();
    let cases = [
        (64, DType::F16, DType::F16, "g=auto", false, "tile.n=64"),
        (48, DType::F16, DType::F16, "g=2", true, "tile.n=32"),
        (64, DType::F16, DType::F32, "g=1", false, "tile.n=128"),
        (32, DType::Bf16, DType::F32, "g=3", true, "tile.n=32"),
        (32, DType::F32, DType::F32, "g=2", false, "tile.n=64 tf32=on"),
        (16, DType::F16, DType::F16, "g=2", false, "tile.n=256"),
        // Block rows sharing B's rows (block = share x tile.n threads): 6
        // block rows in blocks of 2, 4 (the last block holds 2), 3 and 6.
        (64, DType::F16, DType::F16, "g=auto", false, "tile.n=32 block=64"),
        (48, DType::F16, DType::F16, "g=2", true, "tile.n=32 block=128"),
        (64, DType::F16, DType::F32, "g=3", false, "tile.n=64 block=256"),
        (32, DType::F32, DType::F32, "g=2", false, "tile.n=32 block=96 tf32=on"),
        (32, DType::Bf16, DType::F32, "g=1", true, "tile.n=32 block=192"),
        (16, DType::F16, DType::F16, "g=3", false, "tile.n=256 block=512"),
        // BCSR: blocks one at a time, the same kernel.
        (64, DType::F16, DType::F16, "bcsr", true, "tile.n=64"),
        (32, DType::Bf16, DType::F32, "bcsr", false, "tile.n=32 block=128"),
    ];
    for (n, operands, output, g, c_data, items) in cases {
        let what = format!("{} -> {} n={n} {g} C data {c_data} [{items}]", operands.name(), output.name());
        let prepared = block_problem(n, operands, output, g, c_data);
        let schedule: Schedule = format!("map=rows {items}").parse().unwrap();
        let kernel = prepared.lower(&schedule).unwrap();
        let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::from(&schedule)).unwrap();
        assert!(printed.source.contains("block-row mapping"), "{what}: not block rows");
        assert_eq!(printed.writes_output, !c_data, "{what}: only an output that starts at zero is not read");
        assert_eq!(printed.round, None, "{what}: each element is written once, in its own type");
        let launch = printed.launch;
        assert_eq!(launch.dynamic, launch.shared_bytes > 48 * 1024, "{what}: {launch:?}");
        assert!(launch.dynamic || !items.starts_with("tile.n=256"), "{what}: {launch:?}");
        assert_eq!(printed.source.contains("sharing B"), items.contains("block="), "{what}");
        let compiled = prepared.compile(&backend, &schedule).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        let tolerance = if items.contains("tf32") { 1e-2 } else { check.tolerance };
        assert!(check.max_rel_error <= tolerance, "{what}: error {:.2e}", check.max_rel_error);
    }
    // `map=rows` alone takes the smallest column tile of 32, 64 and 128
    // that covers C's columns (the default 16 does not print); a bf16
    // output too, summed in an f32 copy (it was refused for the default
    // tile, which the choice judged on the bf16 output).
    for (n, tile, dtype) in [(48, 64, DType::F16), (208, 128, DType::F16), (48, 64, DType::Bf16)] {
        let prepared = block_problem(n, dtype, dtype, "g=2", false);
        let compiled = prepared.compile(&backend, &"map=rows".parse().unwrap()).unwrap();
        assert_eq!(compiled.schedule.tiles.get("n"), Some(&tile), "n={n}");
        let (_, check) = compiled.check().unwrap();
        assert!(check.max_rel_error <= check.tolerance, "n={n}: error {:.2e}", check.max_rel_error);
    }
    // Threads that are not a whole number of block rows are refused.
    let schedule: Schedule = "map=rows tile.n=64 block=96".parse().unwrap();
    let kernel = block_problem(64, DType::F16, DType::F16, "g=1", false).lower(&schedule).unwrap();
    let err = print_kernel(&kernel, SYMBOL, &PrintOptions::from(&schedule)).unwrap_err().to_string();
    assert!(err.contains("block=96") && err.contains("a multiple of 64"), "{err}");
    // A kernel the mapping does not print is refused with the reason.
    use spindle_ir::lang::{check, declarations, parse};
    let decls = declarations(&[("y", &[10], "f32"), ("A", &[10, 12], "f32"), ("x", &[12], "f32")]);
    let spmv = check(&parse("y[i] += A[i,k] * x[k]").unwrap(), &decls).unwrap();
    let kernel = lower(&spmv, &Schedule::default(), SYMBOL).unwrap();
    let rows = PrintOptions { map: Mapping::Rows, ..PrintOptions::default() };
    let err = print_kernel(&kernel, SYMBOL, &rows).unwrap_err().to_string();
    assert!(
        err.contains("map=rows: not block rows (the output is not a matrix")
            && err.contains("nor the row walk (")
            && err.contains("use map=tiles"),
        "{err}"
    );
}

/// Block-sparse SpMM whose block row 2 is far heavier than the rest
/// (192 x 1280, 32x32 blocks: row 2 stores all 40 column blocks, rows 1
/// and 4 none, the others two or three), operands and C as in
/// [`block_problem`].
fn heavy_row_problem(n: usize, operands: DType, output: DType, g: &str, c_data: bool) -> spindle::Prepared {
    let blocks: Vec<(usize, usize)> =
        (0..40).map(|c| (2, c)).chain([(0, 3), (0, 17), (3, 0), (3, 39), (3, 20), (5, 8), (5, 9)]).collect();
    let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    for (b, &(br, bc)) in blocks.iter().enumerate() {
        // Half of each block's entries, a different half per block.
        for e in (b % 2..32 * 32).step_by(2) {
            rows.push((br * 32 + e / 32) as i64);
            cols.push((bc * 32 + e % 32) as i64);
            vals.push(((e * 7 + b * 3) % 11) as f64 / 11.0 - 0.4);
        }
    }
    let coo = spindle_formats::Coo::new(vec![192, 1280], vec![rows, cols], vals).unwrap().canonicalize();
    block_spmm(coo, n, operands, output, g, c_data)
}

/// A block row far above the average is split across blocks (the work
/// list, [`spindle_cuda::print::RowSplit`]): its parts' f32 sums meet in
/// slots, and the last part to finish adds them and writes the row, in f16
/// or f32, added to given values under `+=`, over ragged slabs; on the
/// emulated GPU against the reference evaluator, under the sanitizer
/// `$SPINDLE_EMU_SANITIZER` names and under ThreadSanitizer; `split=off`
/// keeps the row whole.
#[test]
fn block_rows_split_heavy_rows_on_the_emulated_gpu() {
    if !emulate::compiler_or_skip("block_rows_split_heavy_rows_on_the_emulated_gpu") {
        return;
    }
    let address = spindle::EmulateBackend::from_env();
    let thread = spindle::EmulateBackend::with(EmulateOptions { sanitizer: emulate::Sanitizer::Thread });
    let cases = [
        (64, DType::F16, DType::F16, "g=1", false, "tile.n=32", &address),
        (48, DType::F16, DType::F32, "g=2", true, "tile.n=32", &address),
        (64, DType::Bf16, DType::F32, "g=3", false, "tile.n=64", &address),
        (32, DType::F32, DType::F32, "g=1", true, "tile.n=32 tf32=on", &address),
        (48, DType::F16, DType::F16, "g=1", true, "tile.n=32", &thread),
        (64, DType::F16, DType::F16, "g=1", true, "tile.n=32 split=off", &address),
        (64, DType::F16, DType::F32, "bcsr", false, "tile.n=32", &address),
    ];
    for (n, operands, output, g, c_data, items, backend) in cases {
        let what = format!("{} -> {} n={n} {g} C data {c_data} [{items}]", operands.name(), output.name());
        let prepared = heavy_row_problem(n, operands, output, g, c_data);
        let schedule: Schedule = format!("map=rows {items}").parse().unwrap();
        let kernel = prepared.lower(&schedule).unwrap();
        let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::from(&schedule)).unwrap();
        let split = printed.split.as_ref().unwrap_or_else(|| panic!("{what}: no work list"));
        let work = split.work_for(&prepared.data).unwrap();
        // Row 2's 40 blocks, against an average of 9 or fewer: 3 parts or
        // more; none with split=off.
        if items.contains("split=off") {
            assert_eq!(work.slots, 0, "{what}: split=off cuts nothing");
        } else {
            assert!(work.slots >= 3, "{what}: {} slots, cap {}", work.slots, split.cap);
        }
        assert!(printed.plan.iter().any(|l| l.contains("work list")), "{what}: {:?}", printed.plan);
        let compiled = prepared.compile(backend, &schedule).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        let tolerance = if items.contains("tf32") { 1e-2 } else { check.tolerance };
        assert!(check.max_rel_error <= tolerance, "{what}: error {:.2e}", check.max_rel_error);
    }
}

/// A copy ring of exactly 48 KB (48x48 f16 blocks, tile.n = 64) stays in
/// static shared memory: the split's fix-up adds no shared variable, so
/// NVRTC takes it for sm_80 and sm_90.
#[test]
fn block_rows_fill_static_shared_memory_to_the_limit() {
    let test = "block_rows_fill_static_shared_memory_to_the_limit";
    if !toolchain_available(test) {
        return;
    }
    let spec: spindle_formats::generate::GeneratorSpec =
        "blocks:rows=192,cols=192,bm=48,bk=48,density=0.5,seed=3".parse().unwrap();
    let coo = spec.generate::<f64, i64>().unwrap().canonicalize();
    let halves = spindle::ElemType::Value(DType::F16);
    let prepared = spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", spindle::Input::from(coo).with_dtype(halves))
        .tensor("B", spindle::Input::random(&[192, 64], DType::F16, 3))
        .tensor("C", spindle::Input::shape(&[192, 64], halves))
        .format("A", "blockgroupcoo:bm=48,bk=48,dim=0,g=1")
        .prepare()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let schedule: Schedule = "map=rows tile.n=64".parse().unwrap();
    let kernel = prepared.lower(&schedule).unwrap();
    let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::from(&schedule)).unwrap();
    assert_eq!((printed.launch.shared_bytes, printed.launch.dynamic), (48 * 1024, false));
    let toolchain = nvrtc::Toolchain::locate().unwrap();
    for arch in [Arch::Sm80, Arch::Sm90] {
        spill_free_sass(&toolchain, &printed.source, arch, &format!("48x48 blocks for {arch}"));
    }
}

/// Block rows under ThreadSanitizer: a `cp.async` into a buffer that a warp
/// still reads, or a barrier missing between a block's copies and its
/// fragment loads, is a race here.
#[test]
fn block_rows_have_no_data_race() {
    if !emulate::compiler_or_skip("block_rows_have_no_data_race") {
        return;
    }
    let backend = spindle::EmulateBackend::with(EmulateOptions { sanitizer: emulate::Sanitizer::Thread });
    for (g, items) in [("g=1", "map=rows tile.n=64"), ("g=2", "map=rows tile.n=32 block=128")] {
        let prepared = block_problem(64, DType::F16, DType::F16, g, false);
        let compiled = prepared.compile(&backend, &items.parse().unwrap()).unwrap();
        let (_, check) = compiled.check().unwrap();
        assert!(check.max_rel_error <= check.tolerance, "{items}: error {:.2e}", check.max_rel_error);
    }
}

/// Block rows in machine code for sm_80 and sm_90 (4096 x 4096, 32x32
/// blocks, f16, N = 1024): `HMMA.16816` from `LDSM` (and `LDSM...MT88`,
/// B transposed) fragments, 16-byte `cp.async` copies (`LDGSTS...128`), one
/// barrier in the loop, no local memory, no spills; one global atomic, a
/// split row's part counting itself done, outside every loop.
#[test]
fn block_rows_run_hmma_from_a_cp_async_ring_without_atomics() {
    let test = "block_rows_run_hmma_from_a_cp_async_ring_without_atomics";
    if !toolchain_available(test) {
        return;
    }
    let toolchain = nvrtc::Toolchain::locate().unwrap();
    let spec: spindle_formats::generate::GeneratorSpec =
        "blocks:rows=4096,cols=4096,bm=32,bk=32,density=0.02,seed=5".parse().unwrap();
    let coo = spec.generate::<f64, i64>().unwrap().canonicalize();
    let halves = spindle::ElemType::Value(DType::F16);
    let prepared = spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", spindle::Input::from(coo).with_dtype(halves))
        .tensor("B", spindle::Input::random(&[4096, 1024], DType::F16, 3))
        .tensor("C", spindle::Input::shape(&[4096, 1024], halves))
        .format("A", "blockgroupcoo:bm=32,bk=32,dim=0,g=auto")
        .prepare()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    // One block row a block (tile.n 128, 256), and block rows sharing B
    // (4, 2 or 8 rows a block; at 1024 threads a thread has 64 registers
    // and spills): its extra barriers are the prologue's and the blocks
    // multiplied alone, its atomics on shared memory only (the table of
    // the rows' blocks).
    let cases =
        ["tile.n=128", "tile.n=256", "tile.n=128 block=512", "tile.n=256 block=512", "tile.n=64 block=512"];
    for items in cases {
        let shared = items.contains("block=");
        let schedule: Schedule = format!("map=rows {items}").parse().unwrap();
        let kernel = prepared.lower(&schedule).unwrap();
        let printed = print_kernel(&kernel, SYMBOL, &PrintOptions::from(&schedule)).unwrap();
        assert_eq!(printed.source.contains("sharing B"), shared, "{items}");
        for arch in [Arch::Sm80, Arch::Sm90] {
            let what = format!("{items} for {arch}");
            let sass = spill_free_sass(&toolchain, &printed.source, arch, &what);
            let count = |op: &str| sass.with_opcode(op).count();
            let hmma: Vec<_> = sass.with_opcode("HMMA.16816").collect();
            assert!(hmma.len() >= 8 && hmma.iter().all(|i| sass.in_loop(i)), "{what}: HMMA outside the loop");
            assert!(count("LDSM") > 0, "{what}: no LDSM");
            assert!(sass.instructions.iter().any(|i| i.text.contains("MT88")), "{what}: B not by LDSM.MT88");
            let copies = sass.with_opcode("LDGSTS").filter(|i| i.opcode().contains("128")).count();
            assert!(copies > 0, "{what}: no 16-byte cp.async");
            let global_atomics = sass.memory_atomics().filter(|i| !i.opcode().starts_with("ATOMS")).count();
            if shared {
                assert_eq!(global_atomics, 0, "{what}: atomics on shared memory only");
            } else {
                let looped_barriers = sass.with_opcode("BAR.SYNC").filter(|i| sass.in_loop(i)).count();
                assert_eq!(
                    looped_barriers,
                    1,
                    "{what}: one barrier per block of the row\n{}",
                    listing(&sass)
                );
                // A split row's parts count on one counter, once, after the products.
                assert_eq!(global_atomics, 1, "{what}: one atomic, a part's count\n{}", listing(&sass));
                atomics_outside_loops(&sass, &format!("{what}: a split row's counter"));
            }
            assert_eq!(count("LDL") + count("STL"), 0, "{what}");
        }
    }
}

/// 16-bit tensors on the GPU's level path: operands read into f32, the
/// output held in f32 and rounded once by a second kernel (atomic warps,
/// and rows folded into given data), or rounded as a warp stores its row
/// whole from f32 registers (CSR rows), each checked against the reference
/// on the emulated GPU and compiled by NVRTC for sm_80 and sm_90. An output
/// element of 4000 terms is within one f16 rounding of the exact sum:
/// summed in f16 it drifted past it.
#[test]
fn the_gpu_level_path_takes_16_bit_tensors() {
    use spindle::{ElemType, Input};
    if !emulate::compiler_or_skip("the_gpu_level_path_takes_16_bit_tensors") {
        return;
    }
    let toolchain = nvrtc::toolchain_or_skip("the_gpu_level_path_takes_16_bit_tensors");
    let backend = spindle::EmulateBackend::from_env();
    let levels: Schedule = "path=levels".parse().unwrap();
    let a = |rows: usize, cols: usize, every: usize| {
        let entries: Vec<(usize, usize, f64)> = (0..rows * cols)
            .filter(|e| e % every == 0)
            .map(|e| (e / cols, e % cols, if e % 3 == 0 { -0.3 } else { 0.2 + (e % 7) as f64 / 9.0 }))
            .collect();
        spindle_formats::Coo::<f64, i64>::from_triplets(rows, cols, &entries).unwrap()
    };
    let cases = [
        // A warp per CSR row, lanes over B's columns (owned rows, stored whole).
        ("C[i,n] = A[i,k] * B[k,n]", "csr", DType::F16, vec![("B", vec![30, 40])], "= __float2half(o_row["),
        // A warp per COO entry: atomics into the f32 copy.
        ("y[i] = A[i,k] * x[k]", "coo", DType::Bf16, vec![("x", vec![30])], "atomicAdd(&"),
        // A GroupCOO fallback (relu of A) and `+=` into data.
        (
            "C[i,n] += relu(A[i,k]) * B[k,n]",
            "groupcoo:dim=0,g=4",
            DType::F16,
            vec![("B", vec![30, 9]), ("C", vec![21, 9])],
            "atomicAdd(&",
        ),
    ];
    for (statement, format, dtype, dense, needle) in cases {
        let sixteen = ElemType::Value(dtype);
        let mut problem = spindle::Problem::new(statement)
            .tensor("A", Input::from(a(21, 30, 4)).with_dtype(sixteen))
            .format("A", format);
        for (seed, (name, shape)) in dense.iter().enumerate() {
            problem = problem.tensor(*name, Input::random(shape, dtype, seed as u64 + 1));
        }
        let prepared = problem.prepare().unwrap_or_else(|e| panic!("{statement}: {}", e.render(false)));
        let compiled = prepared.compile(&backend, &levels).unwrap_or_else(|e| panic!("{statement}: {e}"));
        let source = compiled.source();
        let rounded = format != "csr";
        assert!(source.contains(needle), "{statement}\n{source}");
        assert_eq!(source.contains("spindle_kernel_round"), rounded, "{statement}\n{source}");
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{statement}: {e}"));
        assert!(check.max_rel_error <= check.tolerance, "{statement}: error {:.2e}", check.max_rel_error);
        if toolchain {
            for arch in [Arch::Sm80, Arch::Sm90] {
                nvrtc::compile(source, SYMBOL, arch, &CompileOptions::default())
                    .unwrap_or_else(|e| panic!("{statement} on {arch}: {e}\n{source}"));
            }
        }
    }
    // Rows of 4000 terms, each lane adding its column's terms into the
    // output one by one.
    let prepared = spindle::Problem::new("C[i,n] = A[i,k] * B[k,n]")
        .tensor("A", Input::from(a(4, 4000, 1)).with_dtype(ElemType::Value(DType::F16)))
        .format("A", "csr")
        .tensor("B", Input::random(&[4000, 8], DType::F16, 7))
        .prepare()
        .unwrap();
    let compiled = prepared.compile(&backend, &levels).unwrap();
    let (got, want) = (compiled.run().unwrap(), prepared.reference().unwrap());
    for (g, w) in got.iter().zip(want.iter()) {
        assert!((g - w).abs() <= w.abs() * 2f64.powi(-11) + 1e-4, "got {g}, exact {w}");
    }
}

/// The GPU's level path sums a warp's own output row in its lanes'
/// registers (a slot a lane per 32 columns, unrolled) and writes it once
/// after the row's entries: CSR SpMM (`path=levels`, Sgap's RB+SR) and
/// SDDMM into SpMM's program kernel read and wrote the row in global
/// memory for every entry. A row of at most 16 columns is taken by groups
/// of lanes (its columns' power of two, at least 4), each its own entries,
/// their sums added by shuffles after the row. On the emulated GPU against
/// the reference evaluator (power-law rows, some empty; columns a multiple
/// of 32 and ragged, 8 and 13 in groups; f32 and f16); in machine code for
/// sm_80 and sm_90, no store on any control-flow cycle and no spills.
#[test]
fn the_gpu_level_path_keeps_a_warps_row_in_registers() {
    if !emulate::compiler_or_skip("the_gpu_level_path_keeps_a_warps_row_in_registers") {
        return;
    }
    let backend = spindle::EmulateBackend::from_env();
    let schedule: Schedule = "path=levels".parse().unwrap();
    let mut sources = Vec::new();
    let cases = [
        (DType::F32, 128),
        (DType::F32, 40),
        (DType::F16, 64),
        (DType::F32, 256),
        (DType::F32, 8),
        (DType::F16, 13),
    ];
    for (dtype, n) in cases {
        let what = format!("CSR SpMM {} n={n}", dtype.name());
        let prepared = walk_problem("csr", dtype, n);
        let compiled = prepared.compile(&backend, &schedule).unwrap();
        let source = compiled.source().to_string();
        let group = (n <= 16).then(|| n.next_power_of_two());
        let slots = n.div_ceil(group.unwrap_or(32));
        assert!(source.contains(&format!("o_row[{slots}]")), "{what}\n{source}");
        if let Some(r) = group {
            assert!(source.contains(&format!("const int sub = lane & {};", r - 1)), "{what}\n{source}");
            assert!(source.contains(&format!("offset >= {r}")), "{what}\n{source}");
        } else {
            // 32 entries' coordinates and values a load, shuffled to the lanes.
            assert!(source.contains("_at += 32)") && source.contains("_crd, p_A1_e)"), "{what}\n{source}");
        }
        // C starts at zero and each row is a warp's: stored, not added (the
        // emulated run starts C at NaN, so a row left unwritten fails); a
        // 16-bit row is rounded as it is stored (no f32 copy, no second
        // kernel).
        let rounded = source.contains("__float2half(o_row[");
        assert!(stores_rows(&source) && rounded == (dtype == DType::F16), "{what}\n{source}");
        assert!(!source.contains("_round("), "{what}\n{source}");
        // A lane's adjacent columns: B's row and C's in 16-byte pieces (4
        // f32) where the row is whole chunks of 32 lanes' pieces.
        let vectors = dtype == DType::F32 && n % 128 == 0;
        let b_loads = source.contains("reinterpret_cast<const uint4 *>(&t_B[");
        let c_stores = source.contains("reinterpret_cast<uint4 *>(&t_C[");
        assert!(b_loads == vectors && c_stores == vectors, "{what}\n{source}");
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(check.max_rel_error <= check.tolerance, "{what}: error {:.2e}", check.max_rel_error);
        sources.push((what, source));
    }
    // Mostly empty rows are stored as zeros; into given data, rows are added.
    for given in [false, true] {
        let what = format!("CSR SpMM over empty rows, C given: {given}");
        let a = spindle_formats::generate::uniform::<f64, i64>(300, 120, 260, 9).unwrap();
        let c = spindle::Input::random(&[300, 40], DType::F32, 3);
        let problem = spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
            .tensor("A", a)
            .tensor("B", spindle::Input::random(&[120, 40], DType::F32, 2))
            .tensor(
                "C",
                if given {
                    c
                } else {
                    spindle::Input::shape(&[300, 40], spindle::ElemType::Value(DType::F32))
                },
            )
            .format("A", "csr")
            .prepare()
            .unwrap();
        let compiled = problem.compile(&backend, &schedule).unwrap();
        assert_eq!(stores_rows(compiled.source()), !given, "{what}\n{}", compiled.source());
        let (_, check) = compiled.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(check.max_rel_error <= check.tolerance, "{what}: error {:.2e}", check.max_rel_error);
    }
    // Beyond 256 columns the row stays in global memory.
    let wide = walk_problem("csr", DType::F32, 288);
    let wide = wide.compile(&backend, &schedule).unwrap();
    assert!(!wide.source().contains("o_row"), "{}", wide.source());
    let a = spindle_formats::generate::uniform::<f64, i64>(150, 150, 1200, 6).unwrap();
    let program = spindle::Problem::new("S[i,j] = A[i,j] * X[i,k] * Y[j,k]; Z[i,n] = S[i,j] * X[j,n]")
        .tensor("A", a)
        .tensor("X", spindle::Input::random(&[150, 16], DType::F32, 1))
        .tensor("Y", spindle::Input::random(&[150, 16], DType::F32, 2))
        .format("A", "csr");
    let timing = spindle::TimingOptions { warmup: 0, repeats: 1 };
    let ran = program.run_program(&backend, &Schedule::default(), timing, true).unwrap();
    assert!(ran.checks[0].passed(), "{:?}", ran.checks);
    // (16 columns: two groups of 16 lanes, each splitting its dot over k.)
    assert!(
        ran.sources[0].contains("o_row[1]") && ran.sources[0].contains("lane & 15"),
        "{}",
        ran.sources[0]
    );
    sources.push(("SDDMM into SpMM".to_string(), ran.sources[0].clone()));
    each_in_machine_code("the_gpu_level_path_keeps_a_warps_row_in_registers", &sources, |what, sass| {
        let stores: Vec<_> = sass.instructions.iter().filter(|i| i.opcode().starts_with("STG")).collect();
        assert!(!sass.loops().is_empty(), "{what}: no loop found\n{}", listing(sass));
        outside_loops(sass, &stores, &format!("{what}: stores"));
        if what.contains("f32 n=128 ") || what.contains("f32 n=256 ") {
            let wide = |op| sass.with_opcode(op).count() > 0;
            assert!(
                wide("LDG.E.128") && wide("STG.E.128"),
                "{what}: no 16-byte B loads or C stores\n{}",
                listing(sass)
            );
        }
        let shuffled = sass.instructions.iter().any(|i| i.opcode().starts_with("SHFL.IDX"));
        assert!(
            shuffled || what.contains("n=8") || what.contains("n=13") || what.starts_with("SDDMM"),
            "{what}: no SHFL.IDX\n{}",
            listing(sass)
        );
    });
}

/// Whether a level kernel's warps store their output rows (`t_C[..] =
/// o_row[..]`, converted or not, or 16 bytes of them at a time) rather
/// than add them.
fn stores_rows(source: &str) -> bool {
    let scalar = |l: &str| l.contains("t_C[") && l.contains("] = ") && l.contains("o_row[c_i_n]");
    let vector =
        |l: &str| l.starts_with("*reinterpret_cast<") && l.contains("(&t_C[") && l.contains("(o_vec)");
    source.lines().map(str::trim).any(|l| scalar(l) || vector(l))
}

/// Each of `sources` (what it is, its CUDA) in machine code for sm_80 and
/// sm_90 as the runtime compiles it (no spills, no stack frame), given to
/// `check` with what it is and the arch; skipped without the toolchain.
fn each_in_machine_code(
    test: &str,
    sources: &[(String, String)],
    check: impl Fn(&str, &spindle_cuda::sass::Sass),
) {
    if !toolchain_available(&format!("{test} (machine code)")) {
        return;
    }
    let toolchain = nvrtc::Toolchain::locate().unwrap();
    for (what, source) in sources {
        for arch in [Arch::Sm80, Arch::Sm90] {
            let what = format!("{what} for {arch}");
            check(&what, &spill_free_sass(&toolchain, source, arch, &what));
        }
    }
}

/// SDDMM's program kernel on the GPU takes a row's entries by groups of
/// lanes, each group splitting an entry's dot product over `k` and adding
/// it by butterfly shuffles (K / 4 lanes, 2 to 32: K = 32 takes 8 lanes an
/// entry, 4 entries a step), where a lane an entry walked each dot alone
/// and left most lanes idle on short rows. On the emulated GPU against the
/// reference evaluator: K from 5 (a lane an entry) to 200 (4 adjacent k a
/// lane, loaded 16 bytes at a time, where K allows), power-law rows
/// (some empty, most shorter than a step), CSR, DCSR and COO, the output in
/// A's pattern and dense; in machine code, the shuffles and no spills. The
/// output in A's pattern is stored at each entry, not added to, so it needs
/// no zeroing: the emulation starts it at NaN, and an entry left unwritten
/// fails the check. Over COO a warp takes as many entries as it has
/// groups (a warp an entry left all groups but one idle).
#[test]
fn sddmm_on_the_gpu_splits_each_dot_over_a_group_of_lanes() {
    if !emulate::compiler_or_skip("sddmm_on_the_gpu_splits_each_dot_over_a_group_of_lanes") {
        return;
    }
    let backend = spindle::EmulateBackend::from_env();
    let a = "powerlaw:rows=120,cols=90,nnz=700,seed=5"
        .parse::<spindle_formats::generate::GeneratorSpec>()
        .unwrap();
    let a = a.generate::<f64, i64>().unwrap().canonicalize();
    let timing = spindle::TimingOptions { warmup: 0, repeats: 1 };
    let mut sources = Vec::new();
    let cases = [
        ("S[i,j] = A[i,j] * U[i,k] * V[j,k]", "csr", 5, None),
        ("S[i,j] = A[i,j] * U[i,k] * V[j,k]", "csr", 16, Some(4)),
        ("S[i,j] = A[i,j] * U[i,k] * V[j,k]", "dcsr", 32, Some(8)),
        ("S[i,j] = A[i,j] * U[i,k] * V[j,k]", "coo", 32, Some(8)),
        ("S[i,j] = A[i,j] * U[i,k] * V[j,k]", "csr", 200, Some(32)),
        ("D[i,j] = A[i,j] * (U[i,k] * V[j,k])", "csr", 64, Some(16)),
    ];
    for (statement, format, k, group) in cases {
        let what = format!("{statement} over {format}, K = {k}");
        let mut p = spindle::Problem::new(statement)
            .tensor("A", a.clone())
            .tensor("U", spindle::Input::random(&[120, k], DType::F32, 1))
            .tensor("V", spindle::Input::random(&[90, k], DType::F32, 2))
            .format("A", format);
        if statement.starts_with('S') {
            p = p.format("S", format);
        }
        let ran = p
            .run_program(&backend, &Schedule::default(), timing, true)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(ran.checks[0].passed(), "{what}: {:?}", ran.checks);
        let source = &ran.sources[0];
        if statement.starts_with('S') {
            assert!(source.contains("t_S[p_A1] = "), "{what}: S's entries stored\n{source}");
            assert!(!source.contains("t_S[p_A1] +="), "{what}: S's entries stored\n{source}");
        }
        match group {
            Some(r) => {
                assert!(source.contains(&format!("const int sub = lane & {};", r - 1)), "{what}\n{source}");
                let entries_a_warp = format!("p_A0_step = 0 + warp * {};", 32 / r);
                assert_eq!(source.contains(&entries_a_warp), format == "coo", "{what}\n{source}");
                assert!(source.contains("if (g_in && sub == 0)"), "{what}\n{source}");
                // A lane's 4 adjacent k: U's and V's rows in 16-byte
                // loads, where K is whole chunks of the group's.
                let vectors = k % (4 * r) == 0;
                let loads = ["t_U", "t_V"].map(|t| source.contains(&format!("uint4 *>(&{t}[")));
                assert_eq!(loads, [vectors; 2], "{what}\n{source}");
                sources.push((format!("{what}{}", if vectors { " (vectors)" } else { "" }), source.clone()));
            }
            None => assert!(!source.contains("g_in"), "{what}\n{source}"),
        }
    }
    each_in_machine_code("sddmm_on_the_gpu_splits_each_dot_over_a_group_of_lanes", &sources, |what, sass| {
        assert!(sass.with_opcode("SHFL.BFLY").count() > 0, "{what}: no shuffles\n{}", listing(sass));
        let wide = sass.with_opcode("LDG.E.128").count() > 0;
        assert_eq!(wide, what.contains("(vectors)"), "{what}: 16-byte loads\n{}", listing(sass));
    });
}
