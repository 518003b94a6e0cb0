//! Lazy broadcasting (Insum §5.2.3): every value keeps the smallest shape it
//! depends on, and is broadcast only where it is used. Eager lowering gives
//! each range every axis up front (TorchInductor's default); this pass
//! removes those broadcasts and shrinks every shape, so a 1-D index tile
//! such as `E[r]` is loaded once per r-tile and `dot` operands keep the
//! layout a matrix unit wants.

use super::{insert_after, recompute_shapes, replace_uses};
use crate::kernel::{BinaryOp, Kernel, Op, Scalar, Value, ValueId};

pub fn run(kernel: &mut Kernel) {
    let eager: Vec<_> = kernel
        .order
        .iter()
        .copied()
        .filter(|&id| matches!(kernel.value(id).op, Op::Broadcast { value } if matches!(kernel.value(value).op, Op::Range(_))))
        .collect();
    for id in eager {
        let Op::Broadcast { value } = kernel.value(id).op else { unreachable!() };
        replace_uses(kernel, id, value);
    }
    kernel.compact();
    recompute_shapes(kernel);
    shrink_load_masks(kernel);
    recompute_shapes(kernel);
}

/// An eager load's mask is the conjunction of every axis's mask; keep only
/// the conjuncts over the axes its index tiles vary over. The others are
/// applied where they matter: the reductions mask reduced axes and the sink
/// masks parallel ones.
fn shrink_load_masks(kernel: &mut Kernel) {
    for id in kernel.order.clone() {
        let Op::Load { index, mask: Some(mask), .. } = kernel.value(id).op.clone() else { continue };
        let mut target: Vec<_> = index.iter().flat_map(|&i| kernel.value(i).shape.clone()).collect();
        target.sort();
        target.dedup();
        let within = |kernel: &Kernel, v: ValueId| kernel.value(v).shape.iter().all(|a| target.contains(a));
        if within(kernel, mask) {
            continue;
        }
        let mut leaves = Vec::new();
        kernel.conjuncts(mask, &mut leaves);
        let kept: Vec<ValueId> = leaves.into_iter().filter(|&l| within(kernel, l)).collect();
        let mut new_mask = None;
        let mut anchor = mask;
        for leaf in kept {
            new_mask = Some(match new_mask {
                None => leaf,
                Some(m) => {
                    let mut shape: Vec<_> =
                        kernel.value(m).shape.iter().chain(&kernel.value(leaf).shape).copied().collect();
                    shape.sort();
                    shape.dedup();
                    let and = Value { op: Op::Binary(BinaryOp::And, m, leaf), shape, scalar: Scalar::Bool };
                    anchor = insert_after(kernel, anchor, and);
                    anchor
                }
            });
        }
        if let Op::Load { mask, .. } = &mut kernel.values[id].op {
            *mask = new_mask;
        }
        // Later loads index with this one: their targets shrink too.
        recompute_shapes(kernel);
    }
    kernel.compact();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::lower::lower_only;
    use crate::kernel::{Phase, ValueId};
    use crate::lang::{Declarations, Einsum, check, parse};

    fn decls(list: &[(&str, &[usize], &str)]) -> Declarations {
        crate::lang::einsum::declarations(list)
    }

    /// The Insum running example: gather through E, scatter through D.
    fn gather_dot_scatter() -> Einsum {
        let d = decls(&[
            ("C", &[15, 10], "f32"),
            ("A", &[20, 30], "f32"),
            ("B", &[12, 10], "f32"),
            ("E", &[12], "i32"),
            ("D", &[20], "i32"),
        ]);
        check(&parse("C[D[y],x] += A[y,E[r]] * B[r,x]").unwrap(), &d).unwrap()
    }

    /// Lowered under eager broadcasting, with no passes.
    fn eager(e: &Einsum) -> Kernel {
        lower_only(e, &"broadcast=eager matmul=off".parse().unwrap(), "k").unwrap()
    }

    /// The one load of `tensor`.
    fn load_of(k: &Kernel, tensor: &str) -> ValueId {
        let loads: Vec<ValueId> = k
            .order
            .iter()
            .copied()
            .filter(|&id| matches!(k.value(id).op, Op::Load { tensor: t, .. } if k.tensor(t).name == tensor))
            .collect();
        assert_eq!(loads.len(), 1, "loads of {tensor} in\n{k}");
        loads[0]
    }

    fn shape_names(k: &Kernel, id: ValueId) -> Vec<&str> {
        k.value(id).shape.iter().map(|&a| k.axis(a).name.as_str()).collect()
    }

    fn range_broadcasts(k: &Kernel) -> usize {
        k.order
            .iter()
            .filter(|&&id| {
                matches!(k.value(id).op, Op::Broadcast { value } if matches!(k.value(value).op, Op::Range(_)))
            })
            .count()
    }

    #[test]
    fn eager_broadcasts_of_ranges_are_removed() {
        // The IR before and after is `ir/tests/passes/lazy_broadcast/gather_dot_scatter.ir`.
        let mut k = eager(&gather_dot_scatter());
        // Eager: every range is broadcast, so E[r] varies over every axis.
        assert_eq!(range_broadcasts(&k), 3, "{k}");
        assert_eq!(shape_names(&k, load_of(&k, "E")), ["y", "x", "r"]);
        assert_eq!(shape_names(&k, load_of(&k, "D")), ["y", "x"]);

        run(&mut k);
        let after = k.to_string();

        assert_eq!(range_broadcasts(&k), 0, "{after}");
        assert!(!k.order.iter().any(|&id| matches!(k.value(id).op, Op::Broadcast { .. })), "{after}");
        // Every range is back to its own axis.
        for &id in &k.order {
            if let Op::Range(axis) = k.value(id).op {
                assert_eq!(k.value(id).shape, [axis], "{after}");
            }
        }
        let phases = k.phases();
        let (e, d) = (load_of(&k, "E"), load_of(&k, "D"));
        assert_eq!(phases[e], Phase::Loop);
        assert_eq!(phases[d], Phase::Program);
        // The gathers index with the plain ranges now.
        let Op::Load { index, .. } = &k.value(load_of(&k, "A")).op else { unreachable!() };
        assert!(matches!(k.value(index[0]).op, Op::Range(_)), "{after}");
        assert_eq!(index[1], e);
    }

    /// The property the pass exists for: from eager IR it reaches the
    /// minimal shapes, the same lazy lowering gives directly (the eager
    /// masks, conjunctions over every axis, are cut down to the axes each
    /// load's index varies over).
    #[test]
    fn index_tiles_reach_their_minimal_shape() {
        let einsum = gather_dot_scatter();
        let mut k = eager(&einsum);
        run(&mut k);
        let phases = k.phases();
        // E[r] is a 1-D tile loaded once per r-tile, D[y] once per program.
        let (e, d) = (load_of(&k, "E"), load_of(&k, "D"));
        assert_eq!(shape_names(&k, e), ["r"], "{k}");
        assert_eq!(phases[e], Phase::Loop);
        assert_eq!(shape_names(&k, d), ["y"], "{k}");
        assert_eq!(phases[d], Phase::Program);
        assert_eq!(shape_names(&k, load_of(&k, "A")), ["y", "r"]);
        assert_eq!(shape_names(&k, load_of(&k, "B")), ["x", "r"]);
        // The same shapes lazy lowering gives directly.
        let lazy = lower_only(&einsum, &"matmul=off".parse().unwrap(), "k").unwrap();
        for t in ["A", "B", "D", "E"] {
            assert_eq!(shape_names(&k, load_of(&k, t)), shape_names(&lazy, load_of(&lazy, t)), "{t}");
        }
    }

    #[test]
    fn lazy_lowering_is_left_alone() {
        let mut k = lower_only(&gather_dot_scatter(), &"matmul=off".parse().unwrap(), "k").unwrap();
        let before = k.clone();
        run(&mut k);
        assert_eq!(k, before, "{k}");
        let (e, d) = (load_of(&k, "E"), load_of(&k, "D"));
        assert_eq!(shape_names(&k, e), ["r"]);
        assert_eq!(shape_names(&k, d), ["y"]);
        assert_eq!((k.phases()[e], k.phases()[d]), (Phase::Loop, Phase::Program));
    }
}
