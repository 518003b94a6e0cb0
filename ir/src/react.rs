//! ReACT's first step (paper 003 §4.1): a program in three-address form
//! ([`crate::program`]) as index trees — per statement, its loops in order,
//! each with a dense or sparse iteration space, over a compute leaf — and
//! the dependence graph between the statements; sparse iteration-space
//! propagation (§4.2), which restricts the loops that compute a temporary to
//! where its consumer needs it; and trie-like fusion (§4.3, Algorithms 1 and
//! 2) of the index trees into a forest that shares only common prefix loops;
//! and dimension reduction of temporaries (§4.4, Algorithm 3). Code
//! generation from the forest, input-sensitive fusion and the `fusion=`
//! schedule item are still to come.
//!
//! SDDMM with B in CSR: the product C·D runs over dense loops, the sampling
//! statement's `j` loop walks B's compressed level, and the temporary
//! carries a flow dependence:
//!
//! ```
//! use std::collections::BTreeMap;
//! use spindle_ir::lang::einsum::declarations;
//! use spindle_ir::program::{parse_program, split_program};
//! use spindle_ir::react::{dependences, index_trees, propagate};
//!
//! let decls = declarations(&[("A", &[4, 5], "f32"), ("B", &[4, 5], "f32"),
//!                            ("C", &[4, 3], "f32"), ("D", &[3, 5], "f32")]);
//! let program = split_program(&parse_program("A[i,j] = B[i,j] * (C[i,k] * D[k,j])")?, &decls)?;
//! let formats = BTreeMap::from([("B".to_string(), "csr".parse().unwrap())]);
//! let trees = index_trees(&program, &formats);
//! let text: Vec<String> = trees.iter().map(|t| t.to_string()).collect();
//! assert_eq!(text, ["for i: for j: for k: T1[i,j] = C[i,k] * D[k,j]",
//!                   "for i: for j in B: A[i,j] = B[i,j] * T1[i,j]"]);
//! // Propagated: T1 is needed only where B is stored (no dead values).
//! let text: Vec<String> = propagate(&program, &trees, &formats).iter().map(|t| t.to_string()).collect();
//! assert_eq!(text[0], "for i: for j in B: for k: T1[i,j] = C[i,k] * D[k,j]");
//! let edges: Vec<String> = dependences(&program).iter().map(|d| d.to_string()).collect();
//! assert_eq!(edges, ["S1 -> S2 flow T1"]);
//! # Ok::<(), spindle_ir::lang::Diagnostic>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;

use spindle_formats::{FormatSpec, LevelCapabilities};

use crate::lang::{Einsum, Statement};
use crate::program::Program;

/// Whether a loop visits every coordinate or only stored ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Space {
    Dense,
    /// The loop walks the stored coordinates of this tensor's level that
    /// holds the index: an operand stored sparse, or (after propagation) the
    /// sparse operand that decides where a temporary is needed.
    Sparse(String),
}

/// An index node: one loop of a statement's nest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    pub index: String,
    pub space: Space,
}

/// A statement's index tree: its loops, outermost first, over its compute
/// node (the statement).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexTree {
    pub loops: Vec<Loop>,
    pub compute: Statement,
}

impl fmt::Display for IndexTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.loops {
            match &l.space {
                Space::Dense => write!(f, "for {}: ", l.index)?,
                Space::Sparse(t) => write!(f, "for {} in {t}: ", l.index)?,
            }
        }
        write!(f, "{}", self.compute)
    }
}

/// The initial index tree of every statement: its indices in the checked
/// order (the output's first, then by first appearance); a loop is sparse
/// where a factor stored in one of `formats` holds its index at a level
/// that is not dense.
pub fn index_trees(program: &Program, formats: &BTreeMap<String, FormatSpec>) -> Vec<IndexTree> {
    program
        .statements
        .iter()
        .map(|einsum| IndexTree {
            loops: einsum
                .indices
                .iter()
                .map(|i| Loop {
                    index: i.name.clone(),
                    space: sparse_walker(einsum, formats, &i.name).map_or(Space::Dense, Space::Sparse),
                })
                .collect(),
            compute: einsum.statement.clone(),
        })
        .collect()
}

/// Each stored operand's index names in level order, as the program
/// first reads it.
fn stored_chains(program: &Program, formats: &BTreeMap<String, FormatSpec>) -> BTreeMap<String, Vec<String>> {
    let mut chains: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for einsum in &program.statements {
        for access in einsum.statement.rhs.accesses() {
            let (Some(spec), Some(info)) =
                (formats.get(&access.tensor.name), einsum.tensors.get(&access.tensor.name))
            else {
                continue;
            };
            let Ok(levels) = spec.levels(&info.shape) else {
                continue;
            };
            let names = levels
                .iter()
                .filter_map(|l| {
                    access.subscripts.get(l.dim).and_then(|s| s.as_index()).map(|i| i.name.clone())
                })
                .collect();
            chains.entry(access.tensor.name.clone()).or_insert(names);
        }
    }
    chains
}

