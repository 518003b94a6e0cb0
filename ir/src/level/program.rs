//! Program kernels (paper 003): a program in three-address form, its
//! statements arranged in a forest of loops by ReACT's passes
//! ([`crate::react::fused_forest`]), lowered into one loop tree. Shared
//! loops are emitted once; each statement's own loops below them; a
//! statement into a temporary is a [`Node::Store`] into a [`Local`] the
//! kernel allocates, reduced to the dimensions its loops do not share
//! (a scalar in SDDMM, a row in GNN kernel 1) and cleared at the start of
//! each iteration of the innermost loop its users share. A temporary
//! computed only where a sparse operand has entries, and read only there,
//! is held in that operand's pattern (one value per stored position). The
//! last statement's output is the kernel's dense output.
//!
//! Each loop walks at most one sparse operand (the index tree's iteration
//! space). With `search` (GPU targets), a second operand stored at the
//! walked index (the masks of SDDMM with two, `S = A*B*(U*V)`) is
//! searched for each walked entry by every statement that reads it
//! ([`Node::Find`] over the operand at its plain subscripts), which skips
//! the statement where the search finds nothing: right where the
//! statement is zero without it (a factor of every term), refused
//! elsewhere (`A*(B + D)`). A refused program runs under `fusion=maximal`
//! through the level path's merges instead, as every such program does on
//! CPUs: there a merge co-iterates faster than a search per entry
//! (`y = A*B*x`, 20000², 400k entries each: 3.0 ms merged, 6.3 searched;
//! SDDMM with two masks 1.7 against 4.3, the dot products computed at
//! every entry of A, not only where B has one too).
//!
//! SDDMM under trie fusion: `T1` is a scalar, cleared for every stored
//! entry of `B`, summed over `k`, then scaled once:
//!
//! ```
//! use std::collections::BTreeMap;
//! use spindle_formats::Coo;
//! use spindle_ir::kernel::schedule::Fusion;
//! use spindle_ir::lang::einsum::declarations;
//! use spindle_ir::level::lower_program;
//! use spindle_ir::program::{parse_program, split_program};
//! use spindle_ir::react::fused_forest;
//!
//! let decls = declarations(&[("A", &[4, 5], "f64"), ("B", &[4, 5], "f64"),
//!                            ("C", &[4, 3], "f64"), ("D", &[3, 5], "f64")]);
//! let program = split_program(&parse_program("A[i,j] = B[i,j] * (C[i,k] * D[k,j])")?, &decls)?;
//! let formats = BTreeMap::from([("B".to_string(), "csr".parse().unwrap())]);
//! let b = Coo::new(vec![4, 5], vec![vec![0, 2, 3], vec![1, 3, 4]], vec![1.0, 2.0, 3.0]).unwrap();
//! let sparse = BTreeMap::from([("B".to_string(), b)]);
//! let forest = fused_forest(&program, &formats, Fusion::Trie, &[]);
//! let lowered = lower_program(&program, &forest, &formats, &sparse, false, "sddmm")?;
//! let text = lowered.kernel.to_string();
//! assert!(text.contains("local T1 (a scalar)"), "{text}");
//! assert!(text.contains("clear T1"), "{text}");
//! assert!(text.contains("A[i,j] += (B_val[pB1] * T1)"), "{text}");
//! # Ok::<(), spindle_ir::lang::Diagnostic>(())
//! ```

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use cranelift_entity::PrimaryMap;
use spindle_formats::{Coo, FormatSpec};

use super::lower::{Lowered, Stored, plain_indices, refuse, store_operand, zero_where_absent};
use super::{
    Affine, AffineOperand, Expr, LevelKernel, LevelRef, Local, LocalId, Node, Place, Point, Position, Reach,
    Target, Var, VarId,
};
use crate::kernel::{OutputInit, Reduction, TensorId, TensorParam};
use crate::lang::{Access, AssignOp, BinOp, Diagnostic, Expr as Ast, Role, Span, Statement};
use crate::program::Program;
use crate::react::{self, Space};
use crate::tensor::Tensors;

/// A temporary bigger than this many elements is refused: it would not be
/// allocated.
pub const MAX_LOCAL_ELEMENTS: usize = 1 << 28;

/// How a temporary's elements are addressed.
#[derive(Clone, Debug)]
enum Addressing {
    /// By the coordinates of the dimensions it keeps (by position in its
    /// subscripts).
    Coords(Vec<usize>),
    /// By the position of a stored level, then the coordinates of the
    /// other dimensions (by position in its subscripts).
    Position(Position, Vec<usize>),
}

/// Refuses a program in which a statement writes a tensor that an earlier
/// one reads. A kernel lays out what the program writes (its output
/// cleared, its temporaries its own), so the earlier read would see the
/// kernel's values, not the data; substituted into one statement
/// (`fusion=maximal`), the read would become a read of the output.
pub fn written_after_read(program: &Program) -> Result<(), Diagnostic> {
    let statements = &program.statements;
    let mut first_writer: BTreeMap<&str, usize> = BTreeMap::new();
    for (s, e) in statements.iter().enumerate() {
        first_writer.entry(e.output().name.as_str()).or_insert(s);
    }
    for (tensor, &w) in &first_writer {
        let read = statements[..w].iter().enumerate().find_map(|(j, e)| {
            Some((j, e.statement.rhs.accesses().into_iter().find(|a| a.tensor.name == *tensor)?.span))
        });
        if let Some((j, read)) = read {
            return Err(refuse(
                format!(
                    "statement {} writes `{tensor}`, which statement {} reads before it; a program kernel reads a \
                     tensor after it is written",
                    w + 1,
                    j + 1
                ),
                statements[w].statement.lhs.span,
                "written here",
            )
            .with_secondary(read, "read here, before")
            .with_note(format!("give the result another name than `{tensor}`")));
        }
    }
    Ok(())
}

