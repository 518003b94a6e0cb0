//! Matrix Market reading and writing: every supported variant, every class
//! of malformed input (with its exact message), and write→read round trips.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use spindle_formats::io::{parse_mtx, read_mtx, write_mtx, write_mtx_to};
use spindle_formats::{Coo, FormatError};

fn parse(text: &str) -> Result<Coo<f64, i32>, FormatError> {
    parse_mtx(text.as_bytes(), Path::new("t.mtx"))
}

/// The error message for `text`, which must fail to parse.
fn err(text: &str) -> String {
    match parse(text) {
        Ok(coo) => panic!("expected an error, parsed {coo:?}"),
        Err(e) => {
            assert!(matches!(e, FormatError::Parse { .. }), "not a parse error: {e:?}");
            e.to_string()
        }
    }
}

fn triplets(coo: &Coo<f64, i32>) -> Vec<(usize, usize, f64)> {
    (0..coo.nnz()).map(|k| (coo.crd[0][k] as usize, coo.crd[1][k] as usize, coo.val[k])).collect()
}

fn temp_path(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let k = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("spindle-io-mtx-{}-{k}-{name}", std::process::id()))
}

// ---- well-formed input -------------------------------------------------

#[test]
fn coordinate_general_keeps_file_order_and_becomes_zero_based() {
    let coo = parse(
        "%%MatrixMarket matrix coordinate real general\n\
         % a comment\n\
         3 4 3\n\
         3 4 1.5\n\
         1 1 -2\n\
         2 3 1e-3\n",
    )
    .unwrap();
    assert_eq!(coo.shape, vec![3, 4]);
    assert_eq!(triplets(&coo), vec![(2, 3, 1.5), (0, 0, -2.0), (1, 2, 1e-3)]);
}

#[test]
fn symmetric_mirrors_follow_each_off_diagonal_entry() {
    let coo = parse(
        "%%MatrixMarket matrix coordinate real symmetric\n\
         3 3 3\n\
         2 1 5\n\
         2 2 7\n\
         3 1 -1\n",
    )
    .unwrap();
    assert_eq!(triplets(&coo), vec![(1, 0, 5.0), (0, 1, 5.0), (1, 1, 7.0), (2, 0, -1.0), (0, 2, -1.0)]);
}

#[test]
fn skew_symmetric_mirrors_are_negated() {
    let coo = parse(
        "%%MatrixMarket matrix coordinate real skew-symmetric\n\
         3 3 2\n\
         2 1 5\n\
         3 2 -1.5\n",
    )
    .unwrap();
    assert_eq!(triplets(&coo), vec![(1, 0, 5.0), (0, 1, -5.0), (2, 1, -1.5), (1, 2, 1.5)]);
}

#[test]
fn pattern_entries_have_value_one() {
    let coo = parse(
        "%%MatrixMarket matrix coordinate pattern symmetric\n\
         2 2 2\n\
         1 1\n\
         2 1\n",
    )
    .unwrap();
    assert_eq!(triplets(&coo), vec![(0, 0, 1.0), (1, 0, 1.0), (0, 1, 1.0)]);
}

#[test]
fn integer_field_and_case_insensitive_banner() {
    let coo = parse("%%MatrixMarket Matrix Coordinate INTEGER General\n2 2 1\n2 1 -7\n").unwrap();
    assert_eq!(triplets(&coo), vec![(1, 0, -7.0)]);
}

#[test]
fn double_field_and_fortran_exponents() {
    let coo =
        parse("%%MatrixMarket matrix coordinate double general\n1 2 2\n1 1 1.5D+02\n1 2 -2d-1\n").unwrap();
    assert_eq!(coo.val, vec![150.0, -0.2]);
}

#[test]
fn array_general_is_column_major_and_keeps_zeros() {
    let coo = parse(
        "%%MatrixMarket matrix array real general\n\
         % comment\n\
         2 3\n\
         1\n2\n0\n4\n\n5\n6\n",
    )
    .unwrap();
    assert_eq!(coo.shape, vec![2, 3]);
    assert_eq!(
        triplets(&coo),
        vec![(0, 0, 1.0), (1, 0, 2.0), (0, 1, 0.0), (1, 1, 4.0), (0, 2, 5.0), (1, 2, 6.0)]
    );
}

