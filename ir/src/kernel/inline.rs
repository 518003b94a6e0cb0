//! Who reads each value, and which values a printer writes as expressions
//! where they are read instead of materializing them as tiles: one analysis
//! for every backend, so the C and CUDA printers make the same decision by
//! the same rule.
//!
//! A value is printed inline when recomputing it is free or cheap, or when
//! exactly one consumer reads it, in the same phase, while visiting exactly
//! the value's own elements: then inlining neither repeats work nor moves
//! it into a more frequent phase. A value read by a consumer of larger
//! shape (an index `E[r]` that a gather broadcasts over `n`) keeps its tile,
//! so it is read from memory once per tile. Reductions, the accumulator and
//! the accumulator's partial are always materialized.

use super::{AxisId, Kernel, Op, Phase, Scalar, SecondaryMap, ValueId};

/// Who reads a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum User {
    Value(ValueId),
    /// The sink (index, value or mask).
    Sink,
    /// The fold of the accumulator's partial into the accumulator.
    Fold,
}

/// The readers of every value, and when each runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Uses {
    pub phases: SecondaryMap<ValueId, Phase>,
    pub users: SecondaryMap<ValueId, Vec<User>>,
    /// The phase the sink runs in: that of its latest operand.
    pub sink_phase: Phase,
    /// The axes the sink visits (its operands' axes, sorted).
    pub sink_shape: Vec<AxisId>,
}

/// A shape as a sorted set of axes.
pub fn axis_set(shape: impl IntoIterator<Item = AxisId>) -> Vec<AxisId> {
    let mut s: Vec<AxisId> = shape.into_iter().collect();
    s.sort();
    s.dedup();
    s
}

impl Uses {
    pub fn of(k: &Kernel) -> Uses {
        let phases = k.phases();
        let mut users: SecondaryMap<ValueId, Vec<User>> = SecondaryMap::with_capacity(k.values.len());
        for &id in &k.order {
            for o in k.operands(id) {
                users[o].push(User::Value(id));
            }
        }
        for o in k.sink.operands() {
            users[o].push(User::Sink);
        }
        if let Some(acc) = &k.accumulate {
            users[acc.partial].push(User::Fold);
        }
        let sink_phase = k.sink.operands().map(|v| phases[v]).max().unwrap_or(Phase::Program);
        let sink_shape = axis_set(k.sink.operands().flat_map(|v| k.value(v).shape.clone()));
        Uses { phases, users, sink_phase, sink_shape }
    }

    /// The phase a reader runs in.
    pub fn user_phase(&self, user: User) -> Phase {
        match user {
            User::Value(u) => self.phases[u],
            User::Sink => self.sink_phase,
            User::Fold => Phase::Loop,
        }
    }

    /// The axes a reader loops over when it reads its operands (sorted): a
    /// reduction visits its operands' axes and the reduced one too.
    pub fn iteration_shape(&self, k: &Kernel, user: User) -> Vec<AxisId> {
        match user {
            User::Value(u) => {
                let v = k.value(u);
                match &v.op {
                    Op::Reduce { axis, .. } | Op::Dot { axis, .. } => axis_set(
                        v.shape
                            .iter()
                            .copied()
                            .chain(k.operands(u).flat_map(|o| k.value(o).shape.clone()))
                            .chain([*axis]),
                    ),
                    _ => axis_set(v.shape.iter().copied()),
                }
            }
            User::Sink => self.sink_shape.clone(),
            User::Fold => {
                k.accumulate.as_ref().map(|a| axis_set(a.shape.iter().copied())).unwrap_or_default()
            }
        }
    }

