//! The kernel IR: a tile-level program in the spirit of Triton and
//! TorchInductor, which both backends print.
//!
//! A kernel is a grid of *programs*, one per tile of the parallel axes (the
//! indices of the left-hand side). Each program computes its *program*
//! values once, then runs a loop over tiles of the reduced axes computing
//! the *loop* values, folds them into an accumulator, and writes the
//! result through its *sink* (a store, or an atomic update when programs
//! may hit the same output element).
//!
//! Values live in an arena ([`ValueId`] handles) and are *tiles*: each has a
//! [`Shape`], the ordered list of axes it varies over. A value that depends
//! only on `p` has shape `[p]` and is loaded once per program; the lazy
//! broadcasting pass keeps every shape minimal. Axes, tensors and values
//! are typed entities in [`PrimaryMap`]s; analyses live in
//! [`SecondaryMap`] side tables (see [`Kernel::phases`]) rather than on the
//! nodes.
//!
//! The invariants every kernel keeps are listed on [`Kernel::verify`],
//! which the pass manager ([`passes::PassManager`]) checks after every
//! pass. The textual form (`Display`, and [`Kernel::parse`] back) is what
//! snapshots show and what pass tests are written in
//! (`ir/tests/passes/<pass>/*.ir`).

mod inline;
pub mod lower;
mod parse;
pub mod passes;
mod print;
pub mod schedule;
mod verify;

use cranelift_entity::entity_impl;
pub use cranelift_entity::{EntityRef, PrimaryMap, SecondaryMap};

pub use inline::{User, Uses, axis_set};
pub use parse::ParseError;
pub use verify::VerifyError;

use crate::lang::{ElemType, Func};

/// An axis of the iteration space: one index variable, tiled.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AxisId(u32);
entity_impl!(AxisId, "axis");

/// A value in the kernel's arena.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ValueId(u32);
entity_impl!(ValueId, "%");

/// A tensor argument of the kernel.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TensorId(u32);
entity_impl!(TensorId, "tensor");

/// The axes a tile varies over, in the kernel's axis order.
pub type Shape = Vec<AxisId>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AxisRole {
    /// Appears on the left-hand side: programs are spread over its tiles.
    Parallel,
    /// Summed (or max/min-reduced) over: a loop inside each program.
    Reduced,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub name: String,
    pub extent: usize,
    /// Tile size (a power of two).
    pub tile: usize,
    pub role: AxisRole,
}

impl Axis {
    /// Whether the last tile runs past the extent and needs a mask.
    pub fn ragged(&self) -> bool {
        !self.extent.is_multiple_of(self.tile)
    }

    pub fn tiles(&self) -> usize {
        self.extent.div_ceil(self.tile)
    }
}

/// The element type of a tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// Values, in the kernel's compute precision.
    Float,
    /// Positions and indices.
    Int,
    /// Masks.
    Bool,
}

impl Scalar {
    pub const ALL: [Scalar; 3] = [Scalar::Float, Scalar::Int, Scalar::Bool];

    pub fn name(self) -> &'static str {
        match self {
            Scalar::Float => "float",
            Scalar::Int => "int",
            Scalar::Bool => "bool",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    Sum,
    Max,
    Min,
}

impl Reduction {
    pub const ALL: [Reduction; 3] = [Reduction::Sum, Reduction::Max, Reduction::Min];

    pub fn name(self) -> &'static str {
        match self {
            Reduction::Sum => "sum",
            Reduction::Max => "max",
            Reduction::Min => "min",
        }
    }

