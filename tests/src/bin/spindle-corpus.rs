//! `spindle-corpus`: every corpus entry on one backend, checked against the
//! reference evaluator under the runs of [`check_runs`] (f32 and f16,
//! default, ragged and atomic/eager schedules). The GPU check script runs
//! it with `--target cuda`; `--target c` and `--target emulate` run the
//! same checks on any machine.
//!
//! ```text
//! spindle-corpus [--target c|cuda|emulate] [--json FILE] [--only NAME]...
//! ```
//!
//! Prints one line per run and a summary; exits 1 when any run fails.
//! `$SPINDLE_CORPUS_DIR` names the corpus folder when it is not the source
//! tree's.

use std::process::ExitCode;
use std::time::Instant;

use ndarray::ArrayD;
use serde_json::json;
use spindle::{Backend, Prepared, Target};
use spindle_ir::lang::Einsum;
use spindle_ir::tensor::Tensors;
use spindle_tests::corpus::{CheckRun, build, check_runs, entries, max_rel_error, typed};

const USAGE: &str = "usage: spindle-corpus [--target c|cuda|emulate] [--json FILE] [--only NAME]...";

/// Lowers under `schedule`, compiles and runs on `backend` through the driver.
fn run(
    backend: &dyn Backend,
    einsum: &Einsum,
    data: &Tensors,
    schedule: &str,
) -> Result<ArrayD<f64>, String> {
    let prepared = Prepared {
        einsum: einsum.clone(),
        stored: None,
        tile_refusal: None,
        data: data.clone(),
        text: einsum.statement.to_string(),
        rewritten: false,
        skip: Vec::new(),
    };
    let schedule = schedule.parse().map_err(|e| format!("schedule: {e}"))?;
    let compiled = prepared.compile(backend, &schedule).map_err(|e| e.to_string())?;
    compiled.run().map_err(|e| e.to_string())
}

struct Args {
    target: Target,
    json: Option<std::path::PathBuf>,
    only: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { target: Target::C, json: None, only: Vec::new() };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--target" => {
                args.target = value()?.parse().map_err(|e| format!("{e}\n{USAGE}"))?;
            }
            "--json" => args.json = Some(value()?.into()),
            "--only" => args.only.push(value()?),
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let backend = match spindle::backend(args.target) {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!("error: --target {}: {e}", args.target);
            return ExitCode::FAILURE;
        }
    };
    if args.target == Target::Cuda {
        eprintln!("GPU: {}", backend.device());
    }
    let mut rows = Vec::new();
    let mut failures = 0;
    for (name, entry) in entries() {
        if !args.only.is_empty() && !args.only.contains(&name) {
            continue;
        }
        let built = build(&name, &entry);
        for CheckRun { dtype, tolerance, schedule } in check_runs(&built) {
            let (einsum, data) = typed(&built.einsum, &built.data, dtype);
            let start = Instant::now();
            let outcome = spindle_ir::eval::evaluate(&einsum, &data)
                .map_err(|d| format!("reference: {d}"))
                .and_then(|want| {
                    run(backend.as_ref(), &einsum, &data, &schedule).map(|got| max_rel_error(&got, &want))
                });
            let seconds = start.elapsed().as_secs_f64();
            let (pass, error, message) = match &outcome {
                Ok(err) => (*err <= tolerance, Some(*err), None),
                Err(e) => (false, None, Some(e.clone())),
            };
            if !pass {
                failures += 1;
            }
            println!(
                "{} {name:<22} {:<5} [{schedule}] {}",
                if pass { "PASS" } else { "FAIL" },
                dtype.name(),
                match (&error, &message) {
                    (Some(e), _) => format!("max rel error {e:.2e} (tolerance {tolerance:.0e})"),
                    (None, Some(m)) => m.lines().take(12).collect::<Vec<_>>().join("\n    "),
                    (None, None) => String::new(),
                }
            );
            rows.push(json!({
                "entry": name, "dtype": dtype.name(), "schedule": schedule, "pass": pass,
                "max_rel_error": error, "tolerance": tolerance, "error": message, "seconds": seconds,
            }));
        }
    }
    let target = format!("{:?}", args.target).to_lowercase();
    println!("{} runs on {target}: {} passed, {failures} failed", rows.len(), rows.len() - failures);
    if let Some(path) = &args.json {
        let report = json!({ "suite": "corpus", "target": target, "runs": rows, "failures": failures });
        let text = serde_json::to_string_pretty(&report).expect("JSON values serialise");
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("error: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if failures == 0 && !rows.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
