//! What the printer decides before it writes a line: who uses each value,
//! which values are inlined into their consumer and which get a shared
//! tile, the layout (axis order) of every tile, which `dot`s run on Tensor
//! Cores and how, where the accumulator lives, and the block size.

use std::collections::BTreeSet;

use spindle_ir::formats::DType;
use spindle_ir::kernel::*;
use spindle_ir::lang::ElemType;

use super::PrintOptions;

/// The element type of a Tensor Core product's operands (accumulation is
/// always in f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fragment {
    /// `__half` operands, 16x16x16.
    Half,
    /// `__nv_bfloat16` operands, 16x16x16.
    Bf16,
    /// f32 operands rounded to tf32, 16x16x8.
    Tf32,
}

impl Fragment {
    /// The operand type in CUDA C++ (the shared tile's element type).
    pub fn storage(self) -> &'static str {
        match self {
            Fragment::Half => "__half",
            Fragment::Bf16 => "__nv_bfloat16",
            Fragment::Tf32 => "float",
        }
    }

    /// The WMMA fragment's element type.
    pub(crate) fn wmma_type(self) -> &'static str {
        match self {
            Fragment::Half => "__half",
            Fragment::Bf16 => "__nv_bfloat16",
            Fragment::Tf32 => "wmma::precision::tf32",
        }
    }

    /// The K extent of one matrix instruction.
    pub fn k_step(self) -> usize {
        match self {
            Fragment::Half | Fragment::Bf16 => 16,
            Fragment::Tf32 => 8,
        }
    }

    pub(crate) fn bytes(self) -> usize {
        match self {
            Fragment::Half | Fragment::Bf16 => 2,
            Fragment::Tf32 => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fragment::Half => "f16",
            Fragment::Bf16 => "bf16",
            Fragment::Tf32 => "tf32",
        }
    }
}

/// A product on Tensor Cores: `root[batch, m, n] = Σ_k a[batch, m, k] *
/// b[batch, k, n]`, where `root` is the `dot` itself or a sum over one more
/// of its batch axes that it absorbed (the in-group axis `q` of a
/// BlockGroupCOO product joins the block's `bj` in K). Axes whose tile is 1
/// are left out of `batch`, `m`, `n` and `k`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Matmul {
    pub root: ValueId,
    pub dot: ValueId,
    /// The `dot` and the sums between it and `root`: not printed on their own.
    pub absorbed: Vec<ValueId>,
    pub a: ValueId,
    pub b: ValueId,
    pub batch: Vec<AxisId>,
    pub m: Vec<AxisId>,
    pub n: Vec<AxisId>,
    pub k: Vec<AxisId>,
    pub fragment: Fragment,
    /// The product accumulates straight into the accumulator's fragments.
    pub into_acc: bool,
}

/// How an operand of a Tensor Core product is staged: in the fragment's
/// type, with the product's masks applied (masked-off terms are zeros).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Stage {
    pub fragment: Fragment,
    pub masks: Vec<ValueId>,
}

/// A reduction printed as one loop nest: `top` folds the product of
/// `factors` over `axes` (outermost first), each with its mask. A sum over
/// `q` of a dot over `r` is one chain over (q, r): the dot is not
/// materialized.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Chain {
    pub reduction: Reduction,
    pub factors: Vec<ValueId>,
    pub axes: Vec<(AxisId, Option<ValueId>)>,
}

/// Where the accumulator lives during the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccPlan {
    None,
    /// `acc[k]` in registers: thread `t` owns elements `t + k * threads`.
    Registers,
    /// WMMA accumulator fragments of the matmul with this index.
    Fragments(usize),
}

