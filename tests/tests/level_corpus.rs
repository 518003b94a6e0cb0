//! The level path's corpus (`tests/corpus-levels/*.toml`): one insta
//! snapshot per entry (`level_snapshots/level_corpus__NAME.snap`) of its loop
//! tree, its C and its CUDA (or why it has none), and each entry run on the
//! C backend on one and two threads, and in the CUDA emulation where it
//! prints, against the reference evaluator.
//!
//! Regenerate with `INSTA_UPDATE=always cargo test -p spindle-tests --test
//! level_corpus` and review the diff.

use spindle_c::Compiler;
use spindle_c::level::{CLevelKernel, print_level_with};
use spindle_cuda::emulate::{EmulateOptions, run_level};
use spindle_ir::kernel::schedule::Schedule;
use spindle_ir::level::lower;
use spindle_tests::corpus::{build_levels, level_entries};

const SYMBOL: &str = "spindle_kernel";

#[test]
fn every_level_entry_has_a_snapshot_and_matches_the_reference() {
    let entries = level_entries();
    assert!(entries.len() >= 6, "the level corpus lost entries");
    for (name, entry) in &entries {
        let built = build_levels(name, entry);
        let lowered = lower(&built.original, &built.formats, &built.sparse, &Schedule::default(), SYMBOL)
            .unwrap_or_else(|d| panic!("{name}: {}", d.render(&entry.statement, false)));
        // Threads at any size, as a large problem would print.
        let c = print_level_with(&lowered.kernel, SYMBOL, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        let cuda = spindle_cuda::print::levels::print_level(&lowered.kernel, SYMBOL);
        let cuda_text = match &cuda {
            Ok(printed) => printed.source.clone(),
            Err(e) => format!("// not on the GPU: {e}\n"),
        };
        let formats: Vec<String> = entry.formats.iter().map(|(t, f)| format!("{t}={f}")).collect();
        let text = format!(
            "// {}\n// formats: {}\n\n{}\n{c}\n{cuda_text}",
            entry.statement,
            formats.join(" "),
            lowered.kernel
        );
        let mut settings = insta::Settings::clone_current();
        settings.set_description(entry.description.clone());
        settings.set_omit_expression(true);
        settings.set_snapshot_path("level_snapshots");
        settings.bind(|| insta::assert_snapshot!(name.as_str(), text));

        // Run against the reference.
        let mut reference = built.data.clone();
        reference.remove(&built.original.output().name);
        let want = spindle_ir::eval::evaluate(&built.original, &reference).unwrap();
        assert!(want.iter().any(|w| *w != 0.0), "{name}: an all-zero result tests nothing");
        let mut inputs = reference.clone();
        for gone in &lowered.replaced {
            inputs.remove(gone);
        }
        inputs.extend(lowered.arrays.clone());
        let compiled = CLevelKernel::compile_with(&lowered.kernel, &Compiler::from_env(), 0).unwrap();
        let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
        let close = |got: &ndarray::ArrayD<f64>, what: &str| {
            for (g, w) in got.iter().zip(want.iter()) {
                assert!((g - w).abs() <= 1e-5 * scale, "{name} {what}: got {g}, expected {w}");
            }
        };
        for threads in [1, 2] {
            close(&compiled.run(&inputs, threads).unwrap(), &format!("on C with {threads} threads"));
        }
        if let Ok(printed) = &cuda {
            close(
                &run_level(&lowered.kernel, printed, &inputs, &EmulateOptions::default()).unwrap(),
                "emulated",
            );
        }
    }
}

/// No snapshot outlives its entry.
#[test]
fn every_level_snapshot_belongs_to_an_entry() {
    let names: Vec<String> =
        level_entries().into_iter().map(|(n, _)| format!("level_corpus__{n}.snap")).collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/level_snapshots");
    for file in std::fs::read_dir(&dir).into_iter().flatten() {
        let file = file.unwrap().file_name().to_string_lossy().into_owned();
        if file.ends_with(".snap") {
            assert!(names.contains(&file), "{file} belongs to no level corpus entry: delete it");
        }
    }
}