    /// The value that changes nothing.
    pub fn identity(self) -> f64 {
        match self {
            Reduction::Sum => 0.0,
            Reduction::Max => f64::NEG_INFINITY,
            Reduction::Min => f64::INFINITY,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    /// Comparisons give masks.
    Lt,
    Ge,
    /// Mask conjunction.
    And,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 9] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Lt,
        BinaryOp::Ge,
        BinaryOp::And,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Lt => "lt",
            BinaryOp::Ge => "ge",
            BinaryOp::And => "and",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Func(Func),
}

/// A float literal compared and hashed by its bits, so ops can be keys of
/// value numbering (`0.0` and `-0.0` stay apart, a NaN equals itself).
#[derive(Clone, Copy, Debug)]
pub struct F64Bits(pub f64);

impl PartialEq for F64Bits {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for F64Bits {}

impl std::hash::Hash for F64Bits {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The positions of the current tile of an axis: `start + 0..tile`,
    /// where `start` comes from the program id (parallel) or the loop
    /// (reduced).
    Range(AxisId),
    /// A literal.
    Const(F64Bits),
    /// An integer literal.
    ConstInt(i64),
    /// A gather: `tensor[index...]`, one index tile per dimension (they
    /// broadcast to the value's shape). Masked-off elements read 0.
    Load {
        tensor: TensorId,
        index: Vec<ValueId>,
        mask: Option<ValueId>,
    },
    Unary(UnaryOp, ValueId),
    Binary(BinaryOp, ValueId, ValueId),
    /// Reduces `value` along `axis`; elements where `mask` is false count
    /// as the identity.
    Reduce {
        reduction: Reduction,
        value: ValueId,
        axis: AxisId,
        mask: Option<ValueId>,
    },
    /// Σ over `axis` of `a * b`: a matrix product on tiles (batched over
    /// the axes `a` and `b` share besides `axis`).
    Dot {
        a: ValueId,
        b: ValueId,
        axis: AxisId,
        mask: Option<ValueId>,
    },
    /// `value` repeated over a larger shape (eager broadcasting only).
    Broadcast {
        value: ValueId,
    },
    /// The accumulator, read after the loop.
    Accumulator,
}

impl Op {
    /// The values this op reads, in a fixed order (index tiles, then
    /// operands, then the mask). Every walk over uses goes through here or
    /// [`Op::operands_mut`], so a new op lists its operands once.
    pub fn operands(&self) -> impl Iterator<Item = ValueId> + '_ {
        let (list, single): (&[ValueId], [Option<&ValueId>; 3]) = match self {
            Op::Range(_) | Op::Const(_) | Op::ConstInt(_) | Op::Accumulator => (&[], [None; 3]),
            Op::Load { index, mask, .. } => (index, [mask.as_ref(), None, None]),
            Op::Unary(_, a) | Op::Broadcast { value: a } => (&[], [Some(a), None, None]),
            Op::Binary(_, a, b) => (&[], [Some(a), Some(b), None]),
            Op::Reduce { value, mask, .. } => (&[], [Some(value), mask.as_ref(), None]),
            Op::Dot { a, b, mask, .. } => (&[], [Some(a), Some(b), mask.as_ref()]),
        };
        list.iter().chain(single.into_iter().flatten()).copied()
    }

    /// The operands, for rewiring them; same order as [`Op::operands`].
    pub fn operands_mut(&mut self) -> impl Iterator<Item = &mut ValueId> + '_ {
        let (list, single): (&mut [ValueId], [Option<&mut ValueId>; 3]) = match self {
            Op::Range(_) | Op::Const(_) | Op::ConstInt(_) | Op::Accumulator => (&mut [], [None, None, None]),
            Op::Load { index, mask, .. } => (index, [mask.as_mut(), None, None]),
            Op::Unary(_, a) | Op::Broadcast { value: a } => (&mut [], [Some(a), None, None]),
            Op::Binary(_, a, b) => (&mut [], [Some(a), Some(b), None]),
            Op::Reduce { value, mask, .. } => (&mut [], [Some(value), mask.as_mut(), None]),
            Op::Dot { a, b, mask, .. } => (&mut [], [Some(a), Some(b), mask.as_mut()]),
        };
        list.iter_mut().chain(single.into_iter().flatten())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Value {
    pub op: Op,
    pub shape: Shape,
    pub scalar: Scalar,
}

/// A tensor the kernel reads or writes: an argument, in this order.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorParam {
    pub name: String,
    pub dtype: ElemType,
    pub shape: Vec<usize>,
    pub output: bool,
}

/// How the output is prepared before the kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputInit {
    /// `=`: zeros.
    Zero,
    /// `+=`: the output's values as given.
    Keep,
    /// `max=` / `min=` without data: the identity, and entries no program
    /// reached are set to 0 afterwards (the reference evaluator's rule).
    Identity(Reduction),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sink {
    pub tensor: TensorId,
    pub index: Vec<ValueId>,
    pub value: ValueId,
    pub mask: Option<ValueId>,
    pub reduction: Reduction,
    /// True when no two programs write the same element and no element is
    /// written twice by one sink: a plain read-modify-write is enough.
    /// Otherwise the write is atomic.
    pub exclusive: bool,
    /// Elements combined before they are written (Sgap's segment group):
    /// `None` writes every element on its own.
    pub group: Option<SinkGroup>,
}

/// A group of `lanes` consecutive elements along `axis` that the sink
/// combines before writing: on CUDA, lanes of a warp exchanging values by
/// shuffles; in C, a run in one thread's loop (Sgap, paper 004 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SinkGroup {
    pub axis: AxisId,
    /// A power of two up to 32 that divides the axis's tile.
    pub lanes: u32,
    pub kind: GroupKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupKind {
    /// Elements may have different targets: each run of equal targets in
    /// the group is reduced and written by its first element (several
    /// write-back lanes).
    Segment,
    /// Every element of the group has the same target (the axis is not in
    /// the sink's index): the group is reduced and written once (one
    /// write-back lane).
    Parallel,
}

impl GroupKind {
    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Segment => "segment",
            GroupKind::Parallel => "parallel",
        }
    }
}

