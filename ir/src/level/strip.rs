//! Strip-mined rows (`strip=auto|N`): a fused program kernel whose row
//! loop ends in a dense consumer of the row's temporary runs its rows in
//! strips, the consumer once per strip.
//!
//! GNN kernel 1 under trie fusion computes a row of `T1 = A·X` and at once
//! multiplies it by all of `W`: `for i { T1[h] = Σk A[i,k]·X[k,h]; Z[i,j] +=
//! T1[h]·W[h,j] }`. Between two reads of `W` a row gathers `X`'s rows, which
//! evict part of `W` from the L1 cache when `W` is about its size; unfused,
//! the product reads `W` row after row with nothing between (on Zen 4,
//! f64, NH 128 x NJ 32, a 32 KB `W` against a 32 KB L1: karate's fused
//! kernel 1.22x the unfused). In strips, the producer fills the strip's
//! rows of `T1`, then the consumer walks `W` once for all of them with the
//! strip's output rows in a block of accumulators: the rows past the extent
//! in the last strip are zeros, so the block's trip counts are constants and
//! the C compiler keeps it in registers. The producer still sums into its
//! own row, copied into the strip when done: indexed by the strip's row, gcc
//! kept the row in memory instead of registers across the row's entries.
//! Unfused (`fusion=none`), the product `Z[i,j] += T1[i,h]·W[h,j]` is the
//! kernel's last loop nest, with no producer in its row: it runs in strips
//! alike, each strip's rows of `T1` copied into `T1_strip` first.
//!
//! ```text
//! for i_strip in 0..34 by strips of 4
//!   clear T1_strip                                T1_strip[4x128]
//!   for i_row in 0..4: i = i_strip + i_row below 34
//!     clear T1                                    T1[128]
//!     <the producer: T1[h] += ...>
//!     for h in 0..128
//!       T1_strip[i_row,h] += T1[h]
//!   clear Z_rows                                  Z_rows[4x32]
//!   for h in 0..128
//!     for i_row in 0..4 (the whole strip)
//!       for j in 0..32
//!         Z_rows[i_row,j] += (T1_strip[i_row,h] * W[h,j])
//!   for i_row in 0..4: i = i_strip + i_row below 34
//!     for j in 0..32
//!       Z[i,j] += Z_rows[i_row,j]
//! ```

use std::collections::{BTreeMap, BTreeSet};

use super::{Expr, LevelKernel, Local, LocalId, Node, Place, Target, Var, VarId};
use crate::kernel::Reduction;
pub use crate::kernel::schedule::StripRows;

/// Under `strip=auto`, the fewest bytes of loop-invariant operands a
/// consumer reads per row for its rows to run in strips: a 32 KB L1 data
/// cache, which a row's gathers then push them out of. At half of it
/// (GNN kernel 1, NH 128 x NJ 16, f64) they stayed cached between rows
/// and strips were 10% slower on cora (copying each row into the strip);
/// at 32 KB they were even to 1.2x faster, at 64 KB 1.4-1.5x.
pub const STRIP_MIN_BYTES: usize = 32 * 1024;

/// Under `strip=auto`, the same for a consumer alone in its row loop (the
/// unfused product): nothing evicts its operands between rows, so one the
/// L1's size stays cached. GNN kernel 1 unfused on citeseer (f64, one
/// thread): a 32 KB W in strips ran 1.06-1.2x slower (the copy of T1's
/// rows costs), a 64 KB one 1.3-1.45x faster.
pub const ALONE_STRIP_MIN_BYTES: usize = 64 * 1024;

/// Under `strip=auto`, a strip's block of accumulators holds this many
/// bytes at most (counted in f64): 16 of AVX-512's 32 registers.
const BLOCK_BYTES: usize = 1024;

/// Under `strip=auto`, the most rows a strip takes.
const AUTO_MAX_ROWS: usize = 4;