/// Lowers `program`, arranged as `forest` (from [`react::fused_forest`]),
/// with the operands in `formats` stored in them (their entries in
/// `sparse`), into one loop tree: the kernel writes the last statement's
/// output; the other outputs are its temporaries.
pub fn lower_program(
    program: &Program,
    forest: &[react::Node],
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
    search: bool,
    name: &str,
) -> Result<Lowered, Diagnostic> {
    let statements = &program.statements;
    let last = statements.last().ok_or_else(|| {
        Diagnostic::new("the program has no statement", Span::new(0, 0)).with_label("empty")
    })?;
    let output = last.output().name.clone();

    // Every statement sums into its output; a temporary has one writer.
    let mut writers: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (s, e) in statements.iter().enumerate() {
        let st = &e.statement;
        if !matches!(st.op, AssignOp::Assign | AssignOp::AddAssign) {
            return Err(refuse(
                format!("`{}` in a program kernel: its statements sum into their outputs", st.op.as_str()),
                st.op_span,
                "not a sum",
            ));
        }
        writers.entry(e.output().name.clone()).or_default().push(s);
    }
    written_after_read(program)?;
    for (tensor, ws) in &writers {
        let again = ws.iter().skip(1).find(|&&s| statements[s].statement.op == AssignOp::Assign);
        if let Some(&s) = again.or(if *tensor != output && ws.len() > 1 { ws.get(1) } else { None }) {
            let st = &statements[s].statement;
            return Err(refuse(
                format!(
                    "`{tensor}` is written again by statement {}; a program kernel writes a temporary once and its result with `=` once",
                    s + 1
                ),
                st.lhs.span,
                "written again",
            ));
        }
        if formats.contains_key(tensor) && *tensor != output {
            let st = &statements[ws[0]].statement;
            return Err(refuse(
                format!(
                    "`{tensor}` is a temporary of the program and has a format: the compiler lays temporaries out"
                ),
                st.lhs.span,
                "a temporary",
            )
            .with_note(format!("drop `{tensor}`'s format; formats are for the inputs and the last statement's output")));
        }
    }

    // One variable per index name.
    let mut vars: PrimaryMap<VarId, Var> = PrimaryMap::new();
    let mut var_of: BTreeMap<String, VarId> = BTreeMap::new();
    for e in statements {
        for ix in &e.indices {
            match var_of.get(&ix.name) {
                Some(&v) if vars[v].extent != ix.extent => {
                    return Err(refuse(
                        format!(
                            "`{}` has extent {} here and {} in an earlier statement; a program kernel gives an index one extent",
                            ix.name, ix.extent, vars[v].extent
                        ),
                        e.statement.span,
                        "another extent",
                    ));
                }
                Some(_) => {}
                None => {
                    var_of
                        .insert(ix.name.clone(), vars.push(Var { name: ix.name.clone(), extent: ix.extent }));
                }
            }
        }
    }
    let plain = |a: &Access| plain_indices(a, &var_of);

    // The stored operands, each read at one subscript throughout; their
    // arrays named apart from every statement's tensors.
    let taken: BTreeSet<String> = statements.iter().flat_map(|e| e.tensors.keys().cloned()).collect();
    let mut tensors: PrimaryMap<TensorId, TensorParam> = PrimaryMap::new();
    let mut arrays = Tensors::new();
    let mut stored: BTreeMap<String, Stored> = BTreeMap::new();
    let mut replaced = Vec::new();
    for e in statements {
        for access in e.statement.rhs.accesses() {
            store_operand(access, e, formats, sparse, &var_of, &taken, &mut tensors, &mut arrays, &mut stored).map_err(
                |d| match d.label.as_str() {
                    // A statement alone walks a copy for a further read.
                    "a second read" => d.with_note(format!(
                        "a statement alone walks a copy of `{}` for each further read: fusion=maximal substitutes \
                         the statements into one, and where that cannot run, each statement runs as its own kernel",
                        access.tensor.name
                    )),
                    _ => d,
                },
            )?;
        }
    }
    replaced.extend(stored.keys().cloned());

    // Dense inputs and the output are arguments; other outputs are locals.
    let mut dense: BTreeMap<String, TensorId> = BTreeMap::new();
    for e in statements {
        for (tname, info) in &e.tensors {
            let temporary = writers.contains_key(tname) && *tname != output;
            let sparse_output = *tname == output && formats.contains_key(tname);
            if stored.contains_key(tname) || temporary || sparse_output || dense.contains_key(tname) {
                continue;
            }
            if info.role == Role::Index {
                return Err(refuse(
                    format!("`{tname}` is an index tensor; indirect subscripts run on the tile path"),
                    e.statement.span,
                    "an indirect read",
                ));
            }
            let id = tensors.push(TensorParam {
                name: tname.clone(),
                dtype: info.dtype,
                shape: info.shape.clone(),
                output: *tname == output,
            });
            dense.insert(tname.clone(), id);
        }
    }

    let kept = react::reduce_dimensions(program, forest);
    let mut locals: PrimaryMap<LocalId, Local> = PrimaryMap::new();
    let mut local_of: BTreeMap<String, (LocalId, Addressing)> = BTreeMap::new();
    for (tname, ws) in writers.iter().filter(|(t, _)| **t != output) {
        let producer = &statements[ws[0]];
        let lhs = &producer.statement.lhs;
        let dims = plain(lhs)?;
        let keep: Vec<usize> = match kept.get(tname) {
            Some(names) => (0..dims.len()).filter(|&d| names.contains(&vars[dims[d]].name)).collect(),
            None => (0..dims.len()).collect(),
        };
        // A scalar where the loops share every dimension; the kept
        // dimensions, cleared per iteration of the shared loops, where they
        // are dense loops; else, where a sparse operand's pattern holds it,
        // values per stored position (every position belongs to one
        // iteration of the shared loops, so nothing is cleared, and a
        // sparse dimension never costs its whole extent); else the kept
        // dimensions.
        let loops = loops_of(forest, ws[0]);
        let walked = |d: usize| loops.iter().any(|(i, sp)| *i == vars[dims[d]].name && *sp != Space::Dense);
        let reduced_dense = keep.len() < dims.len() && !keep.iter().any(|&d| walked(d));
        let addressing = match in_pattern(program, forest, tname, &dims, &vars, &stored) {
            Some((p, then)) if !keep.is_empty() && !reduced_dense => Addressing::Position(p, then),
            _ => Addressing::Coords(keep),
        };
        let shape = match &addressing {
            Addressing::Coords(keep) => keep.iter().map(|&d| vars[dims[d]].extent).collect(),
            Addressing::Position(p, then) => {
                let Position::Level { tensor, level } = p else {
                    unreachable!("a pattern is a stored level")
                };
                let mut shape = vec![positions(&stored[tensor], *level)];
                shape.extend(then.iter().map(|&d| vars[dims[d]].extent));
                shape
            }
        };
        let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if elements.is_none_or(|n| n > MAX_LOCAL_ELEMENTS) {
            // (A split's temporary is named by the product it holds: the
            // user never wrote `T1`.)
            let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
            return Err(refuse(
                format!(
                    "the temporary `{tname}` of `{}` would hold {} elements, more than {MAX_LOCAL_ELEMENTS}",
                    producer.statement,
                    dims.join(" x ")
                ),
                lhs.span,
                "too large",
            )
            .with_note(
                "a program kernel keeps a temporary's dimensions that its loops do not share with the \
                 statements reading it (fusion=trie shares what their loop orders allow, fusion=none \
                 nothing); fusion=maximal substitutes it into its reader, with no temporary",
            ));
        }
        let private = matches!(addressing, Addressing::Coords(_));
        let id = locals.push(Local { name: tname.clone(), shape, private });
        local_of.insert(tname.clone(), (id, addressing));
    }

    // A sparse output takes the pattern of the operand that masks it.
    let pattern = match formats.get(&output) {
        None => None,
        Some(spec) => {
            let lhs = &last.statement.lhs;
            let dims = plain(lhs)?;
            let info = &last.tensors[&output];
            let found = in_pattern(program, forest, &output, &dims, &vars, &stored).and_then(|p| match p {
                (Position::Level { tensor, level }, then)
                    if then.is_empty()
                        && level + 1 == stored[&tensor].levels.len()
                        && formats.get(&tensor) == Some(spec)
                        && stored[&tensor].levels.iter().map(|l| l.var).eq(level_vars(
                            spec,
                            &info.shape,
                            &dims,
                        )) =>
                {
                    Some(tensor)
                }
                _ => None,
            });
            let Some(t) = found else {
                // A mask in the output's format whose last level repeats
                // coordinates (ELL's and GroupCOO's padding) has positions
                // that are not one per element.
                let repeats = stored.iter().find(|(t, s)| {
                    formats.get(*t) == Some(spec) && s.levels.last().is_some_and(|l| !l.unique)
                });
                // (The one in the format, where there is one, is named: "none
                // does here" was untrue of COO's.)
                let why = match repeats {
                    Some((t, _)) => {
                        format!("`{t}` is in its format, but with a level whose coordinates repeat")
                    }
                    None => "none does here".to_string(),
                };
                let mut refusal = refuse(
                    format!(
                        "`{output}` has a format: a program's sparse output takes the pattern of a sparse operand that masks it, in the same format (as SDDMM's output takes its mask's), and {why}"
                    ),
                    lhs.span,
                    "no pattern",
                );
                if let Some((t, _)) = repeats {
                    refusal = refusal.with_note(format!(
                        "`{t}` is in `{output}`'s format, but a level of {spec} repeats coordinates, so its stored \
                         positions are not one per element: store both in a format whose levels are unique (csr, \
                         dcsr, csf), or fuse maximally (schedule fusion=maximal)"
                    ));
                }
                return Err(refusal.with_note(format!("drop the format of `{output}` for a dense output")));
            };
            let len = positions(&stored[&t], stored[&t].levels.len() - 1);
            let id = tensors.push(TensorParam {
                name: output.clone(),
                dtype: info.dtype,
                shape: vec![len],
                output: true,
            });
            dense.insert(output.clone(), id);
            Some(t)
        }
    };
    let init = match statements[writers[&output][0]].statement.op {
        AssignOp::Assign => OutputInit::Zero,
        _ => OutputInit::Keep,
    };
    let lowerer = ProgramLowerer {
        program,
        var_of: &var_of,
        stored: &stored,
        dense: &dense,
        local_of: &local_of,
        output: &output,
        pattern: pattern.as_deref(),
        affine: RefCell::new(Vec::new()),
        search,
    };
    let body = lowerer.nodes(forest, &Reached::default())?;
    let (parallel, row_runs) = rows_apart(&body, &local_of, &stored, pattern.as_deref());
    let kernel = LevelKernel {
        name: name.to_string(),
        tensors,
        vars,
        output: dense[&output],
        assembly: None,
        reduction: Reduction::Sum,
        init,
        parallel,
        row_runs,
        lanes_over_positions: false,
        lanes: 32,
        locals,
        affine: lowerer.affine.into_inner(),
        body,
    };
    Ok(Lowered { kernel, arrays, replaced, pattern })
}

