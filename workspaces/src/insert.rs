//! Automatic workspace insertion (paper 001 §6.2), on plain data so any
//! loop nest can ask: the level path's lowering asks it with its loop order
//! and its output's levels.
//!
//! 1. [`input_order`] reconstructs the loop order over the statement's own
//!    index variables from a scheduled order, undoing `split`, `fuse` and
//!    `pos` in the inverse order they were applied.
//! 2. [`decide`] compares it with the output's storage order: no workspace
//!    when the output takes random inserts, or when the loops visit its
//!    coordinates in its order with no sum between them; otherwise the
//!    output levels from the first one that cannot be appended to directly
//!    (common iteration hoisting keeps the ones above as shared outer
//!    loops) are gathered in a workspace. One level after a sum is the
//!    dense-workspace case; anything else a sparse workspace whose
//!    `ow_order` maps its insertion order to the output's.
//!
//! The example of Fig. 11–13: `A[j,i] = B[i,k] * C[k,j]` scheduled as
//! `fuse(i,k,f)`, `pos(f,fp,B)`, `split(fp,f0,f1)`, loops `f0, f1, j`,
//! with A in DCSR over (j, i):
//!
//! ```
//! use spindle_workspaces::insert::{Ability, Decision, OutputLevel, Relation, decide, input_order};
//!
//! let relations = [
//!     Relation::fuse("i", "k", "f"),
//!     Relation::pos("f", "fp"),
//!     Relation::split("fp", "f0", "f1"),
//! ];
//! let order = input_order(&["f0", "f1", "j"], &relations, &|v| v == "k").unwrap();
//! assert_eq!(order, ["i", "k", "j"]);
//! let output = [OutputLevel::new("j", Ability::Append), OutputLevel::new("i", Ability::Append)];
//! let decision = decide(&order, &output, &|_| true);
//! assert_eq!(
//!     decision,
//!     Decision::Sparse { hoisted: 0, order: vec!["i".into(), "j".into()], ow_order: vec![1, 0] }
//! );
//! ```

use std::fmt;

/// A scheduling relation between index variables, as TACO's `split`,
/// `fuse` and `pos` record them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Relation {
    /// `var` split into `outer` and `inner` loops.
    Split { var: String, outer: String, inner: String },
    /// Consecutive loops `outer` and `inner` fused into `fused`.
    Fuse { outer: String, inner: String, fused: String },
    /// `var`'s coordinate loop turned into a loop `pos` over an operand's
    /// positions.
    Pos { var: String, pos: String },
}

impl Relation {
    pub fn split(var: &str, outer: &str, inner: &str) -> Relation {
        Relation::Split { var: var.into(), outer: outer.into(), inner: inner.into() }
    }

    pub fn fuse(outer: &str, inner: &str, fused: &str) -> Relation {
        Relation::Fuse { outer: outer.into(), inner: inner.into(), fused: fused.into() }
    }

    pub fn pos(var: &str, pos: &str) -> Relation {
        Relation::Pos { var: var.into(), pos: pos.into() }
    }
}

/// Why a loop order could not be reconstructed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsertError(pub String);

impl fmt::Display for InsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InsertError {}

