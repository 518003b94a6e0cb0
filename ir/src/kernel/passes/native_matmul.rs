//! Native matmul (Insum §5.2): a sum over `r` of a product whose factors
//! vary over `r` becomes a `dot` of two tiles, (Y, R) × (R, X), batched over
//! the axes both share. Loads are ordinary operands, so the pattern fires
//! through gathers, and scatters consume its result: gather → dot → scatter
//! stays one kernel. Factors that do not vary over `r` are multiplied in
//! after the dot — or, when they vary over no reduced axis at all, once
//! on the accumulator after the loop.

use super::{insert_after, replace_uses};
use crate::kernel::{BinaryOp, Kernel, Op, Phase, Reduction, Scalar, Value, ValueId};

pub fn run(kernel: &mut Kernel) {
    let sums: Vec<ValueId> = kernel
        .order
        .iter()
        .copied()
        .filter(|&id| matches!(kernel.value(id).op, Op::Reduce { reduction: Reduction::Sum, .. }))
        .collect();
    for id in sums {
        let Op::Reduce { value, axis, mask, .. } = kernel.value(id).op else { unreachable!() };
        let mut factors = Vec::new();
        collect_factors(kernel, value, &mut factors);
        let (with, without): (Vec<ValueId>, Vec<ValueId>) =
            factors.into_iter().partition(|&f| kernel.value(f).shape.contains(&axis));
        if with.len() < 2 {
            continue;
        }
        // Chain the factors: all but the last form one operand.
        let mut anchor = id;
        let mut a = with[0];
        for &f in &with[1..with.len() - 1] {
            a = product(kernel, &mut anchor, a, f);
        }
        let b = with[with.len() - 1];
        let mut shape: Vec<_> = kernel
            .value(a)
            .shape
            .iter()
            .chain(&kernel.value(b).shape)
            .copied()
            .filter(|&x| x != axis)
            .collect();
        shape.sort();
        shape.dedup();
        let dot = Value { op: Op::Dot { a, b, axis, mask }, shape, scalar: Scalar::Float };
        let mut result = insert_after(kernel, anchor, dot);
        if hoist_after_loop(kernel, id, &without) {
            // The dot alone is summed over the loop; the factors that vary
            // over no reduced axis multiply the accumulator once, after it.
            let acc = kernel.order.iter().copied().find(|&v| kernel.value(v).op == Op::Accumulator);
            if let (Some(acc), Some(accumulate)) = (acc, kernel.accumulate.as_mut()) {
                accumulate.partial = result;
                let mut anchor = acc;
                let mut scaled = acc;
                for &f in &without {
                    scaled = product(kernel, &mut anchor, f, scaled);
                }
                replace_after(kernel, acc, scaled);
                recompute_accumulator(kernel);
                continue;
            }
        }
        anchor = result;
        for &f in &without {
            result = product(kernel, &mut anchor, f, result);
        }
        replace_uses(kernel, id, result);
    }
    kernel.compact();
}

/// Whether the factors `without` of the sum `id` can multiply the
/// accumulator after the loop instead of every partial: `id` is what the
/// accumulator sums, and each of them is made before the loop. A factor
/// made inside it can vary over no reduced axis and still be one loop
/// step's value: in `(A[i,j] * x[j]) * (A[i,k] * x[k])` the dot over `k`
/// is one `k` tile's partial sum, which the epilogue cannot read.
fn hoist_after_loop(kernel: &Kernel, id: ValueId, without: &[ValueId]) -> bool {
    let Some(acc) = &kernel.accumulate else { return false };
    let phases = kernel.phases();
    acc.partial == id
        && acc.reduction == Reduction::Sum
        && !without.is_empty()
        && without.iter().all(|&f| phases[f] == Phase::Program)
}

/// Makes the sink read `new` where it read `old` (the accumulator value),
/// leaving `new`'s own operands alone.
fn replace_after(kernel: &mut Kernel, old: ValueId, new: ValueId) {
    for v in kernel.sink.operands_mut() {
        if *v == old {
            *v = new;
        }
    }
}

/// The accumulator's shape follows its (new) partial.
fn recompute_accumulator(kernel: &mut Kernel) {
    let Some(acc) = &mut kernel.accumulate else { return };
    acc.shape = kernel.values[acc.partial].shape.clone();
    for v in kernel.values.values_mut() {
        if v.op == Op::Accumulator {
            v.shape = acc.shape.clone();
        }
    }
    super::recompute_shapes(kernel);
}

/// The factors of a product tree.
fn collect_factors(kernel: &Kernel, id: ValueId, out: &mut Vec<ValueId>) {
    match kernel.value(id).op {
        Op::Binary(BinaryOp::Mul, a, b) if kernel.value(id).scalar == Scalar::Float => {
            collect_factors(kernel, a, out);
            collect_factors(kernel, b, out);
        }
        _ => out.push(id),
    }
}

