//! The C printer of the level path's loop trees ([`LevelKernel`]): dense
//! loops, position loops, merges of several levels with a branch per
//! lattice point, locates, and updates of the dense output. Values, literals
//! and functions are spelled by the shared [`Dialect`].
//!
//! When the kernel's outermost loop writes disjoint output elements per
//! iteration (a dense loop or a position loop over a unique level, bound to
//! an output index), it runs on OpenMP threads with no atomics and no
//! private copies.

use std::fmt::Write as _;

use spindle_ir::formats::{Assembled, AssembledLevel, DType, IType, Level, LevelCapabilities};
use spindle_ir::kernel::{BinaryOp, OutputInit, Reduction, TensorId};
use spindle_ir::lang::{BinOp, ElemType, Func};
use spindle_ir::level::{
    Assembly, Expr, LevelKernel, LevelRef, LocalId, Node, Place, Position, Reach, Target, VarId,
    WorkspaceKind,
};

use ndarray::ArrayD;
use spindle_ir::tensor::Tensors;

use spindle_ir::kernel::schedule::Policy;
use spindle_workspaces::runtime;

use crate::dialect::{C, Dialect};
use crate::exec::{self, BackendError, SYMBOL};
use crate::namer::{Namer, valid_symbol};
use crate::print::{PrintError, SERIAL_WORK, preamble};
use crate::runtime::{Buffer, BufferKind};

mod subsect;

/// Rows handed to a thread at a time: small enough to balance power-law
/// rows, large enough that the hand-out is rare.
const CHUNK: usize = 32;

/// The C source of a level kernel, its function named `symbol`, with the
/// same signature as the tile path's kernels.
pub fn print_level(kernel: &LevelKernel, symbol: &str) -> Result<String, PrintError> {
    print_level_with(kernel, symbol, SERIAL_WORK)
}

/// [`print_level`] where a kernel whose outermost loop owns its rows runs on
/// threads only when it reads at least `serial_work` values (or gathers in a
/// workspace, whose work the data size does not show): waking a second
/// thread costs more than it saves on less.
pub fn print_level_with(
    kernel: &LevelKernel,
    symbol: &str,
    serial_work: usize,
) -> Result<String, PrintError> {
    if !valid_symbol(symbol) {
        return Err(PrintError {
            kernel: kernel.name.clone(),
            reason: format!("`{symbol}` cannot name a C function"),
        });
    }
    let mut namer = Namer::default();
    let tensors = kernel.tensors.iter().map(|(_, t)| namer.fresh("t_", &t.name)).collect();
    let vars = kernel.vars.iter().map(|(_, v)| namer.fresh("i_", &v.name)).collect();
    let double = kernel.tensors.values().any(|t| t.dtype == ElemType::Value(DType::F64));
    let mut p = Printer::new(kernel, C { real: if double { "double" } else { "float" } }, tensors, vars);
    let read: usize = kernel
        .tensors
        .values()
        .filter(|t| !t.output && !t.dtype.is_index())
        .map(|t| t.shape.iter().product::<usize>())
        .sum();
    p.threads = (kernel.parallel || kernel.row_runs) && (read >= serial_work || has_workspace(&kernel.body));
    p.print(symbol);
    Ok(p.out)
}

/// How a GPU runs a level kernel: a warp per iteration of the outermost
/// loop (a row it owns), its lanes splitting one loop inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneSplit {
    /// Lanes take every 32nd coordinate of this dense loop over an output
    /// index (SpMM's columns): each lane owns its output elements.
    Dense(VarId),
    /// Lanes take every 32nd position of this position loop over a summed
    /// index (SpMV's row): each sums into a register, then the warp adds
    /// them with shuffles and lane 0 updates the output.
    Positions(VarId),
    /// Lanes take every 32nd position of this position loop over a unique
    /// level of an output index (SDDMM's entries): each position is its
    /// own output element, so each lane writes its own, with no shuffles.
    Entries(VarId),
    /// Lane 0 does the row's work.
    None,
}

/// A level kernel's body for a GPU ([`print_level_warps`]).
#[derive(Clone, Debug)]
pub struct Warps {
    /// The names the body gives the kernel's tensors (its parameters, in
    /// order).
    pub tensors: Vec<String>,
    pub body: String,
    /// The warps share output elements, so they update them atomically.
    pub atomic: bool,
    /// Counts of a `max=` / `min=` kept in global memory ([`FillCounts`]).
    pub fill: Option<FillCounts>,
    /// The body stores every output element once without reading it
    /// ([`whole_rows`], [`whole_entries`]): the output needs no zeroing
    /// first.
    pub writes_output: bool,
    /// Iterations of the outermost loop a warp takes: 1, or more where
    /// each is a few lanes' ([`Printer::grouped_top`]).
    pub per_warp: usize,
}

/// A `max=` / `min=` whose counts of each output element's updates are one
/// array (they count around the outermost loop: its rows may be skipped,
/// warps may share an element, or the output is a scalar): the kernel
/// takes `fill_hits`, `len` zeroed counters and one more that counts the
/// blocks done, after its tensors. Each update adds one to its element's
/// counter atomically; `tail`, printed after the body, lets the last block
/// to finish fold zero into the elements with fewer updates than points
/// and zero the counters again for the next launch.
#[derive(Clone, Debug)]
pub struct FillCounts {
    pub len: usize,
    pub tail: String,
}

/// The body of a level kernel for a GPU, in `dialect`: the warp of each
/// outermost iteration, its lanes split as [`lane_split`] says. The caller
/// prints the function around it, with `warp` and `lane` defined.
pub fn print_level_warps<D: Dialect>(kernel: &LevelKernel, dialect: D) -> Result<Warps, PrintError> {
    let refuse = |reason: &str| PrintError { kernel: kernel.name.clone(), reason: reason.to_string() };
    // A fill around the whole kernel, or one below the row loops whose
    // counts are an array all the same, counts in global memory
    // ([`FillCounts`]); the warps walk its body.
    let unwrapped;
    let (kernel, top_fill) = match global_fill(&kernel.body, &mut Vec::new()) {
        Some((at, points, body)) => {
            unwrapped = LevelKernel { body, ..kernel.clone() };
            let mut vars: Vec<VarId> = Vec::new();
            at.iter().for_each(|v| {
                if !vars.contains(v) {
                    vars.push(*v)
                }
            });
            (&unwrapped, Some((vars, at, points)))
        }
        None => (kernel, None),
    };
    // The loop the lanes split, found once: every check below and the
    // printer know it by node (a program kernel may have several loops
    // over its index).
    let split_at = split_loop(kernel);
    let split = split_at.map_or(LaneSplit::None, |(split, _)| split);
    if kernel.assembly.is_some() {
        return Err(refuse(
            "sparse outputs are assembled on the C backend only so far: run it with --target c, or drop the \
             output's format to write it dense, or, where an operand masks it (every term is zero where that \
             operand has no entry), store it in that operand's format: the GPU holds it in that operand's pattern",
        ));
    }
    // (A search for a second operand's entry, [`Node::Find`], runs on
    // warps as any other node.)
    let subsections = Node::any(&kernel.body, &|n| {
        matches!(n, Node::Subsect { .. } | Node::Resolve { .. } | Node::Taps { .. })
    });
    if subsections {
        return Err(refuse(
            "subsection loops (affine subscripts on stored operands) run on the C backend only so far: run it with \
             --target c",
        ));
    }
    if kernel.body.len() > 1 {
        return Err(refuse(
            "a warp per iteration of the outermost loop needs one loop there; this kernel has several",
        ));
    }
    // Where iterations share output elements (COO's or GroupCOO's rows
    // repeat; a sum outermost), warps update them atomically: Sgap's
    // atomic strategy, with no memset beyond the output's initial value.
    // A warp per coordinate of the outermost index (a dense loop, or a
    // merge walked as one) owns the elements at it, as on CPU threads a
    // merge's sequential walk does not.
    let coordinate = match &kernel.body[..] {
        [Node::Dense { var, .. }] => Some(*var),
        [Node::Merge { var, levels, full, .. }] if *full || levels.len() > 1 => Some(*var),
        _ => None,
    };
    let mut updates = Vec::new();
    updates_under(&kernel.body, &mut updates);
    let owned = kernel.parallel || coordinate.is_some_and(|v| updates.iter().all(|at| at.contains(&v)));
    let out_type = kernel.tensor(kernel.output).dtype;
    // `max=` / `min=` count each output element's updates (a fill): in a
    // register of the warp that owns the element.
    if let Some(why) = fill_on_warps(kernel, owned, split_at) {
        return Err(refuse(&format!(
            "`{}` over stored operands counts the zeros the walk skips per output element, on a GPU in the \
             registers of the warp that owns the element; {why}. Such a kernel runs on the C backend only so far \
             (--target c)",
            if kernel.reduction == Reduction::Max { "max=" } else { "min=" }
        )));
    }
    if top_fill.is_some() && dialect.atomic_fold(kernel.reduction, out_type, "", "").is_none() {
        return Err(refuse("the output's type has no atomic maximum or minimum on a GPU"));
    }
    if !matches!(&kernel.body[..], [] | [Node::Dense { .. }] | [Node::Merge { .. }]) {
        return Err(refuse("a warp per iteration of the outermost loop needs a loop there"));
    }
    if let Some(why) = locals_on_warps(kernel, split_at, owned) {
        return Err(refuse(&why));
    }
    if !owned && dialect.atomic_fold(kernel.reduction, out_type, "", "").is_none() {
        return Err(refuse(
            "a warp per row needs an outermost loop whose iterations own their output rows (CSR, DCSR, CSF \
             rows); this one's do not",
        ));
    }
    let mut namer = Namer::default();
    let tensors: Vec<String> = kernel.tensors.iter().map(|(_, t)| namer.fresh("t_", &t.name)).collect();
    let vars = kernel.vars.iter().map(|(_, v)| namer.fresh("i_", &v.name)).collect();
    let mut owners = false;
    if kernel.lanes < 32 {
        owners = grouped_rows(kernel, split_at).map_err(|why| {
            refuse(&format!(
                "reduce=parallel({}) puts {} rows in a warp, whose lanes must all reach the shuffles that add a \
                 row's sums; {why}: use reduce=parallel (a warp per row)",
                kernel.lanes,
                32 / kernel.lanes
            ))
        })?;
    }
    let mut p = Printer::new(kernel, dialect, tensors.clone(), vars);
    p.split = Some(split);
    p.split_node = split_at.map(|(_, n)| n as *const Node);
    p.atomic = !owned;
    p.lanes = kernel.lanes;
    p.owners = owners;
    // A program kernel's temporaries, scalars: each lane's own register.
    if let Some((vars, _, _)) = &top_fill {
        p.hits = Some(format!("fill_hits[{}]", p.flat_element(vars)));
        p.global_hits = true;
    }
    p.whole_rows = whole_rows(kernel);
    p.whole_entries = whole_entries(kernel);
    p.declare_locals(1, |_| true);
    p.warps(1);
    let body = std::mem::take(&mut p.out);
    let fill = match top_fill {
        Some((vars, at, points)) => {
            let len = vars.iter().map(|&v| kernel.var(v).extent).product();
            p.fill_tail(&vars, &at, points, len, 1);
            Some(FillCounts { len, tail: std::mem::take(&mut p.out) })
        }
        None => None,
    };
    Ok(Warps { tensors, body, atomic: !owned, fill, writes_output: p.wrote_whole, per_warp: p.per_warp })
}

/// Where a warp per row may store its output row instead of adding to it:
/// the row loop, a dense loop over the output's first index, is the
/// outermost; the kernel's one update is `out[row, col]` or `out[row]`
/// over the whole output; and the row's body walks one level once, beside
/// locates and temporaries (no other loop or test). Each row is then a
/// warp's whole, written once after its walk
/// ([`Printer::position_loop_in_lanes`], [`Printer::lane_positions`]), even
/// a row with no entries, so an output that starts at zero needs no memset
/// and is not read (CSR SpMM's `C`: a third of its traffic; SpMV's `y`).
fn whole_rows(k: &LevelKernel) -> Option<VarId> {
    if k.init != OutputInit::Zero || k.reduction != Reduction::Sum || k.assembly.is_some() || k.lanes != 32 {
        return None;
    }
    let [Node::Dense { var: row, body }] = &k.body[..] else { return None };
    let mut updates = Vec::new();
    updates_under(&k.body, &mut updates);
    let [at] = &updates[..] else { return None };
    let extents: Vec<usize> = at.iter().map(|&v| k.var(v).extent).collect();
    let writes_elsewhere = Node::any(&k.body, &|n| matches!(n, Node::Store { target: Target::Output, .. }));
    let one_walk = body.iter().filter(|n| matches!(n, Node::Merge { .. })).count() == 1
        && body.iter().all(|n| match n {
            Node::Merge { levels, full, points, .. } => levels.len() == 1 && !full && points.len() == 1,
            Node::Locate { .. } | Node::Clear { .. } | Node::Store { target: Target::Local(_), .. } => true,
            _ => false,
        });
    let whole = matches!(at.len(), 1 | 2) && at[0] == *row && extents == k.tensor(k.output).shape;
    (whole && one_walk && !writes_elsewhere).then_some(*row)
}

/// Where a sparse output held in an operand's pattern (SDDMM's `S` in
/// `A`'s) may be stored instead of added to: its one write is
/// `S[position]` directly in the walk of that position's level, and the
/// loops around it walk the operand's levels from the first, one loop a
/// level, that operand alone (a dense level's loop locates its position,
/// a compressed or singleton level's walk is not co-iterated). Every
/// position is then visited once and written once, so an output that
/// starts at zero needs no memset and is not read. Not over ELL's or
/// GroupCOO's padding, whose slots the walk skips.
fn whole_entries(k: &LevelKernel) -> Option<Position> {
    if k.init != OutputInit::Zero || k.reduction != Reduction::Sum || k.assembly.is_some() || k.lanes != 32 {
        return None;
    }
    let mut updates = Vec::new();
    updates_under(&k.body, &mut updates);
    let mut stores = Vec::new();
    output_stores(&k.body, &mut stores);
    let ([], [Place::Position(at @ Position::Level { tensor, level }, coords)]) = (&updates[..], &stores[..])
    else {
        return None;
    };
    if !coords.is_empty() {
        return None;
    }
    let stores_output = |n: &Node| {
        Node::any(std::slice::from_ref(n), &|n| matches!(n, Node::Store { target: Target::Output, .. }))
    };
    let mut nodes = &k.body[..];
    for next in 0..=*level {
        let [walk] = &nodes.iter().filter(|n| stores_output(n)).collect::<Vec<_>>()[..] else { return None };
        nodes = match walk {
            Node::Dense { var, body } => {
                let located = body.iter().any(|n| {
                    matches!(n, Node::Locate { level: l, var: v }
                        if v == var && l.tensor == *tensor && l.level == next && l.extent == k.var(*var).extent)
                });
                if !located {
                    return None;
                }
                body
            }
            Node::Merge { levels, full: false, points, .. } => match (&levels[..], &points[..]) {
                ([l], [point])
                    if l.tensor == *tensor
                        && l.level == next
                        && matches!(l.kind, Reach::Compressed { .. } | Reach::Singleton { .. }) =>
                {
                    &point.body
                }
                _ => return None,
            },
            _ => return None,
        };
    }
    nodes.iter().any(|n| matches!(n, Node::Store { target: Target::Output, .. })).then(|| at.clone())
}

/// Where `nodes` store into the output ([`Node::Store`]).
fn output_stores<'a>(nodes: &'a [Node], out: &mut Vec<&'a Place>) {
    for n in nodes {
        if let Node::Store { target: Target::Output, at, .. } = n {
            out.push(at);
        }
        n.bodies().for_each(|b| output_stores(b, out));
    }
}

/// A fill ([`Node::Fill`]) whose counts are one array: around the
/// outermost loop, or below single loops (a row's) with an output index
/// bound inside it, counted per element. Its `at`, `points`, and the
/// nodes with the fill taken out (the loops around it, around its body):
/// counted over the whole kernel, each element's count is the same.
fn global_fill(nodes: &[Node], bound: &mut Vec<VarId>) -> Option<(Vec<VarId>, usize, Vec<Node>)> {
    match nodes {
        [Node::Fill { at, points, body }] => (bound.is_empty() || at.iter().any(|v| !bound.contains(v)))
            .then(|| (at.clone(), *points, body.clone())),
        [Node::Dense { var, body }] => {
            bound.push(*var);
            let (at, points, body) = global_fill(body, bound)?;
            Some((at, points, vec![Node::Dense { var: *var, body }]))
        }
        [Node::Merge { var, levels, full, points: cases }] if cases.len() == 1 => {
            bound.push(*var);
            let (at, points, body) = global_fill(&cases[0].body, bound)?;
            let point = spindle_ir::level::Point { present: cases[0].present.clone(), body };
            Some((
                at,
                points,
                vec![Node::Merge { var: *var, levels: levels.clone(), full: *full, points: vec![point] }],
            ))
        }
        _ => None,
    }
}

/// Why the fills of `kernel` ([`Node::Fill`]) below its outermost loop
/// cannot be counted in a warp's registers, if they cannot: one that binds
/// an output index inside it (a count per element), or warps that share
/// output elements. (A fill around the outermost loop counts in global
/// memory: [`FillCounts`].)
fn fill_on_warps(kernel: &LevelKernel, owned: bool, split_at: Option<(LaneSplit, &Node)>) -> Option<String> {
    fn check(k: &LevelKernel, nodes: &[Node], bound: &mut Vec<VarId>) -> Option<String> {
        for n in nodes {
            if let Node::Fill { at, body, .. } = n
                && let Some(&v) = at.iter().find(|v| !bound.contains(v))
            {
                let name = &k.var(v).name;
                let dense = Node::any(body, &|n| matches!(n, Node::Dense { var, .. } if *var == v));
                return Some(match dense {
                    true => format!(
                        "here the output index `{name}` is bound inside the count, so the counts are an array: \
                         order `{name}` before the summed indices (order=)"
                    ),
                    false => format!(
                        "here the output index `{name}` is walked over stored coordinates, which may skip some, \
                         so the counts are an array"
                    ),
                });
            }
            let var = match n {
                Node::Dense { var, .. } | Node::Merge { var, .. } => Some(*var),
                _ => None,
            };
            bound.extend(var);
            let found = n.bodies().find_map(|b| check(k, b, bound));
            if var.is_some() {
                bound.pop();
            }
            if found.is_some() {
                return found;
            }
        }
        None
    }
    if !Node::any(&kernel.body, &|n| matches!(n, Node::Fill { .. })) {
        return None;
    }
    // Lanes over a row's positions add their counts: every update counted
    // must be one of the split loop's (one outside it is every lane's).
    if let Some((LaneSplit::Positions(_), node)) = split_at {
        let (mut all, mut split_loop) = (Vec::new(), Vec::new());
        updates_under(&kernel.body, &mut all);
        updates_under(std::slice::from_ref(node), &mut split_loop);
        if all.len() != split_loop.len() {
            return Some("here an update lies outside the loop the lanes split".into());
        }
    }
    check(kernel, &kernel.body, &mut Vec::new())
        .or((!owned).then(|| "here warps share output elements".into()))
}

/// Whether groups of fewer than 32 lanes split `kernel`'s rows with
/// owners ([`Printer::owners`]: there are rows), or why they cannot: the
/// groups of a warp walk different rows, so every lane reaches the
/// shuffles of the split position loop only where the path to it from the
/// row has the same trip counts in every group (dense loops, fills), under
/// a row of a dense loop or of a root level of known length.
fn grouped_rows(kernel: &LevelKernel, split_at: Option<(LaneSplit, &Node)>) -> Result<bool, &'static str> {
    let Some((LaneSplit::Positions(_), split)) = split_at else {
        return Err("no loop over a row's positions holds one update at an output element fixed outside it");
    };
    let (row, rows) = match &kernel.body[..] {
        [Node::Dense { var, body }] => (body, kernel.var(*var).extent),
        [Node::Merge { levels, full: false, points, .. }] if levels.len() == 1 && points.len() == 1 => {
            // A root level's rows are its coordinates, `len` of them
            // (CSF's root `pos` is [0, len]).
            match levels[0].kind {
                Reach::Compressed { len, .. } => (&points[0].body, len),
                _ => return Err("the outermost loop's rows are not known before the launch"),
            }
        }
        _ => return Err("the outermost loop is neither a dense loop nor one stored level"),
    };
    fn below(nodes: &[Node], split: &Node) -> bool {
        nodes.iter().any(|n| match n {
            _ if std::ptr::eq(n, split) => true,
            Node::Fill { body, .. } | Node::Dense { body, .. } => below(body, split),
            _ => false,
        })
    }
    match below(row, split) {
        true => Ok(rows > 0),
        false => Err("the loop over the row's positions is inside a loop over stored entries or a branch"),
    }
}

