//! Programs of several statements (`;` or newlines between them), or one
//! compound statement over sparse operands, run as the schedule's
//! `fusion=` says (paper 003): split into three-address form
//! ([`spindle_ir::program`]), then
//!
//! - `trie` (the default): ReACT's forest, loops shared only where the
//!   statements' prefixes agree, temporaries reduced, one kernel;
//! - `none`: one loop nest per statement in one kernel, temporaries whole
//!   (in a sparse operand's pattern where propagation puts them there);
//! - `maximal`: the statements substituted into one, TACO's fully fused
//!   nest, through the single-statement pipeline.
//!
//! `none` and `trie` kernels run on the C backend; elsewhere each statement
//! runs as its own kernel through the single-statement pipeline.
//!
//! GNN kernel 1 with `A` in CSR, under every policy, checked against the
//! reference evaluator:
//!
//! ```
//! use spindle::{CBackend, Input, Problem, Schedule, TimingOptions};
//! use spindle_formats::{Coo, DType, generate::uniform};
//!
//! let a: Coo<f64, i64> = uniform(30, 30, 90, 1)?;
//! let problem = Problem::new("Z[i,j] = A[i,k] * X[k,h] * W[h,j]")
//!     .tensor("A", a)
//!     .tensor("X", Input::random(&[30, 8], DType::F64, 2))
//!     .tensor("W", Input::random(&[8, 4], DType::F64, 3))
//!     .format("A", "csr");
//! assert!(problem.is_program());
//! for fusion in ["none", "maximal", "trie"] {
//!     let schedule: Schedule = format!("fusion={fusion}").parse()?;
//!     let run = problem.run_program(&CBackend::new(), &schedule, TimingOptions { warmup: 0, repeats: 1 }, true)?;
//!     assert!(run.checks.iter().all(|c| c.passed()), "{fusion}");
//!     assert_eq!((run.output.as_str(), run.result.shape()), ("Z", &[30, 4][..]));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};

use ndarray::ArrayD;
use spindle_formats::{Assembled, Coo, DType, FormatSpec, SparseTensor};
use spindle_ir::kernel::schedule::{Fusion, KernelKind, Path, Schedule};
use spindle_ir::lang::{
    AssignOp, Declaration, Declarations, Diagnostic, Einsum, ElemType, Expr, Span, Statement,
};
use spindle_ir::level::strip_rows;
use spindle_ir::level::{Lowered, lower_program};
use spindle_ir::program::{
    Program, evaluate_program, inline, inline_renames, parse_program, reorder_products, split_program,
    version_names,
};
use spindle_ir::react::{forest_text, fused_forest, unmet_order};
use spindle_ir::tensor::{TensorValue, Tensors};

use crate::backend::Backend;
use crate::check::{Check, expand, max_rel_error, tolerance_of};
use crate::error::{Error, Result};
use crate::input::{Input, InputData, Loaded, kernel_dtype, load, round_inputs};
use crate::problem::{Evaluation, MAX_DENSE_ELEMENTS, Prepared, Problem};
use crate::target::Target;
use crate::timing::{Timing, TimingOptions};

/// What a program's run produced.
#[derive(Clone, Debug)]
pub struct ProgramRun {
    /// The policy that made the kernels.
    pub fusion: Fusion,
    /// The statements in three-address form, in order (under `maximal`,
    /// the one statement they were substituted into).
    pub statements: Vec<String>,
    /// The forest of loops the kernel follows (`none`, `trie`), as text.
    pub forest: String,
    /// Each kernel's loop tree (or tile program), as text.
    pub kernels: Vec<String>,
    /// Each kernel's printed source.
    pub sources: Vec<String>,
    /// What the policy decided beyond its name (input-sensitive fusion).
    pub notes: Vec<String>,
    /// Each kernel's timing, in order.
    pub timings: Vec<Timing>,
    /// Each kernel's kind, in order: the schedule items it reads.
    pub kinds: Vec<KernelKind>,
    /// Each kernel's output against the reference evaluator, where asked.
    pub checks: Vec<Check>,
    /// The last statement's output and its values (dense; empty when a
    /// sparse output would not fit dense).
    pub output: String,
    pub result: ArrayD<f64>,
    /// A sparse output as the kernel wrote it.
    pub assembled: Option<Assembled>,
    /// The last statement, checked (its output's name, shape and dtype).
    pub last: Option<Einsum>,
}

impl ProgramRun {
    /// The sum of the kernels' medians.
    pub fn median_ms(&self) -> f64 {
        self.timings.iter().map(|t| t.median_ms).sum()
    }
}

/// A program's inputs: dense values, sparse entries of the tensors with a
/// format, and every input's declaration.
pub(crate) struct ProgramData {
    dense: Tensors,
    pub(crate) sparse: BTreeMap<String, Coo<f64, i64>>,
    declarations: Declarations,
}

impl Problem {
    /// The text split into three-address form (one product per statement,
    /// temporaries and undeclared outputs declared by inference), checked
    /// against the data's shapes and dtypes.
    pub fn program(&self) -> Result<Program> {
        let mut data = self.program_data()?;
        self.split(&mut data)
    }

    fn split(&self, data: &mut ProgramData) -> Result<Program> {
        Ok(self.split_noted(data)?.0)
    }

    /// The split, each product over a stored operand first reordered where
    /// its written order sums a level of the operand before a deeper one
    /// ([`reorder_products`]), with a note for each reordered statement;
    /// `data`'s values then rounded to the dtypes the statements give them.
    fn split_noted(&self, data: &mut ProgramData) -> Result<(Program, Vec<String>)> {
        let src = self.statement();
        let formats = self.formats()?;
        let mut notes = Vec::new();
        let statements: Vec<Statement> = parse_program(src)
            .map_err(|d| Error::statement(d, src))?
            .into_iter()
            .map(|s| self.check_wheres(&s, src).map(|()| s))
            .collect::<Result<Vec<Statement>>>()?
            .into_iter()
            .map(|s| match reorder_products(&s, &formats, &data.declarations) {
                Some((reordered, note)) => {
                    notes.push(note);
                    reordered
                }
                None => s,
            })
            .collect();
        // A statement whose output nothing after it reads: a program's
        // result is its last statement's output only.
        if let Some((last, before)) = statements.split_last() {
            for (n, s) in before.iter().enumerate() {
                let name = &s.lhs.tensor.name;
                // (A later statement that writes it again, `+=`, keeps it.)
                if !statements[n + 1..].iter().any(|later| {
                    later.lhs.tensor.name == *name
                        || later.rhs.accesses().iter().any(|a| a.tensor.name == *name)
                }) {
                    notes.push(format!(
                        "`{name}` (statement {}) is read by no later statement: a program's result is its last \
                         statement's output, `{}`, so `{name}` is computed and not kept; run it as a statement of \
                         its own to keep it",
                        n + 1,
                        last.lhs.tensor.name
                    ));
                }
            }
        }
        let program = split_program(&statements, &data.declarations)
            .map_err(|d| Error::statement(self.with_file_notes(d, &statements), src))?;
        self.check_temporary_dtypes(&program, &statements, src)?;
        self.check_temporary_formats(&program, &statements, src)?;
        round_inputs(&program.statements, &mut data.dense, &mut data.sparse)?;
        for einsum in &program.statements {
            spindle_ir::lang::check_subscript_reach(einsum, &|x| {
                crate::problem::largest_index(&data.dense, x)
            })
            .map_err(|d| Error::statement(d, src))?;
        }
        Ok((program, notes))
    }

    /// A dtype given to a temporary (`--shape y=N:f16`, `where y: f16`)
    /// other than the one it is held in ([`temporary_dtype`]) is refused:
    /// a program kernel keeps it in registers of that type and substitution
    /// removes it, so no fusion would keep the dtype.
    fn check_temporary_dtypes(&self, program: &Program, statements: &[Statement], src: &str) -> Result<()> {
        let held = temporary_dtype(program);
        let output = &program.statements.last().expect("a program has a statement").output().name;
        for einsum in &program.statements {
            let name = &einsum.output().name;
            if name == output {
                continue;
            }
            let wheres = statements.iter().flat_map(|s| &s.wheres).find_map(|w| match w {
                spindle_ir::lang::WhereClause::Dtype { tensor, dtype, .. } if tensor.name == *name => {
                    Some((*dtype, Some(tensor.span)))
                }
                _ => None,
            });
            let said = self.said.iter().find(|(n, _)| n == name).map(|(_, d)| (*d, None));
            let Some((given, span)) = wheres.or(said).filter(|(d, _)| *d != held) else { continue };
            let message = format!(
                "`{name}` is a temporary of the program (a statement writes it; the program's output is the \
                 last statement's), held in the kernel's compute type, {}: the dtype {} given to it would not \
                 be kept",
                held.name(),
                given.name()
            );
            let note = format!(
                "give dtypes to the inputs and to the program's output `{output}`; a temporary is computed in \
                 f64 where an input or the output is f64, else in f32"
            );
            return Err(match span {
                Some(span) => {
                    Error::statement(Diagnostic::new(message, span).with_label("here").with_note(note), src)
                }
                None => Error::input(format!("{message}\n{note}")),
            });
        }
        Ok(())
    }

    /// A format given to a temporary is refused, whatever the fusion and
    /// target: a program kernel keeps a temporary in registers or dense
    /// rows, substitution removes it, and statements run apart write it
    /// dense.
    fn check_temporary_formats(&self, program: &Program, statements: &[Statement], src: &str) -> Result<()> {
        let output = &program.statements.last().expect("a program has a statement").output().name;
        let Some(name) = program
            .statements
            .iter()
            .map(|e| &e.output().name)
            .find(|name| *name != output && self.formats.iter().any(|(n, _)| n == *name))
        else {
            return Ok(());
        };
        let message = format!(
            "`{name}` is a temporary of the program (a statement writes it; the program's output is the last \
             statement's, `{output}`) and has a format: the compiler lays temporaries out"
        );
        let note =
            format!("drop `{name}`'s format; formats are for the inputs and the last statement's output");
        Err(match statements.iter().find(|s| s.lhs.tensor.name == *name) {
            Some(s) => Error::statement(
                Diagnostic::new(message, s.lhs.span).with_label("a temporary").with_note(note),
                src,
            ),
            None => Error::input(format!("{message}\n{note}")),
        })
    }

    /// The versions of tensors written again with `=` and their names
    /// ([`version_names`]), where the text parses.
    fn version_names(&self, data: &ProgramData) -> Vec<(String, String, usize, usize)> {
        parse_program(self.statement()).map(|s| version_names(&s, &data.declarations)).unwrap_or_default()
    }

