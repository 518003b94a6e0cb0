//! How CUDA C++ spells what the shared C-family printer prints
//! ([`spindle_c::dialect`]): `int` or `long long` indices, infinities from
//! bit patterns (no `<math.h>` under NVRTC), and f16 / bf16 tensors
//! converted to the compute type at every load and back at every store.

use spindle_c::dialect::Dialect;
use spindle_ir::formats::DType;
use spindle_ir::kernel::Reduction;
use spindle_ir::lang::ElemType;

#[derive(Clone, Copy, Debug)]
pub struct Cuda {
    /// `float`, or `double` when a tensor is f64.
    pub real: &'static str,
    /// 64-bit index arithmetic (an i64 tensor, or one past 2^31 elements).
    pub wide: bool,
}

impl Dialect for Cuda {
    fn storage(&self, dtype: ElemType) -> &'static str {
        super::cuda_type(dtype)
    }

    fn store_as(&self, dtype: ElemType, v: &str) -> String {
        let double = self.real == "double";
        match dtype {
            ElemType::Value(DType::F16) if double => format!("__double2half({v})"),
            ElemType::Value(DType::F16) => format!("__float2half({v})"),
            ElemType::Value(DType::Bf16) if double => format!("__double2bfloat16({v})"),
            ElemType::Value(DType::Bf16) => format!("__float2bfloat16({v})"),
            ElemType::Value(DType::F32) if double => format!("(float)({v})"),
            _ => v.to_string(),
        }
    }

    fn real(&self) -> &'static str {
        self.real
    }

    fn int_type(&self) -> &'static str {
        if self.wide { "long long" } else { "int" }
    }

    fn bool_type(&self) -> &'static str {
        "bool"
    }

    fn infinity(&self, negative: bool) -> String {
        match (self.real == "float", negative) {
            (true, false) => "__int_as_float(0x7f800000)".into(),
            (true, true) => "__int_as_float((int)0xff800000u)".into(),
            (false, false) => "__longlong_as_double(0x7ff0000000000000LL)".into(),
            (false, true) => "__longlong_as_double((long long)0xfff0000000000000ULL)".into(),
        }
    }

    fn int(&self, c: i64) -> String {
        if i32::try_from(c).is_ok() { c.to_string() } else { format!("{c}LL") }
    }

    fn load(&self, dtype: ElemType, array: &str, address: &str) -> String {
        match dtype {
            ElemType::Value(DType::F16) => format!("__half2float({array}[{address}])"),
            ElemType::Value(DType::Bf16) => format!("__bfloat162float({array}[{address}])"),
            ElemType::Value(DType::F32) if self.real == "double" => format!("(double){array}[{address}]"),
            _ => format!("{array}[{address}]"),
        }
    }

    fn scaled(&self, index: &str, stride: usize) -> String {
        if self.wide { format!("(long long){index} * {stride}") } else { format!("{index} * {stride}") }
    }

    /// Sums by `atomicAdd`; max and min by the compare-and-swap loops of
    /// `sink::atomic_helper`, which the kernel must define.
    fn atomic_fold(&self, r: Reduction, dtype: ElemType, target: &str, value: &str) -> Option<String> {
        let v = self.store_as(dtype, value);
        Some(match r {
            Reduction::Sum => format!("atomicAdd(&{target}, {v});"),
            Reduction::Max => format!("spindle_atomic_max(&{target}, {v});"),
            Reduction::Min => format!("spindle_atomic_min(&{target}, {v});"),
        })
    }
}
