//! CUDA C++ of the level path's loop trees: a warp per iteration of the
//! outermost loop, its lanes splitting the row: SpMM's dense columns (each
//! lane its own output elements, reads of B coalesced across the warp) or
//! SpMV's positions (a register per lane, added with shuffles). Where the
//! iteration is a CSR, DCSR or CSF row, it owns its output rows, so no
//! atomics; where iterations share output elements (COO's or GroupCOO's
//! repeated rows, a sum outermost), the warps update them atomically (Sgap's
//! atomic strategy). The loops are the C backend's ([`spindle_c::level`]),
//! spelled in CUDA's dialect.

use spindle_c::level::{LaneSplit, Warps, lane_split, print_level_warps};
use spindle_c::namer;
use spindle_ir::formats::DType;
use spindle_ir::kernel::Reduction;
use spindle_ir::lang::ElemType;
use spindle_ir::level::LevelKernel;

use super::dialect::Cuda;
use super::sink::atomic_helper;
use super::wide::{device_level_kernel, round_level_kernel};
use super::{CudaKernel, LaunchGeometry, PrintError, cuda_type};

/// Warps per block: 256 threads.
pub const LEVEL_WARPS: u32 = 8;

/// The CUDA source of a level kernel with its launch geometry.
///
/// ```
/// use spindle_cuda::print::levels::print_level;
/// # use std::collections::BTreeMap;
/// # use spindle_cuda::ir::lang::{check, einsum::declarations, parse};
/// # use spindle_cuda::ir::formats::{Coo, FormatSpec};
/// let decls = declarations(&[("y", &[3], "f32"), ("A", &[3, 4], "f32"), ("x", &[4], "f32")]);
/// let einsum = check(&parse("y[i] = A[i,j] * x[j]").unwrap(), &decls).unwrap();
/// let a = Coo::<f64, i64>::from_triplets(3, 4, &[(0, 1, 2.0), (2, 3, 1.0)]).unwrap();
/// let lowered = spindle_cuda::ir::level::lower(
///     &einsum,
///     &BTreeMap::from([("A".to_string(), FormatSpec::Csr)]),
///     &BTreeMap::from([("A".to_string(), a)]),
///     &Default::default(),
///     "spmv",
/// )
/// .unwrap();
/// let printed = print_level(&lowered.kernel, "spmv").unwrap();
/// assert!(printed.source.contains("__shfl_down_sync"), "lanes split the row");
/// assert_eq!((printed.launch.grid, printed.launch.block), (1, 256));
/// ```
pub fn print_level(kernel: &LevelKernel, symbol: &str) -> Result<CudaKernel, PrintError> {
    if !namer::valid_symbol(symbol) {
        return Err(PrintError::Symbol { symbol: symbol.to_string() });
    }
    let refuse = |reason: String| PrintError::Levels { kernel: kernel.name.clone(), reason };
    // 16-bit operands are read into the compute type; a 16-bit output is
    // held in f32 and rounded once by a second kernel ([`super::wide`]).
    let round = round_level_kernel(kernel, symbol);
    let kernel = &*device_level_kernel(kernel);
    let sixteen =
        kernel.tensors.values().any(|t| matches!(t.dtype, ElemType::Value(DType::F16 | DType::Bf16)));
    let double = kernel.tensors.values().any(|t| t.dtype == ElemType::Value(DType::F64));
    let dialect = Cuda { real: if double { "double" } else { "float" }, wide: true };
    let split = lane_split(kernel);
    // Unasked (no reduce=parallel), lanes over the one position of a
    // singleton level (COO's column under each entry: `y = A*D*x` in a
    // program kernel, `path=levels`) would leave 31 of 32 idle, a warp an
    // entry: each thread takes an entry of its own instead, as
    // reduce=parallel(1) prints it.
    let one_term = !kernel.lanes_over_positions
        && matches!(split, LaneSplit::Positions(var) if singleton_merge(&kernel.body, var).is_some());
    let threads;
    let kernel = match one_term {
        true => {
            threads = LevelKernel { lanes: 1, ..kernel.clone() };
            &threads
        }
        false => kernel,
    };
    // A position loop over a singleton level has one position: lanes over
    // it would each sum one term (31 of 32 idle) and add nothing with
    // their shuffles.
    if kernel.lanes_over_positions
        && let LaneSplit::Positions(var) = split
        && let Some(tensor) = singleton_merge(&kernel.body, var)
    {
        return Err(refuse(format!(
            "reduce=parallel splits a row's positions over the lanes, but the loop over `{v}` walks `{tensor}`'s \
             singleton level (COO's: one position under each entry of the level above, whose coordinates \
             repeat), so each group of lanes would sum one term: store `{tensor}` in csr (a row's positions \
             split over the lanes), or drop reduce=parallel and path=levels (the tile path's reduce=segment(R) \
             adds the terms of a row that COO's sorted entries hold together)",
            v = kernel.var(var).name
        )));
    }
    if kernel.lanes_over_positions && !matches!(split, LaneSplit::Positions(_)) {
        // An order that puts the summed indices innermost, in the
        // statement's names (the output's indices first).
        fn update(nodes: &[spindle_ir::level::Node]) -> Option<&[spindle_ir::level::VarId]> {
            nodes.iter().find_map(|n| match n {
                spindle_ir::level::Node::Update { at, .. } => Some(&at[..]),
                _ => n.bodies().find_map(update),
            })
        }
        let at = update(&kernel.body).unwrap_or_default();
        let (free, summed): (Vec<_>, Vec<_>) = kernel.vars.iter().partition(|(v, _)| at.contains(v));
        let order: Vec<&str> = free.iter().chain(&summed).map(|(_, var)| var.name.as_str()).collect();
        // The loops as they run, outermost first: advice to reorder only
        // where the order would change.
        fn loops(nodes: &[spindle_ir::level::Node], out: &mut Vec<spindle_ir::level::VarId>) {
            for n in nodes {
                if let spindle_ir::level::Node::Dense { var, .. } | spindle_ir::level::Node::Merge { var, .. } =
                    n
                    && !out.contains(var)
                {
                    out.push(*var);
                }
                n.bodies().for_each(|b| loops(b, out));
            }
        }
        let mut running = Vec::new();
        loops(&kernel.body, &mut running);
        // A summed index outermost because a stored operand's first level
        // stores it (CSC's columns): no order= moves it, a format does.
        use spindle_ir::level::Node;
        let stored_first = match kernel.body.first() {
            Some(Node::Merge { var, levels, .. }) if !at.contains(var) => {
                levels.first().map(|l| (l.tensor.clone(), kernel.var(*var).name.clone()))
            }
            // (A dense first level, CSC's, is located by the loop.)
            Some(Node::Dense { var, body }) if !at.contains(var) => body.iter().find_map(|n| match n {
                Node::Locate { level, var: v } if v == var && level.level == 0 => {
                    Some((level.tensor.clone(), kernel.var(*var).name.clone()))
                }
                _ => None,
            }),
            _ => None,
        };
        let running: Vec<&str> = running.iter().map(|&v| kernel.var(v).name.as_str()).collect();
        let advice = match (running == order, stored_first) {
            // (An elementwise product, `S[i,j] = A[i,j] * D[i,j]`.)
            _ if summed.is_empty() => {
                "; this statement sums no index, so it has no sum to split: drop reduce=parallel (each lane \
                 then takes entries of its own)"
                    .to_string()
            }
            (_, Some((tensor, var))) => format!(
                "; here the outermost loop walks the summed `{var}`, the index `{tensor}`'s first level stores: a \
                 format that stores the output's index first (csr, dcsr) puts it outermost"
            ),
            (true, None) => {
                format!("; the loops already run the summed indices innermost (order={})", order.join("+"))
            }
            (false, None) => format!(
                "; where the summed index is not innermost, order= can put it there: order={}",
                order.join("+")
            ),
        };
        return Err(refuse(format!(
            "reduce=parallel splits a row's positions over the lanes, but no loop over one stored level's \
             positions holds one update at an output element fixed outside it (a co-iteration of two \
             operands, a dense level, or an output index bound inside the sum have none){advice}"
        )));
    }
    let Warps { tensors: names, body, atomic, fill, writes_output, per_warp } =
        print_level_warps(kernel, dialect).map_err(|e| refuse(e.reason))?;
    let rows = rows(kernel, &kernel.body);
    // Groups of `lanes` lanes, 32 / lanes to a warp, a row each (or a
    // warp of `per_warp` rows).
    let lanes = kernel.lanes;
    let per_block = (LEVEL_WARPS * 32 / lanes) as usize * per_warp;
    let grid = u32::try_from(rows.div_ceil(per_block).max(1))
        .map_err(|_| PrintError::Grid { kernel: kernel.name.clone(), programs: rows as u64 })?;
    let launch = LaunchGeometry { grid, block: LEVEL_WARPS * 32, shared_bytes: 0, dynamic: false };
    let mut src = format!("// Spindle level kernel `{}`, generated: do not edit.\n", kernel.name);
    for line in kernel.to_string().lines() {
        src += &format!("// {line}\n");
    }
    src += &format!(
        "// launch: grid {grid}, block {} threads: {} per {}, {}\n",
        launch.block,
        match (lanes, per_warp) {
            (32, 1) => "a warp".to_string(),
            (1, _) | (32, 32) => "a thread".to_string(),
            (32, per) => format!("a group of {} lanes", 32 / per),
            (r, _) => format!("a group of {r} lanes"),
        },
        match atomic {
            false => "row",
            true => "iteration of the outermost loop, updating the output atomically",
        },
        match split {
            LaneSplit::Dense(_) => "lanes over the dense columns",
            LaneSplit::Positions(_) if lanes == 1 => "each thread sums its iteration's positions",
            LaneSplit::Positions(_) => "lanes over the row's positions, added with shuffles",
            // (Where iterations share output elements, so may lanes.)
            LaneSplit::Entries(_) if atomic => "lanes over the row's entries",
            LaneSplit::Entries(_) => "lanes over the row's entries, each its own output elements",
            LaneSplit::None => "lane 0 walks the row",
        }
    );
    if let Some(round) = &round {
        src += &format!(
            "// output: `{}` is {}, held in f32 here and rounded once by `{}`\n",
            kernel.tensor(kernel.output).name,
            round.0.dtype.name(),
            round.0.symbol
        );
    }
    // NVRTC has no <stdint.h>; the CPU emulation has.
    src += "#ifdef __CUDACC_RTC__\ntypedef long long int64_t;\n#endif\n";
    if sixteen {
        src += "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n";
    }
    src += "#ifndef INT64_MAX\n#define INT64_MAX 0x7fffffffffffffffLL\n#endif\n\n";
    if !kernel.affine.is_empty() {
        src += SEARCH;
    }
    if (atomic || fill.is_some()) && kernel.reduction != Reduction::Sum {
        src += &atomic_helper(kernel.tensor(kernel.output).dtype, kernel.reduction);
        src += "\n";
    }
    let mut params: Vec<String> = kernel
        .tensors
        .values()
        .zip(&names)
        .map(|(t, name)| {
            let constness = if t.output { "" } else { "const " };
            format!("    {constness}{} *__restrict__ {name}", cuda_type(t.dtype))
        })
        .collect();
    if fill.is_some() {
        params.push("    unsigned long long *__restrict__ fill_hits".into());
    }
    src += &format!(
        "extern \"C\" __global__ void __launch_bounds__({}) {symbol}(\n{}) {{\n",
        launch.block,
        params.join(",\n")
    );
    // (`warp` numbers a row's group of lanes, `lane` a lane in it.)
    let shift = lanes.trailing_zeros();
    src +=
        &format!("    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> {shift};\n");
    src += &format!("    const int lane = threadIdx.x & {};\n", lanes - 1);
    src += &body;
    if let Some(fill) = &fill {
        src += &format!(
            "    // `{}` counts each output element's updates in fill_hits (warps share them): the last block \
             to finish folds 0 into those updated fewer times than their points\n",
            if kernel.reduction == Reduction::Max { "max=" } else { "min=" }
        );
        src += &fill.tail;
    }
    src += "}\n";
    let mut printed = CudaKernel::plain(symbol, src, launch);
    printed.fill_counts = fill.map(|f| f.len + 1);
    // Rows stored whole: nothing zeroes the output first, and an element
    // the kernel missed would show (the checked run starts it at NaN).
    printed.writes_output = writes_output;
    if let Some((round, source)) = round {
        printed.source += &source;
        printed.round = Some(round);
    }
    Ok(printed)
}

