//! The warp-walk mapping (`map=walk`) of gather-scale-scatter kernels,
//! `C[R[p],n] += V[p,q] * B[K[p,q],n]` (GroupCOO SpMM; COO without `q`):
//!
//! - a warp walks a run of consecutive `p` (the schedule's p tile) in
//!   order; its lanes own adjacent columns of `n`, `VEC` each, so B is
//!   read and C written in 16-byte vectors;
//! - where a row of B takes at most half the lanes (f16 at N = 128), the
//!   warp splits into sub-warps that take alternate entries of each group
//!   and add their sums with shuffles before a row is written, and where
//!   lanes are still idle (groups of one entry: CSR's, COO's) into teams
//!   that walk runs of their own;
//! - lanes `q < g` read the group's `K` and `V` in one coalesced load and
//!   broadcast them with `__shfl_sync`: no shared memory, no barrier; the
//!   next group's are loaded before this group's products;
//! - up to eight rows of B are loaded before their FMAs;
//! - the row's sum stays in registers while the run stays in the row (a
//!   segment reduction over the sorted run, one thread per column); a row
//!   is written once, with atomics only for the run's first and last rows,
//!   which neighbouring runs may share. Interior rows belong to the run
//!   alone, which needs `R` nondecreasing: the printed kernel says so
//!   ([`CudaKernel::sorted`]) and the driver checks the data. Where the
//!   output starts at zero an interior row's sum is its value, stored
//!   without reading the row (under `+=` into given data it is added).
//!
//! Every other kernel is refused with the reason.

use spindle_c::dialect::Dialect;
use spindle_ir::formats::DType;
use spindle_ir::kernel::*;
use spindle_ir::lang::ElemType;

use super::dialect::Cuda;
use super::namer::Names;
use super::pattern;
use super::*;

/// The parts of a gather-scale-scatter kernel.
#[derive(Clone, Debug)]
pub(super) struct Walk {
    /// The walked axis.
    pub p: AxisId,
    /// `R`, `V`, `K`, `B`, `C`.
    rows: TensorId,
    scale: TensorId,
    crd: TensorId,
    dense: TensorId,
    out: TensorId,
    /// Extents: groups `p`, in-group `q` (1 without it), columns `n`.
    groups: usize,
    group: usize,
    columns: usize,
    /// Groups a warp walks.
    run: usize,
}

/// The row walk's device helpers: where the first rows at or after a
/// walker's two ends start. One coalesced load of the `T` entries from each
/// end (a lane each of the walker's `T`: a warp, or a team) answers unless
/// a row runs past them (then the search does); both ends' loads go out
/// before either answer is used, since a kernel that starts after an L2
/// flush pays a round trip to memory per dependent load.
const ROW_STARTS: &str = r#"// One end's answer from its look: `starts`, the lanes i of the T entries
// from `at` with r[at + i] != before = r[at - 1].
template <int T, class I>
__device__ __forceinline__ long long spindle_row_start_from(const I *__restrict__ r, long long n, long long at,
                                                            long long before, unsigned starts) {
  if (starts) return at + __ffs(starts) - 1;
  if (at + T >= n) return n;
  return at + T + spindle_lower_bound<T>(r + at + T, n - at - T, before + 1);
}
// The first i in [at, n) with r[i] != r[at - 1] (n if none), r
// nondecreasing, for at = s (0 where s == 0) and at = e (n where e >= n),
// 0 <= s < e. Called by every lane of the walker's T (an aligned team of
// a warp) with the same arguments.
template <int T, class I>
__device__ __forceinline__ void spindle_row_starts(const I *__restrict__ r, long long n, long long s, long long e,
                                                   long long *p0, long long *p1) {
  const int lane = threadIdx.x & (T - 1);
  const int first = (threadIdx.x & 31) - lane;
  const unsigned lanes = T == 32 ? 0xffffffffu : ((1u << (T & 31)) - 1u) << first;
  const bool look0 = s > 0, look1 = e < n;
  const long long i0 = s + lane, i1 = e + lane;
  const long long before0 = look0 ? (long long)r[s - 1] : 0;
  const long long before1 = look1 ? (long long)r[e - 1] : 0;
  const long long at0 = look0 && i0 < n ? (long long)r[i0] : before0;
  const long long at1 = look1 && i1 < n ? (long long)r[i1] : before1;
  const unsigned starts0 = __ballot_sync(lanes, at0 != before0) >> first;
  const unsigned starts1 = __ballot_sync(lanes, at1 != before1) >> first;
  *p0 = look0 ? spindle_row_start_from<T>(r, n, s, before0, starts0) : 0;
  *p1 = look1 ? spindle_row_start_from<T>(r, n, e, before1, starts1) : n;
}
"#;

