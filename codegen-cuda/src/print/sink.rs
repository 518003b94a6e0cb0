//! The write of the result: plain stores where the output is owned, atomics
//! (with compare-and-swap helpers for max and min) where programs collide.

use std::collections::BTreeSet;

use spindle_c::dialect::{Dialect, Scope};
use spindle_ir::formats::DType;
use spindle_ir::kernel::*;
use spindle_ir::lang::ElemType;

use super::*;

impl Printer<'_> {
    /// The write of the result.
    pub(super) fn sink(&mut self, depth: usize) {
        let k = self.k;
        let s = &k.sink;
        let ids: Vec<ValueId> = s.index.iter().copied().chain([s.value]).chain(s.mask).collect();
        let reads = self.reads_of(&ids);
        self.step(depth, reads, BTreeSet::new());
        if let Some(group) = s.group {
            return self.grouped_sink(depth, group);
        }
        let inner = if self.p.sink_from_registers {
            let n = self.elements(&self.p.uses.sink_shape);
            let inner = self.open_owned(depth, n);
            let order = self.p.acc_layout.clone();
            self.decode(inner, &order);
            inner
        } else {
            let n = self.elements(&self.p.uses.sink_shape);
            let inner = self.open_elements(depth, n);
            let order = self.p.sink_order.clone();
            self.decode(inner, &order);
            inner
        };
        let address = self.address(s.tensor, &s.index);
        let update = self.update(&address, &self.elem(s.value));
        let text = match s.mask {
            Some(m) => format!("if ({}) {update}", self.elem(m)),
            None => update,
        };
        self.line(inner, &text);
        if self.p.sink_from_registers {
            self.close_owned(inner, depth);
        } else {
            self.close(inner, depth);
        }
    }

    /// The update of the output element at `address` by `value`: plain
    /// when the sink is exclusive, else atomic.
    fn update(&self, address: &str, value: &str) -> String {
        let s = &self.k.sink;
        let t = self.k.tensor(s.tensor);
        let name = &self.names.tensors[s.tensor];
        let target = format!("{name}[{address}]");
        if s.exclusive {
            let current = self.d.load(t.dtype, name, address);
            let sfx = self.d.math_suffix();
            let combined = match s.reduction {
                Reduction::Sum => format!("{current} + {value}"),
                Reduction::Max => format!("fmax{sfx}({current}, {value})"),
                Reduction::Min => format!("fmin{sfx}({current}, {value})"),
            };
            format!("{target} = {};", self.d.store_as(t.dtype, &combined))
        } else {
            self.d.atomic_fold(s.reduction, t.dtype, &target, value).expect("CUDA has atomics")
        }
    }

    /// The sink of a Sgap group (paper 004 §4-§5): the group's axis is the
    /// fastest of the sink's order, so each aligned group of `lanes` lanes
    /// of a warp holds `lanes` consecutive elements along it. Every lane
    /// runs the same number of rounds (shuffles need the whole group); a
    /// lane past the tile or masked off holds the identity and no target.
    ///
    /// - Segment: each run of equal targets within the group is summed by
    ///   a segmented suffix scan (`__shfl_down_sync` by 1, 2, 4, ... while
    ///   the source lane is inside the run, whose end comes from a ballot
    ///   of the run heads), and the run's first lane writes: atomics only
    ///   where the target changes, not per element.
    /// - Parallel: every lane has the same target; a butterfly
    ///   (`__shfl_xor_sync`) reduces the group and its first lane writes.
    fn grouped_sink(&mut self, depth: usize, group: SinkGroup) {
        let k = self.k;
        let s = &k.sink;
        let n = self.elements(&self.p.uses.sink_shape);
        let t = self.threads();
        let lanes = group.lanes;
        let real = self.d.real;
        let identity = self.d.float(s.reduction.identity());
        let order =
            if self.p.sink_from_registers { self.p.acc_layout.clone() } else { self.p.sink_order.clone() };
        debug_assert_eq!(order.last(), Some(&group.axis), "the plan puts the group's axis fastest");
        let rounds = n.div_ceil(t);
        self.line(depth, "#pragma unroll");
        self.line(depth, &format!("for (int k = 0; k < {rounds}; k++) {{"));
        let d = depth + 1;
        self.line(d, &format!("const unsigned e = threadIdx.x + k * {t};"));
        self.line(d, &format!("{real} v = {identity};"));
        self.line(d, "long long at = -1;");
        self.line(d, &format!("if (e < {n}) {{"));
        self.decode(d + 1, &order);
        let address = self.address(s.tensor, &s.index);
        let value = self.elem(s.value);
        let inner = match s.mask {
            Some(m) => {
                let test = format!("if ({}) {{", self.elem(m));
                self.line(d + 1, &test);
                d + 2
            }
            None => d + 1,
        };
        self.line(inner, &format!("at = {address};"));
        self.line(inner, &format!("v = {value};"));
        self.close(inner, d + 1);
        self.line(d, "}");
        let mask = if lanes == 32 {
            "0xffffffffu".to_string()
        } else {
            format!("{}u << (threadIdx.x & {})", (1u64 << lanes) - 1, 32 - lanes)
        };
        self.line(d, &format!("const unsigned group = {mask};"));
        self.line(d, "const unsigned lane = threadIdx.x & 31;");
        self.line(d, &format!("const unsigned first = lane & {};", 32 - lanes));
        let dialect = self.d;
        let fold = |target: &str, other: &str| dialect.fold(s.reduction, target, other);
        match group.kind {
            GroupKind::Segment => {
                self.line(d, &format!("const long long before = __shfl_up_sync(group, at, 1, {lanes});"));
                self.line(d, "const bool head = lane == first || before != at;");
                // Lanes after this one that start a run; the first of them
                // ends this lane's run (or the group's end does).
                self.line(
                    d,
                    "const unsigned later = __ballot_sync(group, head) & group & ~((2u << lane) - 1u);",
                );
                self.line(d, &format!("const unsigned end = later ? __ffs(later) - 1 : first + {lanes};"));
                self.line(d, "#pragma unroll");
                self.line(d, &format!("for (unsigned step = 1; step < {lanes}; step <<= 1) {{"));
                self.line(d + 1, &format!("const {real} other = __shfl_down_sync(group, v, step, {lanes});"));
                self.line(d + 1, &format!("if (lane + step < end) {}", fold("v", "other")));
                self.line(d, "}");
                self.line(d, &format!("if (head && at >= 0) {}", self.update("at", "v")));
            }
            GroupKind::Parallel => {
                self.line(d, "#pragma unroll");
                self.line(d, &format!("for (unsigned step = {}; step > 0; step >>= 1) {{", lanes / 2));
                self.line(d + 1, &fold("v", &format!("__shfl_xor_sync(group, v, step, {lanes})")));
                self.line(d + 1, &format!("at = max(at, __shfl_xor_sync(group, at, step, {lanes}));"));
                self.line(d, "}");
                self.line(d, &format!("if (lane == first && at >= 0) {}", self.update("at", "v")));
            }
        }
        self.line(depth, "}");
    }

    /// The compare-and-swap helper of the output's atomic max or min,
    /// where the sink needs one.
    pub(super) fn atomic_helpers(&mut self) {
        let s = &self.k.sink;
        if s.exclusive || s.reduction == Reduction::Sum {
            return;
        }
        let text = atomic_helper(self.k.tensor(s.tensor).dtype, s.reduction);
        self.line(0, &text);
    }
}

