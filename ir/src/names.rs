//! Fresh names for what lowering adds beside the user's tensors and
//! indices (a format's arrays, a rewrite's position indices, a second
//! read's alias).

/// `base` if `is_free` says so, else the first free of `base{sep}2`,
/// `base{sep}3`, ...
pub fn first_free(base: &str, sep: &str, is_free: impl Fn(&str) -> bool) -> String {
    std::iter::once(base.to_string())
        .chain((2..).map(|k| format!("{base}{sep}{k}")))
        .find(|n| is_free(n))
        .expect("finitely many names are taken")
}

#[cfg(test)]
mod tests {
    use super::first_free;

    #[test]
    fn numbers_past_the_taken_names() {
        let taken = ["A_val", "A_val_2"];
        assert_eq!(first_free("A_val", "_", |n| !taken.contains(&n)), "A_val_3");
        assert_eq!(first_free("A_crd", "_", |n| !taken.contains(&n)), "A_crd");
        assert_eq!(first_free("p", "", |n| n != "p"), "p2");
    }
}
