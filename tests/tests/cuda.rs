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
use spindle_cuda::emulate::{self, EmulateError, EmulateOptions};
use std::io::Write;

use spindle_cuda::nvrtc::{self, Arch, CompileOptions, Resources};
use spindle_cuda::print::{CudaKernel, DotPath, PrintOptions, plan_text, print_kernel};
use spindle_formats::DType;
use spindle_ir::kernel::lower::lower;
use spindle_ir::kernel::schedule::Schedule;
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
    let test = "every_corpus_entry_computes_its_reference_on_the_emulated_gpu";
    match emulate::compiler() {
        Ok(_) => {}
        Err(e @ EmulateError::CompilerMissing { .. }) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {e}");
            return;
        }
        Err(e) => panic!("{test}: {e}"),
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
