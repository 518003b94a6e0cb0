//! The block-row mapping (`map=rows`) of block-sparse SpMM,
//! `C[bm*R[p]+bi,n] += V[p,q,bi,bj] * B[bk*K[p,q]+bj,n]` (BlockGroupCOO
//! grouped over rows):
//!
//! - a block owns block row `r` of C and a slab of `tile.n` columns; its
//!   groups are the run of `p` with `R[p] == r` (R sorted), found by a
//!   32-way search per warp (a ballot a step, about four steps for 10^5
//!   groups);
//! - each warp owns a `bm x 32` warp tile of the slab: `bm/16 x 2` WMMA
//!   fragments (HMMA.16816 on sm_80 and sm_90, f32 accumulators) that stay
//!   in registers across every block of the row, each operand fragment
//!   reused by the other dimension's fragments;
//! - the blocks' `bm x bk` values and `bk x tile.n` rows of B are copied
//!   into shared memory by 16-byte `cp.async` into a ring of
//!   [`STAGES`] buffers, so the copies of the next blocks overlap this
//!   block's products, with one barrier per block; rows are padded by 16
//!   bytes so the fragment loads (LDSM) are free of bank conflicts; B's
//!   copies ask L2 to keep it (`evict_last`: every block row reads it);
//! - the result is written once per element, from the fragments (f16 or
//!   f32): no atomics, and nothing to zero first when the output starts at
//!   zero (`init zero`); with `+=` over given data it is read and added.
//!
//! Every other kernel is refused with the reason.

use spindle_ir::formats::DType;
use spindle_ir::kernel::*;
use spindle_ir::lang::ElemType;

use super::namer::Names;
use super::pattern::{self, load_at, range, scaled_plus_range};
use super::*;

/// Buffers of the copy ring: copies run up to `STAGES - 1` blocks ahead.
pub const STAGES: usize = 4;
/// Columns of a warp tile.
const WARP_COLUMNS: usize = 32;

/// The parts of a block-sparse SpMM.
#[derive(Clone, Debug)]
pub(super) struct Rows {
    /// `R`, `K`, `V`, `B`, `C`.
    rows: TensorId,
    crd: TensorId,
    values: TensorId,
    dense: TensorId,
    out: TensorId,
    /// Groups, blocks per group, block shape, output rows and columns.
    groups: usize,
    group: usize,
    bm: usize,
    bk: usize,
    m: usize,
    n: usize,
    /// Columns a block owns: the tile of the column index `columns`.
    slab: usize,
    pub columns: AxisId,
    /// The operands' element type.
    pub operand: DType,
}

