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