/// Where lanes split a row of `kernel` (see [`LaneSplit`]): the innermost
/// dense loop over the output's last index, else the first single-level
/// position loop over a summed index holding the row's one update. Under
/// `reduce=parallel` ([`LevelKernel::lanes_over_positions`]) only the
/// position loop will do.
pub fn lane_split(kernel: &LevelKernel) -> LaneSplit {
    // (The loops inside a fill counted in global memory, as printed.)
    let split = |k: &LevelKernel| split_loop(k).map_or(LaneSplit::None, |(split, _)| split);
    match global_fill(&kernel.body, &mut Vec::new()) {
        Some((_, _, body)) => split(&LevelKernel { body, ..kernel.clone() }),
        None => split(kernel),
    }
}

/// [`lane_split`] and the loop it splits. A program kernel may have
/// several loops over one index (a row's sum, then the loop that writes
/// the output), and the lanes split only this one.
fn split_loop(kernel: &LevelKernel) -> Option<(LaneSplit, &Node)> {
    let inner = match kernel.body.first()? {
        Node::Dense { body, .. } => body,
        Node::Merge { points, .. } if points.len() == 1 => &points[0].body,
        _ => return None,
    };
    let var = |n: &Node| match n {
        Node::Dense { var, .. } | Node::Merge { var, .. } => *var,
        _ => unreachable!("the lanes split loops"),
    };
    if kernel.lanes_over_positions {
        return find_positions(inner, kernel).map(|n| (LaneSplit::Positions(var(n)), n));
    }
    let out = kernel.tensor(kernel.output);
    let last = out.shape.len().checked_sub(1);
    let mut dense = None;
    find_dense(
        inner,
        &mut dense,
        &|v| matches!(updates_at(kernel), Some(at) if last.is_some_and(|l| at.get(l) == Some(&v))),
    );
    if let Some(n) = dense {
        return Some((LaneSplit::Dense(var(n)), n));
    }
    if let Some(n) = find_positions(inner, kernel) {
        return Some((LaneSplit::Positions(var(n)), n));
    }
    find_entries(inner).map(|n| (LaneSplit::Entries(var(n)), n))
}

/// The first single-level position loop over a unique level under which
/// every write of the output is at the loop's own coordinate (an update at
/// its variable, a store at its level's positions or below them), so that
/// lanes taking its positions write apart: [`LaneSplit::Entries`].
fn find_entries(nodes: &[Node]) -> Option<&Node> {
    for n in nodes {
        match n {
            Node::Merge { var, levels, full: false, points } if levels.len() == 1 && points.len() == 1 => {
                let body = &points[0].body;
                if levels[0].unique && writes_apart(body, *var, &levels[0]) {
                    return Some(n);
                }
                if let Some(found) = find_entries(body) {
                    return Some(found);
                }
            }
            Node::Dense { body, .. } | Node::Fill { body, .. } => {
                if let Some(found) = find_entries(body) {
                    return Some(found);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether `nodes` write the output and every write is at `var` (bound by
/// a walk of `level`): an update whose coordinates hold it, a store at the
/// positions of `level` or of a level of the same tensor below it (each
/// under its own parent position), or at coordinates that hold it.
fn writes_apart(nodes: &[Node], var: VarId, level: &LevelRef) -> bool {
    let mut writes = Vec::new();
    output_writes(nodes, &mut writes);
    !writes.is_empty() && writes.iter().all(|w| own_write(w, var, level))
}

/// An output write: an update's coordinates, or a store's place.
enum Write<'a> {
    Update(&'a [VarId]),
    Store(&'a Place),
}

fn output_writes<'a>(nodes: &'a [Node], out: &mut Vec<Write<'a>>) {
    for n in nodes {
        match n {
            Node::Update { at, .. } => out.push(Write::Update(at)),
            Node::Store { target: Target::Output, at, .. } => out.push(Write::Store(at)),
            _ => {}
        }
        n.bodies().for_each(|b| output_writes(b, out));
    }
}

/// Whether write `w` is at `var`, bound by a walk of `level`.
fn own_write(w: &Write<'_>, var: VarId, level: &LevelRef) -> bool {
    match w {
        Write::Update(at) => at.contains(&var),
        Write::Store(Place::Coords(at)) => at.contains(&var),
        Write::Store(Place::Position(Position::Level { tensor, level: l }, _)) => {
            *tensor == level.tensor && *l >= level.level
        }
        Write::Store(Place::Position(Position::Root, _)) => false,
    }
}

/// The most elements of a temporary that each lane of a GPU kernel keeps
/// (in registers where its loops unroll): 256 bytes of f32.
const WARP_LOCAL_ELEMENTS: usize = 64;

/// Why a program kernel's temporaries cannot be its lanes' own, if they
/// cannot. A temporary (a scalar, or a short slice) is each lane's own, so
/// one summed inside the loop the lanes split must be cleared and read in
/// that loop (outside it, each lane would hold only its part); one summed
/// outside it, every lane sums whole (its reads the same addresses across
/// the warp). Values per stored entry would be memory the warps share.
/// Also whether each store into an output held in a pattern is one lane's.
fn locals_on_warps(
    kernel: &LevelKernel,
    split_at: Option<(LaneSplit, &Node)>,
    owned: bool,
) -> Option<String> {
    let split = split_at.map_or(LaneSplit::None, |(split, _)| split);
    let split_node = split_at.map(|(_, n)| n as *const Node);
    if let Some(l) = kernel.locals.values().find(|l| !l.private) {
        return Some(format!(
            "the temporary `{}` holds a value per stored entry, in memory that a GPU's warps would have to \
             share; on a GPU a program kernel's temporaries are each lane's own so far",
            l.name
        ));
    }
    if let Some(l) = kernel.locals.values().find(|l| l.len() > WARP_LOCAL_ELEMENTS) {
        return Some(format!(
            "the temporary `{}` holds {} elements, and on a GPU each lane keeps its own copy of a \
             temporary, of at most {WARP_LOCAL_ELEMENTS} so far",
            l.name,
            l.len()
        ));
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Use {
        Clear,
        Store,
        Read,
    }
    struct Walk<'k> {
        k: &'k LevelKernel,
        split: LaneSplit,
        split_node: Option<*const Node>,
        loops: usize,
        uses: Vec<(LocalId, Use, Option<usize>)>,
        shared_store: bool,
    }
    impl Walk<'_> {
        fn nodes(&mut self, nodes: &[Node], inside: Option<usize>) {
            for n in nodes {
                let splits = self.split_node.is_some_and(|s| std::ptr::eq(s, n));
                let inside = match splits {
                    true => {
                        self.loops += 1;
                        Some(self.loops)
                    }
                    false => inside,
                };
                if let Some(value) = n.value() {
                    let read = std::cell::RefCell::new(Vec::new());
                    value.any(&|e| {
                        if let Expr::Local { local, .. } = e {
                            read.borrow_mut().push((*local, Use::Read, inside));
                        }
                        false
                    });
                    self.uses.extend(read.into_inner());
                }
                match n {
                    Node::Clear { local } => self.uses.push((*local, Use::Clear, inside)),
                    Node::Store { target: Target::Local(l), .. } => self.uses.push((*l, Use::Store, inside)),
                    Node::Store { target: Target::Output, at, .. } if inside.is_some() => {
                        let own = match (self.split, at) {
                            (LaneSplit::Dense(v), Place::Coords(vs) | Place::Position(_, vs)) => {
                                vs.contains(&v)
                            }
                            (LaneSplit::Positions(v) | LaneSplit::Entries(v), _) => {
                                self.level_of(v).is_some_and(|l| own_write(&Write::Store(at), v, l))
                            }
                            (LaneSplit::None, _) => true,
                        };
                        self.shared_store |= !own;
                    }
                    _ => {}
                }
                n.bodies().for_each(|b| self.nodes(b, inside));
            }
        }

        /// The level a split position loop over `v` walks.
        fn level_of(&self, v: VarId) -> Option<&'_ LevelRef> {
            fn find(nodes: &[Node], v: VarId) -> Option<&LevelRef> {
                nodes.iter().find_map(|n| match n {
                    Node::Merge { var, levels, .. } if *var == v && levels.len() == 1 => Some(&levels[0]),
                    _ => n.bodies().find_map(|b| find(b, v)),
                })
            }
            find(&self.k.body, v)
        }
    }
    let mut walk = Walk { k: kernel, split, split_node, loops: 0, uses: Vec::new(), shared_store: false };
    walk.nodes(&kernel.body, None);
    if walk.shared_store {
        return Some(
            "a store into the output held in a pattern is shared by the lanes that split its loop".into(),
        );
    }
    let stores_output = Node::any(&kernel.body, &|n| matches!(n, Node::Store { target: Target::Output, .. }));
    if stores_output && !owned {
        return Some("warps share the elements of the output held in a pattern".into());
    }
    for (id, local) in kernel.locals.iter() {
        let uses: Vec<_> = walk.uses.iter().filter(|(l, ..)| *l == id).map(|&(_, u, at)| (u, at)).collect();
        let Some(&(_, Some(lanes))) = uses.iter().find(|(u, at)| *u == Use::Store && at.is_some()) else {
            continue;
        };
        let cleared = uses.iter().any(|&(u, at)| u == Use::Clear && at == Some(lanes));
        if !cleared || uses.iter().any(|&(_, at)| at != Some(lanes)) {
            return Some(format!(
                "the temporary `{}` is summed inside the loop the lanes split but {} outside it, where each \
                 lane would hold only its part",
                local.name,
                if cleared { "read" } else { "cleared" }
            ));
        }
    }
    None
}

/// Whether a value computed in `nodes` reads a dense array (a dense
/// tensor, or a temporary at coordinates) at `var`.
fn reads_dense_at(nodes: &[Node], var: VarId) -> bool {
    let mut reads = Vec::new();
    column_reads(nodes, var, &mut reads);
    !reads.is_empty()
}

/// The reads of dense arrays (dense tensors, temporaries at coordinates)
/// at `var` in the values computed in `nodes`, each once.
fn column_reads(nodes: &[Node], var: VarId, out: &mut Vec<Expr>) {
    for n in nodes {
        if let Some(value) = n.value() {
            value.visit(&mut |e| {
                if let Expr::Dense { at, .. } | Expr::Local { at: Place::Coords(at), .. } = e
                    && at.contains(&var)
                    && !out.contains(e)
                {
                    out.push(e.clone());
                }
            });
        }
        n.bodies().for_each(|b| column_reads(b, var, out));
    }
}

/// The CUDA type that moves `bytes` (4, 8 or 16) as one load or store.
fn vector_type(bytes: usize) -> &'static str {
    match bytes {
        16 => "uint4",
        8 => "uint2",
        4 => "unsigned",
        _ => unreachable!("a lane's columns are 4, 8 or 16 bytes"),
    }
}

/// The output coordinates of the kernel's updates, when they all agree.
fn updates_at(kernel: &LevelKernel) -> Option<Vec<VarId>> {
    let mut all = Vec::new();
    updates_under(&kernel.body, &mut all);
    let first = all.first()?.clone();
    all.iter().all(|a| *a == first).then_some(first)
}

/// The innermost dense loop whose variable passes `wanted` and which
/// writes the output (not a program kernel's loop over the same index
/// that sums a temporary).
fn find_dense<'n>(nodes: &'n [Node], found: &mut Option<&'n Node>, wanted: &dyn Fn(VarId) -> bool) {
    for n in nodes {
        if let Node::Dense { var, body } = n
            && wanted(*var)
        {
            let mut writes = Vec::new();
            output_writes(body, &mut writes);
            if !writes.is_empty() {
                *found = Some(n);
            }
        }
        n.bodies().for_each(|b| find_dense(b, found, wanted));
    }
}

/// Whether a loop in `nodes` binds one of `vars`.
fn binds(nodes: &[Node], vars: &[VarId]) -> bool {
    nodes.iter().any(|n| {
        let own = match n {
            Node::Dense { var, .. }
            | Node::Merge { var, .. }
            | Node::Subsect { var, .. }
            | Node::Resolve { var, .. } => vars.contains(var),
            Node::Taps { outer, inner, .. } => vars.contains(outer) || vars.contains(inner),
            _ => false,
        };
        own || n.bodies().any(|b| binds(b, vars))
    })
}

/// Every update's output coordinates under `nodes`.
fn updates_under(nodes: &[Node], out: &mut Vec<Vec<VarId>>) {
    for n in nodes {
        if let Node::Update { at, .. } = n {
            out.push(at.clone());
        }
        n.bodies().for_each(|b| updates_under(b, out));
    }
}

/// The stored tensors whose values `nodes` read at `at`, each once.
fn stored_reads_at(nodes: &[Node], at: &Position, out: &mut Vec<TensorId>) {
    for n in nodes {
        if let Some(value) = n.value() {
            value.visit(&mut |e| {
                if let Expr::Stored { val, at: here } = e
                    && here == at
                    && !out.contains(val)
                {
                    out.push(*val);
                }
            });
        }
        n.bodies().for_each(|b| stored_reads_at(b, at, out));
    }
}

/// Whether a dense loop over `var` under `nodes` has one update for its
/// whole body.
fn updating_loop(nodes: &[Node], var: VarId) -> bool {
    Node::any(
        nodes,
        &|n| matches!(n, Node::Dense { var: v, body } if *v == var && matches!(&body[..], [Node::Update { .. }])),
    )
}

/// The first single-level position loop over a summed index whose subtree
/// holds exactly one update, at an output element fixed outside the loop
/// (the lanes' sums all go to it).
fn find_positions<'n>(nodes: &'n [Node], kernel: &LevelKernel) -> Option<&'n Node> {
    fn count(nodes: &[Node]) -> usize {
        nodes
            .iter()
            .map(|n| usize::from(matches!(n, Node::Update { .. })) + n.bodies().map(count).sum::<usize>())
            .sum()
    }
    let out = updates_at(kernel)?;
    for n in nodes {
        match n {
            Node::Merge { var, levels, full: false, points } if levels.len() == 1 && points.len() == 1 => {
                let body = &points[0].body;
                if !out.contains(var) && count(body) == 1 && !binds(body, &out) {
                    return Some(n);
                }
                if let Some(found) = find_positions(body, kernel) {
                    return Some(found);
                }
            }
            Node::Dense { body, .. } | Node::Fill { body, .. } => {
                if let Some(found) = find_positions(body, kernel) {
                    return Some(found);
                }
            }
            _ => {}
        }
    }
    None
}

struct Printer<'k, D: Dialect> {
    k: &'k LevelKernel,
    d: D,
    tensors: Vec<String>,
    vars: Vec<String>,
    /// A program kernel's temporaries.
    locals: Vec<String>,
    out: String,
    /// Printing a sparse output's count phase: entries are counted, not
    /// written, and no value is computed.
    counting: bool,
    /// Inside a workspace: accumulations go to it.
    in_ws: bool,
    /// The ISM's gatherings are computed once, in the count phase, and
    /// kept for the fill phase (`spindle_keep`), which copies them out.
    keep: bool,
    /// Printing the one-pass fill of a bounded sparse output: one thread,
    /// counters that run on across rows, every append checked against the
    /// capacity `cap`.
    one_pass: bool,
    /// On a GPU: how lanes split each row; `None` on CPU threads.
    split: Option<LaneSplit>,
    /// The loop the lanes split ([`split_loop`]), compared by address.
    split_node: Option<*const Node>,
    /// On a GPU whose warps' iterations share output elements: updates of
    /// the output are atomic.
    atomic: bool,
    /// On a GPU: the lanes of a row's group ([`LevelKernel::lanes`]).
    lanes: u32,
    /// On a GPU with groups of fewer than 32 lanes: the groups past the
    /// last row walk the last one too, so every lane of a warp reaches its
    /// shuffles, and only the row's owners write.
    owners: bool,
    /// The outermost loop runs on OpenMP threads.
    threads: bool,
    /// The tensors are `restrict` parameters of a body function (else
    /// `restrict` locals of the entry point; see `walks_stored_windows`).
    restrict_params: bool,
    /// Inside the lanes' split: updates are each lane's own (dense) or
    /// summed in a register (positions).
    in_split: Option<LaneSplit>,
    /// The variables bound by the loops around the node being printed.
    bound: Vec<VarId>,
    /// The dense loop whose whole body is the dense loop being printed (a
    /// strided dot product's alternative lanes: see `Printer::dot_product`).
    lanes_outside: Option<VarId>,
    /// Per affine operand, how many of its levels are resolved there.
    resolved: Vec<usize>,
    /// The number of the next subsection or resolve loop (its names).
    ss_next: usize,
    /// The enclosing subsection loops' cursors, innermost last.
    cursors: Vec<subsect::Opened>,
    /// Inside a [`Node::Fill`]: the counter its updates increment.
    hits: Option<String>,
    /// The counters are in global memory, shared by a GPU's warps
    /// ([`FillCounts`]): each update adds one atomically.
    global_hits: bool,
    /// Position loops around the node being printed.
    position_loops: usize,
    /// Inside a [`Node::Taps`]: reads loaded before they are used (each
    /// tap's dense reads before the walk, the entry's value per entry),
    /// printed as the C expression beside them.
    hoisted: Vec<(Expr, String)>,
    /// Inside a [`Node::Rows`] over a whole strip: its block of
    /// accumulators.
    in_block: bool,
    /// Inside a position loop whose updates sum into one output row kept
    /// in the local array `o_row` ([`Printer::row_in_registers`]): their
    /// coordinates.
    out_row: Option<Vec<VarId>>,
    /// On a GPU, the row in `o_row` is the lanes' ([`Printer::row_in_lanes`]):
    /// slot `c` of a lane holds the lane's `c`-th column of the split.
    row_in_lanes: bool,
    /// On a GPU, inside positions taken by groups of this many lanes
    /// ([`Printer::group_steps`]: a row's entries, [`Printer::entry_group`],
    /// or the positions of a narrow row in `o_row`): a group's lanes split
    /// the position's sums and columns (`sub`, a lane's place in its
    /// group), and `g_in` says whether the position is the row's (a group
    /// past the row's end repeats its last and writes nothing).
    group: Option<usize>,
    /// On a GPU, the row loop of a kernel whose warps may store their rows
    /// whole ([`whole_rows`]).
    whole_rows: Option<VarId>,
    /// On a GPU, the position at which a sparse output held in an
    /// operand's pattern is stored, not added to ([`whole_entries`]).
    whole_entries: Option<Position>,
    /// A row or the entries were stored whole ([`Printer::whole_row`]).
    wrote_whole: bool,
    /// On a GPU, the outermost loop's iterations a warp takes
    /// ([`Printer::grouped_top`]).
    per_warp: usize,
    /// On a GPU, with the row in the lanes' registers: the adjacent
    /// columns a lane owns, loaded and stored 16 bytes at a time
    /// ([`Printer::row_vector`]); 1 where a lane's columns lie 32 apart.
    row_vec: usize,
}

/// Whether a workspace over `extent` coordinates always drains through its
/// summary of marks (at most 64 summary words: a row's scan is short), so
/// it keeps no list of coordinates while filling.
fn summary_drain_only(extent: usize) -> bool {
    extent.div_ceil(4096) <= 64
}

/// The output coordinates of the one update under `nodes`.
fn find_update(nodes: &[Node]) -> Option<&[VarId]> {
    nodes.iter().find_map(|n| match n {
        Node::Update { at, .. } => Some(&at[..]),
        _ => n.bodies().find_map(find_update),
    })
}

fn has_workspace(nodes: &[Node]) -> bool {
    Node::any(nodes, &|n| matches!(n, Node::Workspace { .. }))
}

