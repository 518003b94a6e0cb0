//! `spindle notebook run FILE.md --export DIR`, run as a user would: the
//! built binary on a small notebook, then the files and results.json it
//! wrote, value by value.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A fresh folder under the system temp folder.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spindle-headless-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(notebook: &Path, export: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["notebook", "run"])
        .arg(notebook)
        .arg("--export")
        .arg(export)
        .args(["--threads", "2"])
        .output()
        .unwrap()
}

const NOTEBOOK: &str = "\
# A test notebook

SpMM on a generated graph, swept over g.

```spindle
A = gen:powerlaw:rows=300,cols=200,nnz=2400,seed=7
B = rand A.1x16 seed=2
format A = groupcoo:dim=0,g=auto
C[m,n] += A[m,k] * B[k,n]
schedule tile.n=16
sweep g in [1, 2, 8]
repeats 2
resources off
```

A dense statement with no format, two statements chained.

```spindle
x = rand 40 seed=3
W = rand 24x40 seed=4
y[i] = W[i,j] * x[j]
z[i] = relu(y[i]) + 1
repeats 1
resources off
```
";

#[test]
fn a_notebook_runs_headless_and_exports_everything() {
    let dir = temp_dir("ok");
    let notebook = dir.join("nb.md");
    std::fs::write(&notebook, NOTEBOOK).unwrap();
    let export = dir.join("out");
    let out = run(&notebook, &export);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    // Progress goes to stderr, step by step.
    assert!(stderr.contains("cell 1/2 [1/"), "{stderr}");
    assert!(stderr.contains("g=8: running on 2 threads"), "{stderr}");

    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(export.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["notebook"], notebook.display().to_string());
    assert_eq!(results["failed"], 0);
    assert!(results["machine"]["threads"].as_u64().unwrap() >= 1);
    assert!(results["machine"]["date"].is_string());
    let cells = results["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    assert_eq!(cells[0]["cell"], 1);
    assert_eq!(cells[0]["line"], 6, "the first cell's text starts on line 6");
    assert!(cells[0]["source"].as_str().unwrap().starts_with("A = gen:powerlaw"));

    // Cell 1: every point measured and checked.
    let first = &cells[0]["output"];
    assert!(first["error"].is_null(), "{first}");
    assert_eq!(first["sweep"]["parameters"], serde_json::json!(["g"]));
    let points = first["sweep"]["points"].as_array().unwrap();
    let values: Vec<&str> = points.iter().map(|p| p["values"][0].as_str().unwrap()).collect();
    assert_eq!(values, ["1", "2", "8"]);
    for p in points {
        assert_eq!(p["backend"], "c");
        assert!(p["median_ms"].as_f64().unwrap() > 0.0, "{p}");
        let err = p["max_rel_error"].as_f64().unwrap();
        assert!((0.0..1e-3).contains(&err), "{p}");
        assert!(p["error"].is_null(), "{p}");
    }
    let baselines: Vec<&str> =
        first["sweep"]["baselines"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap()).collect();
    assert_eq!(baselines, ["sprs CSR (1 thread)", "faer CSR", "faer CSC"]);
    assert!(first["sweep"]["baselines"][0]["median_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(first["rewritten"][0], "C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]");
    let format = &first["formats"][0];
    assert_eq!(format["tensor"], "A");
    assert_eq!(format["stats"]["nnz"], 2400);
    let per_g: Vec<u64> =
        format["per_g"].as_array().unwrap().iter().map(|r| r[0].as_u64().unwrap()).collect();
    assert_eq!(per_g, [1, 2, 8]);
    // Padding only grows with g, and g = 1 has none.
    let padding: Vec<f64> =
        format["per_g"].as_array().unwrap().iter().map(|r| r[2].as_f64().unwrap()).collect();
    assert_eq!(padding[0], 0.0);
    assert!(padding[1] <= padding[2] && padding[2] > 0.0, "{padding:?}");
    let notes: Vec<&str> = first["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(notes.contains(&"no GPU: ran the C backend only"), "{notes:?}");
    assert!(first["seconds"].as_f64().unwrap() > 0.0);
    assert_eq!(first["cancelled"], false);

    // Cell 2: two statements, each with its code; no sweep, one point.
    let second = &cells[1]["output"];
    assert!(second["error"].is_null(), "{second}");
    assert_eq!(second["rewritten"].as_array().unwrap().len(), 2);
    let point = &second["sweep"]["points"][0];
    assert_eq!(point["values"], serde_json::json!([]));
    assert!(point["max_rel_error"].as_f64().unwrap() < 1e-3);
    assert!(second["sweep"]["baselines"].as_array().unwrap().is_empty());

    // The files of each cell.
    let cell1 = export.join("cell-1");
    let svg = std::fs::read_to_string(cell1.join("plot.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("median runtime over g") && svg.contains("sprs CSR"));
    assert_eq!(&std::fs::read(cell1.join("plot.png")).unwrap()[..4], b"\x89PNG");
    assert!(std::fs::read_to_string(cell1.join("kernel.c")).unwrap().contains("spindle_kernel"));
    assert!(std::fs::read_to_string(cell1.join("kernel.cu")).unwrap().contains("__global__"));
    assert!(!std::fs::read_to_string(cell1.join("ir.txt")).unwrap().trim().is_empty());
    assert_eq!(
        std::fs::read_to_string(cell1.join("rewritten.txt")).unwrap(),
        "C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]\n"
    );
    let c2 = std::fs::read_to_string(export.join("cell-2/kernel.c")).unwrap();
    assert!(c2.contains("// statement 1") && c2.contains("// statement 2"), "{c2}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failing_cell_fails_the_run_with_its_caret() {
    let dir = temp_dir("bad");
    let notebook = dir.join("bad.md");
    std::fs::write(
        &notebook,
        "```spindle\nx = rand 8\ny[i] = x[i] * 2\nresources off\n```\n\n```spindle\nA = rand 4x8\nB = rand 4x8\nC[m,n] += A[m,k] * B[k,n]\n```\n",
    )
    .unwrap();
    let export = dir.join("out");
    let out = run(&notebook, &export);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cell 2 (line 8): error"), "{stderr}");
    assert!(stderr.contains("conflicting extents: `k`"), "{stderr}");
    assert!(stderr.contains("cell:3:"), "the caret names the cell's line: {stderr}");
    assert!(stderr.contains("1 of 2 cells failed"), "{stderr}");
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(export.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["failed"], 1);
    assert!(results["cells"][0]["output"]["error"].is_null());
    assert!(results["cells"][0]["output"]["sweep"]["points"][0]["max_rel_error"].as_f64().unwrap() < 1e-3);
    assert!(results["cells"][1]["output"]["error"].as_str().unwrap().contains("conflicting extents: `k`"));
    assert!(
        std::fs::read_to_string(export.join("cell-2/error.txt"))
            .unwrap()
            .contains("conflicting extents: `k`")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program cell's kernel.cu is the program kernel as CUDA (what
/// `spindle compile --emit cuda` prints), not a refusal.
#[test]
fn a_program_cell_exports_its_cuda_source() {
    let dir = temp_dir("program-cuda");
    let notebook = dir.join("nb.md");
    std::fs::write(
        &notebook,
        "```spindle\n\
         A = gen:uniform:rows=60,cols=60,nnz=300,seed=1\n\
         X = rand A.1x8 seed=2\n\
         W = rand 8x4 seed=3\n\
         format A = csr\n\
         H[i,h] = A[i,k] * X[k,h]; Z[i,j] = H[i,h] * W[h,j]\n\
         repeats 1\nresources off\n```\n",
    )
    .unwrap();
    let export = dir.join("out");
    let out = run(&notebook, &export);
    assert!(out.status.success(), "exit {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let ir = std::fs::read_to_string(export.join("cell-1/ir.txt")).unwrap();
    assert!(ir.starts_with("// fusion=trie"), "ran as a program:\n{ir}");
    let cu = std::fs::read_to_string(export.join("cell-1/kernel.cu")).unwrap();
    assert!(cu.contains("__global__") && !cu.contains("cannot be printed"), "{cu}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A schedule item the statement cannot take is pointed at where the cell
/// wrote it, the sweep or the `schedule` line (it pointed at the
/// rewritten statement).
#[test]
fn a_bad_schedule_item_is_pointed_at_in_the_cell() {
    let dir = temp_dir("bad-item");
    let notebook = dir.join("nb.md");
    let cell = |line: &str| {
        format!(
            "```spindle\nA = gen:uniform:rows=60,cols=40,nnz=300,seed=1\nB = rand A.1x8 seed=2\nformat A = csr\n\
             C[m,n] += A[m,k] * B[k,n]\n{line}\nrepeats 1\nresources off\n```\n"
        )
    };
    for (line, caret) in [("sweep tile.z in [1, 2]", "cell:5:7"), ("schedule tile.n=8 tile.z=4", "cell:5:19")]
    {
        std::fs::write(&notebook, cell(line)).unwrap();
        let out = run(&notebook, &dir.join("out"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("the schedule names `z`, which the statement does not use"), "{stderr}");
        assert!(stderr.contains(caret) && stderr.contains("this item"), "{line}:\n{stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_bundled_default_notebook_runs() {
    // What `spindle` opens with no arguments must run on a CPU-only machine,
    // with or without the shared data folder.
    let dir = temp_dir("default");
    let notebook = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/notebook/default.md");
    let out = run(&notebook, &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    let first = &results["cells"][0]["output"];
    assert_eq!(first["sweep"]["points"].as_array().unwrap().len(), 6);
    assert_eq!(first["formats"][0]["stats"]["shape"], serde_json::json!([2708, 2708]));
    assert!(dir.join("cell-1/plot.png").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `format C = …` on an output with no data: the level path assembles it,
/// swept over output formats, each point checked against the reference.
#[test]
fn a_cell_assembles_a_sparse_output_in_each_swept_format() {
    let dir = temp_dir("sparse-out");
    let notebook = dir.join("nb.md");
    std::fs::write(
        &notebook,
        "```spindle\n\
         A = gen:powerlaw:rows=120,cols=90,nnz=700,seed=7\n\
         B = gen:powerlaw:rows=90,cols=80,nnz=600,seed=8\n\
         C = shape 120x80 f64\n\
         format A = csr\nformat B = csr\nformat C = csr\n\
         C[i,j] = A[i,k] * B[k,j]\n\
         sweep format.C in [csr, dcsr, coo]\n\
         repeats 1\nresources off\n```\n",
    )
    .unwrap();
    let export = dir.join("out");
    let out = run(&notebook, &export);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(export.join("results.json")).unwrap()).unwrap();
    let cell = &results["cells"][0]["output"];
    let points = cell["sweep"]["points"].as_array().unwrap();
    assert_eq!(points.len(), 3, "{cell}");
    for p in points {
        assert!(p["error"].is_null(), "{p}");
        assert!(p["max_rel_error"].as_f64().unwrap() < 1e-5, "{p}");
    }
    let c = std::fs::read_to_string(export.join("cell-1/kernel.c")).unwrap();
    assert!(c.contains("w_bits") && c.contains("phase"), "a workspace and two phases:\n{c}");
    // The GPU does not assemble sparse outputs: kernel.cu says so, as the CLI does.
    let cu = std::fs::read_to_string(export.join("cell-1/kernel.cu")).unwrap();
    assert!(
        cu.contains("cannot be printed as CUDA")
            && cu.contains("sparse outputs are assembled on the C backend only"),
        "{cu}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A level-path cell's kernel.cu is the level path's CUDA kernel (what
/// `spindle compile --emit cuda` prints), not a refusal.
#[test]
fn a_level_path_cell_exports_its_cuda_source() {
    let dir = temp_dir("levels-cuda");
    let notebook = dir.join("nb.md");
    std::fs::write(
        &notebook,
        "```spindle\n\
         A = gen:uniform:rows=300,cols=200,nnz=3000,seed=1\n\
         x = rand 200 seed=2\n\
         format A = dcsr\n\
         y[i] = A[i,j] * x[j]\n\
         repeats 1\nresources off\n```\n",
    )
    .unwrap();
    let export = dir.join("out");
    let out = run(&notebook, &export);
    assert!(out.status.success(), "exit {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let cu = std::fs::read_to_string(export.join("cell-1/kernel.cu")).unwrap();
    assert!(cu.contains("__global__") && !cu.contains("cannot be printed"), "{cu}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `sweep path in [tiles, levels]`: both paths of one statement, each
/// checked against the reference.
#[test]
fn a_cell_sweeps_the_tile_and_the_level_path() {
    let dir = temp_dir("paths");
    let notebook = dir.join("nb.md");
    std::fs::write(
        &notebook,
        "```spindle\n\
         A = gen:powerlaw:rows=200,cols=150,nnz=1500,seed=3\n\
         B = rand A.1x16 seed=4\n\
         format A = csr\n\
         C[m,n] += A[m,k] * B[k,n]\n\
         sweep path in [tiles, levels]\n\
         repeats 1\nresources off\n```\n",
    )
    .unwrap();
    let export = dir.join("out");
    let out = run(&notebook, &export);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(export.join("results.json")).unwrap()).unwrap();
    let points = results["cells"][0]["output"]["sweep"]["points"].as_array().unwrap().clone();
    let values: Vec<&str> = points.iter().map(|p| p["values"][0].as_str().unwrap()).collect();
    assert_eq!(values, ["tiles", "levels"]);
    for p in &points {
        assert!(p["error"].is_null(), "{p}");
        assert!(p["max_rel_error"].as_f64().unwrap() < 1e-5, "{p}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `sweep workspace in [...]` and `sweep ws.pipeline in [...]`: SpGEMM
/// into CSR under the dense workspace and ISM policies, each point checked
/// against the reference; the ISM points report their peak bytes, and the
/// plot draws them under the runtime.
#[test]
fn a_cell_sweeps_workspace_policies_and_their_memory() {
    let dir = temp_dir("workspaces");
    let notebook = dir.join("nb.md");
    std::fs::write(
        &notebook,
        "```spindle\n\
         A = gen:powerlaw:rows=150,cols=120,nnz=900,seed=5\n\
         B = gen:powerlaw:rows=120,cols=140,nnz=800,seed=6\n\
         C = shape 150x140 f64\n\
         format A = csr\nformat B = csr\nformat C = csr\n\
         C[i,j] = A[i,k] * B[k,j]\n\
         schedule path=levels\n\
         sweep workspace in [dense, hash, coord]\n\
         sweep ws.pipeline in [off, on]\n\
         repeats 1\nresources off\n```\n",
    )
    .unwrap();
    let export = dir.join("out");
    let out = run(&notebook, &export);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(export.join("results.json")).unwrap()).unwrap();
    let points = results["cells"][0]["output"]["sweep"]["points"].as_array().unwrap().clone();
    assert_eq!(points.len(), 6, "{points:?}");
    for p in &points {
        assert!(p["error"].is_null(), "{p}");
        assert!(p["max_rel_error"].as_f64().unwrap() < 1e-5, "{p}");
        let ism = p["values"][0] != "dense";
        assert_eq!(p["workspace_bytes"].as_u64().is_some_and(|b| b > 0), ism, "{p}");
    }
    let svg = std::fs::read_to_string(export.join("cell-1/plot.svg")).unwrap();
    assert!(svg.contains("peak workspace (KiB)"), "the memory panel is drawn");
    let ir = std::fs::read_to_string(export.join("cell-1/ir.txt")).unwrap();
    assert!(ir.contains("workspace: dense (asked)"), "the kernel's notes say what was picked:\n{ir}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What `spindle run` notes before a run, a cell notes too: an operand
/// with non-finite values, against which the kernel skips ELL's padding
/// (0 x inf would be NaN).
#[test]
fn a_cell_notes_padding_that_multiplies_infinities() {
    let dir = temp_dir("padding");
    std::fs::write(
        dir.join("a.mtx"),
        "%%MatrixMarket matrix coordinate real general\n4 4 5\n1 1 1\n1 2 2\n1 3 3\n2 2 4\n3 4 5\n",
    )
    .unwrap();
    // B (4 x 2, f64) with one infinity, as NumPy writes it.
    let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 2), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    npy.extend((padded.len() as u16).to_le_bytes());
    npy.extend(padded.as_bytes());
    for k in 0..8 {
        npy.extend(if k == 2 { f64::INFINITY } else { 1.0 }.to_le_bytes());
    }
    std::fs::write(dir.join("b.npy"), npy).unwrap();
    let notebook = dir.join("nb.md");
    std::fs::write(
        &notebook,
        "```spindle\nA = load a.mtx\nB = load b.npy\nformat A = ell\nC[m,n] += A[m,k] * B[k,n]\n\
         repeats 1\nresources off\n```\n",
    )
    .unwrap();
    let export = dir.join("out");
    let out = run(&notebook, &export);
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(export.join("results.json")).unwrap()).unwrap();
    let notes = results["cells"][0]["output"]["notes"].to_string();
    assert!(
        notes.contains("`B` holds 1 non-finite value(s): the kernel skips the padding of `A` (ell)"),
        "{notes}\n{out:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn spindle(args: &[&std::ffi::OsStr]) -> Output {
    // Output() gives no terminal: `spindle FILE` runs headless.
    Command::new(env!("CARGO_BIN_EXE_spindle")).args(args).output().unwrap()
}

/// `spindle FILE` without a terminal and `spindle notebook run FILE` read
/// the file alike: the OS's reason when it cannot be read, one message and
/// exit code 1 when it has no code cells.
#[test]
fn both_forms_refuse_a_missing_or_codeless_notebook_alike() {
    let dir = temp_dir("refused");
    let missing = dir.join("missing.md");
    let codeless = dir.join("text.md");
    std::fs::write(&codeless, "# Only text\n\n```python\nprint(1)\n```\n\n```spindle\n\n```\n").unwrap();
    for (file, reason) in [(&missing, "No such file"), (&codeless, "the notebook has no code cells to run")] {
        let headless = spindle(&[file.as_os_str()]);
        let run = spindle(&["notebook".as_ref(), "run".as_ref(), file.as_os_str()]);
        for out in [&headless, &run] {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{}: {stderr}", file.display());
            assert!(stderr.contains(&file.display().to_string()), "the file is named: {stderr}");
            assert!(stderr.contains(reason), "{}: {stderr}", file.display());
            assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

const SMALL: &str = "```spindle\nx = rand 8 seed=1\ny[i] = x[i] * 2\nrepeats 1\nresources off\n```\n";

/// `--threads 0` is all cores, as when it is not given (it ran on one).
#[test]
fn threads_0_runs_on_all_cores() {
    let dir = temp_dir("threads");
    let notebook = dir.join("nb.md");
    std::fs::write(&notebook, SMALL).unwrap();
    let threads = |extra: &[&str]| {
        let mut args = vec!["notebook".as_ref(), "run".as_ref(), notebook.as_os_str()];
        args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
        let out = spindle(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{extra:?}: {stderr}");
        let line = stderr.lines().find(|l| l.contains("running on")).map(str::to_string);
        line.unwrap_or_else(|| panic!("{extra:?}: no `running on` line in {stderr}"))
    };
    assert_eq!(threads(&["--threads", "0"]), threads(&[]));
    assert!(threads(&["--threads", "1"]).ends_with("running on 1 thread"));
    let out = spindle(&[
        "notebook".as_ref(),
        "run".as_ref(),
        notebook.as_os_str(),
        "--threads".as_ref(),
        "5000".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("or 0 for all cores"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--export` at a file: named, not "File exists (os error 17)".
#[test]
fn export_to_a_file_is_refused_by_name() {
    let dir = temp_dir("export-file");
    let notebook = dir.join("nb.md");
    std::fs::write(&notebook, SMALL).unwrap();
    let file = dir.join("x.mtx");
    std::fs::write(&file, "").unwrap();
    for export in [file.clone(), file.join("sub")] {
        let out = run(&notebook, &export);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&format!("{} exists and is not a folder", file.display())), "{stderr}");
        assert!(!stderr.contains("os error 17") && !stderr.contains("cell 1/1"), "before any cell: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