/// Whether the iterations of the one outermost loop (a dense loop, or a
/// walk of one level) write apart: every update of the output at the
/// loop's variable in its first dimension (none where the walked level's
/// coordinates repeat), every temporary a slice of the
/// iteration (kept without that variable) or held in the pattern of an
/// operand whose first level the loop binds (positions apart per row), and
/// so the output held in a pattern. Then the loop runs on threads, each
/// with its own slices: the first of the two answers. The second: where
/// the loop walks a root level whose coordinates repeat (COO's rows) and
/// every update is at its row, the iterations write apart in whole runs
/// of a row's positions.
fn rows_apart(
    body: &[Node],
    local_of: &BTreeMap<String, (LocalId, Addressing)>,
    stored: &BTreeMap<String, Stored>,
    pattern: Option<&str>,
) -> (bool, bool) {
    let (var, unique, root) = match body {
        [Node::Dense { var, .. }] => (*var, true, false),
        [Node::Merge { var, levels, full: false, .. }] if levels.len() == 1 => {
            let level = &stored[&levels[0].tensor].levels[levels[0].level];
            // (Runs of a row are contiguous where the level is ordered.)
            (*var, level.unique, levels[0].level == 0 && level.ordered)
        }
        _ => return (false, false),
    };
    let rows_of = |t: &str| stored.get(t).is_some_and(|s| s.levels[0].var == var);
    let slices = local_of.values().all(|(id, addressing)| match addressing {
        Addressing::Coords(_) => !kept_var(body, *id, var),
        Addressing::Position(Position::Level { tensor, .. }, _) => rows_of(tensor),
        Addressing::Position(Position::Root, _) => false,
    });
    // A level whose coordinates repeat (COO's rows) gives one row to
    // several iterations, which threads would update at once; each stored
    // position is still one iteration's, so stores into an output held in
    // the level's pattern (or a temporary's) write apart.
    let writes_apart = match unique {
        true => updates_at_row(body, var),
        false => !Node::any(body, &|n| matches!(n, Node::Update { .. })),
    };
    let apart = slices && pattern.is_none_or(rows_of);
    let runs = !unique && root && !writes_apart && updates_at_row(body, var);
    (apart && writes_apart, apart && runs)
}