    pub(crate) fn program_data(&self) -> Result<ProgramData> {
        let formats = self.formats()?;
        let mut data =
            ProgramData { dense: Tensors::new(), sparse: BTreeMap::new(), declarations: Declarations::new() };
        for (name, input) in &self.inputs {
            let loaded = load(input).map_err(|e| e.context(&format!("tensor {name}")))?;
            let dtype = kernel_dtype(input, &loaded);
            self.check_declared_shape(name, loaded.shape())?;
            data.declarations.insert(name.clone(), Declaration { shape: loaded.shape().to_vec(), dtype });
            match loaded {
                Loaded::Dense(TensorValue::Values(v)) if formats.contains_key(name) => {
                    data.sparse.insert(name.clone(), Coo::from_ndarray(&v)?);
                }
                Loaded::Dense(value) => {
                    data.dense.insert(name.clone(), value);
                }
                Loaded::Sparse(coo) if formats.contains_key(name) => {
                    data.sparse.insert(name.clone(), coo);
                }
                Loaded::Sparse(coo) => {
                    let dense = dense_copy(name, &coo)?;
                    data.dense.insert(name.clone(), TensorValue::Values(dense));
                }
                Loaded::Shape(_) => {}
            }
        }
        Ok(data)
    }

    /// The formats given, parsed.
    pub fn formats(&self) -> Result<BTreeMap<String, FormatSpec>> {
        self.formats
            .iter()
            .map(|(n, f)| {
                f.parse().map(|f| (n.clone(), f)).map_err(|e| Error::input(format!("format of {n}: {e}")))
            })
            .collect()
    }

    /// Whether the text runs as a program: several statements, or one
    /// compound product (a product inside a product) over an operand with
    /// a format and no indirect or affine subscripts, its output dense or
    /// in the format of an operand. (A convolution's product runs as one
    /// statement: subsection loops walk the stored operand's windows, which
    /// the program path's plain loops cannot.) A product over grouped operands alone
    /// (GroupCOO, BlockGroupCOO, BCSR) is Insum's one fused kernel instead, as in
    /// the notebook: the point-cloud layer
    /// `Out[x,m] += Map[x,y,z] * In[y,c] * W[z,c,m]` with Map in GroupCOO;
    /// over GroupCOO, unless the program does at most half the products
    /// ([`Problem::split_over_groups`]: GNN's `A[i,k] * X[k,h] * W[h,j]`).
    pub fn is_program(&self) -> bool {
        self.runs_as_program(false)
    }

    /// Whether `run` on `target` runs the text as a program: where
    /// [`Problem::is_program`] says so, and on a GPU also one plain product
    /// whose output takes the format of an operand (`S[i,j] = A[i,j] *
    /// D[i,j]`, S and A in CSR): the GPU's level path assembles no sparse
    /// output, but a program kernel holds it in the pattern of the operand
    /// that masks it, one value per stored entry, as SDDMM's.
    pub fn is_program_on(&self, target: Target) -> bool {
        self.runs_as_program(target != Target::C)
    }

    /// `plain_sparse_output`: one product that is not compound counts too
    /// where its output has a format.
    fn runs_as_program(&self, plain_sparse_output: bool) -> bool {
        let Ok(statements) = parse_program(self.statement()) else {
            // Several pieces are a program with a mistake, which its parser
            // reports where it is (as one statement, at the first `;`); a
            // statement written over several lines parses whole.
            let pieces = self.statement().split([';', '\n']).filter(|piece| !piece.trim().is_empty()).count();
            return pieces > 1 && spindle_ir::lang::parse(self.statement()).is_err();
        };
        match &statements[..] {
            [one] => {
                let output = &one.lhs.tensor.name;
                let format_of = |name: &str| self.formats.iter().find(|(n, _)| n == name).map(|(_, f)| f);
                let inputs: Vec<&String> =
                    self.formats.iter().filter(|(n, _)| n != output).map(|(_, f)| f).collect();
                // A sparse output only in an input's format: the pattern
                // of the operand that masks it (SDDMM's).
                let output_fits = format_of(output).is_none_or(|f| inputs.contains(&f));
                let grouped = |f: &&String| {
                    matches!(
                        f.parse(),
                        Ok(FormatSpec::GroupCoo { .. }
                            | FormatSpec::BlockGroupCoo { .. }
                            | FormatSpec::Bcsr { .. })
                    )
                };
                let group_coo = |f: &&String| matches!(f.parse(), Ok(FormatSpec::GroupCoo { .. }));
                // (Not a sparse output given data: the lowering refuses to
                // accumulate into one, on every target.)
                let given =
                    self.inputs.iter().any(|(n, i)| n == output && !matches!(i.data, InputData::Shape(_)));
                let sparse_output = plain_sparse_output && format_of(output).is_some() && !given;
                !inputs.is_empty()
                    && output_fits
                    && (compound(&one.rhs) || sparse_output)
                    && !indirect(one)
                    && !affine(one)
                    && (!inputs.iter().all(grouped)
                        || (inputs.iter().all(group_coo) && self.split_over_groups().is_some()))
            }
            _ => true,
        }
    }

    /// Where one compound product over GroupCOO operands alone runs as a
    /// program: the products its program kernel (`fusion=trie`) is expected
    /// to do ([`forest_products`]) and the one fused kernel's over the
    /// operands' entries ([`expected_products`]), where the first is at
    /// most half the second. GNN's `Z[i,j] = A[i,k] * X[k,h] * W[h,j]`
    /// keeps `A * X` per row of A and multiplies it by W once a row (cora,
    /// H = 128, J = 16: 6.9e6 products against 2.2e7, and 5x faster on C);
    /// the point-cloud layer's temporary is one per entry of its map, as
    /// many products as Insum's kernel, which stays. The data are read for
    /// the counts; a problem whose data do not load is not a program here
    /// (the run then says why).
    fn split_over_groups(&self) -> Option<(f64, f64)> {
        let mut data = self.program_data().ok()?;
        let program = self.split(&mut data).ok()?;
        split_over_groups(&program, &self.formats().ok()?, &data)
    }

    /// Runs the program under `schedule`'s `fusion=` on `backend`, each
    /// kernel timed with `opts` and, with `check`, its output compared with
    /// the reference evaluator's run of the program. Formats apply to the
    /// tensors the program reads; what it writes stays dense.
    pub fn run_program(
        &self,
        backend: &dyn Backend,
        schedule: &Schedule,
        opts: TimingOptions,
        check: bool,
    ) -> Result<ProgramRun> {
        let data = self.program_data()?;
        let versions = self.version_names(&data);
        self.run_program_on(data, backend, schedule, opts, check).map_err(|e| versions_noted(e, &versions))
    }

    fn run_program_on(
        &self,
        mut data: ProgramData,
        backend: &dyn Backend,
        schedule: &Schedule,
        opts: TimingOptions,
        check: bool,
    ) -> Result<ProgramRun> {
        let (program, mut reordered) = self.split_noted(&mut data)?;
        let last = program.statements.last().expect("a program has a statement").clone();
        let formats = self.formats()?;
        let one_line = parse_program(self.statement()).is_ok_and(|s| s.len() == 1);
        if one_line
            && formats.values().all(|f| matches!(f, FormatSpec::GroupCoo { .. }))
            && let Some((split, one)) = split_over_groups(&program, &formats, &data)
        {
            reordered.push(format!(
                "over GroupCOO alone a compound product is Insum's one fused kernel, but this one split into \
                 statements is expected to do about {split:.3e} products, the fused kernel {one:.3e}, so it runs \
                 as a program"
            ));
        }
        reordered.extend(unmet_order(&program, &formats, &schedule.order));
        check_schedule_indices(&program, schedule, &formats)
            .map_err(|d| Error::statement(d, self.statement()))?;
        crate::problem::check_dense_output(&last, &formats)?;
        let once = self.input_sensitive(&program, &formats, &data, schedule);
        let mut run = match (schedule.fusion, once) {
            (_, _) if backend.target() != Target::C && program.statements.len() == 1 => {
                // One plain product whose sparse output a GPU's program
                // kernel holds in its mask's pattern ([`Problem::is_program_on`]):
                // nothing to fuse, whatever the fusion.
                return match self.on_device(&program, &formats, &data, backend, schedule, opts)? {
                    Ok(mut run) => {
                        // (One statement's kernel is the same under every fusion.)
                        run.fusion = schedule.fusion;
                        self.checked(with_notes(run, reordered), &program, &data, check)
                    }
                    Err(refused) => {
                        let why = format!(
                            "nor does a kernel that holds `{}` in the pattern of an operand that masks it: {refused}",
                            last.output().name
                        );
                        self.statement_kernels(&program, reordered, &why, backend, schedule, opts, check)
                    }
                };
            }
            (Fusion::Maximal, _) => {
                self.run_maximal(self.maximal(&program)?, &program, &data, backend, schedule, opts)?
            }
            (Fusion::Trie, Some((why, prepared))) => {
                match self.maximal_or_apart(prepared, why, &program, &data, backend, schedule, opts, check)? {
                    Ok(run) => run,
                    Err(apart) => return Ok(with_notes(apart, reordered)),
                }
            }
            (Fusion::Trie, None) if backend.target() != Target::C && program.statements.len() > 1 => {
                let refused = match self.on_device(&program, &formats, &data, backend, schedule, opts)? {
                    Ok(run) => return self.checked(with_notes(run, reordered), &program, &data, check),
                    Err(refused) => {
                        format!(
                            "ReACT's program kernel does not run on {}: {refused}",
                            backend.target().title()
                        )
                    }
                };
                match self.fewer_products_fused(&program, &data) {
                    Ok((why, prepared)) => {
                        let why = format!("{refused}; {why}");
                        match self.maximal_or_apart(
                            prepared, why, &program, &data, backend, schedule, opts, check,
                        )? {
                            Ok(run) => run,
                            Err(apart) => return Ok(with_notes(apart, reordered)),
                        }
                    }
                    Err(why) => {
                        let mut run = self.statement_kernels(
                            &program, reordered, &refused, backend, schedule, opts, check,
                        )?;
                        run.notes.extend(why);
                        return Ok(run);
                    }
                }
            }
            (fusion, _) if backend.target() != Target::C => {
                let why = match fusion {
                    Fusion::None => {
                        "a GPU's program kernel is one loop nest, a warp per iteration of its outermost \
                                     loop, and fusion=none gives each statement its own"
                    }
                    _ => "one statement",
                };
                return self.statement_kernels(&program, reordered, why, backend, schedule, opts, check);
            }
            (fusion, _) if program.statements.iter().any(|e| affine(&e.statement)) => {
                let mut run = self.run_each_statement(&program, backend, schedule, opts, check)?;
                run.notes.splice(0..0, reordered);
                run.notes.push(format!(
                    "fusion={fusion}: a statement reads affine subscripts (a convolution), whose windows a \
                     program's shared loops do not walk, so each statement runs as its own kernel"
                ));
                return Ok(run);
            }
            (fusion, _) => {
                let forest = fused_forest(&program, &formats, fusion, &schedule.order);
                let lowered = self.lower_forest(&program, &forest, &formats, &data, schedule, Target::C);
                let fused = match self.or_maximal(&program, lowered, fusion) {
                    Err(Error::Statement { diagnostic, .. })
                        if APART.contains(&diagnostic.label.as_str()) =>
                    {
                        // What no program kernel runs, each statement alone
                        // may (its level path co-iterates, walks copies).
                        let mut run = self.run_each_statement(&program, backend, schedule, opts, check)?;
                        run.notes.splice(0..0, reordered);
                        run.notes.push(format!(
                            "fusion={fusion}: {}{}; each statement runs as its own kernel instead, its \
                             temporaries dense",
                            diagnostic.message,
                            match fusion {
                                Fusion::Trie => ", and the statements substituted into one cannot run either",
                                _ => "",
                            }
                        ));
                        return Ok(run);
                    }
                    other => other?,
                };
                let (lowered, notes) = match fused {
                    Ok(lowered) => lowered,
                    Err((why, prepared)) => {
                        return match self.maximal_or_apart(
                            prepared, why, &program, &data, backend, schedule, opts, check,
                        )? {
                            Ok(run) => self.checked(with_notes(run, reordered), &program, &data, check),
                            Err(apart) => Ok(with_notes(apart, reordered)),
                        };
                    }
                };
                let executable = backend.compile_levels(&lowered, schedule)?;
                self.run_fused(
                    &program,
                    (fusion, &forest),
                    (lowered, notes),
                    executable,
                    &formats,
                    &data,
                    opts,
                )?
            }
        };
        run.notes.splice(0..0, reordered);
        self.checked(run, &program, &data, check)
    }

