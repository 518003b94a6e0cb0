//! Native matmul (Insum §5.2): a sum over `r` of a product whose factors
//! vary over `r` becomes a `dot` of two tiles, (Y, R) × (R, X), batched over
//! the axes both share. Loads are ordinary operands, so the pattern fires
//! through gathers, and scatters consume its result: gather → dot → scatter
//! stays one kernel. Factors that do not vary over `r` are multiplied in
//! after the dot.

use super::{insert_after, replace_uses};
use crate::kernel::{BinaryOp, Kernel, Op, Reduction, Scalar, Value, ValueId};

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
        anchor = result;
        for &f in &without {
            result = product(kernel, &mut anchor, f, result);
        }
        replace_uses(kernel, id, result);
    }
    kernel.compact();
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
