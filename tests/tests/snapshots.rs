//! One insta snapshot file per corpus entry (`snapshots/snapshots__NAME.snap`):
//! the kernel IR of the entry as it runs (rewritten over its formats'
//! arrays when it has any) under the default schedule, then the C source
//! the printer makes of it.
//!
//! Regenerate with `INSTA_UPDATE=always cargo test -p spindle-tests --test
//! snapshots` (or `cargo insta test --accept`) and review the diff.

use spindle_ir::kernel::lower::lower;
use spindle_ir::kernel::schedule::Schedule;
use spindle_tests::corpus::{build, entries};

/// The IR text, then the C source.
fn emitted(name: &str, entry: &spindle_tests::corpus::Entry) -> String {
    let built = build(name, entry);
    let kernel = lower(&built.einsum, &Schedule::default(), "spindle_kernel")
        .unwrap_or_else(|d| panic!("{name}: {d}"));
    let c = spindle_c::print::print(&kernel, "spindle_kernel").unwrap_or_else(|e| panic!("{name}: {e}"));
    let statement = built.rewritten.as_deref().unwrap_or(&entry.statement);
    format!("// {statement}\n// schedule: {}\n\n{kernel}\n{c}", Schedule::default())
}

#[test]
fn every_corpus_entry_has_a_snapshot_of_its_ir_and_c() {
    let entries = entries();
    assert!(entries.len() >= 12, "the corpus lost entries");
    for (name, entry) in &entries {
        let text = emitted(name, entry);
        let mut settings = insta::Settings::clone_current();
        settings.set_description(entry.description.clone());
        settings.set_omit_expression(true);
        settings.bind(|| insta::assert_snapshot!(name.as_str(), text));
    }
}

/// No snapshot outlives its entry: every file in the folder names one.
#[test]
fn every_snapshot_file_belongs_to_an_entry() {
    let names: Vec<String> = entries().into_iter().map(|(n, _)| format!("snapshots__{n}.snap")).collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    for file in std::fs::read_dir(&dir).unwrap() {
        let file = file.unwrap().file_name().to_string_lossy().into_owned();
        if file.ends_with(".snap") {
            assert!(names.contains(&file), "{file} belongs to no corpus entry: delete it");
        }
    }
}
