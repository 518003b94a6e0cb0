//! Lowering a checked indirect Einsum to a kernel, under a schedule. One
//! general procedure for every statement: ranges for the axes, loads for
//! the reads (gathers through index tensors), the expression, a reduction
//! of the reduced axes, and a sink for the left-hand side.

use std::collections::BTreeMap;

use super::passes::{self, PassManager};
use super::schedule::{Broadcasting, Schedule};
use super::*;
use crate::lang::{Access, AssignOp, Atom, BinOp, Diagnostic, Einsum, Expr, Role, Subscript};

/// Lowers `einsum` under `schedule` into a kernel named `name`, then runs
/// the passes the schedule asks for (lazy broadcasting, native matmul)
/// through [`pipeline`].
///
/// Default tiles of many axes (a 3-D convolution has six) can multiply past
/// a value's limit: then the largest tile the schedule did not name is
/// halved until every value fits.
pub fn lower(einsum: &Einsum, schedule: &Schedule, name: &str) -> Result<Kernel, Diagnostic> {
    lower_skipping(einsum, schedule, name, &[])
}

/// A statement's terms that a kernel skips: those where the index tensor
/// `tensor`, read at the statement's indices `at`, holds 0. A format's
/// padding (ELL's and GroupCOO's slots that repeat the slot before, value
/// 0) adds nothing to a sum of finite terms, but 0 x inf is NaN: where a
/// factor holds non-finite values, the kernel skips the padding instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkipMask {
    pub tensor: String,
    pub at: Vec<String>,
}

/// [`lower`], skipping the terms `skip` masks off (every mask's 0s).
pub fn lower_skipping(
    einsum: &Einsum,
    schedule: &Schedule,
    name: &str,
    skip: &[SkipMask],
) -> Result<Kernel, Diagnostic> {
    let mut tried = schedule.clone();
    loop {
        let mut kernel = lower_only_skipping(einsum, &tried, name, skip)?;
        pipeline(&tried).run(&mut kernel).map_err(|e| {
            Diagnostic::new(format!("internal compiler error: {e}"), einsum.statement.span)
                .with_note("this is a bug in Spindle; please report it with the statement and schedule")
        })?;
        let Err(too_large) = check_tiles(&kernel, &einsum.statement.span) else { return Ok(kernel) };
        let largest = einsum
            .indices
            .iter()
            .filter(|i| !schedule.tiles.contains_key(&i.name))
            .map(|i| (tried.tile(&i.name, i.extent), &i.name))
            .filter(|(tile, _)| *tile > 1)
            .max_by_key(|(tile, _)| *tile);
        let Some((tile, index)) = largest else { return Err(too_large) };
        tried.tiles.insert(index.clone(), tile / 2);
    }
}

/// The passes `schedule` asks for, in order. The IR is verified before and
/// after each; `SPINDLE_DUMP_IR=1` prints it after each.
pub fn pipeline(schedule: &Schedule) -> PassManager {
    let mut passes = Vec::new();
    if schedule.broadcasting == Broadcasting::Lazy {
        passes.push(passes::LAZY_BROADCAST);
    }
    if schedule.native_matmul {
        passes.push(passes::NATIVE_MATMUL);
    }
    PassManager::new(passes)
}

/// The largest tile one value may occupy, in elements.
pub const MAX_TILE_ELEMENTS: usize = 1 << 16;

fn check_tiles(kernel: &Kernel, span: &crate::lang::Span) -> Result<(), Diagnostic> {
    for &id in &kernel.order {
        let shape = &kernel.value(id).shape;
        let n = kernel.tile_elements(shape);
        if n > MAX_TILE_ELEMENTS {
            let axes: Vec<String> =
                shape.iter().map(|&a| format!("{}={}", kernel.axis(a).name, kernel.axis(a).tile)).collect();
            return Err(Diagnostic::new(
                format!("a tile of {n} elements ({}) is larger than {MAX_TILE_ELEMENTS}", axes.join(" x ")),
                *span,
            )
            .with_note("use smaller tiles in the schedule, e.g. tile.n=32")
            .in_schedule_item(
                shape.iter().map(|&a| format!("tile.{}", kernel.axis(a).name)).next().unwrap_or_default(),
            ));
        }
    }
    Ok(())
}