/// Whether the kernel walks a stored level of an operand read at affine
/// subscripts by windows (subsection loops over a compressed level). Such
/// kernels keep their pointers as locals: with `restrict` parameters GCC
/// compiled them 10-14% slower (3-D convolution at 80% in CSF, best order:
/// 3.02 -> 3.35 ms; 2-D in CSR, order i+j+p+q: 33 -> 38 ms), while the
/// same convolution over dense levels ran 19% faster (2.82 -> 2.28 ms).
fn walks_stored_windows(k: &LevelKernel) -> bool {
    let compressed = |operand: usize, level: usize| k.affine[operand].levels[level].kind != Reach::Dense;
    Node::any(&k.body, &|n| match n {
        Node::Subsect { operand, level, .. }
        | Node::Resolve { operand, level, .. }
        | Node::Taps { operand, level, .. }
        | Node::Find { operand, level, .. } => compressed(*operand, *level),
        _ => false,
    })
}

/// Whether the kernel co-iterates two or more stored levels (a merge of
/// unions or intersections). Such kernels keep their pointers as locals
/// too: with `restrict` parameters GCC 12 kept the merge's cursors in
/// vector registers, moved to and from them every step (`vmovq`), and
/// `C = A + D` on ca-CondMat into CSR ran 2.03 ms against 1.30 with locals
/// (one thread, a C harness over the same printed body).
fn co_iterates(k: &LevelKernel) -> bool {
    Node::any(&k.body, &|n| matches!(n, Node::Merge { levels, .. } if levels.len() > 1))
}

/// The fewest steps for which a dot product that reads with a stride runs
/// in SIMD lanes (gathering) rather than as one chain of adds. The chain
/// costs an add's latency a step; the lanes a gather's share a step plus a
/// fixed sum of the lanes at the end, which the chain's latency outgrows
/// with length: on Zen 4 (SDDMM over a row-major D, f64) lanes ran 1.2-2.4x
/// faster at 32 and 64 steps and up to 1.3x slower at 16.
const STRIDED_DOT_MIN_STEPS: usize = 32;

/// A contiguous dot product of at least this many bytes of steps sums in
/// chunks of this size, each step of a chunk into its own partial sum (4
/// AVX-512 vectors: 32 f64 or 64 f32; see `Printer::dot_chunks`).
const DOT_CHUNK_BYTES: usize = 256;

/// A GPU lane keeps at most this many columns of a warp's output row in
/// registers ([`Printer::row_in_lanes`]): 256 columns over 32 lanes.
const MAX_ROW_SLOTS: usize = 8;

/// A program kernel's temporaries up to this size are arrays on the stack
/// (each OpenMP thread's stack holds its own): 16 KiB, far below any
/// thread's stack.
const STACK_LOCAL_BYTES: usize = 16 * 1024;

/// Where a dense loop's dot product sums (see `Printer::dot_product`).
enum DotSum {
    /// The output entry being assembled (`acc`, with `hit`).
    Entry,
    /// A temporary held in a register.
    Register(String),
    /// One element of a temporary or of the output, summed in `dot` first.
    Element(String),
}

impl<'k, D: Dialect> Printer<'k, D> {
    fn new(k: &'k LevelKernel, d: D, tensors: Vec<String>, vars: Vec<String>) -> Self {
        let mut namer = Namer::default();
        tensors.iter().chain(&vars).for_each(|n| {
            namer.fresh("", n);
        });
        let locals = k.locals.values().map(|l| namer.fresh("l_", &l.name)).collect();
        Printer {
            k,
            d,
            tensors,
            vars,
            locals,
            out: String::new(),
            counting: false,
            in_ws: false,
            keep: false,
            one_pass: false,
            threads: k.parallel,
            restrict_params: false,
            split: None,
            split_node: None,
            atomic: false,
            lanes: 32,
            owners: false,
            in_split: None,
            bound: Vec::new(),
            lanes_outside: None,
            resolved: vec![0; k.affine.len()],
            ss_next: 0,
            cursors: Vec::new(),
            hits: None,
            global_hits: false,
            position_loops: 0,
            hoisted: Vec::new(),
            in_block: false,
            out_row: None,
            row_in_lanes: false,
            group: None,
            whole_rows: None,
            whole_entries: None,
            wrote_whole: false,
            per_warp: 1,
            row_vec: 1,
        }
    }

    /// The outermost loop as a warp per iteration: `warp` picks the
    /// iteration, and warps past the last do nothing.
    fn warps(&mut self, depth: usize) {
        let grouped = self.grouped_top();
        match &self.k.body[..] {
            [Node::Merge { var, levels, points, .. }] if let Some(r) = grouped => {
                self.grouped_entries(*var, &levels[0], &points[0].body, r, depth)
            }
            [Node::Dense { var, body }] => {
                let (v, extent) = (self.var(*var).to_string(), self.k.var(*var).extent);
                match self.owners {
                    // (`grouped_rows`: at least one row.)
                    true => {
                        self.line(depth, "{");
                        self.line(depth + 1, &format!("const bool owner = warp < {extent};"));
                        self.line(depth + 1, &format!("const int64_t {v} = owner ? warp : {};", extent - 1));
                    }
                    false => {
                        self.line(depth, &format!("if (warp < {extent}) {{"));
                        self.line(depth + 1, &format!("const int64_t {v} = warp;"));
                    }
                }
                self.bound.push(*var);
                body.iter().for_each(|b| self.node(b, depth + 1));
                self.line(depth, "}");
            }
            [Node::Merge { var, levels, full: false, points }] if levels.len() == 1 && points.len() == 1 => {
                let l = &levels[0];
                let p = Self::position(&l.position());
                let (begin, end) = self.range(l);
                match self.owners {
                    // (`grouped_rows`: a root level of known, non-zero
                    // length; its `pos`, where it has one, is [0, len].)
                    true => {
                        self.line(depth, &format!("const bool owner = warp < {end};"));
                        self.line(depth, &format!("const int64_t {p} = owner ? warp : {end} - 1;"));
                        self.line(depth, "{");
                    }
                    false => {
                        self.line(depth, &format!("const int64_t {p} = {begin} + warp;"));
                        self.line(depth, &format!("if ({p} < {end}) {{"));
                    }
                }
                let line = format!("const int64_t {} = {}[{p}];", self.var(*var), self.crd(l));
                self.line(depth + 1, &line);
                self.bound.push(*var);
                points[0].body.iter().for_each(|b| self.node(b, depth + 1));
                self.line(depth, "}");
            }
            [Node::Merge { var, levels, points, .. }] => {
                // Several levels co-iterated (or one beside a dense
                // operand): a warp per coordinate of the index, each level
                // found in its sorted coordinates by binary search.
                let (v, extent) = (self.var(*var).to_string(), self.k.var(*var).extent);
                self.bound.push(*var);
                self.line(depth, &format!("if (warp < {extent}) {{"));
                let d = depth + 1;
                self.line(d, &format!("const int64_t {v} = warp;"));
                let ps: Vec<String> = levels.iter().map(|l| Self::position(&l.position())).collect();
                for (l, p) in levels.iter().zip(&ps) {
                    let ((begin, end), crd) = (self.range(l), self.crd(l).to_string());
                    self.line(d, &format!("int64_t {p} = {begin};"));
                    self.line(d, &format!("const int64_t {p}_end = {end};"));
                    self.line(d, &format!("for (int64_t hi = {p}_end; {p} < hi;) {{"));
                    self.line(d + 1, &format!("const int64_t mid = ({p} + hi) >> 1;"));
                    self.line(d + 1, &format!("if ({crd}[mid] < {v}) {p} = mid + 1; else hi = mid;"));
                    self.line(d, "}");
                    self.line(d, &format!("const int m_{p} = {p} < {p}_end && {crd}[{p}] == {v};"));
                }
                self.cases(&ps, &vec![true; levels.len()], points, d);
                self.line(depth, "}");
            }
            [] => {}
            _ => unreachable!("print_level_warps takes one outermost loop"),
        }
    }

    /// Where the outermost loop walks a level whose every position has one
    /// child, in a singleton level the lanes take as their own entries
    /// ([`LaneSplit::Entries`]: COO's rows above its columns, under SDDMM
    /// or a masked product into A's pattern): the lanes of each of those
    /// entries, `r` ([`Printer::entry_group`], or 1), so that a warp takes
    /// `32 / r` positions of the outer level ([`Printer::grouped_entries`]).
    /// A warp a position left all but one group of lanes idle.
    fn grouped_top(&self) -> Option<usize> {
        let [Node::Merge { levels, full: false, points, .. }] = &self.k.body[..] else { return None };
        let ([top], [point]) = (&levels[..], &points[..]) else { return None };
        let [inner @ Node::Merge { var, levels, full: false, points }] = &point.body[..] else { return None };
        let ([child], [entry]) = (&levels[..], &points[..]) else { return None };
        let singleton = matches!(child.kind, Reach::Singleton { .. })
            && child.tensor == top.tensor
            && child.level == top.level + 1
            && !matches!(top.kind, Reach::Padded { .. });
        let plain = !self.owners && self.lanes == 32 && self.hits.is_none();
        let entries = self.split == Some(LaneSplit::Entries(*var)) && self.is_split(inner);
        (singleton && plain && entries).then(|| self.entry_group(child, &entry.body).unwrap_or(1))
    }

    /// The outermost walk of `top` ([`Printer::grouped_top`]) by groups of
    /// `r` lanes, each group a position of `top` and its singleton child's
    /// entry, `32 / r` positions a warp. A group past the level's last
    /// position takes that position again (`g_in` false) and writes
    /// nothing, so that every lane reaches the group's shuffles.
    fn grouped_entries(&mut self, var: VarId, top: &LevelRef, body: &[Node], r: usize, depth: usize) {
        let [Node::Merge { var: inner, levels, points, .. }] = body else {
            unreachable!("grouped_top takes a singleton walk")
        };
        let (child, body) = (&levels[0], &points[0].body);
        let (p, (begin, end)) = (Self::position(&top.position()), self.range(top));
        let per = 32 / r;
        self.per_warp = per;
        self.line(depth, &format!("const int64_t {p}_step = {begin} + warp * {per};"));
        self.line(depth, &format!("if ({p}_step < {end}) {{"));
        let d = depth + 1;
        self.group_position(var, top, &end, r, d);
        self.bound.push(var);
        // The child's one position is its parent's.
        let (c, (at, _)) = (Self::position(&child.position()), self.range(child));
        self.line(d, &format!("const int64_t {c} = {at};"));
        let line = format!("const int64_t {} = {}[{c}];", self.var(*inner), self.crd(child));
        self.line(d, &line);
        let was = self.in_split.replace(LaneSplit::Entries(*inner));
        self.group = Some(r);
        self.position_loops += 1;
        body.iter().for_each(|b| self.node(b, d));
        self.position_loops -= 1;
        self.group = None;
        self.in_split = was;
        self.line(depth, "}");
    }