/// `a * b`, placed after `anchor` (which then moves to it).
fn product(kernel: &mut Kernel, anchor: &mut ValueId, a: ValueId, b: ValueId) -> ValueId {
    let mut shape: Vec<_> = kernel.value(a).shape.iter().chain(&kernel.value(b).shape).copied().collect();
    shape.sort();
    shape.dedup();
    let v = Value { op: Op::Binary(BinaryOp::Mul, a, b), shape, scalar: Scalar::Float };
    *anchor = insert_after(kernel, *anchor, v);
    *anchor
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::lower::lower_only;
    use crate::kernel::{Phase, Sink};
    use crate::lang::{Declarations, check, parse};

    fn decls(list: &[(&str, &[usize], &str)]) -> Declarations {
        crate::lang::einsum::declarations(list)
    }

    /// `statement` lowered with lazy shapes and no passes.
    fn lowered(statement: &str, d: &Declarations) -> Kernel {
        let e = check(&parse(statement).unwrap(), d).unwrap();
        lower_only(&e, &"matmul=off".parse().unwrap(), "k").unwrap()
    }

    fn count(k: &Kernel, pred: impl Fn(&Op) -> bool) -> usize {
        k.order.iter().filter(|&&id| pred(&k.value(id).op)).count()
    }

    fn dots(k: &Kernel) -> Vec<ValueId> {
        k.order.iter().copied().filter(|&id| matches!(k.value(id).op, Op::Dot { .. })).collect()
    }

    fn sums(k: &Kernel) -> usize {
        count(k, |op| matches!(op, Op::Reduce { reduction: Reduction::Sum, .. }))
    }

    fn load_name(k: &Kernel, id: ValueId) -> Option<&str> {
        match k.value(id).op {
            Op::Load { tensor, .. } => Some(k.tensor(tensor).name.as_str()),
            _ => None,
        }
    }

    fn shape_names(k: &Kernel, id: ValueId) -> Vec<&str> {
        k.value(id).shape.iter().map(|&a| k.axis(a).name.as_str()).collect()
    }

    #[test]
    fn dot_fires_through_a_gather_and_a_scatter() {
        let d = decls(&[
            ("C", &[15, 10], "f32"),
            ("A", &[20, 30], "f32"),
            ("B", &[12, 10], "f32"),
            ("E", &[12], "i32"),
            ("D", &[20], "i32"),
        ]);
        let mut k = lowered("C[D[y],x] += A[y,E[r]] * B[r,x]", &d);
        assert_eq!(sums(&k), 1, "{k}");
        // The IR before and after is `ir/tests/passes/native_matmul/gather_dot_scatter.ir`.
        run(&mut k);

        assert_eq!(sums(&k), 0, "{k}");
        let dots = dots(&k);
        assert_eq!(dots.len(), 1, "{k}");
        let Op::Dot { a, b, axis, .. } = k.value(dots[0]).op else { unreachable!() };
        assert_eq!(k.axis(axis).name, "r");
        // A is gathered through E inside the dot's operand.
        assert_eq!(load_name(&k, a), Some("A"));
        let Op::Load { index, .. } = &k.value(a).op else { unreachable!() };
        assert_eq!(load_name(&k, index[1]), Some("E"));
        assert_eq!(load_name(&k, b), Some("B"));
        assert_eq!((shape_names(&k, a), shape_names(&k, b)), (vec!["y", "r"], vec!["x", "r"]));
        assert_eq!(shape_names(&k, dots[0]), ["y", "x"]);
        // The dot is the loop's partial; the scatter through D stays in
        // the same kernel and is atomic (rows of C collide).
        assert_eq!(k.accumulate.as_ref().unwrap().partial, dots[0]);
        assert_eq!(k.phases()[dots[0]], Phase::Loop);
        let Sink { index, exclusive, .. } = &k.sink;
        assert!(!exclusive, "{k}");
        assert_eq!(load_name(&k, index[0]), Some("D"));
    }

    #[test]
    fn groupcoo_spmm_is_a_batched_dot_over_the_group() {
        let d = decls(&[
            ("C", &[96, 24], "f32"),
            ("A_grp", &[40], "i32"),
            ("A_val", &[40, 4], "f32"),
            ("A_crd", &[40, 4], "i32"),
            ("B", &[80, 24], "f32"),
        ]);
        let mut k = lowered("C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]", &d);
        // The IR before and after is `ir/tests/passes/native_matmul/groupcoo_spmm.ir`.
        run(&mut k);

        assert_eq!(sums(&k), 0, "{k}");
        let dots = dots(&k);
        assert_eq!(dots.len(), 1, "{k}");
        let Op::Dot { a, b, axis, .. } = k.value(dots[0]).op else { unreachable!() };
        assert_eq!(k.axis(axis).name, "q");
        assert_eq!(load_name(&k, a), Some("A_val"));
        assert_eq!(load_name(&k, b), Some("B"));
        // B's rows are gathered through A_crd; both operands carry p, so
        // the dot is batched over the groups: (1 x q) . (q x n) per p.
        let Op::Load { index, .. } = &k.value(b).op else { unreachable!() };
        assert_eq!(load_name(&k, index[0]), Some("A_crd"));
        assert_eq!((shape_names(&k, a), shape_names(&k, b)), (vec!["p", "q"], vec!["p", "n", "q"]));
        assert_eq!(shape_names(&k, dots[0]), ["p", "n"]);
        let Sink { index, exclusive, .. } = &k.sink;
        assert!(!exclusive, "{k}");
        assert_eq!(load_name(&k, index[0]), Some("A_grp"));
    }

    #[test]
    fn a_sum_of_non_products_is_left_alone() {
        let d = decls(&[("y", &[10], "f32"), ("A", &[10, 12], "f32"), ("x", &[12], "f32")]);
        let mut k = lowered("y[i] += exp(A[i,k]) + x[k]", &d);
        let before = k.clone();
        run(&mut k);
        assert_eq!(k, before, "{k}");
        assert_eq!(sums(&k), 1);
        assert!(dots(&k).is_empty());
    }

    #[test]
    fn a_product_with_one_factor_over_the_axis_is_left_alone() {
        // Only A varies over k: there is no second operand for a dot.
        let d = decls(&[("y", &[10], "f32"), ("A", &[10, 12], "f32"), ("s", &[10], "f32")]);
        let mut k = lowered("y[i] += A[i,k] * s[i]", &d);
        let before = k.clone();
        run(&mut k);
        assert_eq!(k, before, "{k}");
        assert!(dots(&k).is_empty());
    }
}
