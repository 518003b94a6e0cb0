//! Parser and checker fuzzing: any string gives a statement or a
//! diagnostic, never a panic; statements print back to themselves.

use proptest::prelude::*;
use spindle_ir::lang::{Declaration, Declarations, ElemType, check, parse};

/// Fragments of the language, so random strings often get deep into the
/// grammar rather than failing at the first character.
fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "A", "B", "C", "X", "i", "j", "k", "p", "[", "]", "(", ")", ",", "+", "-", "*", "/", "=", "+=",
        "max=", "min=", "max", "exp", "relu", "<", ":", "f16", "i32", "where", "0", "1", "2", "3", "2.5",
        "1e3", " ",
    ])
}

fn declarations() -> Declarations {
    let value =
        |shape: &[usize]| Declaration { shape: shape.to_vec(), dtype: ElemType::parse("f32").unwrap() };
    let index =
        |shape: &[usize]| Declaration { shape: shape.to_vec(), dtype: ElemType::parse("i32").unwrap() };
    [("A", value(&[3, 4])), ("B", value(&[4])), ("C", value(&[3, 4])), ("X", index(&[4]))]
        .into_iter()
        .map(|(n, d)| (n.to_string(), d))
        .collect()
}

fn exercise(src: &str) {
    match parse(src) {
        Ok(statement) => {
            let printed = statement.to_string();
            let again =
                parse(&printed).unwrap_or_else(|d| panic!("{printed:?} (from {src:?}) does not parse: {d}"));
            assert_eq!(again.to_string(), printed, "printing is not stable for {src:?}");
            if let Err(d) = check(&statement, &declarations()) {
                let _ = d.render(src, false);
            }
        }
        Err(d) => {
            assert!(d.span.start <= d.span.end && d.span.end <= src.len(), "{d:?} outside {src:?}");
            let _ = d.render(src, false);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(token(), 0..30)) {
        exercise(&tokens.concat());
    }

    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,40}") {
        exercise(&src);
    }
}

#[test]
fn multibyte_text_is_reported_on_character_boundaries() {
    for src in ["C[i] = A[i] é", "é", "C[ü] = A[i]", "C[i] = A[i] where i < 3, ∑"] {
        let d = parse(src).unwrap_err();
        assert!(src.is_char_boundary(d.span.start) && src.is_char_boundary(d.span.end), "{src}");
        let _ = d.render(src, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn literals_print_back_exactly(x in 0.0f64..1e300, small in 0.0f64..1e-3) {
        for value in [x, small, x.round()] {
            let statement = parse(&format!("C[i] = {value:e}")).unwrap();
            let again = parse(&statement.to_string()).unwrap();
            let spindle_ir::lang::Expr::Literal { value: read, .. } = again.rhs else { panic!("{again}") };
            prop_assert_eq!(read, value, "{}", statement);
        }
    }
}