#[derive(Debug)]
pub(crate) struct Plan {
    /// Who reads each value, and when (the kernel IR's analysis).
    pub uses: Uses,
    pub inline: SecondaryMap<ValueId, bool>,
    /// The axis order of each value's tile (row-major, last fastest).
    pub layout: SecondaryMap<ValueId, Vec<AxisId>>,
    pub matmuls: Vec<Matmul>,
    /// Dots printed as FMA loops, with the reason.
    pub fallbacks: Vec<(ValueId, String)>,
    /// The matmul a value is the root of.
    pub root_of: SecondaryMap<ValueId, Option<usize>>,
    pub absorbed: SecondaryMap<ValueId, bool>,
    /// The FMA loop nest of each reduction printed on its own.
    pub chain: SecondaryMap<ValueId, Option<Chain>>,
    pub stage: SecondaryMap<ValueId, Option<Stage>>,
    /// Elements added to the rows of a staged operand's shared tile (16
    /// bytes): with a row pitch of 64 bytes every row of a fragment load
    /// starts on the same banks (4-way conflicts for `ldmatrix`); with 80,
    /// eight rows cover all 32 banks once.
    pub pad: SecondaryMap<ValueId, usize>,
    pub acc: AccPlan,
    pub acc_layout: Vec<AxisId>,
    /// The sink reads `acc[k]` from registers (no shared copy).
    pub sink_from_registers: bool,
    /// The order the sink visits its elements: the output's contiguous axis
    /// fastest, so consecutive threads write consecutive addresses.
    pub sink_order: Vec<AxisId>,
    pub threads: u32,
}

fn sorted(shape: &[AxisId]) -> Vec<AxisId> {
    axis_set(shape.iter().copied())
}