/// `k`'s parts, or why it is not block-sparse SpMM over sorted block rows.
pub(super) fn recognise(k: &Kernel) -> Result<Rows, String> {
    let s = &k.sink;
    let [row_ix, col_ix] = s.index[..] else {
        return Err("the output is not a matrix C[bm*R[p]+bi,n]".into());
    };
    let n = range(k, col_ix).ok_or("the output's column is not an index n")?;
    let (bm, row_load, bi) =
        scaled_plus_range(k, row_ix).ok_or("the output's row is not bm*R[p]+bi (BlockGroupCOO over rows)")?;
    let (rows, by) = load_at(k, row_load).ok_or("the output's block row is not an index tensor R[p]")?;
    let &[p] = &by[..] else { return Err("the output's block row is not R[p]".into()) };
    if s.reduction != Reduction::Sum {
        return Err("the output is not summed into".into());
    }
    // The float loads: V[p,q,bi,bj] and B[bk*K[p,q]+bj, n]; nothing but
    // products and sums of them.
    let mut values = None;
    let mut gather = None;
    for &id in &k.order {
        let v = k.value(id);
        if v.scalar != Scalar::Float {
            continue;
        }
        match &v.op {
            Op::Load { tensor, index, .. } => match index[..] {
                [kx, nx] if range(k, nx) == Some(n) => gather = Some((*tensor, kx)),
                _ => match load_at(k, id) {
                    Some((t, axes)) if axes.len() == 4 => values = Some((t, axes)),
                    _ => {
                        return Err(format!(
                            "it reads {} otherwise than V[p,q,bi,bj] or B[bk*K[p,q]+bj,n]",
                            k.tensor(*tensor).name
                        ));
                    }
                },
            },
            Op::Binary(BinaryOp::Mul, ..) | Op::Dot { .. } | Op::Accumulator | Op::Broadcast { .. } => {}
            Op::Reduce { reduction: Reduction::Sum, .. } => {}
            _ => return Err("its value is more than a sum of products V * B".into()),
        }
    }
    let (Some((values, axes)), Some((dense, kx))) = (values, gather) else {
        return Err("it is not a product V[p,q,bi,bj] * B[bk*K[p,q]+bj,n]".into());
    };
    let (bk, crd_load, bj) = scaled_plus_range(k, kx).ok_or("B's row is not bk*K[p,q]+bj")?;
    let (crd, crd_axes) = load_at(k, crd_load).ok_or("B's block row is not an index tensor K[p,q]")?;
    let &[cp, q] = &crd_axes[..] else { return Err("B's block row is not K[p,q]".into()) };
    if cp != p || axes != [p, q, bi, bj] {
        return Err("the values are not V[p,q,bi,bj] beside K[p,q] and C[bm*R[p]+bi,n]".into());
    }
    let extent = |a: AxisId| k.axis(a).extent;
    let (bm, bk) = (bm as usize, bk as usize);
    if (extent(bi), extent(bj)) != (bm, bk) {
        return Err(format!("the blocks are {}x{}, not the stride's {bm}x{bk}", extent(bi), extent(bj)));
    }
    let dtype = |t: TensorId| match k.tensor(t).dtype {
        ElemType::Value(d) => Some(d),
        ElemType::Index(_) => None,
    };
    let operand = match (dtype(values), dtype(dense)) {
        (Some(a), Some(b)) if a == b && matches!(a, DType::F16 | DType::Bf16 | DType::F32) => a,
        _ => return Err("V and B are not both f16, bf16 or f32".into()),
    };
    let output = dtype(s.tensor);
    let output_ok = match operand {
        DType::F16 | DType::Bf16 => matches!(output, Some(DType::F16 | DType::F32)),
        _ => output == Some(DType::F32),
    };
    if !output_ok {
        return Err("the output is not f16 or f32 (f32 for f32 operands), the types a fragment stores".into());
    }
    let ks = if operand == DType::F32 { 8 } else { 16 };
    if !bm.is_multiple_of(16) || !bk.is_multiple_of(ks) || bm > 64 {
        return Err(format!(
            "{bm}x{bk} blocks: the rows must be a multiple of 16 up to 64 and the columns of {ks}"
        ));
    }
    let (m, columns) = (k.tensor(s.tensor).shape[0], extent(n));
    let dense_rows = k.tensor(dense).shape[0];
    if !m.is_multiple_of(bm) || !dense_rows.is_multiple_of(bk) {
        return Err(format!("the matrix ({m} x {dense_rows}) is not a whole number of {bm}x{bk} blocks"));
    }
    if !columns.is_multiple_of(16) {
        return Err(format!("n = {columns} is not a multiple of 16 (whole fragments)"));
    }
    Ok(Rows {
        rows,
        crd,
        values,
        dense,
        out: s.tensor,
        groups: extent(p),
        group: extent(q),
        bm,
        bk,
        m,
        n: columns,
        slab: k.axis(n).tile,
        columns: n,
        operand,
    })
}

/// The `cp.async` copies (the emulation defines its own,
/// `SPINDLE_EMULATED`).
const HELPERS: &str = r#"#ifndef SPINDLE_EMULATED
// 16 bytes from global to shared memory, asynchronously, with an L2 policy.
__device__ __forceinline__ unsigned long long spindle_evict_last() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void spindle_cp_async16(void *smem, const void *gmem) {
  const unsigned to = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(gmem));
}
__device__ __forceinline__ void spindle_cp_async16_keep(void *smem, const void *gmem, unsigned long long policy) {
  const unsigned to = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(to), "l"(gmem), "l"(policy));
}
__device__ __forceinline__ void spindle_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's copy groups are in flight.
template <int N> __device__ __forceinline__ void spindle_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif
"#;