    /// A program kernel (`fusion` over `forest`, lowered, with the notes of
    /// its lowering) run from `executable`: its output in a sparse
    /// operand's pattern where it has one.
    #[allow(clippy::too_many_arguments)]
    fn run_fused(
        &self,
        program: &Program,
        (fusion, forest): (Fusion, &[spindle_ir::react::Node]),
        (lowered, notes): (Lowered, Vec<String>),
        executable: Box<dyn crate::backend::Executable>,
        formats: &BTreeMap<String, FormatSpec>,
        data: &ProgramData,
        opts: TimingOptions,
    ) -> Result<ProgramRun> {
        let last = program.statements.last().expect("a program has a statement");
        let mut uploaded = executable.upload(&data.dense)?;
        uploaded.launch()?;
        let values = uploaded.output()?;
        let timing = uploaded.time(opts)?;
        // An output in a sparse operand's pattern: its structure with the
        // kernel's values.
        let (result, assembled) = match &lowered.pattern {
            None => (values, None),
            Some(t) => {
                let pattern = SparseTensor::from_coo(&data.sparse[t], &formats[t])?;
                let assembled = pattern.with_values(values.iter().copied().collect());
                (expand(&assembled).unwrap_or_else(|_| ArrayD::zeros(vec![0])), Some(assembled))
            }
        };
        Ok(ProgramRun {
            fusion,
            statements: program.statements.iter().map(|e| e.statement.to_string()).collect(),
            forest: forest_text(forest),
            kernels: vec![lowered.kernel.to_string()],
            sources: vec![executable.source().to_string()],
            notes,
            timings: vec![timing],
            // (A CUDA executable reports its launch.)
            kinds: vec![KernelKind::levels(&lowered.kernel, executable.report().launch.is_some())],
            checks: Vec::new(),
            output: last.output().name.clone(),
            result,
            assembled,
            last: Some(last.clone()),
        })
    }

    /// ReACT's program kernel (`fusion=trie`) on a GPU target, where its
    /// printer takes it (scalar temporaries, one outermost loop); else
    /// (`Err`) why not.
    fn on_device(
        &self,
        program: &Program,
        formats: &BTreeMap<String, FormatSpec>,
        data: &ProgramData,
        backend: &dyn Backend,
        schedule: &Schedule,
        opts: TimingOptions,
    ) -> Result<std::result::Result<ProgramRun, String>> {
        if program.statements.iter().any(|e| affine(&e.statement)) {
            return Ok(Err("a statement reads affine subscripts (a convolution)".into()));
        }
        let forest = fused_forest(program, formats, Fusion::Trie, &schedule.order);
        let lowered = match self.lower_forest(program, &forest, formats, data, schedule, backend.target()) {
            Ok(lowered) => lowered,
            Err(e) => return Ok(Err(first_line(&e))),
        };
        match backend.compile_levels(&lowered.0, schedule) {
            Ok(executable) => self
                .run_fused(program, (Fusion::Trie, &forest), lowered, executable, formats, data, opts)
                .map(Ok),
            Err(Error::CudaPrint(spindle_cuda::print::PrintError::Levels { reason, .. })) => Ok(Err(reason)),
            Err(e) => Err(e),
        }
    }

    /// Each statement as its own kernel, its temporaries dense, where no
    /// program kernel runs on `backend` (`why` not).
    #[allow(clippy::too_many_arguments)]
    fn statement_kernels(
        &self,
        program: &Program,
        reordered: Vec<String>,
        why: &str,
        backend: &dyn Backend,
        schedule: &Schedule,
        opts: TimingOptions,
        check: bool,
    ) -> Result<ProgramRun> {
        let fusion = schedule.fusion;
        let mut run = self.run_each_statement(program, backend, schedule, opts, check).map_err(|e| {
            // One statement here is a sparse output no GPU program kernel
            // held ([`Problem::is_program_on`]): why it did not.
            match (program.statements.len(), e) {
                (1, e @ (Error::Statement { .. } | Error::OutputShape { .. })) => e,
                (1, e) => Error::Input(format!("{e}; {why}")),
                // (Statements apart where one kernel was asked for: why
                // that one was refused, which the run's notes would say.)
                (_, Error::Input(e)) if fusion != Fusion::None => {
                    Error::Input(format!("{e}; fusion={fusion} runs them apart: {why}"))
                }
                (_, e) => e,
            }
        })?;
        run.notes.splice(0..0, reordered);
        if program.statements.len() > 1 {
            run.notes.push(format!(
                "fusion={fusion}: on {} each statement runs as its own kernel, its temporaries dense ({why}; \
                 fusion=maximal substitutes the statements into one, which runs where that one statement prints)",
                backend.target().title()
            ));
        }
        Ok(run)
    }

    /// Where program kernels with temporaries do not print (every target
    /// but C), whether the statements substituted into one do fewer
    /// products than the statements one by one with dense temporaries
    /// (SDDMM's `U[i,k] * V[j,k]` at every (i,j), or its split's
    /// `T[i,j,k]`, against only A's entries: a dense temporary of M x N x
    /// K elements): that statement prepared and the note that says so, or
    /// (`Err`) the note that says why not, where the counts say. Products
    /// are counted by [`expected_products`], over the statement as written
    /// (a format's rewrite renames its operands).
    #[allow(clippy::type_complexity)]
    fn fewer_products_fused(
        &self,
        program: &Program,
        data: &ProgramData,
    ) -> std::result::Result<(String, (String, Prepared)), Option<String>> {
        let (text, prepared) = self.maximal(program).map_err(|_| None)?;
        let (fused, apart) = product_counts(program, data, &prepared);
        let counts = format!(
            "the statements substituted into one do about {fused:.3e} products, one by one with dense \
             temporaries about {apart:.3e}"
        );
        match fused <= apart {
            true => Ok((format!("fusion=trie: {counts}, so fused maximally"), (text, prepared))),
            false => Err(Some(format!("fusion=trie: {counts}, so they run apart"))),
        }
    }

    /// The substituted statement run (`why` fuses it maximally), or where
    /// it cannot run on `backend` (a kernel the GPU's level path does not
    /// print yet, say), each statement as its own kernel (as `Err`), with a
    /// note that says why. Only a failure of both is an error.
    #[allow(clippy::too_many_arguments)]
    fn maximal_or_apart(
        &self,
        prepared: (String, Prepared),
        why: String,
        program: &Program,
        data: &ProgramData,
        backend: &dyn Backend,
        schedule: &Schedule,
        opts: TimingOptions,
        check: bool,
    ) -> Result<std::result::Result<ProgramRun, ProgramRun>> {
        match self.run_maximal(prepared, program, data, backend, schedule, opts) {
            Ok(mut run) => {
                run.fusion = Fusion::Trie;
                run.notes.push(why);
                Ok(Ok(run))
            }
            Err(e) => {
                let mut run =
                    self.run_each_statement(program, backend, schedule, opts, check).map_err(|apart| {
                        // (Why no one kernel runs it, which the run's notes
                        // would have said.)
                        match apart {
                            Error::Input(apart) => Error::input(format!(
                                "{apart}; one kernel for the program was refused: {why}; and the substituted \
                             statement cannot run on {} ({})",
                                backend.target().title(),
                                first_line(&e)
                            )),
                            other => other,
                        }
                    })?;
                run.notes.push(format!(
                    "{why}; but the substituted statement cannot run on {} ({}), so each statement runs as its \
                     own kernel instead, its temporaries dense",
                    backend.target().title(),
                    first_line(&e)
                ));
                Ok(Err(run))
            }
        }
    }

    /// `run`, with `check`, compared with the reference evaluator's run of
    /// the program, as the output's dtype holds it (see
    /// `Compiled::compare`); a substituted statement's run notes what the
    /// substitution renamed.
    fn checked(
        &self,
        mut run: ProgramRun,
        program: &Program,
        data: &ProgramData,
        check: bool,
    ) -> Result<ProgramRun> {
        // (Every run of the statements substituted into one passes here,
        // under fusion=maximal or trie's choice: what the substitution
        // renamed, which its printed statement shows.)
        if run.statements.len() == 1 && program.statements.len() > 1 {
            run.notes.extend(inline_renames(program));
        }
        if !check {
            return Ok(run);
        }
        // The kernel's output first: one too big to compare dense is
        // refused before the reference builds it (8 GB on ca-CondMat).
        let dtype = program.statements.last().expect("a program has a statement").output().dtype;
        let got = match &run.assembled {
            Some(a) => match expand(a) {
                Ok(dense) => dense,
                // Too big to compare dense: entry by entry where an operand
                // masks the output (the statements substituted into one).
                Err(too_big) => {
                    let prepared = match inline(program) {
                        Ok(whole) => Some(self.substituted(program, &whole, false).prepare()?),
                        Err(_) => None,
                    };
                    let Some(want) = prepared.as_ref().and_then(Prepared::reference_entries) else {
                        return Err(too_big);
                    };
                    let tolerance = tolerance_of(&program.statements);
                    run.checks = vec![crate::check::check_entries(a, want?, dtype, tolerance)?];
                    return Ok(run);
                }
            },
            None => run.result.clone(),
        };
        let want = self.reference_of(program, data)?.mapv(|w| crate::check::as_stored(dtype, w));
        let stored = run.assembled.as_ref().map(Assembled::nnz);
        run.checks = vec![Check {
            max_rel_error: max_rel_error(&got, &want),
            tolerance: tolerance_of(&program.statements),
            stored,
        }];
        Ok(run)
    }

