//! The block-row mapping (`map=rows`) of block-sparse SpMM,
//! `C[bm*R[p]+bi,n] += V[p,q,bi,bj] * B[bk*K[p,q]+bj,n]` (BlockGroupCOO
//! grouped over rows; BCSR's `V[p,bi,bj]` and `K[p]` are its groups of one):
//!
//! - a block owns an entry of a work list built on the host from `R`
//!   (sorted) and a slab of `tile.n` columns: a block row `r` of C and its
//!   groups, the run of `p` with `R[p] == r`, or, for a row far above the
//!   average, a part of that run, whose f32 sums the last part to finish
//!   adds up and writes ([`RowSplit`]); the longest entries go first;
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
//!   f32): no atomics but a split row's counter, and nothing to zero first
//!   when the output starts at zero (`init zero`); with `+=` over given data
//!   it is read and added.
//!
//! With `block=` a multiple of the slab's threads, a block owns several
//! consecutive block rows that share B's rows ([`print_shared`]); it finds
//! their runs by a 32-way search per warp (a ballot a step) and splits
//! nothing.
//!
//! Every other kernel is refused with the reason.

use spindle_ir::formats::DType;
use spindle_ir::kernel::*;
use spindle_ir::lang::ElemType;

use super::namer::Names;
use super::pattern::{self, load_at, range, scaled_plus_range};
use super::split::RowSplit;
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
    let (bm, row_load, bi) = scaled_plus_range(k, row_ix)
        .ok_or("the output's row is not bm*R[p]+bi (BlockGroupCOO over rows, or BCSR)")?;
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
                    Some((t, axes)) if matches!(axes.len(), 3 | 4) => values = Some((t, axes)),
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
    let extent = |a: AxisId| k.axis(a).extent;
    // Blocks in groups of g (BlockGroupCOO), or one at a time (BCSR: K[p],
    // V[p,bi,bj]), which is the same layout with g = 1.
    let group = match crd_axes[..] {
        [cp, q] if cp == p && axes == [p, q, bi, bj] => extent(q),
        [cp] if cp == p && axes == [p, bi, bj] => 1,
        _ => {
            return Err("the values are not V[p,q,bi,bj] beside K[p,q] and C[bm*R[p]+bi,n] (or V[p,bi,bj] \
                        beside K[p], BCSR)"
                .into());
        }
    };
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
            "{bm}x{bk} blocks: a block's rows (bm) must be a multiple of 16 up to 64 and its columns (bk) a \
             multiple of {ks}"
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
        group,
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
        if !t.is_multiple_of(block) {
            return Err(refuse(format!(
                "block={t}: a block of tile.n = {} columns is {block} threads per block row it owns (a warp \
                 per 32 columns), so block is a multiple of {block}",
                w.slab
            )));
        }
        return print_shared(k, &w, (t / block) as usize, symbol);
    }
    let names = Names::new(k, "g_");
    let name = |t: TensorId| names.tensors[t].clone();
    let (crd, values, dense, out) = (name(w.crd), name(w.values), name(w.dense), name(w.out));
    let (bm, bk, g, n, slab) = (w.bm, w.bk, w.group, w.n, w.slab);
    let (ty, elem) = match w.operand {
        DType::F16 => ("__half", 2),
        DType::Bf16 => ("__nv_bfloat16", 2),
        _ => ("float", 4),
    };
    let (_, ks) = fragment(w.operand);
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
    let rows = k.tensor(w.rows).name.clone();
    let split = RowSplit::new(rows, block_rows, w.groups, g, slabs, bm * slab, opts.split_rows);
    let entries = split.entries;
    let grid = entries * slabs;
    if grid > i32::MAX as usize {
        return Err(PrintError::Grid { kernel: k.name.clone(), programs: grid as u64 });
    }
    let launch = LaunchGeometry { grid: grid as u32, block, shared_bytes: bytes, dynamic };
    let (mi, ni) = (bm / 16, WARP_COLUMNS / 16);
    let a_chunks = bm * bk / vec;
    let threads = block as usize;

    let mut src = String::new();
    let mut line = |depth: usize, text: &str| pattern::push_lines(&mut src, depth, text);
    let cap = split.cap;
    let notes = [
        format!(
            "launch: grid {grid}, block {block}; block b owns entry b / {slabs} of the work list (a block row \
             of {out}, or a part of one) and its columns [(b % {slabs}) * {slab}, +{slab}); warp w the {bm}x32 \
             tile at column 32*w; a {STAGES}-buffer cp.async ring of {bm}x{bk} blocks and {bk}x{slab} rows of \
             {dense} ({bytes} bytes of shared memory)"
        ),
        if opts.split_rows {
            format!(
                "work list built from the data: a block row of more than {cap} groups is cut into parts of at \
                 most {cap}, whose f32 sums the last part to finish adds in order and writes; the longest \
                 entries first"
            )
        } else {
            "work list built from the data: a block row a block, whole (split=off); the longest first".into()
        },
        format!("needs {} nondecreasing: a block row's groups are one run", k.tensor(w.rows).name),
    ];
    let mapping = "block-row mapping (map=rows)";
    line(0, &pattern::banner(k, mapping, &notes));
    let plan = pattern::plan(mapping, &notes);
    line(0, &headers(dynamic));
    line(0, &with_work_list(&pattern::signature(k, &names, symbol, block)));
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
    line(
        1,
        "// This block's entry: groups [lo, hi) of block row `row`, a part with a slot or the whole row.",
    );
    line(1, &format!("const long long *entry = &{WORK}[(blockIdx.x / {slabs}) * 4];"));
    line(1, "const long long row = entry[0], lo = entry[1], hi = entry[2], slot = entry[3];");
    line(1, "if (row < 0) return;");
    line(1, &format!("const long long n0 = (long long)(blockIdx.x % {slabs}) * {slab};"));
    line(1, &format!("const long long first = lo * {g}, blocks = (hi - lo) * {g};"));
    line(1, "const unsigned long long keep = spindle_evict_last();");
    line(
        1,
        "// Block `s` of the row (its column block `col`) into buffer `buf`: its values and the rows of B.",
    );
    line(1, "auto fill = [&](int buf, long long s, long long col) {");
    line(2, "const long long at = first + s;");
    line(2, &format!("const long long kb = col * {bk};"));
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
    line(2, &copy_b_rows(&w, &dense, threads));
    line(1, "};");
    line(1, &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, float> acc[{mi}][{ni}];"));
    line(1, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++)"));
    line(2, &format!("#pragma unroll\nfor (int j = 0; j < {ni}; j++) wmma::fill_fragment(acc[i][j], 0.0f);"));
    let column = |step: &str| format!("(long long){crd}[first + {step}]");
    line(1, &ring("blocks", "long long", &products(&w, "a_s[buf]", "warp", a_pitch, b_pitch), Some(&column)));
    line(1, "if (slot < 0) {");
    line(2, &store(k, &w, &out, "row", "warp"));
    line(2, "return;");
    line(1, "}");
    line(1, &fix_up(k, &w, &out, entries, slabs, threads));
    line(0, "}");
    Ok(CudaKernel {
        sorted: Some(k.tensor(w.rows).name.clone()),
        writes_output: k.init == OutputInit::Zero,
        plan,
        split: Some(split),
        ..CudaKernel::plain(symbol, src, launch)
    })
}

