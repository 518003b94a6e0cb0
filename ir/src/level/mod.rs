//! The level path (DESIGN.md §2, §5): kernels that iterate over the levels
//! of sparse formats, TACO- and MLIR-style, instead of rewriting them into
//! arrays for dense tiles.
//!
//! A [`LevelKernel`] is a loop tree. Each loop binds one index variable:
//!
//! - a **dense loop** visits every coordinate `0..extent`;
//! - a **merge** walks the stored positions of one or more levels that hold
//!   the variable. With one level it is a position loop (`for p in
//!   pos[parent]..pos[parent+1]: i = crd[p]`); with several it co-iterates
//!   them, and each *lattice point* (the set of levels whose current
//!   coordinate is the smallest) is a branch with its own subtree, as in
//!   TACO and the sparse-workspace paper's Algorithm 1: an intersection
//!   (`A * B`) has one point, a union (`A + B`) three. A merge whose
//!   expression is non-zero where no level has an entry (a union with a
//!   dense term) sweeps every coordinate instead.
//!
//! Inside a loop, levels of the tensors that hold the variable are reached:
//! dense levels are *located* (`p = parent * n + i`), compressed levels are
//! the merge's own positions. The leaves are *effects*: an update of the
//! dense output at the loop variables' coordinates, or, for a sparse output,
//! an accumulation into the output entry being assembled.
//!
//! A **sparse output** ([`Assembly`]) is appended to in loop order, in two
//! phases of the same tree: the first counts the entries of every output
//! level (per row when rows run on threads), the caller sizes the arrays,
//! the second fills them. The loop of the variable an output level holds
//! is an [`Node::Entry`]: its entry is appended after its body when the
//! body appended children (the leaf: when an accumulation reached it). When
//! a summed variable sits between the output's last two levels (row-wise
//! SpGEMM, `C[i,j] += A[i,k] * B[k,j]` in the order i, k, j), the last level
//! is gathered in a dense [`Node::Workspace`] and drained in coordinate
//! order.
//!
//! The level capabilities of the formats (`spindle_formats::LevelCapabilities`)
//! decide everything here: no format name appears in this module.

mod lower;
mod print;
mod program;
mod strip;

pub use lower::{
    Lowered, OperandLevel, alias_rereads, dense_params, lower, named_order, plain_indices, refuse,
    store_levels,
};
pub use program::{lower_program, written_after_read};
pub use strip::{STRIP_MIN_BYTES, StripRows, strip_rows};

use cranelift_entity::PrimaryMap;

use crate::kernel::schedule::{IsmOptions, Policy};
use crate::kernel::{OutputInit, Reduction, TensorId, TensorParam};
use crate::lang::{BinOp, Func};
use spindle_formats::LevelFormat;

/// An index variable of the statement: one loop of the tree.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VarId(u32);
cranelift_entity::entity_impl!(VarId, "var");

#[derive(Clone, Debug, PartialEq)]
pub struct Var {
    pub name: String,
    pub extent: usize,
}

/// A temporary of a program kernel ([`lower_program`]): allocated, zeroed
/// and freed by the kernel itself, never an argument.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocalId(u32);
cranelift_entity::entity_impl!(LocalId, "local");

#[derive(Clone, Debug, PartialEq)]
pub struct Local {
    pub name: String,
    /// The dimensions it keeps (after dimension reduction; empty: a scalar
    /// in a register), row-major; or one dimension, the positions of a
    /// stored level, for a temporary held in a sparse operand's pattern.
    pub shape: Vec<usize>,
    /// Each thread needs its own (a slice cleared per iteration) when the
    /// outermost loop runs on threads; otherwise the iterations write
    /// disjoint parts of it (a sparse operand's pattern under each row).
    pub private: bool,
}

impl Local {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a [`Node::Store`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Local(LocalId),
    /// The kernel's output: its values at the positions of a stored level
    /// ([`Lowered::pattern`]).
    Output,
}

/// Where a temporary's element is: at the loop variables' coordinates of
/// the dimensions it keeps, or at a stored level's position (a temporary
/// computed only where a sparse operand has entries, held in its pattern),
/// then at the coordinates of its other dimensions (row-major within each
/// position).
#[derive(Clone, Debug, PartialEq)]
pub enum Place {
    Coords(Vec<VarId>),
    Position(Position, Vec<VarId>),
}

/// A level of a stored tensor, as the kernel reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelRef {
    /// The stored tensor's name (`A`), which position variables are named
    /// after.
    pub tensor: String,
    /// The level's index in storage order.
    pub level: usize,
    /// The extent of the dimension the level stores.
    pub extent: usize,
    pub kind: Reach,
    /// Each coordinate at most once under a parent position (CSR's
    /// columns; not COO's rows): the positions of one parent's walk are
    /// distinct coordinates.
    pub unique: bool,
}

