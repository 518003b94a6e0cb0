//! `spindle-corpus`, the corpus check the GPU script runs, exercised on the
//! C backend: its lines, exit codes and JSON must say what ran.

use std::process::Command;

fn corpus() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spindle-corpus"))
}

#[test]
fn checks_one_entry_on_c_and_writes_json() {
    let json = std::env::temp_dir().join(format!("spindle-corpus-{}.json", std::process::id()));
    let out = corpus().args(["--target", "c", "--only", "spmv-csr", "--json"]).arg(&json).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // Four schedules, and the Sgap segment groups the rewritten statement
    // admits (`y[A_row[p]] += ...` scatters; nothing is reduced).
    assert!(stdout.contains("7 runs on c: 7 passed, 0 failed"), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 7);
    assert_eq!(report["failures"], 0);
    for run in runs {
        assert_eq!(run["entry"], "spmv-csr");
        let err = run["max_rel_error"].as_f64().unwrap();
        assert!(err <= run["tolerance"].as_f64().unwrap() && err.is_finite(), "{run}");
    }
    assert_eq!(runs[1]["dtype"], "f16");
}

#[test]
fn usage_errors_exit_2_and_unknown_entries_fail() {
    let out = corpus().args(["--target", "tpu"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown target `tpu`"));
    // Nothing ran: that is a failure, not a pass.
    let out = corpus().args(["--only", "no-such-entry"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn without_a_gpu_cuda_says_so() {
    if spindle_cuda::runtime::available() {
        eprintln!("SKIPPED: a GPU is present; this test covers the no-GPU message");
        return;
    }
    let out = corpus().args(["--target", "cuda"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no CUDA driver"));
}