impl Sink {
    /// The values the sink reads: index tiles, the value, the mask.
    pub fn operands(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.index.iter().copied().chain([self.value]).chain(self.mask)
    }

    pub fn operands_mut(&mut self) -> impl Iterator<Item = &mut ValueId> + '_ {
        self.index.iter_mut().chain([&mut self.value]).chain(self.mask.as_mut())
    }
}

/// The reduction strategy (Sgap's menu, paper 004 §3-§4): how the
/// contributions to one output element meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Every contribution is its own atomic update; no accumulator.
    AtomicPerElement,
    /// Contributions are reduced in registers over the loop, then written
    /// once per output element of the program (GroupCOO's accumulation).
    AccumulateThenAtomic,
    /// As [`Strategy::AccumulateThenAtomic`], then groups of this many
    /// consecutive elements along the scatter axis (`p` of `C[R[p],n]`)
    /// reduce each run of equal targets and write once per run.
    Segment(u32),
    /// As [`Strategy::AtomicPerElement`], with groups of this many elements
    /// along the innermost reduced axis (`None`: its whole tile, at most
    /// 32) reduced to one write: they all have the same target.
    Parallel(Option<u32>),
}

impl Strategy {
    /// Group sizes of [`Strategy::Segment`] and [`Strategy::Parallel`]:
    /// a warp's lanes.
    pub const MAX_LANES: u32 = 32;
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Strategy::AtomicPerElement => f.write_str("atomic"),
            Strategy::AccumulateThenAtomic => f.write_str("accumulate"),
            Strategy::Segment(r) => write!(f, "segment({r})"),
            Strategy::Parallel(None) => f.write_str("parallel"),
            Strategy::Parallel(Some(r)) => write!(f, "parallel({r})"),
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    /// `atomic`, `accumulate`, `segment(R)`, `parallel` or `parallel(R)`,
    /// R a power of two up to 32.
    fn from_str(text: &str) -> Result<Self, String> {
        const SYNTAX: &str = "reduce is atomic, accumulate, segment(R), parallel(R) or parallel (the tile of the reduced index, at most 32), R in 1, 2, 4, 8, 16, 32";
        let lanes = |inner: &str| -> Result<u32, String> {
            match inner.parse::<u32>() {
                Ok(r) if r.is_power_of_two() && r <= Strategy::MAX_LANES => Ok(r),
                _ => Err(format!("`{inner}` is not a group size: {SYNTAX}")),
            }
        };
        let group = |name: &str| text.strip_prefix(name).and_then(|r| r.strip_prefix('(')?.strip_suffix(')'));
        match text {
            "atomic" => Ok(Strategy::AtomicPerElement),
            "accumulate" => Ok(Strategy::AccumulateThenAtomic),
            "parallel" => Ok(Strategy::Parallel(None)),
            _ => {
                if let Some(inner) = group("segment") {
                    Ok(Strategy::Segment(lanes(inner)?))
                } else if let Some(inner) = group("parallel") {
                    Ok(Strategy::Parallel(Some(lanes(inner)?)))
                } else {
                    Err(SYNTAX.to_string())
                }
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Accumulate {
    pub reduction: Reduction,
    /// The loop value folded in each iteration.
    pub partial: ValueId,
    pub shape: Shape,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub tensors: PrimaryMap<TensorId, TensorParam>,
    pub axes: PrimaryMap<AxisId, Axis>,
    /// Every value ever built, live or not: passes append, and
    /// [`Kernel::compact`] only drops ids from `order`, so ids (and the
    /// names printed from them) never change.
    pub values: PrimaryMap<ValueId, Value>,
    /// The program body: the live values in the order they are computed (a
    /// topological order; not arena order, since passes insert new values
    /// next to the ones they replace). Walks over the program go through
    /// it, so loops can later become entries of this body.
    pub order: Vec<ValueId>,
    pub accumulate: Option<Accumulate>,
    pub sink: Sink,
    pub init: OutputInit,
}

/// When a value is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Once per program, before the loop.
    #[default]
    Program,
    /// Every loop iteration.
    Loop,
    /// Once per program, after the loop.
    Epilogue,
}

impl Kernel {
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id]
    }

    /// The leaves of the conjunction tree at `id` (`a && b && ...`; `id`
    /// itself where it is not an `and`), appended to `out`.
    pub fn conjuncts(&self, id: ValueId, out: &mut Vec<ValueId>) {
        match self.value(id).op {
            Op::Binary(BinaryOp::And, a, b) => {
                self.conjuncts(a, out);
                self.conjuncts(b, out);
            }
            _ => out.push(id),
        }
    }

    pub fn axis(&self, id: AxisId) -> &Axis {
        &self.axes[id]
    }

    pub fn tensor(&self, id: TensorId) -> &TensorParam {
        &self.tensors[id]
    }

    pub fn parallel_axes(&self) -> Vec<AxisId> {
        self.axes.keys().filter(|&a| self.axis(a).role == AxisRole::Parallel).collect()
    }

    pub fn reduced_axes(&self) -> Vec<AxisId> {
        self.axes.keys().filter(|&a| self.axis(a).role == AxisRole::Reduced).collect()
    }

    /// The operands of a value.
    pub fn operands(&self, id: ValueId) -> impl Iterator<Item = ValueId> + '_ {
        self.value(id).op.operands()
    }