impl Plan {
    pub fn new(k: &Kernel, opts: &PrintOptions) -> Plan {
        let n = k.values.len();
        let uses = Uses::of(k);
        let sink = &k.sink;
        let acc_value = k.order.iter().copied().find(|&id| matches!(k.value(id).op, Op::Accumulator));

        let layout = k.values.iter().map(|(id, v)| (id, default_order(k, &v.shape))).collect();
        let mut plan = Plan {
            uses,
            inline: SecondaryMap::with_capacity(n),
            layout,
            matmuls: Vec::new(),
            fallbacks: Vec::new(),
            root_of: SecondaryMap::with_capacity(n),
            absorbed: SecondaryMap::with_capacity(n),
            chain: SecondaryMap::with_capacity(n),
            stage: SecondaryMap::with_capacity(n),
            pad: SecondaryMap::with_capacity(n),
            acc: AccPlan::None,
            acc_layout: Vec::new(),
            sink_from_registers: false,
            sink_order: Vec::new(),
            threads: 32,
        };
        plan.sink_order = contiguous_order(k, &plan.uses.sink_shape, sink.index.last().copied());
        // A Sgap group's lanes hold consecutive elements along its axis.
        if let Some(g) = sink.group {
            plan.sink_order.retain(|&a| a != g.axis);
            plan.sink_order.push(g.axis);
        }

        // Tensor Core products.
        let mut fixed: SecondaryMap<ValueId, bool> = SecondaryMap::with_capacity(n);
        for &id in &k.order {
            if !matches!(k.value(id).op, Op::Dot { .. }) {
                continue;
            }
            if !opts.tensor_cores {
                plan.fallbacks.push((id, "Tensor Cores are off in the print options".to_string()));
                continue;
            }
            match plan.matmul(k, id, opts, &fixed) {
                Ok(mm) => {
                    let units = |v: ValueId| -> Vec<AxisId> {
                        k.value(v).shape.iter().copied().filter(|&a| k.axis(a).tile == 1).collect()
                    };
                    let cat = |parts: &[&[AxisId]]| -> Vec<AxisId> { parts.concat() };
                    plan.layout[mm.a] = cat(&[&units(mm.a), &mm.batch, &mm.m, &mm.k]);
                    plan.layout[mm.b] = cat(&[&units(mm.b), &mm.batch, &mm.k, &mm.n]);
                    plan.layout[mm.root] = cat(&[&units(mm.root), &mm.batch, &mm.m, &mm.n]);
                    for v in [mm.a, mm.b, mm.root] {
                        fixed[v] = true;
                    }
                    let index = plan.matmuls.len();
                    plan.root_of[mm.root] = Some(index);
                    for &x in &mm.absorbed {
                        plan.absorbed[x] = true;
                    }
                    plan.matmuls.push(mm);
                }
                Err(reason) => plan.fallbacks.push((id, reason)),
            }
        }

        // Padded operand rows, where a row of the tile is the product's
        // whole K (of `a`) or N (of `b`), so fragment pointers stay rows.
        for mm in &plan.matmuls {
            let (_, _, n, kk) = mm.dims(k);
            for (v, width) in [(mm.a, kk), (mm.b, n)] {
                let Some(stage) = &plan.stage[v] else { continue };
                if plan.layout[v].last().map(|&a| k.axis(a).tile) == Some(width) {
                    plan.pad[v] = 16 / stage.fragment.bytes();
                }
            }
        }

        // FMA reductions: a sum of a sum is one loop nest.
        for &id in &k.order {
            if plan.absorbed[id] || plan.root_of[id].is_some() || plan.chain[id].is_some() {
                continue;
            }
            let (reduction, factors, axis, mask) = match k.value(id).op {
                Op::Reduce { reduction, value, axis, mask } => (reduction, vec![value], axis, mask),
                Op::Dot { a, b, axis, mask } => (Reduction::Sum, vec![a, b], axis, mask),
                _ => continue,
            };
            let mut top = id;
            let mut axes = vec![(axis, mask)];
            while let [User::Value(user)] = plan.uses.users[top][..]
                && let Op::Reduce { reduction: r, value, axis: q, mask } = k.value(user).op
                && r == reduction
                && value == top
                && plan.uses.phases[user] == plan.uses.phases[top]
                && plan.root_of[user].is_none()
            {
                plan.absorbed[top] = true;
                top = user;
                axes.insert(0, (q, mask));
            }
            plan.chain[top] = Some(Chain { reduction, factors, axes });
        }

        // Inlining. Index and mask arithmetic is recomputed where it is
        // used while that costs at most `RECOMPUTE` operations and shared
        // reads: a tile and a barrier cost more. Loads never are: a
        // gathered index like `E[r]` is read from memory once per tile.
        const RECOMPUTE: usize = 8;
        plan.inline = plan.uses.inline(k, RECOMPUTE, |id| {
            plan.stage[id].is_some() || plan.root_of[id].is_some() || plan.absorbed[id]
        });

        // The accumulator.
        if let Some(acc) = &k.accumulate {
            if let Some(i) = plan.matmuls.iter().position(|m| m.into_acc) {
                plan.acc = AccPlan::Fragments(i);
                plan.acc_layout = plan.layout[plan.matmuls[i].root].clone();
            } else {
                plan.acc = AccPlan::Registers;
                // The sink reads `acc[k]` when it visits the accumulator's
                // elements and reads each once, through inlined values.
                let shape = sorted(&acc.shape);
                let direct = plan.uses.sink_shape == shape
                    && acc_value.is_some_and(|av| {
                        let mut cur = av;
                        loop {
                            match plan.uses.users[cur][..] {
                                [User::Sink] => {
                                    break !sink.index.contains(&cur) && sink.mask != Some(cur);
                                }
                                [User::Value(u)] if plan.inline[u] && sorted(&k.value(u).shape) == shape => {
                                    cur = u
                                }
                                _ => break false,
                            }
                        }
                    });
                plan.sink_from_registers = direct;
                plan.acc_layout = if direct { plan.sink_order.clone() } else { default_order(k, &acc.shape) };
            }
            if let Some(av) = acc_value {
                plan.layout[av] = plan.acc_layout.clone();
            }
        }

        // Threads: one per element of the largest tile the block fills
        // (inlined values are computed by their consumer's threads), 32 to
        // 256.
        let mut largest = k.tile_elements(&plan.uses.sink_shape);
        if let Some(acc) = &k.accumulate {
            largest = largest.max(k.tile_elements(&acc.shape));
        }
        for &id in &k.order {
            if !plan.inline[id] && !plan.absorbed[id] && plan.root_of[id].is_none() {
                largest = largest.max(k.tile_elements(&k.value(id).shape));
            }
        }
        for mm in &plan.matmuls {
            largest = largest.max(mm.items(k) * 32);
        }
        let mut threads = largest.next_power_of_two().clamp(32, 256);
        // At most 32 accumulator registers per thread while threads remain.
        if let (AccPlan::Registers, Some(acc)) = (plan.acc, &k.accumulate) {
            while k.tile_elements(&acc.shape).div_ceil(threads) > 32 && threads < 1024 {
                threads *= 2;
            }
        }
        plan.threads = opts.threads.unwrap_or(threads as u32);
        plan
    }