/// Atomic max or min by compare-and-swap on an element of `dtype`
/// (`spindle_atomic_max` / `_min`, which the CUDA dialect's `atomic_fold`
/// calls). The first read bypasses L1 (`__ldcg`): other blocks update the
/// element through L2.
pub fn atomic_helper(dtype: ElemType, reduction: Reduction) -> String {
    let (ty, bits, to_bits, from_bits, widen) = match dtype {
        ElemType::Value(DType::F64) => {
            ("double", "unsigned long long", "__double_as_longlong", "__longlong_as_double", "")
        }
        ElemType::Value(DType::F16) => {
            ("__half", "unsigned short", "__half_as_ushort", "__ushort_as_half", "__half2float")
        }
        ElemType::Value(DType::Bf16) => (
            "__nv_bfloat16",
            "unsigned short",
            "__bfloat16_as_ushort",
            "__ushort_as_bfloat16",
            "__bfloat162float",
        ),
        _ => ("float", "unsigned int", "__float_as_uint", "__uint_as_float", ""),
    };
    let (name, cmp) = match reduction {
        Reduction::Max => ("max", ">"),
        _ => ("min", "<"),
    };
    format!(
        "__device__ __forceinline__ void spindle_atomic_{name}({ty} *p, {ty} v) {{
  {bits} *bits = reinterpret_cast<{bits} *>(p);
  {bits} old = __ldcg(bits);
  while ({widen}(v) {cmp} {widen}({from_bits}(old))) {{
    const {bits} seen = atomicCAS(bits, old, ({bits}){to_bits}(v));
    if (seen == old) return;
    old = seen;
  }}
}}
"
    )
}