/// The search of a [`spindle_ir::level::Node::Find`] (the C backend's
/// macro, a statement expression there), as a device function.
const SEARCH: &str = r#"// The first p in [lo, hi) with crd[p] >= x (hi if none), crd sorted there.
template <class I>
__device__ __forceinline__ long long spindle_search(const I *__restrict__ crd, long long lo, long long hi,
                                                    long long x) {
  while (lo < hi) {
    const long long m = lo + (hi - lo) / 2;
    if ((long long)crd[m] < x) lo = m + 1; else hi = m;
  }
  return lo;
}
#define SPINDLE_LOWER_BOUND(crd, lo, hi, x) spindle_search((crd), (lo), (hi), (x))

"#;

/// The stored tensor whose singleton level the merge over `var` in `body`
/// walks alone, if it does.
fn singleton_merge(body: &[spindle_ir::level::Node], var: spindle_ir::level::VarId) -> Option<String> {
    use spindle_ir::level::{Node, Reach};
    body.iter().find_map(|n| match n {
        Node::Merge { var: v, levels, .. } if *v == var => match &levels[..] {
            [level] if matches!(level.kind, Reach::Singleton { .. }) => Some(level.tensor.clone()),
            _ => None,
        },
        _ => n.bodies().find_map(|b| singleton_merge(b, var)),
    })
}

/// Iterations of the outermost loop of `body` (at most: a compressed root
/// level's coordinates), or the coordinates of its index where it merges
/// several levels (or one with a dense operand), a warp each. (A `max=`'s
/// count around the loop is no loop.)
fn rows(kernel: &LevelKernel, body: &[spindle_ir::level::Node]) -> usize {
    use spindle_ir::level::{Node, Reach};
    match body.first() {
        Some(Node::Fill { body, .. }) => rows(kernel, body),
        Some(Node::Dense { var, .. }) => kernel.var(*var).extent,
        Some(Node::Merge { var, levels, full, .. }) if *full || levels.len() > 1 => kernel.var(*var).extent,
        Some(Node::Merge { levels, .. }) => match levels.first().map(|l| &l.kind) {
            Some(Reach::Compressed { len, .. }) => *len,
            _ => levels.first().map_or(1, |l| l.extent),
        },
        _ => 1,
    }
}