/// The work list and its scratch buffers ([`RowSplit`]): the parameters
/// after the tensors.
const WORK: &str = "spindle_work";
const PARTIALS: &str = "spindle_partials";
const COUNTERS: &str = "spindle_counters";

/// `signature` with the work list's parameters appended.
fn with_work_list(signature: &str) -> String {
    let open = signature.strip_suffix(") {").expect("a signature ends with `) {`");
    format!(
        "{open},\n    const long long *__restrict__ {WORK},\n    float *__restrict__ {PARTIALS},\n    int *__restrict__ \
         {COUNTERS}) {{"
    )
}

/// A part of a split row: its f32 sums into its slot, then the part that
/// finishes last (the row's counter at this slab) adds the row's slots in
/// order of the parts and writes the row; it leaves the counter at zero
/// for the next launch. The slots are read past L1 (`__ldcg`): other
/// blocks wrote them.
fn fix_up(k: &Kernel, w: &Rows, out: &str, entries: usize, slabs: usize, threads: usize) -> String {
    let (bm, n, slab, mi, ni) = (w.bm, w.n, w.slab, w.bm / 16, WARP_COLUMNS / 16);
    let tile = bm * slab;
    let out_half = k.tensor(w.out).dtype == ElemType::Value(DType::F16);
    let mut src = String::new();
    let mut line = |depth: usize, text: &str| pattern::push_lines(&mut src, depth, text);
    line(0, "// A part of a split row: its sums into its slot; the last part to finish writes the row.");
    line(0, &format!("const long long at = slot * {slabs} + blockIdx.x % {slabs};"));
    line(0, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++)"));
    line(1, &format!("#pragma unroll\nfor (int j = 0; j < {ni}; j++)"));
    line(
        2,
        &format!(
            "wmma::store_matrix_sync(&{PARTIALS}[at * {tile} + (i * 16) * {slab} + warp * {WARP_COLUMNS} + j * 16], \
             acc[i][j], {slab}, wmma::mem_row_major);"
        ),
    );
    line(0, "__threadfence();");
    line(0, "__syncthreads();");
    line(
        0,
        &format!(
            "const long long row_first = {WORK}[{} + 2 * slot], parts = {WORK}[{} + 2 * slot + 1];",
            4 * entries,
            4 * entries
        ),
    );
    line(0, &format!("const long long counter = row_first * {slabs} + blockIdx.x % {slabs};"));
    line(0, "// Thread 0 counts this part done; the block learns whether it was the last (no shared");
    line(0, "// variable: the ring may fill the 48 KB of static shared memory).");
    line(
        0,
        &format!(
            "if (!__syncthreads_or(threadIdx.x == 0 && atomicAdd(&{COUNTERS}[counter], 1) == (int)parts - 1)) return;"
        ),
    );
    line(0, "__threadfence();");
    line(0, &format!("for (int e = threadIdx.x; e < {tile}; e += {threads}) {{"));
    line(1, &format!("const int r = e / {slab};"));
    line(1, &format!("const long long col = n0 + e % {slab};"));
    line(1, &format!("if (col >= {n}) continue;"));
    line(1, "float sum = 0.0f;");
    line(
        1,
        &format!(
            "for (long long p = 0; p < parts; p++) sum += __ldcg(&{PARTIALS}[((row_first + p) * {slabs} + blockIdx.x % {slabs}) * {tile} + e]);"
        ),
    );
    line(1, &format!("{} *to = &{out}[(row * {bm} + r) * {n} + col];", cuda_type(k.tensor(w.out).dtype)));
    let keep = k.init == OutputInit::Keep;
    let text = match (out_half, keep) {
        (true, true) => "*to = __float2half(sum + __half2float(*to));",
        (true, false) => "*to = __float2half(sum);",
        (false, true) => "*to += sum;",
        (false, false) => "*to = sum;",
    };
    line(1, text);
    line(0, "}");
    line(0, &format!("if (threadIdx.x == 0) {COUNTERS}[counter] = 0;"));
    src
}