/// A note for each statement whose loops cannot follow `order=` (`hint`):
/// [`order_loops`] takes a hinted index first only once the stored levels
/// above it are bound, so a hint against an operand's storage order is
/// passed over (a statement alone refuses it), and the note names the
/// operand.
pub fn unmet_order(
    program: &Program,
    formats: &BTreeMap<String, FormatSpec>,
    hint: &[String],
) -> Vec<String> {
    // (No order= asked: nothing to compare, and no trees to build again.)
    if hint.is_empty() {
        return Vec::new();
    }
    let trees = propagate(program, &index_trees(program, formats), formats);
    let chains = stored_chains(program, formats);
    let position = |loops: &[Loop], index: &str| loops.iter().position(|l| l.index == index);
    let mut notes = Vec::new();
    for (s, tree) in order_loops(program, &trees, formats, hint).iter().enumerate() {
        // A hinted index after a loop the hint does not list before it.
        let swapped = hint.iter().enumerate().find_map(|(k, first)| {
            let at = position(&tree.loops, first)?;
            let before = tree.loops[..at].iter().find(|l| !hint[..k].contains(&l.index))?;
            Some((first, &before.index))
        });
        let Some((first, later)) = swapped else { continue };
        let stores = tree.compute.rhs.accesses().into_iter().find_map(|a| {
            let chain = chains.get(&a.tensor.name)?;
            let above = chain.iter().position(|i| i == later)? < chain.iter().position(|i| i == first)?;
            above.then(|| format!(": `{}` stores `{later}` above `{first}`", a.tensor.name))
        });
        notes.push(format!(
            "order={}: statement {} (`{}`) runs `{later}` before `{first}`{}",
            hint.join("+"),
            s + 1,
            tree.compute,
            stores.unwrap_or_default()
        ));
    }
    notes
}

/// Each tree's loops reordered, one loop at a time among those whose
/// stored levels above are bound (a level is reached from its parent):
/// the indices `hint` lists first, in its order; then the loop that is
/// the contiguous (last) dimension of the fewest dense accesses, a loop
/// over stored coordinates counting none (it gathers), so the innermost
/// loop walks rows of dense operands; ties in the tree's order. SDDMM's
/// product `T1[i,j] = C[i,k] * D[k,j]` over B's pattern keeps i, j, k (the
/// sum innermost, in a register); GNN kernel 1's `T1[i,h] = A[i,k] *
/// X[k,h]` runs i, k, h (rows of X).
pub fn order_loops(
    program: &Program,
    trees: &[IndexTree],
    formats: &BTreeMap<String, FormatSpec>,
    hint: &[String],
) -> Vec<IndexTree> {
    let chains = stored_chains(program, formats);
    trees
        .iter()
        .map(|tree| {
            let st = &tree.compute;
            let mut contiguous: BTreeMap<&str, usize> = BTreeMap::new();
            for access in std::iter::once(&st.lhs).chain(st.rhs.accesses()) {
                if formats.contains_key(&access.tensor.name) {
                    continue;
                }
                if let Some(last) = access.subscripts.last().and_then(|s| s.as_index()) {
                    *contiguous.entry(last.name.as_str()).or_default() += 1;
                }
            }
            let walked: Vec<&Vec<String>> = st
                .rhs
                .accesses()
                .iter()
                .map(|a| a.tensor.name.clone())
                .chain(tree.loops.iter().filter_map(|l| match &l.space {
                    Space::Sparse(t) => Some(t.clone()),
                    Space::Dense => None,
                }))
                .filter_map(|t| chains.get(&t))
                .collect();
            let mut left = tree.loops.clone();
            let mut out: Vec<Loop> = Vec::new();
            while !left.is_empty() {
                let ready = |l: &Loop| {
                    walked.iter().all(|c| match c.iter().position(|y| *y == l.index) {
                        Some(at) => c[..at].iter().all(|above| {
                            out.iter().any(|o| o.index == *above) || !left.iter().any(|x| x.index == *above)
                        }),
                        None => true,
                    })
                };
                let score = |l: &Loop| match l.space {
                    Space::Sparse(_) => 0,
                    Space::Dense => contiguous.get(l.index.as_str()).copied().unwrap_or(0),
                };
                let at = hint
                    .iter()
                    .find_map(|h| left.iter().position(|l| l.index == *h && ready(l)))
                    .or_else(|| {
                        (0..left.len()).filter(|&x| ready(&left[x])).min_by_key(|&x| (score(&left[x]), x))
                    })
                    .unwrap_or(0);
                out.push(left.remove(at));
            }
            IndexTree { loops: out, compute: tree.compute.clone() }
        })
        .collect()
}