    /// Uses of values from outside the body: the sink's operands and the
    /// partial the accumulator folds. They are the roots of liveness and
    /// are rewired with the body's uses.
    pub fn root_uses(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.sink.operands().chain(self.accumulate.as_ref().map(|a| a.partial))
    }

    pub fn root_uses_mut(&mut self) -> impl Iterator<Item = &mut ValueId> + '_ {
        self.sink.operands_mut().chain(self.accumulate.as_mut().map(|a| &mut a.partial))
    }

    /// When each value is computed: after the loop if it reads the
    /// accumulator, in the loop if it varies over a reduced axis or reads a
    /// loop value (and does not reduce it away), else once per program.
    pub fn phases(&self) -> SecondaryMap<ValueId, Phase> {
        let reduced = self.reduced_axes();
        let mut phase: SecondaryMap<ValueId, Phase> = SecondaryMap::with_capacity(self.values.len());
        for &id in &self.order {
            let v = self.value(id);
            let from_operands = self.operands(id).map(|o| phase[o]).max().unwrap_or(Phase::Program);
            let own = match v.op {
                Op::Accumulator => Phase::Epilogue,
                _ if v.shape.iter().any(|a| reduced.contains(a)) => Phase::Loop,
                _ => Phase::Program,
            };
            phase[id] = own.max(from_operands);
        }
        // The partial folded into the accumulator is a loop value even when
        // every reduced axis was reduced away inside it.
        if let Some(acc) = &self.accumulate {
            phase[acc.partial] = phase[acc.partial].max(Phase::Loop);
        }
        phase
    }

    /// The number of elements of a tile of this shape.
    pub fn tile_elements(&self, shape: &Shape) -> usize {
        shape.iter().map(|&a| self.axis(a).tile).product()
    }

    /// Values in use: reachable from the roots (dead values are dropped by
    /// [`Kernel::compact`]).
    fn live(&self) -> SecondaryMap<ValueId, bool> {
        let mut live = SecondaryMap::with_capacity(self.values.len());
        let mut stack: Vec<ValueId> = self.root_uses().collect();
        while let Some(id) = stack.pop() {
            if !std::mem::replace(&mut live[id], true) {
                stack.extend(self.operands(id));
            }
        }
        live
    }

    /// Drops values nothing uses any more (after a pass rewired them).
    pub fn compact(&mut self) {
        let live = self.live();
        self.order.retain(|&id| live[id]);
    }
}

impl Kernel {
    /// The index tensors read as a whole subscript: (index tensor, target
    /// tensor, target dimension). Their values must lie in the target's
    /// extent, which [`Kernel::check_indices`] verifies before a run, so
    /// the kernel needs no mask for them.
    pub fn lone_indirect(&self) -> Vec<(TensorId, TensorId, usize)> {
        let mut out = Vec::new();
        let mut visit = |target: TensorId, index: &[ValueId]| {
            for (dim, &ix) in index.iter().enumerate() {
                if let Op::Load { tensor, .. } = self.value(ix).op
                    && !out.contains(&(tensor, target, dim))
                {
                    out.push((tensor, target, dim));
                }
            }
        };
        for &id in &self.order {
            if let Op::Load { tensor, index, .. } = &self.value(id).op {
                visit(*tensor, index);
            }
        }
        visit(self.sink.tensor, &self.sink.index);
        out
    }