/// The fragments' element type and k extent for `operand`.
fn fragment(operand: DType) -> (&'static str, usize) {
    match operand {
        DType::F16 => ("__half", 16),
        DType::Bf16 => ("__nv_bfloat16", 16),
        _ => ("wmma::precision::tf32", 8),
    }
}

/// One block's products on Tensor Cores: `acc += a_tile · b_s[buf]` where
/// `a_tile` is the block's `bm x bk` shared tile and the warp's columns of
/// the slab start at `32 * col_warp`.
fn products(w: &Rows, a_tile: &str, col_warp: &str, a_pitch: usize, b_pitch: usize) -> String {
    let (frag_ty, ks) = fragment(w.operand);
    let (bk, mi, ni) = (w.bk, w.bm / 16, WARP_COLUMNS / 16);
    let mut src = String::new();
    let mut line = |depth: usize, text: &str| pattern::push_lines(&mut src, depth, text);
    line(0, "#pragma unroll");
    line(0, &format!("for (int kk = 0; kk < {bk}; kk += {ks}) {{"));
    line(1, &format!("wmma::fragment<wmma::matrix_a, 16, 16, {ks}, {frag_ty}, wmma::row_major> fa[{mi}];"));
    line(1, &format!("wmma::fragment<wmma::matrix_b, 16, 16, {ks}, {frag_ty}, wmma::row_major> fb[{ni}];"));
    line(1, "#pragma unroll");
    line(
        1,
        &format!(
            "for (int i = 0; i < {mi}; i++) wmma::load_matrix_sync(fa[i], &{a_tile}[i * 16][kk], {a_pitch});"
        ),
    );
    line(1, "#pragma unroll");
    line(
        1,
        &format!(
            "for (int j = 0; j < {ni}; j++) wmma::load_matrix_sync(fb[j], &b_s[buf][kk][{col_warp} * {WARP_COLUMNS} + j * 16], {b_pitch});"
        ),
    );
    if w.operand == DType::F32 {
        line(1, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++)"));
        line(
            2,
            "for (int t = 0; t < fa[i].num_elements; t++) fa[i].x[t] = wmma::__float_to_tf32(fa[i].x[t]);",
        );
        line(1, &format!("#pragma unroll\nfor (int j = 0; j < {ni}; j++)"));
        line(
            2,
            "for (int t = 0; t < fb[j].num_elements; t++) fb[j].x[t] = wmma::__float_to_tf32(fb[j].x[t]);",
        );
    }
    line(1, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++)"));
    line(
        2,
        &format!(
            "#pragma unroll\nfor (int j = 0; j < {ni}; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);"
        ),
    );
    line(0, "}");
    src
}