    /// The condition of the lane that writes a row's result: lane 0 (of
    /// a group that owns its row, where groups past the last row repeat it).
    fn writer(&self) -> &'static str {
        if self.owners { "lane == 0 && owner" } else { "lane == 0" }
    }

    /// `x op= ` the value of lane `x + offset` of the group, for offsets
    /// halving from half the group's lanes: the group's fold in its lane 0.
    fn fold_lanes(&mut self, r: Reduction, x: &str, depth: usize) {
        if self.lanes == 1 {
            return;
        }
        let width = if self.lanes < 32 { format!(", {}", self.lanes) } else { String::new() };
        let fold = self.d.fold(r, x, &format!("__shfl_down_sync(0xffffffffu, {x}, offset{width})"));
        self.line(depth, &format!("for (int offset = {}; offset > 0; offset >>= 1) {fold}", self.lanes / 2));
    }

    /// Inside a [`Node::Fill`], one more update of its element. Where
    /// every lane walks the row (`every_lane`), the writer's update alone
    /// counts in global memory (in a register, each lane counts the row).
    fn count_hit(&mut self, depth: usize, every_lane: bool) {
        if let Some(hits) = &self.hits {
            let line = match (self.global_hits, every_lane) {
                (true, true) => format!("if ({}) atomicAdd(&{hits}, 1ull);", self.writer()),
                // Groups past the last row walk it again, not counting.
                (true, false) if self.owners => format!("if (owner) atomicAdd(&{hits}, 1ull);"),
                (true, false) => format!("atomicAdd(&{hits}, 1ull);"),
                (false, _) => format!("{hits}++;"),
            };
            self.line(depth, &line);
        }
    }

    /// The element of `vars` (distinct, each bound) in a row-major array
    /// of their extents: `0` for none.
    fn flat_element(&self, vars: &[VarId]) -> String {
        let element = vars.iter().fold(String::new(), |e, &v| match e.is_empty() {
            true => self.var(v).to_string(),
            false => format!("({e}) * {} + {}", self.k.var(v).extent, self.var(v)),
        });
        if element.is_empty() { "0".into() } else { element }
    }

    /// The end of a GPU kernel whose fill counts in global memory
    /// ([`FillCounts`]): the block whose ticket is the grid's last sees
    /// every other block's updates and counts (a fence before each
    /// block's ticket), folds zero into each element of `vars` (`at`, the
    /// output's indices) updated fewer than `points` times, and zeroes the
    /// `len` counters and the ticket for the next launch. Its folds are
    /// atomic: they read the output where other blocks wrote it (L2), not
    /// where this block's L1 may hold an older copy.
    fn fill_tail(&mut self, vars: &[VarId], at: &[VarId], points: usize, len: usize, depth: usize) {
        let d = depth;
        self.line(d, "{");
        self.line(d + 1, "__shared__ int fill_last;");
        self.line(d + 1, "__threadfence();");
        self.line(d + 1, "__syncthreads();");
        self.line(
            d + 1,
            &format!(
                "if (threadIdx.x == 0) fill_last = atomicAdd(&fill_hits[{len}], 1ull) == (unsigned long long)gridDim.x \
                 - 1;"
            ),
        );
        self.line(d + 1, "__syncthreads();");
        self.line(d + 1, "if (fill_last) {");
        self.line(d + 2, "__threadfence();");
        self.line(d + 2, &format!("for (int64_t e = threadIdx.x; e < {len}; e += blockDim.x) {{"));
        let mut stride = len;
        for &v in vars {
            let extent = self.k.var(v).extent;
            stride /= extent.max(1);
            let line = format!("const int64_t {} = e / {stride} % {extent};", self.var(v));
            self.line(d + 3, &line);
        }
        let out = self.tensor(self.k.output).to_string();
        let address = self.dense_address(self.k.output, at);
        let (r, dtype) = (self.k.reduction, self.k.tensor(self.k.output).dtype);
        let zero = self.d.float(0.0);
        let fold =
            self.d.atomic_fold(r, dtype, &format!("{out}[{address}]"), &zero).expect("checked by the caller");
        self.line(d + 3, &format!("if (__ldcg(&fill_hits[e]) < {points}ull) {fold}"));
        self.line(d + 3, "fill_hits[e] = 0;");
        self.line(d + 2, "}");
        self.line(d + 2, &format!("if (threadIdx.x == 0) fill_hits[{len}] = 0;"));
        self.line(d + 1, "}");
        self.line(d, "}");
    }

    /// `target op= value` on an element of the output: atomic where
    /// warps share output elements.
    fn fold_out(&self, target: &str, value: &str) -> String {
        let (r, dtype) = (self.k.reduction, self.k.tensor(self.k.output).dtype);
        match self.atomic {
            true => self.d.atomic_fold(r, dtype, target, value).expect("checked by print_level_warps"),
            false => self.d.fold(r, target, value),
        }
    }

    fn line(&mut self, depth: usize, text: &str) {
        let _ = writeln!(self.out, "{}{text}", "    ".repeat(depth));
    }

    fn tensor(&self, t: TensorId) -> &str {
        &self.tensors[t.as_u32() as usize]
    }

    fn var(&self, v: VarId) -> &str {
        &self.vars[v.as_u32() as usize]
    }

    fn position(p: &Position) -> String {
        match p {
            Position::Root => "0".to_string(),
            Position::Level { tensor, level } => {
                format!("p_{}{level}", crate::namer::sanitize(tensor))
            }
        }
    }

    fn print(&mut self, symbol: &str) {
        let names: Vec<String> = self.k.tensors.keys().map(|id| self.tensor(id).to_string()).collect();
        let tensors: Vec<(&str, ElemType, bool)> =
            self.k.tensors.values().zip(&names).map(|(t, n)| (n.as_str(), t.dtype, t.output)).collect();
        self.restrict_params = !walks_stored_windows(self.k) && !co_iterates(self.k);
        if !self.restrict_params {
            self.print_body(&crate::print::entry_with_locals(symbol, &tensors));
            return;
        }
        let (body, entry) = crate::print::entry_point(symbol, &tensors);
        self.print_body(&[body]);
        self.out.push_str(&entry);
    }

    /// Prints the kernel's body function, opening with `opening` (its first
    /// line, then lines one level in).
    fn print_body(&mut self, opening: &[String]) {
        let k = self.k;
        self.out.push_str(&preamble(&format!("level kernel `{}`", k.name), &k.to_string()));
        let workspace = has_workspace(&k.body);
        if let (true, Some(a)) = (workspace, &k.assembly) {
            // The dense workspace takes only the runtime's sort.
            let policy = match a.workspace {
                WorkspaceKind::Dense => Policy::Dense,
                WorkspaceKind::Ism(p) => p,
            };
            self.out.push_str(&runtime::prelude(policy, a.options, self.d.real()));
        }
        if !k.affine.is_empty() {
            self.out.push_str(subsect::HELPERS);
        }
        for (i, l) in opening.iter().enumerate() {
            self.line(usize::from(i > 0), l);
        }
        if !self.threads {
            // (A workspace over the whole output is filled inside its loops.)
            fn outermost(body: &[Node]) -> Option<VarId> {
                match body {
                    [Node::Dense { var, .. }] | [Node::Merge { var, .. }] => Some(*var),
                    [Node::Workspace { body }] => outermost(body),
                    _ => None,
                }
            }
            let outer = outermost(&k.body);
            let walks_another = |a: &Assembly| {
                let first = a.levels.first()?.var;
                // (A summed index outermost is the generic reason's.)
                let outer = outer.filter(|&o| o != first && a.levels.iter().any(|l| l.var == o))?;
                Some(format!(
                    "the outermost loop walks `{}` and the sparse output's first level stores `{}`, so every \
                     iteration may append under any `{}`; an output format whose first level is `{}` fills its \
                     rows on threads",
                    k.vars[outer].name, k.vars[first].name, k.vars[first].name, k.vars[outer].name
                ))
            };
            let another = k.assembly.as_ref().and_then(walks_another);
            let why = match (k.parallel || k.row_runs, &k.assembly) {
                (false, _) if k.idle() => "the product is 0, so the loops have nothing to do",
                (false, Some(a)) if a.levels.first().is_some_and(|l| !l.format.locate()) => {
                    "the sparse output's first level is compressed, so its entries are appended in order; \
                     a dense first level, as CSR's, fills its rows on threads"
                }
                (false, Some(_)) if another.is_some() => another.as_deref().unwrap_or_default(),
                (false, _) if matches!(k.body[..], [Node::Fill { .. }]) => {
                    "under max= / min= the outermost loop may skip output rows, so the zeros skipped are \
                     counted per output element, in one array"
                }
                (false, _) => {
                    "the outermost loop's iterations may write the same output element (a level whose \
                     coordinates repeat, as COO's or GroupCOO's rows, or a sum outermost)"
                }
                (true, _) => "too little work to wake a second thread",
            };
            self.line(1, &format!("{}{why}.", crate::ONE_THREAD_WHY));
            self.line(1, crate::ONE_THREAD);
        }
        let Some(a) = &k.assembly else {
            if self.threads && !workspace && self.restrict_params {
                // On one thread a serial copy runs: OpenMP outlines its
                // region into a function whose pointers lose the body's
                // `restrict` (the fused SDDMM on ca-CondMat, NK = 32, kept
                // its position loop scalar: 5.3 ms against 3.5).
                self.line(1, "if (nthreads <= 1) {");
                self.threads = false;
                self.declare_locals(2, |_| true);
                self.body(2, workspace);
                self.free_locals(2, |_| true);
                self.threads = true;
                self.line(1, "} else {");
                self.declare_locals(2, |l| !l.private);
                self.body(2, workspace);
                self.free_locals(2, |l| !l.private);
                self.line(1, "}");
            } else {
                // Private temporaries of a kernel on threads are each thread's.
                let shared = !self.threads;
                self.declare_locals(1, |l| shared || !l.private);
                self.body(1, workspace);
                self.free_locals(1, |l| shared || !l.private);
            }
            self.line(0, "}");
            return;
        };
        // Two phases of one tree: count every level's entries (per row
        // when rows run on threads), then, once the caller has sized the
        // arrays, fill them. An ISM workspace gathers in the count phase
        // and keeps what it gathered for the fill (one pass of products).
        let phase = self.tensor(a.phase).to_string();
        self.keep = workspace && (a.rows > 1 || !self.threads);
        self.line(1, &format!("const int64_t phase = {phase}[0];"));
        let counters: Vec<usize> = (0..a.levels.len()).filter(|&l| !a.levels[l].format.locate()).collect();
        if a.rows == 1 {
            for l in &counters {
                self.line(1, &format!("int64_t n{l} = 0;"));
            }
        }
        self.line(1, "if (phase == 0) {");
        if self.keep {
            self.line(2, &format!("spindle_keep *keep = spindle_keep_new({}, nthreads);", a.rows));
            self.line(2, &format!("{phase}[3] = (int64_t)(intptr_t)keep;"));
            if a.rows == 1 {
                self.line(2, "spindle_keep_row(keep, 0, 0);");
                self.line(2, "int64_t wg = 0;");
            }
        }
        self.counting = true;
        self.body(2, workspace);
        if a.rows == 1 {
            for l in &counters {
                self.line(2, &format!("{}[{l}] = n{l};", self.tensor(a.counts)));
            }
        }
        self.line(1, "} else if (phase == 1) {");
        if self.keep {
            self.line(2, &format!("spindle_keep *keep = (spindle_keep *)(intptr_t){phase}[3];"));
            if a.rows == 1 {
                self.line(2, "int64_t wg = 0;");
            }
        }
        self.counting = false;
        self.body(2, workspace);
        if self.keep {
            self.line(2, "spindle_keep_free(keep);");
            self.line(2, &format!("{phase}[3] = 0;"));
        }
        if let (1, Some(pos)) = (a.rows, a.levels[0].pos) {
            // A compressed first level's one range is all of its entries.
            self.line(2, &format!("{}[1] = n0;", self.tensor(pos)));
        }
        if a.bound.is_some() {
            // Bounded in advance: one thread fills arrays of the bound's
            // size in one pass, and leaves each level's entries in counts.
            self.line(1, "} else {");
            self.line(2, &format!("const int64_t cap = {}[1];", self.tensor(a.phase)));
            if a.rows > 1 {
                for l in &counters {
                    self.line(2, &format!("int64_t n{l} = 0;"));
                }
            }
            self.one_pass = true;
            self.body(2, false);
            self.one_pass = false;
            for l in &counters {
                self.line(2, &format!("{}[{l}] = n{l};", self.tensor(a.counts)));
            }
            if let Some(pos) = a.levels[0].pos {
                self.line(2, &format!("{}[1] = n0 < cap ? n0 : cap;", self.tensor(pos)));
            }
        }
        self.line(1, "}");
        self.line(0, "}");
    }

    /// A program kernel's temporaries: a scalar in a register; a zeroed
    /// array on the stack up to [`STACK_LOCAL_BYTES`], which gcc knows
    /// nothing else points into, so it keeps a loop's elements of it in
    /// registers (a strip's block of accumulators: with `calloc` it stored
    /// them on every step, 2x slower on cora); or zeroed memory allocated
    /// on every launch (its cost is the kernel's).
    fn declare_locals(&mut self, depth: usize, which: impl Fn(&spindle_ir::level::Local) -> bool) {
        let real = self.d.real();
        for (id, local) in self.k.locals.iter().filter(|(_, l)| which(l)) {
            let (name, len) = (self.local(id).to_string(), local.len());
            match local.shape.is_empty() {
                true => self.line(depth, &format!("{real} {name} = 0;")),
                false if self.on_stack(local) => self.line(depth, &format!("{real} {name}[{len}] = {{0}};")),
                false => {
                    self.line(depth, &format!("{real} *restrict {name} = calloc({len}, sizeof({real}));"))
                }
            }
        }
    }

    fn free_locals(&mut self, depth: usize, which: impl Fn(&spindle_ir::level::Local) -> bool) {
        for (id, local) in self.k.locals.iter().filter(|(_, l)| which(l)) {
            if !local.shape.is_empty() && !self.on_stack(local) {
                self.line(depth, &format!("free({});", self.local(id)));
            }
        }
    }

    fn on_stack(&self, local: &spindle_ir::level::Local) -> bool {
        let bytes = if self.d.real() == "double" { 8 } else { 4 };
        local.len() * bytes <= STACK_LOCAL_BYTES
    }

    fn local(&self, l: spindle_ir::level::LocalId) -> &str {
        &self.locals[l.as_u32() as usize]
    }

    /// A temporary's element.
    fn local_at(&self, l: spindle_ir::level::LocalId, at: &Place) -> String {
        let name = self.local(l);
        let shape = &self.k.local(l).shape;
        match at {
            _ if shape.is_empty() => name.to_string(),
            Place::Coords(vars) => format!("{name}[{}]", self.row_major(shape, vars)),
            Place::Position(p, then) if then.is_empty() => format!("{name}[{}]", Self::position(p)),
            Place::Position(p, then) => {
                let stride: usize = shape[1..].iter().product();
                format!("{name}[{} * {stride} + {}]", Self::position(p), self.row_major(&shape[1..], then))
            }
        }
    }

    /// The loop tree once: on threads when the outermost loop owns its
    /// outputs, with a workspace per thread when it has one.
    fn body(&mut self, depth: usize, workspace: bool) {
        let k = self.k;
        let threads = "num_threads(nthreads) if(nthreads > 1)";
        let schedule = format!("schedule(dynamic, {CHUNK})");
        let mut d = depth;
        // Each thread's own temporaries, in the parallel region.
        let private = self.threads && k.locals.values().any(|l| l.private);
        let buffers = self.has_subsect_buffers();
        // Whole runs of a row's positions per thread: the outermost loop
        // takes its bounds from the thread's number, in a region.
        let runs = self.threads && k.row_runs;
        let region = workspace || private || buffers || runs;
        if region {
            if self.threads {
                self.line(d, &format!("#pragma omp parallel {threads}"));
            }
            self.line(d, "{");
            d += 1;
            if workspace {
                self.workspace_arrays(d);
            }
            if private {
                self.declare_locals(d, |l| l.private);
            }
            if buffers {
                self.subsect_buffers(d);
            }
        }
        if self.threads && !self.one_pass && !runs {
            self.line(d, "// Each iteration of the outermost loop writes its own output elements.");
            match region {
                true => self.line(d, &format!("#pragma omp for {schedule}")),
                false => self.line(d, &format!("#pragma omp parallel for {threads} {schedule}")),
            }
        }
        for n in &k.body {
            self.node(n, d);
        }
        if buffers {
            self.free_subsect_buffers(d);
        }
        if private {
            self.free_locals(d, |l| l.private);
        }
        if (private || buffers || runs) && !workspace {
            self.line(depth, "}");
        }
        if workspace {
            if self.ism().is_some() {
                if self.counting == self.keep {
                    // The most bytes any thread's workspace held, in the
                    // phase that gathers.
                    if self.threads {
                        self.line(d, "#pragma omp critical");
                    }
                    let stats = self.tensor(self.assembly().phase).to_string();
                    self.line(d, &format!("if (w.peak > {stats}[2]) {stats}[2] = w.peak;"));
                }
                self.line(d, "spindle_ism_free(&w);");
            } else {
                self.line(d, "free(w_val);");
                self.line(d, "free(w_bits);");
                self.line(d, "free(w_sum);");
                self.line(d, "free(w_list);");
            }
            self.line(depth, "}");
        }
    }

    /// The policy of the sparse output's ISM workspace, where it has one.
    fn ism(&self) -> Option<Policy> {
        match &self.k.assembly {
            Some(Assembly { workspace: WorkspaceKind::Ism(p), .. }) => Some(*p),
            _ => None,
        }
    }

    /// The label of the gathered levels' coordinates: linearised in
    /// storage order, so labels sort as the levels are appended.
    fn label(&self) -> String {
        let a = self.assembly();
        let mut terms = Vec::new();
        let mut stride = 1usize;
        for level in a.levels[a.gathered..].iter().rev() {
            let v = self.var(level.var);
            terms.push(if stride == 1 { v.to_string() } else { format!("{v} * (int64_t){stride}") });
            stride *= level.extent;
        }
        terms.reverse();
        terms.join(" + ")
    }

    /// A dense workspace over the output's last level: values, marks and
    /// the list of coordinates marked; or a hash table and a list to sort.
    fn workspace_arrays(&mut self, depth: usize) {
        if self.ism().is_some() {
            let a = self.assembly();
            let gathered = &a.levels[a.gathered..];
            let range: usize = gathered.iter().map(|l| l.extent).product();
            let leading = gathered[0].extent;
            let capacity = a.options.capacity;
            self.line(depth, "spindle_ism w;");
            self.line(depth, &format!("spindle_ism_init(&w, {range}, {leading}, {capacity});"));
            if self.keep {
                self.line(depth, "const int ws_tid = spindle_thread();");
            }
            return;
        }
        let a = self.k.assembly.as_ref().expect("a workspace belongs to a sparse output");
        let n = a.levels.last().expect("an output has levels").extent;
        let real = self.d.real();
        self.line(depth, &format!("{real} *restrict w_val = calloc({n}, sizeof({real}));"));
        // A mark bit per coordinate, and a summary bit per word of marks.
        self.line(
            depth,
            &format!("uint64_t *restrict w_bits = calloc({}, sizeof(uint64_t));", n.div_ceil(64)),
        );
        self.line(
            depth,
            &format!("uint64_t *restrict w_sum = calloc({}, sizeof(uint64_t));", n.div_ceil(4096)),
        );
        self.line(depth, &format!("int64_t *restrict w_list = malloc(({n} + 1) * sizeof(int64_t));"));
        self.line(depth, "int64_t w_n = 0;");
        if self.keep {
            self.line(depth, "const int ws_tid = spindle_thread();");
        }
        // Terms added into the row, the previous row's terms and entries,
        // and whether rows repeat their columns many times (see accumulate).
        self.line(depth, "int64_t w_terms = 0, w_last_terms = 0, w_last_entries = 1;");
    }

    fn assembly(&self) -> &Assembly {
        self.k.assembly.as_ref().expect("entries belong to a sparse output")
    }

    /// The entry of output level `l` at its variable's coordinate, around
    /// `body`.
    fn entry(&mut self, l: usize, body: &[Node], depth: usize) {
        let a = self.assembly();
        let (leaf, head) = (a.levels.len() - 1, a.leaf_head());
        let level = a.levels[l].clone();
        let v = self.var(level.var).to_string();
        if l == leaf {
            self.line(depth, "{");
            if !self.counting {
                self.line(depth + 1, &format!("{} acc = 0;", self.d.real()));
            }
            self.line(depth + 1, "int hit = 0;");
            body.iter().for_each(|b| self.node(b, depth + 1));
            self.line(depth + 1, "if (hit) {");
            self.append_leaf("acc", depth + 2);
            self.line(depth + 1, "}");
            self.line(depth, "}");
            return;
        }
        if l >= head {
            // Appended with the last level, one entry per leaf.
            body.iter().for_each(|b| self.node(b, depth));
            return;
        }
        let (rows, counts) = (a.rows, self.tensor(a.counts).to_string());
        let counters: Vec<usize> = (1..a.levels.len()).filter(|&m| !a.levels[m].format.locate()).collect();
        let child = a.levels[l + 1].clone();
        let crd = level.crd.map(|t| self.tensor(t).to_string());
        let child_pos = child.pos.map(|t| self.tensor(t).to_string());
        self.line(depth, "{");
        let d = depth + 1;
        let owns_row = l == 0 && rows > 1 && !self.one_pass;
        if owns_row {
            for m in &counters {
                self.line(d, &format!("int64_t n{m} = phase ? {counts}[{m} * {rows} + {v}] : 0;"));
            }
            if self.keep {
                self.line(d, "int64_t wg = 0;");
                if self.counting {
                    self.line(d, &format!("spindle_keep_row(keep, ws_tid, {v});"));
                }
            }
        }
        if level.format.locate() {
            let at = match l {
                0 => v.clone(),
                _ => format!("q{} * {} + {v}", l - 1, level.extent),
            };
            self.line(d, &format!("const int64_t q{l} = {at};"));
        }
        let m = l + 1;
        let sparse_child = !child.format.locate();
        if sparse_child {
            self.line(d, &format!("const int64_t s{m} = n{m};"));
        }
        body.iter().for_each(|b| self.node(b, d));
        match (level.format.locate(), sparse_child) {
            (true, true) => {
                if let (false, Some(pos)) = (self.counting, &child_pos) {
                    self.line(d, &format!("{pos}[q{l} + 1] = n{m};"));
                }
            }
            (true, false) => {}
            (false, _) => {
                self.line(d, &format!("if (n{m} > s{m}) {{"));
                if !self.counting {
                    let e = if self.one_pass { d + 2 } else { d + 1 };
                    if self.one_pass {
                        self.line(d + 1, &format!("if (n{l} < cap) {{"));
                    }
                    if let Some(crd) = &crd {
                        self.line(e, &format!("{crd}[n{l}] = {v};"));
                    }
                    if let Some(pos) = &child_pos {
                        let end =
                            if self.one_pass { format!("n{m} < cap ? n{m} : cap") } else { format!("n{m}") };
                        self.line(e, &format!("{pos}[n{l} + 1] = {end};"));
                    }
                    if self.one_pass {
                        self.line(d + 1, "}");
                    }
                }
                self.line(d + 1, &format!("n{l}++;"));
                self.line(d, "}");
            }
        }
        if owns_row && self.counting {
            for m in &counters {
                self.line(d, &format!("{counts}[{m} * {rows} + {v}] = n{m};"));
            }
        }
        self.line(depth, "}");
    }

    /// Appends the entry at the last level (and the singleton run's
    /// parents with it) with value `value`.
    fn append_leaf(&mut self, value: &str, depth: usize) {
        let a = self.assembly();
        let head = a.leaf_head();
        let levels = a.levels.clone();
        if !self.counting {
            let d = if self.one_pass { depth + 1 } else { depth };
            if self.one_pass {
                self.line(depth, &format!("if (n{head} < cap) {{"));
            }
            for level in &levels[head..] {
                if let Some(crd) = level.crd {
                    let line = format!("{}[n{head}] = {};", self.tensor(crd), self.var(level.var));
                    self.line(d, &line);
                }
            }
            self.line(d, &format!("{}[n{head}] = {value};", self.tensor(self.k.output)));
            if self.one_pass {
                self.line(depth, "}");
            }
        }
        for m in head..levels.len() {
            self.line(depth, &format!("n{m}++;"));
        }
    }

    /// A workspace around `body`, drained into the last level in
    /// coordinate order.
    fn workspace(&mut self, body: &[Node], depth: usize) {
        if self.ism().is_some() {
            return self.ism_workspace(body, depth);
        }
        let a = self.assembly();
        let leaf = a.levels.last().expect("an output has levels").clone();
        let chain = a.leaf_head()..a.levels.len();
        let head = a.leaf_head();
        let v = self.var(leaf.var).to_string();
        self.line(depth, "{");
        let d = depth + 1;
        if self.keep && !self.counting {
            self.kept_gathering(d);
            self.line(d, "for (int64_t e = 0; e < ws_n; e++) {");
            self.line(d + 1, &format!("const int64_t {v} = ws_all[e].key;"));
            self.append_leaf("ws_all[e].val", d + 1);
            self.line(d, "}");
            self.line(depth, "}");
            return;
        }
        self.line(d, "const int w_repeats = w_last_terms > 4 * w_last_entries;");
        self.line(d, &format!("const int64_t w_first = n{head};"));
        self.line(d, "w_terms = 0;");
        self.workspace_body(body, d);
        let summary = leaf.extent.div_ceil(4096);
        // Each drained entry: appended to the output, or, counted and kept.
        let keep = self.keep;
        let emit = |p: &mut Self, value: &str, depth: usize| match keep {
            true => {
                p.line(depth, &format!("ws_to[ws_m].key = {v};"));
                p.line(depth, &format!("ws_to[ws_m++].val = {value};"));
            }
            false => p.append_leaf(value, depth),
        };
        if self.keep {
            // At most one entry per term, and per coordinate.
            let extent = leaf.extent;
            self.line(
                d,
                &format!(
                    "ism_c *ws_to = spindle_keep_open(keep, ws_tid, w_terms < {extent} ? w_terms : {extent});"
                ),
            );
            self.line(d, "int64_t ws_m = 0;");
        }
        if self.counting && !self.keep {
            self.line(d, "for (int64_t e = 0; e < w_n; e++) w_bits[w_list[e] >> 6] = 0;");
            for m in chain.clone() {
                self.line(d, &format!("n{m} += w_n;"));
            }
        } else {
            // Drained in order from the marks: a summary bit per word of
            // marks skips the empty ones, so no sort is needed; a row far
            // shorter than a long summary is sorted instead.
            let rule = match summary_drain_only(leaf.extent) {
                true => "0".to_string(),
                false => format!("w_n * 32 < {summary}"),
            };
            self.line(d, &format!("if ({rule}) {{"));
            self.line(d + 1, "spindle_sort_i64(w_list, w_n);");
            self.line(d + 1, "for (int64_t e = 0; e < w_n; e++) {");
            self.line(d + 2, &format!("const int64_t {v} = w_list[e];"));
            emit(self, &format!("w_val[{v}]"), d + 2);
            self.line(d + 2, &format!("w_val[{v}] = 0;"));
            self.line(d + 2, &format!("w_bits[{v} >> 6] = 0;"));
            self.line(d + 2, &format!("w_sum[{v} >> 12] = 0;"));
            self.line(d + 1, "}");
            self.line(d, "} else {");
            self.line(d + 1, &format!("for (int64_t s = 0; s < {summary}; s++) {{"));
            self.line(d + 2, "uint64_t sw = w_sum[s];");
            self.line(d + 2, "w_sum[s] = 0;");
            self.line(d + 2, "while (sw) {");
            self.line(d + 3, "const int64_t wi = s * 64 + __builtin_ctzll(sw);");
            self.line(d + 3, "sw &= sw - 1;");
            self.line(d + 3, "uint64_t w = w_bits[wi];");
            self.line(d + 3, "w_bits[wi] = 0;");
            self.line(d + 3, "while (w) {");
            self.line(d + 4, &format!("const int64_t {v} = wi * 64 + __builtin_ctzll(w);"));
            self.line(d + 4, "w &= w - 1;");
            emit(self, &format!("w_val[{v}]"), d + 4);
            self.line(d + 4, &format!("w_val[{v}] = 0;"));
            self.line(d + 3, "}");
            self.line(d + 2, "}");
            self.line(d + 1, "}");
            self.line(d, "}");
        }
        if self.keep {
            self.line(d, "spindle_keep_close(keep, ws_tid, ws_to, ws_m);");
            for m in chain.clone() {
                self.line(d, &format!("n{m} += ws_m;"));
            }
        }
        self.line(d, "w_n = 0;");
        self.line(d, "w_last_terms = w_terms;");
        self.line(d, &format!("w_last_entries = n{head} - w_first + 1;"));
        self.line(depth, "}");
    }

    /// A workspace's body: its accumulations go to the workspace, with
    /// their values even in the count phase where the gathering is kept.
    fn workspace_body(&mut self, body: &[Node], depth: usize) {
        let counting = self.counting;
        self.counting = counting && !self.keep;
        let was = std::mem::replace(&mut self.in_ws, true);
        body.iter().for_each(|b| self.node(b, depth));
        self.in_ws = was;
        self.counting = counting;
    }

    /// In the fill phase, the gathering the count phase kept: `ws_all`,
    /// `ws_n` entries, found by its row and its number in the row.
    fn kept_gathering(&mut self, depth: usize) {
        let a = self.assembly();
        let row = if a.rows > 1 { self.var(a.levels[0].var).to_string() } else { "0".to_string() };
        self.line(depth, "int64_t ws_n;");
        self.line(depth, &format!("const ism_c *ws_all = spindle_keep_get(keep, {row}, wg++, &ws_n);"));
    }

    /// An ISM workspace around `body`: every gathered coordinate inserted,
    /// then the sorted components drained into the gathered levels, an
    /// entry of a level closed where its coordinate (or one above) changes.
    fn ism_workspace(&mut self, body: &[Node], depth: usize) {
        let a = self.assembly().clone();
        let (g, head) = (a.gathered, a.leaf_head());
        self.line(depth, "{");
        let d = depth + 1;
        if self.keep && !self.counting {
            self.kept_gathering(d);
        } else {
            self.line(d, "spindle_ism_clear(&w);");
            self.workspace_body(body, d);
            if self.counting && g >= head && !self.keep {
                // Only the leaf run is gathered: its entries are the distinct
                // labels, which need no sort to count.
                self.line(d, "const int64_t distinct = spindle_ism_distinct(&w);");
                for m in head..a.levels.len() {
                    self.line(d, &format!("n{m} += distinct;"));
                }
                self.line(depth, "}");
                return;
            }
            if self.keep {
                self.line(d, "int64_t ws_n;");
                self.line(d, "const ism_c *ws_all = spindle_ism_keep(&w, keep, ws_tid, &ws_n);");
            } else {
                self.line(d, "spindle_ism_finish(&w);");
                self.line(d, "const ism_c *ws_all = w.all;");
                self.line(d, "const int64_t ws_n = w.all_n;");
            }
            if self.counting && g >= head {
                // Only the leaf run is gathered: one entry per label.
                for m in head..a.levels.len() {
                    self.line(d, &format!("n{m} += ws_n;"));
                }
                self.line(depth, "}");
                return;
            }
        }
        // The open entries' coordinates, above the run appended per entry
        // (counting, only sparse levels close anything).
        let open: Vec<usize> = (g..head).collect();
        let closing: Vec<usize> =
            open.iter().copied().filter(|&l| !(self.counting && a.levels[l].format.locate())).collect();
        for l in &open {
            self.line(d, &format!("int64_t wp{l} = -1;"));
        }
        self.line(d, "for (int64_t e = 0; e < ws_n; e++) {");
        let e = d + 1;
        self.line(e, "const int64_t wk = ws_all[e].key;");
        let mut stride = 1usize;
        let mut decode = Vec::new();
        for (n, level) in a.levels[g..].iter().enumerate().rev() {
            let v = self.var(level.var).to_string();
            // Labels are below the range: the first level needs no modulo.
            let quotient = if stride == 1 { "wk".to_string() } else { format!("wk / (int64_t){stride}") };
            decode.push(match n {
                0 => format!("const int64_t {v} = {quotient};"),
                _ => format!("const int64_t {v} = {quotient} % (int64_t){};", level.extent),
            });
            stride *= level.extent;
        }
        for line in decode.iter().rev() {
            self.line(e, line);
        }
        if !open.is_empty() {
            // The first open level whose coordinate changed closes its
            // entry and the ones below.
            let mut ch = head.to_string();
            for &l in open.iter().rev() {
                ch = format!("{} != wp{l} ? {l} : {ch}", self.var(a.levels[l].var));
            }
            if !closing.is_empty() {
                self.line(e, &format!("const int64_t wch = {ch};"));
            }
            for &l in closing.iter().rev() {
                self.line(e, &format!("if (e > 0 && wch <= {l}) {{"));
                self.close_entry(&a, l, e + 1);
                self.line(e, "}");
            }
        }
        self.append_leaf("ws_all[e].val", e);
        for &l in &open {
            self.line(e, &format!("wp{l} = {};", self.var(a.levels[l].var)));
        }
        self.line(d, "}");
        if !closing.is_empty() {
            self.line(d, "if (ws_n > 0) {");
            for &l in closing.iter().rev() {
                self.close_entry(&a, l, d + 1);
            }
            self.line(d, "}");
        }
        self.line(depth, "}");
    }

    /// Closes the drained entry of gathered level `l` at coordinate `wp{l}`:
    /// its children's range ends, and a sparse level appends it.
    fn close_entry(&mut self, a: &Assembly, l: usize, depth: usize) {
        let level = &a.levels[l];
        let child_pos = a.levels.get(l + 1).and_then(|c| c.pos).map(|t| self.tensor(t).to_string());
        if level.format.locate() {
            // Dense levels are a prefix: each position is located from its
            // parent's, a hoisted level's `q` or a drained one's.
            let mut at = String::new();
            for p in 0..=l {
                at = match (p < a.gathered, p) {
                    (true, _) => format!("q{p}"),
                    (false, 0) => "wp0".to_string(),
                    (false, _) => format!("({at} * (int64_t){} + wp{p})", a.levels[p].extent),
                };
            }
            if let (false, Some(pos)) = (self.counting, child_pos) {
                self.line(depth, &format!("{pos}[{at} + 1] = n{};", l + 1));
            }
            return;
        }
        if !self.counting {
            if let Some(crd) = level.crd {
                self.line(depth, &format!("{}[n{l}] = wp{l};", self.tensor(crd)));
            }
            if let Some(pos) = child_pos {
                self.line(depth, &format!("{pos}[n{l} + 1] = n{};", l + 1));
            }
        }
        self.line(depth, &format!("n{l}++;"));
    }

    /// An accumulation into the entry being assembled, or the workspace.
    fn accumulate(&mut self, value: &Expr, depth: usize) {
        if self.in_ws && self.ism().is_some() {
            // Counting needs the coordinates only.
            let value = if self.counting { "0".to_string() } else { self.expr(value) };
            self.line(depth, &format!("spindle_ism_insert(&w, {}, {value});", self.label()));
        } else if self.in_ws {
            let leaf = self.assembly().levels.last().expect("an output has levels").var;
            let v = self.var(leaf).to_string();
            // Counting keeps the list (to count and to clear the marks);
            // filling keeps the summary (to drain in order), and the list
            // only where rows may be sorted instead. Whether a coordinate
            // is new is a coin toss in a sparse row, which a branch loses:
            // there marks are set without one (the list slot written always,
            // kept when the mark was new). Where the last row added many
            // terms per entry (FEM and dense-ish rows), most coordinates are
            // seen before and a branch wins: it leaves the mark words and the
            // summary untouched instead of chaining stores through them.
            let extent = self.assembly().levels.last().expect("an output has levels").extent;
            let keeps_list = self.counting || !summary_drain_only(extent);
            let summary = format!("w_sum[{v} >> 12] |= (uint64_t)1 << (({v} >> 6) & 63);");
            self.line(depth, "{");
            self.line(depth + 1, &format!("const uint64_t bit = (uint64_t)1 << ({v} & 63);"));
            self.line(depth + 1, &format!("const uint64_t word = w_bits[{v} >> 6];"));
            self.line(depth + 1, "if (w_repeats) {");
            self.line(depth + 2, "if (!(word & bit)) {");
            self.line(depth + 3, &format!("w_bits[{v} >> 6] = word | bit;"));
            if keeps_list {
                self.line(depth + 3, &format!("w_list[w_n++] = {v};"));
            }
            if !self.counting {
                self.line(depth + 3, &format!("if (!word) {summary}"));
            }
            self.line(depth + 2, "}");
            self.line(depth + 1, "} else {");
            if keeps_list {
                self.line(depth + 2, &format!("w_list[w_n] = {v};"));
                self.line(depth + 2, "w_n += !(word & bit);");
            }
            self.line(depth + 2, &format!("w_bits[{v} >> 6] = word | bit;"));
            if !self.counting {
                self.line(depth + 2, &summary);
            }
            self.line(depth + 1, "}");
            self.line(depth + 1, "w_terms++;");
            self.line(depth, "}");
            if !self.counting {
                let value = self.expr(value);
                self.line(depth, &format!("w_val[{v}] += {value};"));
            }
        } else {
            if !self.counting {
                let value = self.expr(value);
                self.line(depth, &format!("acc += {value};"));
            }
            self.line(depth, "hit = 1;");
        }
    }

    fn node(&mut self, n: &Node, depth: usize) {
        if let Some(sums) = self.shared_sums(n) {
            return self.lanes_summing(n, &sums, depth);
        }
        match n {
            Node::Subsect { var, operand, level, body } => self.subsect(*var, *operand, *level, body, depth),
            Node::Resolve { var, operand, level, body } => self.resolve(*var, *operand, *level, body, depth),
            Node::Taps { outer, inner, operand, level, body } => {
                self.taps((*outer, *inner), *operand, *level, body, depth)
            }
            Node::Fill { at, points, body } => self.fill(at, *points, body, depth),
            Node::Find { operand, level, body } => self.find(*operand, *level, body, depth),
            Node::Strip { start, row, body } => {
                let (s, extent, size) =
                    (self.var(*start), self.k.var(*start).extent, self.k.var(*row).extent);
                self.line(depth, &format!("for (int64_t {s} = 0; {s} < {extent}; {s} += {size}) {{"));
                self.bound.push(*start);
                body.iter().for_each(|b| self.node(b, depth + 1));
                self.bound.pop();
                self.line(depth, "}");
            }
            Node::Rows { start, row, var, body } => {
                let (s, r, size) = (self.var(*start), self.var(*row), self.k.var(*row).extent);
                match var {
                    Some(v) => {
                        let extent = self.k.var(*v).extent;
                        let head =
                            format!("for (int64_t {r} = 0; {r} < {size} && {s} + {r} < {extent}; {r}++) {{");
                        let bind = format!("const int64_t {} = {s} + {r};", self.var(*v));
                        self.line(depth, &head);
                        self.line(depth + 1, &bind);
                    }
                    // A constant trip count: the strip's accumulators stay
                    // in registers.
                    None => self.line(depth, &format!("for (int64_t {r} = 0; {r} < {size}; {r}++) {{")),
                }
                self.bound.push(*row);
                let was = std::mem::replace(&mut self.in_block, var.is_none());
                body.iter().for_each(|b| self.node(b, depth + 1));
                self.in_block = was;
                self.bound.pop();
                self.line(depth, "}");
            }
            Node::Dense { var, body } => {
                let (v, extent) = (self.var(*var).to_string(), self.k.var(*var).extent);
                let outside = self.lanes_outside.take();
                if self.is_split(n) && self.row_in_lanes && self.row_vec > 1 {
                    return self.vector_steps(*var, body, ("lane", 32, self.row_vec), true, depth);
                } else if self.is_split(n) && self.row_in_lanes {
                    // The lane's columns by slot, unrolled, so that `o_row`
                    // is indexed by constants: registers. (In a group, the
                    // group's lanes split them.)
                    let (lane, lanes) = match self.group {
                        Some(r) => ("sub", r),
                        None => ("lane", self.lanes as usize),
                    };
                    let slots = extent.div_ceil(lanes);
                    self.line(depth, "#pragma unroll");
                    self.line(depth, &format!("for (int64_t c_{v} = 0; c_{v} < {slots}; c_{v}++) {{"));
                    self.line(depth + 1, &format!("const int64_t {v} = {lane} + c_{v} * {lanes};"));
                    let inner = match extent.is_multiple_of(lanes) {
                        true => depth + 1,
                        false => {
                            self.line(depth + 1, &format!("if ({v} < {extent}) {{"));
                            depth + 2
                        }
                    };
                    let was = self.in_split.replace(LaneSplit::Dense(*var));
                    self.bound.push(*var);
                    body.iter().for_each(|b| self.node(b, inner));
                    self.bound.pop();
                    self.in_split = was;
                    if inner > depth + 1 {
                        self.line(depth + 1, "}");
                    }
                } else if self.is_split(n) {
                    let lanes = self.lanes;
                    self.line(depth, &format!("for (int64_t {v} = lane; {v} < {extent}; {v} += {lanes}) {{"));
                    let was = self.in_split.replace(LaneSplit::Dense(*var));
                    self.bound.push(*var);
                    body.iter().for_each(|b| self.node(b, depth + 1));
                    self.bound.pop();
                    self.in_split = was;
                } else {
                    // Each iteration updates its own output element (or
                    // accumulator of a strip's block): no dependence, which
                    // OpenMP's outlined bodies (where the pointers lose
                    // `restrict`) cannot see by themselves. Without it gcc
                    // 12 vectorized 3 of a strip's 4 rows of accumulators;
                    // on a producer's temporary it keeps the row in memory
                    // instead of registers across the row's entries.
                    let own_element = match &body[..] {
                        [Node::Update { at, .. }] => at.contains(var),
                        [Node::Store { target: Target::Local(_), at: Place::Coords(at), .. }] => {
                            self.in_block && at.contains(var)
                        }
                        _ => false,
                    };
                    if own_element && self.split.is_none() {
                        self.line(depth, "#pragma omp simd");
                    } else if let Some((sum, contiguous)) = self.dot_product(*var, body, outside) {
                        self.dot_loop(*var, body, sum, contiguous, depth);
                        return;
                    }
                    self.line(depth, &format!("for (int64_t {v} = 0; {v} < {extent}; {v}++) {{"));
                    self.bound.push(*var);
                    if let [Node::Dense { .. }] = &body[..] {
                        self.lanes_outside = Some(*var);
                    }
                    body.iter().for_each(|b| self.node(b, depth + 1));
                    self.lanes_outside = None;
                    self.bound.pop();
                }
                self.line(depth, "}");
            }
            Node::Locate { level, var } => {
                let parent = Self::position(&level.parent());
                let at = match parent.as_str() {
                    "0" => self.var(*var).to_string(),
                    p => format!("{p} * {} + {}", level.extent, self.var(*var)),
                };
                self.line(depth, &format!("const int64_t {} = {at};", Self::position(&level.position())));
            }
            Node::Entry { level, body } => self.entry(*level, body, depth),
            Node::Workspace { body } => self.workspace(body, depth),
            Node::Accumulate { value } => self.accumulate(value, depth),
            Node::Store { target, at, value } => {
                let (target_text, value) = (self.store_target(*target, at), self.expr(value));
                let stored = matches!((target, at), (Target::Output, Place::Position(p, _))
                    if self.whole_entries.as_ref() == Some(p));
                self.wrote_whole |= stored;
                let line = match stored {
                    true => format!(
                        "{target_text} = {};",
                        self.d.store_as(self.k.tensor(self.k.output).dtype, &value)
                    ),
                    false => format!("{target_text} += {value};"),
                };
                // On a GPU every lane walks what its split does not: one
                // writes the output (a temporary is each lane's own).
                match (*target, self.split, self.in_split) {
                    (Target::Output, Some(_), None) => {
                        self.line(depth, &format!("if ({}) {line}", self.writer()))
                    }
                    (Target::Output, _, _) if self.group.is_some() => {
                        self.line(depth, &format!("if (g_in && sub == 0) {line}"))
                    }
                    _ => self.line(depth, &line),
                }
            }
            Node::Clear { local } => {
                let (name, len) = (self.local(*local).to_string(), self.k.local(*local).len());
                match self.k.local(*local).shape.is_empty() {
                    true => self.line(depth, &format!("{name} = 0;")),
                    false => self.line(depth, &format!("for (int64_t c = 0; c < {len}; c++) {name}[c] = 0;")),
                }
            }
            Node::Update { at, value } => {
                let out = self.tensor(self.k.output).to_string();
                let address = self.dense_address(self.k.output, at);
                let value = self.expr(value);
                match (self.split, self.in_split) {
                    (_, Some(LaneSplit::Positions(_))) => {
                        let fold = self.d.fold(self.k.reduction, "acc", &value);
                        self.line(depth, &fold);
                        self.count_hit(depth, false);
                    }
                    (Some(_), None) => {
                        let fold = self.fold_out(&format!("{out}[{address}]"), &value);
                        self.line(depth, &format!("if ({}) {fold}", self.writer()));
                        // Every lane walks the row: each counts it all.
                        self.count_hit(depth, true);
                    }
                    _ => {
                        let target = match &self.out_row {
                            Some(row) if row == at && self.row_in_lanes => {
                                format!("o_row[c_{}]", self.var(at[at.len() - 1]))
                            }
                            Some(row) if row == at => format!("o_row[{}]", self.var(at[at.len() - 1])),
                            _ => format!("{out}[{address}]"),
                        };
                        let fold = self.fold_out(&target, &value);
                        match (self.group, self.row_in_lanes) {
                            // Each lane of a group its own columns.
                            (Some(_), true) => self.line(depth, &format!("if (g_in) {fold}")),
                            (Some(_), false) => self.line(depth, &format!("if (g_in && sub == 0) {fold}")),
                            (None, _) => self.line(depth, &fold),
                        }
                        self.count_hit(depth, false);
                    }
                }
            }
            Node::Merge { var, levels, full: false, points }
                if self.is_split(n)
                    && self.split == Some(LaneSplit::Positions(*var))
                    && levels.len() == 1 =>
            {
                self.lane_positions(*var, &levels[0], &points[0].body, depth);
            }
            Node::Merge { var, levels, full: false, points }
                if self.is_split(n) && self.split == Some(LaneSplit::Entries(*var)) && levels.len() == 1 =>
            {
                self.lane_entries(*var, &levels[0], &points[0].body, depth);
            }
            Node::Merge { var, levels, full, points } => {
                if let ([level], false, [point]) = (&levels[..], full, &points[..]) {
                    self.position_loop(*var, level, &point.body, depth);
                } else {
                    self.merge(*var, levels, *full, points, depth);
                }
            }
        }
    }

    /// Where dense loop `var` sums, when its body only sums into one
    /// element that the loop does not move (a dot product: the entry being
    /// assembled, a temporary reduced to a register, or one element of a
    /// temporary or of a dense output) and every read moves by one element per
    /// step. [`Self::dot_loop`] then runs it as SIMD lanes with partial
    /// sums. Without them the sum is one chain of dependent adds, a few
    /// cycles each, and no vector unit helps; with them it is reassociated
    /// (partial sums added at the end), which the reference check's
    /// tolerance allows, as every BLAS does. A strided read is gathered
    /// lane by lane, so below [`STRIDED_DOT_MIN_STEPS`] steps such a loop
    /// stays one chain; so does one inside a dense loop `outside` (its
    /// whole body) that reads everything contiguously and moves the element
    /// summed into by one per step: gcc runs that loop in lanes instead,
    /// each lane its own chain, with no gathers (GNN kernel 1 fused
    /// maximally, `for j / for h: Z[i,j] += .. * W[h,j]`: 6x faster than
    /// gathering `W` down its columns), where that element holds the
    /// computation's type (gcc 12 keeps an f32 `Z` summed in f64 a chain:
    /// 3.5x slower than the gathers).
    /// The flag says whether every read is contiguous (no gathers).
    fn dot_product(&self, var: VarId, body: &[Node], outside: Option<VarId>) -> Option<(DotSum, bool)> {
        if self.split.is_some() {
            return None;
        }
        let located: Vec<&Node> = body.iter().filter(|n| matches!(n, Node::Locate { .. })).collect();
        let moves = |p: &Position| {
            located.iter().any(|n| matches!(n, Node::Locate { level, .. } if level.position() == *p))
        };
        let mut sums = body.iter().filter(|n| !matches!(n, Node::Locate { .. }));
        // The summed element's last coordinate, where it has coordinates.
        let mut last = None;
        let (sum, value) = match (sums.next()?, sums.next()) {
            (Node::Accumulate { value }, None) if !self.in_ws => (DotSum::Entry, value),
            (Node::Store { target: Target::Local(l), value, .. }, None)
                if self.k.local(*l).shape.is_empty() =>
            {
                (DotSum::Register(self.local(*l).to_string()), value)
            }
            (Node::Store { target, at, value }, None) => {
                let fixed = match at {
                    Place::Coords(vars) => !vars.contains(&var),
                    Place::Position(p, then) => !moves(p) && !then.contains(&var),
                };
                if !fixed {
                    return None;
                }
                if let (Place::Coords(vars), true) = (at, self.holds_real(*target)) {
                    last = vars.last().copied();
                }
                (DotSum::Element(self.store_target(*target, at)), value)
            }
            (Node::Update { at, value }, None)
                if !at.contains(&var) && self.k.reduction == Reduction::Sum && self.hits.is_none() =>
            {
                let out = self.tensor(self.k.output);
                last = at.last().copied().filter(|_| self.holds_real(Target::Output));
                (DotSum::Element(format!("{out}[{}]", self.dense_address(self.k.output, at))), value)
            }
            _ => return None,
        };
        if self.unit_stride(value, var, &located) {
            return Some((sum, true));
        }
        let lanes_outside = outside.is_some_and(|o| last == Some(o) && self.unit_stride(value, o, &located));
        (self.k.var(var).extent >= STRIDED_DOT_MIN_STEPS && !lanes_outside).then_some((sum, false))
    }

    /// Dense loop `var` as a SIMD sum (see [`Self::dot_product`]). A
    /// contiguous sum of at least [`DOT_CHUNK_BYTES`] is summed in chunks
    /// into as many partial sums (see [`Self::dot_chunks`]).
    fn dot_loop(&mut self, var: VarId, body: &[Node], sum: DotSum, contiguous: bool, depth: usize) {
        let (v, extent) = (self.var(var).to_string(), self.k.var(var).extent);
        let mut d = depth;
        let (into, clauses) = match &sum {
            DotSum::Entry if self.counting => (None, "reduction(|:hit)".to_string()),
            DotSum::Entry => (Some("acc".to_string()), "reduction(+:acc) reduction(|:hit)".to_string()),
            DotSum::Register(name) => (Some(name.clone()), format!("reduction(+:{name})")),
            DotSum::Element(_) => {
                self.line(d, "{");
                d += 1;
                self.line(d, &format!("{} dot = 0;", self.d.real()));
                (Some("dot".to_string()), "reduction(+:dot)".to_string())
            }
        };
        let chunk = DOT_CHUNK_BYTES / if self.d.real() == "double" { 8 } else { 4 };
        let mut from = 0;
        if let Some(scalar) = into.as_deref().filter(|_| contiguous && extent >= chunk) {
            from = extent - extent % chunk;
            let hit = if matches!(sum, DotSum::Entry) { " reduction(|:hit)" } else { "" };
            self.dot_chunks(var, body, scalar, hit, chunk, from, d);
        }
        // The steps past the chunks (all of them where there are none).
        if from < extent {
            self.line(d, &format!("#pragma omp simd {clauses}"));
            self.line(d, &format!("for (int64_t {v} = {from}; {v} < {extent}; {v}++) {{"));
            self.bound.push(var);
            let redirect = matches!(sum, DotSum::Element(_)).then_some("dot");
            for n in body {
                self.dot_step(n, redirect, d + 1);
            }
            self.bound.pop();
            self.line(d, "}");
        }
        if let DotSum::Element(element) = &sum {
            self.line(d, &format!("{element} += dot;"));
            self.line(depth, "}");
        }
    }

    /// The first `main` steps of dot loop `var` in chunks of `chunk`
    /// steps, step `u` of every chunk summing into `part[u]`, then the
    /// partial sums added into `scalar` (`hit`: the entry's reduction
    /// clause for `hit`, or nothing). One SIMD sum is one chain of
    /// dependent vector adds, an add's latency (3-4 cycles) a vector of
    /// steps; the chunks' partial sums are several independent chains,
    /// which run at the loads' rate. GNN kernel 2 (a 256-step dot per
    /// stored entry, f64) ran 1.16-1.27x faster on Zen 4.
    #[allow(clippy::too_many_arguments)]
    fn dot_chunks(
        &mut self,
        var: VarId,
        body: &[Node],
        scalar: &str,
        hit: &str,
        chunk: usize,
        main: usize,
        depth: usize,
    ) {
        let (v, real) = (self.var(var).to_string(), self.d.real());
        self.line(depth, "{");
        self.line(depth + 1, &format!("{real} part[{chunk}] = {{0}};"));
        self.line(depth + 1, &format!("for (int64_t kc = 0; kc < {main}; kc += {chunk}) {{"));
        self.line(depth + 2, &format!("#pragma omp simd{hit}"));
        self.line(depth + 2, &format!("for (int64_t ku = 0; ku < {chunk}; ku++) {{"));
        self.line(depth + 3, &format!("const int64_t {v} = kc + ku;"));
        self.bound.push(var);
        for n in body {
            self.dot_step(n, Some("part[ku]"), depth + 3);
        }
        self.bound.pop();
        self.line(depth + 2, "}");
        self.line(depth + 1, "}");
        self.line(depth + 1, &format!("#pragma omp simd reduction(+:{scalar})"));
        self.line(depth + 1, &format!("for (int64_t ku = 0; ku < {chunk}; ku++) {{"));
        self.line(depth + 2, &format!("{scalar} += part[ku];"));
        self.line(depth + 1, "}");
        self.line(depth, "}");
    }

    /// One node of a dot loop's body, its sum redirected into `into` where
    /// given (else printed as it is: a register's or the entry's own sum).
    fn dot_step(&mut self, n: &Node, into: Option<&str>, depth: usize) {
        match (n, into) {
            (
                Node::Store { value, .. } | Node::Update { value, .. } | Node::Accumulate { value },
                Some(into),
            ) => {
                let line = format!("{into} += {};", self.expr(value));
                self.line(depth, &line);
                if matches!(n, Node::Accumulate { .. }) {
                    self.line(depth, "hit = 1;");
                }
            }
            _ => self.node(n, depth),
        }
    }

    /// Whether `target`'s elements hold the type values are computed in.
    fn holds_real(&self, target: Target) -> bool {
        match target {
            Target::Local(_) => true,
            Target::Output => crate::print::c_type(self.k.tensor(self.k.output).dtype) == self.d.real(),
        }
    }

    /// The element a [`Node::Store`] adds to.
    fn store_target(&self, target: Target, at: &Place) -> String {
        match (target, at) {
            (Target::Local(local), _) => self.local_at(local, at),
            (Target::Output, Place::Position(p, _)) => {
                format!("{}[{}]", self.tensor(self.k.output), Self::position(p))
            }
            (Target::Output, Place::Coords(vars)) => {
                format!("{}[{}]", self.tensor(self.k.output), self.dense_address(self.k.output, vars))
            }
        }
    }

    /// Whether every read in `e` moves by at most one element per step of
    /// `var`, given the nodes that locate positions in the loop's body.
    fn unit_stride(&self, e: &Expr, var: VarId, located: &[&Node]) -> bool {
        // A position located in the body: one step of `var` moves it by
        // one when it is `var`'s level and its parent stays put.
        let position = |p: &Position| -> Option<bool> {
            located.iter().find_map(|n| match n {
                Node::Locate { level, var: v } if level.position() == *p => {
                    let parent_moves = located.iter().any(|m| match m {
                        Node::Locate { level: l, .. } => l.position() == level.parent(),
                        _ => false,
                    });
                    Some(*v == var && !parent_moves)
                }
                _ => None,
            })
        };
        // Row-major coordinates: `var` only as the last one.
        let coords = |at: &[VarId]| at.split_last().is_none_or(|(_, outer)| !outer.contains(&var));
        match e {
            Expr::Const(_) => true,
            Expr::Stored { at, .. } => position(at).unwrap_or(true),
            Expr::Dense { at, .. } => coords(at),
            Expr::Local { local, at } => match at {
                _ if self.k.local(*local).shape.is_empty() => true,
                Place::Coords(vars) => coords(vars),
                Place::Position(p, then) => match position(p) {
                    None => coords(then),
                    Some(unit) => unit && !then.contains(&var),
                },
            },
            Expr::Neg(x) => self.unit_stride(x, var, located),
            Expr::Binary { lhs, rhs, .. } => {
                self.unit_stride(lhs, var, located) && self.unit_stride(rhs, var, located)
            }
            Expr::Call { args, .. } => args.iter().all(|a| self.unit_stride(a, var, located)),
        }
    }

    /// `begin` and `end` of a level's positions under its parent.
    fn range(&self, l: &LevelRef) -> (String, String) {
        let parent = Self::position(&l.parent());
        match &l.kind {
            Reach::Compressed { pos: Some(pos), .. } => {
                let pos = self.tensor(*pos);
                (format!("{pos}[{parent}]"), format!("{pos}[{parent} + 1]"))
            }
            Reach::Compressed { pos: None, len, .. } => ("0".to_string(), len.to_string()),
            Reach::Singleton { .. } => (parent.clone(), format!("{parent} + 1")),
            Reach::Padded { g, .. } => (format!("{parent} * {g}"), format!("{parent} * {g} + {g}")),
            Reach::Dense => unreachable!("dense levels are located, not walked"),
        }
    }

    fn crd(&self, l: &LevelRef) -> &str {
        match &l.kind {
            Reach::Compressed { crd, .. } | Reach::Singleton { crd } | Reach::Padded { crd, .. } => {
                self.tensor(*crd)
            }
            Reach::Dense => unreachable!("dense levels have no coordinates"),
        }
    }

    /// Skips a padded level's padding (a slot that repeats the coordinate
    /// before it in its group, GroupCOO's and ELL's fill, holding 0): a
    /// maximum would take the zero as an entry of a row that stores every
    /// column, and a sum would add 0 x inf = NaN where another factor is
    /// infinite. ELL's empty row is padding whole, its first slot too.
    fn skip_padding(&mut self, l: &LevelRef, p: &str, begin: &str, depth: usize) {
        let Reach::Padded { empty, .. } = l.kind else { return };
        let crd = self.crd(l).to_string();
        self.line(depth, &format!("if ({p} > {begin} && {crd}[{p}] == {crd}[{p} - 1]) continue; // padding"));
        if let Some(val) = empty {
            let (_, end) = self.range(l);
            let dtype = self.k.tensor(val).dtype;
            let first = self.d.load(dtype, self.tensor(val), p);
            self.line(
                depth,
                &format!(
                    "if ({p} == {begin} && {crd}[{end} - 1] == {crd}[{p}] && {first} == 0) continue; // an empty row"
                ),
            );
        }
    }

    /// A position loop split over the lanes: each lane sums its positions'
    /// terms in a register, the warp adds the registers with shuffles, and
    /// lane 0 updates the output once.
    fn lane_positions(&mut self, var: VarId, l: &LevelRef, body: &[Node], depth: usize) {
        let p = Self::position(&l.position());
        let (begin, end) = self.range(l);
        let update = find_update(body).expect("a split position loop holds one update");
        self.line(depth, "{");
        let d = depth + 1;
        let r = self.k.reduction;
        self.line(d, &format!("{} acc = {};", self.d.real(), self.d.float(r.identity())));
        let lanes = self.lanes;
        self.line(d, &format!("for (int64_t {p} = {begin} + lane; {p} < {end}; {p} += {lanes}) {{"));
        self.skip_padding(l, &p, &begin, d + 1);
        let line = format!("const int64_t {} = {}[{p}];", self.var(var), self.crd(l));
        self.line(d + 1, &line);
        let was = self.in_split.replace(LaneSplit::Positions(var));
        body.iter().for_each(|b| self.node(b, d + 1));
        self.in_split = was;
        self.line(d, "}");
        self.fold_lanes(r, "acc", d);
        let out = self.tensor(self.k.output).to_string();
        let address = self.dense_address(self.k.output, update);
        let whole = self.whole_row();
        let fold = self.row_write(whole, &format!("{out}[{address}]"), "acc");
        self.line(d, &format!("if ({}) {fold}", self.writer()));
        self.line(depth, "}");
    }

    /// Whether the row walk being printed is directly in the row loop of a
    /// kernel whose rows are written whole ([`whole_rows`]): its row is
    /// then stored, not added (and the kernel is noted as writing its
    /// output).
    fn whole_row(&mut self) -> bool {
        let whole = self.whole_rows.is_some_and(|row| self.bound == [row] && self.position_loops == 0);
        self.wrote_whole |= whole;
        whole
    }

    /// `value` (a row's sum) written into `target`: stored, converted to
    /// the output's type, where the row is written `whole`, else added.
    fn row_write(&self, whole: bool, target: &str, value: &str) -> String {
        match whole {
            true => format!("{target} = {};", self.d.store_as(self.k.tensor(self.k.output).dtype, value)),
            false => self.fold_out(target, value),
        }
    }

    /// On a GPU, outside the loop the lanes split (which every lane walks
    /// whole): the scalar temporaries that loop `n` (a dense loop, or a
    /// walk of one level) only sums into, reading none of them and writing
    /// nothing else. Its lanes can then split it and add their sums
    /// ([`Printer::lanes_summing`]): a row's sum in a program kernel (`t[i]
    /// = A[i,j] * x[j]` before `y[i,n] = t[i] * B[i,n]`), which each lane
    /// walked whole.
    fn shared_sums(&self, n: &Node) -> Option<Vec<LocalId>> {
        let body = match n {
            Node::Dense { body, .. } => body,
            Node::Merge { levels, full: false, points, .. } if levels.len() == 1 && points.len() == 1 => {
                &points[0].body
            }
            _ => return None,
        };
        // (In a group, only a dense loop: the group's lanes split it.)
        let dense = matches!(n, Node::Dense { .. });
        if self.split.is_none()
            || (self.group.is_some() && !dense)
            || (self.in_split.is_some() && self.group.is_none())
            || self.lanes != 32
            || self.owners
            || self.hits.is_some()
        {
            return None;
        }
        let mut sums: Vec<LocalId> = Vec::new();
        let mut plain = !self.is_split(n);
        let mut visit = |n: &Node| match n {
            Node::Store { target: Target::Local(l), .. } if self.k.local(*l).shape.is_empty() => {
                if !sums.contains(l) {
                    sums.push(*l);
                }
            }
            Node::Dense { .. } | Node::Merge { .. } => plain &= !self.is_split(n),
            Node::Locate { .. } => {}
            _ => plain = false,
        };
        fn each(nodes: &[Node], f: &mut dyn FnMut(&Node)) {
            for n in nodes {
                f(n);
                n.bodies().for_each(|b| each(b, f));
            }
        }
        each(body, &mut visit);
        let reads = Node::any(body, &|n| {
            n.value()
                .is_some_and(|v| v.any(&|e| matches!(e, Expr::Local { local, .. } if sums.contains(local))))
        });
        (plain && !reads && !sums.is_empty()).then_some(sums)
    }

    /// Whether `n` is the loop the lanes split.
    fn is_split(&self, n: &Node) -> bool {
        self.split_node.is_some_and(|s| std::ptr::eq(s, n))
    }

    /// Loop `n` split over the lanes, each summing its iterations into a
    /// register per temporary of `sums`, which a butterfly of shuffles adds
    /// up in every lane before the temporaries take them.
    fn lanes_summing(&mut self, n: &Node, sums: &[LocalId], depth: usize) {
        let real = self.d.real();
        self.line(depth, "{");
        let d = depth + 1;
        let mut names = Vec::new();
        for &l in sums {
            let lanes = format!("{}_lanes", self.local(l));
            self.line(d, &format!("{real} {lanes} = 0;"));
            names.push(std::mem::replace(&mut self.locals[l.as_u32() as usize], lanes));
        }
        // A group's lanes split the loop (their `sub`), else the warp's.
        let (lane, width) = match self.group {
            Some(r) => ("sub", r),
            None => ("lane", 32),
        };
        match n {
            Node::Dense { var, body } => match self.vector_width(body, *var, width, 0) {
                1 => {
                    let (v, extent) = (self.var(*var).to_string(), self.k.var(*var).extent);
                    self.line(d, &format!("for (int64_t {v} = {lane}; {v} < {extent}; {v} += {width}) {{"));
                    self.bound.push(*var);
                    body.iter().for_each(|b| self.node(b, d + 1));
                    self.bound.pop();
                    self.line(d, "}");
                }
                vec => self.vector_steps(*var, body, (lane, width, vec), false, d),
            },
            Node::Merge { var, levels, points, .. } => {
                let l = &levels[0];
                let p = Self::position(&l.position());
                let (begin, end) = self.range(l);
                self.line(
                    d,
                    &format!(
                        "for (int64_t {p} = {begin} + lane, {p}_end = {end}; {p} < {p}_end; {p} += 32) {{"
                    ),
                );
                let line = format!("const int64_t {} = {}[{p}];", self.var(*var), self.crd(l));
                self.line(d + 1, &line);
                self.position_loops += 1;
                points[0].body.iter().for_each(|b| self.node(b, d + 1));
                self.position_loops -= 1;
                self.line(d, "}");
            }
            _ => unreachable!("shared_sums takes loops"),
        }
        for (&l, name) in sums.iter().zip(names) {
            let lanes = std::mem::replace(&mut self.locals[l.as_u32() as usize], name);
            self.line(
                d,
                &format!(
                    "for (int offset = {}; offset > 0; offset >>= 1) {lanes} += __shfl_xor_sync(0xffffffffu, {lanes}, offset);",
                    width / 2
                ),
            );
            let line = format!("{} += {lanes};", self.local(l));
            self.line(d, &line);
        }
        self.line(depth, "}");
    }

    /// Where the lanes take a row's entries ([`LaneSplit::Entries`]) and
    /// each entry sums a dense loop into a register (SDDMM's dot product
    /// over `k`): the lanes a group takes each entry with, so that they
    /// split that loop, `k / 4` rounded down to a power of two from 2 to 32
    /// (K = 32: 8 lanes an entry, 4 entries a step, each lane 4 of the dot's
    /// steps and 3 shuffles). A lane an entry left most lanes idle on a
    /// graph's short rows (cora's 4 entries: 28 of 32) and walked each dot
    /// alone, one load after another. Not over padded levels (ELL,
    /// GroupCOO), whose padding a lane skips alone.
    fn entry_group(&self, l: &LevelRef, body: &[Node]) -> Option<usize> {
        if matches!(l.kind, Reach::Padded { .. }) || self.lanes != 32 || self.owners || self.hits.is_some() {
            return None;
        }
        let longest = body
            .iter()
            .filter_map(|n| match n {
                Node::Dense { var, body }
                    if Node::any(body, &|b| {
                        matches!(b, Node::Store { target: Target::Local(l), .. } if self.k.local(*l).shape.is_empty())
                    }) =>
                {
                    Some(self.k.var(*var).extent)
                }
                _ => None,
            })
            .max()?;
        let r = (longest / 4).clamp(1, 32);
        let r = 1 << r.ilog2();
        (r >= 2).then_some(r)
    }

    /// A position loop split over the lanes, each position its own output
    /// elements ([`LaneSplit::Entries`]).
    fn lane_entries(&mut self, var: VarId, l: &LevelRef, body: &[Node], depth: usize) {
        if let Some(r) = self.entry_group(l, body) {
            return self.group_entries(var, l, body, r, depth);
        }
        let p = Self::position(&l.position());
        let (begin, end) = self.range(l);
        let lanes = self.lanes;
        self.line(
            depth,
            &format!("for (int64_t {p} = {begin} + lane, {p}_end = {end}; {p} < {p}_end; {p} += {lanes}) {{"),
        );
        self.skip_padding(l, &p, &begin, depth + 1);
        let line = format!("const int64_t {} = {}[{p}];", self.var(var), self.crd(l));
        self.line(depth + 1, &line);
        let was = self.in_split.replace(LaneSplit::Entries(var));
        self.position_loops += 1;
        body.iter().for_each(|b| self.node(b, depth + 1));
        self.position_loops -= 1;
        self.in_split = was;
        self.line(depth, "}");
    }

    /// [`Printer::lane_entries`] with `r` lanes an entry
    /// ([`Printer::entry_group`]). Every lane runs the same steps, so that
    /// each reaches the shuffles: a group past the row's last entry takes
    /// that entry again (`g_in` false) and writes nothing.
    fn group_entries(&mut self, var: VarId, l: &LevelRef, body: &[Node], r: usize, depth: usize) {
        let was = self.in_split.replace(LaneSplit::Entries(var));
        self.group_steps(var, l, body, r, depth);
        self.in_split = was;
    }

    /// Position loop `var` over `l` taken by groups of `r` lanes, `32 / r`
    /// positions a step, with `body` printed inside for each group's
    /// position. Every lane runs the same steps, so that each reaches the
    /// shuffles inside: a group past the row's last position takes that
    /// position again (`g_in` false) and must write nothing.
    fn group_steps(&mut self, var: VarId, l: &LevelRef, body: &[Node], r: usize, depth: usize) {
        let p = Self::position(&l.position());
        let (begin, end) = self.range(l);
        let per = 32 / r;
        self.line(
            depth,
            &format!(
                "for (int64_t {p}_step = {begin}, {p}_end = {end}; {p}_step < {p}_end; {p}_step += {per}) {{"
            ),
        );
        let d = depth + 1;
        self.group_position(var, l, &format!("{p}_end"), r, d);
        self.group = Some(r);
        self.position_loops += 1;
        body.iter().for_each(|b| self.node(b, d));
        self.position_loops -= 1;
        self.group = None;
        self.line(depth, "}");
    }

    /// A group of `r` lanes' position of `l` in the step from `{p}_step`
    /// (a group at or past `end` takes the last position, `end - 1`, again
    /// with `g_in` false), the lane's place in its group (`sub`) and
    /// `var`'s coordinate there.
    fn group_position(&mut self, var: VarId, l: &LevelRef, end: &str, r: usize, depth: usize) {
        let p = Self::position(&l.position());
        let shift = r.ilog2();
        self.line(depth, &format!("const bool g_in = {p}_step + (lane >> {shift}) < {end};"));
        self.line(depth, &format!("const int64_t {p} = g_in ? {p}_step + (lane >> {shift}) : {end} - 1;"));
        self.line(depth, &format!("const int sub = lane & {};", r - 1));
        let line = format!("const int64_t {} = {}[{p}];", self.var(var), self.crd(l));
        self.line(depth, &line);
    }

    fn position_loop(&mut self, var: VarId, l: &LevelRef, body: &[Node], depth: usize) {
        if let Some((at, lane_var, extent)) = self.row_in_lanes(var, body) {
            return self.position_loop_in_lanes(var, l, body, (at, lane_var, extent), depth);
        }
        let Some((at, row_var, extent)) = self.row_in_registers(var, body) else {
            return self.position_loop_plain(var, l, body, depth);
        };
        let real = self.d.real();
        self.line(depth, "{");
        self.line(depth + 1, &format!("{real} o_row[{extent}] = {{0}};"));
        self.out_row = Some(at.clone());
        self.position_loop_plain(var, l, body, depth + 1);
        self.out_row = None;
        let (r, out) = (self.var(row_var).to_string(), self.tensor(self.k.output).to_string());
        let target = format!("{out}[{}]", self.dense_address(self.k.output, &at));
        self.line(depth + 1, "#pragma omp simd");
        self.line(depth + 1, &format!("for (int64_t {r} = 0; {r} < {extent}; {r}++) {{"));
        let fold = self.d.fold(self.k.reduction, &target, &format!("o_row[{r}]"));
        self.line(depth + 2, &fold);
        self.line(depth + 1, "}");
        self.line(depth, "}");
    }

    /// Where a position loop's updates all sum into one output row that
    /// the loop does not move (`A[i,r]` inside `for j / for k / for r` of
    /// MTTKRP over CSF), with the row's loop not directly in its body: the
    /// row's coordinates, its variable and extent. The row is then summed in
    /// a local array (registers) and added to the output once after the
    /// loop; gcc 12 keeps such a row in registers across one loop (CSR's
    /// entries), but not across two, where each entry loaded it back from
    /// the store before (one store-to-load round trip per entry: MTTKRP on
    /// FROSTT med.tns, one thread, 0.44 ms). Only on the CPU, for sums into
    /// a dense output that no read inside sees, and not on the loop OpenMP
    /// takes.
    fn row_in_registers(&self, var: VarId, body: &[Node]) -> Option<(Vec<VarId>, VarId, usize)> {
        let plain = self.split.is_none() && self.hits.is_none() && !self.in_ws && !self.in_block;
        let outermost = self.bound.is_empty() && self.position_loops == 0;
        if !plain || outermost || self.out_row.is_some() || self.k.assembly.is_some() {
            return None;
        }
        if self.k.reduction != Reduction::Sum {
            return None;
        }
        let mut all = Vec::new();
        updates_under(body, &mut all);
        let at = all.first()?.clone();
        let (&row_var, fixed) = at.split_last()?;
        let extent = self.k.var(row_var).extent;
        let one_row = all.iter().all(|a| *a == at) && !fixed.contains(&var) && !binds(body, fixed);
        let nested = updating_loop(body, row_var)
            && !body.iter().any(|n| matches!(n, Node::Dense { var, .. } if *var == row_var));
        // Plain loops over levels and dense loops only (no strips, fills,
        // subsections or workspaces below).
        let plain_loops = !Node::any(body, &|n| {
            !matches!(n, Node::Merge { .. } | Node::Dense { .. } | Node::Locate { .. } | Node::Update { .. })
        });
        let output = self.k.output;
        let reads_output = Node::any(body, &|n| {
            n.value()
                .is_some_and(|v| v.any(&|e| matches!(e, Expr::Dense { tensor, .. } if *tensor == output)))
        });
        let fits = (1..=64).contains(&extent);
        (plain_loops && one_row && nested && !reads_output && fits).then_some((at, row_var, extent))
    }

    /// On a GPU, where a warp's position loop sums into one output row of
    /// the warp's own (CSR SpMM's `C[m,n]` over row m's entries, SDDMM into
    /// SpMM's `Z[i,n]`) and its lanes split the row's columns
    /// ([`LaneSplit::Dense`]) in at most [`MAX_ROW_SLOTS`] slots a lane:
    /// the row's coordinates, the lanes' variable and its extent. Each lane
    /// then sums its columns in registers and adds them to the output once
    /// after the loop, where every entry read and wrote the row in global
    /// memory (a round trip through L2 per entry and column: the row's
    /// bytes again for each entry, beside B's row). Only where the warps
    /// own their rows (no atomics, no rows repeated past the last) and
    /// nothing inside reads the output.
    fn row_in_lanes(&self, var: VarId, body: &[Node]) -> Option<(Vec<VarId>, VarId, usize)> {
        let Some(LaneSplit::Dense(lane_var)) = self.split else { return None };
        let plain = self.in_split.is_none() && !self.atomic && !self.owners && self.hits.is_none();
        if !plain || self.in_ws || self.in_block || self.out_row.is_some() || self.k.assembly.is_some() {
            return None;
        }
        if self.k.reduction != Reduction::Sum {
            return None;
        }
        let mut all = Vec::new();
        updates_under(body, &mut all);
        let [at] = &all[..] else { return None };
        let (&last, fixed) = at.split_last()?;
        let extent = self.k.var(lane_var).extent;
        let one_row = last == lane_var && !fixed.contains(&var) && !binds(body, fixed);
        // Loops over levels and dense loops, and a program kernel's
        // temporaries (no strips, fills, workspaces or output stores).
        let plain_loops = !Node::any(body, &|n| {
            !matches!(
                n,
                Node::Merge { .. }
                    | Node::Dense { .. }
                    | Node::Locate { .. }
                    | Node::Update { .. }
                    | Node::Clear { .. }
                    | Node::Store { target: Target::Local(_), .. }
            )
        });
        let output = self.k.output;
        let reads_output = Node::any(body, &|n| {
            n.value()
                .is_some_and(|v| v.any(&|e| matches!(e, Expr::Dense { tensor, .. } if *tensor == output)))
        });
        let fits = extent.div_ceil(self.lanes as usize) <= MAX_ROW_SLOTS;
        (one_row && plain_loops && updating_loop(body, lane_var) && !reads_output && fits)
            .then(|| (at.clone(), lane_var, extent))
    }

    /// [`Printer::position_loop`] with the row in the lanes' registers
    /// ([`Printer::row_in_lanes`]).
    fn position_loop_in_lanes(
        &mut self,
        var: VarId,
        l: &LevelRef,
        body: &[Node],
        (at, lane_var, extent): (Vec<VarId>, VarId, usize),
        depth: usize,
    ) {
        // A row of at most 16 columns: groups of lanes (the columns'
        // power of two, at least 4) take the row's entries in turn, so that
        // no lane idles (SDDMM into SpMM at N = 16 left half the warp idle),
        // each summing its group's entries; the groups' sums are added by
        // shuffles after the row.
        let group = (extent <= 16 && !matches!(l.kind, Reach::Padded { .. }) && self.lanes == 32)
            .then(|| extent.next_power_of_two().max(4));
        let (real, lanes) = (self.d.real(), group.unwrap_or(self.lanes as usize));
        let slots = extent.div_ceil(lanes);
        self.line(depth, "{");
        self.line(depth + 1, &format!("{real} o_row[{slots}] = {{0}};"));
        (self.out_row, self.row_in_lanes) = (Some(at.clone()), true);
        let vec = match group {
            None => self.row_vector(body, lane_var, extent),
            Some(_) => 1,
        };
        self.row_vec = vec;
        match group {
            Some(r) => self.group_steps(var, l, body, r, depth + 1),
            None => self.position_loop_plain(var, l, body, depth + 1),
        }
        (self.out_row, self.row_in_lanes, self.row_vec) = (None, false, 1);
        let v = self.var(lane_var).to_string();
        let target = format!("{}[{}]", self.tensor(self.k.output), self.dense_address(self.k.output, &at));
        let whole = self.whole_row();
        if whole && vec > 1 {
            self.store_vectors(&target, &v, extent / (32 * vec), vec, depth + 1);
            self.line(depth, "}");
            return;
        }
        let fold = self.row_write(whole, &target, &format!("o_row[c_{v}]"));
        self.line(depth + 1, "#pragma unroll");
        self.line(depth + 1, &format!("for (int64_t c_{v} = 0; c_{v} < {slots}; c_{v}++) {{"));
        let d = depth + 2;
        if let Some(r) = group {
            self.line(
                d,
                &format!(
                    "for (int offset = 16; offset >= {r}; offset >>= 1) o_row[c_{v}] += \
                     __shfl_xor_sync(0xffffffffu, o_row[c_{v}], offset);"
                ),
            );
        }
        match vec {
            1 => self.line(d, &format!("const int64_t {v} = lane + c_{v} * {lanes};")),
            _ => self.line(
                d,
                &format!("const int64_t {v} = (lane + c_{v} / {vec} * 32) * {vec} + c_{v} % {vec};"),
            ),
        }
        let when = match (group, extent.is_multiple_of(lanes)) {
            (Some(r), true) => format!("if (lane < {r}) "),
            (Some(r), false) => format!("if (lane < {r} && {v} < {extent}) "),
            (None, true) => String::new(),
            (None, false) => format!("if ({v} < {extent}) "),
        };
        self.line(d, &format!("{when}{fold}"));
        self.line(depth + 1, "}");
        self.line(depth, "}");
    }

    /// How many adjacent steps of dense loop `var` each of `width` lanes
    /// splitting it takes, so that every read along it is one load of up
    /// to 16 bytes a lane: 16 bytes of the widest tensor read along it (or
    /// of a `bytes` wide one written: 4 of f32, 8 of f16), halved until
    /// the loop is whole chunks of `width` lanes. 1 (a lane's steps
    /// `width` apart, each a load of its own) where a read moves by more
    /// than one element a step or reads a temporary, and where nothing
    /// moves along the loop at all.
    fn vector_width(&self, body: &[Node], var: VarId, width: usize, bytes: usize) -> usize {
        let extent = self.k.var(var).extent;
        let mut widest = bytes;
        let mut reads = Vec::new();
        column_reads(body, var, &mut reads);
        for read in &reads {
            let Expr::Dense { tensor, at } = read else { return 1 };
            let t = self.k.tensor(*tensor);
            let once = at.iter().filter(|&&a| a == var).count() == 1;
            if !once || at.last() != Some(&var) || t.shape.last() != Some(&extent) || t.dtype.is_index() {
                return 1;
            }
            widest = widest.max(t.dtype.size_bytes());
        }
        if widest == 0 {
            return 1;
        }
        let mut vec = 16 / widest;
        while vec > 1 && !extent.is_multiple_of(width * vec) {
            vec /= 2;
        }
        vec
    }

    /// How many adjacent columns each lane owns of a row the warp holds
    /// in its registers ([`Printer::row_vec`]): [`Printer::vector_width`]
    /// over the row's reads and its store into the output, and 1 where the
    /// body keeps temporaries.
    fn row_vector(&self, body: &[Node], lane_var: VarId, extent: usize) -> usize {
        let output = self.k.tensor(self.k.output);
        let temporaries = Node::any(body, &|n| matches!(n, Node::Clear { .. } | Node::Store { .. }));
        if temporaries || output.shape.last() != Some(&extent) {
            return 1;
        }
        self.vector_width(body, lane_var, 32, output.dtype.size_bytes())
    }

    /// Each dense row `body` reads along `var` loaded as one piece of `vec`
    /// elements from `var = start` into a local array, the reads printed as
    /// its element `j_var`; gives the count of hoisted reads before, to
    /// restore once the body is printed. A read whose other coordinates a
    /// loop inside binds stays where it is, a step at a time.
    fn vector_loads(&mut self, var: VarId, body: &[Node], start: &str, vec: usize, depth: usize) -> usize {
        let v = self.var(var).to_string();
        let hoisted = self.hoisted.len();
        let mut reads = Vec::new();
        column_reads(body, var, &mut reads);
        for (i, read) in reads.iter().enumerate() {
            let Expr::Dense { tensor, at } = read else { continue };
            let others: Vec<VarId> = at.iter().copied().filter(|&a| a != var).collect();
            if binds(body, &others) {
                continue;
            }
            let dtype = self.k.tensor(*tensor).dtype;
            let name = format!("{v}_b{i}");
            let chunk = vector_type(vec * dtype.size_bytes());
            let (array, address) = (self.tensor(*tensor).to_string(), self.dense_address(*tensor, at));
            self.line(depth, &format!("__align__(16) {} {name}[{vec}];", self.d.storage(dtype)));
            self.line(
                depth,
                &format!(
                    "{{ const int64_t {v} = {start}; *reinterpret_cast<{chunk} *>({name}) = \
                     *reinterpret_cast<const {chunk} *>(&{array}[{address}]); }}"
                ),
            );
            self.hoisted.push((read.clone(), self.d.load(dtype, &name, &format!("j_{v}"))));
        }
        hoisted
    }

    /// Dense loop `var` split by `width` lanes (each its `lane`) taking
    /// `vec` adjacent steps at a time: chunk `w` of a lane covers steps
    /// `(lane + width w) vec ..`, and each dense row the body reads along
    /// the loop (B's row at an entry's coordinate, SDDMM's rows of X and Y)
    /// is one load of up to 16 bytes a lane ([`Printer::vector_loads`]),
    /// where steps `width` apart took a scalar load each. `slots`: the
    /// loop is the lanes' split of a row in their registers
    /// ([`Printer::row_vec`]), whose slot `c` a step sums into.
    fn vector_steps(
        &mut self,
        var: VarId,
        body: &[Node],
        (lane, width, vec): (&str, usize, usize),
        slots: bool,
        depth: usize,
    ) {
        let v = self.var(var).to_string();
        let chunks = self.k.var(var).extent / (width * vec);
        if slots {
            self.line(depth, "#pragma unroll");
        }
        self.line(depth, &format!("for (int64_t w_{v} = 0; w_{v} < {chunks}; w_{v}++) {{"));
        let d = depth + 1;
        let start = format!("({lane} + w_{v} * {width}) * {vec}");
        let hoisted = self.vector_loads(var, body, &start, vec, d);
        self.line(d, "#pragma unroll");
        self.line(d, &format!("for (int64_t j_{v} = 0; j_{v} < {vec}; j_{v}++) {{"));
        if slots {
            self.line(d + 1, &format!("const int64_t c_{v} = w_{v} * {vec} + j_{v};"));
        }
        self.line(d + 1, &format!("const int64_t {v} = {start} + j_{v};"));
        let was = match slots {
            true => self.in_split.replace(LaneSplit::Dense(var)),
            false => self.in_split,
        };
        self.bound.push(var);
        body.iter().for_each(|b| self.node(b, d + 1));
        self.bound.pop();
        self.in_split = was;
        self.hoisted.truncate(hoisted);
        self.line(d, "}");
        self.line(depth, "}");
    }

    /// A whole row in the lanes' registers ([`Printer::row_vec`] adjacent
    /// columns a lane, in `chunks`) stored into `target` (the output at
    /// the row, column `v`) 16 bytes at a time, converted to the output's
    /// type.
    fn store_vectors(&mut self, target: &str, v: &str, chunks: usize, vec: usize, depth: usize) {
        let dtype = self.k.tensor(self.k.output).dtype;
        let chunk = vector_type(vec * dtype.size_bytes());
        self.line(depth, "#pragma unroll");
        self.line(depth, &format!("for (int64_t w_{v} = 0; w_{v} < {chunks}; w_{v}++) {{"));
        let d = depth + 1;
        self.line(d, &format!("const int64_t {v} = (lane + w_{v} * 32) * {vec};"));
        self.line(d, &format!("__align__(16) {} o_vec[{vec}];", self.d.storage(dtype)));
        let value = self.d.store_as(dtype, &format!("o_row[w_{v} * {vec} + j]"));
        self.line(d, "#pragma unroll");
        self.line(d, &format!("for (int j = 0; j < {vec}; j++) o_vec[j] = {value};"));
        self.line(
            d,
            &format!("*reinterpret_cast<{chunk} *>(&{target}) = *reinterpret_cast<const {chunk} *>(o_vec);"),
        );
        self.line(depth, "}");
    }

    fn position_loop_plain(&mut self, var: VarId, l: &LevelRef, body: &[Node], depth: usize) {
        let whole_warp =
            self.row_in_lanes && self.group.is_none() && self.in_split.is_none() && self.lanes == 32;
        if let (true, Reach::Compressed { crd, .. }) = (whole_warp, &l.kind) {
            return self.position_chunks(var, l, *crd, body, depth);
        }
        let p = Self::position(&l.position());
        let (begin, end) = self.range(l);
        // The end in a local, where stores in the body (a workspace's)
        // could alias the positions for all the compiler knows; not in the
        // outermost loop, which OpenMP may take (one variable in its init).
        let outermost = self.bound.is_empty() && self.position_loops == 0;
        match outermost {
            true if self.threads && self.k.row_runs => {
                // An even share of the positions, each end moved past the
                // run of the row it falls in: a row's positions are one
                // thread's (the level is ordered), so its updates are too.
                let crd = self.crd(l).to_string();
                self.line(
                    depth,
                    "const int64_t r_tid = omp_get_thread_num(), r_team = omp_get_num_threads();",
                );
                self.line(depth, &format!("const int64_t r_begin = {begin}, r_end = {end};"));
                self.line(depth, "int64_t r_lo = r_begin + (r_end - r_begin) * r_tid / r_team;");
                self.line(depth, "int64_t r_hi = r_begin + (r_end - r_begin) * (r_tid + 1) / r_team;");
                self.line(
                    depth,
                    &format!(
                        "while (r_lo > r_begin && r_lo < r_end && {crd}[r_lo] == {crd}[r_lo - 1]) r_lo++;"
                    ),
                );
                self.line(
                    depth,
                    &format!(
                        "while (r_hi > r_begin && r_hi < r_end && {crd}[r_hi] == {crd}[r_hi - 1]) r_hi++;"
                    ),
                );
                self.line(depth, &format!("for (int64_t {p} = r_lo; {p} < r_hi; {p}++) {{"));
            }
            true => self.line(depth, &format!("for (int64_t {p} = {begin}; {p} < {end}; {p}++) {{")),
            // One child per parent: a block, not a loop of one trip, inside
            // which GCC 12 left the dot products below scalar (COO's SDDMM
            // into SpMM: 2.6x CSR's time).
            false if matches!(l.kind, Reach::Singleton { .. }) => {
                self.line(depth, "{ // a singleton level: one position, its parent's");
                self.line(depth + 1, &format!("const int64_t {p} = {begin};"));
            }
            false => self.line(
                depth,
                &format!("for (int64_t {p} = {begin}, {p}_end = {end}; {p} < {p}_end; {p}++) {{"),
            ),
        }
        self.skip_padding(l, &p, &begin, depth + 1);
        let line = format!("const int64_t {} = {}[{p}];", self.var(var), self.crd(l));
        self.line(depth + 1, &line);
        if self.split.is_none() && reads_dense_at(body, var) {
            // Vectorised, this loop's lanes would gather the dense operands
            // at the entries' scattered coordinates, one vgatherdpd per
            // value: GCC 12 does it (tuning for Zen 3) where the loops below
            // unroll, and on this Zen 4 it is slower than scalar loads
            // (SDDMM on ca-CondMat, NK = 16: 4.4 ms against 2.3). An empty
            // asm statement keeps a loop scalar and costs nothing.
            self.line(
                depth + 1,
                "__asm__ volatile(\"\"); // scalar: lanes would gather at scattered coordinates",
            );
        }
        self.position_loops += 1;
        body.iter().for_each(|b| self.node(b, depth + 1));
        self.position_loops -= 1;
        self.line(depth, "}");
    }

    /// On a GPU, a compressed level's positions walked by a whole warp
    /// whose lanes each take every position (the row in the lanes'
    /// registers, [`Printer::row_in_lanes`]): 32 positions at a time, their
    /// coordinates and the values read at them loaded by one coalesced load
    /// (a lane each) and handed to every lane by `__shfl_sync`, so that no
    /// position's reads of B wait on a load of its coordinate; the steps
    /// unrolled by 4, so that several rows of B are loaded at once. (A
    /// lane a position: every lane loaded the same coordinate, then the
    /// row of B at it, two dependent round trips per position.)
    fn position_chunks(&mut self, var: VarId, l: &LevelRef, crd: TensorId, body: &[Node], depth: usize) {
        let p = Self::position(&l.position());
        let (begin, end) = self.range(l);
        let index = match self.k.tensor(crd).dtype {
            ElemType::Index(IType::I32) => "int",
            _ => "int64_t",
        };
        let crd = self.tensor(crd).to_string();
        // The values the body reads at this position (`A_val[p]`), once each.
        let here = l.position();
        let mut vals = Vec::new();
        stored_reads_at(body, &here, &mut vals);
        self.line(
            depth,
            &format!("for (int64_t {p}_at = {begin}, {p}_end = {end}; {p}_at < {p}_end; {p}_at += 32) {{"),
        );
        let d = depth + 1;
        self.line(d, &format!("const int {p}_n = {p}_end - {p}_at < 32 ? (int)({p}_end - {p}_at) : 32;"));
        self.line(d, &format!("const {index} {p}_crd = lane < {p}_n ? {crd}[{p}_at + lane] : 0;"));
        let real = self.d.real();
        for (i, &val) in vals.iter().enumerate() {
            let load = self.stored(val, &format!("{p}_at + lane"));
            self.line(d, &format!("const {real} {p}_v{i} = lane < {p}_n ? {load} : 0;"));
        }
        self.line(d, "#pragma unroll 4");
        self.line(d, &format!("for (int {p}_e = 0; {p}_e < {p}_n; {p}_e++) {{"));
        self.line(d + 1, &format!("const int64_t {p} = {p}_at + {p}_e;"));
        let v = self.var(var).to_string();
        self.line(d + 1, &format!("const int64_t {v} = __shfl_sync(0xffffffffu, {p}_crd, {p}_e);"));
        let hoisted = self.hoisted.len();
        for (i, &val) in vals.iter().enumerate() {
            // Broadcast here, where every lane is (the body's column slots
            // test their lane's column).
            self.line(d + 1, &format!("const {real} {p}_s{i} = __shfl_sync(0xffffffffu, {p}_v{i}, {p}_e);"));
            self.hoisted.push((Expr::Stored { val, at: here.clone() }, format!("{p}_s{i}")));
        }
        self.position_loops += 1;
        body.iter().for_each(|b| self.node(b, d + 1));
        self.position_loops -= 1;
        self.hoisted.truncate(hoisted);
        self.line(d, "}");
        self.line(depth, "}");
    }

    /// Co-iteration: every level's position advances when its coordinate
    /// is the current one; the branch taken is the lattice point of the
    /// levels that have it. Over the levels' coordinates (not `full`), a
    /// loop per lattice point, the largest first, runs while each of its
    /// levels has entries left and takes the cases among its levels: once
    /// a level runs out, the next loop drops it, so no loop tests a level's
    /// end on every step or reads a sentinel (a union's remainders are
    /// plain loops over one level).
    fn merge(
        &mut self,
        var: VarId,
        levels: &[LevelRef],
        full: bool,
        points: &[spindle_ir::level::Point],
        depth: usize,
    ) {
        let v = self.var(var).to_string();
        self.line(depth, "{");
        let d = depth + 1;
        let ps: Vec<String> = levels.iter().map(|l| Self::position(&l.position())).collect();
        for (l, p) in levels.iter().zip(&ps) {
            let (begin, end) = self.range(l);
            self.line(d, &format!("int64_t {p} = {begin};"));
            self.line(d, &format!("const int64_t {p}_end = {end};"));
        }
        if full {
            let extent = self.k.var(var).extent;
            self.line(d, &format!("for (int64_t {v} = 0; {v} < {extent}; {v}++) {{"));
            for (l, p) in levels.iter().zip(&ps) {
                let crd = self.crd(l).to_string();
                self.line(d + 1, &format!("const int m_{p} = {p} < {p}_end && {crd}[{p}] == {v};"));
            }
            let all = vec![true; levels.len()];
            self.cases(&ps, &all, points, d + 1);
            self.line(d, "}");
            self.line(depth, "}");
            return;
        }
        // The loops' level sets, largest first (the order loses nothing:
        // a loop ends with fewer levels left, whose loop comes later).
        let mut loops: Vec<&[bool]> = points.iter().map(|pt| pt.present.as_slice()).collect();
        loops.sort_by_key(|on| std::cmp::Reverse(on.iter().filter(|&&x| x).count()));
        loops.dedup();
        for on in loops {
            let live: Vec<&String> = ps.iter().zip(on).filter(|(_, on)| **on).map(|(p, _)| p).collect();
            if live.is_empty() {
                // A point of no level iterates nothing here (a dense loop
                // `full` takes such points).
                continue;
            }
            let cond: Vec<String> = live.iter().map(|p| format!("{p} < {p}_end")).collect();
            self.line(d, &format!("while ({}) {{", cond.join(" && ")));
            for (l, p) in levels.iter().zip(&ps).filter(|(_, p)| live.contains(p)) {
                let crd = self.crd(l).to_string();
                self.line(d + 1, &format!("const int64_t c_{p} = {crd}[{p}];"));
            }
            let mut min = format!("c_{}", live[0]);
            for p in &live[1..] {
                min = format!("(c_{p} < {min} ? c_{p} : {min})");
            }
            self.line(d + 1, &format!("const int64_t {v} = {min};"));
            for p in &live {
                self.line(d + 1, &format!("const int m_{p} = c_{p} == {v};"));
            }
            self.cases(&ps, on, points, d + 1);
            self.line(d, "}");
        }
        self.line(depth, "}");
    }

    /// The branches of a merge step over the levels `on` of `ps` (the
    /// others have run out): a branch per lattice point among them, on the
    /// masks `m_<position>`, each advancing its point's levels; levels that
    /// no point's branch takes advance by their masks.
    fn cases(&mut self, ps: &[String], on: &[bool], points: &[spindle_ir::level::Point], depth: usize) {
        let mut first = true;
        for pt in points.iter().filter(|pt| pt.present.iter().zip(on).all(|(present, on)| !present || *on)) {
            let cond: Vec<String> = ps
                .iter()
                .zip(&pt.present)
                .zip(on)
                .filter(|(_, on)| **on)
                .map(|((p, present), _)| if *present { format!("m_{p}") } else { format!("!m_{p}") })
                .collect();
            let keyword = if first { "if" } else { "} else if" };
            first = false;
            self.line(depth, &format!("{keyword} ({}) {{", cond.join(" && ")));
            pt.body.iter().for_each(|b| self.node(b, depth + 1));
            // Advanced in the branch: the next step's loads then depend on
            // the branch (predicted) rather than on this step's loads
            // (`bench spgemm`'s union on ca-CondMat 1.37 -> 0.66 ms).
            for (p, _) in ps.iter().zip(&pt.present).filter(|(_, present)| **present) {
                self.line(depth + 1, &format!("{p}++;"));
            }
        }
        // Levels that have the coordinate where no point does (an
        // intersection's levels one at a time) advance by their masks; a
        // union's points cover every such set.
        let masks: Vec<String> =
            ps.iter().zip(on).filter(|(_, on)| **on).map(|(p, _)| format!("{p} += m_{p};")).collect();
        if first {
            masks.iter().for_each(|m| self.line(depth, m));
        } else if covers_every_set(points, on) {
            self.line(depth, "}");
        } else {
            self.line(depth, "} else {");
            masks.iter().for_each(|m| self.line(depth + 1, m));
            self.line(depth, "}");
        }
    }

    /// The row-major address of a dense tensor at loop variables.
    fn dense_address(&self, t: TensorId, at: &[VarId]) -> String {
        self.row_major(&self.k.tensor(t).shape, at)
    }

    /// The row-major offset of `at` in an array of `shape`.
    fn row_major(&self, shape: &[usize], at: &[VarId]) -> String {
        let mut address = String::new();
        for (dim, v) in at.iter().enumerate() {
            let stride: usize = shape[dim + 1..].iter().product();
            let term =
                if stride == 1 { self.var(*v).to_string() } else { format!("{} * {stride}", self.var(*v)) };
            if !address.is_empty() {
                address.push_str(" + ");
            }
            address.push_str(&term);
        }
        if address.is_empty() { "0".to_string() } else { address }
    }

    /// A stored tensor's value at `position`, in the compute type: an
    /// integer tensor read as a value is converted first (C would round an
    /// int64 to a float operand's type).
    fn stored(&self, val: TensorId, position: &str) -> String {
        let dtype = self.k.tensor(val).dtype;
        let loaded = self.d.load(dtype, self.tensor(val), position);
        match dtype {
            ElemType::Index(_) => format!("(({}){loaded})", self.d.real()),
            ElemType::Value(_) => loaded,
        }
    }

    fn expr(&self, e: &Expr) -> String {
        if let Some((_, hoisted)) = self.hoisted.iter().find(|(h, _)| h == e) {
            return hoisted.clone();
        }
        match e {
            Expr::Const(c) => self.d.float(*c),
            Expr::Stored { val, at } => self.stored(*val, &Self::position(at)),
            Expr::Dense { tensor, at } => {
                let dtype = self.k.tensor(*tensor).dtype;
                let loaded = self.d.load(dtype, self.tensor(*tensor), &self.dense_address(*tensor, at));
                match dtype {
                    ElemType::Index(_) => format!("(({}){loaded})", self.d.real()),
                    ElemType::Value(_) => loaded,
                }
            }
            Expr::Local { local, at } => self.local_at(*local, at),
            Expr::Neg(x) => format!("(-{})", self.expr(x)),
            Expr::Binary { op, lhs, rhs } => {
                let op = match op {
                    BinOp::Add => BinaryOp::Add,
                    BinOp::Sub => BinaryOp::Sub,
                    BinOp::Mul => BinaryOp::Mul,
                    BinOp::Div => BinaryOp::Div,
                };
                self.d.binary(op, &self.expr(lhs), &self.expr(rhs), spindle_ir::kernel::Scalar::Float)
            }
            Expr::Call { func, args } => {
                let args: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                match (func, &args[..]) {
                    (Func::Max, [x, y]) => {
                        self.d.binary(BinaryOp::Max, x, y, spindle_ir::kernel::Scalar::Float)
                    }
                    (Func::Min, [x, y]) => {
                        self.d.binary(BinaryOp::Min, x, y, spindle_ir::kernel::Scalar::Float)
                    }
                    (f, [x]) => self.d.func(*f, x),
                    _ => unreachable!("the checker fixes every function's arity"),
                }
            }
        }
    }
}