/// Whether some access of local `id` in `nodes` is at `var`.
fn kept_var(nodes: &[Node], id: LocalId, var: VarId) -> bool {
    let read = |e: &Expr| matches!(e, Expr::Local { local, at: Place::Coords(at) } if *local == id && at.contains(&var));
    Node::any(nodes, &|n| {
        let stored = matches!(n, Node::Store { target, at: Place::Coords(at), .. }
            if *target == Target::Local(id) && at.contains(&var));
        stored || n.value().is_some_and(|v| v.any(&read))
    })
}

/// Whether every update of the dense output is at `var` in its first
/// dimension.
fn updates_at_row(nodes: &[Node], var: VarId) -> bool {
    nodes.iter().all(|n| match n {
        Node::Dense { body, .. } | Node::Entry { body, .. } | Node::Workspace { body } => {
            updates_at_row(body, var)
        }
        Node::Merge { points, .. } => points.iter().all(|p| updates_at_row(&p.body, var)),
        Node::Update { at, .. } => at.first() == Some(&var),
        _ => true,
    })
}

/// The variables of a tensor stored in `spec`, written at `dims`, in level
/// order.
fn level_vars(spec: &FormatSpec, shape: &[usize], dims: &[VarId]) -> Vec<VarId> {
    spec.levels(shape).map(|levels| levels.iter().map(|l| dims[l.dim]).collect()).unwrap_or_default()
}

