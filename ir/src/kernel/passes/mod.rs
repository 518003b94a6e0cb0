//! Passes over the kernel IR, each in its own module with tests that show
//! the IR before and after.

pub mod lazy_broadcast;
pub mod native_matmul;

use super::{Kernel, Op, Shape, ValueId};

/// Makes every user of `old` use `new` instead.
pub(crate) fn replace_uses(kernel: &mut Kernel, old: ValueId, new: ValueId) {
    let swap = |v: &mut ValueId| {
        if *v == old {
            *v = new;
        }
    };
    for value in &mut kernel.values {
        match &mut value.op {
            Op::Range(_) | Op::Const(_) | Op::ConstInt(_) | Op::Accumulator => {}
            Op::Load { index, mask, .. } => {
                index.iter_mut().for_each(swap);
                mask.iter_mut().for_each(swap);
            }
            Op::Unary(_, a) | Op::Broadcast { value: a } => swap(a),
            Op::Binary(_, a, b) => {
                swap(a);
                swap(b);
            }
            Op::Reduce { value, mask, .. } => {
                swap(value);
                mask.iter_mut().for_each(swap);
            }
            Op::Dot { a, b, mask, .. } => {
                swap(a);
                swap(b);
                mask.iter_mut().for_each(swap);
            }
        }
    }
    let sink = &mut kernel.sink;
    sink.index.iter_mut().for_each(swap);
    swap(&mut sink.value);
    sink.mask.iter_mut().for_each(swap);
    if let Some(acc) = &mut kernel.accumulate {
        swap(&mut acc.partial);
    }
}

/// Adds a value right after `after` in the computation order.
pub(crate) fn insert_after(kernel: &mut Kernel, after: ValueId, value: super::Value) -> ValueId {
    let id = ValueId(kernel.values.len() as u32);
    kernel.values.push(value);
    let at = kernel.order.iter().position(|&v| v == after).map_or(kernel.order.len(), |p| p + 1);
    kernel.order.insert(at, id);
    id
}

/// Recomputes every shape from its operands, in order: ranges vary over
/// their axis, reductions drop theirs, the rest take the union.
pub(crate) fn recompute_shapes(kernel: &mut Kernel) {
    for i in 0..kernel.order.len() {
        let id = kernel.order[i];
        let union = |ids: &[ValueId], k: &Kernel| -> Shape {
            let mut s: Shape = ids.iter().flat_map(|&o| k.value(o).shape.clone()).collect();
            s.sort();
            s.dedup();
            s
        };
        let shape = match &kernel.value(id).op {
            Op::Range(axis) => vec![*axis],
            Op::Const(_) | Op::ConstInt(_) => Vec::new(),
            Op::Accumulator => {
                kernel.accumulate.as_ref().map(|a| kernel.value(a.partial).shape.clone()).unwrap_or_default()
            }
            Op::Broadcast { .. } => continue,
            Op::Reduce { axis, .. } | Op::Dot { axis, .. } => {
                let axis = *axis;
                union(&kernel.operands(id), kernel).into_iter().filter(|&a| a != axis).collect()
            }
            _ => union(&kernel.operands(id), kernel),
        };
        kernel.values[id.0 as usize].shape = shape;
    }
    if let Some(acc) = &mut kernel.accumulate {
        acc.shape = kernel.values[acc.partial.0 as usize].shape.clone();
    }
}