/// Lowering without the passes: eager shapes stay eager, sums stay sums.
pub fn lower_only(einsum: &Einsum, schedule: &Schedule, name: &str) -> Result<Kernel, Diagnostic> {
    lower_only_skipping(einsum, schedule, name, &[])
}

fn lower_only_skipping(
    einsum: &Einsum,
    schedule: &Schedule,
    name: &str,
    skip: &[SkipMask],
) -> Result<Kernel, Diagnostic> {
    let st = &einsum.statement;
    // Parallel axes first, then reduced; within each, the schedule's
    // `order` first, then the statement's order.
    let rank = |name: &str| schedule.order.iter().position(|o| o == name).unwrap_or(usize::MAX);
    let mut axes: PrimaryMap<AxisId, Axis> = PrimaryMap::new();
    for reduced in [false, true] {
        let mut group: Vec<_> = einsum.indices.iter().filter(|i| i.reduced == reduced).collect();
        group.sort_by_key(|i| rank(&i.name));
        for i in group {
            let role = if reduced { AxisRole::Reduced } else { AxisRole::Parallel };
            // An output index the programs are not spread over is one tile.
            let whole = !reduced
                && schedule.parallel.as_ref().is_some_and(|p| !p.contains(&i.name))
                && !schedule.tiles.contains_key(&i.name);
            let tile =
                if whole { i.extent.max(1).next_power_of_two() } else { schedule.tile(&i.name, i.extent) };
            axes.push(Axis { name: i.name.clone(), extent: i.extent, tile, role });
        }
    }
    let named = schedule.tiles.keys().chain(schedule.parallel.iter().flatten()).chain(&schedule.order);
    for index in named {
        if !axes.values().any(|a| &a.name == index) {
            let used: Vec<&str> = axes.values().map(|a| a.name.as_str()).collect();
            let item = match () {
                _ if schedule.tiles.contains_key(index) => format!("tile.{index}"),
                _ if schedule.parallel.iter().flatten().any(|p| p == index) => "parallel".to_string(),
                _ => "order".to_string(),
            };
            return Err(Diagnostic::new(
                format!("the schedule names `{index}`, which the statement does not use"),
                st.span,
            )
            .with_note(format!(
                "the statement's indices are {} (a format's rewrite replaces the indices its arrays store by \
                 their position, `p`)",
                used.join(", ")
            ))
            .in_schedule_item(item));
        }
    }
    if let Some(reduced) =
        schedule.parallel.iter().flatten().find(|p| einsum.index(p).is_some_and(|i| i.reduced))
    {
        return Err(Diagnostic::new(
            format!("`{reduced}` is reduced: programs can only be spread over the output's indices"),
            st.span,
        )
        .in_schedule_item("parallel"));
    }
    let tensors: PrimaryMap<TensorId, TensorParam> = einsum
        .tensors
        .values()
        .map(|t| TensorParam {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            output: t.role == Role::Output,
        })
        .collect();
    let reduction = match st.op {
        AssignOp::Assign | AssignOp::AddAssign => Reduction::Sum,
        AssignOp::MaxAssign => Reduction::Max,
        AssignOp::MinAssign => Reduction::Min,
    };
    let init = match st.op {
        AssignOp::Assign => OutputInit::Zero,
        AssignOp::AddAssign => OutputInit::Keep,
        AssignOp::MaxAssign | AssignOp::MinAssign => OutputInit::Identity(reduction),
    };
    let mut b = Builder {
        axes,
        tensors,
        values: PrimaryMap::new(),
        order: Vec::new(),
        ranges: BTreeMap::new(),
        numbered: Default::default(),
        eager: schedule.broadcasting == Broadcasting::Eager,
    };

    let rhs = b.expr(&st.rhs);
    // `mask[at] >= 1` for each mask of skipped terms (index tensors hold 0
    // or 1 there).
    let mut skipped = None;
    for m in skip {
        let read = b.load(&Access::new(&m.tensor, m.at.iter().map(|i| Subscript::index(i)).collect()));
        let one = b.const_int(1);
        let kept = b.binary(BinaryOp::Ge, read, one);
        skipped = b.and(skipped, Some(kept));
    }
    let (index, index_mask, plain) = b.position(&st.lhs);
    let out = b.tensor_id(&st.lhs.tensor.name);
    let reduced: Vec<AxisId> = b.axis_ids(AxisRole::Reduced);
    let parallel: Vec<AxisId> = b.axis_ids(AxisRole::Parallel);
    // One program owns each output element when the left-hand side is the
    // parallel indices themselves, each once.
    let owns = plain.len() == parallel.len() && parallel.iter().all(|a| plain.contains(a));

    let (accumulate, value, mask, exclusive) = if reduced.is_empty() {
        let mask = b.and(index_mask, skipped);
        (None, rhs, mask, owns)
    } else {
        // Every contribution counts once per point of the reduced axes.
        let full = b.shape_of(rhs).into_iter().chain(reduced.iter().copied()).collect::<Vec<_>>();
        let rhs = b.broadcast_to(rhs, &full);
        match schedule.strategy {
            Strategy::AccumulateThenAtomic | Strategy::Segment(_) => {
                let mut partial = rhs;
                // Innermost reduced axis first: the block axis of a
                // BlockGroupCOO product, so the matmul pass makes the block
                // product the `dot` and the group axis a plain sum after it.
                // The skipped terms are masked off in the first sum, whose
                // value still has every axis: a skipped term's partial
                // sums are then the identity.
                let mut skipped = skipped;
                for &r in reduced.iter().rev() {
                    // The mask of r alone: an eager mask would carry axes
                    // the partial no longer has.
                    let mask = b.raw_axis_mask(r);
                    let mask = b.and(mask, skipped.take());
                    let shape = b.shape_of(partial).into_iter().filter(|&a| a != r).collect();
                    partial =
                        b.push(Op::Reduce { reduction, value: partial, axis: r, mask }, shape, Scalar::Float);
                }
                let shape = b.shape_of(partial);
                let acc = b.push(Op::Accumulator, shape.clone(), Scalar::Float);
                (Some(Accumulate { reduction, partial, shape }), acc, index_mask, owns)
            }
            Strategy::AtomicPerElement | Strategy::Parallel(_) => {
                let reduced_masks = b.shape_mask(&reduced);
                let mask = b.and(index_mask, reduced_masks);
                let mask = b.and(mask, skipped);
                (None, rhs, mask, false)
            }
        }
    };
    let group = sink_group(&b, schedule.strategy, &index, &st.lhs.tensor.name, st.span)?;
    let sink = Sink { tensor: out, index, value, mask, reduction, exclusive, group };
    let mut kernel = Kernel {
        name: name.to_string(),
        tensors: b.tensors,
        axes: b.axes,
        values: b.values,
        order: b.order,
        accumulate,
        sink,
        init,
    };
    kernel.compact();
    Ok(kernel)
}