    /// A Tensor Core product for `dot`, or why there is none.
    fn matmul(
        &mut self,
        k: &Kernel,
        dot: ValueId,
        opts: &PrintOptions,
        fixed: &SecondaryMap<ValueId, bool>,
    ) -> Result<Matmul, String> {
        let Op::Dot { a, b, axis, mask } = k.value(dot).op else { unreachable!("a dot") };
        if a == b {
            return Err("both operands are one value".to_string());
        }
        for v in [a, b] {
            if matches!(k.value(v).op, Op::Accumulator) {
                return Err("an operand is the accumulator".to_string());
            }
            if self.stage[v].is_some() {
                return Err(format!("operand {v} is staged for another product"));
            }
        }
        let (sa, sb) = (&k.value(a).shape, &k.value(b).shape);
        // Absorb sums over further axes both operands share.
        let mut root = dot;
        let mut ks = vec![axis];
        let mut masks: Vec<ValueId> = mask.into_iter().collect();
        let mut absorbed = Vec::new();
        while let [User::Value(user)] = self.uses.users[root][..]
            && let Op::Reduce { reduction: Reduction::Sum, value, axis: q, mask } = k.value(user).op
            && value == root
            && sa.contains(&q)
            && sb.contains(&q)
            && !ks.contains(&q)
        {
            absorbed.push(root);
            root = user;
            ks.insert(0, q);
            masks.extend(mask);
        }
        let fragment = fragment(k, a, b, opts)?;
        let unit = |x: &AxisId| k.axis(*x).tile == 1;
        let na: Vec<AxisId> = sa.iter().copied().filter(|x| !unit(x)).collect();
        let nb: Vec<AxisId> = sb.iter().copied().filter(|x| !unit(x)).collect();
        let kk: Vec<AxisId> = ks.iter().copied().filter(|x| !unit(x)).collect();
        let batch: Vec<AxisId> = na.iter().copied().filter(|x| nb.contains(x) && !kk.contains(x)).collect();
        let m: Vec<AxisId> = na.iter().copied().filter(|x| !nb.contains(x)).collect();
        let n: Vec<AxisId> = nb.iter().copied().filter(|x| !na.contains(x)).collect();
        let extent = |axes: &[AxisId]| -> usize { axes.iter().map(|&x| k.axis(x).tile).product() };
        let root_shape: Vec<AxisId> = k.value(root).shape.iter().copied().filter(|x| !unit(x)).collect();
        if sorted(&root_shape) != axis_set(batch.iter().chain(&m).chain(&n).copied()) {
            return Err("the result has axes neither operand has".to_string());
        }
        let (mm, nn, kx) = (extent(&m), extent(&n), extent(&kk));
        if m.is_empty() || n.is_empty() || !mm.is_multiple_of(16) || !nn.is_multiple_of(16) {
            return Err(format!("the product is {mm}x{nn} per batch element, not a multiple of 16x16"));
        }
        if kk.is_empty() || !kx.is_multiple_of(fragment.k_step()) {
            return Err(format!("K is {kx}, not a multiple of {}", fragment.k_step()));
        }
        for v in [a, b, root] {
            if fixed[v] {
                return Err(format!("the layout of {v} is already fixed by another product"));
            }
        }
        // Masked-off terms are zero operands: each mask goes into every
        // operand that varies over all its axes.
        let mut stage_a = Stage { fragment, masks: Vec::new() };
        let mut stage_b = Stage { fragment, masks: Vec::new() };
        for &msk in &masks {
            let ms = &k.value(msk).shape;
            let mut placed = false;
            for (v, stage) in [(a, &mut stage_a), (b, &mut stage_b)] {
                if ms.iter().all(|x| k.value(v).shape.contains(x)) {
                    if self.uses.users[v].len() != 1 {
                        return Err(format!("operand {v} is masked for the product but used elsewhere too"));
                    }
                    stage.masks.push(msk);
                    placed = true;
                }
            }
            if !placed {
                return Err(format!("mask {msk} varies over axes neither operand has"));
            }
        }
        self.stage[a] = Some(stage_a);
        self.stage[b] = Some(stage_b);
        let into_acc =
            k.accumulate.as_ref().is_some_and(|acc| acc.partial == root && acc.reduction == Reduction::Sum);
        Ok(Matmul { root, dot, absorbed, a, b, batch, m, n, k: kk, fragment, into_acc })
    }
}