/// Runs the kernel's rows in strips where `rows` asks for it and the
/// kernel has the shape above: its last loop nest a dense row loop whose
/// body ends in a dense loop nest that only sums into the output row,
/// reading the row's temporaries (cleared at the start of each row) or
/// temporaries the nests before filled (read at the row), and dense
/// operands that do not depend on the row. Returns what was decided, for the run's
/// notes, where there was something to decide.
pub fn strip_rows(k: &mut LevelKernel, rows: StripRows) -> Option<String> {
    if rows == StripRows::Rows(1) {
        return None;
    }
    let Some(shape) = consumer_shape(k) else {
        return match rows {
            StripRows::Rows(n) => Some(format!(
                "strip={n}: no row loop ends in a dense consumer of the row's temporaries here, so rows run one by one"
            )),
            StripRows::Auto => None,
        };
    };
    let size = match rows {
        StripRows::Rows(n) => n,
        StripRows::Auto if shape.invariant_bytes < shape.min_bytes() => return None,
        StripRows::Auto => (BLOCK_BYTES / (8 * k.vars[shape.column].extent).max(1)).clamp(1, AUTO_MAX_ROWS),
    };
    if size < 2 {
        return None;
    }
    let row_name = k.vars[shape.row].name.clone();
    let extent = k.vars[shape.row].extent;
    let start = k.vars.push(Var { name: format!("{row_name}_strip"), extent });
    let row = k.vars.push(Var { name: format!("{row_name}_row"), extent: size });
    rewrite(k, &shape, start, row);
    let bytes = match shape.invariant_bytes {
        b if b >= 1024 => format!("{} KB", b / 1024),
        b => format!("{b} bytes"),
    };
    Some(format!(
        "rows of {row_name} in strips of {size}: the consumer reads its {bytes} of loop-invariant operands once per strip"
    ))
}

/// What [`strip_rows`] found in a kernel it can strip.
struct ConsumerShape {
    /// The outermost loop's variable.
    row: VarId,
    /// The output's column variable, the consumer's innermost loop.
    column: VarId,
    /// The temporaries the consumer reads, with the variables it reads
    /// them at (one per dimension, each over the dimension's extent): a
    /// slice of the row (cleared in the row), or a whole temporary an
    /// earlier loop nest filled, read at the row first (`T1[i,h]`, GNN
    /// kernel 1 unfused).
    temporaries: BTreeMap<LocalId, Vec<VarId>>,
    /// Bytes of the dense operands the consumer reads, none indexed by the
    /// row.
    invariant_bytes: usize,
    /// The consumer is alone in its row loop (no producer before it).
    alone: bool,
}

impl ConsumerShape {
    /// The fewest invariant bytes for which `strip=auto` strips.
    fn min_bytes(&self) -> usize {
        if self.alone { ALONE_STRIP_MIN_BYTES } else { STRIP_MIN_BYTES }
    }
}

fn consumer_shape(k: &LevelKernel) -> Option<ConsumerShape> {
    let (Node::Dense { var: row, body }, before) = k.body.split_last()? else { return None };
    let (Node::Dense { var: outer, body: inner }, producer) = body.split_last()? else { return None };
    let [Node::Dense { var: column, body: leaf }] = &inner[..] else { return None };
    let [Node::Update { at, value }] = &leaf[..] else { return None };
    if at[..] != [*row, *column] || outer == row || k.reduction != Reduction::Sum {
        return None;
    }
    // Only the consumer writes the output, so the strip's rows are the
    // producer's and the output's in the same order.
    let writes_output = |n: &Node| {
        matches!(
            n,
            Node::Update { .. } | Node::Accumulate { .. } | Node::Store { target: Target::Output, .. }
        )
    };
    if Node::any(producer, &writes_output) || Node::any(before, &writes_output) {
        return None;
    }
    let cleared: BTreeSet<LocalId> = producer
        .iter()
        .filter_map(|n| if let Node::Clear { local } = n { Some(*local) } else { None })
        .collect();
    let written_in_row = |l: LocalId| {
        Node::any(producer, &|n| matches!(n, Node::Store { target: Target::Local(t), .. } if *t == l))
    };
    let mut temporaries: BTreeMap<LocalId, Vec<VarId>> = BTreeMap::new();
    let mut dense = BTreeSet::new();
    let mut fits = true;
    value.visit(&mut |e| match e {
        Expr::Const(_) | Expr::Neg(_) | Expr::Binary { .. } | Expr::Call { .. } => {}
        Expr::Local { local, at: Place::Coords(vars) } if !vars.is_empty() => {
            let shape = &k.local(*local).shape;
            let distinct = vars.iter().collect::<BTreeSet<_>>().len() == vars.len();
            let whole =
                vars.len() == shape.len() && vars.iter().zip(shape).all(|(v, &n)| k.vars[*v].extent == n);
            let same = temporaries.get(local).is_none_or(|seen| seen == vars);
            let row_slice = cleared.contains(local) && !vars.contains(row);
            let filled_before = vars.len() > 1 && vars[0] == *row && !written_in_row(*local);
            fits &= (row_slice || filled_before) && distinct && whole && same;
            temporaries.insert(*local, vars.clone());
        }
        Expr::Dense { tensor, at } if !at.contains(row) => {
            dense.insert(*tensor);
        }
        _ => fits = false,
    });
    if !fits || temporaries.is_empty() {
        return None;
    }
    let invariant_bytes = dense
        .iter()
        .map(|&t| {
            let t = k.tensor(t);
            t.shape.iter().product::<usize>() * t.dtype.size_bytes()
        })
        .sum();
    Some(ConsumerShape {
        row: *row,
        column: *column,
        temporaries,
        invariant_bytes,
        alone: producer.is_empty(),
    })
}