/// The warp's `bm x 32` tile of block row `row` written once from its
/// fragments (added to the output's values under `+=`), the warp's columns
/// starting at `32 * col_warp` of the slab.
fn store(k: &Kernel, w: &Rows, out: &str, row: &str, col_warp: &str) -> String {
    let (_, ks) = fragment(w.operand);
    let (bm, n, mi, ni) = (w.bm, w.n, w.bm / 16, WARP_COLUMNS / 16);
    let out_ty = cuda_type(k.tensor(w.out).dtype);
    let out_half = k.tensor(w.out).dtype == ElemType::Value(DType::F16);
    let mut src = String::new();
    let mut line = |depth: usize, text: &str| pattern::push_lines(&mut src, depth, text);
    line(0, "// Each element written once, from the fragments.");
    line(0, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++) {{"));
    line(1, &format!("#pragma unroll\nfor (int j = 0; j < {ni}; j++) {{"));
    line(2, &format!("const long long col = n0 + {col_warp} * {WARP_COLUMNS} + j * 16;"));
    line(2, &format!("if (col < {n}) {{"));
    line(3, &format!("{out_ty} *to = &{out}[({row} * {bm} + i * 16) * {n} + col];"));
    let keep_init = k.init == OutputInit::Keep;
    if out_half {
        line(3, &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, __half> h;"));
        if keep_init {
            line(3, &format!("wmma::load_matrix_sync(h, to, {n}, wmma::mem_row_major);"));
            line(
                3,
                "for (int t = 0; t < h.num_elements; t++) h.x[t] = __float2half(acc[i][j].x[t] + __half2float(h.x[t]));",
            );
        } else {
            line(3, "for (int t = 0; t < h.num_elements; t++) h.x[t] = __float2half(acc[i][j].x[t]);");
        }
        line(3, &format!("wmma::store_matrix_sync(to, h, {n}, wmma::mem_row_major);"));
    } else {
        if keep_init {
            line(3, &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, float> c;"));
            line(3, &format!("wmma::load_matrix_sync(c, to, {n}, wmma::mem_row_major);"));
            line(3, "for (int t = 0; t < c.num_elements; t++) acc[i][j].x[t] += c.x[t];");
        }
        line(3, &format!("wmma::store_matrix_sync(to, acc[i][j], {n}, wmma::mem_row_major);"));
    }
    line(2, "}");
    line(1, "}");
    line(0, "}");
    src
}

/// The copies of the `bk` rows of B from row `kb` (a block's column block
/// times `bk`), the block's slab of columns from `n0`, into `b_s[buf]`, by
/// `threads` threads; columns past the end are zeros.
fn copy_b_rows(w: &Rows, dense: &str, threads: usize) -> String {
    let (bk, n, slab) = (w.bk, w.n, w.slab);
    let vec = 16 / w.operand.size_bytes();
    let b_chunks = bk * slab / vec;
    let mut src = String::new();
    let mut line = |depth: usize, text: &str| pattern::push_lines(&mut src, depth, text);
    line(0, "#pragma unroll");
    line(0, &format!("for (int i = 0; i < {}; i++) {{", b_chunks.div_ceil(threads)));
    line(1, &format!("const int c = threadIdx.x + i * {threads};"));
    line(1, &format!("const int r = c / {}, e = c % {} * {vec};", slab / vec, slab / vec));
    let b_copy =
        format!("spindle_cp_async16_keep(&b_s[buf][r][e], &{dense}[(kb + r) * {n} + n0 + e], keep);");
    let b_copy = if !n.is_multiple_of(slab) {
        format!(
            "if (n0 + e < {n}) {b_copy}\nelse *reinterpret_cast<uint4 *>(&b_s[buf][r][e]) = make_uint4(0, 0, 0, 0);"
        )
    } else {
        b_copy
    };
    if b_chunks.is_multiple_of(threads) {
        line(1, &b_copy);
    } else {
        line(1, &format!("if (c < {b_chunks}) {{"));
        line(2, &b_copy);
        line(1, "}");
    }
    line(0, "}");
    src
}

/// Blocks a block of shared block rows keeps for after its column steps
/// (a row's second block at a column: BlockGroupCOO's padding, or repeats
/// in given data); past this many it steps through its blocks one by one.
const EXTRAS: usize = 256;

/// Prints `k` under the block-row mapping with `share` block rows to a
/// block: its warps own `share` consecutive block rows (a row's warps its
/// `slab` columns), and each column block that any of them stores is one
/// step of the copy ring: its `bk` rows of B, copied once, multiply the
/// blocks of every row that has one there. B's rows are read from L2 once
/// per column block of the union of the rows, not once per block.
fn print_shared(k: &Kernel, w: &Rows, share: usize, symbol: &str) -> Result<CudaKernel, PrintError> {
    let names = Names::new(k, "g_");
    let name = |t: TensorId| names.tensors[t].clone();
    let (rows, crd, values, dense, out) =
        (name(w.rows), name(w.crd), name(w.values), name(w.dense), name(w.out));
    let (bm, bk, g, n, slab) = (w.bm, w.bk, w.group, w.n, w.slab);
    let elem = w.operand.size_bytes();
    let ty = match w.operand {
        DType::F16 => "__half",
        DType::Bf16 => "__nv_bfloat16",
        _ => "float",
    };
    let (_, ks) = fragment(w.operand);
    let vec = 16 / elem;
    let (a_pitch, b_pitch) = (bk + vec, slab + vec);
    let row_warps = slab / WARP_COLUMNS;
    let warps = share * row_warps;
    let threads = warps * 32;
    let column_blocks = k.tensor(w.dense).shape[0] / bk;
    // Shared memory: the ring (every row's block and B's rows a stage), the
    // row-by-column table of blocks, the column list, the kept blocks.
    let a_bytes = STAGES * share * bm * a_pitch * elem;
    let ring_bytes = a_bytes + STAGES * bk * b_pitch * elem;
    let table = share * column_blocks * 4;
    let bytes = ring_bytes + table + column_blocks * 4 + EXTRAS * 4;
    if bytes > MAX_DYNAMIC_SHARED_BYTES {
        return Err(PrintError::SharedMemory {
            kernel: k.name.clone(),
            bytes,
            limit: MAX_DYNAMIC_SHARED_BYTES,
            arrays: vec![
                ("the copy ring".into(), ring_bytes),
                (format!("the blocks of {share} rows at {column_blocks} column blocks"), table),
            ],
        });
    }
    // Beside it, the rows' runs and two counters are static: 256 bytes spare.
    let dynamic = bytes + 256 > MAX_STATIC_SHARED_BYTES;
    let block_rows = w.m / bm;
    let slabs = n.div_ceil(slab);
    let grid = block_rows.div_ceil(share) * slabs;
    if grid > i32::MAX as usize {
        return Err(PrintError::Grid { kernel: k.name.clone(), programs: grid as u64 });
    }
    let launch = LaunchGeometry { grid: grid as u32, block: threads as u32, shared_bytes: bytes, dynamic };
    let (mi, ni) = (bm / 16, WARP_COLUMNS / 16);
    let a_chunks = bm * bk / vec;

    let mut src = String::new();
    let mut line = |depth: usize, text: &str| pattern::push_lines(&mut src, depth, text);
    let notes = [
        format!(
            "launch: grid {grid}, block {threads}; block b owns block rows [(b / {slabs}) * {share}, +{share}) \
             of {out} and its columns [(b % {slabs}) * {slab}, +{slab}); warp w the {bm}x32 tile of row w / \
             {row_warps} at column 32*(w % {row_warps}); a step per column block some of the rows store: a \
             {STAGES}-buffer cp.async ring of {bk}x{slab} rows of {dense} and the rows' {bm}x{bk} blocks \
             ({bytes} bytes of shared memory)"
        ),
        format!("needs {} nondecreasing: a block row's groups are one run", k.tensor(w.rows).name),
    ];
    let mapping = format!("block-row mapping (map=rows), {share} rows sharing B");
    line(0, &pattern::banner(k, &mapping, &notes));
    let plan = pattern::plan(&mapping, &notes);
    line(0, &headers(dynamic));
    line(0, &pattern::signature(k, &names, symbol, threads as u32));
    if dynamic {
        line(1, &format!("SPINDLE_DYNAMIC_SHARED(spindle_smem, {bytes});"));
    } else {
        line(1, &format!("__shared__ __align__(128) unsigned char spindle_smem[{bytes}];"));
    }
    let a_dims = format!("[{STAGES}][{share}][{bm}][{a_pitch}]");
    let b_dims = format!("[{STAGES}][{bk}][{b_pitch}]");
    line(1, &format!("{ty} (&a_s){a_dims} = *reinterpret_cast<{ty} (*){a_dims}>(spindle_smem);"));
    line(1, &format!("{ty} (&b_s){b_dims} = *reinterpret_cast<{ty} (*){b_dims}>(spindle_smem + {a_bytes});"));
    line(1, "// pos_s[r][c]: the block (from the first of the rows') of row r at column block c, or ~0u.");
    line(
        1,
        &format!(
            "unsigned (&pos_s)[{share}][{column_blocks}] = *reinterpret_cast<unsigned (*)[{share}][{column_blocks}]>(spindle_smem + {ring_bytes});"
        ),
    );
    line(1, "// The column blocks some row stores, in order; the blocks kept for after them.");
    line(1, &format!("int *cols_s = reinterpret_cast<int *>(spindle_smem + {});", ring_bytes + table));
    line(
        1,
        &format!(
            "int *extra_s = reinterpret_cast<int *>(spindle_smem + {});",
            ring_bytes + table + column_blocks * 4
        ),
    );
    line(1, &format!("__shared__ long long run_s[{}];", share + 1));
    line(1, "__shared__ int ncols_s, nextra_s;");
    line(1, "const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;");
    line(1, &format!("const int wr = warp / {row_warps}, wc = warp % {row_warps};"));
    line(1, &format!("const long long row0 = (long long)(blockIdx.x / {slabs}) * {share};"));
    line(1, &format!("const long long n0 = (long long)(blockIdx.x % {slabs}) * {slab};"));
    line(
        1,
        &format!(
            "const int here = (int)({block_rows}LL - row0 < {share} ? {block_rows}LL - row0 : {share});"
        ),
    );
    line(1, "// Row r's groups are the run of p with R[p] == row0 + r; the rows' runs follow each other.");
    line(
        1,
        &format!(
            "if (warp < here) {{\n  const long long lo = spindle_lower_bound({rows}, {}LL, row0 + warp);\n  if (lane == 0) run_s[warp] = lo;\n}}",
            w.groups
        ),
    );
    line(
        1,
        &format!(
            "if (warp == {}) {{\n  const long long hi = spindle_lower_bound({rows}, {}LL, row0 + here);\n  if (lane == 0) run_s[here] = hi;\n}}",
            warps - 1,
            w.groups
        ),
    );
    line(
        1,
        &format!(
            "for (int i = threadIdx.x; i < {}; i += {threads}) (&pos_s[0][0])[i] = ~0u;",
            share * column_blocks
        ),
    );
    line(1, "if (threadIdx.x == 0) nextra_s = 0;");
    line(1, "__syncthreads();");
    line(1, &format!("const long long first = run_s[0] * {g}, total = (run_s[here] - run_s[0]) * {g};"));
    line(1, "// Each block into its row's slot at its column block: first the blocks that do not repeat the");
    line(
        1,
        "// column of the slot before them, then those that do (BlockGroupCOO pads a group so, with zeros).",
    );
    line(1, "// A block whose slot is taken is kept for after the column steps.");
    line(1, "for (int pass = 0; pass < 2; pass++) {");
    line(2, &format!("for (long long s = threadIdx.x; s < total; s += {threads}) {{"));
    line(3, "const long long at = first + s;");
    line(3, &format!("const int c = (int){crd}[at];"));
    line(3, &format!("const bool repeat = at % {g} != 0 && (int){crd}[at - 1] == c;"));
    line(3, "if (repeat == (pass == 1)) {");
    line(4, &format!("const int r = (int)((long long){rows}[at / {g}] - row0);"));
    line(4, "if (atomicCAS(&pos_s[r][c], ~0u, (unsigned)s) != ~0u) {");
    line(5, "const int e = atomicAdd(&nextra_s, 1);");
    line(5, &format!("if (e < {EXTRAS}) extra_s[e] = (int)s;"));
    line(4, "}");
    line(3, "}");
    line(2, "}");
    line(2, "__syncthreads();");
    line(1, "}");
    line(1, "// The column blocks some row stores, in order (warp 0, a ballot per 32 columns).");
    line(1, "if (warp == 0) {");
    line(2, "int count = 0;");
    line(2, &format!("for (int c0 = 0; c0 < {column_blocks}; c0 += 32) {{"));
    line(3, "const int c = c0 + lane;");
    line(3, "bool any = false;");
    line(3, &format!("if (c < {column_blocks}) for (int r = 0; r < here; r++) any |= pos_s[r][c] != ~0u;"));
    line(3, "const unsigned m = __ballot_sync(0xffffffffu, any);");
    line(3, "if (any) cols_s[count + __popc(m & ((1u << lane) - 1u))] = c;");
    line(3, "count += __popc(m);");
    line(2, "}");
    line(2, "if (lane == 0) ncols_s = count;");
    line(1, "}");
    line(1, "// Kept blocks of zeros (padding) need no step: a warp a block reads its values.");
    line(1, &format!("const int kept = nextra_s <= {EXTRAS} ? nextra_s : 0;"));
    line(1, &format!("for (int e = warp; e < kept; e += {warps}) {{"));
    line(
        2,
        &format!(
            "const uint4 *v = reinterpret_cast<const uint4 *>(&{values}[(first + extra_s[e]) * {}]);",
            bm * bk
        ),
    );
    line(2, "bool nonzero = false;");
    line(
        2,
        &format!(
            "for (int i = lane; i < {a_chunks}; i += 32) {{\n  const uint4 x = v[i];\n  nonzero |= (x.x | x.y | x.z | x.w) != 0u;\n}}"
        ),
    );
    line(2, "if (__ballot_sync(0xffffffffu, nonzero) == 0u && lane == 0) extra_s[e] = -1;");
    line(1, "}");
    line(1, "__syncthreads();");
    line(1, &format!("// Past {EXTRAS} kept blocks, every block is a step of its own (no column steps)."));
    line(1, &format!("const bool one_by_one = nextra_s > {EXTRAS};"));
    line(1, "const int steps = one_by_one ? 0 : ncols_s;");
    line(1, "const unsigned long long keep = spindle_evict_last();");
    line(1, "// Step t into buffer `buf`: B's rows at column block cols_s[t] and the rows' blocks there.");
    // 16-byte chunk `c` of a block's values into row `row` of a buffer:
    // each step's copy and the copy of a block multiplied alone.
    let chunk_at = format!("const int y = c / {}, e = c % {} * {vec};", bk / vec, bk / vec);
    let copy_chunk = |row: &str, block: &str| {
        format!(
            "spindle_cp_async16(&a_s[buf][{row}][y][e], &{values}[({block}) * {} + y * {bk} + e]);",
            bm * bk
        )
    };
    line(1, "auto fill = [&](int buf, int t) {");
    line(2, "const int col = cols_s[t];");
    line(2, &format!("const long long kb = (long long)col * {bk};"));
    line(2, &format!("for (int i = threadIdx.x; i < {}; i += {threads}) {{", share * a_chunks));
    line(3, &format!("const int r = i / {a_chunks}, c = i % {a_chunks};"));
    line(3, "const unsigned s = pos_s[r][col];");
    line(3, &chunk_at);
    line(3, &format!("if (s != ~0u) {}", copy_chunk("r", "first + s")));
    line(2, "}");
    line(2, &copy_b_rows(w, &dense, threads));
    line(1, "};");
    line(1, &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, float> acc[{mi}][{ni}];"));
    line(1, &format!("#pragma unroll\nfor (int i = 0; i < {mi}; i++)"));
    line(2, &format!("#pragma unroll\nfor (int j = 0; j < {ni}; j++) wmma::fill_fragment(acc[i][j], 0.0f);"));
    line(1, "// Block s alone through buffer 0: its B rows and values, its row's warps multiplying.");
    line(1, "auto alone = [&](long long s) {");
    line(2, "const long long at = first + s;");
    line(2, &format!("const int owner = (int)((long long){rows}[at / {g}] - row0);"));
    line(2, &format!("const long long kb = (long long){crd}[at] * {bk};"));
    line(2, "const int buf = 0;");
    line(2, &format!("for (int c = threadIdx.x; c < {a_chunks}; c += {threads}) {{"));
    line(3, &chunk_at);
    line(3, &copy_chunk("owner", "at"));
    line(2, "}");
    line(2, &copy_b_rows(w, &dense, threads));
    line(2, "spindle_cp_async_commit();");
    line(2, "spindle_cp_async_wait<0>();");
    line(2, "__syncthreads();");
    line(2, "if (wr == owner) {");
    line(3, &products(w, "a_s[buf][wr]", "wc", a_pitch, b_pitch));
    line(2, "}");
    line(2, "__syncthreads();");
    line(1, "};");
    let step = format!(
        "if (pos_s[wr][cols_s[t]] != ~0u) {{\n{}}}",
        pattern::indent(&products(w, "a_s[buf][wr]", "wc", a_pitch, b_pitch))
    );
    line(1, &ring("steps", "int", &step, None));
    line(1, "spindle_cp_async_wait<0>();");
    line(1, "__syncthreads();");
    line(1, "if (one_by_one) {");
    line(2, "for (long long s = 0; s < total; s++) alone(s);");
    line(1, "} else {");
    line(2, "for (int e = 0; e < nextra_s; e++)");
    line(3, "if (extra_s[e] >= 0) alone(extra_s[e]);");
    line(1, "}");
    line(1, "if (wr < here) {");
    line(2, "const long long row = row0 + wr;");
    line(2, &store(k, w, &out, "row", "wc"));
    line(1, "}");
    line(0, "}");
    Ok(CudaKernel {
        sorted: Some(k.tensor(w.rows).name.clone()),
        writes_output: k.init == OutputInit::Zero,
        plan,
        ..CudaKernel::plain(symbol, src, launch)
    })
}

/// What a block-row kernel includes and defines before its signature: the
/// headers, the 32-way search, the `cp.async` helpers, and with `dynamic`
/// shared memory the macro that declares it.
fn headers(dynamic: bool) -> String {
    let mut text =
        "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <mma.h>\nnamespace wmma = nvcuda::wmma;\n"
            .to_string();
    text += pattern::LOWER_BOUND;
    text += pattern::L2_POLICIES;
    text += HELPERS;
    if dynamic {
        text += "#ifndef SPINDLE_DYNAMIC_SHARED\n\
                 #define SPINDLE_DYNAMIC_SHARED(name, bytes) extern __shared__ __align__(128) unsigned char name[]\n\
                 #endif\n";
    }
    text
}

/// The copy ring's loop over `count` steps (a `t_ty` counter `t`): the first
/// `STAGES - 1` steps' copies (`fill(buf, t)`) in flight before it, then per
/// step a wait for its copies and a barrier, the copies of the step
/// `STAGES - 1` ahead into the buffer every warp has finished with, and
/// `body` on buffer `buf`. With `column` (a step's column block, as an
/// expression of the step's), `fill` takes that value as a third argument, loaded one
/// step before its copies are issued, so the load's latency passes behind
/// a step of products instead of holding up the copies.
fn ring(count: &str, t_ty: &str, body: &str, column: Option<&dyn Fn(&str) -> String>) -> String {
    let ahead = STAGES - 1;
    let at = |step: &str| column.map(|c| c(step));
    let args = |step: &str, col: Option<String>| match col {
        Some(col) => format!("{step}, {col}"),
        None => step.to_string(),
    };
    let mut src = String::new();
    let mut line = |depth: usize, text: &str| pattern::push_lines(&mut src, depth, text);
    line(0, "// The first steps into the ring, a copy group each.");
    line(0, "#pragma unroll");
    line(0, &format!("for (int s = 0; s < {ahead}; s++) {{"));
    line(1, &format!("if (s < {count}) fill(s, {});", args("s", at("s"))));
    line(1, "spindle_cp_async_commit();");
    line(0, "}");
    if let Some(next) = at(&ahead.to_string()) {
        line(0, "// The column block of the next step's copies, loaded a step ahead.");
        line(0, &format!("long long next_col = {ahead} < {count} ? {next} : 0;"));
    }
    line(0, &format!("for ({t_ty} t = 0; t < {count}; t++) {{"));
    line(1, "// Step t has landed; every warp is done with step t - 1, whose buffer is refilled.");
    line(1, &format!("spindle_cp_async_wait<{}>();", STAGES - 2));
    line(1, "__syncthreads();");
    let next = column.map(|_| "next_col".to_string());
    line(
        1,
        &format!(
            "if (t + {ahead} < {count}) fill((int)((t + {ahead}) % {STAGES}), {});",
            args(&format!("t + {ahead}"), next)
        ),
    );
    line(1, "spindle_cp_async_commit();");
    if let Some(following) = at(&format!("(t + {})", ahead + 1)) {
        line(1, &format!("if (t + {} < {count}) next_col = {following};", ahead + 1));
    }
    line(1, &format!("const int buf = (int)(t % {STAGES});"));
    line(1, body);
    line(0, "}");
    src
}
