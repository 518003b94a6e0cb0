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
        if let Some(axis) = self.paired_axis() {
            self.sink_pairs(depth, axis);
            return;
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
        let t = self.k.tensor(s.tensor);
        let name = &self.names.tensors[s.tensor];
        let address = self.address(s.tensor, &s.index);
        let target = format!("{name}[{address}]");
        let value = self.elem(s.value);
        let update = if s.exclusive {
            let current = self.d.load(t.dtype, name, &address);
            let sfx = self.d.math_suffix();
            let combined = match s.reduction {
                Reduction::Sum => format!("{current} + {value}"),
                Reduction::Max => format!("fmax{sfx}({current}, {value})"),
                Reduction::Min => format!("fmin{sfx}({current}, {value})"),
            };
            format!("{target} = {};", self.d.store_as(t.dtype, &combined))
        } else {
            let v = self.d.store_as(t.dtype, &value);
            match s.reduction {
                Reduction::Sum => format!("atomicAdd(&{target}, {v});"),
                Reduction::Max => format!("spindle_atomic_max(&{target}, {v});"),
                Reduction::Min => format!("spindle_atomic_min(&{target}, {v});"),
            }
        };
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

    /// The axis along which a 16-bit sum scatter adds pairs of neighbours
    /// with one `__half2` / `__nv_bfloat162` atomic: the sink's fastest
    /// axis, when it is the output's last subscript alone, the other
    /// subscripts do not vary along it, and the last dimension is even (so
    /// every pair is 4-byte aligned).
    pub(super) fn paired_axis(&self) -> Option<AxisId> {
        let k = self.k;
        let s = &k.sink;
        let t = k.tensor(s.tensor);
        if s.exclusive
            || s.reduction != Reduction::Sum
            || self.p.sink_from_registers
            || !matches!(t.dtype, ElemType::Value(DType::F16 | DType::Bf16))
            || !t.shape.last().is_some_and(|d| d.is_multiple_of(2))
        {
            return None;
        }
        let &axis = self.p.sink_order.last()?;
        let (last, rest) = s.index.split_last()?;
        let plain = matches!(k.value(*last).op, Op::Range(a) if a == axis) && self.p.inline[*last];
        let tile = self.tile(axis);
        (plain
            && tile >= 2
            && tile.is_multiple_of(2)
            && rest.iter().all(|i| !k.value(*i).shape.contains(&axis)))
        .then_some(axis)
    }

    /// The sum scatter of a 16-bit output by pairs along `axis`: one vector
    /// atomic where both elements are inside the mask, scalar ones at
    /// the edges.
    pub(super) fn sink_pairs(&mut self, depth: usize, axis: AxisId) {
        let k = self.k;
        let s = &k.sink;
        let n = self.elements(&self.p.uses.sink_shape) / 2;
        let inner = self.open_elements(depth, n);
        // Decode the pair: the paired axis counts in twos.
        let order = self.p.sink_order.clone();
        let mut stride = 1;
        let mut lines = Vec::new();
        for (pos, &a) in order.iter().enumerate().rev() {
            let tile = if a == axis { self.tile(a) / 2 } else { self.tile(a) };
            let div = if stride == 1 { "e".to_string() } else { format!("e / {stride}") };
            let outer = pos == 0 || order[..pos].iter().all(|&b| self.tile(b) == 1);
            let coordinate = if tile == 1 && a != axis {
                "0".to_string()
            } else if outer {
                div
            } else {
                format!("{div} % {tile}")
            };
            lines.push(if a == axis {
                format!("const int pair = {coordinate} * 2;")
            } else {
                format!("const int {} = {coordinate};", self.axis_var(a))
            });
            stride *= tile;
        }
        lines.reverse();
        for l in lines {
            self.line(inner, &l);
        }
        let (vector, pack, scalar) = match k.tensor(s.tensor).dtype {
            ElemType::Value(DType::Bf16) => ("__nv_bfloat162", "__floats2bfloat162_rn", "__float2bfloat16"),
            _ => ("__half2", "__floats2half2_rn", "__float2half"),
        };
        let i = self.axis_var(axis);
        self.line(inner, "float sv[2];");
        if s.mask.is_some() {
            self.line(inner, "bool sm[2];");
        }
        self.line(inner, "#pragma unroll");
        self.line(inner, "for (int h = 0; h < 2; h++) {");
        self.line(inner + 1, &format!("const int {i} = pair + h;"));
        let value = self.elem(s.value);
        self.line(inner + 1, &format!("sv[h] = (float)({value});"));
        if let Some(m) = s.mask {
            let mask = self.elem(m);
            self.line(inner + 1, &format!("sm[h] = {mask};"));
        }
        self.line(inner, "}");
        self.line(inner, "{");
        self.line(inner + 1, &format!("const int {i} = pair;"));
        let name = &self.names.tensors[s.tensor];
        let ty = match k.tensor(s.tensor).dtype {
            ElemType::Value(DType::Bf16) => "__nv_bfloat16",
            _ => "__half",
        };
        self.line(inner + 1, &format!("{ty} *at = &{name}[{}];", self.address(s.tensor, &s.index)));
        let both = format!("atomicAdd(reinterpret_cast<{vector} *>(at), {pack}(sv[0], sv[1]));");
        if s.mask.is_none() {
            self.line(inner + 1, &both);
        } else {
            self.line(inner + 1, &format!("if (sm[0] && sm[1]) {both}"));
            self.line(inner + 1, "else {");
            self.line(inner + 2, &format!("if (sm[0]) atomicAdd(at, {scalar}(sv[0]));"));
            self.line(inner + 2, &format!("if (sm[1]) atomicAdd(at + 1, {scalar}(sv[1]));"));
            self.line(inner + 1, "}");
        }
        self.line(inner, "}");
        self.close(inner, depth);
    }

    /// Atomic max / min by compare-and-swap, for the output's type. The
    /// first read bypasses L1 (`__ldcg`): other blocks update the element
    /// through L2.
    pub(super) fn atomic_helpers(&mut self) {
        let s = &self.k.sink;
        if s.exclusive || s.reduction == Reduction::Sum {
            return;
        }
        let (ty, bits, to_bits, from_bits, widen) = match self.k.tensor(s.tensor).dtype {
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
        let (name, cmp) = match s.reduction {
            Reduction::Max => ("max", ">"),
            _ => ("min", "<"),
        };
        let text = format!(
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
        );
        self.line(0, &text);
    }
}