/// How the positions of a level are reached from its parent's position.
#[derive(Clone, Debug, PartialEq)]
pub enum Reach {
    /// Every coordinate is stored: `p = parent * extent + i` (locate).
    Dense,
    /// Children `pos[parent] .. pos[parent + 1]` with coordinates `crd[p]`;
    /// without `pos` (a root level), `0 .. len(crd)`.
    Compressed { pos: Option<TensorId>, crd: TensorId, len: usize },
    /// Exactly one child per parent at `p = parent`, coordinate `crd[p]`.
    Singleton { crd: TensorId },
    /// Exactly `g` children per parent, `parent * g .. parent * g + g`;
    /// a slot that repeats the coordinate before it is padding. `empty`,
    /// ELL's value array: ELL pads an empty row whole, its first slot
    /// (coordinate 0, value 0) too, so a row whose slots share one
    /// coordinate and whose first value is 0 is empty (ELL cannot tell an
    /// explicit zero from padding).
    Padded { g: usize, crd: TensorId, empty: Option<TensorId> },
}

/// The position of a stored tensor at one of its levels, or the root
/// position 0 above its first level.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Position {
    Root,
    Level { tensor: String, level: usize },
}

/// A scalar expression at a point of the loop tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Const(f64),
    /// `val[p]` of a stored tensor at its last level's position.
    Stored {
        val: TensorId,
        at: Position,
    },
    /// A dense tensor at the loop variables' coordinates (row-major).
    Dense {
        tensor: TensorId,
        at: Vec<VarId>,
    },
    /// A temporary of a program kernel.
    Local {
        local: LocalId,
        at: Place,
    },
    Neg(Box<Expr>),
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Call {
        func: Func,
        args: Vec<Expr>,
    },
}