#[test]
fn array_symmetric_stores_the_lower_triangle_column_major() {
    // [[1 2 3] [2 4 5] [3 5 6]]: lower triangle by columns is 1 2 3 4 5 6.
    let coo = parse("%%MatrixMarket matrix array real symmetric\n3 3\n1\n2\n3\n4\n5\n6\n").unwrap();
    let dense = coo.canonicalize();
    assert_eq!(dense.val, vec![1.0, 2.0, 3.0, 2.0, 4.0, 5.0, 3.0, 5.0, 6.0]);
}

#[test]
fn array_skew_symmetric_omits_the_diagonal() {
    let coo = parse("%%MatrixMarket matrix array integer skew-symmetric\n3 3\n1\n2\n3\n").unwrap();
    assert_eq!(
        triplets(&coo),
        vec![(1, 0, 1.0), (0, 1, -1.0), (2, 0, 2.0), (0, 2, -2.0), (2, 1, 3.0), (1, 2, -3.0)]
    );
}

#[test]
fn comments_blank_lines_crlf_and_bom_are_accepted() {
    let text = "\u{feff}%%MatrixMarket matrix coordinate real general\r\n\r\n% c\r\n  \r\n2 2 2\r\n% between\r\n1 2 3\r\n\r\n2 1 4\r\n% trailing\r\n";
    let coo = parse(text).unwrap();
    assert_eq!(triplets(&coo), vec![(0, 1, 3.0), (1, 0, 4.0)]);
}

#[test]
fn other_value_and_index_types() {
    let text = "%%MatrixMarket matrix coordinate real general\n2 2 1\n2 2 0.1\n";
    let coo = parse_mtx::<f32, i64, _>(text.as_bytes(), Path::new("t.mtx")).unwrap();
    assert_eq!(coo.crd, vec![vec![1i64], vec![1i64]]);
    assert_eq!(coo.val, vec![0.1f32]);
    let coo = parse_mtx::<half::bf16, i32, _>(text.as_bytes(), Path::new("t.mtx")).unwrap();
    assert_eq!(coo.val, vec![half::bf16::from_f64(0.1)]);
}

#[test]
fn empty_matrix() {
    let coo = parse("%%MatrixMarket matrix coordinate real general\n0 0 0\n").unwrap();
    assert_eq!(coo.shape, vec![0, 0]);
    assert_eq!(coo.nnz(), 0);
}

// ---- malformed input: one test per class --------------------------------

#[test]
fn empty_file() {
    assert_eq!(
        err(""),
        "t.mtx:1: empty file: expected the banner `%%MatrixMarket matrix <format> <field> <symmetry>`"
    );
}

#[test]
fn missing_banner() {
    assert_eq!(
        err("3 3 1\n1 1 1\n"),
        "t.mtx:1: expected the banner `%%MatrixMarket matrix <format> <field> <symmetry>`, found `3 3 1`"
    );
    assert_eq!(
        err("\n%%MatrixMarket matrix coordinate real general\n"),
        "t.mtx:1: expected the banner `%%MatrixMarket matrix <format> <field> <symmetry>`, found a blank line"
    );
}

#[test]
fn incomplete_banner_and_trailing_words() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real\n"),
        "t.mtx:1: incomplete banner: expected `%%MatrixMarket matrix <format> <field> <symmetry>`"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general extra\n"),
        "t.mtx:1: unexpected `extra` after the symmetry in the banner"
    );
}

#[test]
fn wrong_object() {
    assert_eq!(
        err("%%MatrixMarket vector coordinate real general\n"),
        "t.mtx:1: unsupported object `vector`: only `matrix` is supported"
    );
}

#[test]
fn unknown_format() {
    assert_eq!(
        err("%%MatrixMarket matrix sparse real general\n"),
        "t.mtx:1: unknown format `sparse`: expected `coordinate` or `array`"
    );
}