/// Rows of B loaded before their products.
const CHUNK: usize = 8;
/// The carried walk's scratch parameter ([`Carry`]).
const CARRY: &str = "spindle_carry";
/// The name of the carried walk's second kernel after the walk's.
const CARRY_SUFFIX: &str = "_carry";

/// `signature` with the carried walk's scratch buffer of `real` appended.
fn with_carry(signature: &str, real: &str) -> String {
    let open = signature.strip_suffix(") {").expect("a signature ends with `) {`");
    format!("{open},\n    {real} *__restrict__ {CARRY}) {{")
}
/// Threads per block unless the schedule says.
const BLOCK: u32 = 128;

/// `k`'s parts, or why it is not `C[R[p],n] += V[p,q] * B[K[p,q],n]`.
pub(super) fn recognise(k: &Kernel) -> Result<Walk, String> {
    let s = &k.sink;
    let range = |id: ValueId| pattern::range(k, id);
    let load_at = |id: ValueId| pattern::load_at(k, id);
    let [row_ix, col_ix] = s.index[..] else {
        return Err("the output is not a matrix C[R[p],n]".into());
    };
    let (rows, by) = load_at(row_ix).ok_or("the output's row is not an index tensor R[p]")?;
    let (Some(n), &[p]) = (range(col_ix), &by[..]) else {
        return Err("the output is not C[R[p],n]".into());
    };
    if s.reduction != Reduction::Sum {
        return Err("the output is not summed into".into());
    }
    let reduced = k.reduced_axes();
    if k.parallel_axes().len() != 2 || reduced.len() > 1 {
        return Err("it has other indices than p, n and one reduced q".into());
    }
    if pattern::masks_read_data(k) {
        return Err("it skips the terms a mask array marks (a format's padding, where a factor holds \
                    non-finite values)"
            .into());
    }
    let q = reduced.first().copied();
    let at = |axes: &[AxisId]| axes == [p] || (q.is_some() && axes == [p, q.unwrap()]);
    // The float loads: V[p(,q)] and B[K[p(,q)], n].
    let mut scale = None;
    let mut gather = None;
    for &id in &k.order {
        let v = k.value(id);
        match &v.op {
            Op::Load { tensor, index, .. } if v.scalar == Scalar::Float => match index[..] {
                [kx, nx] if range(nx) == Some(n) => gather = Some((*tensor, kx)),
                _ => match load_at(id) {
                    Some((t, axes)) if at(&axes) => scale = Some(t),
                    _ => {
                        return Err(format!(
                            "it reads {} otherwise than V[p,q] or B[K[p,q],n]",
                            k.tensor(*tensor).name
                        ));
                    }
                },
            },
            Op::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Div | BinaryOp::Max | BinaryOp::Min, ..)
            | Op::Unary(..) => return Err("its value is more than a product".into()),
            Op::Reduce { reduction, .. } if *reduction != Reduction::Sum => {
                return Err("it reduces by other than a sum".into());
            }
            _ => {}
        }
    }
    let (Some(scale), Some((dense, kx))) = (scale, gather) else {
        // An integer B[K[p,q],n] is loaded as an index, not a value.
        let integer = k.order.iter().find_map(|&id| match &k.value(id).op {
            Op::Load { tensor, index, .. }
                if k.value(id).scalar != Scalar::Float
                    && matches!(index[..], [_, nx] if range(nx) == Some(n)) =>
            {
                Some(k.tensor(*tensor).name.clone())
            }
            _ => None,
        });
        return Err(match integer {
            Some(t) => format!(
                "`{t}` holds integers, and the walk multiplies float values: give it a float dtype \
                 (--shape {t}=:f32, or `where {t}: f32`)"
            ),
            None => "it is not a product V[p,q] * B[K[p,q],n]".into(),
        });
    };
    let (crd, axes) = load_at(kx).ok_or("B's row is not an index tensor K[p,q]")?;
    if !at(&axes) {
        return Err("B's row is not K[p,q]".into());
    }
    let group = q.map_or(1, |q| k.axis(q).extent);
    if group > 32 {
        return Err(format!("groups of {group} are more than a warp's 32 lanes"));
    }
    let dense_shape = &k.tensor(dense).shape;
    if dense_shape.len() != 2 || dense_shape[1] != k.axis(n).extent {
        return Err("B is not a matrix with n's columns".into());
    }
    Ok(Walk {
        p,
        rows,
        scale,
        crd,
        dense,
        out: s.tensor,
        groups: k.axis(p).extent,
        group,
        columns: k.axis(n).extent,
        run: k.axis(p).tile,
    })
}