/// The sink group a Sgap strategy asks for, or why the statement cannot
/// have it (paper 004 §3.3's legality rules, in this IR's terms).
/// The axes along which the index tensors that `value` reads vary: the
/// axes of its loads, through the arithmetic around them.
fn gathered_axes(b: &Builder, value: ValueId) -> Vec<AxisId> {
    match &b.values[value].op {
        Op::Load { .. } => b.values[value].shape.to_vec(),
        Op::Unary(_, x) | Op::Broadcast { value: x } => gathered_axes(b, *x),
        Op::Binary(_, x, y) => {
            let mut axes = gathered_axes(b, *x);
            axes.extend(gathered_axes(b, *y));
            axes
        }
        _ => Vec::new(),
    }
}

fn sink_group(
    b: &Builder,
    strategy: Strategy,
    index: &[ValueId],
    output: &str,
    span: crate::lang::Span,
) -> Result<Option<SinkGroup>, Diagnostic> {
    let (kind, lanes, axis) = match strategy {
        Strategy::AtomicPerElement | Strategy::AccumulateThenAtomic => return Ok(None),
        Strategy::Segment(lanes) => {
            // The scatter axis: one the output's position reaches through
            // an index tensor (`p` of `C[R[p],n]`, and of BlockGroupCOO's
            // `C[bm*R[p]+bi,n]`, not `bi`, whose neighbours write
            // neighbouring rows), so that neighbours along it may share a
            // target.
            let scattered = index
                .iter()
                .filter(|&&ix| !matches!(b.values[ix].op, Op::Range(_)))
                .flat_map(|&ix| gathered_axes(b, ix))
                .filter(|&a| b.axes[a].role == AxisRole::Parallel)
                .max();
            let Some(axis) = scattered else {
                return Err(Diagnostic::new(
                    format!("reduce={strategy} groups neighbours of the iteration along an index the output is scattered through (read through an index tensor), and no subscript of {output} is"),
                    span,
                )
                .with_note("segment reduction groups neighbours along an index read through an index tensor, as `p` in `C[R[p],n]`; use reduce=accumulate")
                .in_schedule_item("reduce"));
            };
            (GroupKind::Segment, lanes, axis)
        }
        Strategy::Parallel(lanes) => {
            let reduced = b.axis_ids(AxisRole::Reduced);
            let Some(&axis) = reduced.last() else {
                return Err(Diagnostic::new(
                    format!("reduce={strategy} combines contributions along a reduced index, and this statement has none"),
                    span,
                )
                .with_note("no index of it is summed: every index of its right-hand side is on its left; use reduce=accumulate")
                .in_schedule_item("reduce"));
            };
            let tile = b.axes[axis].tile as u32;
            (GroupKind::Parallel, lanes.unwrap_or(tile.min(Strategy::MAX_LANES)), axis)
        }
    };
    let a = &b.axes[axis];
    if !a.tile.is_multiple_of(lanes as usize) {
        let why = match kind {
            GroupKind::Segment => "a group would hold elements of two programs",
            // Paper 004's second rule: parallel reduction has one
            // write-back lane, so a group cannot span several outputs.
            GroupKind::Parallel => "its one write-back lane would serve elements of two tiles",
        };
        return Err(Diagnostic::new(
            format!(
                "reduce={strategy} groups {lanes} elements along `{}`, whose tile is {}: {why}",
                a.name, a.tile
            ),
            span,
        )
        .with_note(format!("set tile.{}={lanes} or more, or use a smaller group", a.name))
        .in_schedule_item("reduce"));
    }
    Ok(Some(SinkGroup { axis, lanes, kind }))
}