/// A level kernel compiled for the CPU.
#[derive(Debug)]
pub struct CLevelKernel {
    pub kernel: LevelKernel,
    pub source: String,
    pub program: crate::CProgram,
}

impl CLevelKernel {
    pub fn compile(kernel: &LevelKernel, compiler: &crate::Compiler) -> Result<CLevelKernel, BackendError> {
        CLevelKernel::compile_with(kernel, compiler, SERIAL_WORK)
    }

    /// [`CLevelKernel::compile`] with the work below which one thread runs
    /// ([`print_level_with`]; 0: threads at any size).
    pub fn compile_with(
        kernel: &LevelKernel,
        compiler: &crate::Compiler,
        serial_work: usize,
    ) -> Result<CLevelKernel, BackendError> {
        let source = print_level_with(kernel, SYMBOL, serial_work)?;
        let kinds = kernel.tensors.values().map(|t| BufferKind::for_elem(t.dtype)).collect();
        let program = compiler.compile(&source, SYMBOL)?.with_signature(kinds);
        Ok(CLevelKernel { kernel: kernel.clone(), source, program })
    }

    /// The buffers of a run, in argument order (see [`exec::buffers`]); a
    /// sparse output's arrays start empty and are sized by each launch.
    pub fn buffers(&self, tensors: &Tensors) -> Result<Vec<Buffer>, BackendError> {
        let Some(a) = &self.kernel.assembly else {
            return exec::buffers(self.kernel.tensors.values(), self.kernel.init, tensors);
        };
        let assembled = assembly_arrays(a, self.kernel.output);
        let mut buffers = Vec::new();
        for (id, t) in &self.kernel.tensors {
            if assembled.contains(&id) {
                buffers.push(Buffer::zeros(BufferKind::for_elem(t.dtype), 0));
            } else {
                buffers.extend(exec::buffers(std::iter::once(t), self.kernel.init, tensors)?);
            }
        }
        Ok(buffers)
    }