impl Matmul {
    pub fn dims(&self, k: &Kernel) -> (usize, usize, usize, usize) {
        let extent = |axes: &[AxisId]| -> usize { axes.iter().map(|&x| k.axis(x).tile).product() };
        (extent(&self.batch), extent(&self.m), extent(&self.n), extent(&self.k))
    }

    /// 16x16 output fragments over the batch.
    pub fn items(&self, k: &Kernel) -> usize {
        let (batch, m, n, _) = self.dims(k);
        batch * (m / 16) * (n / 16)
    }
}

/// The operand type of a product: the element type every value tensor
/// feeding either operand shares (f16 or bf16; f32 when tf32 is allowed).
fn fragment(k: &Kernel, a: ValueId, b: ValueId, opts: &PrintOptions) -> Result<Fragment, String> {
    let mut sources = BTreeSet::new();
    float_sources(k, a, &mut sources);
    float_sources(k, b, &mut sources);
    let names: Vec<&str> = sources.iter().copied().collect();
    match names[..] {
        ["f16"] => Ok(Fragment::Half),
        ["bf16"] => Ok(Fragment::Bf16),
        ["f32"] if opts.tf32 => Ok(Fragment::Tf32),
        ["f32"] => Err("the operands are f32 and tf32 is not allowed".to_string()),
        [] => Err("the operands read no value tensor".to_string()),
        _ => Err(format!("the operands mix {}", names.join(" and "))),
    }
}

/// The element types of the value tensors a float value is computed from
/// (not counting index arithmetic). Reductions and the accumulator count
/// as f32: their results are wider than half types.
fn float_sources(k: &Kernel, id: ValueId, out: &mut BTreeSet<&'static str>) {
    let v = k.value(id);
    if v.scalar != Scalar::Float {
        return;
    }
    match &v.op {
        Op::Load { tensor, .. } => {
            let name = match k.tensor(*tensor).dtype {
                ElemType::Value(d) => d.name(),
                ElemType::Index(_) => "f32",
            };
            out.insert(name);
        }
        Op::Reduce { .. } | Op::Dot { .. } | Op::Accumulator => {
            out.insert(if k.tensors.values().any(|t| t.dtype == ElemType::Value(DType::F64)) {
                "f64"
            } else {
                "f32"
            });
        }
        _ => {
            for o in k.operands(id) {
                float_sources(k, o, out);
            }
        }
    }
}

/// The tile layout of a shape when nothing asks for another: the parallel
/// axes but the innermost, the reduced axes, then the innermost parallel
/// axis (usually the contiguous one, the dense column of an SpMM), as the C
/// printer lays out its arrays.
pub(crate) fn default_order(k: &Kernel, shape: &[AxisId]) -> Vec<AxisId> {
    let shape = sorted(shape);
    let parallel: Vec<AxisId> =
        shape.iter().copied().filter(|&a| k.axis(a).role == AxisRole::Parallel).collect();
    let reduced = shape.iter().copied().filter(|&a| k.axis(a).role == AxisRole::Reduced);
    match parallel.split_last() {
        Some((last, rest)) => rest.iter().copied().chain(reduced).chain([*last]).collect(),
        None => reduced.collect(),
    }
}

/// The order to visit a shape's elements in when they address a tensor
/// through `last_index` (the index tile of its last, contiguous dimension):
/// the default order with the last axis that index varies over moved last,
/// so consecutive threads touch consecutive addresses.
pub(crate) fn contiguous_order(k: &Kernel, shape: &[AxisId], last_index: Option<ValueId>) -> Vec<AxisId> {
    let mut order = default_order(k, shape);
    if let Some(ix) = last_index {
        let varies = &k.value(ix).shape;
        if let Some(pos) = order.iter().rposition(|a| varies.contains(a) && k.axis(*a).tile > 1) {
            let a = order.remove(pos);
            order.push(a);
        }
    }
    order
}