struct Builder {
    axes: PrimaryMap<AxisId, Axis>,
    tensors: PrimaryMap<TensorId, TensorParam>,
    values: PrimaryMap<ValueId, Value>,
    order: Vec<ValueId>,
    ranges: BTreeMap<AxisId, ValueId>,
    /// Value numbering, keyed on the node as first built.
    numbered: std::collections::HashMap<Value, ValueId>,
    eager: bool,
}

impl Builder {
    /// Adds a value, or returns the equal one already built (value
    /// numbering: the same mask or constant is computed once).
    fn push(&mut self, op: Op, shape: Shape, scalar: Scalar) -> ValueId {
        let value = Value { op, shape, scalar };
        let numbered = !matches!(value.op, Op::Accumulator);
        if let (true, Some(&id)) = (numbered, self.numbered.get(&value)) {
            return id;
        }
        let id = self.values.push(value.clone());
        self.order.push(id);
        self.numbered.insert(value, id);
        id
    }

    fn shape_of(&self, id: ValueId) -> Shape {
        self.values[id].shape.clone()
    }

    fn scalar_of(&self, id: ValueId) -> Scalar {
        self.values[id].scalar
    }

    fn axis_ids(&self, role: AxisRole) -> Vec<AxisId> {
        self.axes.iter().filter(|(_, a)| a.role == role).map(|(id, _)| id).collect()
    }

    fn axis_id(&self, name: &str) -> AxisId {
        self.axes.iter().find(|(_, a)| a.name == name).expect("the checker knows every index").0
    }

    fn tensor_id(&self, name: &str) -> TensorId {
        self.tensors.iter().find(|(_, t)| t.name == name).expect("the checker knows every tensor").0
    }