/// The first factor of `einsum` stored in a format that holds `index` at a
/// level that is not dense: where it has no entry the statement adds
/// nothing (a mask, `∧`); an operand of a sum masks nothing (`∨`).
fn sparse_walker(einsum: &Einsum, formats: &BTreeMap<String, FormatSpec>, index: &str) -> Option<String> {
    factors(&einsum.statement.rhs).into_iter().find_map(|access| {
        let spec = formats.get(&access.tensor.name)?;
        let info = einsum.tensors.get(&access.tensor.name)?;
        let levels = spec.levels(&info.shape).ok()?;
        levels
            .iter()
            .any(|level| {
                !level.format.locate()
                    && access
                        .subscripts
                        .get(level.dim)
                        .and_then(|s| s.as_index())
                        .is_some_and(|i| i.name == index)
            })
            .then(|| access.tensor.name.clone())
    })
}

/// The accesses `e` is zero without: its factors, and of a sum the
/// factors every term shares (`A[i,j]` of `A[i,j]*D[i,j] + A[i,j]`): a
/// function of an operand is not zero where that operand is, so it has
/// none.
fn factors(e: &crate::lang::Expr) -> Vec<&crate::lang::Access> {
    use crate::lang::{BinOp, Expr};
    match e {
        Expr::Access(a) => vec![a],
        Expr::Neg { expr, .. } => factors(expr),
        Expr::Binary { op: BinOp::Mul, lhs, rhs, .. } => {
            let mut out = factors(lhs);
            out.extend(factors(rhs));
            out
        }
        Expr::Binary { op: BinOp::Div, lhs, .. } => factors(lhs),
        Expr::Binary { op: BinOp::Add | BinOp::Sub, lhs, rhs, .. } => {
            // (Accesses compare as written: their spans differ.)
            let other: Vec<String> = factors(rhs).iter().map(|a| a.to_string()).collect();
            factors(lhs).into_iter().filter(|a| other.contains(&a.to_string())).collect()
        }
        _ => Vec::new(),
    }
}