/// The stored level whose positions hold a temporary written at `dims`,
/// where every statement that writes or reads it walks that operand's
/// levels over those of its dimensions (so the position is bound wherever
/// the temporary is reached), and the temporary's other dimensions: it
/// then takes values per stored position instead of per coordinate.
fn in_pattern(
    program: &Program,
    forest: &[react::Node],
    tname: &str,
    dims: &[VarId],
    vars: &PrimaryMap<VarId, Var>,
    stored: &BTreeMap<String, Stored>,
) -> Option<(Position, Vec<usize>)> {
    let users: Vec<usize> = program
        .statements
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            e.output().name == tname || e.statement.rhs.accesses().iter().any(|a| a.tensor.name == tname)
        })
        .map(|(s, _)| s)
        .collect();
    let producer = users[0];
    let lhs = &program.statements[producer].statement.lhs;
    let same = |a: &Access| {
        a.subscripts.iter().map(|s| s.to_string()).eq(lhs.subscripts.iter().map(|s| s.to_string()))
    };
    let read_alike = users.iter().skip(1).all(|&s| {
        program.statements[s]
            .statement
            .rhs
            .accesses()
            .iter()
            .filter(|a| a.tensor.name == tname)
            .all(|a| same(a))
    });
    if !read_alike {
        return None;
    }
    stored.iter().find_map(|(t, s)| {
        // The deepest run of the operand's first levels whose variables are
        // all dimensions of the temporary; the others follow each position.
        // Each of those levels unique: a level whose coordinates repeat
        // (COO's rows) gives one coordinate several positions, and a sum
        // per position is not the sum per coordinate.
        // Where the temporary holds every level's coordinate and the last
        // level is unique, a position of the last level is one element
        // even below a level that repeats (COO's rows: stored data are
        // canonical, no coordinate twice).
        let whole =
            s.levels.iter().all(|l| dims.contains(&l.var)) && s.levels.last().is_some_and(|l| l.unique);
        let depth = match whole {
            true => s.levels.len(),
            false => (1..=s.levels.len())
                .take_while(|&n| dims.contains(&s.levels[n - 1].var) && s.levels[n - 1].unique)
                .last()?,
        };
        let walked: Vec<&super::lower::StoredLevel> =
            s.levels[..depth].iter().filter(|l| !matches!(l.reach, Reach::Dense)).collect();
        if walked.is_empty() {
            return None;
        }
        // A dense level below the last walked one is located from the
        // operand's own access: a statement that does not read the operand
        // cannot reach it (CDC's middle level, under fusion=none). One
        // above a walked level (CSR's rows) is located as its parent.
        let locates = matches!(s.levels[depth - 1].reach, Reach::Dense);
        let reads_operand =
            |u: usize| program.statements[u].statement.rhs.accesses().iter().any(|a| a.tensor.name == *t);
        if locates && !users.iter().all(|&u| reads_operand(u)) {
            return None;
        }
        let walks_t = |s: usize| {
            let loops = loops_of(forest, s);
            walked.iter().all(|l| loops.contains(&(vars[l.var].name.clone(), Space::Sparse(t.clone()))))
        };
        let then: Vec<usize> =
            (0..dims.len()).filter(|&d| !s.levels[..depth].iter().any(|l| l.var == dims[d])).collect();
        users
            .iter()
            .all(|&s| walks_t(s))
            .then(|| (Position::Level { tensor: t.clone(), level: depth - 1 }, then))
    })
}

/// The loops around statement `s` in `forest`, outermost first.
fn loops_of(forest: &[react::Node], s: usize) -> Vec<(String, Space)> {
    fn walk(nodes: &[react::Node], s: usize, path: &mut Vec<(String, Space)>) -> bool {
        for n in nodes {
            match n {
                react::Node::Compute { statement, .. } if *statement == s => return true,
                react::Node::Compute { .. } => {}
                react::Node::Loop { index, space, children, .. } => {
                    path.push((index.clone(), space.clone()));
                    if walk(children, s, path) {
                        return true;
                    }
                    path.pop();
                }
            }
        }
        false
    }
    let mut path = Vec::new();
    walk(forest, s, &mut path);
    path
}

/// The number of positions of a stored operand's level `level`.
fn positions(s: &Stored, level: usize) -> usize {
    let mut n = 1usize;
    for l in &s.levels[..=level] {
        n = match &l.reach {
            Reach::Dense => n * l.extent,
            Reach::Compressed { len, .. } => *len,
            Reach::Singleton { .. } => n,
            Reach::Padded { g, .. } => n * g,
        };
    }
    n
}

struct ProgramLowerer<'a> {
    program: &'a Program,
    var_of: &'a BTreeMap<String, VarId>,
    stored: &'a BTreeMap<String, Stored>,
    dense: &'a BTreeMap<String, TensorId>,
    local_of: &'a BTreeMap<String, (LocalId, Addressing)>,
    output: &'a str,
    /// The operand whose pattern a sparse output takes.
    pattern: Option<&'a str>,
    /// The operands whose entries statements find ([`ProgramLowerer::finds`]).
    affine: RefCell<Vec<AffineOperand>>,
    /// Whether a second operand at a walked index is searched, else refused.
    search: bool,
}

/// The stored levels the loops around a node reach: walked or located
/// (`levels`), or skipped by a loop that walks another operand's level at
/// their index (`intersected`): each statement reading such an operand
/// finds its entry there ([`Node::Find`]).
#[derive(Clone, Default)]
struct Reached {
    levels: BTreeSet<(String, usize)>,
    intersected: BTreeSet<(String, usize)>,
    /// The variables of the loops around.
    bound: BTreeSet<VarId>,
}

impl Reached {
    fn contains(&self, level: &(String, usize)) -> bool {
        self.levels.contains(level)
    }
}