    /// The union of shapes, in axis order.
    fn union(&self, ids: &[ValueId]) -> Shape {
        let mut shape: Shape = ids.iter().flat_map(|&id| self.shape_of(id)).collect();
        shape.sort();
        shape.dedup();
        shape
    }

    /// The positions of an axis's current tile. Eager broadcasting gives
    /// every range every axis up front: a reduced range every axis, a
    /// parallel range every parallel axis (the output's positions never
    /// vary over reduced axes).
    fn range(&mut self, axis: AxisId) -> ValueId {
        if let Some(&id) = self.ranges.get(&axis) {
            return id;
        }
        let mut id = self.push(Op::Range(axis), vec![axis], Scalar::Int);
        if self.eager {
            let role = self.axes[axis].role;
            let all: Shape = self
                .axes
                .iter()
                .filter(|(_, a)| role == AxisRole::Reduced || a.role == AxisRole::Parallel)
                .map(|(id, _)| id)
                .collect();
            id = self.push(Op::Broadcast { value: id }, all, Scalar::Int);
        }
        self.ranges.insert(axis, id);
        id
    }

    fn const_int(&mut self, v: i64) -> ValueId {
        self.push(Op::ConstInt(v), Vec::new(), Scalar::Int)
    }

    fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> ValueId {
        let shape = self.union(&[a, b]);
        let scalar = match op {
            BinaryOp::Lt | BinaryOp::Ge | BinaryOp::And => Scalar::Bool,
            _ if self.scalar_of(a) == Scalar::Int && self.scalar_of(b) == Scalar::Int => Scalar::Int,
            _ => Scalar::Float,
        };
        self.push(Op::Binary(op, a, b), shape, scalar)
    }

    fn and(&mut self, a: Option<ValueId>, b: Option<ValueId>) -> Option<ValueId> {
        match (a, b) {
            (Some(a), Some(b)) => Some(self.binary(BinaryOp::And, a, b)),
            (a, b) => a.or(b),
        }
    }

    fn broadcast_to(&mut self, value: ValueId, shape: &[AxisId]) -> ValueId {
        let mut target: Shape = shape.to_vec();
        target.sort();
        target.dedup();
        if target == self.shape_of(value) {
            return value;
        }
        let scalar = self.scalar_of(value);
        self.push(Op::Broadcast { value }, target, scalar)
    }

    /// `range < extent` for an axis whose last tile is ragged.
    fn axis_mask(&mut self, axis: AxisId) -> Option<ValueId> {
        let a = &self.axes[axis];
        if !a.ragged() {
            return None;
        }
        let extent = a.extent as i64;
        let range = self.range(axis);
        let limit = self.const_int(extent);
        Some(self.binary(BinaryOp::Lt, range, limit))
    }

    /// `range < extent` over the axis alone, even under eager broadcasting.
    fn raw_axis_mask(&mut self, axis: AxisId) -> Option<ValueId> {
        let a = &self.axes[axis];
        if !a.ragged() {
            return None;
        }
        let extent = a.extent as i64;
        let range = self.push(Op::Range(axis), vec![axis], Scalar::Int);
        let limit = self.const_int(extent);
        Some(self.binary(BinaryOp::Lt, range, limit))
    }

    /// The masks of every ragged axis in a shape.
    fn shape_mask(&mut self, shape: &[AxisId]) -> Option<ValueId> {
        let mut mask = None;
        for &axis in shape {
            let m = self.axis_mask(axis);
            mask = self.and(mask, m);
        }
        mask
    }

    /// Σ coeff·atom + offset, as an integer tile.
    fn subscript(&mut self, s: &Subscript) -> ValueId {
        let mut sum: Option<ValueId> = None;
        for t in &s.terms {
            let atom = match &t.atom {
                Atom::Index(ident) => {
                    let axis = self.axis_id(&ident.name);
                    self.range(axis)
                }
                Atom::Indirect(x) => self.load(x),
            };
            let term = if t.coeff == 1 {
                atom
            } else {
                let c = self.const_int(t.coeff);
                self.binary(BinaryOp::Mul, c, atom)
            };
            sum = Some(match sum {
                None => term,
                Some(acc) => self.binary(BinaryOp::Add, acc, term),
            });
        }
        match (sum, s.offset) {
            (Some(v), 0) => v,
            (Some(v), o) => {
                let c = self.const_int(o);
                self.binary(BinaryOp::Add, v, c)
            }
            (None, o) => self.const_int(o),
        }
    }