/// Sparse iteration-space propagation (paper 003 §4.2), masks combined by
/// `∧` through products (a sum, `∨`, needs every entry and stops it):
///
/// - backward: a factor walked sparse (an operand stored sparse, or a
///   temporary already sparsified) decides where the rest of a statement
///   is evaluated (`A[i,j] * exp(T[i,j])` too); a temporary read there is
///   needed only at that factor's stored coordinates, so where every read
///   of it agrees, its producer's loop over the index they share walks
///   that factor's coordinates too;
/// - forward: a temporary whose producer walks sparse coordinates in some
///   of its dimensions holds entries only there, and its consumers' dense
///   loops over those dimensions walk the same coordinates.
///
/// Both repeat until nothing changes.
///
/// Only coordinates that appear once each propagate (`formats` says which
/// levels are unique): COO's rows repeat, and a loop of another statement
/// walking them would visit a row once per entry. A mask walked whole
/// does ([`whole_levels`]): into a statement that carries every level's
/// index, each position of the last level one element.
pub fn propagate(
    program: &Program,
    trees: &[IndexTree],
    formats: &BTreeMap<String, FormatSpec>,
) -> Vec<IndexTree> {
    let once = |t: &str, index: &str| walks_each_once(program, formats, t, index);
    // A mask whose coordinates repeat above a unique last level (COO's
    // rows) is one element per position where a loop nest walks all of
    // its levels: it propagates into a statement that carries each of its
    // levels' indices (`lhs`), and lands only where it lands whole.
    let whole = |t: &str| whole_levels(program, formats, t);
    let walkable = |t: &str, index: &str, lhs: &crate::lang::Access| {
        once(t, index)
            || whole(t).is_some_and(|names| {
                names
                    .iter()
                    .all(|n| lhs.subscripts.iter().any(|s| s.as_index().is_some_and(|i| i.name == *n)))
            })
    };
    // Makes the dense loops of `tree` named in `proposed` walk their masks
    // (`(index, mask)`), each mask that repeats coordinates only where it
    // is proposed (or walked already) at every level; whether any changed.
    let walk = |tree: &mut IndexTree, proposed: &[(String, String)]| {
        let mut changed = false;
        for (index, mask) in proposed {
            let lands = once(mask, index)
                || whole(mask).is_some_and(|names| {
                    names.iter().all(|n| {
                        proposed.iter().any(|(i, m)| i == n && m == mask)
                            || tree
                                .loops
                                .iter()
                                .any(|l| l.index == *n && l.space == Space::Sparse(mask.clone()))
                    })
                });
            let dense = tree.loops.iter_mut().find(|l| l.index == *index && l.space == Space::Dense);
            if let (true, Some(l)) = (lands, dense) {
                l.space = Space::Sparse(mask.clone());
                changed = true;
            }
        }
        changed
    };
    let mut trees = trees.to_vec();
    let products: Vec<bool> = program.statements.iter().map(|e| is_product(&e.statement.rhs)).collect();
    let writer =
        |t: &str, before: usize| (0..before).rev().find(|&s| program.statements[s].output().name == t);
    let index_at = |access: &crate::lang::Access, at: usize| {
        access.subscripts.get(at).and_then(|s| s.as_index()).map(|i| i.name.clone())
    };
    loop {
        let mut changed = false;
        // Backward, consumers first: a producer's loop walks a mask only
        // where every read of its temporary needs it there alone (a second
        // reader that walks every coordinate, `Z = Y + T` beside `Y = A *
        // T`, needs all of them).
        for p in (0..trees.len()).rev() {
            if !products[p] {
                continue;
            }
            let lhs = &program.statements[p].statement.lhs;
            let name = &lhs.tensor.name;
            // (A producer that reads the mask itself walks it at its own
            // levels: `y[i] = A[i,j] * x[j]` before `z[i] = A[i,j] *
            // y[j]` walks A's rows by i, not by the consumer's j.)
            let reads =
                |m: &str| program.statements[p].statement.rhs.accesses().iter().any(|a| a.tensor.name == m);
            let readers: Vec<usize> = (p + 1..trees.len()).filter(|&c| writer(name, c) == Some(p)).collect();
            let mut proposed = Vec::new();
            for d in 0..lhs.subscripts.len() {
                let Some(own) = index_at(lhs, d) else { continue };
                // The mask each read of dimension `d` needs, `None` for
                // every coordinate: a read by another index name (`t[i] =
                // ...` read as `t[k]` beside `B[i,k]`) would need another
                // level of the mask, since the level is found by the name.
                let mut needs = readers.iter().flat_map(|&c| {
                    let walked =
                        trees[c].loops.iter().find(|l| l.index == own).and_then(|l| match &l.space {
                            Space::Sparse(m) if m != name && walkable(m, &own, lhs) && !reads(m) => {
                                Some(m.clone())
                            }
                            _ => None,
                        });
                    program.statements[c]
                        .statement
                        .rhs
                        .accesses()
                        .into_iter()
                        .filter(|a| a.tensor.name == *name)
                        .map(|a| {
                            walked.clone().filter(|m| {
                                index_at(a, d).as_ref() == Some(&own)
                                    && carried(program, formats, c, m, &own, lhs, a)
                            })
                        })
                        .collect::<Vec<_>>()
                });
                let Some(Some(mask)) = needs.next() else { continue };
                if !needs.all(|m| m.as_ref() == Some(&mask)) {
                    continue;
                }
                proposed.push((own, mask));
            }
            changed |= walk(&mut trees[p], &proposed);
        }
        // Forward: a temporary computed over sparse coordinates in some of
        // its dimensions holds entries only there: a product's, or a sum's
        // where the coordinates are of a factor every term shares
        // (`T[i,j] = A[i,j]*D[i,j] + A[i,j]*E[i,j]` walking A's).
        for p in 0..trees.len() {
            let lhs = &program.statements[p].statement.lhs;
            let rhs = &program.statements[p].statement.rhs;
            let zero_off = |t: &str| products[p] || factors(rhs).iter().any(|a| a.tensor.name == t);
            // Each sparse dimension with the coordinates its loop walks.
            let sparse_dims: Vec<(usize, Space)> = (0..lhs.subscripts.len())
                .filter_map(|d| {
                    let i = index_at(lhs, d)?;
                    let l = trees[p].loops.iter().find(|l| l.index == i)?;
                    matches!(&l.space, Space::Sparse(t) if walkable(t, &i, lhs) && zero_off(t))
                        .then(|| (d, l.space.clone()))
                })
                .collect();
            if sparse_dims.is_empty() {
                continue;
            }
            let name = lhs.tensor.name.clone();
            for c in p + 1..trees.len() {
                if !products[c] || writer(&name, c) != Some(p) {
                    continue;
                }
                // The consumer walks the same coordinates.
                // (At the producer's index: a read by another name walks
                // other coordinates.)
                let reads: Vec<(String, Space)> = program.statements[c]
                    .statement
                    .rhs
                    .accesses()
                    .iter()
                    .filter(|a| a.tensor.name == name)
                    .flat_map(|a| {
                        sparse_dims.iter().filter_map(|(d, sp)| {
                            let i = index_at(a, *d).filter(|i| index_at(lhs, *d).as_ref() == Some(i))?;
                            let Space::Sparse(m) = sp else { return None };
                            carried(program, formats, p, m, &i, lhs, a).then(|| (i, sp.clone()))
                        })
                    })
                    .collect();
                // (Likewise a consumer that reads the walked operand itself.)
                let walks_itself = |sp: &Space| {
                    let Space::Sparse(t) = sp else { return false };
                    program.statements[c].statement.rhs.accesses().iter().any(|a| a.tensor.name == *t)
                };
                let proposed: Vec<(String, String)> = reads
                    .iter()
                    .filter(|(_, sp)| !walks_itself(sp))
                    .filter_map(|(i, sp)| match sp {
                        Space::Sparse(m) => Some((i.clone(), m.clone())),
                        Space::Dense => None,
                    })
                    .collect();
                changed |= walk(&mut trees[c], &proposed);
            }
        }
        if !changed {
            return trees;
        }
    }
}