#[test]
fn unknown_field() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate quaternion general\n"),
        "t.mtx:1: unknown field `quaternion`: expected `real`, `double`, `integer`, `pattern` or `complex`"
    );
}

#[test]
fn unknown_symmetry() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real upper\n"),
        "t.mtx:1: unknown symmetry `upper`: expected `general`, `symmetric`, `skew-symmetric` or `hermitian`"
    );
}

#[test]
fn complex_is_refused() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n"),
        "t.mtx:1: complex matrices are not supported (field `complex`)"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate complex hermitian\n"),
        "t.mtx:1: complex matrices are not supported (field `complex`)"
    );
}

#[test]
fn hermitian_is_refused() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real hermitian\n"),
        "t.mtx:1: hermitian matrices are not supported (symmetry `hermitian`)"
    );
}

#[test]
fn impossible_banner_combinations() {
    assert_eq!(
        err("%%MatrixMarket matrix array pattern general\n"),
        "t.mtx:1: a pattern matrix must use the `coordinate` format"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate pattern skew-symmetric\n"),
        "t.mtx:1: a pattern matrix cannot be skew-symmetric"
    );
}

#[test]
fn size_line_missing() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n% only a comment\n"),
        "t.mtx:2: missing size line: expected `rows cols entries`"
    );
    assert_eq!(
        err("%%MatrixMarket matrix array real general\n"),
        "t.mtx:1: missing size line: expected `rows cols`"
    );
}

#[test]
fn size_line_wrong_arity() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n3 3\n"),
        "t.mtx:2: size line must be `rows cols entries`, found 2 field(s)"
    );
    assert_eq!(
        err("%%MatrixMarket matrix array real general\n%\n3 3 9\n"),
        "t.mtx:3: size line must be `rows cols`, found 3 field(s)"
    );
}

#[test]
fn size_line_not_a_number() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n3 x 1\n"),
        "t.mtx:2: invalid cols `x` in the size line: expected a non-negative integer"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n3 3 -1\n"),
        "t.mtx:2: invalid entries `-1` in the size line: expected a non-negative integer"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n99999999999999999999999 1 1\n"),
        "t.mtx:2: invalid rows `99999999999999999999999` in the size line: expected a non-negative integer"
    );
}

#[test]
fn symmetric_matrix_must_be_square() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real symmetric\n2 3 0\n"),
        "t.mtx:2: a symmetric matrix must be square, got 2x3"
    );
}

#[test]
fn size_too_large_for_the_index_type() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n3000000000 1 0\n"),
        "t.mtx:2: size 3000000000 is too large: 3000000000 does not fit in an i32 index"
    );
}

#[test]
fn array_size_overflow() {
    assert_eq!(
        err("%%MatrixMarket matrix array real general\n18446744073709551615 2\n"),
        "t.mtx:2: size 18446744073709551615 is too large: 18446744073709551615 does not fit in an i32 index"
    );
    let e = parse_mtx::<f64, i64, _>(
        "%%MatrixMarket matrix array real general\n9223372036854775807 9223372036854775807\n".as_bytes(),
        Path::new("t.mtx"),
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "t.mtx:2: matrix size 9223372036854775807x9223372036854775807 overflows");
}

#[test]
fn huge_declared_count_does_not_preallocate() {
    // 10^18 entries declared, one given: must fail cleanly, not abort.
    let e = parse_mtx::<f64, i64, _>(
        "%%MatrixMarket matrix coordinate real symmetric\n4 4 1000000000000000000\n1 1 1\n".as_bytes(),
        Path::new("t.mtx"),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.mtx:3: unexpected end of file: expected 1000000000000000000 entries, found 1"
    );
}

#[test]
fn entry_with_too_few_fields() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1\n"),
        "t.mtx:3: expected `row col value`, found 2 field(s)"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1\n"),
        "t.mtx:3: expected `row col`, found 1 field(s)"
    );
}

#[test]
fn entry_with_too_many_fields() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1 0\n"),
        "t.mtx:3: too many fields: expected `row col value`, found 4"
    );
    assert_eq!(
        err("%%MatrixMarket matrix array real general\n1 1\n1 2\n"),
        "t.mtx:3: array entries hold one value per line, found 2 fields"
    );
}