    /// The program's kernel under `schedule`'s `fusion=`, lowered and not
    /// run (what `spindle compile` shows): `none` and `trie` from their
    /// forest; `maximal`, or `trie` where input-sensitive fusion decides
    /// so, the substituted statement's level-path kernel (on a GPU
    /// `target`, where it writes a sparse output, that one statement's
    /// program kernel, as `run` runs it). With what the policy decided.
    pub fn program_kernel(&self, schedule: &Schedule, target: Target) -> Result<(Lowered, Vec<String>)> {
        let data = self.program_data()?;
        let versions = self.version_names(&data);
        self.program_kernel_of(data, schedule, target).map_err(|e| versions_noted(e, &versions))
    }

    fn program_kernel_of(
        &self,
        mut data: ProgramData,
        schedule: &Schedule,
        target: Target,
    ) -> Result<(Lowered, Vec<String>)> {
        let (program, mut reordered) = self.split_noted(&mut data)?;
        let formats = self.formats()?;
        reordered.extend(unmet_order(&program, &formats, &schedule.order));
        let once = self.input_sensitive(&program, &formats, &data, schedule);
        let maximal = match (schedule.fusion, once) {
            (Fusion::Maximal, _) => Some((None, self.maximal(&program)?)),
            (_, Some((why, prepared))) => Some((Some(why), prepared)),
            _ => None,
        };
        if let Some((why, (_, prepared))) = maximal {
            let notes: Vec<String> =
                reordered.into_iter().chain(why).chain(inline_renames(&program)).collect();
            let output = &prepared.einsum.output().name;
            if target != Target::C && self.formats.iter().any(|(n, _)| n == output) {
                let one = self.substituted_program(&program, &data)?;
                let forest = fused_forest(&one, &formats, Fusion::Trie, &schedule.order);
                let (lowered, stripped) =
                    self.lower_forest(&one, &forest, &formats, &data, schedule, target)?;
                return Ok((lowered, notes.into_iter().chain(stripped).collect()));
            }
            let levels = Schedule { path: Path::Levels, ..schedule.clone() };
            return Ok((prepared.lower_levels(&levels)?, notes));
        }
        let forest = fused_forest(&program, &formats, schedule.fusion, &schedule.order);
        let lowered = self.lower_forest(&program, &forest, &formats, &data, schedule, target);
        let fused = self.or_maximal(&program, lowered, schedule.fusion).map_err(|e| match e {
            Error::Statement { diagnostic, text } if APART.contains(&diagnostic.label.as_str()) => Error::Statement {
                diagnostic: Box::new(diagnostic.with_note(
                    "no one kernel runs this program: `spindle run` runs each statement as its own kernel",
                )),
                text,
            },
            other => other,
        })?;
        match fused {
            Ok((lowered, notes)) => Ok((lowered, reordered.into_iter().chain(notes).collect())),
            Err((why, (_, prepared))) => {
                let levels = Schedule { path: Path::Levels, ..schedule.clone() };
                let notes = reordered.into_iter().chain([why]).chain(inline_renames(&program)).collect();
                Ok((prepared.lower_levels(&levels)?, notes))
            }
        }
    }

    /// The forest's kernel, its rows in strips as `schedule`'s `strip=`
    /// says, with what that decided.
    fn lower_forest(
        &self,
        program: &Program,
        forest: &[spindle_ir::react::Node],
        formats: &BTreeMap<String, FormatSpec>,
        data: &ProgramData,
        schedule: &Schedule,
        target: Target,
    ) -> Result<(Lowered, Vec<String>)> {
        let search = target != Target::C;
        let mut lowered = lower_program(program, forest, formats, &data.sparse, search, "spindle")
            .map_err(|d| Error::statement(d, self.statement()))?;
        let notes = strip_rows(&mut lowered.kernel, schedule.strip).into_iter().collect();
        Ok((lowered, notes))
    }

    /// [`input_sensitive`] fusion, or a trie forest whose loops would do
    /// many times the products of the statements substituted into one
    /// ([`forest_products`]: a temporary kept dense where no stored
    /// operand's coordinates reach its loops, as where its reader reads it
    /// transposed, `T1[j,i]`), where the substituted statement can be
    /// prepared (with that statement, prepared): a stored operand read at
    /// two subscripts after substitution (`s = y[i] * y[i]` with `y` from
    /// `A`) cannot, and trie, as asked, runs the statements instead of
    /// failing on one the user never wrote.
    fn input_sensitive(
        &self,
        program: &Program,
        formats: &BTreeMap<String, FormatSpec>,
        data: &ProgramData,
        schedule: &Schedule,
    ) -> Option<(String, (String, Prepared))> {
        if let Some(why) = input_sensitive(program, formats, data, schedule.fusion) {
            return Some((why, self.maximal(program).ok()?));
        }
        if schedule.fusion != Fusion::Trie || inline(program).is_err() {
            return None;
        }
        let forest = fused_forest(program, formats, Fusion::Trie, &schedule.order);
        let (trie, heaviest) = forest_products(program, &forest, &data.sparse);
        // (Below this a kernel takes milliseconds whatever its fusion, and
        // the substituted statement is not prepared, which reads its data.)
        if trie < DENSE_FOREST_PRODUCTS {
            return None;
        }
        let maximal = self.maximal(program).ok()?;
        let (fused, _) = product_counts(program, data, &maximal.1);
        (trie > TRIE_OVER_MAXIMAL * fused).then(|| {
            (
                format!(
                    "fusion=trie: its loops would do about {trie:.3e} products ({heaviest}), the statements \
                     substituted into one about {fused:.3e}, so fused maximally"
                ),
                maximal,
            )
        })
    }

    /// The forest's kernel as lowered, or under trie, where the forest was
    /// refused for one of the things a program kernel does not do
    /// ([`APART`]: a loop that walks two stored operands together,
    /// `T[i,j] = A[i,j] * B[i,j]`, ...) and the statements substitute into
    /// one, that statement (prepared, as `Err`), whose level path
    /// co-iterates or gathers the output in a workspace, with the note that
    /// says why. Any other refusal, and any refusal under `fusion=none`,
    /// stands (`run_program` then runs [`APART`]'s statements apart).
    #[allow(clippy::type_complexity)]
    fn or_maximal(
        &self,
        program: &Program,
        lowered: Result<(Lowered, Vec<String>)>,
        fusion: Fusion,
    ) -> Result<std::result::Result<(Lowered, Vec<String>), (String, (String, Prepared))>> {
        let refused = match lowered {
            Ok(lowered) => return Ok(Ok(lowered)),
            Err(e) => e,
        };
        let why = match &refused {
            Error::Statement { diagnostic, .. }
                if fusion == Fusion::Trie && APART.contains(&diagnostic.label.as_str()) =>
            {
                diagnostic.message.clone()
            }
            _ => return Err(refused),
        };
        match self.maximal(program) {
            Ok(maximal) => Ok(Err((
                format!("fusion=trie: {why}; fused maximally instead (one statement on the level path)"),
                maximal,
            ))),
            Err(_) => Err(refused),
        }
    }

    /// `fusion=maximal`'s statement: the program's statements substituted
    /// into one, as text and prepared as a statement of its own.
    fn maximal(&self, program: &Program) -> Result<(String, Prepared)> {
        // Before substituting: a read of what a later statement writes
        // would become a read of the output (and the refusal would point
        // at a statement the user never wrote).
        spindle_ir::level::written_after_read(program).map_err(|d| Error::statement(d, self.statement()))?;
        let statement = inline(program).map_err(|d| Error::statement(d, self.statement()))?;
        let prepared = self.substituted(program, &statement, true).prepare().map_err(substituted_note)?;
        Ok((statement.to_string(), prepared))
    }

    /// Runs the substituted statement: on C on the level path where
    /// operands have formats (TACO's one nest, as ReACT compares); on a
    /// GPU where the schedule puts that statement (the tile path's
    /// gather–dot–scatter for SDDMM, where the level path's warp would
    /// walk a row's dot products on one lane). A sparse output, which the
    /// GPU's level path does not assemble, is held there by the program
    /// kernel of that one statement, in the pattern of the operand that
    /// masks it (SDDMM's, `S[i,j] = U[i,k] * V[j,k] * A[i,j]`).
    fn run_maximal(
        &self,
        (text, prepared): (String, Prepared),
        program: &Program,
        data: &ProgramData,
        backend: &dyn Backend,
        schedule: &Schedule,
        opts: TimingOptions,
    ) -> Result<ProgramRun> {
        let output = &prepared.einsum.output().name;
        if backend.target() != Target::C && self.formats.iter().any(|(n, _)| n == output) {
            let one = self.substituted_program(program, data)?;
            return match self.on_device(&one, &self.formats()?, data, backend, schedule, opts)? {
                Ok(mut run) => {
                    run.fusion = Fusion::Maximal;
                    Ok(run)
                }
                Err(refused) => Err(Error::input(format!(
                    "fusion=maximal: the statements substituted into one, `{text}`, write the sparse output \
                     `{output}`, which {} holds only in the pattern of an operand that masks it, and that \
                     kernel does not print: {refused}",
                    backend.target().title()
                ))),
            };
        }
        let mut schedule = schedule.clone();
        if !self.formats.is_empty() && backend.target() == Target::C {
            schedule.path = Path::Levels;
        }
        let compiled = prepared.compile(backend, &schedule)?;
        let (result, assembled, timing) = match compiled.assembles() {
            true => {
                let (assembled, timing) = compiled.assemble_and_time(opts)?;
                (expand(&assembled).unwrap_or_else(|_| ArrayD::zeros(vec![0])), Some(assembled), timing)
            }
            false => {
                let (result, timing) = compiled.run_and_time(opts)?;
                (result, None, timing)
            }
        };
        Ok(ProgramRun {
            fusion: Fusion::Maximal,
            statements: vec![text],
            forest: String::new(),
            kernels: vec![compiled.kernel.to_string()],
            sources: vec![compiled.source().to_string()],
            notes: Vec::new(),
            timings: vec![timing],
            kinds: vec![compiled.kernel.kind(backend.target() != Target::C)],
            checks: Vec::new(),
            output: prepared.einsum.output().name.clone(),
            result,
            assembled,
            last: Some(prepared.einsum.clone()),
        })
    }