/// Whether the levels above mask `m`'s level of `index` (as statement `s`
/// reads `m`) hold indices that a temporary carries from its producer to
/// its consumer: both the producer's output `lhs` and the consumer's read
/// `read` of it hold each at the same dimension. Statements index apart,
/// so a level under an index the temporary does not carry (`t[j] = w[i] *
/// x[j]` read as `t[j]` beside `A[i,j]`: the producer's `i` is summed, not
/// A's row) would walk another row's coordinates.
fn carried(
    program: &Program,
    formats: &BTreeMap<String, FormatSpec>,
    s: usize,
    m: &str,
    index: &str,
    lhs: &crate::lang::Access,
    read: &crate::lang::Access,
) -> bool {
    // (Where statement `s` walks `m` without reading it, a mask carried
    // into it by an earlier hop, `m`'s read elsewhere names its levels:
    // each hop checked that the levels above are carried under the same
    // names, and a program kernel reads a stored operand at one subscript.)
    let reads = |e: &&crate::lang::Einsum| e.statement.rhs.accesses().iter().any(|a| a.tensor.name == m);
    let own = &program.statements[s];
    let Some(e) = Some(own).filter(reads).or_else(|| program.statements.iter().find(reads)) else {
        return false;
    };
    let (Some(spec), Some(info)) = (formats.get(m), e.tensors.get(m)) else { return false };
    let Some(access) = e.statement.rhs.accesses().into_iter().find(|a| a.tensor.name == m) else {
        return false;
    };
    let Ok(levels) = spec.levels(&info.shape) else { return false };
    fn name(a: &crate::lang::Access, d: usize) -> Option<&String> {
        a.subscripts.get(d).and_then(|x| x.as_index()).map(|i| &i.name)
    }
    let Some(at) = levels.iter().position(|l| name(access, l.dim).is_some_and(|n| n == index)) else {
        return false;
    };
    levels[..at].iter().all(|l| {
        let Some(above) = name(access, l.dim) else { return false };
        (0..lhs.subscripts.len()).any(|d| name(lhs, d) == Some(above) && name(read, d) == Some(above))
    })
}

/// Stored operand `t`'s first read and its format's levels.
fn read_levels(
    program: &Program,
    formats: &BTreeMap<String, FormatSpec>,
    t: &str,
) -> Option<(crate::lang::Access, Vec<spindle_formats::Level>)> {
    let spec = formats.get(t)?;
    let (access, info) = program.statements.iter().find_map(|e| {
        let access = e.statement.rhs.accesses().into_iter().find(|a| a.tensor.name == t)?;
        Some((access.clone(), e.tensors.get(t)?.clone()))
    })?;
    Some((access, spec.levels(&info.shape).ok()?))
}

/// The index names of stored operand `t`'s levels (as first read) where
/// a position of its last level is one element even below levels whose
/// coordinates repeat: the last level unique (COO's rows; stored data are
/// canonical), or padded (GroupCOO's, ELL's), whose padding repeats the
/// coordinate before it with value 0, so a product that walks it adds a
/// term of 0 (the kernels skip the padding where a dense factor is not
/// finite).
fn whole_levels(program: &Program, formats: &BTreeMap<String, FormatSpec>, t: &str) -> Option<Vec<String>> {
    let (access, levels) = read_levels(program, formats, t)?;
    let blocked = levels.iter().any(|l| l.part != spindle_formats::level::DimPart::Whole);
    let last = levels.last()?.format;
    if blocked || !(last.unique() || matches!(last, spindle_formats::LevelFormat::Padded(_))) {
        return None;
    }
    levels
        .iter()
        .map(|l| access.subscripts.get(l.dim).and_then(|s| s.as_index()).map(|i| i.name.clone()))
        .collect()
}

/// Whether stored operand `t` holds each coordinate of `index` once: the
/// level holding it and every level above it unique.
fn walks_each_once(program: &Program, formats: &BTreeMap<String, FormatSpec>, t: &str, index: &str) -> bool {
    let Some((access, levels)) = read_levels(program, formats, t) else { return false };
    let holds =
        |dim: usize| access.subscripts.get(dim).and_then(|s| s.as_index()).is_some_and(|i| i.name == index);
    let Some(at) = levels.iter().position(|l| holds(l.dim)) else { return false };
    levels[..=at].iter().all(|l| l.format.unique())
}

/// Whether `e` is a product of factors (accesses, literals, negations).
fn is_product(e: &crate::lang::Expr) -> bool {
    use crate::lang::{BinOp, Expr};
    match e {
        Expr::Binary { op: BinOp::Mul, lhs, rhs, .. } => is_product(lhs) && is_product(rhs),
        Expr::Neg { expr, .. } => is_product(expr),
        Expr::Access(_) | Expr::Literal { .. } => true,
        _ => false,
    }
}

/// The kinds of dependence paper 003 keeps (input dependence included, as
/// fusing two readers of a tensor improves locality).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DependenceKind {
    /// The later statement reads what the earlier one wrote.
    Flow,
    /// The later statement writes what the earlier one read.
    Anti,
    /// Both write.
    Output,
    /// Both read.
    Input,
}