#[test]
fn pattern_entry_with_a_value() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 2 1.0\n"),
        "t.mtx:3: pattern entries have no value: expected `row col`, found 3 fields"
    );
}

#[test]
fn non_numeric_index() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 1\na 1 1\n"),
        "t.mtx:3: invalid row index `a`: expected a positive integer"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1.0 1\n"),
        "t.mtx:3: invalid column index `1.0`: expected a positive integer"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 1\n-1 1 1\n"),
        "t.mtx:3: invalid row index `-1`: expected a positive integer"
    );
}

#[test]
fn non_numeric_value() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n2 2 one\n"),
        "t.mtx:4: invalid value `one`: expected a real number"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 1.5\n"),
        "t.mtx:3: invalid value `1.5`: expected an integer"
    );
    assert_eq!(
        err("%%MatrixMarket matrix array real general\n1 1\nx\n"),
        "t.mtx:3: invalid value `x`: expected a real number"
    );
    // A finite literal past f64's range is refused (it read as inf, and
    // `convert` wrote the inf out); an infinity written as one is a value.
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 -1e400\n"),
        "t.mtx:3: invalid value `-1e400`: past the range of f64"
    );
    let inf = parse("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 -inf\n").unwrap();
    assert_eq!(inf.val, [f64::NEG_INFINITY]);
}

#[test]
fn index_zero() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 1\n0 1 1\n"),
        "t.mtx:3: row index 0 is invalid: indices are 1-based"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 0 1\n"),
        "t.mtx:3: column index 0 is invalid: indices are 1-based"
    );
}

#[test]
fn index_beyond_the_declared_size() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 3 2\n1 1 1\n3 1 1\n"),
        "t.mtx:4: row index 3 is beyond the 2 rows declared on line 2"
    );
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n%\n2 3 1\n1 4 1\n"),
        "t.mtx:4: column index 4 is beyond the 3 columns declared on line 3"
    );
}

#[test]
fn fewer_entries_than_declared() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n2 2 1\n% trailing comment\n"),
        "t.mtx:5: unexpected end of file: expected 3 entries, found 2"
    );
    assert_eq!(
        err("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3"),
        "t.mtx:5: unexpected end of file: expected 4 entries, found 3"
    );
}

#[test]
fn more_entries_than_declared() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n\n2 2 1\n"),
        "t.mtx:5: more entries than the 1 declared on line 2"
    );
    assert_eq!(
        err("%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n3\n4\n"),
        "t.mtx:6: more entries than the 3 declared on line 2"
    );
}

#[test]
fn diagonal_in_skew_symmetric() {
    assert_eq!(
        err("%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 1\n2 2 1\n"),
        "t.mtx:4: skew-symmetric matrices have no diagonal entries, found (2, 2)"
    );
}

#[test]
fn invalid_utf8() {
    let mut bytes = b"%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 ".to_vec();
    bytes.extend([0xff, 0xfe, b'\n']);
    let e = parse_mtx::<f64, i32, _>(&bytes[..], Path::new("t.mtx")).unwrap_err();
    assert_eq!(e.to_string(), "t.mtx:3: line is not valid UTF-8");
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let path = temp_path("does-not-exist.mtx");
    let e = read_mtx::<f64, i32>(&path).unwrap_err();
    assert!(matches!(e, FormatError::Io { .. }));
    assert!(e.to_string().starts_with(&path.display().to_string()), "{e}");
}

// ---- writing -------------------------------------------------------------

fn tricky_values() -> Vec<(usize, usize, f64)> {
    vec![
        (0, 0, 0.1),
        (0, 2, 1.0 / 3.0),
        (1, 1, -2.5e17),
        (2, 0, 1e-300),
        (2, 2, f64::MAX),
        (1, 0, f64::MIN_POSITIVE),
        (0, 1, -0.0),
        (2, 1, 5e-324),
        (0, 0, 123456789.0),
    ]
}