/// The loop order over the original index variables, from the scheduled
/// `loops` and the `relations` that made them (in the order applied).
///
/// Undoing a split keeps one of its two loops: the outer one when `var` is
/// reduced (`is_reduction`), since the sum starts there; the inner one
/// otherwise, so the outer loops stay shared with the output. A `pos` loop
/// stands for its variable, and a fused loop for its two variables in
/// order.
pub fn input_order(
    loops: &[&str],
    relations: &[Relation],
    is_reduction: &dyn Fn(&str) -> bool,
) -> Result<Vec<String>, InsertError> {
    let mut order: Vec<String> = loops.iter().map(|s| s.to_string()).collect();
    let at = |order: &[String], v: &str| {
        order
            .iter()
            .position(|o| o == v)
            .ok_or_else(|| InsertError(format!("`{v}` is not a loop of the order {}", order.join(", "))))
    };
    for r in relations.iter().rev() {
        match r {
            Relation::Split { var, outer, inner } => {
                let (o, i) = (at(&order, outer)?, at(&order, inner)?);
                let (keep, drop) = match (is_reduction(var), o < i) {
                    (true, true) | (false, false) => (o, i),
                    (true, false) | (false, true) => (i, o),
                };
                order[keep] = var.clone();
                order.remove(drop);
            }
            Relation::Pos { var, pos } => {
                let p = at(&order, pos)?;
                order[p] = var.clone();
            }
            Relation::Fuse { outer, inner, fused } => {
                let f = at(&order, fused)?;
                order.splice(f..=f, [outer.clone(), inner.clone()]);
            }
        }
    }
    Ok(order)
}

/// What an output level can take without a workspace (the abilities of
/// Ahrens et al., as the paper measures them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ability {
    /// Random inserts and lookups: a dense level (which lends it to its
    /// parents only where every level below it is dense too).
    Insert,
    /// Appends in coordinate order, each coordinate once: compressed and
    /// singleton levels.
    Append,
}

/// A level of the output, in storage order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputLevel {
    /// The index variable whose coordinate the level stores.
    pub var: String,
    pub ability: Ability,
}

impl OutputLevel {
    pub fn new(var: &str, ability: Ability) -> OutputLevel {
        OutputLevel { var: var.into(), ability }
    }
}

/// Where and what workspace an output needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The loops assemble the output directly.
    None,
    /// A dense workspace over the last output level, below the `hoisted`
    /// output levels' loops (shared outer loops), gathered across a sum.
    Dense { hoisted: usize },
    /// A sparse workspace over the output levels below the `hoisted` ones:
    /// filled in `order` (their variables in loop order), read back in the
    /// output's, `order[i] == output[hoisted + ow_order[i]]`.
    Sparse { hoisted: usize, order: Vec<String>, ow_order: Vec<usize> },
}

