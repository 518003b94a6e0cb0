//! `.xyz` point clouds.

use std::path::Path;

use spindle_formats::FormatError;
use spindle_formats::data::shared_file;
use spindle_formats::io::{parse_xyz, read_xyz};

fn err(text: &str) -> String {
    let e = parse_xyz(text.as_bytes(), Path::new("p.xyz")).unwrap_err();
    assert!(matches!(e, FormatError::Parse { .. }), "{e:?}");
    e.to_string()
}

#[test]
fn points_comments_blank_lines_and_extra_columns() {
    let text = "# header\n-0.04 -0.85 0.65 \n\n0.34\t0.41 0.47 0 0 1\r\n  # indented comment\n1e-3 2 3\n";
    let pts = parse_xyz(text.as_bytes(), Path::new("p.xyz")).unwrap();
    assert_eq!(pts, vec![[-0.04, -0.85, 0.65], [0.34, 0.41, 0.47], [1e-3, 2.0, 3.0]]);
}

#[test]
fn empty_input_has_no_points() {
    assert!(parse_xyz("".as_bytes(), Path::new("p.xyz")).unwrap().is_empty());
}

#[test]
fn too_few_columns() {
    assert_eq!(err("1 2 3\n# c\n4 5\n"), "p.xyz:3: expected at least 3 columns (`x y z`), found 2");
}

#[test]
fn non_numeric_coordinate() {
    assert_eq!(err("1 2 3\n4 five 6\n"), "p.xyz:2: invalid y coordinate `five`: expected a real number");
}

#[test]
fn bunny() {
    let Some(path) = shared_file("pointclouds/bunny.xyz") else {
        println!("SKIPPED: shared data folder absent");
        return;
    };
    let pts = read_xyz(&path).unwrap();
    assert_eq!(pts.len(), 7244);
    assert_eq!(pts[0], [-0.042074, -0.855198, 0.658294]);
    assert!(pts.iter().flatten().all(|x| x.is_finite()));
}