/// Bytes of an element of tensor `t`.
fn elem_bytes(k: &Kernel, t: TensorId) -> usize {
    match k.tensor(t).dtype {
        ElemType::Value(v) => v.size_bytes(),
        ElemType::Index(_) => 8,
    }
}

/// Columns per lane: one 16-byte load of B, where the rows allow it.
fn lane_columns(k: &Kernel, w: &Walk) -> usize {
    [16 / elem_bytes(k, w.dense), 1].into_iter().find(|v| w.columns.is_multiple_of(*v)).unwrap_or(1)
}

/// Whether a lane reads its columns of a row of B in one 16-byte load.
pub(super) fn sixteen_byte_rows(k: &Kernel, w: &Walk) -> bool {
    lane_columns(k, w) * elem_bytes(k, w.dense) == 16
}

/// Prints `k` under the warp-walk mapping: with `owned` (`map=rows`) a
/// warp writes whole rows, else (`map=walk`) it shares its first and last
/// rows with the neighbouring runs: where the output starts at zero it
/// stores its own rows and the empty rows after them and carries its sums
/// of a shared row to a second kernel ([`Carry`]), else (`+=` into given
/// data; a 16-bit output summed in f32) it adds them by atomics.
pub(super) fn print(
    k: &Kernel,
    symbol: &str,
    opts: &PrintOptions,
    owned: bool,
) -> Result<CudaKernel, PrintError> {
    let w = recognise(k).map_err(|reason| match owned {
        true => PrintError::Rows { kernel: k.name.clone(), reason },
        false => PrintError::Walk { kernel: k.name.clone(), reason },
    })?;
    let names = Names::new(k, "g_");
    let d = Cuda { real: spindle_c::dialect::real_of(k), wide: true };
    let real = d.real;
    let dtype = |t: TensorId| k.tensor(t).dtype;
    let elem = |t: TensorId| elem_bytes(k, t);
    let vec = lane_columns(k, &w);
    let chunks = w.columns.div_ceil(32 * vec).max(1);
    // L2 policies where B is read in 16-byte vectors (`l2hints=on`).
    let hints = opts.l2_hints && sixteen_byte_rows(k, &w);
    let Team { lanes, split, size } = team(w.columns, vec, w.group);
    // The row walk writes every row, so one run at least: with no groups,
    // warp 0 of each column chunk writes the zero rows.
    let carried = !owned && k.init == OutputInit::Zero;
    let runs = w.groups.div_ceil(w.run.max(1)).max(usize::from(owned || carried));
    let block = opts.threads.unwrap_or(BLOCK);
    // (`warps` counts walkers: warps, or teams of `size` lanes.)
    let warps_per_block = block as usize / size;
    let warps = runs * chunks;
    let grid = warps.div_ceil(warps_per_block).max(1);
    if grid > i32::MAX as usize {
        return Err(PrintError::Grid { kernel: k.name.clone(), programs: grid as u64 });
    }
    let launch = LaunchGeometry { grid: grid as u32, block, shared_bytes: 0, dynamic: false };
    // Positions, rows and warps of a split warp as 32-bit integers where
    // every offset the kernel forms from them fits. Under a plain
    // `__launch_bounds__` ptxas aims at full occupancy (32 registers at 128
    // threads) and spilled a few bytes outside the inner loop in some
    // shapes (all-32-bit indices made it worse); such a kernel is compiled
    // again with a register budget (`nvrtc::compile_spill_free`).
    let fits = [
        w.groups * w.group,
        k.tensor(w.out).shape[0] * w.columns,
        k.tensor(w.dense).shape[0] * w.columns,
        warps + warps_per_block,
        runs * 2 * w.columns,
    ]
    .iter()
    .all(|&x| x < i32::MAX as usize);
    let ix = if fits && split > 1 { "int" } else { "long long" };
    let groups_lit = if ix == "int" { w.groups.to_string() } else { format!("{}LL", w.groups) };
    let name = |t: TensorId| names.tensors[t].clone();
    let (rows, scale, crd, dense, out) =
        (name(w.rows), name(w.scale), name(w.crd), name(w.dense), name(w.out));
    let (g, n, vec_text) = (w.group, w.columns, vec);
    let load = |t: TensorId, array: &str, address: &str| d.load(dtype(t), array, address);

    let mut src = String::new();
    let mut line = |depth: usize, text: &str| pattern::push_lines(&mut src, depth, text);
    let r = w.run;
    let columns = match vec {
        1 => "a column".to_string(),
        _ => format!("{vec} columns"),
    };
    let walker = match size {
        32 => "warp w".to_string(),
        1 => "thread w (32 a warp)".to_string(),
        _ => format!("team w of {size} lanes ({} a warp)", 32 / size),
    };
    let mut notes = if owned {
        vec![
            format!(
                "launch: grid {grid}, block {block}; {walker} writes the rows whose first group lies in \
                 [{r}*(w/{chunks}), +{r}) of p (and the empty rows after them), whole, its lanes {columns} \
                 each of chunk w%{chunks} of n"
            ),
            format!("needs {} nondecreasing: a row's groups are one run", k.tensor(w.rows).name),
        ]
    } else {
        vec![
            format!(
                "launch: grid {grid}, block {block}; {walker} walks groups [{r}*(w/{chunks}), +{r}) of p, its \
                 lanes {columns} each of chunk w%{chunks} of n"
            ),
            format!("needs {} nondecreasing: a run's interior rows are its own", k.tensor(w.rows).name),
        ]
    };
    if carried {
        notes.push(format!(
            "rows shared with the neighbouring runs carried to {symbol}{CARRY_SUFFIX}: no atomics, no zeroing"
        ));
    }
    if split > 1 {
        notes.push(format!("{split} sub-warps of {lanes} lanes take alternate entries of each group"));
    }
    if hints {
        notes.push(
            "L2 policies (l2hints=on): B's rows read with evict_last, C's rows stored with evict_first"
                .into(),
        );
    }
    let mapping = if owned { "row-walk mapping (map=rows)" } else { "warp-walk mapping (map=walk)" };
    line(0, &pattern::banner(k, mapping, &notes));
    let plan = pattern::plan(mapping, &notes);
    let halves = k.tensors.values().any(|t| matches!(t.dtype, ElemType::Value(DType::F16 | DType::Bf16)));
    if halves {
        line(0, "#include <cuda_fp16.h>\n#include <cuda_bf16.h>");
    }
    if owned {
        line(0, pattern::LOWER_BOUND);
        line(0, ROW_STARTS);
    }
    if hints {
        line(0, pattern::L2_POLICIES);
        line(0, pattern::L2_HINTED_ACCESS);
    }
    line(0, "");
    let signature = |symbol: &str| match carried {
        true => with_carry(&pattern::signature(k, &names, symbol, block), real),
        false => pattern::signature(k, &names, symbol, block),
    };
    // Both kernels' walker: its lane, its warp (or team) and its end.
    let mut head = String::new();
    let mut hl = |depth: usize, text: &str| pattern::push_lines(&mut head, depth, text);
    hl(1, &format!("const int lane = threadIdx.x & {};", size - 1));
    if size < 32 {
        hl(
            1,
            &match size {
                1 => "// Each thread walks a run of its own.".to_string(),
                _ => format!(
                    "// A team of {size} lanes walks a run; the {} teams of a warp walk apart.",
                    32 / size
                ),
            },
        );
    }
    // (The lanes of the team's shuffles, where a group has entries to share.)
    if size < 32 && g > 1 {
        hl(
            1,
            &format!("const unsigned team = 0x{:x}u << (threadIdx.x & {});", (1u64 << size) - 1, 32 - size),
        );
    }
    hl(
        1,
        &format!(
            "const {ix} warp = ({ix})blockIdx.x * {warps_per_block} + (threadIdx.x >> {});",
            size.trailing_zeros()
        ),
    );
    hl(1, &format!("if (warp >= {warps}) return;"));
    // The lanes a shuffle names, and its width.
    let (lanes_mask, width) = match size {
        32 => ("0xffffffffu", String::new()),
        _ => ("team", format!(", {size}")),
    };
    line(0, &signature(symbol));
    line(0, &head);
    if hints {
        line(1, "// B's rows are gathered again and again; C is written once.");
        line(1, "const unsigned long long keep = spindle_evict_last(), stream = spindle_evict_first();");
    }
    if split > 1 {
        line(
            1,
            &format!(
                "// A row of B takes {lanes} lanes: sub-warp `sub` takes entries q % {split} == sub of each group."
            ),
        );
        line(1, &format!("const int sub = lane / {lanes};"));
        line(
            1,
            &format!("const {ix} col = (warp % {chunks}) * {} + (lane % {lanes}) * {vec_text};", 32 * vec),
        );
        line(1, &format!("const bool reads = col < {n};"));
        line(1, "// Sub-warp 0 writes the rows, once the sub-warps' sums are added.");
        line(1, "const bool live = reads && sub == 0;");
    } else {
        line(1, &format!("const {ix} col = (warp % {chunks}) * {} + lane * {vec_text};", 32 * vec));
        line(1, &format!("const bool live = col < {n};"));
    }
    let reads = if split > 1 { "reads" } else { "live" };
    if owned {
        let groups = w.groups;
        line(1, &format!("const {ix} s = (warp / {chunks}) * {r}, e = min(s + {r}, {groups_lit});"));
        line(1, "// The rows whose first group lies in [s, e) are this warp's, whole.");
        line(1, "long long found0, found1;");
        line(1, &format!("spindle_row_starts<{size}>({rows}, {groups}LL, s, e, &found0, &found1);"));
        line(1, &format!("const {ix} p0 = found0, p1 = found1;"));
        line(1, "if (s > 0 && p0 >= e) return;");
    } else {
        line(1, &format!("const {ix} p0 = (warp / {chunks}) * {r};"));
        line(1, &format!("const {ix} p1 = min(p0 + {r}, {groups_lit});"));
    }
    line(1, &format!("{real} acc[{vec}];"));
    line(1, &format!("#pragma unroll\nfor (int j = 0; j < {vec}; j++) acc[j] = 0;"));
    if owned || carried {
        // p0 == p1 only where there are no groups: warp 0 zeros every row.
        let m = k.tensor(w.out).shape[0];
        line(1, &format!("{ix} row = p0 < p1 ? ({ix}){rows}[p0] : {m};"));
    } else {
        line(1, &format!("{ix} row = {rows}[p0];"));
    }
    line(
        1,
        &format!(
            "// Group p0's coordinates and values{}.",
            if g == 1 { "" } else { ", lane q holding entry q" }
        ),
    );
    line(1, &format!("{ix} crd = 0;\n{real} val = 0;"));
    // A group of one entry: every lane loads it (one transaction), and
    // nothing is shuffled; else lane q loads entry q and broadcasts it.
    let mine = |test: &str| match (g, test) {
        (1, "") => "true".to_string(),
        (1, _) => test.to_string(),
        (_, "") => format!("lane < {g}"),
        _ => format!("{test} && lane < {g}"),
    };
    let from_lane = |var: &str| match g {
        1 => var.to_string(),
        _ => format!("__shfl_sync({lanes_mask}, {var}, q{width})"),
    };
    // The position of the lane's entry of group `p`.
    let at_entry = |p: &str| match g {
        1 => p.to_string(),
        _ => format!("{p} * {g} + lane"),
    };
    line(1, &format!("if ({}) {{", mine(if owned || carried { "p0 < p1" } else { "" })));
    line(2, &format!("crd = {crd}[{}];", at_entry("p0")));
    line(2, &format!("val = {};", load(w.scale, &scale, &at_entry("p0"))));
    line(1, "}");

    // The write of a row's sums: atomic (a row the neighbouring runs may
    // share), or, for a row of this run alone, 16-byte stores (the sum is
    // the row's value where the output starts at zero) or a read-modify-
    // write (`+=` into given data).
    let at = format!("row * {n} + col");
    let atomic = format!(
        "if (live) {{\n  #pragma unroll\n  for (int j = 0; j < {vec}; j++) atomicAdd(&{out}[{at} + j], acc[j]);\n}}"
    );
    // Before a row is written, the sub-warps' sums of it are added (every
    // lane ends with the total); the shuffles sit where the warp agrees.
    let combine = match split {
        1 => String::new(),
        _ => format!(
            "#pragma unroll\nfor (int apart = {lanes}; apart < {size}; apart <<= 1) {{\n  #pragma unroll\n  \
             for (int j = 0; j < {vec}; j++) acc[j] += __shfl_xor_sync({lanes_mask}, acc[j], apart);\n}}\n"
        ),
    };
    let atomic = format!("{combine}{atomic}");
    let rows_out = RowStore { d: &d, dtype: dtype(w.out), out: &out, n, vec, hint: hints };
    let plain = combine.clone() + &rows_out.row("row", k.init != OutputInit::Zero, true);
    let zero = format!("#pragma unroll\nfor (int j = 0; j < {vec}; j++) acc[j] = 0;");
    // One group's products: the next group's entries loaded first, then up
    // to CHUNK rows of B, then their FMAs.
    // A sub-warp's entries of the group: t = 0, 1, ... is entry
    // q = t * split + sub, which lanes past the group's last entry skip
    // (only where split does not divide g: a guard the compiler cannot
    // prove true costs registers).
    let steps = g.div_ceil(split);
    let chunk = CHUNK.min(steps);
    let entry = match split {
        1 => "t0 + t".to_string(),
        _ => format!("(t0 + t) * {split} + sub"),
    };
    let inside = if g.is_multiple_of(split) { String::new() } else { format!("q < {g} && ") };
    let bty = cuda_type(dtype(w.dense));
    let mut group = String::new();
    let mut gl = |depth: usize, text: &str| pattern::push_lines(&mut group, depth, text);
    gl(0, "// The next group's entries, ahead of this group's products.");
    gl(0, &format!("{ix} crd_next = 0;\n{real} val_next = 0;"));
    gl(0, &format!("if ({}) {{", mine("p + 1 < p1")));
    gl(1, &format!("crd_next = {crd}[{}];", at_entry("(p + 1)")));
    gl(1, &format!("val_next = {};", load(w.scale, &scale, &at_entry("(p + 1)"))));
    gl(0, "}");
    gl(0, "#pragma unroll");
    gl(0, &format!("for (int t0 = 0; t0 < {steps}; t0 += {chunk}) {{"));
    gl(1, &format!("__align__(16) {bty} b[{chunk}][{vec}];"));
    gl(1, "#pragma unroll");
    gl(1, &format!("for (int t = 0; t < {chunk} && t0 + t < {steps}; t++) {{"));
    gl(2, &format!("const int q = {entry};"));
    gl(2, &format!("const {ix} k = {};", from_lane("crd")));
    if vec * elem(w.dense) == 16 {
        gl(
            2,
            &format!(
                "if ({inside}{reads}) *reinterpret_cast<uint4 *>(b[t]) = {};",
                match hints {
                    true => format!("spindle_ld16_hint(&{dense}[k * {n} + col], keep)"),
                    false => format!("*reinterpret_cast<const uint4 *>(&{dense}[k * {n} + col])"),
                }
            ),
        );
    } else {
        gl(
            2,
            &format!(
                "#pragma unroll\nfor (int j = 0; j < {vec}; j++) if ({inside}{reads}) b[t][j] = {dense}[k * {n} + col + j];"
            ),
        );
    }
    gl(1, "}");
    gl(1, "#pragma unroll");
    gl(1, &format!("for (int t = 0; t < {chunk} && t0 + t < {steps}; t++) {{"));
    gl(2, &format!("const int q = {entry};"));
    gl(2, &format!("const {real} v = {};", from_lane("val")));
    let fma = format!(
        "#pragma unroll\nfor (int j = 0; j < {vec}; j++) acc[j] += v * {};",
        load(w.dense, "b[t]", "j")
    );
    match inside.is_empty() {
        true => gl(2, &fma),
        false => gl(2, &format!("if (q < {g}) {{\n{}}}", pattern::indent(&fma))),
    }
    gl(1, "}");
    gl(0, "}");
    gl(0, "crd = crd_next;\nval = val_next;");

    let keep = k.init == OutputInit::Keep;
    let store = |row: &str, from_acc: bool| rows_out.row(row, keep, from_acc);
    // Under `+=` into given data the empty rows keep theirs.
    // Rare (empty rows): not unrolled, so it takes no registers from the
    // walk, and counted in 32 bits where the output's offsets fit (a
    // 64-bit count made ptxas spill a register across this loop on
    // sm_90 in the row walk's f32 and f16 shapes).
    let zix = if fits { "int" } else { "long long" };
    let zero_row = store("z", false);
    let zeros = |from: &str, to: &str| match keep {
        true => String::new(),
        false => format!(
            "#pragma unroll 1\nfor ({zix} z = ({zix})({from}); z < ({zix})({to}); z++) {{\n{}}}",
            pattern::indent(&zero_row)
        ),
    };
    let (groups, m) = (w.groups, k.tensor(w.out).shape[0]);
    // The loop of the walks that store their rows (the row walk, the
    // carried walk) over groups [p0, p1): `write` writes a row as the walk
    // leaves it, the last at p == p1 (so nothing stays live past the loop),
    // then the empty rows after it up to the next row (after the last, up
    // to the next run's first) are zeroed; `after` runs after each row.
    let rows_loop = |write: &str, after: &str| {
        let mut text = String::new();
        let mut l = |depth: usize, t: &str| pattern::push_lines(&mut text, depth, t);
        l(0, "// The first row of the next run's groups (the output's end if none).");
        l(0, &format!("const {ix} next_first = p1 < {groups} ? ({ix}){rows}[p1] : {m};"));
        l(0, &format!("for ({ix} p = p0; p <= p1; p++) {{"));
        l(1, "const bool end = p == p1;");
        l(1, &format!("const {ix} r = end ? -1 : ({ix}){rows}[p];"));
        l(1, "if (r != row) {");
        l(2, &format!("if (row < {m}) {{"));
        l(3, write);
        l(2, "}");
        l(2, "// The empty rows after this one, up to the next run's first after the last.");
        l(2, &format!("const {ix} upto = !end ? r : next_first;"));
        l(2, &zeros("row + 1", "upto"));
        l(2, &zero);
        l(2, "row = r;");
        l(2, after);
        l(1, "}");
        l(1, "if (!end) {");
        l(2, &group);
        l(1, "}");
        l(0, "}");
        text
    };
    if carried {
        // The run's first row, where it began in the previous run, and its
        // last, where it runs on into the next, go to the run's two slots.
        let slot = |slot: &str| {
            format!(
                "if (live) {{\n  #pragma unroll\n  for (int j = 0; j < {vec}; j++) \
                 {CARRY}[((warp / {chunks}) * 2 + {slot}) * {n} + col + j] = acc[j];\n}}\n"
            )
        };
        let write = format!(
            "{combine}if (first && began_before) {{\n{}}} else if (end && next_first == row) {{\n{}}} else {{\n{}}}",
            pattern::indent(&slot("0")),
            pattern::indent(&slot("1")),
            pattern::indent(&store("row", true)),
        );
        line(1, &format!("const bool began_before = p0 > 0 && p0 < p1 && ({ix}){rows}[p0 - 1] == row;"));
        line(1, "if (p0 == 0) {");
        line(2, "// The first run also writes the empty rows before the first group's.");
        line(2, &zeros("0", "row"));
        line(1, "}");
        line(1, "bool first = true;");
        line(1, &rows_loop(&write, "first = false;"));
        line(0, "}");
        // The second kernel: a warp per run and column chunk, as the walk's.
        let fixup = format!("{symbol}{CARRY_SUFFIX}");
        let plain_rows = RowStore { hint: false, ..rows_out };
        line(0, "");
        line(0, "// Each row shared by runs, from the slots of the runs that walked it, in run order.");
        line(0, &signature(&fixup));
        line(0, &head);
        line(1, &format!("const {ix} col = (warp % {chunks}) * {} + lane * {vec_text};", 32 * vec));
        line(1, &format!("const bool live = col < {n};"));
        line(1, &format!("const {ix} run = warp / {chunks};"));
        line(1, &format!("const {ix} p0 = run * {r}, p1 = min(p0 + {r}, {groups_lit});"));
        line(1, "// The run's last row, where it runs on into the next run and began in this one.");
        line(1, &format!("if (p1 >= {groups}) return;"));
        line(1, &format!("const {ix} row = {rows}[p1 - 1];"));
        line(1, &format!("if ({rows}[p1] != row || (p0 > 0 && {rows}[p0 - 1] == row)) return;"));
        line(1, &format!("{real} acc[{vec}];"));
        line(1, "#pragma unroll");
        line(
            1,
            &format!(
                "for (int j = 0; j < {vec}; j++) acc[j] = live ? {CARRY}[(run * 2 + 1) * {n} + col + j] : 0;"
            ),
        );
        line(1, &format!("for ({ix} v = run + 1;; v++) {{"));
        line(2, "#pragma unroll");
        line(
            2,
            &format!("for (int j = 0; j < {vec}; j++) if (live) acc[j] += {CARRY}[(v * 2) * {n} + col + j];"),
        );
        line(2, &format!("const {ix} e = min((v + 1) * {r}, {groups_lit});"));
        line(2, &format!("if (e >= {groups} || {rows}[e] != row) break;"));
        line(1, "}");
        line(1, &plain_rows.row("row", false, true));
        line(0, "}");
        let len = runs * 2 * n;
        let dtype = if real == "double" { DType::F64 } else { DType::F32 };
        return Ok(CudaKernel {
            sorted: Some(k.tensor(w.rows).name.clone()),
            plan,
            writes_output: true,
            carry: Some(Carry { symbol: fixup, len, dtype: ElemType::Value(dtype) }),
            ..CudaKernel::plain(symbol, src, launch)
        });
    }
    if owned {
        let write = combine.clone() + &store("row", true);
        line(1, "if (s == 0) {");
        line(2, "// Warp 0 also owns the empty rows before the first group's.");
        line(2, &zeros("0", "row"));
        line(1, "}");
        line(1, &rows_loop(&write, ""));
        line(0, "}");
        return Ok(CudaKernel {
            sorted: Some(k.tensor(w.rows).name.clone()),
            plan,
            writes_output: k.init == OutputInit::Zero,
            ..CudaKernel::plain(symbol, src, launch)
        });
    }
    line(1, &format!("{ix} p = p0;"));
    line(1, "// The run's first row, which the previous run may share: written atomically.");
    line(1, &format!("for (; p < p1 && {rows}[p] == row; p++) {{"));
    line(2, &group);
    line(1, "}");
    line(1, &atomic);
    line(1, &zero);
    // The next row starts here: the first row, written, must not be written
    // again by the plain writes below (they would race with the previous
    // run's atomics on it). Past the first row, the run has a last row of
    // its own to write at the end (a flag, not the first row kept: ptxas
    // spilled that).
    line(1, "const bool more_rows = p < p1;");
    line(1, &format!("if (more_rows) row = {rows}[p];"));
    line(1, "// Rows inside the run are its own: plain writes, no atomics in this loop.");
    line(1, "for (; p < p1; p++) {");
    line(2, &format!("const {ix} r = {rows}[p];"));
    line(2, "if (r != row) {");
    line(3, &plain);
    line(3, &zero);
    line(3, "row = r;");
    line(2, "}");
    line(2, &group);
    line(1, "}");
    line(1, "// The run's last row, which the next run may share (none if the run had one row).");
    line(1, "if (more_rows) {");
    line(2, &atomic);
    line(1, "}");
    line(0, "}");
    Ok(CudaKernel {
        sorted: Some(k.tensor(w.rows).name.clone()),
        plan,
        ..CudaKernel::plain(symbol, src, launch)
    })
}