/// A node of the loop tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// `for var in 0..extent`.
    Dense { var: VarId, body: Vec<Node> },
    /// Walks the positions of `levels` (all holding `var`), binding `var`
    /// to the smallest current coordinate; `full` sweeps every coordinate.
    Merge { var: VarId, levels: Vec<LevelRef>, full: bool, points: Vec<Point> },
    /// `p = parent * extent + var` for a dense level of a stored tensor.
    Locate { level: LevelRef, var: VarId },
    /// `out[at] op= value`.
    Update { at: Vec<VarId>, value: Expr },
    /// The entry of sparse output level `level` at the coordinate of its
    /// variable (bound by the enclosing loop): appended after `body` if
    /// the body appended below it (at the last level: if it accumulated).
    Entry { level: usize, body: Vec<Node> },
    /// A workspace over the output's gathered levels (from
    /// [`Assembly::gathered`]), filled by the accumulations in `body`, then
    /// drained into those levels in coordinate order.
    Workspace { body: Vec<Node> },
    /// Adds `value` to the output entry being assembled (or to the
    /// workspace at the gathered levels' coordinates).
    Accumulate { value: Expr },
    /// `target[at] += value`: a program kernel's statement into a
    /// temporary, or into an output held in a sparse operand's pattern.
    Store { target: Target, at: Place, value: Expr },
    /// Zeroes a temporary: where it is reduced to a slice, at the start of
    /// each iteration of the innermost loop it shares with its readers.
    Clear { local: LocalId },
    /// A non-empty subsection loop (paper 002 §3.1, §5.2): `var` reduces
    /// the affine subscript of level `level` of [`LevelKernel::affine`]
    /// operand `operand` (other variables of that subscript are bound
    /// later). It visits, in increasing order, exactly the values of `var`
    /// whose window of the level (the subscript's range over the unbound
    /// variables) holds a stored coordinate under the positions the levels
    /// above it can still reach; over a dense level, every value whose
    /// window meets the dimension.
    Subsect { var: VarId, operand: usize, level: usize, body: Vec<Node> },
    /// `var` resolves (binds the last variable of) the affine subscript of
    /// level `level` of affine operand `operand`, every level above it
    /// resolved: a dense level locates the coordinate, a compressed one
    /// walks its entries under the parent position from the window's start
    /// and breaks past its end, binding `var` where the coordinate is hit.
    Resolve { var: VarId, operand: usize, level: usize, body: Vec<Node> },
    /// A [`Node::Subsect`] of `outer` whose only child is the
    /// [`Node::Resolve`] of `inner` at the same compressed level, fused: the
    /// level's entries in the window of both are walked once, and each entry
    /// runs `body` at every (`outer`, `inner`) its coordinate solves (the
    /// taps of a filter at one input entry) — the pair's visits without a
    /// search or a window walk per value of `outer`. An output element meets
    /// the entries in coordinate order, so it is summed in the pair's order.
    Taps { outer: VarId, inner: VarId, operand: usize, level: usize, body: Vec<Node> },
    /// Finds the entries of level `level` of affine operand `operand` at
    /// the coordinate its subscript gives (every variable of it bound; the
    /// level above resolved) — a search in a compressed level (a run where
    /// coordinates repeat), a locate in a dense one — and runs `body` at
    /// each, or nothing where there is none:
    /// a second stored operand of a product, intersected with the one the
    /// loop walks (in a program kernel, an operand at its plain
    /// subscripts).
    Find { operand: usize, level: usize, body: Vec<Node> },
    /// A `max=` / `min=` over stored operands (pooling's windows, a row's
    /// maximum): the updates of the output at `at` in `body` visit only
    /// stored entries,
    /// so where they were fewer than the window's `points`, a skipped point
    /// was a zero, and zero is folded into the output too. The variables of
    /// `at` bound around the fill fix one element, counted in a register;
    /// those bound inside it (`c` of `O[i,c]` in the order `i, p, c`) range
    /// over their extents, each element of them counted apart and checked
    /// after `body`.
    Fill { at: Vec<VarId>, points: usize, body: Vec<Node> },
    /// The strips of a row loop: `start` steps through its extent by
    /// `row`'s extent, and each strip's rows are walked by the
    /// [`Node::Rows`] in `body` ([`strip_rows`]: a fused consumer then reads
    /// its loop-invariant operands once per strip, not once per row).
    Strip { start: VarId, row: VarId, body: Vec<Node> },
    /// The rows of the enclosing strip of `start`: `row` in `0..` its
    /// extent. With `var`, only the rows below `var`'s extent, binding
    /// `var = start + row`; without, every row of the strip, past the
    /// extent too, with no row variable bound (the body reads only
    /// temporaries indexed by `row`, zero past the extent): a constant trip
    /// count, so the C compiler keeps a strip's accumulators in registers.
    Rows { start: VarId, row: VarId, var: Option<VarId>, body: Vec<Node> },
}

/// The variables of a [`Node::Taps`] in the order an entry binds them: the
/// one with fewer values (`outer` on a tie) tried at each of its values,
/// then the other solved from the coordinate.
pub fn taps_order(vars: &PrimaryMap<VarId, Var>, outer: VarId, inner: VarId) -> (VarId, VarId) {
    match vars[inner].extent < vars[outer].extent {
        true => (inner, outer),
        false => (outer, inner),
    }
}

impl Node {
    /// The node lists directly below this node: a loop's or a scope's body,
    /// each lattice point's body of a merge; none for a leaf.
    pub fn bodies(&self) -> impl Iterator<Item = &[Node]> {
        let (body, points): (Option<&[Node]>, &[Point]) = match self {
            Node::Dense { body, .. }
            | Node::Entry { body, .. }
            | Node::Workspace { body }
            | Node::Subsect { body, .. }
            | Node::Resolve { body, .. }
            | Node::Taps { body, .. }
            | Node::Find { body, .. }
            | Node::Fill { body, .. }
            | Node::Strip { body, .. }
            | Node::Rows { body, .. } => (Some(body), &[]),
            Node::Merge { points, .. } => (None, points),
            Node::Locate { .. }
            | Node::Update { .. }
            | Node::Accumulate { .. }
            | Node::Store { .. }
            | Node::Clear { .. } => (None, &[]),
        };
        body.into_iter().chain(points.iter().map(|p| p.body.as_slice()))
    }

    /// Whether `f` holds for a node of `nodes` or of a list below them.
    pub fn any(nodes: &[Node], f: &dyn Fn(&Node) -> bool) -> bool {
        nodes.iter().any(|n| f(n) || n.bodies().any(|b| Node::any(b, f)))
    }

    /// The value a leaf computes: an update's, an accumulation's or a
    /// store's.
    pub fn value(&self) -> Option<&Expr> {
        match self {
            Node::Update { value, .. } | Node::Accumulate { value } | Node::Store { value, .. } => {
                Some(value)
            }
            _ => None,
        }
    }
}