    /// Which values are printed inline (see the module documentation).
    /// Integer and boolean arithmetic (indices, masks) is recomputed
    /// wherever it is read while it costs at most `recompute` operations,
    /// counting a read of a materialized operand as one: where a tile costs
    /// a barrier (CUDA's shared memory) recomputing pays sooner than where
    /// it is a register array (C). Values for which `materialized` holds
    /// are never inlined (a backend's own plans for them).
    pub fn inline(
        &self,
        k: &Kernel,
        recompute: usize,
        materialized: impl Fn(ValueId) -> bool,
    ) -> SecondaryMap<ValueId, bool> {
        let mut inline: SecondaryMap<ValueId, bool> = SecondaryMap::with_capacity(k.values.len());
        let mut cost: SecondaryMap<ValueId, usize> = SecondaryMap::with_default(usize::MAX);
        for &id in &k.order {
            let v = k.value(id);
            let forced = materialized(id);
            cost[id] = match &v.op {
                Op::Range(_) | Op::Const(_) | Op::ConstInt(_) => 0,
                Op::Unary(..) | Op::Binary(..) | Op::Broadcast { .. }
                    if v.scalar != Scalar::Float && !forced =>
                {
                    let operands: usize = k
                        .operands(id)
                        .map(|o| if inline[o] { cost[o] } else { 1 })
                        .fold(0, usize::saturating_add);
                    operands.saturating_add(1)
                }
                _ => usize::MAX,
            };
            inline[id] = !forced
                && match &v.op {
                    Op::Accumulator | Op::Reduce { .. } | Op::Dot { .. } => false,
                    _ if cost[id] <= recompute => true,
                    // A broadcast is a view: its reader reads the operand.
                    Op::Broadcast { .. } => true,
                    _ => match self.users[id][..] {
                        [user @ (User::Value(_) | User::Sink)] => {
                            self.user_phase(user) == self.phases[id]
                                && self.iteration_shape(k, user) == axis_set(v.shape.iter().copied())
                        }
                        _ => false,
                    },
                };
        }
        inline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spmm() -> Kernel {
        let text = include_str!("../../tests/passes/native_matmul/groupcoo_spmm.ir");
        text.split("// expected:").nth(1).expect("an expected kernel").parse().unwrap()
    }

    #[test]
    fn gathers_inline_into_their_dot_and_indices_broadcast_keep_a_tile() {
        let k = spmm();
        let uses = Uses::of(&k);
        let inline = uses.inline(&k, 0, |_| false);
        for &id in &k.order {
            let v = k.value(id);
            match &v.op {
                Op::Range(_) | Op::Const(_) | Op::ConstInt(_) => assert!(inline[id], "{id} is free"),
                Op::Reduce { .. } | Op::Dot { .. } | Op::Accumulator => assert!(!inline[id], "{id}"),
                // A 2-D index read by a gather over (p, q, n) keeps its tile.
                Op::Load { .. } if v.shape.len() == 2 && v.scalar == Scalar::Int => {
                    assert!(!inline[id], "{id}: an index broadcast over n must keep its tile")
                }
                _ => {}
            }
        }
        let gather = k
            .order
            .iter()
            .copied()
            .find(|&id| matches!(k.value(id).op, Op::Load { .. }) && k.value(id).shape.len() == 3);
        assert!(inline[gather.expect("the SpMM gathers B")], "the gather is read only by the dot");
    }

    #[test]
    fn materialized_values_and_the_partial_are_never_inline() {
        let k = spmm();
        let uses = Uses::of(&k);
        let everything = uses.inline(&k, usize::MAX, |id| matches!(k.value(id).op, Op::Load { .. }));
        for &id in &k.order {
            if matches!(k.value(id).op, Op::Load { .. }) {
                assert!(!everything[id]);
            }
        }
        if let Some(acc) = &k.accumulate {
            assert!(!everything[acc.partial]);
        }
    }

    #[test]
    fn index_arithmetic_is_recomputed_within_the_budget() {
        let k = spmm();
        let uses = Uses::of(&k);
        let cheap = uses.inline(&k, 8, |_| false);
        let none = uses.inline(&k, 0, |_| false);
        let masks = k
            .order
            .iter()
            .copied()
            .filter(|&id| matches!(k.value(id).op, Op::Binary(..)) && k.value(id).scalar == Scalar::Bool);
        let mut shared = 0;
        for id in masks {
            assert!(cheap[id], "{id}: a bounds test is cheap to recompute");
            if uses.users[id].len() > 1 {
                assert!(!none[id], "{id}: with no budget a test read twice keeps its tile");
                shared += 1;
            }
        }
        assert!(shared > 0, "the SpMM has a bounds test read by several values");
    }
}