/// How a warp's lanes walk: in teams of `size` lanes, each walking a run
/// of its own, a team split into `split` sub-warps of `lanes` lanes each,
/// sub-warp `s` taking the group's entries `q % split == s`.
struct Team {
    lanes: usize,
    split: usize,
    size: usize,
}

/// The team of a walk whose rows of B have `columns` columns, `vec` a
/// lane, and whose groups have `group` entries. A row of B that takes at
/// most half a warp's lanes would leave the others idle: first a group's
/// entries split over sub-warps (one load instruction brings rows of B for
/// `split` entries, f16 at N = 128: 16 lanes a row, two rows a load, at the
/// price of adding the sub-warps' sums with shuffles before each row is
/// written); the lanes still idle (groups of one entry, COO's and CSR's,
/// have nothing to split) form teams that walk runs of their own, so a
/// load brings rows for as many runs.
fn team(columns: usize, vec: usize, group: usize) -> Team {
    let needed = columns.div_ceil(vec).next_power_of_two().min(32);
    let split = if group > 1 { (32 / needed).min(group.next_power_of_two()) } else { 1 };
    let size = needed * split;
    Team { lanes: size / split, split, size }
}

/// How a lane writes its `vec` columns of a row of `out` (`n` columns)
/// where its warp alone writes that row (the walk's rows inside a run,
/// every row of the row walk): converted to the output's type, in 16-byte
/// stores where the columns allow, those with an L2 `evict_first` policy
/// (`stream`) under `hint`.
struct RowStore<'a> {
    d: &'a Cuda,
    dtype: ElemType,
    out: &'a str,
    n: usize,
    vec: usize,
    hint: bool,
}