    /// The index tiles of an access, the mask that keeps it in bounds, and
    /// the parallel axes that are a subscript on their own.
    fn position(&mut self, access: &Access) -> (Vec<ValueId>, Option<ValueId>, Vec<AxisId>) {
        let tensor = self.tensor_id(&access.tensor.name);
        let dims = self.tensors[tensor].shape.clone();
        let mut index = Vec::new();
        let mut bounds = None;
        let mut plain = Vec::new();
        for (s, &dim) in access.subscripts.iter().zip(&dims) {
            let v = self.subscript(s);
            index.push(v);
            // A lone index whose extent is the dimension, or a lone indirect
            // access (validated before the kernel runs), stays in bounds.
            let lone_index = s.as_index().map(|i| self.axis_id(&i.name));
            let lone_indirect = matches!(&s.terms[..], [t] if t.coeff == 1 && matches!(t.atom, Atom::Indirect(_)))
                && s.offset == 0;
            match lone_index {
                Some(axis) if self.axes[axis].extent == dim => {
                    if self.axes[axis].role == AxisRole::Parallel && !plain.contains(&axis) {
                        plain.push(axis);
                    }
                    continue;
                }
                _ if lone_indirect => continue,
                _ => {}
            }
            let zero = self.const_int(0);
            let limit = self.const_int(dim as i64);
            let low = self.binary(BinaryOp::Ge, v, zero);
            let high = self.binary(BinaryOp::Lt, v, limit);
            let inside = self.binary(BinaryOp::And, low, high);
            bounds = self.and(bounds, Some(inside));
        }
        let shape = self.union(&index);
        let axes_mask = self.shape_mask(&shape);
        let mask = self.and(axes_mask, bounds);
        (index, mask, plain)
    }

    fn load(&mut self, access: &Access) -> ValueId {
        let (index, mask, _) = self.position(access);
        let tensor = self.tensor_id(&access.tensor.name);
        let scalar = if self.tensors[tensor].dtype.is_index() { Scalar::Int } else { Scalar::Float };
        let mut operands = index.clone();
        operands.extend(mask);
        let shape = self.union(&operands);
        self.push(Op::Load { tensor, index, mask }, shape, scalar)
    }

    fn expr(&mut self, e: &Expr) -> ValueId {
        match e {
            Expr::Literal { value, .. } => self.push(Op::Const(F64Bits(*value)), Vec::new(), Scalar::Float),
            Expr::Access(a) => self.load(a),
            Expr::Neg { expr, .. } => {
                let v = self.expr(expr);
                let shape = self.shape_of(v);
                self.push(Op::Unary(UnaryOp::Neg, v), shape, Scalar::Float)
            }
            Expr::Binary { op, lhs, rhs, .. } => {
                let (a, b) = (self.expr(lhs), self.expr(rhs));
                let op = match op {
                    BinOp::Add => BinaryOp::Add,
                    BinOp::Sub => BinaryOp::Sub,
                    BinOp::Mul => BinaryOp::Mul,
                    BinOp::Div => BinaryOp::Div,
                };
                let v = self.binary(op, a, b);
                // Arithmetic on values is in floating point even when both
                // sides read integer tensors.
                self.values[v].scalar = Scalar::Float;
                v
            }
            Expr::Call { func, args, .. } => match args[..] {
                [ref x] => {
                    let v = self.expr(x);
                    let shape = self.shape_of(v);
                    self.push(Op::Unary(UnaryOp::Func(*func), v), shape, Scalar::Float)
                }
                [ref x, ref y] => {
                    // max(a, b) and min(a, b) are the binary functions.
                    let (a, b) = (self.expr(x), self.expr(y));
                    let op = if *func == crate::lang::Func::Max { BinaryOp::Max } else { BinaryOp::Min };
                    let v = self.binary(op, a, b);
                    self.values[v].scalar = Scalar::Float;
                    v
                }
                _ => unreachable!("the parser checks arity"),
            },
        }
    }
}
