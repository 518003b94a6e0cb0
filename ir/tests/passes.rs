//! IR-in / IR-out tests of the kernel passes. Each `passes/<pass>/<case>.ir`
//! holds an input kernel, a line `// expected:`, then the kernel the pass
//! named by the folder makes of it. The test parses and verifies the input,
//! runs the pass through the pass manager (which verifies after it), prints
//! the result and compares.
//!
//! `SPINDLE_BLESS=1 cargo test -p spindle-ir --test passes` rewrites the
//! expected parts (and adds them to new files); review the diff.

use std::fs;
use std::path::{Path, PathBuf};

use spindle_ir::kernel::Kernel;
use spindle_ir::kernel::passes::{self, PassManager};

const EXPECTED: &str = "// expected:\n";

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    entries
}

/// The pass's output for the input part of `text`, or why there is none.
fn run(pass: passes::Pass, input: &str) -> Result<String, String> {
    let mut kernel = Kernel::parse(input).map_err(|e| format!("input does not parse: {e}"))?;
    PassManager::new([pass]).dump(false).run(&mut kernel).map_err(|e| e.to_string())?;
    Ok(kernel.to_string())
}

#[test]
fn every_pass_file_gives_its_expected_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/passes");
    let bless = std::env::var_os("SPINDLE_BLESS").is_some_and(|v| v == "1");
    let mut failures = Vec::new();
    let mut cases = 0;
    for dir in sorted_entries(&root) {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let pass =
            passes::by_name(&name).unwrap_or_else(|| panic!("tests/passes/{name}: no pass of that name"));
        for file in sorted_entries(&dir).into_iter().filter(|f| f.extension().is_some_and(|e| e == "ir")) {
            cases += 1;
            let shown = format!("tests/passes/{name}/{}", file.file_name().unwrap().to_string_lossy());
            let text = fs::read_to_string(&file).unwrap();
            let (input, expected) = match text.find(EXPECTED) {
                Some(at) => (&text[..at], Some(&text[at + EXPECTED.len()..])),
                None => (text.as_str(), None),
            };
            let got = match run(pass, input) {
                Ok(got) => got,
                Err(e) => {
                    failures.push(format!("{shown}: {e}"));
                    continue;
                }
            };
            if bless {
                fs::write(&file, format!("{input}{EXPECTED}{got}")).unwrap();
            } else if expected != Some(got.as_str()) {
                failures.push(format!(
                    "{shown}: the output differs (SPINDLE_BLESS=1 rewrites it)\n--- expected\n{}\n--- got\n{got}",
                    expected.unwrap_or("(no `// expected:` section)")
                ));
            }
        }
    }
    assert!(cases >= 8, "only {cases} pass files under {}", root.display());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