impl ProgramLowerer<'_> {
    fn level_ref(&self, tensor: &str, level: usize) -> LevelRef {
        super::lower::level_ref(self.stored, tensor, level)
    }

    fn nodes(&self, nodes: &[react::Node], reached: &Reached) -> Result<Vec<Node>, Diagnostic> {
        let mut out = Vec::new();
        for n in nodes {
            match n {
                react::Node::Compute { statement, .. } => out.push(self.compute(*statement, reached)?),
                react::Node::Loop { index, space, children, .. } => {
                    out.push(self.lower_loop(n, index, space, children, reached)?)
                }
            }
        }
        Ok(out)
    }

    /// A loop of the forest: the levels it locates or walks, the
    /// temporaries cleared for each of its iterations, then its children.
    fn lower_loop(
        &self,
        node: &react::Node,
        index: &str,
        space: &Space,
        children: &[react::Node],
        reached: &Reached,
    ) -> Result<Node, Diagnostic> {
        let var = self.var_of[index];
        let under = statements_under(node);
        let span = self.program.statements[under[0]].statement.span;
        // The stored operands read or walked below.
        let mut used: BTreeSet<String> = BTreeSet::new();
        for &s in &under {
            for a in self.program.statements[s].statement.rhs.accesses() {
                if self.stored.contains_key(&a.tensor.name) {
                    used.insert(a.tensor.name.clone());
                }
            }
        }
        masks_under(node, &mut used);
        let mut reached = reached.clone();
        reached.bound.insert(var);
        let mut body = Vec::new();
        let mut walk = None;
        for t in &used {
            let levels = &self.stored[t].levels;
            for (l, level) in levels.iter().enumerate() {
                let ready = l == 0 || reached.contains(&(t.clone(), l - 1));
                if level.var != var || !ready || reached.contains(&(t.clone(), l)) {
                    continue;
                }
                match (&level.reach, space) {
                    (Reach::Dense, _) => {
                        body.push(Node::Locate { level: self.level_ref(t, l), var });
                        reached.levels.insert((t.clone(), l));
                    }
                    (_, Space::Sparse(w)) if w == t => walk = Some((t.clone(), l)),
                    // Intersected with the walked operand: found by the
                    // statements that read it, where they are zero without
                    // it (`compute`). (A level whose coordinates repeat,
                    // COO's rows, would be searched entry by entry below.)
                    (Reach::Compressed { .. } | Reach::Singleton { .. }, Space::Sparse(_))
                        if level.unique && self.search =>
                    {
                        reached.intersected.insert((t.clone(), l));
                    }
                    _ => {
                        return Err(refuse(
                            format!(
                                "the loop over `{index}` would walk `{t}`'s stored coordinates together with {}; a program kernel walks one sparse operand per loop{}",
                                match space {
                                    Space::Sparse(w) => format!("`{w}`'s"),
                                    Space::Dense => "every coordinate".to_string(),
                                },
                                match space {
                                    // (What a search takes, `finds`.)
                                    Space::Sparse(_) if self.search => format!(
                                        " and searches another's level only where it holds each coordinate once under its parent, which `{t}`'s level of `{index}` does not (a level whose coordinates repeat, as COO's rows, or ELL's padded slots)"
                                    ),
                                    Space::Sparse(_) => " (it searches another for each entry on a GPU only: on CPUs the level path's merge co-iterates faster)".to_string(),
                                    Space::Dense => String::new(),
                                }
                            ),
                            span,
                            "co-iteration",
                        )
                        .with_note("run it with fusion=maximal, whose level path co-iterates"));
                    }
                }
            }
        }
        if let Space::Sparse(t) = space {
            let reads_t = || {
                under.iter().any(|&s| {
                    self.program.statements[s].statement.rhs.accesses().iter().any(|a| a.tensor.name == *t)
                })
            };
            match walk.clone() {
                Some(walked) => {
                    reached.levels.insert(walked);
                }
                // A space propagated from `t` through a temporary (T1[i,k]
                // from T[i,j,k] summed over j) that `t`'s storage cannot
                // reach here: the loop runs densely over the temporary,
                // whose other entries are zero, where nothing below reads
                // `t` itself.
                None if self.pattern != Some(t.as_str()) && !reads_t() => {}
                None => {
                    return Err(refuse(
                        format!("the loop over `{index}` walks `{t}`, but the loops above do not reach its level holding `{index}`"),
                        span,
                        "discordant",
                    )
                    .with_note(format!("store `{t}` with its levels in the order of the loops")));
                }
            }
        }
        body.extend(self.clears(node));
        let finds = self.hoisted_finds(&under, &mut reached);
        let inner = self.nodes(children, &reached)?;
        body.extend(wrap_in_finds(&finds, inner));
        Ok(match walk {
            None => Node::Dense { var, body },
            Some((t, l)) => Node::Merge {
                var,
                levels: vec![self.level_ref(&t, l)],
                full: false,
                points: vec![Point { present: vec![true], body }],
            },
        })
    }

    /// The temporaries whose users all sit under `node` and under none of
    /// its child loops: reduced to a slice of this loop's iteration.
    fn clears(&self, node: &react::Node) -> Vec<Node> {
        let react::Node::Loop { children, .. } = node else { return Vec::new() };
        let encloses = |n: &react::Node, users: &[usize]| {
            let under = statements_under(n);
            users.iter().all(|u| under.contains(u))
        };
        self.local_of
            .iter()
            .filter(|(name, (_, addressing))| {
                let users = self.users(name);
                matches!(addressing, Addressing::Coords(_))
                    && encloses(node, &users)
                    && !children.iter().any(|c| matches!(c, react::Node::Loop { .. }) && encloses(c, &users))
            })
            .map(|(_, (id, _))| Node::Clear { local: *id })
            .collect()
    }

    /// The statements that write or read `tensor`.
    fn users(&self, tensor: &str) -> Vec<usize> {
        self.program
            .statements
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                e.output().name == tensor
                    || e.statement.rhs.accesses().iter().any(|a| a.tensor.name == tensor)
            })
            .map(|(s, _)| s)
            .collect()
    }

    /// The searches a loop's body runs inside, once an iteration: for an
    /// operand intersected at levels whose variables the loops around
    /// bind, where every statement below is zero without it (SDDMM's sum
    /// over `k` substituted into one statement, `S = A*B*U*V`: one search
    /// an entry of A, not one per `k`). With their levels reached.
    fn hoisted_finds(&self, under: &[usize], reached: &mut Reached) -> Vec<(usize, usize)> {
        let mut finds = Vec::new();
        for (t, first) in reached.intersected.clone() {
            let levels = &self.stored[&t].levels;
            if reached.contains(&(t.clone(), first))
                || !levels[first..].iter().all(|l| reached.bound.contains(&l.var))
            {
                continue;
            }
            let zero = under.iter().all(|&s| {
                let rhs = &self.program.statements[s].statement.rhs;
                zero_where_absent(rhs, &|n| n == t)
            });
            if !zero || !searchable(&levels[first..]) {
                continue;
            }
            finds.extend(self.search_from(&t, first, reached));
        }
        finds
    }

    /// The searches of `t`'s levels from `first` down, as operands of
    /// [`LevelKernel::affine`] at their plain subscripts; those levels
    /// reached.
    fn search_from(&self, t: &str, first: usize, reached: &mut Reached) -> Vec<(usize, usize)> {
        let operand = self.affine_operand(t);
        let levels = first..self.stored[t].levels.len();
        reached.levels.extend(levels.clone().map(|l| (t.to_string(), l)));
        levels.map(|l| (operand, l)).collect()
    }

    /// A statement, inside the searches for the entries of the operands
    /// it reads that a loop intersected with another's walk (those not
    /// hoisted around a loop's body).
    fn compute(&self, s: usize, reached: &Reached) -> Result<Node, Diagnostic> {
        let st = &self.program.statements[s].statement;
        let (reached, finds) = self.finds(st, reached)?;
        let node = self.write(st, &reached)?;
        Ok(wrap_in_finds(&finds, vec![node]).pop().expect("one node"))
    }

    /// The levels a statement finds, outermost first (an operand's
    /// intersected level and every one below it, [`Self::search_from`]);
    /// with them reached.
    /// Skipping the statement where a search finds nothing is right only
    /// where the statement is zero without the operand (a factor of every
    /// term).
    fn finds(&self, st: &Statement, reached: &Reached) -> Result<(Reached, Vec<(usize, usize)>), Diagnostic> {
        let mut reached = reached.clone();
        let mut finds = Vec::new();
        for a in st.rhs.accesses() {
            let t = &a.tensor.name;
            let Some(stored) = self.stored.get(t) else { continue };
            let Some(first) = (0..stored.levels.len()).find(|&l| !reached.contains(&(t.clone(), l))) else {
                continue;
            };
            if !reached.intersected.contains(&(t.clone(), first)) {
                // (Read where the loops do not reach it: `expr` says why.)
                continue;
            }
            let searchable = searchable(&stored.levels[first..]);
            if !searchable || !zero_where_absent(&st.rhs, &|n| n == t) {
                let why = match searchable {
                    false => format!(
                        "`{t}`'s levels below are not all searched by coordinate (a padded level, or one whose coordinates repeat)"
                    ),
                    true => format!("`{st}` is not zero without `{t}`"),
                };
                return Err(refuse(
                    format!(
                        "`{t}` is read where a loop walks another operand's stored coordinates at its index; a program kernel searches `{t}` for the entry there and skips the statement where it finds none, so the statement must be zero without `{t}`, but {why}"
                    ),
                    a.span,
                    "co-iteration",
                )
                .with_note("run it with fusion=maximal, whose level path co-iterates"));
            }
            finds.extend(self.search_from(t, first, &mut reached));
        }
        Ok((reached, finds))
    }

    /// The index in [`LevelKernel::affine`] of stored operand `t`, at its
    /// plain subscripts (each level at its own variable), added on first
    /// use.
    fn affine_operand(&self, t: &str) -> usize {
        let mut affine = self.affine.borrow_mut();
        if let Some(i) = affine.iter().position(|o| o.tensor == t) {
            return i;
        }
        let levels: Vec<LevelRef> = (0..self.stored[t].levels.len()).map(|l| self.level_ref(t, l)).collect();
        let subscripts =
            self.stored[t].levels.iter().map(|l| Affine { terms: vec![(l.var, 1)], offset: 0 }).collect();
        affine.push(AffineOperand { tensor: t.to_string(), levels, subscripts });
        affine.len() - 1
    }

    /// The statement's write: into the output (at coordinates, or at the
    /// position of the operand whose pattern holds it) or a temporary.
    fn write(&self, st: &Statement, reached: &Reached) -> Result<Node, Diagnostic> {
        let value = self.expr(&st.rhs, reached)?;
        let name = &st.lhs.tensor.name;
        if name == self.output {
            let Some(t) = self.pattern else {
                return Ok(Node::Update { at: plain_indices(&st.lhs, self.var_of)?, value });
            };
            let level = self.stored[t].levels.len() - 1;
            if !reached.contains(&(t.to_string(), level)) {
                return Err(refuse(
                    format!("`{name}` is held in `{t}`'s pattern, which this statement's loops do not walk"),
                    st.lhs.span,
                    "not walked",
                ));
            }
            let at = Place::Position(Position::Level { tensor: t.to_string(), level }, Vec::new());
            return Ok(Node::Store { target: Target::Output, at, value });
        }
        let (local, _) = &self.local_of[name];
        Ok(Node::Store { target: Target::Local(*local), at: self.place(&st.lhs, reached)?, value })
    }

    /// Where a temporary's access lands.
    fn place(&self, a: &Access, reached: &Reached) -> Result<Place, Diagnostic> {
        let (_, addressing) = &self.local_of[&a.tensor.name];
        match addressing {
            Addressing::Coords(keep) => {
                let vars = plain_indices(a, self.var_of)?;
                Ok(Place::Coords(keep.iter().map(|&d| vars[d]).collect()))
            }
            Addressing::Position(p, then) => {
                let Position::Level { tensor, level } = p else {
                    unreachable!("a pattern is a stored level")
                };
                if !reached.contains(&(tensor.clone(), *level)) {
                    return Err(refuse(
                        format!(
                            "`{}` is held in `{tensor}`'s pattern, which this statement's loops do not walk",
                            a.tensor.name
                        ),
                        a.span,
                        "not walked",
                    ));
                }
                let vars = plain_indices(a, self.var_of)?;
                Ok(Place::Position(p.clone(), then.iter().map(|&d| vars[d]).collect()))
            }
        }
    }

    fn expr(&self, e: &Ast, reached: &Reached) -> Result<Expr, Diagnostic> {
        let go = |e: &Ast| self.expr(e, reached);
        Ok(match e {
            Ast::Literal { value, .. } => Expr::Const(*value),
            Ast::Access(a) if self.local_of.contains_key(&a.tensor.name) => {
                Expr::Local { local: self.local_of[&a.tensor.name].0, at: self.place(a, reached)? }
            }
            Ast::Access(a) if self.stored.contains_key(&a.tensor.name) => {
                let s = &self.stored[&a.tensor.name];
                let last = s.levels.len() - 1;
                if !reached.contains(&(a.tensor.name.clone(), last)) {
                    return Err(refuse(
                        format!(
                            "`{}` is read where the loops above do not reach its entries: the loop order is discordant with its format",
                            a.tensor.name
                        ),
                        a.span,
                        "not reached",
                    ));
                }
                Expr::Stored {
                    val: s.val,
                    at: Position::Level { tensor: a.tensor.name.clone(), level: last },
                }
            }
            Ast::Access(a) => {
                Expr::Dense { tensor: self.dense[&a.tensor.name], at: plain_indices(a, self.var_of)? }
            }
            Ast::Neg { expr, .. } => Expr::Neg(Box::new(go(expr)?)),
            Ast::Binary { op, lhs, rhs, span } => {
                // (A divisor that is not 0 where its stored operands have
                // no entry, `exp(A[i,j]) + 1`, is a value as any other.)
                if *op == BinOp::Div
                    && rhs.accesses().iter().any(|a| self.stored.contains_key(&a.tensor.name))
                    && zero_where_absent(rhs, &|t| self.stored.contains_key(t))
                {
                    return Err(refuse(
                        "dividing by a stored operand divides by its zeros, which iteration skips"
                            .to_string(),
                        rhs.span().to(*span),
                        "a stored divisor",
                    ));
                }
                Expr::Binary { op: *op, lhs: Box::new(go(lhs)?), rhs: Box::new(go(rhs)?) }
            }
            Ast::Call { func, args, .. } => {
                Expr::Call { func: *func, args: args.iter().map(go).collect::<Result<_, _>>()? }
            }
        })
    }
}

/// Whether a search finds an entry by coordinate in each of `levels`: none
/// padded (ELL's slots), none repeating coordinates (COO's rows, which
/// would be searched entry by entry).
fn searchable(levels: &[super::lower::StoredLevel]) -> bool {
    levels.iter().all(|l| l.unique && !matches!(l.reach, Reach::Padded { .. }))
}

/// `nodes` inside the searches `finds` (operand, level), outermost first.
fn wrap_in_finds(finds: &[(usize, usize)], nodes: Vec<Node>) -> Vec<Node> {
    finds.iter().rev().fold(nodes, |body, &(operand, level)| vec![Node::Find { operand, level, body }])
}

/// The statements below a node of the forest.
fn statements_under(node: &react::Node) -> Vec<usize> {
    match node {
        react::Node::Compute { statement, .. } => vec![*statement],
        react::Node::Loop { children, .. } => children.iter().flat_map(statements_under).collect(),
    }
}

/// The sparse operands the loops below a node walk.
fn masks_under(node: &react::Node, out: &mut BTreeSet<String>) {
    if let react::Node::Loop { space, children, .. } = node {
        if let Space::Sparse(t) = space {
            out.insert(t.clone());
        }
        children.iter().for_each(|c| masks_under(c, out));
    }
}