/// An edge of the dependence graph: statements by their position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependence {
    pub from: usize,
    pub to: usize,
    pub kind: DependenceKind,
    pub tensor: String,
}

impl fmt::Display for Dependence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DependenceKind::Flow => "flow",
            DependenceKind::Anti => "anti",
            DependenceKind::Output => "output",
            DependenceKind::Input => "input",
        };
        write!(f, "S{} -> S{} {kind} {}", self.from + 1, self.to + 1, self.tensor)
    }
}

/// Every dependence between two statements of `program`, in statement
/// order, one edge per (pair, kind, tensor).
pub fn dependences(program: &Program) -> Vec<Dependence> {
    let reads = |e: &Einsum| -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for a in e.statement.rhs.accesses() {
            if !names.contains(&a.tensor.name) {
                names.push(a.tensor.name.clone());
            }
        }
        names
    };
    let mut out = Vec::new();
    let statements = &program.statements;
    for (a, first) in statements.iter().enumerate() {
        let (w1, r1) = (first.output().name.clone(), reads(first));
        for (b, second) in statements.iter().enumerate().skip(a + 1) {
            let (w2, r2) = (second.output().name.clone(), reads(second));
            let mut edge = |kind, tensor: &str| {
                out.push(Dependence { from: a, to: b, kind, tensor: tensor.to_string() });
            };
            if r2.contains(&w1) {
                edge(DependenceKind::Flow, &w1);
            }
            if r1.contains(&w2) {
                edge(DependenceKind::Anti, &w2);
            }
            if w1 == w2 {
                edge(DependenceKind::Output, &w1);
            }
            for t in r1.iter().filter(|t| r2.contains(t)) {
                edge(DependenceKind::Input, t);
            }
        }
    }
    out
}

/// A node of a fused forest: a loop over its children, or a statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Loop { index: String, extent: usize, space: Space, children: Vec<Node> },
    Compute { statement: usize, text: String },
}

impl Node {
    /// The statements below this node, by their position in the program.
    fn statements(&self, out: &mut Vec<usize>) {
        match self {
            Node::Loop { children, .. } => children.iter().for_each(|c| c.statements(out)),
            Node::Compute { statement, .. } => out.push(*statement),
        }
    }

    fn text(&self, depth: usize, out: &mut String) {
        let pad = "  ".repeat(depth);
        match self {
            Node::Loop { index, space, children, .. } => {
                match space {
                    Space::Dense => out.push_str(&format!("{pad}for {index}\n")),
                    Space::Sparse(t) => out.push_str(&format!("{pad}for {index} in {t}\n")),
                }
                children.iter().for_each(|c| c.text(depth + 1, out));
            }
            Node::Compute { statement, text } => out.push_str(&format!("{pad}S{}: {text}\n", statement + 1)),
        }
    }
}

/// The forest as indented text, one node a line.
pub fn forest_text(forest: &[Node]) -> String {
    let mut out = String::new();
    forest.iter().for_each(|n| n.text(0, &mut out));
    out
}

/// The forest a fusion policy arranges `program` in: index trees with
/// sparse iteration spaces propagated, then each statement its own nest
/// (`none`) or trie-fused (`trie`). `maximal` substitutes the statements
/// into one instead ([`crate::program::inline`]); here it is `trie`'s
/// forest.
pub fn fused_forest(
    program: &Program,
    formats: &BTreeMap<String, FormatSpec>,
    fusion: crate::kernel::schedule::Fusion,
    order: &[String],
) -> Vec<Node> {
    let trees = propagate(program, &index_trees(program, formats), formats);
    let trees = order_loops(program, &trees, formats, order);
    let forest = unfused(program, &trees);
    match fusion {
        crate::kernel::schedule::Fusion::None => forest,
        _ => trie_fuse(program, forest, formats),
    }
}

/// Each statement's index tree as a chain of loop nodes (no fusion).
pub fn unfused(program: &Program, trees: &[IndexTree]) -> Vec<Node> {
    trees
        .iter()
        .enumerate()
        .map(|(s, tree)| {
            let extent = |i: &str| program.statements[s].index(i).map_or(0, |x| x.extent);
            tree.loops.iter().rev().fold(
                Node::Compute { statement: s, text: tree.compute.to_string() },
                |inner, l| Node::Loop {
                    index: l.index.clone(),
                    extent: extent(&l.index),
                    space: l.space.clone(),
                    children: vec![inner],
                },
            )
        })
        .collect()
}