    /// One run. A sparse output takes two launches: the first counts its
    /// entries, its arrays are sized from the counts, the second fills them.
    pub fn launch(&self, buffers: &mut [Buffer], threads: usize) -> Result<(), BackendError> {
        let Some(a) = &self.kernel.assembly else {
            return Ok(self.program.run(buffers, threads)?);
        };
        if let (Some(bound), 1) = (a.bound, threads)
            && self.one_pass(a, bound, buffers)?
        {
            return Ok(());
        }
        let at = |t: TensorId| t.as_u32() as usize;
        let levels = a.levels.len();
        buffers[at(a.phase)] = Buffer::I64(vec![0, 0, 0, 0]);
        buffers[at(a.counts)] = Buffer::I64(vec![0; levels * a.rows]);
        self.program.run(buffers, threads)?;
        let Buffer::I64(counts) = &mut buffers[at(a.counts)] else { unreachable!("counts are i64") };
        // Each row's first position per level, and the levels' sizes.
        let mut total = vec![0i64; levels];
        for (l, row_counts) in counts.chunks_mut(a.rows).enumerate() {
            for c in row_counts {
                let n = *c;
                *c = total[l];
                total[l] += n;
            }
        }
        // The fill writes every coordinate and value, so the arrays of the
        // last launch are resized, not cleared; positions start at zero.
        self.size_levels(a, buffers, |l| total[l] as usize, false);
        // The fill keeps what the count left: the peak bytes and what it
        // gathered.
        let Buffer::I64(phase) = &mut buffers[at(a.phase)] else { unreachable!("the phase is i64") };
        phase[0] = 1;
        self.program.run(buffers, threads)?;
        for pos in a.levels.iter().filter_map(|l| l.pos) {
            let Buffer::I64(pos) = &mut buffers[at(pos)] else { unreachable!("positions are i64") };
            ascend(pos);
        }
        Ok(())
    }