/// Decides the workspace of an output stored in `output`'s levels, filled
/// by loops in `order` (original variables, outermost first; the ones not
/// in `output` are summed). `in_order(v)` says whether the loop of `v`
/// visits its coordinates in increasing order, each once (a dense loop, or
/// a walk of an ordered, unique level): only such a loop can append to a
/// level directly.
pub fn decide(order: &[String], output: &[OutputLevel], in_order: &dyn Fn(&str) -> bool) -> Decision {
    if output.iter().all(|l| l.ability == Ability::Insert) {
        return Decision::None;
    }
    // Common iteration hoisting: leading loops that are the output's
    // leading levels, in its order, and can append to them. A level takes
    // random inserts only where every level below does too: above an
    // appended level, its children are appended.
    let inserts = |l: usize| output[l..].iter().all(|b| b.ability == Ability::Insert);
    let hoisted = order
        .iter()
        .zip(output)
        .enumerate()
        .take_while(|(l, (v, level))| **v == level.var && (inserts(*l) || in_order(v)))
        .count();
    if hoisted == output.len() {
        return Decision::None;
    }
    let gathered: Vec<&str> = output[hoisted..].iter().map(|l| l.var.as_str()).collect();
    let rest = &order[hoisted..];
    // The dense special case: one level left, its loop after a sum and the
    // last loop, visiting in order.
    let summed_before =
        |v: &str| rest.iter().take_while(|o| *o != v).any(|o| !output.iter().any(|l| &l.var == o));
    if let [last] = gathered[..]
        && rest.last().is_some_and(|o| o == last)
        && summed_before(last)
        && in_order(last)
    {
        return Decision::Dense { hoisted };
    }
    let filled: Vec<String> = rest.iter().filter(|v| gathered.contains(&v.as_str())).cloned().collect();
    let ow_order = filled.iter().map(|v| gathered.iter().position(|g| g == v).expect("gathered")).collect();
    Decision::Sparse { hoisted, order: filled, ow_order }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn levels(spec: &[(&str, Ability)]) -> Vec<OutputLevel> {
        spec.iter().map(|(v, a)| OutputLevel::new(v, *a)).collect()
    }

    use Ability::{Append, Insert};

    #[test]
    fn split_keeps_the_outer_loop_of_a_sum_and_the_inner_loop_otherwise() {
        let sum = input_order(&["i", "k0", "k1", "j"], &[Relation::split("k", "k0", "k1")], &|v| v == "k");
        assert_eq!(sum.unwrap(), ["i", "k", "j"]);
        // An output variable split around another loop keeps its inner
        // position, where its coordinates are complete.
        let free = input_order(&["i0", "k", "i1"], &[Relation::split("i", "i0", "i1")], &|v| v == "k");
        assert_eq!(free.unwrap(), ["k", "i"]);
        let sum_around = input_order(&["k0", "i", "k1"], &[Relation::split("k", "k0", "k1")], &|v| v == "k");
        assert_eq!(sum_around.unwrap(), ["k", "i"]);
    }

    #[test]
    fn pos_stands_for_its_variable_and_fuse_for_both() {
        assert_eq!(input_order(&["ip", "j"], &[Relation::pos("i", "ip")], &|_| false).unwrap(), ["i", "j"]);
        assert_eq!(
            input_order(&["f", "j"], &[Relation::fuse("i", "k", "f")], &|_| false).unwrap(),
            ["i", "k", "j"]
        );
    }

    #[test]
    fn figure_11_reconstructs_through_split_pos_and_fuse() {
        let relations =
            [Relation::fuse("i", "k", "f"), Relation::pos("f", "fpos"), Relation::split("fpos", "f0", "f1")];
        let order = input_order(&["f0", "f1", "j"], &relations, &|v| v == "k").unwrap();
        assert_eq!(order, ["i", "k", "j"]);
    }

    #[test]
    fn unknown_loops_are_errors() {
        let err = input_order(&["i"], &[Relation::pos("j", "jp")], &|_| false).unwrap_err();
        assert!(err.to_string().contains("`jp` is not a loop"), "{err}");
    }

    #[test]
    fn figure_12_transposed_spgemm_takes_a_second_order_workspace_with_ow_order_1_0() {
        let d = decide(&strings(&["i", "k", "j"]), &levels(&[("j", Append), ("i", Append)]), &|_| true);
        assert_eq!(d, Decision::Sparse { hoisted: 0, order: strings(&["i", "j"]), ow_order: vec![1, 0] });
    }

    #[test]
    fn an_output_of_dense_levels_needs_no_workspace_even_when_discordant() {
        let d = decide(&strings(&["i", "k", "j"]), &levels(&[("j", Insert), ("i", Insert)]), &|_| true);
        assert_eq!(d, Decision::None);
    }

    #[test]
    fn a_concordant_order_without_a_sum_between_levels_assembles_directly() {
        // C = A + B in CSR, order i, j; and the inner product order i, j, k.
        let csr = levels(&[("i", Insert), ("j", Append)]);
        assert_eq!(decide(&strings(&["i", "j"]), &csr, &|_| true), Decision::None);
        assert_eq!(decide(&strings(&["i", "j", "k"]), &csr, &|_| true), Decision::None);
    }

    #[test]
    fn row_wise_spgemm_is_the_dense_workspace_case() {
        // The sum k sits between i (hoisted) and j, the one level left.
        let csr = levels(&[("i", Insert), ("j", Append)]);
        assert_eq!(decide(&strings(&["i", "k", "j"]), &csr, &|_| true), Decision::Dense { hoisted: 1 });
        let dcsr = levels(&[("i", Append), ("j", Append)]);
        assert_eq!(decide(&strings(&["i", "k", "j"]), &dcsr, &|_| true), Decision::Dense { hoisted: 1 });
    }

    #[test]
    fn outer_product_spgemm_is_not_the_dense_case_two_levels_follow_the_sum() {
        let csr = levels(&[("i", Insert), ("j", Append)]);
        let d = decide(&strings(&["k", "i", "j"]), &csr, &|_| true);
        assert_eq!(d, Decision::Sparse { hoisted: 0, order: strings(&["i", "j"]), ow_order: vec![0, 1] });
    }

    #[test]
    fn common_iteration_hoisting_keeps_matching_leading_loops_outside() {
        // SpTTM-I, A[k,j,l] = B[k,i,j] * C[i,l]: k is shared, (j, l) gathered.
        let out = levels(&[("k", Append), ("j", Append), ("l", Append)]);
        let d = decide(&strings(&["k", "i", "j", "l"]), &out, &|_| true);
        assert_eq!(d, Decision::Sparse { hoisted: 1, order: strings(&["j", "l"]), ow_order: vec![0, 1] });
        // A tensor addition into a discordant order hoists nothing past the
        // first mismatch.
        let out = levels(&[("i", Insert), ("k", Append), ("j", Append)]);
        let d = decide(&strings(&["i", "j", "k"]), &out, &|_| true);
        assert_eq!(d, Decision::Sparse { hoisted: 1, order: strings(&["j", "k"]), ow_order: vec![1, 0] });
    }

    #[test]
    fn a_level_is_hoisted_only_where_its_loop_can_append_to_it() {
        // Rows walked from COO repeat: the output's compressed first level
        // cannot be appended to by that walk, so it joins the workspace.
        let out = levels(&[("i", Append), ("j", Append)]);
        let d = decide(&strings(&["i", "j"]), &out, &|v| v != "i");
        assert_eq!(d, Decision::Sparse { hoisted: 0, order: strings(&["i", "j"]), ow_order: vec![0, 1] });
        // A dense level above a compressed one appends its children: the
        // same walk gathers both (CSR's rows from COO).
        let out = levels(&[("i", Insert), ("j", Append)]);
        let d = decide(&strings(&["i", "j"]), &out, &|v| v != "i");
        assert_eq!(d, Decision::Sparse { hoisted: 0, order: strings(&["i", "j"]), ow_order: vec![0, 1] });
        // Dense all the way down takes any walk.
        let out = levels(&[("i", Insert), ("j", Insert)]);
        assert_eq!(decide(&strings(&["i", "j"]), &out, &|v| v != "i"), Decision::None);
    }

    #[test]
    fn a_sum_above_a_level_that_is_not_last_is_the_sparse_case() {
        // SpMTTKRP, A[i,j] = B[k,l,i] * C[k,j] * D[l,j], order k, l, i, j.
        let out = levels(&[("i", Append), ("j", Append)]);
        let d = decide(&strings(&["k", "l", "i", "j"]), &out, &|_| true);
        assert_eq!(d, Decision::Sparse { hoisted: 0, order: strings(&["i", "j"]), ow_order: vec![0, 1] });
    }

    #[test]
    fn the_dense_case_needs_the_gathered_loop_last_and_in_order() {
        // The last level's loop walks unordered coordinates: sort them.
        let csr = levels(&[("i", Insert), ("j", Append)]);
        let d = decide(&strings(&["i", "k", "j"]), &csr, &|v| v != "j");
        assert_eq!(d, Decision::Sparse { hoisted: 1, order: strings(&["j"]), ow_order: vec![0] });
        // A sum after the gathered level: still one level, gathered across
        // the sum around it.
        let d = decide(&strings(&["i", "k", "j", "m"]), &csr, &|_| true);
        assert_eq!(d, Decision::Sparse { hoisted: 1, order: strings(&["j"]), ow_order: vec![0] });
    }
}