/// Trie-like fusion (paper 003 §4.3, Algorithms 1 and 2): at each level,
/// sibling loops with the same index, extent and iteration space that a
/// dependence joins are fused, only where no other path between them
/// would turn into a cycle (Algorithm 1's groups); the first loop of a
/// group hosts the others' children, and fusion goes on inside it. Only
/// common prefixes fuse: a statement's deeper loops stay its own.
pub fn trie_fuse(program: &Program, forest: Vec<Node>, formats: &BTreeMap<String, FormatSpec>) -> Vec<Node> {
    let deps = dependences(program);
    // Loops over a mask whose coordinates repeat (COO's rows) fuse where
    // the fused nest walks it down to one element; where the levels below
    // did not fuse after all, fusion keeps to reads there.
    let fused = fuse_level(program, forest.clone(), &deps, formats, true);
    match fused.iter().all(|n| walks_whole(program, n, &deps, formats)) {
        true => fused,
        false => fuse_level(program, forest, &deps, formats, false),
    }
}

/// Whether each loop of `node` over a mask whose coordinates repeat, where
/// two of its statements depend other than by reading, holds both inside
/// one loop over the mask's last level (one element an iteration).
fn walks_whole(
    program: &Program,
    node: &Node,
    deps: &[Dependence],
    formats: &BTreeMap<String, FormatSpec>,
) -> bool {
    let Node::Loop { index, space, children, .. } = node else { return true };
    let inside = |n: &Node, d: &Dependence| {
        let mut s = Vec::new();
        n.statements(&mut s);
        s.contains(&d.from) && s.contains(&d.to)
    };
    fn last_loops<'a>(n: &'a Node, index: &str, mask: &str, out: &mut Vec<&'a Node>) {
        if let Node::Loop { index: i, space, children, .. } = n {
            match *i == index && *space == Space::Sparse(mask.to_string()) {
                true => out.push(n),
                false => children.iter().for_each(|c| last_loops(c, index, mask, out)),
            }
        }
    }
    let holds = match space {
        Space::Sparse(t) if !walks_each_once(program, formats, t, index) => {
            let last = whole_levels(program, formats, t).and_then(|names| names.last().cloned());
            deps.iter().filter(|d| d.kind != DependenceKind::Input && inside(node, d)).all(|d| {
                let mut loops = Vec::new();
                if let Some(last) = &last {
                    last_loops(node, last, t, &mut loops);
                }
                loops.iter().any(|l| inside(l, d))
            })
        }
        _ => true,
    };
    holds && children.iter().all(|c| walks_whole(program, c, deps, formats))
}

/// Whether dependence `d` stays inside one iteration of a fused loop over
/// `index`: both statements reach the tensor with `index` at the same
/// dimension, so no iteration reads what another writes. Reads alone
/// never prevent fusion; a producer that sums over `index` does.
fn loop_independent(program: &Program, d: &Dependence, index: &str) -> bool {
    if d.kind == DependenceKind::Input {
        return true;
    }
    let dims = |s: usize| -> Vec<Option<usize>> {
        let st = &program.statements[s].statement;
        std::iter::once(&st.lhs)
            .chain(st.rhs.accesses())
            .filter(|a| a.tensor.name == d.tensor)
            .map(|a| a.subscripts.iter().position(|x| x.as_index().is_some_and(|i| i.name == index)))
            .collect()
    };
    let all: Vec<Option<usize>> = dims(d.from).into_iter().chain(dims(d.to)).collect();
    all.first().is_some_and(|first| first.is_some() && all.iter().all(|x| x == first))
}

