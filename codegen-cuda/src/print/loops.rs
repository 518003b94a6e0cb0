//! Loops over a tile's elements shared out among a block's threads, and the
//! `__syncthreads()` between steps that read what another wrote.

use std::collections::BTreeSet;

use spindle_c::dialect::Scope;
use spindle_ir::kernel::*;

use super::*;

impl Printer<'_> {
    /// Accounts for a step that reads and writes these shared arrays,
    /// emitting `__syncthreads()` first when it reads what was written, or
    /// writes what was read or written, since the last barrier.
    pub(super) fn step(&mut self, depth: usize, reads: BTreeSet<Arr>, writes: BTreeSet<Arr>) {
        let hazard = reads.iter().any(|r| self.pending_writes.contains(r))
            || writes.iter().any(|w| self.pending_writes.contains(w) || self.pending_reads.contains(w));
        if hazard {
            self.barrier(depth);
        }
        if let Some(body) = &mut self.body {
            body.push((reads.clone(), writes.clone(), hazard));
        }
        self.pending_reads.extend(reads);
        self.pending_writes.extend(writes);
    }

    pub(super) fn barrier(&mut self, depth: usize) {
        self.line(depth, "__syncthreads();");
        self.pending_reads.clear();
        self.pending_writes.clear();
    }

    /// Opens a block in which each thread visits its elements of a tile of
    /// `n` elements, bound to `e`; returns the depth inside.
    pub(super) fn open_elements(&mut self, depth: usize, n: usize) -> usize {
        let t = self.threads();
        if n == t {
            self.line(depth, "{");
            self.line(depth + 1, "const unsigned e = threadIdx.x;");
        } else if n < t {
            self.line(depth, &format!("if (threadIdx.x < {n}) {{"));
            self.line(depth + 1, "const unsigned e = threadIdx.x;");
        } else if n.is_multiple_of(t) {
            if n / t <= 16 {
                self.line(depth, "#pragma unroll");
            }
            self.line(depth, &format!("for (unsigned k = 0; k < {}; k++) {{", n / t));
            self.line(depth + 1, &format!("const unsigned e = threadIdx.x + k * {t};"));
        } else {
            self.line(depth, &format!("for (unsigned e = threadIdx.x; e < {n}; e += {t}) {{"));
        }
        depth + 1
    }

    /// Opens the loop over the accumulator elements a thread owns: `acc[k]`
    /// is element `e`.
    pub(super) fn open_owned(&mut self, depth: usize, n: usize) -> usize {
        let t = self.threads();
        let per = n.div_ceil(t);
        if per == 1 {
            self.line(depth, "{");
            self.line(depth + 1, "const int k = 0;");
        } else {
            self.line(depth, "#pragma unroll");
            self.line(depth, &format!("for (int k = 0; k < {per}; k++) {{"));
        }
        if per == 1 {
            self.line(depth + 1, "const unsigned e = threadIdx.x;");
        } else {
            self.line(depth + 1, &format!("const unsigned e = threadIdx.x + k * {t};"));
        }
        if n.is_multiple_of(t) {
            depth + 1
        } else {
            self.line(depth + 1, &format!("if (e < {n}) {{"));
            depth + 2
        }
    }

    pub(super) fn close_owned(&mut self, inner: usize, depth: usize) {
        self.close(inner, depth);
    }

    pub(super) fn close(&mut self, from: usize, to: usize) {
        for d in (to..from).rev() {
            self.line(d, "}");
        }
    }

    /// Binds the coordinates `i_a` of an element `e` of a tile visited in
    /// `order` (last fastest).
    pub(super) fn decode(&mut self, depth: usize, order: &[AxisId]) {
        self.decode_chunks(depth, order, 1);
    }

    /// [`Printer::decode`] where `e` counts chunks of `chunk` consecutive
    /// elements along the last axis of `order`, bound to each chunk's first.
    pub(super) fn decode_chunks(&mut self, depth: usize, order: &[AxisId], chunk: usize) {
        let mut stride = 1;
        let mut lines = Vec::new();
        let last = order.len().saturating_sub(1);
        for (pos, &a) in order.iter().enumerate().rev() {
            let per = if pos == last { chunk } else { 1 };
            let tile = self.tile(a) / per;
            let i = self.axis_var(a);
            let scale = if per == 1 { String::new() } else { format!(" * {per}") };
            let text = if tile == 1 {
                format!("const int {i} = 0;")
            } else {
                let div = if stride == 1 { "e".to_string() } else { format!("e / {stride}") };
                let first = pos == 0 || order[..pos].iter().all(|&b| self.tile(b) == 1);
                match (first, per) {
                    (true, 1) => format!("const int {i} = {div};"),
                    (false, 1) => format!("const int {i} = {div} % {tile};"),
                    (true, _) => format!("const int {i} = ({div}){scale};"),
                    (false, _) => format!("const int {i} = ({div} % {tile}){scale};"),
                }
            };
            lines.push(text);
            stride *= tile;
        }
        lines.reverse();
        for l in lines {
            self.line(depth, &l);
        }
    }

    /// The order a value's fill visits its elements: the order of the
    /// tensor its (first) load reads, contiguous axis last.
    pub(super) fn fill_order(&self, id: ValueId) -> Vec<AxisId> {
        fn driving_load(p: &Printer, id: ValueId) -> Option<ValueId> {
            if let Op::Load { .. } = p.k.value(id).op {
                return Some(id);
            }
            p.k.operands(id)
                .filter(|&o| p.p.inline[o] && p.k.value(o).scalar == Scalar::Float)
                .find_map(|o| driving_load(p, o))
        }
        let shape = &self.k.value(id).shape;
        match driving_load(self, id).map(|l| &self.k.value(l).op) {
            Some(Op::Load { index, .. }) => plan::contiguous_order(self.k, shape, index.last().copied()),
            _ => self.p.layout[id].clone(),
        }
    }
}