    /// Sizes every level's arrays and the values for `entries(l)` entries at
    /// each sparse level `l` (a dense level has every coordinate under each
    /// parent). Positions start as zeros, or with `cut` the launch's own are
    /// cut to their parents and made ascending.
    fn size_levels(&self, a: &Assembly, buffers: &mut [Buffer], entries: impl Fn(usize) -> usize, cut: bool) {
        let at = |t: TensorId| t.as_u32() as usize;
        let kind = |t: TensorId| BufferKind::for_elem(self.kernel.tensor(t).dtype);
        let mut parents = 1usize;
        for (l, level) in a.levels.iter().enumerate() {
            let size = if level.format.locate() { parents * level.extent } else { entries(l) };
            if let Some(pos) = level.pos {
                match &mut buffers[at(pos)] {
                    Buffer::I64(pos) if cut => {
                        pos.truncate(parents + 1);
                        ascend(pos);
                    }
                    buffer => *buffer = Buffer::I64(vec![0; parents + 1]),
                }
            }
            if let Some(crd) = level.crd {
                buffers[at(crd)].resize(kind(crd), size);
            }
            parents = size;
        }
        buffers[at(self.kernel.output)].resize(kind(self.kernel.output), parents);
    }

    /// One pass on one thread into arrays of the output's bound, cut to
    /// the entries each level got. False (and nothing assembled) when the
    /// bound did not hold, which the kernel's checked appends report.
    fn one_pass(&self, a: &Assembly, bound: usize, buffers: &mut [Buffer]) -> Result<bool, BackendError> {
        let at = |t: TensorId| t.as_u32() as usize;
        self.size_levels(a, buffers, |_| bound, false);
        buffers[at(a.phase)] = Buffer::I64(vec![2, bound as i64, 0, 0]);
        buffers[at(a.counts)] = Buffer::I64(vec![0; a.levels.len() * a.rows]);
        self.program.run(buffers, 1)?;
        let Buffer::I64(counts) = &buffers[at(a.counts)] else { unreachable!("counts are i64") };
        let counts = counts.clone();
        if counts.iter().any(|&n| n as usize > bound) {
            return Ok(false);
        }
        // Cut every array to its level's entries.
        self.size_levels(a, buffers, |l| counts[l] as usize, true);
        Ok(true)
    }