fn fuse_level(
    program: &Program,
    nodes: Vec<Node>,
    deps: &[Dependence],
    formats: &BTreeMap<String, FormatSpec>,
    whole_masks: bool,
) -> Vec<Node> {
    let n = nodes.len();
    let members: Vec<Vec<usize>> = nodes
        .iter()
        .map(|node| {
            let mut s = Vec::new();
            node.statements(&mut s);
            s
        })
        .collect();
    // Sibling a reaches sibling b (a < b) when a statement of a has a
    // dependence into a statement of b.
    let linked =
        |a: usize, b: usize| deps.iter().any(|d| members[a].contains(&d.from) && members[b].contains(&d.to));
    // Fusion-preventing: another iteration space, or a dependence the
    // fused loop would carry.
    let fusible = |a: usize, b: usize| match (&nodes[a], &nodes[b]) {
        (
            Node::Loop { index: i, extent: e, space: s, .. },
            Node::Loop { index: j, extent: f, space: t, .. },
        ) => {
            // Over a level whose coordinates repeat (COO's or GroupCOO's
            // rows), one iteration holds part of a coordinate's entries: a
            // value the first statement sums there is not complete when
            // the second reads it, so only reads may share that loop;
            // unless (`whole_masks`) each dependence stays at one element
            // of the mask (at every level's index), whose last level is
            // unique, so the nest fused down to it walks one element an
            // iteration (checked after: `walks_whole`).
            let joined = |t: &str| {
                whole_masks
                    && whole_levels(program, formats, t).is_some_and(|names| {
                        names.contains(i)
                            && deps
                                .iter()
                                .filter(|d| members[a].contains(&d.from) && members[b].contains(&d.to))
                                .all(|d| names.iter().all(|n| loop_independent(program, d, n)))
                    })
            };
            let whole = match s {
                Space::Sparse(t) => walks_each_once(program, formats, t, i) || joined(t),
                Space::Dense => true,
            };
            i == j
                && e == f
                && s == t
                && deps
                    .iter()
                    .filter(|d| members[a].contains(&d.from) && members[b].contains(&d.to))
                    .all(|d| (whole || d.kind == DependenceKind::Input) && loop_independent(program, d, i))
        }
        _ => false,
    };
    // Reachability between siblings along dependences (they only point
    // forward, in program order).
    let mut reach = vec![vec![false; n]; n];
    for b in 0..n {
        for a in (0..b).rev() {
            reach[a][b] = linked(a, b) || (a + 1..b).any(|c| reach[a][c] && reach[c][b]);
        }
    }
    // Algorithm 1, siblings in program order: a group takes a later sibling
    // it depends into unless the edge is fusion-preventing (different
    // loops) or the sibling depends on one outside the group that comes
    // after the group's first (which the group, placed there, would run
    // before: a cycle where that one depends on the group too).
    let mut head: Vec<usize> = (0..n).collect();
    for x in 0..n {
        let g = head[x];
        for child in x + 1..n {
            let group: Vec<usize> = (0..n).filter(|&m| head[m] == g).collect();
            if head[child] != child || !group.iter().any(|&m| linked(m, child)) {
                continue;
            }
            if !group.iter().all(|&m| fusible(m, child) || !linked(m, child)) || !fusible(g, child) {
                continue;
            }
            let after_first = (g + 1..child).any(|c| head[c] != g && reach[c][child]);
            if !after_first {
                head[child] = g;
            }
        }
    }
    // Algorithm 2: hosts take their group's children, in program order.
    let mut out: Vec<Node> = Vec::new();
    let mut hosts: Vec<(usize, usize)> = Vec::new(); // (head, position in out)
    for (x, node) in nodes.into_iter().enumerate() {
        match hosts.iter().find(|(h, _)| *h == head[x]) {
            Some(&(_, at)) => {
                if let (Node::Loop { children: host, .. }, Node::Loop { children, .. }) = (&mut out[at], node)
                {
                    host.extend(children);
                }
            }
            None => {
                hosts.push((head[x], out.len()));
                out.push(node);
            }
        }
    }
    out.into_iter()
        .map(|node| match node {
            Node::Loop { index, extent, space, children } => {
                let children = fuse_level(program, children, deps, formats, whole_masks);
                Node::Loop { index, extent, space, children }
            }
            compute => compute,
        })
        .collect()
}

/// Dimension reduction (paper 003 §4.4, Algorithm 3): a temporary written
/// and read only inside shared loops needs no dimension those loops index —
/// each iteration holds one slice, reset when the loop moves on. Returns,
/// per temporary of the program that a later statement reads (what nothing
/// reads is a result, kept whole), the indices (the producer's names) it
/// keeps; an empty list is a scalar.
pub fn reduce_dimensions(program: &Program, forest: &[Node]) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for name in program.temporaries.keys() {
        let users: Vec<usize> = program
            .statements
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                e.output().name == *name || e.statement.rhs.accesses().iter().any(|a| a.tensor.name == *name)
            })
            .map(|(s, _)| s)
            .collect();
        let Some(&producer) = users.iter().find(|&&s| program.statements[s].output().name == *name) else {
            continue;
        };
        // Nothing reads it: a result of the program, kept whole.
        if users.len() < 2 {
            continue;
        }
        let lhs = &program.statements[producer].statement.lhs;
        let at = |s: usize, d: usize| -> Vec<Option<String>> {
            let e = &program.statements[s].statement;
            let mut names = Vec::new();
            if e.lhs.tensor.name == *name {
                names.push(e.lhs.subscripts.get(d).and_then(|x| x.as_index()).map(|i| i.name.clone()));
            }
            for a in e.rhs.accesses().iter().filter(|a| a.tensor.name == *name) {
                names.push(a.subscripts.get(d).and_then(|x| x.as_index()).map(|i| i.name.clone()));
            }
            names
        };
        // The loops around every user, outermost first.
        let shared = shared_loops(forest, &users);
        let kept: Vec<String> = (0..lhs.subscripts.len())
            .filter_map(|d| {
                let own = lhs.subscripts[d].as_index()?.name.clone();
                let reducible = shared.iter().any(|index| {
                    users.iter().all(|&s| at(s, d).iter().all(|n| n.as_deref() == Some(index.as_str())))
                });
                (!reducible).then_some(own)
            })
            .collect();
        out.insert(name.clone(), kept);
    }
    out
}

/// The indices of the loops that enclose every statement of `users`.
fn shared_loops(forest: &[Node], users: &[usize]) -> Vec<String> {
    let contains = |node: &Node| {
        let mut s = Vec::new();
        node.statements(&mut s);
        users.iter().all(|u| s.contains(u))
    };
    let mut path = Vec::new();
    let mut level = forest;
    while let Some(Node::Loop { index, children, .. }) = level.iter().find(|n| contains(n)) {
        path.push(index.clone());
        level = children;
    }
    path
}
