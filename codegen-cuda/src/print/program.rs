//! The kernel function: its signature and shared arrays, one program's
//! values, the loop over reduced tiles and the fold into the accumulator.

use std::collections::BTreeSet;

use spindle_c::dialect::{Dialect, Scope};
use spindle_ir::formats::DType;
use spindle_ir::kernel::*;
use spindle_ir::lang::ElemType;

use super::*;

impl Printer<'_> {
    pub(super) fn print(mut self, symbol: &str) -> Result<CudaKernel, PrintError> {
        let k = self.k;
        let programs: u64 = k.parallel_axes().iter().map(|&a| k.axis(a).tiles() as u64).product();
        if programs > i32::MAX as u64 {
            return Err(PrintError::Grid { kernel: k.name.clone(), programs });
        }
        let mut arrays = self.shared_arrays();
        let static_bytes = |arrays: &[SharedArray]| -> usize { arrays.iter().map(|a| a.bound()).sum() };
        // Padded rows only where static memory still holds them, or where
        // the tiles need dynamic memory anyway.
        if static_bytes(&arrays) > MAX_STATIC_SHARED_BYTES && self.p.pad.values().any(|&p| p > 0) {
            let pads = std::mem::take(&mut self.p.pad);
            let unpadded = self.shared_arrays();
            if static_bytes(&unpadded) <= MAX_STATIC_SHARED_BYTES {
                arrays = unpadded;
            } else {
                self.p.pad = pads;
            }
        }
        // Over 48 KB the arrays live in dynamic shared memory, laid out here
        // (the launch asks for it and raises the kernel's limit).
        let dynamic = static_bytes(&arrays) > MAX_STATIC_SHARED_BYTES;
        if dynamic {
            // Laid out by name: the same kernel parsed back from its text
            // (whose body may list values in another order) prints the same.
            arrays.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let bytes = if dynamic { dynamic_layout(&arrays).1 } else { static_bytes(&arrays) };
        let limit = if dynamic { MAX_DYNAMIC_SHARED_BYTES } else { MAX_STATIC_SHARED_BYTES };
        if bytes > limit {
            let mut list: Vec<(String, usize)> = arrays.iter().map(|a| (a.name.clone(), a.bytes)).collect();
            list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            return Err(PrintError::SharedMemory { kernel: k.name.clone(), bytes, limit, arrays: list });
        }
        let launch = LaunchGeometry {
            // An empty iteration space launches nothing (the runtime and the
            // emulator skip a grid of 0): one block would run a tile whose
            // loads are unmasked where the tile divides the extent.
            grid: programs as u32,
            block: self.p.threads,
            shared_bytes: bytes,
            dynamic,
        };
        let dots = self.dot_reports();

        self.line(0, &format!("// Spindle kernel `{}`, generated: do not edit.", k.name));
        for line in format!("{k}").lines() {
            self.line(0, &format!("// {line}"));
        }
        // Static arrays' bytes are a bound: ptxas may lay them out tighter.
        let memory = if launch.dynamic { "dynamic shared memory" } else { "static shared memory at most" };
        self.line(
            0,
            &format!(
                "// launch: grid {}, block {}, {memory} {} bytes",
                launch.grid, launch.block, launch.shared_bytes
            ),
        );
        for d in &dots {
            self.line(0, &format!("// dot {}: {}", d.dot, d.path));
        }
        let halves = k.tensors.values().any(|t| matches!(t.dtype, ElemType::Value(DType::F16 | DType::Bf16)));
        if halves || !self.p.matmuls.is_empty() {
            self.line(0, "#include <cuda_fp16.h>");
            self.line(0, "#include <cuda_bf16.h>");
        }
        if !self.p.matmuls.is_empty() {
            self.line(0, "#include <mma.h>");
            self.line(0, "namespace wmma = nvcuda::wmma;");
        }
        if dynamic {
            // The emulation defines it as a function static.
            self.line(0, "#ifndef SPINDLE_DYNAMIC_SHARED");
            self.line(
                0,
                "#define SPINDLE_DYNAMIC_SHARED(name, bytes) extern __shared__ __align__(128) unsigned char name[]",
            );
            self.line(0, "#endif");
        }
        self.line(0, "");
        self.atomic_helpers();

        let params: Vec<String> = k
            .tensors
            .iter()
            .map(|(id, t)| {
                let ty = cuda_type(t.dtype);
                let constness = if t.output { "" } else { "const " };
                format!("{constness}{ty} *__restrict__ {}", self.names.tensors[id])
            })
            .collect();
        self.line(
            0,
            &format!("extern \"C\" __global__ void __launch_bounds__({}) {symbol}(", self.p.threads),
        );
        let n = params.len();
        for (i, p) in params.into_iter().enumerate() {
            let end = if i + 1 == n { ") {" } else { "," };
            self.line(2, &format!("{p}{end}"));
        }
        if n == 0 {
            self.line(2, ") {");
        }
        if dynamic {
            self.line(1, &format!("SPINDLE_DYNAMIC_SHARED(spindle_smem, {bytes});"));
            let (offsets, _) = dynamic_layout(&arrays);
            for (a, offset) in arrays.iter().zip(offsets) {
                let (ty, name, dims) = (&a.ty, &a.name, &a.dims);
                self.line(
                    1,
                    &format!(
                        "{ty} (&{name}){dims} = *reinterpret_cast<{ty} (*){dims}>(spindle_smem + {offset});"
                    ),
                );
            }
        } else {
            for a in &arrays {
                let align = if a.align { "__align__(32) " } else { "" };
                self.line(1, &format!("__shared__ {align}{} {}{};", a.ty, a.name, a.dims));
            }
        }
        if !self.p.matmuls.is_empty() {
            self.line(1, "const int warp = threadIdx.x / 32;");
        }
        // The program's tile of each parallel axis, last fastest.
        let parallel = k.parallel_axes();
        if !parallel.is_empty() {
            self.line(1, "unsigned pid = blockIdx.x;");
            for (pos, &a) in parallel.iter().enumerate().rev() {
                let t = self.tile_var(a);
                if pos == 0 {
                    self.line(1, &format!("const int {t} = pid;"));
                } else if k.axis(a).tiles() == 1 {
                    self.line(1, &format!("const int {t} = 0;"));
                } else {
                    let tiles = k.axis(a).tiles();
                    self.line(1, &format!("const int {t} = pid % {tiles};"));
                    self.line(1, &format!("pid /= {tiles};"));
                }
            }
        }
        self.program(1);
        self.line(0, "}");
        Ok(CudaKernel { dots, ..CudaKernel::plain(symbol, self.out, launch) })
    }

    pub(super) fn dot_reports(&self) -> Vec<DotReport> {
        let k = self.k;
        let mut out = Vec::new();
        for &id in &k.order {
            if !matches!(k.value(id).op, Op::Dot { .. }) {
                continue;
            }
            let path = if let Some(mm) = self.p.matmuls.iter().find(|m| m.dot == id) {
                let (batch, m, n, kk) = mm.dims(k);
                DotPath::TensorCores {
                    fragment: mm.fragment,
                    batch,
                    m,
                    n,
                    k: kk,
                    into_accumulator: mm.into_acc,
                }
            } else {
                let reason = self.p.fallbacks.iter().find(|(d, _)| *d == id).map(|(_, r)| r.clone());
                DotPath::Fma { reason: reason.unwrap_or_default() }
            };
            out.push(DotReport { dot: id, path });
        }
        out
    }

    /// Every shared array.
    pub(super) fn shared_arrays(&self) -> Vec<SharedArray> {
        let k = self.k;
        let mut out = Vec::new();
        for &id in &k.order {
            if !self.has_array(id) {
                continue;
            }
            let v = k.value(id);
            let (ty, size, align) = if let Some(stage) = &self.p.stage[id] {
                (stage.fragment.storage(), stage.fragment.bytes(), true)
            } else if self.p.root_of[id].is_some() {
                ("float", 4, true)
            } else {
                match v.scalar {
                    Scalar::Float => (self.d.real, if self.d.real == "double" { 8 } else { 4 }, false),
                    Scalar::Int => (self.d.int_type(), if self.d.wide { 8 } else { 4 }, false),
                    Scalar::Bool => ("bool", 1, false),
                }
            };
            let name = self.names.values[id].clone();
            out.push(self.declaration(&name, ty, size, align, &self.p.layout[id], self.p.pad[id]));
        }
        let acc_copy = match self.p.acc {
            AccPlan::Fragments(_) => true,
            AccPlan::Registers => !self.p.sink_from_registers,
            AccPlan::None => false,
        };
        if acc_copy {
            let fragments = matches!(self.p.acc, AccPlan::Fragments(_));
            let (ty, size) = if fragments || self.d.real == "float" { ("float", 4) } else { ("double", 8) };
            out.push(self.declaration("acc_s", ty, size, fragments, &self.p.acc_layout, 0));
        }
        out
    }

    pub(super) fn declaration(
        &self,
        name: &str,
        ty: &str,
        size: usize,
        align: bool,
        layout: &[AxisId],
        pad: usize,
    ) -> SharedArray {
        let last = layout.len().saturating_sub(1);
        let dims: String = if layout.is_empty() {
            "[1]".to_string()
        } else {
            let padded = |i: usize, a: AxisId| self.tile(a) + if i == last { pad } else { 0 };
            layout.iter().enumerate().map(|(i, &a)| format!("[{}]", padded(i, a))).collect()
        };
        let rows = self.elements(layout) / layout.last().map_or(1, |&a| self.tile(a));
        let n = (self.elements(layout) + rows * pad).max(1);
        SharedArray { name: name.to_string(), ty: ty.to_string(), dims, bytes: n * size, elem: size, align }
    }

    /// One program: its values, the loop over reduced tiles, the sink.
    pub(super) fn program(&mut self, depth: usize) {
        let k = self.k;
        let in_phase = |p: &Printer, phase: Phase| -> Vec<ValueId> {
            k.order.iter().copied().filter(|&id| p.p.uses.phases[id] == phase).collect()
        };
        for id in in_phase(self, Phase::Program) {
            self.emit(depth, id);
        }
        let reduced = k.reduced_axes();
        // The accumulator.
        match self.p.acc {
            AccPlan::None => {}
            AccPlan::Registers => {
                let acc = k.accumulate.as_ref().expect("an accumulator");
                let n = self.elements(&acc.shape);
                let per = n.div_ceil(self.threads());
                let identity = self.d.float(acc.reduction.identity());
                self.line(depth, &format!("{} acc[{per}];", self.d.real));
                self.line(depth, "#pragma unroll");
                self.line(depth, &format!("for (int k = 0; k < {per}; k++) acc[k] = {identity};"));
            }
            AccPlan::Fragments(m) => {
                let mm = self.p.matmuls[m].clone();
                let per = self.fragments_per_warp(&mm);
                let ks = mm.fragment.k_step();
                self.line(
                    depth,
                    &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, float> acc_f[{per}];"),
                );
                self.line(depth, "#pragma unroll");
                self.line(
                    depth,
                    &format!("for (int j = 0; j < {per}; j++) wmma::fill_fragment(acc_f[j], 0.0f);"),
                );
            }
        }
        if !reduced.is_empty() {
            let before = (self.pending_reads.clone(), self.pending_writes.clone());
            self.body = Some(Vec::new());
            let mut d = depth;
            for &r in &reduced {
                let (t, tiles) = (self.tile_var(r), k.axis(r).tiles());
                self.line(d, &format!("for (int {t} = 0; {t} < {tiles}; {t}++) {{"));
                d += 1;
            }
            for id in in_phase(self, Phase::Loop) {
                self.emit(d, id);
            }
            if let Some(acc) = k.accumulate.as_ref().filter(|a| !self.folds_into_acc(a.partial)) {
                let (partial, reduction, shape) = (acc.partial, acc.reduction, acc.shape.clone());
                let reads = self.reads_of(&[partial]);
                self.step(d, reads, BTreeSet::new());
                let n = self.elements(&shape);
                let inner = self.open_owned(d, n);
                let layout = self.p.acc_layout.clone();
                self.decode(inner, &layout);
                let update = self.d.fold(reduction, "acc[k]", &self.elem(partial));
                self.line(inner, &update);
                self.close_owned(inner, d);
            }
            if self.p.uses.sink_phase == Phase::Loop {
                self.sink(d);
            }
            // The next iteration starts from this one's pending accesses: a
            // barrier at the end of the body when one of its steps before
            // its first barrier would conflict with them.
            let body = self.body.take().unwrap_or_default();
            let trips: usize = reduced.iter().map(|&r| k.axis(r).tiles()).product();
            let (mut reads, mut writes) = (self.pending_reads.clone(), self.pending_writes.clone());
            let mut hazard = false;
            for (r, w, barrier_before) in body {
                if barrier_before {
                    break;
                }
                if r.iter().any(|a| writes.contains(a))
                    || w.iter().any(|a| writes.contains(a) || reads.contains(a))
                {
                    hazard = true;
                    break;
                }
                reads.extend(r);
                writes.extend(w);
            }
            if hazard && trips > 1 {
                self.barrier(d);
            }
            for &r in reduced.iter().rev() {
                d -= 1;
                self.line(d, &format!("}} // loop {}", k.axis(r).name));
            }
            if trips == 0 {
                self.pending_reads.extend(before.0);
                self.pending_writes.extend(before.1);
            }
        }
        // The accumulator's copy for the epilogue.
        match self.p.acc {
            AccPlan::Registers if !self.p.sink_from_registers => {
                let acc = k.accumulate.as_ref().expect("an accumulator");
                let n = self.elements(&acc.shape);
                self.step(depth, BTreeSet::new(), BTreeSet::from([Arr::Acc]));
                let inner = self.open_owned(depth, n);
                let layout = self.p.acc_layout.clone();
                self.decode(inner, &layout);
                let target = self.at("acc_s", &layout);
                self.line(inner, &format!("{target} = acc[k];"));
                self.close_owned(inner, depth);
            }
            AccPlan::Fragments(m) => {
                let mm = self.p.matmuls[m].clone();
                self.step(depth, BTreeSet::new(), BTreeSet::from([Arr::Acc]));
                self.for_fragments(depth, &mm, |p, d, mm| {
                    let dst = p.root_pointer("acc_s", &p.p.acc_layout.clone(), mm);
                    let (_, _, n, _) = mm.dims(p.k);
                    p.line(
                        d,
                        &format!("wmma::store_matrix_sync({dst}, acc_f[j], {n}, wmma::mem_row_major);"),
                    );
                });
            }
            _ => {}
        }
        for id in in_phase(self, Phase::Epilogue) {
            self.emit(depth, id);
        }
        if self.p.uses.sink_phase != Phase::Loop {
            self.sink(depth);
        }
    }

    /// Emits a value: its tile and what fills it.
    pub(super) fn emit(&mut self, depth: usize, id: ValueId) {
        if self.p.inline[id] || self.p.absorbed[id] || matches!(self.k.value(id).op, Op::Accumulator) {
            return;
        }
        if let Some(m) = self.p.root_of[id] {
            let mm = self.p.matmuls[m].clone();
            self.matmul(depth, &mm);
            return;
        }
        let value = self.k.value(id).clone();
        if let Some(chain) = self.p.chain[id].clone() {
            let mut ids = chain.factors.clone();
            ids.extend(chain.axes.iter().filter_map(|(_, m)| *m));
            let reads = self.reads_of(&ids);
            if self.folds_into_acc(id) {
                let acc = self.k.accumulate.as_ref().expect("an accumulator");
                let shape = acc.shape.clone();
                self.step(depth, reads, BTreeSet::new());
                let n = self.elements(&shape);
                let inner = self.open_owned(depth, n);
                let layout = self.p.acc_layout.clone();
                self.decode(inner, &layout);
                self.reduce_loop(inner, &chain, "acc[k]");
                self.close_owned(inner, depth);
            } else {
                self.step(depth, reads, BTreeSet::from([Arr::Value(id)]));
                let n = self.elements(&value.shape);
                let inner = self.open_elements(depth, n);
                let layout = self.p.layout[id].clone();
                self.decode(inner, &layout);
                let identity = self.d.float(chain.reduction.identity());
                self.line(inner, &format!("{} s = {identity};", self.d.real));
                self.reduce_loop(inner, &chain, "s");
                let target = self.array(id);
                self.line(inner, &format!("{target} = s;"));
                self.close(inner, depth);
            }
            return;
        }
        let mut reads = self.reads_of(&self.k.operands(id).collect::<Vec<_>>());
        if let Some(stage) = &self.p.stage[id] {
            reads.extend(self.reads_of(&stage.masks));
        }
        self.step(depth, reads, BTreeSet::from([Arr::Value(id)]));
        let n = self.elements(&value.shape);
        if let Some(chunk) = self.vector_fill(id) {
            return self.fill_in_chunks(depth, id, n, chunk);
        }
        let inner = self.open_elements(depth, n);
        let order = self.fill_order(id);
        self.decode(inner, &order);
        let text = match &self.p.stage[id] {
            Some(stage) => self.staged(id, stage),
            None => self.expr(id),
        };
        let target = self.array(id);
        self.line(inner, &format!("{target} = {text};"));
        self.close(inner, depth);
    }

    /// Elements per 16-byte copy when a Tensor Core operand's shared tile
    /// can be filled by 16-byte copies from global memory: a load of the
    /// fragment's own type, contiguous along the fill's last axis in the
    /// tensor (its last index is that axis' range) and in the tile (the
    /// layout's last axis), both rows a multiple of 16 bytes, and every mask
    /// the same across a chunk (not varying along the axis, or a bound
    /// `i < extent` with the extent a multiple of the chunk).
    fn vector_fill(&self, id: ValueId) -> Option<usize> {
        let k = self.k;
        let stage = self.p.stage[id].as_ref()?;
        let Op::Load { tensor, index, mask } = &k.value(id).op else { return None };
        let elem = match (stage.fragment, k.tensor(*tensor).dtype) {
            (plan::Fragment::Half, ElemType::Value(DType::F16))
            | (plan::Fragment::Bf16, ElemType::Value(DType::Bf16)) => 2,
            (plan::Fragment::Tf32, ElemType::Value(DType::F32)) => 4,
            _ => return None,
        };
        let chunk = 16 / elem;
        let order = self.fill_order(id);
        let &a = order.last()?;
        let (&last, rest) = index.split_last()?;
        let contiguous = self.p.layout[id].last() == Some(&a)
            && k.value(last).op == Op::Range(a)
            && rest.iter().all(|&ix| !k.value(ix).shape.contains(&a));
        let rows = k.tensor(*tensor).shape.last().copied()?;
        if !contiguous || !self.tile(a).is_multiple_of(chunk) || !rows.is_multiple_of(chunk) {
            return None;
        }
        // A mask the same for every element of a chunk along `a`.
        fn uniform(k: &Kernel, m: ValueId, a: AxisId, chunk: usize) -> bool {
            match k.value(m).op {
                _ if !k.value(m).shape.contains(&a) => true,
                Op::Binary(BinaryOp::And, x, y) => uniform(k, x, a, chunk) && uniform(k, y, a, chunk),
                Op::Binary(BinaryOp::Lt, r, c) => {
                    k.value(r).op == Op::Range(a)
                        && matches!(k.value(c).op, Op::ConstInt(e) if e >= 0 && (e as usize).is_multiple_of(chunk))
                }
                _ => false,
            }
        }
        let masks = mask.iter().chain(&stage.masks);
        masks.into_iter().all(|&m| uniform(k, m, a, chunk)).then_some(chunk)
    }

    /// Fills a staged operand's tile with 16-byte copies of `chunk`
    /// elements ([`Printer::vector_fill`]); a masked-off chunk is zeros.
    fn fill_in_chunks(&mut self, depth: usize, id: ValueId, n: usize, chunk: usize) {
        let k = self.k;
        let Op::Load { tensor, index, mask } = &k.value(id).op else {
            unreachable!("a vector fill is a load")
        };
        let stage = self.p.stage[id].clone().expect("a vector fill is staged");
        let inner = self.open_elements(depth, n / chunk);
        let order = self.fill_order(id);
        self.decode_chunks(inner, &order, chunk);
        let masks: Vec<String> = mask.iter().chain(&stage.masks).map(|&m| self.elem(m)).collect();
        let source = format!("{}[{}]", self.names.tensors[*tensor], self.address(*tensor, index));
        let target = self.array(id);
        self.line(inner, "uint4 chunk = {0u, 0u, 0u, 0u};");
        let read = format!("chunk = *reinterpret_cast<const uint4 *>(&{source});");
        if masks.is_empty() {
            self.line(inner, &read);
        } else {
            self.line(inner, &format!("if ({}) {read}", masks.join(" && ")));
        }
        self.line(inner, &format!("*reinterpret_cast<uint4 *>(&{target}) = chunk;"));
        self.close(inner, depth);
    }

    /// An operand element of a Tensor Core product in its fragment type,
    /// masked by the product's masks.
    pub(super) fn staged(&self, id: ValueId, stage: &plan::Stage) -> String {
        let f = stage.fragment;
        let zero = match f {
            plan::Fragment::Half => "__float2half(0.0f)",
            plan::Fragment::Bf16 => "__float2bfloat16(0.0f)",
            plan::Fragment::Tf32 => "0.0f",
        };
        let v = self.k.value(id);
        let raw = match &v.op {
            Op::Load { tensor, index, mask } => {
                let same = matches!(
                    (f, self.k.tensor(*tensor).dtype),
                    (plan::Fragment::Half, ElemType::Value(DType::F16))
                        | (plan::Fragment::Bf16, ElemType::Value(DType::Bf16))
                        | (plan::Fragment::Tf32, ElemType::Value(DType::F32))
                );
                same.then(|| {
                    let read = format!("{}[{}]", self.names.tensors[*tensor], self.address(*tensor, index));
                    match mask {
                        None => read,
                        Some(m) => format!("({} ? {read} : {zero})", self.elem(*m)),
                    }
                })
            }
            _ => None,
        };
        let inner = raw.unwrap_or_else(|| {
            let x = self.expr(id);
            match f {
                plan::Fragment::Half => format!("__float2half({x})"),
                plan::Fragment::Bf16 => format!("__float2bfloat16({x})"),
                plan::Fragment::Tf32 => format!("(float)({x})"),
            }
        });
        if stage.masks.is_empty() {
            return inner;
        }
        let masks: Vec<String> = stage.masks.iter().map(|&m| self.elem(m)).collect();
        format!("({} ? {inner} : {zero})", masks.join(" && "))
    }

    /// `target = fold over the chain's axes of (product of its factors)`,
    /// where its masks hold.
    pub(super) fn reduce_loop(&mut self, depth: usize, chain: &plan::Chain, target: &str) {
        let mut d = depth;
        for &(axis, _) in &chain.axes {
            let i = self.axis_var(axis);
            let tile = self.tile(axis);
            if tile == 1 {
                self.line(d, "{");
                self.line(d + 1, &format!("const int {i} = 0;"));
            } else {
                if tile <= 32 {
                    self.line(d, "#pragma unroll");
                }
                self.line(d, &format!("for (int {i} = 0; {i} < {tile}; {i}++) {{"));
            }
            d += 1;
        }
        let term: Vec<String> = chain.factors.iter().map(|&f| self.elem(f)).collect();
        let update = self.d.fold(chain.reduction, target, &term.join(" * "));
        let masks: Vec<String> = chain.axes.iter().filter_map(|(_, m)| m.map(|m| self.elem(m))).collect();
        let text = if masks.is_empty() { update } else { format!("if ({}) {update}", masks.join(" && ")) };
        self.line(d, &text);
        self.close(d, depth);
    }
}

/// A shared array of a kernel: its element type, name, dimensions (`[16][24]`)
/// and bytes; WMMA operands and results are 32-byte aligned.
#[derive(Clone, Debug)]
pub(super) struct SharedArray {
    pub name: String,
    pub ty: String,
    pub dims: String,
    pub bytes: usize,
    /// Bytes per element.
    pub elem: usize,
    pub align: bool,
}

impl SharedArray {
    /// An upper bound of its bytes in static shared memory, wherever ptxas
    /// places it: it may need padding up to its alignment.
    fn bound(&self) -> usize {
        self.bytes + if self.align { 31 } else { self.elem - 1 }
    }
}

/// Offsets of the arrays in dynamic shared memory (each 32-byte aligned)
/// and the bytes in all.
fn dynamic_layout(arrays: &[SharedArray]) -> (Vec<usize>, usize) {
    let mut offsets = Vec::with_capacity(arrays.len());
    let mut at = 0usize;
    for a in arrays {
        at = at.next_multiple_of(32);
        offsets.push(at);
        at += a.bytes;
    }
    (offsets, at)
}