/// The rewrite in the module's comment.
fn rewrite(k: &mut LevelKernel, shape: &ConsumerShape, start: VarId, row: VarId) {
    let size = k.vars[row].extent;
    // Each temporary the consumer reads gets the strip's rows, copied from
    // it at the end of each row: the producer keeps summing into its own
    // row, which gcc keeps in registers (indexed by the strip's row, it
    // kept it in memory).
    // A temporary read at the row keeps the rest of its coordinates.
    let in_strip =
        |vars: &[VarId]| -> Vec<VarId> { vars.iter().copied().filter(|&v| v != shape.row).collect() };
    let mut strips = BTreeMap::new();
    for (&t, vars) in &shape.temporaries {
        let local = k.local(t);
        let mut dims = vec![size];
        dims.extend(in_strip(vars).iter().map(|&v| k.vars[v].extent));
        let strip = Local { name: format!("{}_strip", local.name), shape: dims, private: true };
        strips.insert(t, k.locals.push(strip));
    }
    let output = k.tensor(k.output).name.clone();
    let columns = k.vars[shape.column].extent;
    let block =
        k.locals.push(Local { name: format!("{output}_rows"), shape: vec![size, columns], private: true });
    let Some(Node::Dense { body: mut producer, .. }) = k.body.pop() else {
        unreachable!("checked by consumer_shape")
    };
    let Some(Node::Dense { var: outer, body: inner }) = producer.pop() else { unreachable!("checked") };
    let [Node::Dense { body: leaf, .. }] = &inner[..] else { unreachable!("checked") };
    let [Node::Update { value, .. }] = &leaf[..] else { unreachable!("checked") };

    let at_row = |vars: &[VarId]| Place::Coords(std::iter::once(row).chain(vars.iter().copied()).collect());
    for (t, vars) in &shape.temporaries {
        let copy = Node::Store {
            target: Target::Local(strips[t]),
            at: at_row(&in_strip(vars)),
            value: Expr::Local { local: *t, at: Place::Coords(vars.clone()) },
        };
        let copy =
            in_strip(vars).iter().rev().fold(copy, |body, &v| Node::Dense { var: v, body: vec![body] });
        producer.push(copy);
    }
    let mut value = value.clone();
    value.rewrite(&mut |e| match e {
        Expr::Local { local, at: Place::Coords(vars) } if strips.contains_key(local) => {
            Some(Expr::Local { local: strips[local], at: at_row(&in_strip(vars)) })
        }
        _ => None,
    });

    let rows = |var: Option<VarId>, body: Vec<Node>| Node::Rows { start, row, var, body };
    let column = |node: Node| Node::Dense { var: shape.column, body: vec![node] };
    let mut strip: Vec<Node> = strips.values().map(|&local| Node::Clear { local }).collect();
    strip.push(rows(Some(shape.row), producer));
    strip.push(Node::Clear { local: block });
    let sum = Node::Store { target: Target::Local(block), at: at_row(&[shape.column]), value };
    strip.push(Node::Dense { var: outer, body: vec![rows(None, vec![column(sum)])] });
    let write = Node::Update {
        at: vec![shape.row, shape.column],
        value: Expr::Local { local: block, at: at_row(&[shape.column]) },
    };
    strip.push(rows(Some(shape.row), vec![column(write)]));
    k.body.push(Node::Strip { start, row, body: strip });
}