    /// Where `order` (the schedule's `order=`) names a summed index before
    /// an output index, why the tile program does not follow it: its grid
    /// runs over the output's indices and each program loops over the
    /// summed ones, so `order=` orders within each group.
    pub fn order_note(&self, order: &[String]) -> Option<String> {
        let role = |name: &str| self.axes.values().find(|a| a.name == name).map(|a| a.role);
        let summed = order.iter().position(|o| role(o) == Some(AxisRole::Reduced))?;
        let later = order[summed + 1..].iter().find(|o| role(o) == Some(AxisRole::Parallel))?;
        let names: Vec<&str> = self.axes.values().map(|a| a.name.as_str()).collect();
        Some(format!(
            "`order={}` puts the summed `{}` before `{later}`, which the tile path does not follow: its programs \
             run over the output's indices and loop over the summed ones inside, order= ordering each group \
             (here {})",
            order.join("+"),
            order[summed],
            names.join(", ")
        ))
    }

    /// Checks every value of the index tensors in [`Kernel::lone_indirect`]
    /// against its target's extent: the kernel trusts them.
    pub fn check_indices(&self, tensors: &crate::tensor::Tensors) -> Result<(), String> {
        for (x, target, dim) in self.lone_indirect() {
            let (x, target) = (self.tensor(x), self.tensor(target));
            let extent = target.shape[dim];
            let Some(crate::tensor::TensorValue::Indices(data)) = tensors.get(&x.name) else {
                return Err(format!("no index data for {}", x.name));
            };
            if let Some(message) = crate::tensor::out_of_range(&x.name, data, &target.name, dim, extent) {
                return Err(message);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::lang::{check, declarations, parse};

    #[test]
    fn literals_are_equal_by_their_bits() {
        let c = |x: f64| Op::Const(F64Bits(x));
        assert_ne!(c(0.0), c(-0.0));
        assert_eq!(c(f64::NAN), c(f64::NAN));
        let set: HashSet<Op> = [c(1.0), c(1.0), c(-0.0), c(0.0)].into_iter().collect();
        assert_eq!(set.len(), 3);
    }

    /// An `order=` that puts a summed index before an output index is not
    /// what the tile program runs, and says so; one within the groups is.
    #[test]
    fn an_order_with_a_summed_index_first_gets_a_note() {
        let d = declarations(&[("C", &[8, 4], "f32"), ("A", &[8, 6], "f32"), ("B", &[6, 4], "f32")]);
        let e = check(&parse("C[m,n] += A[m,k] * B[k,n]").unwrap(), &d).unwrap();
        let note = |order: &str| {
            let k = lower::lower_only(&e, &format!("order={order}").parse().unwrap(), "k").unwrap();
            k.order_note(&order.split('+').map(String::from).collect::<Vec<_>>())
        };
        let said = note("k+m+n").unwrap();
        assert!(said.contains("`order=k+m+n` puts the summed `k` before `m`"), "{said}");
        assert_eq!(note("n+m+k"), None);
        assert_eq!(note("n+m"), None);
    }

    /// Lowering numbers values by their structure: equal nodes are built
    /// once, so both products below are one load of `x` and one `mul`.
    #[test]
    fn value_numbering_builds_equal_nodes_once() {
        let d = declarations(&[("y", &[8], "f32"), ("x", &[8], "f32")]);
        let e = check(&parse("y[i] = 2 * x[i] + 2 * x[i]").unwrap(), &d).unwrap();
        let k = lower::lower_only(&e, &"".parse().unwrap(), "k").unwrap();
        let count = |pred: fn(&Op) -> bool| k.order.iter().filter(|&&id| pred(&k.value(id).op)).count();
        assert_eq!(count(|op| matches!(op, Op::Load { .. })), 1, "{k}");
        assert_eq!(count(|op| matches!(op, Op::Const(_))), 1, "{k}");
        assert_eq!(count(|op| matches!(op, Op::Binary(BinaryOp::Mul, ..))), 1, "{k}");
        assert_eq!(count(|op| matches!(op, Op::Binary(BinaryOp::Add, a, b) if a == b)), 1, "{k}");
    }
}