    /// The most bytes a thread's ISM workspace held in the last launch;
    /// `None` without one.
    pub fn workspace_peak(&self, buffers: &[Buffer]) -> Option<usize> {
        let a = self.kernel.assembly.as_ref().filter(|a| matches!(a.workspace, WorkspaceKind::Ism(_)))?;
        let Buffer::I64(stats) = &buffers[a.phase.as_u32() as usize] else { return None };
        stats.get(2).map(|&b| b as usize)
    }

    /// The sparse output as the last launch assembled it; `None` for a
    /// dense output.
    pub fn assembled(&self, buffers: &[Buffer]) -> Option<Assembled> {
        let a = self.kernel.assembly.as_ref()?;
        let ints = |t: Option<TensorId>| t.map(|t| buffers[t.as_u32() as usize].to_i64().unwrap_or_default());
        let ElemType::Value(dtype) = self.kernel.tensor(self.kernel.output).dtype else {
            unreachable!("outputs hold values")
        };
        Some(Assembled {
            shape: a.shape.clone(),
            levels: a.levels.iter().map(|l| Level::new(l.dim, l.format)).collect(),
            arrays: a.levels.iter().map(|l| AssembledLevel { pos: ints(l.pos), crd: ints(l.crd) }).collect(),
            val: buffers[self.kernel.output.as_u32() as usize].to_f64_as(dtype),
        })
    }

    /// The output, dense (a sparse output read back and expanded, after
    /// its structure is checked).
    pub fn output(&self, buffers: &[Buffer], had_data: bool) -> Result<ArrayD<f64>, BackendError> {
        match self.assembled(buffers) {
            Some(assembled) => dense(&assembled),
            None => exec::output(self.kernel.tensors.values(), self.kernel.init, buffers, had_data),
        }
    }

    /// Runs once on `tensors` and returns the output.
    pub fn run(&self, tensors: &Tensors, threads: usize) -> Result<ArrayD<f64>, BackendError> {
        let mut buffers = self.buffers(tensors)?;
        self.launch(&mut buffers, threads)?;
        let out = &self.kernel.tensor(self.kernel.output).name;
        self.output(&buffers, tensors.contains_key(out))
    }

    /// Runs once on `tensors` and returns the sparse output as assembled.
    pub fn run_assembled(&self, tensors: &Tensors, threads: usize) -> Result<Assembled, BackendError> {
        let mut buffers = self.buffers(tensors)?;
        self.launch(&mut buffers, threads)?;
        self.assembled(&buffers).ok_or_else(|| BackendError::Data("the output is dense".to_string()))
    }
}

/// Parents a dense level never visited keep the range of the one before
/// them: positions made ascending.
fn ascend(pos: &mut [i64]) {
    for p in 1..pos.len() {
        pos[p] = pos[p].max(pos[p - 1]);
    }
}

/// The arguments a sparse output's assembly sizes at run time.
fn assembly_arrays(a: &Assembly, val: TensorId) -> Vec<TensorId> {
    let mut ids = vec![val, a.counts, a.phase];
    ids.extend(a.levels.iter().flat_map(|l| [l.pos, l.crd]).flatten());
    ids
}

/// A sparse output's entries as a dense array, its structure checked.
pub fn dense(assembled: &Assembled) -> Result<ArrayD<f64>, BackendError> {
    let data = |e: spindle_ir::formats::FormatError| BackendError::Data(e.to_string());
    assembled.to_coo().map_err(data)?.to_ndarray().map_err(data)
}

/// Whether every non-empty set of the levels `on` is some point's levels:
/// a merge step over them then always takes a point's branch (without
/// `full`, at least one level has the step's coordinate).
fn covers_every_set(points: &[spindle_ir::level::Point], on: &[bool]) -> bool {
    let live: Vec<usize> = (0..on.len()).filter(|&l| on[l]).collect();
    if live.len() > 8 {
        return false;
    }
    (1u32..1 << live.len()).all(|set| {
        points.iter().any(|pt| {
            (0..pt.present.len()).all(|l| match live.iter().position(|&x| x == l) {
                Some(bit) => pt.present[l] == (set >> bit & 1 == 1),
                None => !pt.present[l],
            })
        })
    })
}
