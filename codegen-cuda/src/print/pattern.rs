//! What the special mappings (`walk.rs`, `rows.rs`) share: reading a
//! kernel's values as the expressions they print (which axis a range is,
//! which tensor a load reads at which axes, `c * X + range a` index
//! arithmetic), and the opening lines of the kernel they print.

use std::fmt::Write as _;

use spindle_c::namer::Names;
use spindle_ir::kernel::*;

use super::cuda_type;

/// Appends `text` to `src`, each line indented two spaces per `depth`.
pub(super) fn push_lines(src: &mut String, depth: usize, text: &str) {
    for l in text.lines() {
        let _ = writeln!(src, "{}{l}", "  ".repeat(depth));
    }
}

/// `text` indented one level.
pub(super) fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// The comment that opens a kernel printed under `mapping`: what it is, its
/// IR, and `notes` (how it launches, what it needs of its data).
pub(super) fn banner(k: &Kernel, mapping: &str, notes: &[String]) -> String {
    let mut text = format!("// Spindle kernel `{}`, {mapping}, generated: do not edit.\n", k.name);
    for l in format!("{k}").lines().chain(notes.iter().map(String::as_str)) {
        text += &format!("// {l}\n");
    }
    text
}

/// `extern "C" __global__ void __launch_bounds__(block) symbol(...) {`: the
/// kernel's tensors in order, `const` but for the output.
pub(super) fn signature(k: &Kernel, names: &Names, symbol: &str, block: u32) -> String {
    let params: Vec<String> = k
        .tensors
        .iter()
        .map(|(id, t)| {
            let constness = if t.output { "" } else { "const " };
            format!("    {constness}{} *__restrict__ {}", cuda_type(t.dtype), names.tensors[id])
        })
        .collect();
    format!("extern \"C\" __global__ void __launch_bounds__({block}) {symbol}(\n{}) {{", params.join(",\n"))
}

/// `id` without the broadcasts around it.
pub(super) fn strip(k: &Kernel, mut id: ValueId) -> ValueId {
    while let Op::Broadcast { value } = k.value(id).op {
        id = value;
    }
    id
}

/// The axis whose range `id` is.
pub(super) fn range(k: &Kernel, id: ValueId) -> Option<AxisId> {
    match k.value(strip(k, id)).op {
        Op::Range(a) => Some(a),
        _ => None,
    }
}

/// `t[range a, range b, ...]`: the tensor and its axes.
pub(super) fn load_at(k: &Kernel, id: ValueId) -> Option<(TensorId, Vec<AxisId>)> {
    match &k.value(strip(k, id)).op {
        Op::Load { tensor, index, .. } => {
            Some((*tensor, index.iter().map(|&i| range(k, i)).collect::<Option<_>>()?))
        }
        _ => None,
    }
}

/// An integer literal.
fn const_int(k: &Kernel, id: ValueId) -> Option<i64> {
    match k.value(strip(k, id)).op {
        Op::ConstInt(c) => Some(c),
        _ => None,
    }
}

/// Whether a mask of `k`'s sums or of its sink reads a tensor: a mask of
/// skipped terms (a format's padding, where a factor holds non-finite
/// values), which the special mappings do not test.
pub(super) fn masks_read_data(k: &Kernel) -> bool {
    fn reads(k: &Kernel, id: ValueId) -> bool {
        matches!(k.value(id).op, Op::Load { .. }) || k.value(id).op.operands().any(|o| reads(k, o))
    }
    let sums = k.order.iter().filter_map(|&id| match k.value(id).op {
        Op::Reduce { mask, .. } | Op::Dot { mask, .. } => mask,
        _ => None,
    });
    sums.chain(k.sink.mask).any(|m| reads(k, m))
}

/// `c * x + range a` (either order of each operation): `(c, x, a)`.
pub(super) fn scaled_plus_range(k: &Kernel, id: ValueId) -> Option<(i64, ValueId, AxisId)> {
    let Op::Binary(BinaryOp::Add, l, r) = k.value(strip(k, id)).op else { return None };
    let (product, a) = match (range(k, l), range(k, r)) {
        (_, Some(a)) => (l, a),
        (Some(a), None) => (r, a),
        (None, None) => return None,
    };
    let Op::Binary(BinaryOp::Mul, x, y) = k.value(strip(k, product)).op else { return None };
    match (const_int(k, x), const_int(k, y)) {
        (Some(c), _) => Some((c, y, a)),
        (None, Some(c)) => Some((c, x, a)),
        _ => None,
    }
}

/// A device function: the first `i` in `[0, n)` with `r[i] >= v` (`n` if
/// none) for nondecreasing `r`, by a 32-way search (a ballot a step, about
/// four steps for 10^5 entries). Every lane of the warp calls it with the
/// same arguments. Block rows and the row walk find their rows' groups
/// with it.
pub(super) const LOWER_BOUND: &str = r#"// The first i in [0, n) with r[i] >= v (n if none), r nondecreasing: each
// step the T lanes of the walker (a warp, or an aligned team of one) probe T
// points and a ballot narrows the range T-fold. Called by every lane of
// the walker with the same arguments.
template <int T = 32, class I>
__device__ __forceinline__ long long spindle_lower_bound(const I *__restrict__ r, long long n, long long v) {
  const int lane = threadIdx.x & (T - 1);
  const int first = (threadIdx.x & 31) - lane;
  const unsigned lanes = T == 32 ? 0xffffffffu : ((1u << (T & 31)) - 1u) << first;
  long long lo = 0, hi = n;
  while (lo < hi) {
    const long long span = hi - lo;
    const long long x = lo + (long long)(lane + 1) * span / T - 1;
    const unsigned below = __ballot_sync(lanes, x < lo || (long long)r[x] < v) >> first;
    // Lanes below c probe below v, the others at or above it (a prefix, r
    // being sorted): the answer lies in (x of lane c - 1, x of lane c].
    const int c = __popc(below);
    const long long next_hi = c < T ? lo + (long long)(c + 1) * span / T - 1 : hi;
    lo += (long long)c * span / T;
    hi = next_hi;
  }
  return lo;
}
"#;

/// L2 eviction policies for cache-hinted memory operations: `evict_last`
/// for data read again (the rows of B a walk gathers, the rows of B block
/// rows stream), `evict_first` for data streamed once (the output). The
/// emulation defines its own (`SPINDLE_EMULATED`).
pub(super) const L2_POLICIES: &str = r#"#ifndef SPINDLE_EMULATED
__device__ __forceinline__ unsigned long long spindle_evict_last() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ unsigned long long spindle_evict_first() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
#endif
"#;

/// 16-byte global loads (read-only path) and stores under an L2 policy.
pub(super) const L2_HINTED_ACCESS: &str = r#"#ifndef SPINDLE_EMULATED
__device__ __forceinline__ uint4 spindle_ld16_hint(const void *p, unsigned long long policy) {
  uint4 v;
  asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}
__device__ __forceinline__ void spindle_st16_hint(void *p, uint4 v, unsigned long long policy) {
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w), "l"(policy)
               : "memory");
}
#endif
"#;

/// A non-tile mapping's plan ([`CudaKernel::plan`]): the mapping, then its
/// banner's notes.
pub(super) fn plan(mapping: &str, notes: &[String]) -> Vec<String> {
    std::iter::once(mapping.to_string()).chain(notes.iter().cloned()).collect()
}
