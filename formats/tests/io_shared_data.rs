//! Every real file in `shared/data` parses, with known facts checked. Skips
//! with a message where the folder is absent.

use std::path::Path;

use spindle_formats::Coo;
use spindle_formats::data::{shared_data_dir, shared_file, shared_matrices};
use spindle_formats::io::{read_mtx, read_tensor, read_tns};

fn skip() -> bool {
    if shared_data_dir().is_none() {
        println!("SKIPPED: shared data folder absent");
        return true;
    }
    false
}

/// What a Matrix Market file says about itself, read independently of the
/// parser: (symmetric?, rows, cols, stored entries, stored diagonal entries).
fn facts(path: &Path) -> (bool, usize, usize, usize, usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let banner = lines.next().unwrap().to_ascii_lowercase();
    let symmetric = !banner.ends_with("general");
    let mut data = lines.filter(|l| !l.trim().is_empty() && !l.starts_with('%'));
    let size: Vec<usize> = data.next().unwrap().split_whitespace().map(|x| x.parse().unwrap()).collect();
    let diag = data
        .filter(|l| {
            let mut f = l.split_whitespace();
            f.next() == f.next()
        })
        .count();
    (symmetric, size[0], size[1], size[2], diag)
}

fn is_structurally_symmetric(coo: &Coo<f64, i32>) -> bool {
    let a = coo.clone().canonicalize();
    let t = a.permute(&[1, 0]).unwrap();
    a.crd == t.crd && a.val == t.val
}

#[test]
fn every_matrix_parses_with_both_triangles() {
    if skip() {
        return;
    }
    let files = shared_matrices();
    assert!(files.len() >= 9, "{files:?}");
    for path in files {
        let coo = read_mtx::<f64, i32>(&path).unwrap_or_else(|e| panic!("{e}"));
        let (symmetric, rows, cols, stored, diag) = facts(&path);
        assert_eq!(coo.shape, vec![rows, cols], "{}", path.display());
        let want = if symmetric { 2 * stored - diag } else { stored };
        assert_eq!(coo.nnz(), want, "{}", path.display());
        if symmetric {
            assert!(is_structurally_symmetric(&coo), "{}", path.display());
        }
        // The dispatcher agrees.
        assert_eq!(read_tensor::<f64, i32>(&path).unwrap(), coo);
    }
}

#[test]
fn cora() {
    let Some(path) = shared_file("matrices/cora.mtx") else {
        println!("SKIPPED: shared data folder absent");
        return;
    };
    let coo = read_mtx::<f32, i64>(&path).unwrap();
    assert_eq!(coo.shape, vec![2708, 2708]);
    let diag = (0..coo.nnz()).filter(|&k| coo.crd[0][k] == coo.crd[1][k]).count();
    assert_eq!(coo.nnz(), 2 * 5429 - diag);
}

#[test]
fn ca_condmat_is_pattern_symmetric() {
    let Some(path) = shared_file("matrices/ca-CondMat.mtx") else {
        println!("SKIPPED: shared data folder absent");
        return;
    };
    let coo = read_mtx::<f64, i32>(&path).unwrap();
    assert_eq!(coo.shape, vec![23133, 23133]);
    assert!(coo.val.iter().all(|&v| v == 1.0));
    let diag = (0..coo.nnz()).filter(|&k| coo.crd[0][k] == coo.crd[1][k]).count();
    assert_eq!(coo.nnz(), 2 * 93497 - diag);
    assert!(is_structurally_symmetric(&coo));
}

#[test]
fn lp_afiro() {
    let Some(path) = shared_file("matrices/lp_afiro.mtx") else {
        println!("SKIPPED: shared data folder absent");
        return;
    };
    let coo = read_mtx::<f64, i32>(&path).unwrap();
    assert_eq!(coo.shape, vec![27, 51]);
    assert_eq!(coo.nnz(), 102);
}

#[test]
fn med_tns() {
    let Some(path) = shared_file("tensors/med.tns") else {
        println!("SKIPPED: shared data folder absent");
        return;
    };
    let coo = read_tns::<f64, i32>(&path).unwrap();
    assert_eq!(coo.order(), 3);
    assert_eq!(coo.nnz(), 100000);
    assert_eq!(coo.coord(0), vec![0, 200, 11436]);
    assert_eq!(coo.val[0], 4.0);
    for d in 0..3 {
        let max = coo.crd[d].iter().max().copied().unwrap() as usize;
        assert_eq!(coo.shape[d], max + 1);
    }
}

#[test]
fn tensor_3d_3_8_has_a_header() {
    let Some(path) = shared_file("tensors/3d_3_8.tns") else {
        println!("SKIPPED: shared data folder absent");
        return;
    };
    let coo = read_tns::<f64, i32>(&path).unwrap();
    assert_eq!(coo.shape, vec![3, 3, 3]);
    assert_eq!(coo.nnz(), 8);
    assert_eq!(coo.coord(0), vec![0, 0, 0]);
    assert_eq!(coo.val[0], 1.0);
}

#[test]
fn small_tns() {
    let Some(path) = shared_file("tensors/small.tns") else {
        println!("SKIPPED: shared data folder absent");
        return;
    };
    let coo = read_tns::<f64, i32>(&path).unwrap();
    assert_eq!(coo.order(), 3);
    assert_eq!(coo.coord(0), vec![1, 1, 1]);
    assert_eq!(coo.val[0], 6.0);
}

#[test]
fn every_tensor_parses_through_the_dispatcher() {
    if skip() {
        return;
    }
    let dir = shared_data_dir().unwrap().join("tensors");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "tns") {
            let coo = read_tensor::<f64, i64>(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(coo.nnz() > 0, "{}", path.display());
            n += 1;
        }
    }
    assert!(n >= 3);
}

#[test]
fn unknown_extension_is_refused() {
    let e = read_tensor::<f64, i32>(Path::new("cloud.xyz")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid tensor file: cloud.xyz: unsupported extension; expected .mtx (Matrix Market) or .tns (FROSTT)"
    );
}