    /// The program's statements substituted into one, as a program of that
    /// one statement (not split again), its output declared as the
    /// program's.
    fn substituted_program(&self, program: &Program, data: &ProgramData) -> Result<Program> {
        let statement = inline(program).map_err(|d| Error::statement(d, self.statement()))?;
        let out = &program.statements.last().expect("a program has a statement").output().name;
        let temporaries: BTreeMap<String, Declaration> = program
            .temporaries
            .iter()
            .filter(|(n, _)| *n == out)
            .map(|(n, d)| (n.clone(), d.clone()))
            .collect();
        let mut declarations = data.declarations.clone();
        declarations.extend(temporaries.clone());
        let einsum = spindle_ir::lang::check(&statement, &declarations)
            .map_err(|d| Error::statement(d, &statement.to_string()))?;
        Ok(Program { statements: vec![einsum], temporaries })
    }

    /// The statements substituted into `statement` as a problem of its
    /// own: the inputs it reads, the program's output (declared or
    /// inferred), and the formats of what it reads (and of the output,
    /// with `output_format`).
    fn substituted(&self, program: &Program, statement: &Statement, output_format: bool) -> Problem {
        let text = statement.to_string();
        let mut problem = Problem::new(text.as_str());
        for (name, input) in self.inputs.iter().filter(|(n, _)| mentions(statement, n)) {
            problem = problem.tensor(name.as_str(), input.clone());
        }
        let out = program.statements.last().expect("a program has a statement").output();
        if !self.inputs.iter().any(|(n, _)| *n == out.name) {
            problem = problem.tensor(out.name.as_str(), Input::shape(&out.shape, out.dtype));
        }
        for (name, spec) in self.formats.iter().filter(|(n, _)| mentions(statement, n)) {
            if output_format || *name != out.name {
                problem = problem.format(name.as_str(), spec.as_str());
            }
        }
        problem
    }

    /// The program's output by the reference evaluator: the statements
    /// substituted into one, evaluated as any statement is (over its
    /// operands' format arrays where the rewrite takes them, so the walk
    /// visits stored entries only), or the three-address statements one by
    /// one, each so, where that walks fewer points; where they do not
    /// substitute, the statements one by one over dense copies.
    /// The inputs' formats checked against `data` (the program's split
    /// checks the rest).
    pub(crate) fn check_program_formats(&self, data: &ProgramData) -> Result<()> {
        for (name, spec) in &self.formats()? {
            if let Some(coo) = data.sparse.get(name) {
                crate::problem::stores(name, spec, coo)?;
            }
        }
        Ok(())
    }

    /// [`Problem::evaluate`] of a program, its data read once.
    pub(crate) fn evaluate_program(&self) -> Result<Evaluation> {
        let mut data = self.program_data()?;
        self.check_program_formats(&data)?;
        let program = self.split(&mut data)?;
        let result = self.reference_of(&program, &data)?;
        let last = program.statements.last().expect("a program has a statement");
        Ok(Evaluation {
            statement: last.clone(),
            rewritten: None,
            result,
            statements: program.statements.len(),
        })
    }

    pub fn program_reference(&self) -> Result<ArrayD<f64>> {
        let mut data = self.program_data()?;
        let program = self.split(&mut data)?;
        self.reference_of(&program, &data)
    }

    fn reference_of(&self, program: &Program, data: &ProgramData) -> Result<ArrayD<f64>> {
        // The substituted statement walks every product of its factors
        // (GNN kernel 1: nnz · NH · NJ points); the statements one by one,
        // each over its operands' format arrays, walk each product once
        // (nnz · NH + NI · NH · NJ: 3-4x fewer on cora). The evaluator
        // takes the walk with fewer points. The substituted statement may
        // not take a format's rewrite (a stored operand read at two
        // subscripts, `Z[i,j] * Z[i,j]` with Z computed from A), and a
        // program may not substitute at all: then the statements one by
        // one, which walk only a stored operand's entries as its kernels do
        // (a dense walk divides zeros by zeros where `y = A / t` meets an
        // empty row of A, NaN where the kernel writes nothing).
        let whole =
            inline(program).ok().map(|statement| self.substituted(program, &statement, false).prepare());
        let one_by_one = self.statements_prepared(program);
        // (A statement one by one may need a stored operand dense where
        // the substituted one does not: then the substituted walk.)
        if let Ok(steps) = one_by_one
            && whole
                .as_ref()
                .and_then(|w| w.as_ref().ok())
                .is_none_or(|w| steps.iter().map(|(p, _)| points(p)).sum::<u128>() < points(w))
            && let Ok(values) = self.evaluate_one_by_one(steps)
        {
            return Ok(values);
        }
        if let Some(Ok(whole)) = whole {
            return whole.reference();
        }
        let mut all = data.dense.clone();
        for (name, coo) in &data.sparse {
            all.insert(name.clone(), TensorValue::Values(dense_copy(name, coo)?));
        }
        let written = evaluate_program(program, &all).map_err(|d| Error::statement(d, self.statement()))?;
        let last = program.statements.last().expect("a program has a statement");
        match &written[&last.output().name] {
            TensorValue::Values(v) => Ok(v.clone()),
            TensorValue::Indices(_) => unreachable!("outputs hold values"),
        }
    }

    /// Each statement of `program` prepared on its own, temporaries given
    /// as shapes (the evaluator fills them in turn), with its output's
    /// name; outputs stay dense (an output given data starts from it, as
    /// in the substituted statement).
    fn statements_prepared(&self, program: &Program) -> Result<Vec<(Prepared, String)>> {
        let none = BTreeMap::new();
        let prepare = |e: &Einsum| {
            Ok((self.statement_problem(program, e, &none, false).prepare()?, e.output().name.clone()))
        };
        program.statements.iter().map(prepare).collect()
    }

    /// One statement of `program` as a problem of its own: each tensor's
    /// values from `written` (earlier statements' outputs), else the
    /// program's inputs, else its shape; the formats given, the output's
    /// only with `output_format`. A temporary is written in the type a
    /// program kernel holds it in ([`temporary_dtype`]), so statements run
    /// apart compute what the fused kernels do.
    fn statement_problem(
        &self,
        program: &Program,
        einsum: &Einsum,
        written: &BTreeMap<String, ArrayD<f64>>,
        output_format: bool,
    ) -> Problem {
        let out = &einsum.output().name;
        let last = &program.statements.last().expect("a program has a statement").output().name;
        let held = temporary_dtype(program);
        let mut problem = Problem::new(einsum.statement.to_string().as_str());
        for (name, info) in &einsum.tensors {
            let temporary = name != last && program.statements.iter().any(|e| e.output().name == *name);
            let input = self.inputs.iter().find(|(n, _)| n == name).map(|(_, input)| input);
            // (A temporary given data starts from it.)
            let shape_only = input.is_none_or(|i| matches!(i.data, InputData::Shape(_)));
            problem = match (written.get(name), input) {
                (Some(values), _) if temporary => {
                    problem.tensor(name.as_str(), Input::from(values.clone()).with_dtype(held))
                }
                (Some(values), _) => problem.tensor(name.as_str(), values.clone()),
                (None, _) if temporary && shape_only => {
                    problem.tensor(name.as_str(), Input::shape(&info.shape, held))
                }
                (None, Some(input)) => problem.tensor(name.as_str(), input.clone()),
                (None, None) => problem.tensor(name.as_str(), Input::shape(&info.shape, info.dtype)),
            };
            if let Some((_, spec)) = self.formats.iter().find(|(n, _)| n == name)
                && (output_format || name != out)
            {
                problem = problem.format(name.as_str(), spec.as_str());
            }
        }
        problem
    }

    /// The reference of each prepared statement in turn, each output the
    /// data of the statements after it; the last one's output.
    fn evaluate_one_by_one(&self, steps: Vec<(Prepared, String)>) -> Result<ArrayD<f64>> {
        let mut written: BTreeMap<String, ArrayD<f64>> = BTreeMap::new();
        let mut last = None;
        for (mut prepared, out) in steps {
            // An output written before and added into (`+=`, `max=`)
            // starts from its values so far.
            let accumulates = prepared.einsum.statement.op != AssignOp::Assign;
            for (name, values) in &written {
                if prepared.einsum.tensors.contains_key(name) && (*name != out || accumulates) {
                    prepared.data.insert(name.clone(), TensorValue::Values(values.clone()));
                }
            }
            let result = prepared.reference()?;
            written.insert(out, result.clone());
            last = Some(result);
        }
        Ok(last.expect("a program has a statement"))
    }

