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
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn no_arguments_prints_an_example() {
    let out = spindle(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("g*"), "{text}");
    assert!(text.contains("format      groupcoo:dim=0,g="), "{text}");
}

#[test]
fn help_lists_the_subcommands() {
    let out = spindle(&["--help"]);
    let text = stdout(&out);
    for command in ["stats", "convert", "bench"] {
        assert!(text.contains(command), "{text}");
    }
}
