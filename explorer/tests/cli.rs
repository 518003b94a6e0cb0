//! The `spindle` command line, run as a user would.

use std::path::PathBuf;
use std::process::{Command, Output};

use spindle_formats::generate::GeneratorSpec;
use spindle_formats::{Coo, GroupCoo, GroupSize};

const POWER_LAW: &str = "powerlaw:rows=500,cols=400,nnz=3000,seed=3";

fn spindle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spindle")).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spindle-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn stats_json_matches_an_independent_count() {
    let out = spindle(&["stats", &format!("gen:{POWER_LAW}"), "--format", "groupcoo:dim=0,g=auto", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();

    let a: Coo<f32, i32> = POWER_LAW.parse::<GeneratorSpec>().unwrap().generate().unwrap();
    let mut occ = vec![0u64; 500];
    for r in &a.crd[0] {
        occ[*r as usize] += 1;
    }
    let f = |g: u64| (g + 1) * occ.iter().map(|o| o.div_ceil(g)).sum::<u64>();
    let max = *occ.iter().max().unwrap();

    assert_eq!(j["rows"], 500);
    assert_eq!(j["cols"], 400);
    assert_eq!(j["nnz"], 3000);
    assert_eq!(j["g_star"].as_f64().unwrap(), (3000.0f64 / 500.0).sqrt());
    assert_eq!(j["g_star_pow2"], serde_json::json!([2, 4]));
    let g = if f(4) < f(2) { 4 } else { 2 };
    assert_eq!(j["format"], format!("groupcoo:dim=0,g={g}"));
    let stored = g * occ.iter().map(|o| o.div_ceil(g)).sum::<u64>();
    assert_eq!(j["stored"], stored);
    assert_eq!(j["padding_ratio"].as_f64().unwrap(), (stored - 3000) as f64 / stored as f64);
    let groups = stored / g;
    assert_eq!(j["bytes"], groups * 4 + stored * 4 + stored * 4);
    let f_of_g = j["f_of_g"].as_object().unwrap();
    let mut g = 1;
    while g <= max.next_power_of_two() {
        assert_eq!(f_of_g[&g.to_string()], f(g), "F({g})");
        g *= 2;
    }
    assert_eq!(f_of_g.len(), max.next_power_of_two().trailing_zeros() as usize + 1);
    assert_eq!(j["occupancy"]["max"], max);
    assert_eq!(j["occupancy"]["min"], *occ.iter().min().unwrap());
    assert_eq!(j["occupancy"]["mean"].as_f64().unwrap(), 6.0);
    assert!(j["occupancy"]["median"].is_number());
}

#[test]
fn symmetric_files_count_both_triangles() {
    let Some(path) = spindle_formats::data::shared_file("matrices/cora.mtx") else {
        eprintln!("SKIPPED: shared data folder absent");
        return;
    };
    // Both triangles, counted independently: every stored (i, j) and its
    // mirror (j, i), as a set (cora stores some pairs in both orientations).
    let text = std::fs::read_to_string(&path).unwrap();
    let mut entries = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('%')).skip(1) {
        let w: Vec<&str> = line.split_whitespace().collect();
        entries.insert((w[0], w[1]));
        entries.insert((w[1], w[0]));
    }
    let out = spindle(&["stats", path.to_str().unwrap(), "--format", "csr", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(j["nnz"], entries.len());
    assert_eq!(j["nnz"], 10556);
    assert_eq!(j["padding_ratio"], 0.0);
}

#[test]
fn convert_to_a_folder_writes_every_array() {
    let dir = scratch("folder");
    let out = spindle(&[
        "convert",
        &format!("gen:{POWER_LAW}"),
        "--to",
        "groupcoo:g=4",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("format.json")).unwrap()).unwrap();
    assert_eq!(meta["format"], "groupcoo:dim=0,g=4");
    assert_eq!(meta["nnz"], 3000);

    let a: Coo<f32, i32> = POWER_LAW.parse::<GeneratorSpec>().unwrap().generate().unwrap();
    let expected = GroupCoo::from_coo(&a, 0, GroupSize::Fixed(4)).unwrap();
    let grp = spindle_formats::io::read_npy_index(&dir.join("grp.npy")).unwrap();
    let crd = spindle_formats::io::read_npy_index(&dir.join("crd.npy")).unwrap();
    let val = spindle_formats::io::read_npy_dense::<f32>(&dir.join("val.npy")).unwrap();
    assert_eq!(crd.shape(), &[expected.groups(), 4]);
    assert_eq!(grp.iter().map(|&x| x as i32).collect::<Vec<_>>(), expected.grp);
    assert_eq!(crd.iter().map(|&x| x as i32).collect::<Vec<_>>(), expected.crd[0]);
    assert_eq!(val.iter().copied().collect::<Vec<_>>(), expected.val);

    // Converted again into the same folder as CSR: GroupCOO's grp.npy goes
    // (it stayed beside CSR's arrays), and a file the tool did not write
    // stays.
    std::fs::write(dir.join("notes.npy"), "mine").unwrap();
    let again =
        spindle(&["convert", &format!("gen:{POWER_LAW}"), "--to", "csr", "--out", dir.to_str().unwrap()]);
    assert!(again.status.success(), "{}", stderr(&again));
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["crd.npy", "format.json", "notes.npy", "pos.npy", "val.npy"]);
    assert!(stdout(&again).contains("removed"), "{}", stdout(&again));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn convert_to_mtx_round_trips() {
    let dir = scratch("mtx");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a.mtx");
    let spec = "banded:n=50,lower=2,upper=1,seed=4";
    let out = spindle(&[
        "convert",
        &format!("gen:{spec}"),
        "--to",
        "ell",
        "--out",
        file.to_str().unwrap(),
        "--dtype",
        "f64",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let back: Coo<f64, i32> = spindle_formats::io::read_mtx(&file).unwrap();
    let a: Coo<f64, i32> = spec.parse::<GeneratorSpec>().unwrap().generate().unwrap();
    assert_eq!(back.canonicalize(), a);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn user_errors_are_messages_not_panics() {
    let out = spindle(&["stats", &format!("gen:{POWER_LAW}"), "--format", "gcoo"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unknown format `gcoo`; known formats:"), "{}", stderr(&out));

    let out = spindle(&["stats", "/nonexistent/a.mtx"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent/a.mtx"), "{}", stderr(&out));

    let dir = scratch("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.mtx");
    std::fs::write(&bad, "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 x 1.0\n").unwrap();
    let out = spindle(&["stats", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("bad.mtx:3:"), "{}", stderr(&out));

    let out = spindle(&[
        "convert",
        &format!("gen:{POWER_LAW}"),
        "--to",
        "csr",
        "--out",
        dir.join("a.npy").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("use --to dense"), "{}", stderr(&out));

    let out = spindle(&["stats", "gen:powerlaw:rows=10"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));

    // An output whose shape the right-hand side does not give: say how.
    let out = spindle(&["check", "C[m,n] = A[m]", "--shape", "A=4"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("give it with --shape C=DIMS"), "{}", stderr(&out));
    // Flags the statement would ignore: a tensor it does not name, a shape
    // that contradicts the data, a thread count past the bound.
    let spmv = |extra: [&'static str; 2]| {
        let mut args = vec!["run", "y[i] = A[i,j] * x[j]", "--rand", "A=6x5:f32:1", "--rand", "x=5:f32:2"];
        args.extend(extra);
        args
    };
    for (args, why) in [
        (
            vec!["check", "C[m] = A[m]", "--shape", "A=4", "--shape", "Q=3"],
            "--shape Q=3: the statement has no tensor `Q`",
        ),
        (spmv(["--format", "Q=csr"]), "--format Q=csr: the statement has no tensor `Q`"),
        // Value data for an index dtype: refused once, under the `where`
        // (each of six autotuning candidates failed with it).
        (
            vec!["run", "y[i] = x[i] * 2 where x: i32", "--rand", "x=4:f32:1"],
            "`x` is an index tensor, but its data are values",
        ),
        // A function's name, a keyword or a dtype is a word of the
        // statement but no tensor (the data were ignored).
        (
            vec!["eval", "y[i] = exp(x[i]) where x: f16", "--rand", "x=4:f32:1", "--rand", "exp=4:f32:2"],
            "--rand exp=4:f32:2: the statement has no tensor `exp`",
        ),
        (
            vec!["eval", "y[i] = exp(x[i]) where x: f16", "--rand", "x=4:f32:1", "--rand", "where=4:f32:2"],
            "the statement has no tensor `where`",
        ),
        (spmv(["--shape", "A=5x5"]), "tensor A: its data is 6x5, but its shape is given as 5x5"),
        (spmv(["--threads", "5000"]), "from 1 to 4096"),
        (spmv(["--shape", "y=:f64"]), "a dtype alone is for a tensor with data"),
        // Refused before the run (they were refused after it).
        (spmv(["--out", "y=y.mtx"]), "`y` is dense, written as .npy"),
        (spmv(["--out", "z=z.npy"]), "the statement's output is `y`"),
        (
            vec![
                "run",
                "C[i,j,k] = A[i,j,k] * 2",
                "--rand",
                "A=2x3x4:f32:1",
                "--format",
                "A=coo",
                "--format",
                "C=coo",
                "--out",
                "C=c.mtx",
            ],
            "a Matrix Market file holds a matrix; `C` has order 3: use .tns",
        ),
    ] {
        let out = spindle(&args);
        assert_eq!(out.status.code().map(|c| c > 0), Some(true), "{args:?}");
        assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
    }
    // An output in dense levels, in its own order, is a dense output,
    // written as .npy (it was refused: "drop the format").
    let dir = scratch("dense-output-format");
    std::fs::create_dir_all(&dir).unwrap();
    let npy = format!("C={}", dir.join("c.npy").display());
    let sum = ["run", "C[i,j] = A[i,j] + B[i,j]", "--rand", "A=3x4:f32:1", "--rand", "B=3x4:f32:2"];
    let formats = ["--format", "A=csr", "--format", "C=dense", "--check", "--out", npy.as_str()];
    let out = spindle(&[&sum[..], &formats].concat());
    assert!(out.status.success() && dir.join("c.npy").is_file(), "{}", stderr(&out));
    // A dtype alone beside the data (it was taken as a rank-0 shape).
    let mut args = spmv(["--shape", "A=:f64"]);
    args.extend(["--emit", "ir"]);
    args[0] = "compile";
    let out = spindle(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("A: f64[6,5]"), "{}", stdout(&out));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn help_lists_the_subcommands() {
    let out = spindle(&["--help"]);
    let text = stdout(&out);
    for command in ["stats", "convert", "bench"] {
        assert!(text.contains(command), "{text}");
    }
}

#[test]
fn check_prints_the_typed_statement() {
    let out = spindle(&[
        "check",
        "C[AM[p],n] += AV[p] * B[AK[p],n]",
        "--shape",
        "AM=10:i32",
        "--shape",
        "AK=10:i64",
        "--shape",
        "AV=10:f16",
        "--shape",
        "B=6x4",
        "--shape",
        "C=5x4",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("C[AM[p],n] += AV[p] * B[AK[p],n]\n"), "{text}");
    for line in [
        "AM         index    10             i32",
        "AV         operand  10             f16",
        "C          output   5x4            f32",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(text.contains("n          4        from B dim 1"), "{text}");
    assert!(text.contains("p          10       from AV dim 0"), "{text}");
}

#[test]
fn check_reports_a_diagnostic_with_a_caret() {
    let out = spindle(&["check", "C[m,n] += A[m,k] * B[n,k]", "--shape", "A=64x32", "--shape", "B=32x16"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("conflicting extents: `k` is 32 in A (dimension 1) but 16 in B (dimension 1)"),
        "{err}"
    );
    assert!(err.contains("C[m,n] += A[m,k] * B[n,k]"), "{err}");
    assert!(err.contains("32 here") && err.contains("16 here"), "{err}");
    let out = spindle(&["check", "C[m,n] += A[m,k] *", "--shape", "A=4x4"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("expected a tensor, a number, a function or `(` in the expression"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn eval_with_a_format_matches_eval_without() {
    let dir = scratch("eval");
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("a.mtx");
    let spec = "powerlaw:rows=40,cols=30,nnz=150,seed=9";
    let coo: Coo<f64, i32> = spec.parse::<GeneratorSpec>().unwrap().generate().unwrap();
    spindle_formats::io::write_mtx(&coo, &a).unwrap();
    let b: Vec<f64> = (0..30 * 5).map(|i| ((i * 7 % 11) as f64 - 5.0) / 4.0).collect();
    spindle_formats::io::write_npy_values(&dir.join("b.npy"), &[30, 5], &b).unwrap();
    let run = |extra: &[&str], out: &str| {
        let path = dir.join(out);
        let a_arg = format!("A={}", a.display());
        let b_arg = format!("B={}", dir.join("b.npy").display());
        let out_arg = format!("C={}", path.display());
        let mut args = vec![
            "eval",
            "C[m,n] = A[m,k] * B[k,n] where A: f64, B: f64, C: f64",
            "--tensor",
            &a_arg,
            "--tensor",
            &b_arg,
        ];
        args.extend_from_slice(&["--out", &out_arg]);
        args.extend_from_slice(extra);
        let o = spindle(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        (stdout(&o), spindle_formats::io::read_npy_dense::<f64>(&path).unwrap())
    };
    let (_, plain) = run(&[], "plain.npy");
    let (text, grouped) = run(&["--format", "A=groupcoo:dim=0,g=4"], "grouped.npy");
    assert!(text.contains("rewritten: C[A_grp[p],n] = A_val[p,q] * B[A_crd[p,q],n]"), "{text}");
    // The product computed here from the generated entries.
    let mut want = vec![0.0f64; 40 * 5];
    for k in 0..coo.nnz() {
        let (r, c, v) = (coo.crd[0][k] as usize, coo.crd[1][k] as usize, coo.val[k]);
        for n in 0..5 {
            want[r * 5 + n] += v * b[c * 5 + n];
        }
    }
    assert_eq!(plain.shape(), &[40, 5]);
    for ((x, y), w) in plain.iter().zip(grouped.iter()).zip(&want) {
        assert!((x - w).abs() < 1e-12 && (y - w).abs() < 1e-12, "{x} and {y} vs {w}");
    }
    assert!(want.iter().any(|x| *x != 0.0));
    let _ = std::fs::remove_dir_all(dir);
}

/// `eval` walks a stored operand by its entries, as `--check`'s reference
/// does: a matrix in CSR too large for a dense copy evaluates (it was
/// refused as having "no format"), to the product computed here.
#[test]
fn eval_walks_a_large_stored_operand_by_its_entries() {
    let dir = scratch("eval_large");
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("a.mtx");
    let coo: Coo<f64, i32> =
        "uniform:rows=5000,cols=4000,nnz=20000,seed=4".parse::<GeneratorSpec>().unwrap().generate().unwrap();
    spindle_formats::io::write_mtx(&coo, &a).unwrap();
    let x: Vec<f64> = (0..4000).map(|i| ((i * 13 % 17) as f64 - 8.0) / 8.0).collect();
    spindle_formats::io::write_npy_values(&dir.join("x.npy"), &[4000], &x).unwrap();
    let y = dir.join("y.npy");
    let out = spindle(&[
        "eval",
        "y[i] = A[i,j] * x[j] where A: f64, x: f64, y: f64",
        "--tensor",
        &format!("A={}", a.display()),
        "--tensor",
        &format!("x={}", dir.join("x.npy").display()),
        "--format",
        "A=csr",
        "--out",
        &format!("y={}", y.display()),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let got = spindle_formats::io::read_npy_dense::<f64>(&y).unwrap();
    let mut want = vec![0.0f64; 5000];
    for k in 0..coo.nnz() {
        want[coo.crd[0][k] as usize] += coo.val[k] * x[coo.crd[1][k] as usize];
    }
    assert_eq!(got.shape(), &[5000]);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-12, "{g} vs {w}");
    }
    assert!(want.iter().filter(|w| **w != 0.0).count() > 1000);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn eval_refuses_bad_arguments_with_messages() {
    let out = spindle(&["eval", "y[i] = A[i,j] * x[j]", "--rand", "A=3x4:f32:1", "--rand", "x=4:q8:1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unknown dtype `q8`"), "{}", stderr(&out));
    // A range on values was ignored once; it is refused with the reason.
    let out = spindle(&["eval", "y[i] = A[i,j] * x[j]", "--rand", "A=3x4:f32:1:0.1", "--rand", "x=4:f32:2"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("a range (the fourth field) is for index tensors"), "{}", stderr(&out));
    let out = spindle(&[
        "eval",
        "y[S[p]] max= x[p]",
        "--rand",
        "x=5:f32:1",
        "--rand",
        "S=5:i32:2",
        "--shape",
        "y=3",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("index tensors need a range"), "{}", stderr(&out));
    let out = spindle(&[
        "eval",
        "y[S[p]] max= x[p]",
        "--rand",
        "x=5:f32:1",
        "--rand",
        "S=5:i32:2:9",
        "--shape",
        "y=3",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is out of range for dimension 0 of y (extent 3)"), "{}", stderr(&out));
    // Beside a stored operand, before any kernel is tuned (it was every
    // autotuning candidate's failure, repeated).
    let out = spindle(&[
        "run",
        "y[i] = A[i,j] * x[P[j]]",
        "--rand",
        "A=6x9:f32:1",
        "--format",
        "A=csr",
        "--rand",
        "P=9:i32:1:50",
        "--rand",
        "x=9:f32:1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("is out of range for dimension 0 of x (extent 9)") && err.contains("statement:1:19"),
        "{err}"
    );
    assert!(!err.contains("autotuning"), "{err}");
}

#[test]
fn compile_prints_ir_c_and_cuda() {
    let stmt = "C[D[y],x] += A[y,E[r]] * B[r,x]";
    let data = [
        "--rand",
        "A=20x32:f16:1",
        "--rand",
        "B=16x16:f16:2",
        "--rand",
        "E=16:i32:3:32",
        "--rand",
        "D=20:i32:4:15",
        "--shape",
        "C=15x16:f16",
        "--schedule",
        "tile.y=16 tile.x=16 tile.r=16",
    ];
    let run = |extra: &[&str]| {
        let mut args = vec!["compile", stmt];
        args.extend_from_slice(&data);
        args.extend_from_slice(extra);
        spindle(&args)
    };
    let ir = run(&["--emit", "ir"]);
    assert!(ir.status.success(), "{}", stderr(&ir));
    assert!(stdout(&ir).contains("dot %"), "{}", stdout(&ir));
    let c = run(&["--target", "c", "--emit", "source"]);
    assert!(
        stdout(&c).contains("void spindle_kernel(void *const *args, int64_t nthreads)"),
        "{}",
        stdout(&c)
    );
    let cuda = run(&["--target", "cuda", "--emit", "source"]);
    let text = stdout(&cuda);
    // The fused kernel, and the rounding of C's f32 accumulator into f16.
    assert_eq!(text.matches("__global__").count(), 2, "{text}");
    assert!(text.contains("wmma::mma_sync") && text.contains("atomicAdd"), "{text}");
    assert!(text.contains("spindle_kernel_round(const float *__restrict__ acc, __half *"), "{text}");
    let plan = run(&["--target", "cuda", "--emit", "plan"]);
    assert!(plan.status.success(), "{}", stderr(&plan));
    assert!(stdout(&plan).contains("on Tensor Cores (f16)"), "{}", stdout(&plan));
    if spindle_cuda::nvrtc::Toolchain::locate().is_ok() {
        let r = run(&["--target", "cuda", "--emit", "source", "--resources", "--arch", "sm_80"]);
        assert!(r.status.success(), "{}", stderr(&r));
        assert!(
            stderr(&r).contains("on sm_80:") && stderr(&r).contains("spills 0 stores / 0 loads"),
            "{}",
            stderr(&r)
        );
        // The machine code: Tensor Core instructions for this product.
        let sass = run(&["--target", "cuda", "--emit", "sass", "--arch", "sm_90"]);
        assert!(sass.status.success(), "{}", stderr(&sass));
        assert!(
            stdout(&sass).contains("spindle_kernel for sm_90") && stdout(&sass).contains("HMMA.16816"),
            "{}",
            stdout(&sass)
        );
    } else {
        eprintln!("SKIPPED: --resources and --emit sass need the CUDA toolchain (cargo xtask setup-cuda)");
    }
    let gpu = spindle(&[
        "run",
        "C[m,n] += A[m,k] * B[k,n]",
        "--rand",
        "A=4x4:f32:1",
        "--rand",
        "B=4x4:f32:1",
        "--target",
        "cuda",
    ]);
    if spindle_cuda::runtime::available() {
        assert!(gpu.status.success(), "{}", stderr(&gpu));
    } else {
        // No GPU: one clear line, before any data is prepared.
        assert_eq!(gpu.status.code(), Some(1));
        assert!(
            stderr(&gpu).contains("`--target cuda` needs an NVIDIA GPU: no CUDA driver"),
            "{}",
            stderr(&gpu)
        );
        assert!(!stdout(&gpu).contains("rewritten"), "{}", stdout(&gpu));
    }
    for suite in [&["bench", "spmm", "--target", "cuda", "--matrix", "karate"][..], &["bench", "bsr"]] {
        let out = spindle(suite);
        if !spindle_cuda::runtime::available() {
            assert_eq!(out.status.code(), Some(1), "{suite:?}");
            assert!(stderr(&out).contains("the GPU suites need an NVIDIA GPU"), "{}", stderr(&out));
        }
    }
}

/// `spindle run` of a small GroupCOO SpMM on `target`, checked, with
/// `extra` arguments.
fn run_spmm_checked(target: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "C[m,n] += A[m,k] * B[k,n]",
        "--rand",
        "A=30x20:f32:1",
        "--rand",
        "B=20x8:f32:2",
        "--format",
        "A=groupcoo:g=2",
        "--target",
        target,
        "--check",
    ];
    args.extend_from_slice(extra);
    spindle(&args)
}

#[test]
fn run_checks_against_the_reference() {
    let out = run_spmm_checked("c", &["--repeats", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("check: max relative error"), "{}", stdout(&out));
    assert!(stderr(&out).contains("ran C on C"), "{}", stderr(&out));
}

/// `--target emulate` without a schedule runs the default once, rather
/// than autotuning under the sanitizer (minutes, chosen by noise).
#[test]
fn the_emulated_gpu_runs_the_default_schedule_once() {
    let out = run_spmm_checked("emulate", &[]);
    let err = stderr(&out);
    if err.contains("is not usable to emulate CUDA kernels") {
        eprintln!("SKIPPED: no C++ compiler for the emulation: {err}");
        return;
    }
    assert!(out.status.success(), "{err}");
    assert!(stdout(&out).contains("check: max relative error"), "{}", stdout(&out));
    assert!(err.contains("over 1 run ("), "{err}");
    assert!(err.contains("nothing is tuned"), "{err}");
    assert!(!err.contains("autotuning"), "{err}");
}

#[test]
fn the_level_path_runs_co_iteration_and_csc_from_the_command_line() {
    // Two stored operands: the tile rewrite cannot co-iterate them, so the
    // plain command takes the level path and says so.
    let union = spindle(&[
        "run",
        "C[i,j] = A[i,j] + B[i,j]",
        "--rand",
        "A=30x40:f32:1",
        "--rand",
        "B=30x40:f32:2",
        "--format",
        "A=csr",
        "--format",
        "B=dcsr",
        "--check",
    ]);
    assert!(union.status.success(), "{}", stderr(&union));
    let out = format!("{}{}", stdout(&union), stderr(&union));
    assert!(out.contains("the level path") && out.contains("check: max relative error"), "{out}");
    // `path=levels` on a format both paths take; `compile` prints the tree.
    let csr = ["C[m,n] += A[m,k] * B[k,n]", "--rand", "A=20x30:f32:1", "--rand", "B=30x8:f32:2", "--format"];
    let mut args = vec!["run"];
    args.extend_from_slice(&csr);
    args.extend_from_slice(&["A=csr", "--schedule", "path=levels", "--check"]);
    let run = spindle(&args);
    assert!(run.status.success() && format!("{}{}", stdout(&run), stderr(&run)).contains("path=levels"));
    let mut args = vec!["compile"];
    args.extend_from_slice(&csr);
    args.extend_from_slice(&["A=csc", "--emit", "ir"]);
    let tree = spindle(&args);
    assert!(tree.status.success(), "{}", stderr(&tree));
    let text = stdout(&tree);
    assert!(text.find("for k").unwrap() < text.find("merge m").unwrap(), "{text}");
    // A discordant order is refused with a caret and the fix.
    let mut args = vec!["run"];
    args.extend_from_slice(&csr);
    args.extend_from_slice(&["A=csr", "--schedule", "path=levels order=k+m"]);
    let bad = spindle(&args);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("visits `k` before `m`") && stderr(&bad).contains("order=m+k"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn sparse_outputs_are_assembled_checked_and_written() {
    let dir = scratch("sparse-out");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.mtx");
    let out_arg = format!("C={}", path.display());
    // Row-wise SpGEMM into CSR, checked level by level, written out.
    let spgemm = |command: &str, extra: &[&str]| {
        let mut args =
            vec![command, "C[i,j] = A[i,k] * B[k,j]", "--rand", "A=30x20:f64:1", "--rand", "B=20x25:f64:2"];
        args.extend([
            "--format",
            "A=csr",
            "--format",
            "B=csr",
            "--format",
            "C=csr",
            "--shape",
            "C=30x25:f64",
        ]);
        args.extend_from_slice(extra);
        spindle(&args)
    };
    let run = spgemm("run", &["--check", "--out", &out_arg]);
    assert!(run.status.success(), "{}", stderr(&run));
    let text = stdout(&run);
    assert!(text.contains("750 entries stored, structure checked level by level"), "{text}");
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.starts_with("%%MatrixMarket matrix coordinate real general\n30 25 750\n"), "{written}");
    // `eval` writes the reference's output in the format given it, too:
    // the same entries as the kernel's.
    let evaluated = dir.join("e.mtx");
    let eval_arg = format!("C={}", evaluated.display());
    let eval = spgemm("eval", &["--out", &eval_arg]);
    assert!(eval.status.success(), "{}", stderr(&eval));
    let (ours, reference) = (
        spindle_formats::io::read_mtx::<f64, i64>(&path).unwrap(),
        spindle_formats::io::read_mtx::<f64, i64>(&evaluated).unwrap(),
    );
    assert_eq!(ours.crd, reference.crd);
    // Order three goes to .tns; .mtx is refused with the reason.
    let tns = dir.join("c.tns");
    let tns_arg = format!("C={}", tns.display());
    let args = |out: &str| {
        spindle(&[
            "run",
            "C[i,j,k] = A[i,j,k] + B[i,j,k]",
            "--rand",
            "A=4x5x6:f32:1",
            "--rand",
            "B=4x5x6:f32:2",
            "--format",
            "A=csf",
            "--format",
            "B=csf",
            "--format",
            "C=csf",
            "--out",
            out,
        ])
    };
    let ok = args(&tns_arg);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let entries = std::fs::read_to_string(&tns).unwrap();
    assert_eq!(entries.lines().filter(|l| l.split_whitespace().count() == 4).count(), 120, "{entries}");
    let bad = args(&format!("C={}", dir.join("c3.mtx").display()));
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("use .tns"), "{}", stderr(&bad));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Several statements: split into three-address form, trie-fused into one
/// kernel (or one nest each with `fusion=none`), checked against the
/// reference evaluator's run of the program; an output whose shape nothing
/// fixes is refused with a caret into the whole program.
#[test]
fn programs_of_several_statements_run_statement_by_statement() {
    let run = spindle(&[
        "run",
        "H[i,h] = A[i,k] * X[k,h]; Z[i,j] = H[i,h] * W[h,j]",
        "--rand",
        "A=40x30:f32:1",
        "--rand",
        "X=30x8:f32:2",
        "--rand",
        "W=8x5:f32:3",
        "--check",
    ]);
    let (out, err) = (stdout(&run), stderr(&run));
    assert!(run.status.success(), "{err}");
    assert!(err.contains("S1: H[i,h] = A[i,k] * X[k,h]") && err.contains("fusion=trie: one kernel"), "{err}");
    assert!(out.contains("check: max relative error") && out.contains("40x5"), "{out}");
    // A compound product splits too: SDDMM, its output in B's pattern,
    // under every policy.
    for fusion in ["none", "maximal", "trie"] {
        let run = spindle(&[
            "run",
            "A[i,j] = B[i,j] * (C[i,k] * D[k,j])",
            "--rand",
            "B=20x24:f32:1",
            "--rand",
            "C=20x6:f32:2",
            "--rand",
            "D=6x24:f32:3",
            "--format",
            "B=csr",
            "--format",
            "A=csr",
            "--schedule",
            &format!("fusion={fusion}"),
            "--check",
        ]);
        assert!(run.status.success(), "{}", stderr(&run));
        assert!(stderr(&run).contains(&format!("fusion={fusion}")), "{}", stderr(&run));
        assert!(stdout(&run).contains("check: max relative error"), "{}", stdout(&run));
    }
    // H's extent of h comes from nothing; where an operand is undeclared,
    // that is the reason instead.
    let bad = spindle(&["run", "H[i,h] = A[i,k] * 2; Z[i] = H[i,h]", "--rand", "A=4x3:f32:1"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("fixes the extent of `h`"), "{}", stderr(&bad));
    let bad = spindle(&["run", "H[i,h] = A[i,k] * X[k,h]; Z[i] = H[i,h]", "--rand", "A=4x3:f32:1"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("unknown tensor `X`"), "{}", stderr(&bad));
}

/// `--emit fusion`: ReACT's view of a compound statement.
#[test]
fn compile_emits_the_fused_forest_of_a_program() {
    let out = spindle(&[
        "compile",
        "A[i,j] = B[i,j] * (C[i,k] * D[k,j])",
        "--rand",
        "B=20x24:f32:1",
        "--rand",
        "C=20x6:f32:2",
        "--rand",
        "D=6x24:f32:3",
        "--format",
        "B=csr",
        "--emit",
        "fusion",
    ]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    for line in [
        "S1: T1[i,j] = C[i,k] * D[k,j]",
        "S1: for i: for j in B: for k: T1[i,j] = C[i,k] * D[k,j]",
        "    for j in B\n      for k\n        S1",
        "T1 [20, 24] -> a scalar",
    ] {
        assert!(text.contains(line), "missing {line:?}:\n{text}");
    }
    assert!(!text.contains("  A ["), "the result is no temporary:\n{text}");
    // `--emit ir` shows the kernel `run` runs: the trie-fused loop tree.
    let out = spindle(&[
        "compile",
        "A[i,j] = B[i,j] * (C[i,k] * D[k,j])",
        "--rand",
        "B=20x24:f32:1",
        "--rand",
        "C=20x6:f32:2",
        "--rand",
        "D=6x24:f32:3",
        "--format",
        "B=csr",
        "--emit",
        "ir",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("local T1 (a scalar)"), "{}", stdout(&out));
}

/// Inputs that crashed, hung or wrote the wrong thing (found by probing
/// the command line) are refused before any work, with the reason.
#[test]
fn out_of_range_requests_are_refused_before_any_work() {
    let dir = scratch("refused");
    std::fs::create_dir_all(&dir).unwrap();
    let mtx = dir.join("c.mtx");
    let refused = |args: &[&str], reason: &str| {
        let out = spindle(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr(&out).contains(reason), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{args:?}: {}", stderr(&out));
    };
    let spmv = ["run", "y[i] = A[i,j] * x[j]", "--rand", "A=8x8:f32:1", "--rand", "x=8:f32:2"];
    // A vector of 10^11 timings was allocated (an abort).
    for repeats in ["99999999999", "0"] {
        refused(&[&spmv[..], &["--repeats", repeats]].concat(), "an integer from 1 to 4096");
    }
    // A first hash workspace of 2^31 entries segfaulted in the kernel.
    refused(&[&spmv[..], &["--schedule", "ws.cap=2147483648"]].concat(), "ws.cap is an integer from 1 to");
    // A dense output named .mtx got NPY bytes.
    let to = format!("C={}", mtx.display());
    refused(
        &["eval", "C[i,j] = A[i,j] * A[i,j]", "--rand", "A=3x3:f32:1", "--out", &to],
        "is dense, written as .npy",
    );
    assert!(!mtx.exists());
    refused(&[&spmv[..], &["--out", "y=/no/such/folder/y.npy"]].concat(), "does not exist");
    refused(&[&spmv[..], &["--out", "y=y.txt"]].concat(), "written as .npy (dense), .mtx");
    // i32 indices drawn up to 10^11 wrapped.
    refused(
        &["eval", "y[i] = x[D[i]]", "--rand", "D=10:i32:2:99999999999", "--rand", "x=8:f32:1"],
        "the range is at most 2147483648",
    );
    // A second flag for a tensor silently replaced the first.
    refused(
        &[&spmv[..], &["--rand", "A=4x4:f32:1"]].concat(),
        "`A` already has its data from `--rand A=8x8:f32:1`",
    );
    refused(&[&spmv[..], &["--schedule", "threads=1", "--threads", "2"]].concat(), "disagree");
    // 2^62 * m wrapped to row 0 in the kernel, out of range for the
    // reference evaluator.
    refused(
        &["run", "C[m,n] = A[4611686018427387904*m, n]", "--rand", "A=8x2:f32:1", "--shape", "C=8x2"],
        "beyond 64-bit integers",
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `eval` and `check` take the programs `run` takes: the same three-address
/// split, and `eval` gives what `run` computes.
#[test]
fn eval_and_check_take_programs() {
    let program = "T[m,n] = A[m,n] * A[m,n]; C[m,n] = T[m,n] + B[m,n]";
    let data = ["--rand", "A=4x3:f64:1", "--rand", "B=4x3:f64:2"];
    let eval = spindle(&[&["eval", program][..], &data].concat());
    assert!(eval.status.success(), "{}", stderr(&eval));
    let run = spindle(&[&["run", program][..], &data, &["--check", "--repeats", "1"]].concat());
    assert!(run.status.success(), "{}", stderr(&run));
    let preview = |o: &Output| stdout(o).lines().find(|l| l.starts_with("C: 4x3 = ")).map(str::to_string);
    assert!(preview(&eval).is_some(), "{}", stdout(&eval));
    assert_eq!(preview(&eval), preview(&run));
    let check = spindle(&["check", program, "--shape", "A=4x3", "--shape", "B=4x3"]);
    assert!(check.status.success(), "{}", stderr(&check));
    let text = stdout(&check);
    assert!(
        text.contains("S1: T[m,n] = A[m,n] * A[m,n]") && text.contains("S2: C[m,n] = T[m,n] + B[m,n]"),
        "{text}"
    );
}

/// `convert --out` a path that exists and is not a folder (a file, a
/// device): named, before the conversion, not "File exists (os error 17)".
#[test]
fn convert_to_a_folder_that_is_a_file_is_refused_by_name() {
    let dir = scratch("out-file");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a.txt");
    std::fs::write(&file, "").unwrap();
    let karate = format!("gen:{POWER_LAW}");
    for out in [file.clone(), file.join("arrays"), PathBuf::from("/dev/null")] {
        let o = spindle(&["convert", &karate, "--to", "csr", "--out", out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let blocker = if out.starts_with("/dev") { out.clone() } else { file.clone() };
        assert!(
            stderr(&o).contains(&format!("{} exists and is not a folder", blocker.display())),
            "{}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("one .npy per array"), "{}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"");
    let _ = std::fs::remove_dir_all(dir);
}

/// `compile --resources` needs `--target cuda`: refused before any source
/// is printed, and the help says so.
#[test]
fn compile_resources_needs_the_cuda_target() {
    let out = spindle(&[
        "compile",
        "y[i] = A[i,j] * x[j]",
        "--rand",
        "A=4x4:f32:1",
        "--rand",
        "x=4:f32:2",
        "--resources",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("the target is c: add --target cuda"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "nothing printed before the refusal: {}", stdout(&out));
    let help = stdout(&spindle(&["compile", "--help"]));
    let resources = help.split("--resources\n").nth(1).unwrap_or_default();
    assert!(resources.split("\n\n").next().unwrap().contains("needs --target cuda"), "{help}");
}

/// `eval` shows and writes the output as its dtype stores it: the f64
/// reference's values beyond f32 are infinities there, and a note says so
/// (the preview printed them as 40-digit numbers that no f32 output holds).
#[test]
fn eval_shows_values_beyond_the_output_dtype_as_it_stores_them() {
    let dir = scratch("eval-overflow");
    std::fs::create_dir_all(&dir).unwrap();
    // x = [0.46.., 0.28.., 0.29..] for this seed: 1e39 * x[0] > f32::MAX.
    let x = ["--rand", "x=3:f32:1"];
    let out = spindle(&[&["eval", "y[i] = x[i] * 1e39"][..], &x].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("3 = [inf, 2.899402e38, 2.973921e38]"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("1 value(s) of `y` are infinite: they lie beyond f32's range"),
        "{}",
        stderr(&out)
    );
    let kept = spindle(&[&["eval", "y[i] = x[i] * 1e39 where y: f64"][..], &x].concat());
    assert!(stdout(&kept).contains("3 = [4.622371e38, 2.899402e38"), "{}", stdout(&kept));
    assert!(!stderr(&kept).contains("note:"), "{}", stderr(&kept));
    // Infinite in f64 too (a division by zero): not blamed on the range.
    let divided = spindle(&[&["eval", "y[i] = x[i] / 0"][..], &x].concat());
    let err = stderr(&divided);
    assert!(
        err.contains("3 value(s) of `y` are infinite: past f32's range")
            && err.contains("a division by zero or an infinite input"),
        "{err}"
    );
    assert!(!err.contains("they lie beyond"), "{err}");
    // A sparse output's entries, shown and written.
    let mtx = dir.join("c.mtx");
    let to = format!("C={}", mtx.display());
    let sparse =
        ["eval", "C[i,j] = A[i,j] * 1e39", "--rand", "A=2x2:f32:1", "--format", "A=csr", "--format", "C=csr"];
    let shown = spindle(&sparse);
    assert!(stdout(&shown).contains("(0,0) inf, (0,1) 2.899402e38"), "{}", stdout(&shown));
    assert!(stderr(&shown).contains("2 value(s) of `C`"), "{}", stderr(&shown));
    let written = spindle(&[&sparse[..], &["--out", &to]].concat());
    assert!(written.status.success(), "{}", stderr(&written));
    let text = std::fs::read_to_string(&mtx).unwrap();
    assert!(text.lines().any(|l| l == "1 1 inf"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A schedule item the kernel does not read is named on stderr (it was
/// accepted silently), and items it reads are not.
#[test]
fn schedule_items_the_kernel_does_not_read_get_a_note() {
    let spmm = [
        "C[m,n] += A[m,k] * B[k,n]",
        "--rand",
        "A=20x30:f32:1",
        "--rand",
        "B=30x8:f32:2",
        "--format",
        "A=csr",
    ];
    let out = spindle(
        &[
            &["run"][..],
            &spmm,
            &["--schedule", "path=levels order=m+n+k threads=1 map=walk", "--repeats", "1"],
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(
        notes,
        [
            "note: `map=walk` changes nothing here: it is read by CUDA kernels on the tile path, and this is a C kernel on the level path"
        ]
    );
    let out = spindle(
        &[&["compile"][..], &spmm, &["--schedule", "tile.p=8 workspace=hash", "--emit", "c"]].concat(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("`workspace=hash` changes nothing here"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("tile.p"), "{}", stderr(&out));
    // A sparse output: a union appends as it walks (no workspace), a
    // product's rows gather in one, and the ISM's items go with a sparse
    // workspace only.
    let notes = |statement: &str, b: &str, schedule: &str| {
        let ab = ["--rand", "A=12x10:f32:1", "--rand", b, "--format", "A=csr", "--format", "B=csr"];
        let out = spindle(
            &[&["run", statement][..], &ab, &["--format", "C=csr", "--schedule", schedule, "--repeats", "1"]]
                .concat(),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
            .lines()
            .filter_map(|l| l.strip_prefix("note: `"))
            .map(|l| l.split('`').next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let union = "C[i,j] = A[i,j] + B[i,j]";
    assert_eq!(
        notes(union, "B=12x10:f32:2", "path=levels workspace=hash ws.cap=4 subsect=off"),
        ["workspace=hash", "ws.cap=4", "subsect=off"]
    );
    // A program (SDDMM over CSR, split): items none of its kernels reads
    // get a note too (they were dropped silently).
    let sddmm = |schedule: &str| {
        spindle(&[
            "run",
            "C[i,j] = A[i,j] * D1[i,r] * D2[r,j]",
            "--rand",
            "A=12x10:f32:1",
            "--format",
            "A=csr",
            "--rand",
            "D1=12x4:f32:2",
            "--rand",
            "D2=4x10:f32:3",
            "--schedule",
            schedule,
            "--repeats",
            "1",
        ])
    };
    let out = sddmm("tile.r=4 map=walk fusion=trie");
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("note: `tile.r=4` changes nothing here") && err.contains("note: `map=walk`"),
        "{err}"
    );
    assert!(!err.contains("`fusion=trie` changes nothing"), "{err}");
    // An index no statement has is refused, as for one statement (it got
    // the same note as an index the kernels do not tile).
    let out = sddmm("tile.zz=4");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("the schedule names `zz`, which no statement of the program uses"), "{err}");
    assert!(err.contains("the program's indices are i, j, r"), "{err}");
    // A position index only where a format's rewrite has it: CSR's `p`,
    // not GroupCOO's `q`.
    assert!(sddmm("tile.p=4").status.success());
    let err = stderr(&sddmm("order=q+i"));
    assert!(err.contains("names `q`") && err.contains("the positions its formats' arrays use: p)"), "{err}");
    let spgemm = "C[i,j] = A[i,k] * B[k,j]";
    assert!(notes(spgemm, "B=10x12:f32:2", "workspace=hash ws.cap=4").is_empty());
    assert_eq!(notes(spgemm, "B=10x12:f32:2", "workspace=dense ws.cap=4"), ["ws.cap=4"]);
}

/// 16-bit inputs reach the reference evaluator as the kernel holds them:
/// `eval` printed unrounded bf16 values where `run` wrote rounded ones, and
/// a product whose terms nearly cancel failed `--check` against unrounded
/// inputs (8e-2 on f16).
#[test]
fn the_reference_reads_16_bit_inputs_as_the_kernel_does() {
    let out = spindle(&["eval", "C[i,k] = U[i,k]", "--rand", "U=1x2:bf16:3", "--shape", "C=1x2:f32"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("1x2 = [0.660156, -0.925781]"), "{}", stdout(&out));
    let sddmm = [
        "run",
        "C[i,j] = A[i,j] * (U[i,k] * V[k,j])",
        "--tensor",
        "A=gen:uniform:rows=1,cols=1,nnz=1,seed=1",
        "--rand",
        "U=1x2:f16:3",
        "--rand",
        "V=2x1:f16:4",
        "--shape",
        "A=1x1:f16",
        "--format",
        "A=csr",
        "--schedule",
        "path=levels",
        "--check",
        "--repeats",
        "1",
    ];
    let out = spindle(&sddmm);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The thread count a run reports is the kernel's: given a schedule (all
/// cores unless told), a kernel with too little work to share runs on one
/// thread (it said "with 2 threads" beside a kernel with no parallel
/// region).
#[test]
fn a_run_reports_the_threads_its_kernel_uses() {
    let small = ["run", "C[m,n] += A[m,k] * B[k,n]", "--rand", "A=16x16:f32:1", "--rand", "B=16x16:f32:2"];
    let out = spindle(&[&small[..], &["--schedule", "tile.m=4", "--repeats", "1"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("ran C on C with 1 thread:"), "{}", stderr(&out));
    // Threads asked for that a kernel cannot use are named, with why (a
    // GroupCOO row loop: its rows repeat; a DCSR output: appended in order).
    let grouped = [
        "run",
        "C[m,n] += A[m,k] * B[k,n]",
        "--tensor",
        "A=gen:uniform:rows=300,cols=300,nnz=3000,seed=1",
        "--rand",
        "B=300x64:f32:2",
        "--format",
        "A=groupcoo:g=4",
        "--schedule",
        "path=levels threads=2",
        "--repeats",
        "1",
    ];
    let out = spindle(&grouped);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("threads=2 changes nothing here; the kernel runs on one thread: the outermost loop's iterations may write the same output element"), "{}", stderr(&out));
    let spgemm = [
        "run",
        "C[i,j] = A[i,k] * B[k,j]",
        "--tensor",
        "A=gen:uniform:rows=300,cols=300,nnz=3000,seed=1",
        "--tensor",
        "B=gen:uniform:rows=300,cols=300,nnz=3000,seed=2",
        "--format",
        "A=csr",
        "--format",
        "B=csr",
        "--format",
        "C=dcsr",
        "--schedule",
        "threads=2",
        "--repeats",
        "1",
    ];
    let out = spindle(&spgemm);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("first level is compressed"), "{}", stderr(&out));
    // A CSC output of a row-wise product: its first level (j) is dense but
    // not the outermost loop's (it blamed repeating rows or a sum).
    let csc = [&spgemm[..11], &["C=csc"], &spgemm[12..]].concat();
    let out = spindle(&csc);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "the outermost loop walks `i` and the sparse output's first level stores `j`, so every iteration may \
             append under any `j`"
        ),
        "{}",
        stderr(&out)
    );
}

/// `eval` writes a program's sparse output as `run` does (it said the
/// output was dense and refused `.mtx`).
#[test]
fn eval_writes_a_programs_sparse_output() {
    let dir = scratch("eval-program-sparse");
    std::fs::create_dir_all(&dir).unwrap();
    let mtx = dir.join("c.mtx");
    let to = format!("C={}", mtx.display());
    let sddmm = [
        "eval",
        "C[i,j] = A[i,j] * (P[i,k] * Q[k,j])",
        "--tensor",
        "A=gen:uniform:rows=12,cols=10,nnz=30,seed=2",
        "--format",
        "A=csr",
        "--format",
        "C=csr",
        "--rand",
        "P=12x3:f64:1",
        "--rand",
        "Q=3x10:f64:2",
        "--out",
        &to,
    ];
    let out = spindle(&sddmm);
    assert!(out.status.success(), "{}", stderr(&out));
    let written: Coo<f64, i32> = spindle_formats::io::read_mtx(&mtx).unwrap();
    assert_eq!((written.shape.clone(), written.nnz()), (vec![12, 10], 30));
    let _ = std::fs::remove_dir_all(dir);
}

/// A reader that goes early (`| head`) ends the command by SIGPIPE, as it
/// does any Unix tool; `println!` panicked on the broken pipe (exit 101).
#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    // The reader is gone before the command writes.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["stats", &format!("gen:{POWER_LAW}"), "--format", "csr"])
        .stdout(writer)
        .output()
        .unwrap();
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
}

/// A benchmark's thread count out of range is refused with the arguments
/// (it started, then failed on a schedule item the user never wrote).
#[test]
fn bench_threads_are_checked_with_the_arguments() {
    let out = spindle(&["bench", "rows", "--threads", "99999", "--matrix", "west0067"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("from 1 to 4096, or 0 for every CPU thread"), "{}", stderr(&out));
}

/// A `--record` that names a file is refused before the suite runs (it ran
/// every measurement, printed the table, then failed to write the JSON).
#[test]
fn a_bench_record_folder_is_checked_before_the_suite_runs() {
    let dir = scratch("record");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("k.npy");
    std::fs::write(&file, "").unwrap();
    let out = spindle(&["bench", "formats", "--repeats", "1", "--record", &file.display().to_string()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("exists and is not a folder"), "{}", stderr(&out));
    assert!(
        stdout(&out).is_empty() && !stderr(&out).contains("ca-CondMat"),
        "the suite ran: {}",
        stdout(&out)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A mistake in the schedule is shown in the schedule, its item
/// underlined (the statement was, as if the mistake were there).
#[test]
fn schedule_mistakes_point_at_the_schedule_item() {
    let spmv =
        ["y[i] += A[i,j] * x[j]", "--rand", "A=20x30:f32:1", "--rand", "x=30:f32:2", "--format", "A=csr"];
    let out = spindle(&[&["run"][..], &spmv, &["--schedule", "tile.p=16 order=k+p"]].concat());
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("the schedule names `k`"), "{err}");
    assert!(err.contains("[ schedule:1:11 ]") && err.contains("tile.p=16 order=k+p"), "{err}");
    let sum = ["s += A[i,j] * x[j]", "--rand", "A=20x30:f32:1", "--rand", "x=30:f32:2", "--format", "A=csr"];
    let out = spindle(&[&["run"][..], &sum, &["--schedule", "reduce=segment(4)", "--repeats", "1"]].concat());
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("[ schedule:1:1 ]") && err.contains("reduce=segment(4)"), "{err}");
}

/// A dtype given twice, by `--shape` and by the statement's `where`, is
/// refused at the `where` (either winning would drop what the user wrote);
/// `--shape` without a dtype leaves the `where` alone.
#[test]
fn a_where_dtype_against_the_shapes_is_refused() {
    let spmv = ["y[i] = A[i,j] * x[j] where y: f16", "--rand", "A=8x8:f32:1", "--rand", "x=8:f32:2"];
    let out = spindle(&[&["eval"][..], &spmv, &["--shape", "y=8:f64"]].concat());
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("`where` gives `y` the dtype f16, but it is given f64 outside the statement"),
        "{err}"
    );
    assert!(err.contains("[ statement:1:28 ]"), "{err}");
    let out = spindle(&[&["eval"][..], &spmv, &["--shape", "y=8"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let out = spindle(&[&["eval"][..], &spmv, &["--shape", "y=8:f16"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let program = "t[i] = A[i,j] * x[j]; y[i] = t[i] * 2 where t: f64";
    let out = spindle(&["check", program, "--shape", "A=8x8", "--shape", "x=8", "--shape", "t=8:f32"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("`where` gives `t` the dtype f64"), "{}", stderr(&out));
}

/// `eval` evaluates the dense tensors, but refuses a format that cannot
/// store its tensor as `run` does (it ignored them), in programs too; a
/// format a kernel would not take (csc) still evaluates.
#[test]
fn eval_refuses_a_format_that_cannot_store_its_tensor() {
    let spmv = ["y[i] = A[i,j] * x[j]", "--rand", "A=4x5:f32:1", "--rand", "x=5:f32:2"];
    for (format, why) in [
        ("A=bogus", "unknown format `bogus`"),
        (
            "A=ddd",
            "format of A (ddd): ddd (one d/c letter per dimension) needs a tensor of order 3, got order 2",
        ),
        ("x=csr", "format of x (csr): csr needs a tensor of order 2, got order 1"),
        ("y=csr", "format of y (csr): csr needs a tensor of order 2, got order 1"),
        ("A=groupcoo:dim=5", "dim=5 but the tensor has order 2"),
    ] {
        let out = spindle(&[&["eval"][..], &spmv, &["--format", format]].concat());
        assert!(!out.status.success(), "{format}");
        assert!(stderr(&out).contains(why), "{format}: {}", stderr(&out));
    }
    assert!(spindle(&[&["eval"][..], &spmv, &["--format", "A=csc"]].concat()).status.success());
    let program = ["t[i] = A[i,j] * x[j]; y[i] = t[i] * 2", "--rand", "A=4x5:f32:1", "--rand", "x=5:f32:2"];
    let out = spindle(&[&["eval"][..], &program, &["--format", "A=ddd"]].concat());
    assert!(stderr(&out).contains("format of A (ddd)"), "{}", stderr(&out));
}

/// An output whose shape cannot be worked out is shown at the subscript
/// without an extent; a `where` extent against the data names the operand
/// the extent comes from (it named the output, whose shape was worked out
/// from that operand); an extent past 2^64 says so.
#[test]
fn shape_mistakes_point_at_their_subscript() {
    let out = spindle(&["check", "y[i,j,k] = A[i,j]", "--shape", "A=4x4"]);
    let err = stderr(&out);
    assert!(err.contains("the shape of the output `y` cannot be worked out"), "{err}");
    assert!(
        err.contains("[ statement:1:7 ]") && err.contains("`k` is alone in no subscript on the right"),
        "{err}"
    );
    assert!(err.contains("give it with --shape y=DIMS"), "{err}");
    let out = spindle(&["check", "y[0] = A[0,j]", "--shape", "A=4x4"]);
    assert!(stderr(&out).contains("not an index alone"), "{}", stderr(&out));
    // Two operands that disagree are named, not the output whose shape was
    // worked out from the first (it said "`i` is 12 in C").
    let out = spindle(&["check", "C[i,j] = A[i,j] + B[i,j]", "--shape", "A=12x9", "--shape", "B=25x9"]);
    let err = stderr(&out);
    assert!(
        err.contains("conflicting extents: `i` is 12 in A (dimension 0) but 25 in B (dimension 0)"),
        "{err}"
    );
    let out = spindle(&["check", "y[i] = x[i+1] - x[i] where i < 4", "--shape", "x=5"]);
    let err = stderr(&out);
    assert!(err.contains("`i` is 5 in x (dimension 0) but the `where` clause says 4"), "{err}");
    let out = spindle(&["check", "y[i] = x[j] where j < 99999999999999999999", "--shape", "x=4"]);
    assert!(stderr(&out).contains("the extent of `j` is too large"), "{}", stderr(&out));
}

/// A convolution's loop-order refusal names the `order=` given and the
/// default's rest (it named the completed order, with commas); a stored
/// operand read at two subscripts names the second-name workaround.
#[test]
fn conv_refusals_name_what_was_written() {
    let conv = [
        "O[i,j] += I[i+p,j+q] * W[p,q]",
        "--tensor",
        "I=gen:uniform:shape=10x10,density=0.3,seed=1",
        "--rand",
        "W=3x3:f32:2",
        "--format",
        "I=csr",
        "--shape",
        "O=8x8",
        "--repeats",
        "1",
    ];
    let out = spindle(&[&["run"][..], &conv, &["--schedule", "order=q+j"]].concat());
    let err = stderr(&out);
    assert!(err.contains("`order=q+j` (then i+p by default) resolves level 1 of `I`"), "{err}");
    let separable = [
        "O[i,j] = I[i+p,j] * F[p] + I[i,j+p] * G[p]",
        "--tensor",
        "I=gen:uniform:shape=17x17,density=0.5,seed=1",
        "--rand",
        "F=3:f32:1",
        "--rand",
        "G=3:f32:2",
        "--shape",
        "O=17x17",
        "--format",
        "I=csr",
    ];
    let err = stderr(&spindle(&[&["run"][..], &separable].concat()));
    assert!(
        err.contains("is read at two subscripts") && err.contains("give `I`'s data a second name"),
        "{err}"
    );
}

/// A NumPy bool array read where indices belong says it holds bools (it
/// said "f32 values", the dtype bools are read as); a uint64 past i64 says
/// why it was read as values.
#[test]
fn a_bool_or_huge_npy_read_as_indices_says_what_it_holds() {
    let dir = scratch("bool-npy");
    std::fs::create_dir_all(&dir).unwrap();
    let index_read = |file: &str, descr: &str, len: usize, data: Vec<u8>| {
        // A version 1.0 header padded to 64 bytes with the magic, then data.
        let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({len},), }}");
        let header = format!("{dict:<53}\n");
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        bytes.extend(data);
        let path = dir.join(file);
        std::fs::write(&path, bytes).unwrap();
        let tensor = format!("I={}", path.display());
        let out = spindle(&["eval", "y[i] = v[I[i]]", "--tensor", &tensor, "--rand", "v=4:f32:1"]);
        assert!(!out.status.success());
        stderr(&out)
    };
    let bools = index_read("mask.npy", "|b1", 3, vec![1, 0, 1]);
    assert!(bools.contains("mask.npy holds bools, read as the values 0 and 1 (f32)"), "{bools}");
    let huge =
        index_read("huge.npy", "<u8", 2, [1u64, u64::MAX - 1].iter().flat_map(|x| x.to_le_bytes()).collect());
    assert!(huge.contains("huge.npy holds an unsigned integer above 2^63 - 1"), "{huge}");
}

/// A `.tns` without a header takes its largest indices as its extents: an
/// extent conflict over it says so (it read as a mistake in the data), and
/// the same entries under a header run.
#[test]
fn an_extent_guessed_from_a_headerless_tns_is_named_in_the_conflict() {
    let dir = scratch("headerless-tns");
    std::fs::create_dir_all(&dir).unwrap();
    let (bare, headed) = (dir.join("a.tns"), dir.join("b.tns"));
    std::fs::write(&bare, "# two entries\n1 1 1 1.0\n3 2 4 2.0\n").unwrap();
    std::fs::write(&headed, "3\n3 2 6\n1 1 1 1.0\n3 2 4 2.0\n").unwrap();
    let run = |path: &std::path::Path| {
        spindle(&[
            "eval",
            "y[i] = A[i,j,k] * x[k]",
            "--tensor",
            &format!("A={}", path.display()),
            "--rand",
            "x=6:f32:1",
        ])
    };
    let out = run(&bare);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("`k` is 4 in A (dimension 2) but 6 in x"), "{err}");
    assert!(
        err.contains("a.tns has no header, so each line is read as 3 coordinates and a value, and `A`'s extents are its largest indices"),
        "{err}"
    );
    let out = run(&headed);
    assert!(out.status.success(), "{}", stderr(&out));
    // A program's statements too.
    let a = format!("A={}", bare.display());
    let program = spindle(&[
        "run",
        "t[i,j] = A[i,j,k] * x[k]; y[i] = t[i,j] * 2",
        "--tensor",
        &a,
        "--rand",
        "x=6:f32:1",
    ]);
    assert!(stderr(&program).contains("a.tns has no header"), "{}", stderr(&program));
    // A shape given against the data is refused in a program as in one
    // statement (a program ran on the data's).
    let shaped = spindle(&[
        "run",
        "t[i,j] = A[i,j,k] * x[k]; y[i] = t[i,j] * 2",
        "--tensor",
        &a,
        "--rand",
        "x=4:f32:1",
        "--shape",
        "A=3x2x6",
    ]);
    assert!(
        stderr(&shaped).contains("its data is 3x2x4, but its shape is given as 3x2x6"),
        "{}",
        stderr(&shaped)
    );
    // Coordinates alone (a pattern) read as one order lower: the rank
    // mismatch's note says how each line was read.
    let pattern = dir.join("p.tns");
    std::fs::write(&pattern, "1 1 1\n3 2 4\n").unwrap();
    let out = run(&pattern);
    let err = stderr(&out);
    assert!(err.contains("`A` has rank 2 (shape 3x2) but is indexed with 3 subscripts"), "{err}");
    assert!(err.contains("p.tns has no header, so each line is read as 2 coordinates and a value"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `--shape A=` with nothing after `=` is refused (it meant a scalar), and
/// `--out` naming a program's earlier output says only the last is kept
/// (it called the program "the statement").
#[test]
fn an_empty_shape_and_an_earlier_programs_output_are_refused_with_why() {
    let out = spindle(&["check", "C[i] = A * B[i]", "--shape", "A=", "--shape", "B=4"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--shape A=: no dims given (NAME=64x32, or NAME=scalar for rank 0)"),
        "{}",
        stderr(&out)
    );
    let out =
        spindle(&["run", "y[i] = x[i] * 3; z[i] = y[i] * 2", "--rand", "x=4:f32:1", "--out", "y=/tmp/y.npy"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("the program's output is `z`, its last statement's"), "{}", stderr(&out));
}

/// A matrix whose size does not fit i32 indices says that `--itype i64`
/// reads it, for a file as for a generator (the file's reader reports the
/// overflow as a parse error of its size line).
#[test]
fn an_index_past_i32_names_itype_i64() {
    let dir = scratch("itype");
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.mtx");
    std::fs::write(&big, "%%MatrixMarket matrix coordinate real general\n2 3000000000 1\n1 2999999999 1.5\n")
        .unwrap();
    for input in [big.display().to_string(), "gen:uniform:rows=2,cols=3000000000,nnz=1,seed=1".to_string()] {
        let out = spindle(&["stats", &input]);
        assert!(!out.status.success());
        assert!(stderr(&out).contains("(it reads with --itype i64)"), "{input}: {}", stderr(&out));
        let wide = spindle(&["stats", &input, "--itype", "i64"]);
        assert!(wide.status.success(), "{input}: {}", stderr(&wide));
    }
    let _ = std::fs::remove_dir_all(dir);
}