impl Expr {
    /// Calls `f` on this expression and on every one inside it, outermost
    /// first.
    pub fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Neg(x) => x.visit(f),
            Expr::Binary { lhs, rhs, .. } => {
                lhs.visit(f);
                rhs.visit(f);
            }
            Expr::Call { args, .. } => args.iter().for_each(|a| a.visit(f)),
            Expr::Const(_) | Expr::Stored { .. } | Expr::Dense { .. } | Expr::Local { .. } => {}
        }
    }

    /// Replaces every expression for which `f` gives a replacement,
    /// outermost first (a replacement is not searched further).
    pub fn rewrite(&mut self, f: &mut dyn FnMut(&Expr) -> Option<Expr>) {
        if let Some(new) = f(self) {
            *self = new;
            return;
        }
        match self {
            Expr::Neg(x) => x.rewrite(f),
            Expr::Binary { lhs, rhs, .. } => {
                lhs.rewrite(f);
                rhs.rewrite(f);
            }
            Expr::Call { args, .. } => args.iter_mut().for_each(|a| a.rewrite(f)),
            Expr::Const(_) | Expr::Stored { .. } | Expr::Dense { .. } | Expr::Local { .. } => {}
        }
    }

    /// Whether `f` holds for this expression or one inside it.
    pub fn any(&self, f: &dyn Fn(&Expr) -> bool) -> bool {
        let mut found = false;
        self.visit(&mut |e| found |= f(e));
        found
    }
}

/// An affine coordinate `Σ coeff·var + offset` (coefficients positive):
/// the subscript of a stored operand's dimension in a convolution.
#[derive(Clone, Debug, PartialEq)]
pub struct Affine {
    pub terms: Vec<(VarId, i64)>,
    pub offset: i64,
}

impl Affine {
    /// The coefficient of `var` (0 where it does not appear).
    pub fn coeff(&self, var: VarId) -> i64 {
        self.terms.iter().find(|(v, _)| *v == var).map_or(0, |(_, c)| *c)
    }
}

/// A stored operand read at affine subscripts, for subsection loops: its
/// levels (storage order) and the subscript of the dimension each stores.
#[derive(Clone, Debug, PartialEq)]
pub struct AffineOperand {
    pub tensor: String,
    pub levels: Vec<LevelRef>,
    pub subscripts: Vec<Affine>,
}

impl AffineOperand {
    /// The window of level `level` with the variables in `bound` bound to
    /// their values and the others free over `0..extent`: the lowest and
    /// the highest coordinate the subscript can take.
    pub fn window(
        &self,
        level: usize,
        vars: &PrimaryMap<VarId, Var>,
        bound: impl Fn(VarId) -> Option<i64>,
    ) -> (i64, i64) {
        let s = &self.subscripts[level];
        let (mut lo, mut span) = (s.offset, 0);
        for &(v, c) in &s.terms {
            match bound(v) {
                Some(x) => lo += c * x,
                None => span += c * (vars[v].extent as i64 - 1),
            }
        }
        (lo, lo + span)
    }
}

/// A level of a sparse output.
#[derive(Clone, Debug, PartialEq)]
pub struct OutLevel {
    /// The variable whose coordinate the level stores.
    pub var: VarId,
    /// The output dimension it stores.
    pub dim: usize,
    pub extent: usize,
    /// Dense (a prefix of the levels only), compressed or singleton.
    pub format: LevelFormat,
    /// `pos`: children ranges, one per parent position plus one.
    pub pos: Option<TensorId>,
    /// `crd`: the coordinates appended.
    pub crd: Option<TensorId>,
}

/// The workspace a sparse output's gathered levels are collected in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkspaceKind {
    /// The last level only: a value and a mark per coordinate, drained in
    /// order from the marks (the dense-workspace case, printed inline).
    Dense,
    /// An insert-sort-merge workspace of this policy (the workspaces
    /// crate's runtime), over any number of levels.
    Ism(Policy),
}

/// Levels wider than this get a sparse workspace under `workspace=auto`.
pub const DENSE_WORKSPACE_LIMIT: usize = 1 << 24;

