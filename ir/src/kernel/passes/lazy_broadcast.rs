//! Lazy broadcasting (Insum §5.2.3): every value keeps the smallest shape it
//! depends on, and is broadcast only where it is used. Eager lowering gives
//! each range every axis up front (TorchInductor's default); this pass
//! removes those broadcasts and shrinks every shape, so a 1-D index tile
//! such as `E[r]` is loaded once per r-tile and `dot` operands keep the
//! layout a matrix unit wants.

use super::{recompute_shapes, replace_uses};
use crate::kernel::{Kernel, Op};

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
}