    /// Each statement its own kernel through the single-statement pipeline
    /// (backends without program kernels), its output the dense input of
    /// the statements after it; each checked on its own inputs.
    fn run_each_statement(
        &self,
        program: &Program,
        backend: &dyn Backend,
        schedule: &Schedule,
        opts: TimingOptions,
        check: bool,
    ) -> Result<ProgramRun> {
        let mut written: BTreeMap<String, ArrayD<f64>> = BTreeMap::new();
        let mut run = ProgramRun {
            // The fusion asked for; the notes say why it ran apart.
            fusion: schedule.fusion,
            statements: Vec::new(),
            forest: String::new(),
            kernels: Vec::new(),
            sources: Vec::new(),
            notes: Vec::new(),
            timings: Vec::new(),
            kinds: Vec::new(),
            checks: Vec::new(),
            output: String::new(),
            result: ArrayD::zeros(vec![0]),
            assembled: None,
            last: None,
        };
        // Whether a GPU's program kernel held the sparse output in its
        // mask's pattern (and not at every coordinate of a temporary).
        let mut held_in_pattern = false;
        for einsum in &program.statements {
            let text = einsum.statement.to_string();
            let out = einsum.output().name.clone();
            let problem = self.statement_problem(program, einsum, &written, true);
            if backend.target() != Target::C
                && program.statements.len() > 1
                && self.formats.iter().any(|(n, _)| *n == out)
            {
                // The GPU's level path assembles no sparse output: this
                // statement's own program kernel holds it in the pattern of
                // the operand that masks it.
                let ran = problem
                    .run_program_on(problem.program_data()?, backend, schedule, opts, check)
                    .map_err(|e| match e {
                        Error::Input(why) => Error::input(format!(
                            "the statements run one by one on {}, and the last, `{text}`, writes the sparse \
                             output `{out}`, which {} holds only in the pattern of an operand that masks it: \
                             {why}{}",
                            backend.target().title(),
                            backend.target().title(),
                            match schedule.fusion {
                                Fusion::None => {
                                    "; fusion=trie (the default) and maximal run them as one kernel over the \
                                     stored operands"
                                }
                                _ => "",
                            }
                        )),
                        other => other,
                    })?;
                held_in_pattern = true;
                run.statements.push(text);
                run.kernels.extend(ran.kernels);
                run.sources.extend(ran.sources);
                run.timings.extend(ran.timings);
                run.kinds.extend(ran.kinds);
                run.checks.extend(ran.checks);
                run.notes.extend(ran.notes);
                written.insert(out.clone(), ran.result.clone());
                run.output = out;
                run.result = ran.result;
                run.assembled = ran.assembled;
                run.last = Some(einsum.clone());
                continue;
            }
            let prepared = problem.prepare()?;
            // The level path walks stored operands; a statement with none
            // (SDDMM's dense product) takes the tile path.
            let schedule = match (schedule.path, &prepared.stored) {
                (Path::Levels, None) => {
                    run.notes.push(format!("`{text}` reads no stored operand: it runs on the tile path"));
                    Schedule { path: Path::Tiles, ..schedule.clone() }
                }
                _ => schedule.clone(),
            };
            // The schedule's `reduce=` is the program's: a statement it does
            // not fit (one with no sum, say) runs with the default, saying so.
            let compiled = match prepared.compile(backend, &schedule) {
                Err(e) if schedule.strategy != Schedule::default().strategy => {
                    let default = Schedule { strategy: Schedule::default().strategy, ..schedule.clone() };
                    let Ok(compiled) = prepared.compile(backend, &default) else { return Err(e) };
                    run.notes.push(format!(
                        "`{text}` runs with reduce={}: reduce={} does not fit it ({})",
                        default.strategy,
                        schedule.strategy,
                        first_line(&e)
                    ));
                    compiled
                }
                other => other?,
            };
            // A sparse output (the last statement's, in its format) is
            // assembled; a later statement reads its dense values.
            let (result, timing) = match compiled.assembles() {
                true => {
                    let (assembled, timing) = compiled.assemble_and_time(opts)?;
                    if check {
                        run.checks.push(compiled.compare_assembled(&assembled)?);
                    }
                    let result = expand(&assembled).unwrap_or_else(|_| ArrayD::zeros(vec![0]));
                    run.assembled = Some(assembled);
                    (result, timing)
                }
                false => {
                    let (result, timing) = compiled.run_and_time(opts)?;
                    if check {
                        run.checks.push(compiled.compare(&result)?);
                    }
                    (result, timing)
                }
            };
            run.statements.push(text);
            run.kernels.push(compiled.kernel.to_string());
            run.sources.push(compiled.source().to_string());
            run.timings.push(timing);
            run.kinds.push(compiled.kernel.kind(backend.target() != Target::C));
            written.insert(out.clone(), result.clone());
            run.output = out;
            run.result = result;
            run.last = Some(einsum.clone());
        }
        // A sparse output read from dense temporaries is walked at every
        // coordinate they hold, zeros included.
        if let (Some(_), Some((last, before)), false) =
            (&run.assembled, program.statements.split_last(), held_in_pattern)
        {
            let temporaries: Vec<&str> = last
                .statement
                .rhs
                .accesses()
                .iter()
                .map(|a| a.tensor.name.as_str())
                .filter(|n| before.iter().any(|e| e.output().name == *n))
                .collect();
            if let Some(t) = temporaries.first() {
                run.notes.push(format!(
                    "the sparse output `{}` is assembled from the dense temporary `{t}`, so it stores every \
                     coordinate `{t}` holds, zeros included (fusion=trie and maximal walk the stored operands' \
                     entries instead)",
                    run.output
                ));
            }
        }
        Ok(run)
    }
}

/// The points of the prepared statement's index space: the reference
/// evaluator's walk.
fn points(p: &Prepared) -> u128 {
    p.einsum.indices.iter().map(|i| i.extent as u128).product()
}

/// A sparse tensor's dense copy, refused past [`MAX_DENSE_ELEMENTS`].
fn dense_copy(name: &str, coo: &Coo<f64, i64>) -> Result<ArrayD<f64>> {
    if !crate::problem::fits_dense(&coo.shape) {
        return Err(Error::input(format!(
            "`{name}` would need a dense copy of more than {MAX_DENSE_ELEMENTS} elements; give it a format, or check a smaller problem"
        )));
    }
    Ok(coo.to_ndarray()?)
}

/// Whether `e` holds a product inside a product (three-address form splits
/// it).
fn compound(e: &Expr) -> bool {
    use spindle_ir::lang::BinOp;
    let product = |x: &Expr| matches!(x, Expr::Binary { op: BinOp::Mul, .. });
    match e {
        Expr::Binary { op: BinOp::Mul, lhs, rhs, .. } => {
            product(lhs) || product(rhs) || compound(lhs) || compound(rhs)
        }
        Expr::Binary { lhs, rhs, .. } => compound(lhs) || compound(rhs),
        Expr::Neg { expr, .. } => compound(expr),
        Expr::Call { args, .. } => args.iter().any(compound),
        Expr::Access(_) | Expr::Literal { .. } => false,
    }
}

/// Whether a subscript of `s` reads an index tensor.
fn indirect(s: &Statement) -> bool {
    std::iter::once(&s.lhs).chain(s.rhs.accesses()).any(|a| {
        a.subscripts
            .iter()
            .any(|x| x.terms.iter().any(|t| matches!(t.atom, spindle_ir::lang::Atom::Indirect(_))))
    })
}

/// Whether a subscript of `s` is affine (`I[i+p,j+q]`).
fn affine(s: &Statement) -> bool {
    std::iter::once(&s.lhs)
        .chain(s.rhs.accesses())
        .any(|a| a.subscripts.iter().any(|x| x.as_index().is_none()))
}

/// `run` with `notes` before its own.
/// An error's first line, for a note.
fn first_line(e: &Error) -> String {
    let line = e.render(false).lines().next().unwrap_or_default().to_string();
    line.trim_start_matches("error: ").trim_start_matches("Error: ").to_string()
}

/// A program's schedule may name any statement's index (it applies where a
/// kernel has it), or the positions its formats' rewrites introduce (`p`
/// of CSR, `q` of ELL and GroupCOO, `bi`, `bj` of block formats, with a
/// digit where taken); an index that none has is a mistake, as it is for
/// one statement.
fn check_schedule_indices(
    program: &Program,
    schedule: &Schedule,
    formats: &BTreeMap<String, FormatSpec>,
) -> std::result::Result<(), Diagnostic> {
    let mut positions: Vec<&str> =
        formats.values().flat_map(spindle_ir::rewrite::position_indices).copied().collect();
    positions.sort_unstable();
    positions.dedup();
    let known = |index: &str| {
        program.statements.iter().any(|e| e.index(index).is_some())
            || positions.iter().any(|base| {
                index.strip_prefix(base).is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()))
            })
    };
    let named = schedule
        .tiles
        .keys()
        .map(|i| (i, format!("tile.{i}")))
        .chain(schedule.parallel.iter().flatten().map(|i| (i, "parallel".to_string())))
        .chain(schedule.order.iter().map(|i| (i, "order".to_string())));
    for (index, item) in named {
        if !known(index) {
            let mut used: Vec<&str> =
                program.statements.iter().flat_map(|e| e.indices.iter().map(|i| i.name.as_str())).collect();
            used.sort_unstable();
            used.dedup();
            let first = program.statements.first().map_or(Span::new(0, 0), |e| e.statement.span);
            let last = program.statements.last().map_or(first, |e| e.statement.span);
            let mut note = format!("the program's indices are {}", used.join(", "));
            if !positions.is_empty() {
                note.push_str(&format!(
                    " (and the positions its formats' arrays use: {})",
                    positions.join(", ")
                ));
            }
            return Err(Diagnostic::new(
                format!("the schedule names `{index}`, which no statement of the program uses"),
                Span::new(first.start, last.end),
            )
            .with_note(note)
            .in_schedule_item(item));
        }
    }
    Ok(())
}

fn with_notes(mut run: ProgramRun, notes: Vec<String>) -> ProgramRun {
    run.notes.splice(0..0, notes);
    run
}

/// The labels of a program kernel's refusals that its statements, each
/// lowered alone, may not meet: a loop over two stored operands (the
/// level path's merges), a sparse output in no operand's pattern (a
/// workspace), a stored operand read at two subscripts (a copy for each
/// further read), an index repeated (a diagonal, walked with the
/// identity), a statement that is not a sum (`max=`: its zeros counted),
/// an index name with another extent or storage order in another statement
/// (a program kernel gives a name one loop; statements alone name their
/// own), a tensor written again (`T = x; T += A*x`: statements alone keep
/// it between them). Trie fuses maximally where it meets one; where that
/// cannot run either, and under `fusion=none`, each statement runs as its
/// own kernel.
const APART: [&str; 8] = [
    "written again",
    "co-iteration",
    "no pattern",
    "a second read",
    "a repeated index",
    "not a sum",
    "another extent",
    "discordant",
];

/// [`Problem::split_over_groups`] over the program split and its data.
fn split_over_groups(
    program: &Program,
    formats: &BTreeMap<String, FormatSpec>,
    data: &ProgramData,
) -> Option<(f64, f64)> {
    if program.statements.len() < 2 {
        return None;
    }
    let forest = fused_forest(program, formats, Fusion::Trie, &[]);
    let (split, _) = forest_products(program, &forest, &data.sparse);
    // The one product's iteration space: every index of the split once.
    let extents: BTreeMap<&str, usize> = program
        .statements
        .iter()
        .flat_map(|e| e.indices.iter().map(|i| (i.name.as_str(), i.extent)))
        .collect();
    let space: f64 = extents.values().map(|&x| x as f64).product();
    let one = data.sparse.values().fold(space, |w, coo| w * density(coo));
    (2.0 * split <= one).then_some((split, one))
}

/// The products `prepared` (the statements of `program` substituted into
/// one) is expected to do, and the statements one by one with dense
/// temporaries ([`expected_products`], over the statements as written: a
/// format's rewrite renames its operands).
fn product_counts(program: &Program, data: &ProgramData, prepared: &Prepared) -> (f64, f64) {
    let density = |name: &str| data.sparse.get(name).map(density);
    let apart: f64 = program.statements.iter().map(|e| expected_products(e, &density)).sum();
    let written = prepared.stored.as_ref().map_or(&prepared.einsum, |s| &s.original);
    (expected_products(written, &density), apart)
}

/// The fraction of a stored operand's elements that its entries hold.
fn density(coo: &Coo<f64, i64>) -> f64 {
    coo.nnz() as f64 / coo.shape.iter().map(|&d| d as f64).product::<f64>().max(1.0)
}

/// The products a statement is expected to do: its dense iteration space
/// scaled by the density of each stored operand it reads (`density` of
/// its name; a dense tensor or temporary is 1), as if their entries fell
/// independently: SDDMM over A, `nnz(A) * K`; SpGEMM, `M N K dA dB`.
fn expected_products(einsum: &Einsum, density: &dyn Fn(&str) -> Option<f64>) -> f64 {
    let space: f64 = einsum.indices.iter().map(|i| i.extent as f64).product();
    einsum.statement.rhs.accesses().iter().filter_map(|a| density(&a.tensor.name)).fold(space, |w, d| w * d)
}