/// How a sparse output is assembled: its levels' arrays, and the counts the
/// first phase leaves for the caller to size them by.
#[derive(Clone, Debug, PartialEq)]
pub struct Assembly {
    /// The output's name.
    pub tensor: String,
    pub shape: Vec<usize>,
    pub levels: Vec<OutLevel>,
    /// Rows counted apart: the first level's extent when the outermost loop
    /// runs on threads (each row then fills from its own offsets), else 1.
    pub rows: usize,
    /// The first level a workspace gathers (the ones above are appended
    /// by their own loops, hoisted out of it); the number of levels when
    /// the loops assemble the output directly.
    pub gathered: usize,
    /// How the workspace gathers them (where the tree has one).
    pub workspace: WorkspaceKind,
    /// The ISM's options, for [`WorkspaceKind::Ism`].
    pub options: IsmOptions,
    /// Why this workspace (or none): the insertion analysis's decision and
    /// what `workspace=auto` picked, for the kernel's notes.
    pub note: String,
    /// At most this many entries at any level, where that is known in
    /// advance (every entry a step of a walk over stored positions: unions,
    /// intersections, sampled products): then one thread assembles in one
    /// pass into arrays of this size. `None`: count first (SpGEMM).
    pub bound: Option<usize>,
    /// i64 `[levels * rows]`: after the count phase the entries of each
    /// level per row; before the fill phase, each row's first position;
    /// after a one-pass fill, each level's entries.
    pub counts: TensorId,
    /// i64 `[4]`: the phase (0 counts, 1 fills, 2 fills in one pass on one
    /// thread), the arrays' capacity in a one-pass fill, the most bytes a
    /// thread's ISM workspace held, and, between the count and the fill,
    /// the C kernel's handle on the gatherings the count kept.
    pub phase: TensorId,
}

impl Assembly {
    /// The first level appended together with the last one: a run of
    /// singleton levels takes its parent along (COO's rows).
    pub fn leaf_head(&self) -> usize {
        let mut head = self.levels.len() - 1;
        while head > 0 && self.levels[head].format == LevelFormat::Singleton {
            head -= 1;
        }
        head
    }
}

/// One branch of a merge: taken when exactly the levels `present` (by
/// index into the merge's levels) have an entry at the coordinate.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub present: Vec<bool>,
    pub body: Vec<Node>,
}

/// A kernel of the level path.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelKernel {
    pub name: String,
    /// The arguments, in order: format arrays, dense tensors, the output.
    pub tensors: PrimaryMap<TensorId, TensorParam>,
    pub vars: PrimaryMap<VarId, Var>,
    /// The dense output, or a sparse output's values.
    pub output: TensorId,
    /// How a sparse output is assembled; `None` for a dense output.
    pub assembly: Option<Assembly>,
    pub reduction: Reduction,
    pub init: OutputInit,
    /// The outermost loop runs on CPU threads: its iterations write
    /// disjoint output elements.
    pub parallel: bool,
    /// The outermost loop walks a root level whose coordinates repeat
    /// (COO's rows) and its iterations write apart by row: on CPU threads,
    /// each takes whole runs of a row's positions (Sgap's segment
    /// ownership). Not `parallel`: a warp per position still shares rows.
    pub row_runs: bool,
    /// `reduce=parallel`: on a GPU, a warp splits its row's positions over
    /// its lanes, which add their sums by shuffles for one lane to write
    /// (paper 004's RB+PR, ⟨1/32 row, 1 col⟩), instead of splitting the
    /// output's columns (RB+SR, the default).
    pub lanes_over_positions: bool,
    /// The lanes that split a row (`reduce=parallel(R)`: groups of R lanes,
    /// 32 / R rows to a warp; paper 004's group size): 32 unless told.
    pub lanes: u32,
    /// A program kernel's temporaries.
    pub locals: PrimaryMap<LocalId, Local>,
    /// The stored operands read at affine subscripts, which
    /// [`Node::Subsect`], [`Node::Resolve`] and [`Node::Taps`] walk.
    pub affine: Vec<AffineOperand>,
    pub body: Vec<Node>,
}

impl LevelKernel {
    /// Whether the outermost walk has nothing to do (a product that folds
    /// to 0): no loop is printed, so none is shared out.
    pub fn idle(&self) -> bool {
        self.body.iter().all(|n| matches!(n, Node::Merge { points, .. } if points.is_empty()))
    }

    pub fn var(&self, v: VarId) -> &Var {
        &self.vars[v]
    }

    pub fn tensor(&self, t: TensorId) -> &TensorParam {
        &self.tensors[t]
    }

    pub fn local(&self, l: LocalId) -> &Local {
        &self.locals[l]
    }
}