#[test]
fn write_then_parse_is_exact() {
    let coo = Coo::<f64, i32>::from_triplets(3, 3, &tricky_values()).unwrap();
    let mut out = Vec::new();
    write_mtx_to(&coo, &mut out, Path::new("mem.mtx")).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("%%MatrixMarket matrix coordinate real general\n3 3 9\n1 1 0.1\n"), "{text}");
    let back = parse(&text).unwrap();
    assert_eq!(back.shape, coo.shape);
    assert_eq!(back.crd, coo.crd);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&back.val), bits(&coo.val));
}

#[test]
fn write_file_then_read_file() {
    let coo = Coo::<f32, i64>::from_triplets(2, 5, &[(1, 4, 0.1f32), (0, 0, -3.25), (1, 4, 1e-30)]).unwrap();
    let path = temp_path("round.mtx");
    write_mtx(&coo, &path).unwrap();
    let back = read_mtx::<f32, i64>(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(back, coo);
}

#[test]
fn writing_a_non_matrix_is_refused() {
    let coo = Coo::<f64, i32>::new(vec![2, 2, 2], vec![vec![1], vec![0], vec![1]], vec![1.0]).unwrap();
    let e = write_mtx_to(&coo, Vec::new(), Path::new("mem.mtx")).unwrap_err();
    assert_eq!(e.to_string(), "Matrix Market needs a tensor of order 2, got order 3");
}

proptest! {
    #[test]
    fn round_trip_random_matrices(
        rows in 1usize..20,
        cols in 1usize..20,
        entries in prop::collection::vec((0usize..1000, 0usize..1000, any::<f64>()), 0..40),
    ) {
        let entries: Vec<_> = entries.into_iter().map(|(i, j, v)| (i % rows, j % cols, v)).collect();
        let coo = Coo::<f64, i32>::from_triplets(rows, cols, &entries).unwrap();
        let mut out = Vec::new();
        write_mtx_to(&coo, &mut out, Path::new("mem.mtx")).unwrap();
        let back = parse_mtx::<f64, i32, _>(&out[..], Path::new("mem.mtx")).unwrap();
        prop_assert_eq!(&back.crd, &coo.crd);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // NaN payloads are not kept by text; everything else is bit-exact.
        let norm = |v: &[f64]| bits(v).into_iter().zip(v).map(|(b, x)| if x.is_nan() { 0 } else { b }).collect::<Vec<_>>();
        prop_assert_eq!(norm(&back.val), norm(&coo.val));
        prop_assert_eq!(back.val.iter().filter(|x| x.is_nan()).count(), coo.val.iter().filter(|x| x.is_nan()).count());
    }
}

fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "1",
        "2",
        "3",
        "0",
        "-1",
        "x",
        "1.5",
        "1e3",
        "nan",
        "%",
        "%%MatrixMarket",
        "matrix",
        "coordinate",
        "array",
        "real",
        "pattern",
        "integer",
        "symmetric",
        "skew-symmetric",
        "general",
        "18446744073709551615",
        "99999999999999999999999",
    ])
}

proptest! {
    /// Arbitrary token soup after a valid or invalid banner never panics.
    #[test]
    fn arbitrary_input_never_panics(
        banner in prop::sample::select(vec![
            "%%MatrixMarket matrix coordinate real general",
            "%%MatrixMarket matrix coordinate pattern symmetric",
            "%%MatrixMarket matrix coordinate integer skew-symmetric",
            "%%MatrixMarket matrix array real symmetric",
            "%%MatrixMarket matrix array real skew-symmetric",
            "%%MatrixMarket matrix array integer general",
            "",
        ]),
        lines in prop::collection::vec(prop::collection::vec(token(), 0..5), 0..12),
        bytes in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut text = format!("{banner}\n");
        for l in &lines {
            text.push_str(&l.join(" "));
            text.push('\n');
        }
        let _ = parse(&text);
        let _ = parse_mtx::<half::f16, i64, _>(text.as_bytes(), Path::new("t.mtx"));
        let _ = parse_mtx::<f64, i32, _>(&bytes[..], Path::new("t.mtx"));
    }
}