/// Trie forests whose loops do fewer products than this are not compared
/// with the substituted statement ([`Problem::input_sensitive`]).
const DENSE_FOREST_PRODUCTS: f64 = 1e7;

/// How many times the substituted statement's products a trie forest may
/// do before trie fuses maximally instead, the counts being estimates
/// (SDDMM into SpMM over a 400 x 400 COO matrix at 1%, K = N = 64: 3.1
/// times the products, 4.2 times the time on this project's CPU).
const TRIE_OVER_MAXIMAL: f64 = 2.0;

/// The products a program kernel over `forest` is expected to do, and a
/// phrase naming the statement that does most: each statement runs once
/// per iteration of its loops, a dense loop its extent, the loops that
/// walk a stored operand the distinct coordinates its entries hold in
/// those loops' dimensions (its nonzero rows, or its entries).
fn forest_products(
    program: &Program,
    forest: &[spindle_ir::react::Node],
    sparse: &BTreeMap<String, Coo<f64, i64>>,
) -> (f64, String) {
    use spindle_ir::react::{Node, Space};
    /// A loop: its index, extent and iteration space.
    type Loop<'a> = (&'a str, usize, &'a Space);
    fn walk<'a>(nodes: &'a [Node], path: &mut Vec<Loop<'a>>, out: &mut Vec<(usize, Vec<Loop<'a>>)>) {
        for node in nodes {
            match node {
                Node::Loop { index, extent, space, children } => {
                    path.push((index, *extent, space));
                    walk(children, path, out);
                    path.pop();
                }
                Node::Compute { statement, .. } => out.push((*statement, path.clone())),
            }
        }
    }
    let mut computes = Vec::new();
    walk(forest, &mut Vec::new(), &mut computes);
    // The dimension of stored operand `t` that index `index` walks, as the
    // program reads it (a program kernel reads it at one subscript).
    let dim_of = |t: &str, index: &str| {
        program
            .statements
            .iter()
            .flat_map(|e| e.statement.rhs.accesses())
            .find(|a| a.tensor.name == t)
            .and_then(|a| a.subscripts.iter().position(|x| x.as_index().is_some_and(|i| i.name == index)))
    };
    // The distinct coordinates of an operand's entries in some of its
    // dimensions, counted once for every statement that walks them so.
    let mut reached: BTreeMap<(&str, Vec<usize>), usize> = BTreeMap::new();
    let mut total = 0f64;
    let mut heaviest = (0f64, String::new());
    for (statement, loops) in computes {
        // The loops' whole space, scaled by each walked operand's density
        // in the dimensions the loops cover (a dense level above CSR's
        // compressed one too), as if entries fell independently: CSR's
        // rows and entries, nnz; two operands joined on an index, SpGEMM's
        // count.
        let stored: BTreeSet<&str> = loops
            .iter()
            .filter_map(|(_, _, space)| match space {
                Space::Sparse(t) if sparse.contains_key(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        let mut products: f64 = loops.iter().map(|&(_, extent, _)| extent as f64).product();
        for t in &stored {
            let dims: Vec<usize> = loops.iter().filter_map(|(index, _, _)| dim_of(t, index)).collect();
            let coo = &sparse[*t];
            let space: f64 = dims.iter().map(|&d| coo.shape[d] as f64).product();
            let count = *reached.entry((*t, dims)).or_insert_with_key(|(_, dims)| {
                let mut coordinates: Vec<Vec<i64>> =
                    (0..coo.nnz()).map(|k| dims.iter().map(|&d| coo.crd[d][k]).collect()).collect();
                coordinates.sort_unstable();
                coordinates.dedup();
                coordinates.len()
            });
            products *= count as f64 / space.max(1.0);
        }
        let dense: Vec<String> = loops
            .iter()
            .filter(|(index, _, _)| !stored.iter().any(|t| dim_of(t, index).is_some()))
            .map(|(index, extent, _)| format!("{index} ({extent})"))
            .collect();
        total += products;
        if products > heaviest.0 {
            let text = &program.statements[statement].statement;
            heaviest = (
                products,
                match dense.is_empty() {
                    true => format!("`{text}` about {products:.3e}"),
                    false => {
                        format!("`{text}` about {products:.3e}, its loops over {} dense", dense.join(", "))
                    }
                },
            );
        }
    }
    (total, heaviest.1)
}

/// Whether `s` names tensor `name`.
fn mentions(s: &Statement, name: &str) -> bool {
    s.lhs.tensor.name == name || s.rhs.accesses().iter().any(|a| a.tensor.name == name)
}

/// Whether `fusion=trie` fuses maximally instead (input-sensitive fusion,
/// where the statements substitute into one), and the note that says why.
fn input_sensitive(
    program: &Program,
    formats: &BTreeMap<String, FormatSpec>,
    data: &ProgramData,
    fusion: Fusion,
) -> Option<String> {
    if fusion != Fusion::Trie || inline(program).is_err() {
        return None;
    }
    let why = sums_run_once(program, formats, &data.sparse)?;
    Some(format!(
        "input-sensitive fusion (paper 003 §4.3.3): {why}, so a temporary saves nothing; fused maximally"
    ))
}

/// Input-sensitive fusion (paper 003 §4.3.3): why every temporary's sum
/// runs about once per element it makes (a dense loop of extent 1, or a
/// loop over a stored level whose fibers hold 1.5 entries or fewer on
/// average), where that is so; then a temporary costs its stores and
/// saves nothing. `None` where a sum is longer, or nothing is a
/// temporary.
fn sums_run_once(
    program: &Program,
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
) -> Option<String> {
    use spindle_ir::react::{Space, index_trees, propagate};
    let trees = propagate(program, &index_trees(program, formats), formats);
    let last = &program.statements.last()?.output().name;
    let mut why = Vec::new();
    for (einsum, tree) in program.statements.iter().zip(&trees) {
        let lhs = &einsum.statement.lhs;
        if lhs.tensor.name == *last {
            continue;
        }
        let summed = tree.loops.iter().filter(|l| !lhs.index_uses().iter().any(|u| u.ident.name == l.index));
        for l in summed {
            let trip = match &l.space {
                Space::Dense => einsum.index(&l.index).map_or(f64::INFINITY, |x| x.extent as f64),
                Space::Sparse(t) => fiber_length(t, &l.index, program, formats, sparse)?,
            };
            if trip > 1.5 {
                return None;
            }
            why.push(format!("the sum over `{}` runs {trip:.2} times on average", l.index));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// The average number of entries per fiber of the level of stored operand
/// `t` that holds `index`: its positions over its parent's.
fn fiber_length(
    t: &str,
    index: &str,
    program: &Program,
    formats: &BTreeMap<String, FormatSpec>,
    sparse: &BTreeMap<String, Coo<f64, i64>>,
) -> Option<f64> {
    let access =
        program.statements.iter().flat_map(|e| e.statement.rhs.accesses()).find(|a| a.tensor.name == t)?;
    let tensor = SparseTensor::from_coo(sparse.get(t)?, formats.get(t)?).ok()?;
    let assembled = tensor.with_values(Vec::new());
    let levels = tensor.levels();
    let at = levels.iter().position(|l| {
        access.subscripts.get(l.dim).and_then(|s| s.as_index()).is_some_and(|i| i.name == index)
    })?;
    // Positions per level: a dense level multiplies its parent's, others
    // have one per coordinate stored.
    let mut count = vec![0f64; levels.len()];
    let mut parent = 1f64;
    for (l, level) in levels.iter().enumerate() {
        count[l] = match &assembled.arrays[l].crd {
            Some(crd) => crd.len() as f64,
            None => parent * assembled.shape[level.dim] as f64,
        };
        parent = count[l];
    }
    // Below a level whose coordinates repeat (COO's rows), a fiber is a
    // run of equal coordinates there: the walk sums over the run.
    let above = match at.checked_sub(1) {
        None => 1.0,
        Some(p) if !spindle_formats::LevelCapabilities::unique(&levels[p].format) => {
            match &assembled.arrays[p].crd {
                Some(crd) => (1 + crd.windows(2).filter(|w| w[0] != w[1]).count()) as f64,
                None => count[p],
            }
        }
        Some(p) => count[p],
    };
    Some(count[at] / above.max(1.0))
}

/// A mistake in the statement the program's statements were substituted
/// into (which the user never wrote) says so, and what runs them instead.
fn substituted_note(e: Error) -> Error {
    match e {
        Error::Statement { diagnostic, text } => Error::Statement {
            diagnostic: Box::new(diagnostic.with_note(
                "this is the program's statements substituted into one (fusion=maximal); fusion=trie or none runs \
                 them as written",
            )),
            text,
        },
        other => other,
    }
}

/// A mistake that quotes the name of a version of a tensor written again
/// (`t_1` of `t = A*x; t = t*2`), which the user never wrote, says whose
/// version it is.
fn versions_noted(e: Error, versions: &[(String, String, usize, usize)]) -> Error {
    let Error::Statement { diagnostic, text } = e else { return e };
    let quoted = |name: &str| {
        let name = format!("`{name}`");
        diagnostic.message.contains(&name) || diagnostic.label.contains(&name)
    };
    let notes: Vec<String> = versions
        .iter()
        .filter(|(version, ..)| quoted(version))
        .map(|(version, tensor, writes, again)| {
            format!(
                "`{version}` is `{tensor}` as statement {writes} writes it: statement {again} writes `{tensor}` \
                 again with `=`, so the program names the earlier value apart"
            )
        })
        .collect();
    let diagnostic = notes.into_iter().fold(*diagnostic, |d, note| d.with_note(note));
    Error::Statement { diagnostic: Box::new(diagnostic), text }
}

/// The type a program kernel holds its temporaries in (its compute type):
/// f64 where an input or the program's output is f64, else f32 (16-bit
/// operands are read into f32).
fn temporary_dtype(program: &Program) -> ElemType {
    let written: Vec<&str> = program.statements.iter().map(|e| e.output().name.as_str()).collect();
    let output = written.last().copied().unwrap_or_default();
    let f64 = program.statements.iter().flat_map(|e| &e.tensors).any(|(name, info)| {
        (name == output || !written.contains(&name.as_str())) && info.dtype == ElemType::Value(DType::F64)
    });
    ElemType::Value(if f64 { DType::F64 } else { DType::F32 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GNN kernel 1 with rows of two entries on average: its statements one
    /// by one walk 8·8 + 4·8·4 = 192 points, the substituted statement
    /// 8·8·4 = 256, so the reference takes them one by one.
    #[test]
    fn gnn_kernel_1s_reference_walks_its_statements_one_by_one() {
        let entries: Vec<(usize, usize, f64)> =
            (0..8).map(|e| (e / 2, (e * 3) % 4, 1.0 + e as f64)).collect();
        let a = Coo::<f64, i64>::from_triplets(4, 4, &entries).unwrap();
        let p = Problem::new("Z[i,j] = A[i,k] * X[k,h] * W[h,j]")
            .tensor("A", a)
            .format("A", "csr")
            .tensor("X", ArrayD::from_shape_fn(vec![4, 8], |ix| 0.5 + ix[1] as f64))
            .tensor("W", ArrayD::from_shape_fn(vec![8, 4], |ix| 0.25 - ix[0] as f64));
        let mut data = p.program_data().unwrap();
        let program = p.split(&mut data).unwrap();
        let statement = inline(&program).unwrap();
        let whole = p.substituted(&program, &statement, false).prepare().unwrap();
        let steps = p.statements_prepared(&program).unwrap();
        assert_eq!(points(&whole), 256);
        assert_eq!(steps.iter().map(|(s, _)| points(s)).sum::<u128>(), 192);
        let want = whole.reference().unwrap();
        assert_eq!(p.program_reference().unwrap(), want);
    }

    /// A temporary computed from a stored operand and read twice: the
    /// substituted statement reads `A` at two subscripts, which a format's
    /// rewrite refuses, so the reference walks the statements one by one
    /// (it failed); `fusion=none`, `trie` and `maximal` run and check
    /// (`maximal` substitutes, and its level path walks a copy of `A` for
    /// the second read; it was refused).
    #[test]
    fn a_temporary_read_twice_runs_and_checks() {
        let entries: Vec<(usize, usize, f64)> =
            (0..9).map(|e| (e / 2, (e * 3) % 5, 1.0 + e as f64)).collect();
        let p = Problem::new("H[i,h] = A[i,k] * X[k,h]; Z[i,j] = H[i,h] * W[h,j]; Z2[i,j] = Z[i,j] * Z[i,j]")
            .tensor("A", Coo::<f64, i64>::from_triplets(5, 5, &entries).unwrap())
            .format("A", "csr")
            .tensor("X", ArrayD::from_shape_fn(vec![5, 3], |ix| 0.5 + ix[1] as f64))
            .tensor("W", ArrayD::from_shape_fn(vec![3, 2], |ix| 0.25 - ix[0] as f64));
        let opts = TimingOptions { warmup: 0, repeats: 1 };
        for fusion in ["none", "trie", "maximal"] {
            let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
            let run = p.run_program(&crate::CBackend::new(), &schedule, opts, true).unwrap();
            assert!(run.checks.iter().all(Check::passed), "fusion={fusion}: {:?}", run.checks);
            assert!(run.result.iter().any(|&x| x != 0.0), "fusion={fusion}");
        }
    }

    /// A program whose loop walks two stored operands together, which a
    /// program kernel cannot: the default `fusion=trie` runs the
    /// substituted statement, whose level path co-iterates, and says why
    /// (it refused with "run it with fusion=maximal"); `fusion=none` runs
    /// each statement as its own kernel, and says why.
    #[test]
    fn trie_fuses_maximally_where_its_loop_would_co_iterate() {
        let a: Vec<(usize, usize, f64)> = (0..9).map(|e| (e / 2, (e * 3) % 5, 1.0 + e as f64)).collect();
        let b: Vec<(usize, usize, f64)> = (0..9).map(|e| (e / 2, (e * 2) % 5, 0.5 - e as f64)).collect();
        let p = Problem::new("T[i,j] = A[i,j] * B[i,j]; z[i] = T[i,j] * x[j]")
            .tensor("A", Coo::<f64, i64>::from_triplets(5, 5, &a).unwrap())
            .format("A", "csr")
            .tensor("B", Coo::<f64, i64>::from_triplets(5, 5, &b).unwrap())
            .format("B", "csr")
            .tensor("x", ArrayD::from_shape_fn(vec![5], |ix| 1.5 - ix[0] as f64));
        let opts = TimingOptions { warmup: 0, repeats: 1 };
        let run = p.run_program(&crate::CBackend::new(), &Schedule::default(), opts, true).unwrap();
        assert!(run.checks.iter().all(Check::passed), "{:?}", run.checks);
        assert_eq!(run.fusion, Fusion::Trie);
        let note = run.notes.iter().find(|n| n.contains("fused maximally")).expect("a note says why");
        assert!(note.contains("would walk `B`'s stored coordinates together with `A`'s"), "{note}");
        let (_, notes) = p.program_kernel(&Schedule::default(), Target::C).unwrap();
        assert!(notes.iter().any(|n| n.contains("fused maximally")), "{notes:?}");
        let none: Schedule = "fusion=none".parse().unwrap();
        let run = p.run_program(&crate::CBackend::new(), &none, opts, true).unwrap();
        assert!(run.checks.iter().all(Check::passed), "{:?}", run.checks);
        assert_eq!(run.kernels.len(), 2, "{:?}", run.notes);
        let note = run.notes.iter().find(|n| n.contains("its own kernel")).expect("a note says why");
        assert!(note.starts_with("fusion=none: "), "{note}");
    }

    /// Where trie's kernel is refused and the statements substituted into
    /// one cannot run either (a diagonal beside a sum read outside a
    /// product), each statement runs as its own kernel (it was refused
    /// under every fusion, maximal's refusal pointing at trie and none).
    #[test]
    fn a_program_no_kernel_fuses_runs_its_statements_apart() {
        let a: Vec<(usize, usize, f64)> = (0..12).map(|e| (e / 2, (e * 5) % 6, 1.0 + e as f64)).collect();
        let p = Problem::new("d[i] = A[i,i]; y[i] = A[i,j] * x[j]; z[i] = y[i] - d[i] * x[i]")
            .tensor("A", Coo::<f64, i64>::from_triplets(6, 6, &a).unwrap())
            .format("A", "csr")
            .tensor("x", ArrayD::from_shape_fn(vec![6], |ix| 1.5 - ix[0] as f64));
        let opts = TimingOptions { warmup: 0, repeats: 1 };
        for fusion in ["trie", "none"] {
            let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
            let run = p.run_program(&crate::CBackend::new(), &schedule, opts, true).unwrap();
            assert!(run.checks.iter().all(Check::passed), "fusion={fusion}: {:?}", run.checks);
            assert!(run.result.iter().any(|&x| x != 0.0), "fusion={fusion}");
            assert_eq!(run.kernels.len(), 3, "fusion={fusion}: {:?}", run.notes);
            assert!(run.notes.iter().any(|n| n.contains("indexes two dimensions of `A`")), "{:?}", run.notes);
        }
    }

    /// A compound product that reads one stored operand at several
    /// subscripts (triangles per vertex, `A[i,j] * A[j,k] * A[i,k]`; a
    /// Gram product masked by a dense `D`): the default `fusion=trie`
    /// cannot walk `A` twice in one program kernel, so it runs the
    /// substituted statement, whose level path walks a copy of `A` for
    /// each further read, and says so (it was refused). Under
    /// `fusion=none` each statement runs as its own kernel, walking its
    /// own copies, and a note says why.
    #[test]
    fn a_compound_product_reading_an_operand_twice_fuses_maximally() {
        let a: Vec<(usize, usize, f64)> = (0..14).map(|e| (e / 2, (e * 3 + 1) % 7, 1.0 + e as f64)).collect();
        let a = Coo::<f64, i64>::from_triplets(7, 7, &a).unwrap();
        let d = ArrayD::from_shape_fn(vec![7, 7], |ix| 0.5 + ix[0] as f64 - ix[1] as f64);
        let opts = TimingOptions { warmup: 0, repeats: 1 };
        for (statement, dense) in
            [("t[i] = A[i,j] * A[j,k] * A[i,k]", false), ("C[i,j] = A[i,k] * A[j,k] * D[i,j]", true)]
        {
            let mut p = Problem::new(statement).tensor("A", a.clone()).format("A", "csr");
            if dense {
                p = p.tensor("D", d.clone());
            }
            assert!(p.is_program(), "{statement}");
            let run = p.run_program(&crate::CBackend::new(), &Schedule::default(), opts, true).unwrap();
            assert!(run.checks.iter().all(Check::passed), "{statement}: {:?}", run.checks);
            assert!(run.result.iter().any(|&x| x != 0.0), "{statement}");
            let note = run.notes.iter().find(|n| n.contains("fused maximally")).expect("a note says why");
            assert!(note.contains("`A` is read at two subscripts"), "{note}");
            let none: Schedule = "fusion=none".parse().unwrap();
            let run = p.run_program(&crate::CBackend::new(), &none, opts, true).unwrap();
            assert!(run.checks.iter().all(Check::passed), "{statement}, fusion=none: {:?}", run.checks);
            let note = run.notes.iter().find(|n| n.contains("its own kernel")).expect("a note says why");
            assert!(note.contains("`A` is read at two subscripts"), "{note}");
        }
    }

    /// A statement that writes a tensor an earlier one read (`x`, given
    /// data) is refused at both places under every fusion: the kernel
    /// cleared `x` before the first statement read it (zeros, where the
    /// reference gives 2·x).
    #[test]
    fn a_tensor_read_before_a_later_statement_writes_it_is_refused() {
        let src = "y[i] = x[i]; x[i] = y[i] * 2";
        let p = Problem::new(src).tensor("x", ArrayD::from_shape_fn(vec![4], |ix| 1.0 + ix[0] as f64));
        let opts = TimingOptions { warmup: 0, repeats: 1 };
        // (maximal refused it after substituting, at a statement the user
        // never wrote, advising `+=`.)
        for fusion in ["none", "trie", "maximal"] {
            let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
            let text =
                p.run_program(&crate::CBackend::new(), &schedule, opts, true).unwrap_err().render(false);
            assert!(text.contains("statement 2 writes `x`, which statement 1 reads before it"), "{text}");
            assert!(text.contains("read here, before") && text.contains("another name"), "{text}");
        }
    }

    /// A program with a syntax error is still a program: its parser puts
    /// the caret where the mistake is (it was parsed as one statement and
    /// refused at the first `;`).
    #[test]
    fn a_program_with_a_syntax_error_points_at_it() {
        let src = "y[i] = x[i]; z[i] = y[i] +* x[i]";
        let p = Problem::new(src).tensor("x", ArrayD::from_elem(vec![4], 1.0));
        assert!(p.is_program());
        let Err(Error::Statement { diagnostic, .. }) = p.program() else { panic!("a statement error") };
        assert_eq!(diagnostic.span.start, src.find("* x").unwrap(), "{diagnostic:?}");
        assert!(!Problem::new("y[i] = x[i] +* 2").is_program());
        // One statement over two lines is one statement.
        assert!(!Problem::new("y[i] = A[i,j] *\n x[j]").is_program());
    }
}