/// Prints `k` under the block-row mapping.
pub(super) fn print(k: &Kernel, symbol: &str, opts: &PrintOptions) -> Result<CudaKernel, PrintError> {
    let refuse = |reason: String| PrintError::Rows { kernel: k.name.clone(), reason };
    let w = recognise(k).map_err(refuse)?;
    if w.operand == DType::F32 && !opts.tf32 {
        return Err(refuse("f32 operands run on Tensor Cores as tf32: say tf32=on".into()));
    }
    if !w.slab.is_multiple_of(WARP_COLUMNS) || !(WARP_COLUMNS..=256).contains(&w.slab) {
        return Err(refuse(format!(
            "tile.n = {}: a block's columns are 32, 64, 128 or 256 (32 a warp)",
            w.slab
        )));
    }
    let warps = w.slab / WARP_COLUMNS;
    let block = (warps * 32) as u32;
    if let Some(t) = opts.threads
        && t != block
    {
        return Err(refuse(format!(
            "block={t}, but a block of tile.n = {} columns is {block} threads (a warp per 32 columns)",
            w.slab
        )));
    }
    let names = Names::new(k, "g_");
    let name = |t: TensorId| names.tensors[t].clone();
    let (rows, crd, values, dense, out) =
        (name(w.rows), name(w.crd), name(w.values), name(w.dense), name(w.out));
    let (bm, bk, g, n, slab) = (w.bm, w.bk, w.group, w.n, w.slab);
    let (ty, elem) = match w.operand {
        DType::F16 => ("__half", 2),
        DType::Bf16 => ("__nv_bfloat16", 2),
        _ => ("float", 4),
    };
    let (frag_ty, ks) = match w.operand {
        DType::F16 => ("__half", 16),
        DType::Bf16 => ("__nv_bfloat16", 16),
        _ => ("wmma::precision::tf32", 8),
    };
    // Elements per 16-byte copy, and the 16-byte pad of each shared row.
    let vec = 16 / elem;
    let (a_pitch, b_pitch) = (bk + vec, slab + vec);
    let stage_bytes = (bm * a_pitch + bk * b_pitch) * elem;
    let bytes = STAGES * stage_bytes;
    if bytes > MAX_DYNAMIC_SHARED_BYTES {
        return Err(PrintError::SharedMemory {
            kernel: k.name.clone(),
            bytes,
            limit: MAX_DYNAMIC_SHARED_BYTES,
            arrays: vec![("the copy ring".into(), bytes)],
        });
    }
    let dynamic = bytes > MAX_STATIC_SHARED_BYTES;
    let block_rows = w.m / bm;
    let slabs = n.div_ceil(slab);
    let grid = block_rows * slabs;
    if grid > i32::MAX as usize {
        return Err(PrintError::Grid { kernel: k.name.clone(), programs: grid as u64 });
    }
    let launch = LaunchGeometry { grid: grid as u32, block, shared_bytes: bytes, dynamic };
    let (mi, ni) = (bm / 16, WARP_COLUMNS / 16);
    let a_chunks = bm * bk / vec;
    let b_chunks = bk * slab / vec;
    let threads = block as usize;
    let ragged = !n.is_multiple_of(slab);
    let out_ty = cuda_type(k.tensor(w.out).dtype);
    let out_half = k.tensor(w.out).dtype == ElemType::Value(DType::F16);

    let mut src = String::new();
    let mut line = |depth: usize, text: &str| pattern::push_lines(&mut src, depth, text);
    let notes = [
        format!(
            "launch: grid {grid}, block {block}; block b owns block row b / {slabs} of {out} and its columns \
             [(b % {slabs}) * {slab}, +{slab}); warp w the {bm}x32 tile at column 32*w; a {STAGES}-buffer \
             cp.async ring of {bm}x{bk} blocks and {bk}x{slab} rows of {dense} ({bytes} bytes of shared memory)"
        ),
        format!("needs {} nondecreasing: a block row's groups are one run", k.tensor(w.rows).name),
    ];
    line(0, &pattern::banner(k, "block-row mapping (map=rows)", &notes));
    line(
        0,
        "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <mma.h>\nnamespace wmma = nvcuda::wmma;",
    );
    line(0, pattern::LOWER_BOUND);
    line(0, HELPERS);
    if dynamic {
        line(0, "#ifndef SPINDLE_DYNAMIC_SHARED");
        line(
            0,
            "#define SPINDLE_DYNAMIC_SHARED(name, bytes) extern __shared__ __align__(128) unsigned char name[]",
        );
        line(0, "#endif");
    }
    line(0, &pattern::signature(k, &names, symbol, block));
    let a_dims = format!("[{STAGES}][{bm}][{a_pitch}]");
    let b_dims = format!("[{STAGES}][{bk}][{b_pitch}]");
    if dynamic {
        line(1, &format!("SPINDLE_DYNAMIC_SHARED(spindle_smem, {bytes});"));
        line(1, &format!("{ty} (&a_s){a_dims} = *reinterpret_cast<{ty} (*){a_dims}>(spindle_smem);"));
        line(
            1,
            &format!(
                "{ty} (&b_s){b_dims} = *reinterpret_cast<{ty} (*){b_dims}>(spindle_smem + {});",
                STAGES * bm * a_pitch * elem
            ),
        );
    } else {
        line(1, &format!("__shared__ __align__(128) {ty} a_s{a_dims};"));
        line(1, &format!("__shared__ __align__(128) {ty} b_s{b_dims};"));
    }
    line(1, "const int warp = threadIdx.x >> 5;");
    line(1, &format!("const long long row = blockIdx.x / {slabs};"));
    line(1, &format!("const long long n0 = (long long)(blockIdx.x % {slabs}) * {slab};"));
    line(1, "// The row's groups: the run of p with R[p] == row.");
    line(1, &format!("const long long lo = spindle_lower_bound({rows}, {}LL, row);", w.groups));
    line(1, &format!("const long long hi = spindle_lower_bound({rows}, {}LL, row + 1);", w.groups));
    line(1, &format!("const long long first = lo * {g}, blocks = (hi - lo) * {g};"));
    line(1, "const unsigned long long keep = spindle_evict_last();");
    line(1, "// Block `s` of the row into buffer `buf`: its values and the rows of B it multiplies.");
    line(1, "auto fill = [&](int buf, long long s) {");
    line(2, "const long long at = first + s;");
    line(2, &format!("const long long kb = (long long){crd}[at] * {bk};"));
    line(2, "#pragma unroll");
    line(2, &format!("for (int i = 0; i < {}; i++) {{", a_chunks.div_ceil(threads)));
    line(3, &format!("const int c = threadIdx.x + i * {threads};"));
    let a_guard =
        if a_chunks.is_multiple_of(threads) { String::new() } else { format!("if (c < {a_chunks}) ") };
    line(3, &format!("const int r = c / {}, e = c % {} * {vec};", bk / vec, bk / vec));
    line(
        3,
        &format!("{a_guard}spindle_cp_async16(&a_s[buf][r][e], &{values}[at * {} + r * {bk} + e]);", bm * bk),
    );
    line(2, "}");
    line(2, "#pragma unroll");
    line(2, &format!("for (int i = 0; i < {}; i++) {{", b_chunks.div_ceil(threads)));
    line(3, &format!("const int c = threadIdx.x + i * {threads};"));
    line(3, &format!("const int r = c / {}, e = c % {} * {vec};", slab / vec, slab / vec));
    let b_copy =
        format!("spindle_cp_async16_keep(&b_s[buf][r][e], &{dense}[(kb + r) * {n} + n0 + e], keep);");
    let b_copy = if ragged {
        format!(
            "if (n0 + e < {n}) {b_copy}\nelse *reinterpret_cast<uint4 *>(&b_s[buf][r][e]) = make_uint4(0, 0, 0, 0);"
        )
    } else {
        b_copy
    };
    if b_chunks.is_multiple_of(threads) {
        line(3, &b_copy);
    } else {
        line(3, &format!("if (c < {b_chunks}) {{"));
        line(4, &b_copy);
        line(3, "}");
    }
    line(2, "}");
    line(1, "};");
    line(1, &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, float> acc[{mi}][{ni}];"));
    line(1, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++)"));
    line(2, &format!("#pragma unroll\nfor (int j = 0; j < {ni}; j++) wmma::fill_fragment(acc[i][j], 0.0f);"));
    line(1, "// The first blocks into the ring, a copy group each.");
    line(1, "#pragma unroll");
    line(1, &format!("for (int s = 0; s < {}; s++) {{", STAGES - 1));
    line(2, "if (s < blocks) fill(s, s);");
    line(2, "spindle_cp_async_commit();");
    line(1, "}");
    line(1, "for (long long t = 0; t < blocks; t++) {");
    line(2, "// Block t has landed; every warp is done with block t - 1, whose buffer is refilled.");
    line(2, &format!("spindle_cp_async_wait<{}>();", STAGES - 2));
    line(2, "__syncthreads();");
    line(
        2,
        &format!(
            "if (t + {} < blocks) fill((int)((t + {}) % {STAGES}), t + {});",
            STAGES - 1,
            STAGES - 1,
            STAGES - 1
        ),
    );
    line(2, "spindle_cp_async_commit();");
    line(2, &format!("const int buf = (int)(t % {STAGES});"));
    line(2, "#pragma unroll");
    line(2, &format!("for (int kk = 0; kk < {bk}; kk += {ks}) {{"));
    line(3, &format!("wmma::fragment<wmma::matrix_a, 16, 16, {ks}, {frag_ty}, wmma::row_major> fa[{mi}];"));
    line(3, &format!("wmma::fragment<wmma::matrix_b, 16, 16, {ks}, {frag_ty}, wmma::row_major> fb[{ni}];"));
    line(3, "#pragma unroll");
    line(
        3,
        &format!(
            "for (int i = 0; i < {mi}; i++) wmma::load_matrix_sync(fa[i], &a_s[buf][i * 16][kk], {a_pitch});"
        ),
    );
    line(3, "#pragma unroll");
    line(
        3,
        &format!(
            "for (int j = 0; j < {ni}; j++) wmma::load_matrix_sync(fb[j], &b_s[buf][kk][warp * {WARP_COLUMNS} + j * 16], {b_pitch});"
        ),
    );
    if w.operand == DType::F32 {
        line(3, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++)"));
        line(
            4,
            "for (int t = 0; t < fa[i].num_elements; t++) fa[i].x[t] = wmma::__float_to_tf32(fa[i].x[t]);",
        );
        line(3, &format!("#pragma unroll\nfor (int j = 0; j < {ni}; j++)"));
        line(
            4,
            "for (int t = 0; t < fb[j].num_elements; t++) fb[j].x[t] = wmma::__float_to_tf32(fb[j].x[t]);",
        );
    }
    line(3, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++)"));
    line(
        4,
        &format!(
            "#pragma unroll\nfor (int j = 0; j < {ni}; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);"
        ),
    );
    line(2, "}");
    line(1, "}");
    line(1, "// Each element written once, from the fragments.");
    line(1, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++) {{"));
    line(2, &format!("#pragma unroll\nfor (int j = 0; j < {ni}; j++) {{"));
    line(3, &format!("const long long col = n0 + warp * {WARP_COLUMNS} + j * 16;"));
    line(3, &format!("if (col < {n}) {{"));
    line(4, &format!("{out_ty} *to = &{out}[(row * {bm} + i * 16) * {n} + col];"));
    let keep_init = k.init == OutputInit::Keep;
    if out_half {
        line(4, &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, __half> h;"));
        if keep_init {
            line(4, &format!("wmma::load_matrix_sync(h, to, {n}, wmma::mem_row_major);"));
            line(
                4,
                "for (int t = 0; t < h.num_elements; t++) h.x[t] = __float2half(acc[i][j].x[t] + __half2float(h.x[t]));",
            );
        } else {
            line(4, "for (int t = 0; t < h.num_elements; t++) h.x[t] = __float2half(acc[i][j].x[t]);");
        }
        line(4, &format!("wmma::store_matrix_sync(to, h, {n}, wmma::mem_row_major);"));
    } else {
        if keep_init {
            line(4, &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, float> c;"));
            line(4, &format!("wmma::load_matrix_sync(c, to, {n}, wmma::mem_row_major);"));
            line(4, "for (int t = 0; t < c.num_elements; t++) acc[i][j].x[t] += c.x[t];");
        }
        line(4, &format!("wmma::store_matrix_sync(to, acc[i][j], {n}, wmma::mem_row_major);"));
    }
    line(3, "}");
    line(2, "}");
    line(1, "}");
    line(0, "}");
    Ok(CudaKernel {
        sorted: Some(k.tensor(w.rows).name.clone()),
        writes_output: k.init == OutputInit::Zero,
        ..CudaKernel::plain(symbol, src, launch)
    })
}