impl Plan {
    /// The plan as text, one decision per line: the block size, then every
    /// value (its IR line, then whether it is inlined or gets a tile in
    /// which layout and phase, who reads it, how a product's operand is
    /// staged, which FMA loop nest a reduction is), the Tensor Core
    /// products and the dots left on CUDA cores with the reason, where the
    /// accumulator lives and the order the sink visits its elements.
    pub fn describe(&self, k: &Kernel) -> String {
        let axes = |s: &[AxisId]| -> String {
            let names: Vec<&str> = s.iter().map(|&a| k.axis(a).name.as_str()).collect();
            format!("[{}]", names.join(","))
        };
        let user = |u: &User| match u {
            User::Value(v) => v.to_string(),
            User::Sink => "sink".to_string(),
            User::Fold => "fold".to_string(),
        };
        let mut out = format!("threads {}\n", self.threads);
        for &id in &k.order {
            let mut notes = Vec::new();
            if let Some(i) = self.root_of[id] {
                notes.push(format!("matmul {i}"));
            } else if self.absorbed[id] {
                notes.push("absorbed".to_string());
            } else if self.inline[id] {
                notes.push("inline".to_string());
            } else {
                notes.push(format!("tile {}", axes(&self.layout[id])));
            }
            notes.push(format!("{:?}", self.uses.phases[id]).to_lowercase());
            let readers: Vec<String> = self.uses.users[id].iter().map(user).collect();
            if !readers.is_empty() {
                notes.push(format!("read by {}", readers.join(" ")));
            }
            if let Some(stage) = &self.stage[id] {
                let masks: Vec<String> = stage.masks.iter().map(|m| m.to_string()).collect();
                let masked =
                    if masks.is_empty() { String::new() } else { format!(" masked by {}", masks.join(" ")) };
                notes.push(format!("staged as {}{masked}", stage.fragment.name()));
                if self.pad[id] > 0 {
                    notes.push(format!("rows padded by {}", self.pad[id]));
                }
            }
            if let Some(chain) = &self.chain[id] {
                let over: Vec<AxisId> = chain.axes.iter().map(|&(a, _)| a).collect();
                let factors: Vec<String> = chain.factors.iter().map(|f| f.to_string()).collect();
                notes.push(format!(
                    "FMA loop: {} over {} of {}",
                    chain.reduction.name(),
                    axes(&over),
                    factors.join(" * ")
                ));
            }
            out += &format!("{}  ; {}\n", k.value_line(id), notes.join(", "));
        }
        for (i, mm) in self.matmuls.iter().enumerate() {
            let (batch, m, n, kk) = mm.dims(k);
            out += &format!(
                "matmul {i}: {} = {} x {} on Tensor Cores ({}), batch {} m {} n {} k {}: {batch} x {m}x{n}x{kk}{}\n",
                mm.root,
                mm.a,
                mm.b,
                mm.fragment.name(),
                axes(&mm.batch),
                axes(&mm.m),
                axes(&mm.n),
                axes(&mm.k),
                if mm.into_acc { ", into the accumulator" } else { "" }
            );
        }
        for (dot, reason) in &self.fallbacks {
            out += &format!("dot {dot} on CUDA cores: {reason}\n");
        }
        out += &match self.acc {
            AccPlan::None => "accumulator: none\n".to_string(),
            AccPlan::Registers => format!(
                "accumulator: registers, layout {}{}\n",
                axes(&self.acc_layout),
                if self.sink_from_registers {
                    ", read by the sink from registers"
                } else {
                    ", copied to shared"
                }
            ),
            AccPlan::Fragments(i) => {
                format!("accumulator: fragments of matmul {i}, layout {}\n", axes(&self.acc_layout))
            }
        };
        out += &format!(
            "sink: {} phase, visits {} in order {}\n",
            format!("{:?}", self.uses.sink_phase).to_lowercase(),
            axes(&self.uses.sink_shape),
            axes(&self.sink_order)
        );
        out
    }
}