impl RowStore<'_> {
    /// The statement that writes row `row`: the sums `acc` (`from_acc`)
    /// or zeros; with `keep` (`+=` into given data, or the walk's output
    /// that other warps' atomics add to) added to what is there.
    fn row(&self, row: &str, keep: bool, from_acc: bool) -> String {
        let RowStore { d, dtype, out, n, vec, hint } = *self;
        let per16 = 16
            / match dtype {
                ElemType::Value(v) => v.size_bytes(),
                ElemType::Index(_) => 8,
            };
        let value = |j: &str, old: String| {
            let sum = if from_acc { format!("acc[{j}]") } else { "0".into() };
            let sum = if keep { format!("{old} + {sum}") } else { sum };
            d.store_as(dtype, &sum)
        };
        let store = match hint {
            true => "spindle_st16_hint(to, *reinterpret_cast<const uint4 *>(o), stream);",
            false => "*to = *reinterpret_cast<const uint4 *>(o);",
        };
        if vec.is_multiple_of(per16) {
            let ty = cuda_type(dtype);
            let read = if keep { "*reinterpret_cast<uint4 *>(o) = *to;\n    " } else { "" };
            format!(
                "if (live) {{\n  #pragma unroll\n  for (int c = 0; c < {chunks}; c++) {{\n    __align__(16) {ty} o[{per16}];\n    \
                 uint4 *to = reinterpret_cast<uint4 *>(&{out}[{row} * {n} + col + c * {per16}]);\n    {read}\
                 #pragma unroll\n    for (int j = 0; j < {per16}; j++) o[j] = {};\n    {store}\n  }}\n}}\n",
                value(&format!("c * {per16} + j"), d.load(dtype, "o", "j")),
                chunks = vec / per16
            )
        } else {
            format!(
                "if (live) {{\n  #pragma unroll\n  for (int j = 0; j < {vec}; j++) {out}[{row} * {n} + col + j] = {};\n}}\n",
                value("j", d.load(dtype, out, &format!("{row} * {n} + col + j")))
            )
        }
    }
}
