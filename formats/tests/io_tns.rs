//! FROSTT `.tns` reading and writing: both header forms, every class of
//! malformed input (with its exact message), and write→read round trips.

use std::path::{Path, PathBuf};

use spindle_formats::io::{parse_tns, read_tns, write_tns, write_tns_to};
use spindle_formats::{Coo, FormatError};

fn parse(text: &str) -> Result<Coo<f64, i32>, FormatError> {
    parse_tns(text.as_bytes(), Path::new("t.tns"))
}

fn err(text: &str) -> String {
    match parse(text) {
        Ok(coo) => panic!("expected an error, parsed {coo:?}"),
        Err(e) => {
            assert!(matches!(e, FormatError::Parse { .. }), "not a parse error: {e:?}");
            e.to_string()
        }
    }
}

fn temp_path(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let k = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("spindle-io-tns-{}-{k}-{name}", std::process::id()))
}

#[test]
fn without_header_dims_are_the_largest_index() {
    let coo = parse("# test tns\n2 2 2 6.0\n1 3 1 2.0\n\n1 2 1 1.0\n").unwrap();
    assert_eq!(coo.order(), 3);
    assert_eq!(coo.shape, vec![2, 3, 2]);
    assert_eq!(coo.crd, vec![vec![1, 0, 0], vec![1, 2, 1], vec![1, 0, 0]]);
    assert_eq!(coo.val, vec![6.0, 2.0, 1.0]);
}

#[test]
fn with_header_dims_are_declared() {
    let coo = parse("# c\n3\n# c\n4 5 6\n1 1 1 1.5\n4 5 6 -2\n").unwrap();
    assert_eq!(coo.shape, vec![4, 5, 6]);
    assert_eq!(coo.crd, vec![vec![0, 3], vec![0, 4], vec![0, 5]]);
    assert_eq!(coo.val, vec![1.5, -2.0]);
}

#[test]
fn header_with_no_entries_is_an_empty_tensor() {
    let coo = parse("2\n3 4\n").unwrap();
    assert_eq!(coo.shape, vec![3, 4]);
    assert_eq!(coo.nnz(), 0);
}

#[test]
fn order_one_and_order_five() {
    let coo = parse("3 1.0\n1 2.0\n").unwrap();
    assert_eq!(coo.shape, vec![3]);
    let coo = parse("1 2 3 4 5 7\n").unwrap();
    assert_eq!(coo.shape, vec![1, 2, 3, 4, 5]);
}

#[test]
fn crlf_and_fortran_exponents() {
    let coo = parse("1 1 2.5D0\r\n2 2 1e1\r\n").unwrap();
    assert_eq!(coo.val, vec![2.5, 10.0]);
}

// ---- malformed input -------------------------------------------------------

#[test]
fn inconsistent_arity() {
    assert_eq!(err("1 1 1 1.0\n1 2 1.0\n"), "t.tns:2: expected 4 fields (3 indices and a value), found 3");
    assert_eq!(err("2\n3 3\n1 1 1 1.0\n"), "t.tns:3: expected 3 fields (2 indices and a value), found 4");
}

#[test]
fn non_numeric_index() {
    assert_eq!(
        err("1 1 1.0\n1 x 1.0\n"),
        "t.tns:2: invalid index `x` in column 2: expected a positive integer"
    );
    assert_eq!(err("-1 1 1.0\n"), "t.tns:1: invalid index `-1` in column 1: expected a positive integer");
}

#[test]
fn non_numeric_value() {
    assert_eq!(err("1 1 1.0\n1 2 abc\n"), "t.tns:2: invalid value `abc`: expected a real number");
}

#[test]
fn index_zero() {
    assert_eq!(err("1 1 1.0\n1 0 1.0\n"), "t.tns:2: index 0 in column 2 is invalid: indices are 1-based");
}

#[test]
fn index_beyond_declared_dims() {
    assert_eq!(
        err("3\n3 3 3\n1 1 1 1.0\n1 4 1 1.0\n"),
        "t.tns:4: index 4 in column 2 is beyond the dim 3 declared on line 2"
    );
}

#[test]
fn index_too_large_for_the_index_type() {
    assert_eq!(
        err("1 3000000000 1.0\n"),
        "t.tns:1: index 3000000000 in column 2 is too large: 3000000000 does not fit in an i32 index"
    );
}

#[test]
fn header_dims_count_mismatch() {
    assert_eq!(
        err("3\n3 3\n1 1 1 1.0\n"),
        "t.tns:2: the header declares order 3 on line 1 but this line lists 2 dims"
    );
}

#[test]
fn header_with_invalid_order_or_dims() {
    assert_eq!(err("0\n\n"), "t.tns:1: invalid order `0` in the header: expected a positive integer");
    assert_eq!(err("x\n"), "t.tns:1: invalid order `x` in the header: expected a positive integer");
    assert_eq!(err("2\n3 y\n"), "t.tns:2: invalid dim `y` in column 2: expected a non-negative integer");
    assert_eq!(err("# c\n2\n# c\n"), "t.tns:3: missing dims line after the order 2 declared on line 2");
}

#[test]
fn empty_file() {
    assert_eq!(err(""), "t.tns:1: no header and no entries: the tensor's order is unknown");
    assert_eq!(
        err("# only\n# comments\n"),
        "t.tns:2: no header and no entries: the tensor's order is unknown"
    );
}

// ---- writing ----------------------------------------------------------------

fn small_tensor() -> Coo<f64, i32> {
    Coo::new(
        vec![3, 4, 2],
        vec![vec![2, 0, 1], vec![3, 0, 2], vec![1, 0, 0]],
        vec![0.1, -1.0 / 3.0, 6.02214076e23],
    )
    .unwrap()
}

#[test]
fn write_then_parse_is_exact() {
    let coo = small_tensor();
    let mut out = Vec::new();
    write_tns_to(&coo, &mut out, Path::new("mem.tns")).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text, "3\n3 4 2\n3 4 2 0.1\n1 1 1 -0.3333333333333333\n2 3 1 6.02214076e23\n");
    assert_eq!(parse(&text).unwrap(), coo);
}

#[test]
fn write_file_then_read_file() {
    // Trailing empty extents survive because the header records them.
    let coo = Coo::<f32, i64>::new(vec![5, 7, 9], vec![vec![0, 4], vec![6, 1], vec![2, 2]], vec![0.1, 2.5])
        .unwrap();
    let path = temp_path("round.tns");
    write_tns(&coo, &path).unwrap();
    let back = read_tns::<f32, i64>(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(back, coo);
}

#[test]
fn writing_order_zero_is_refused() {
    let coo = Coo::<f64, i32>::new(vec![], vec![], vec![1.0]).unwrap();
    let e = write_tns_to(&coo, Vec::new(), Path::new("mem.tns")).unwrap_err();
    assert_eq!(e.to_string(), "invalid FROSTT tensor: a tensor of order 0 cannot be written");
}

proptest::proptest! {
    /// Arbitrary token soup never panics.
    #[test]
    fn arbitrary_input_never_panics(
        lines in proptest::collection::vec(
            proptest::collection::vec(
                proptest::sample::select(vec!["1", "2", "3", "0", "-1", "x", "2.5", "#", "18446744073709551615", "9999999999"]),
                0..6,
            ),
            0..12,
        ),
    ) {
        let text: String = lines.iter().map(|l| l.join(" ") + "\n").collect();
        let _ = parse(&text);
        let _ = parse_tns::<f32, i64, _>(text.as_bytes(), Path::new("t.tns"));
    }
}
