//! Programs of several statements (`;` or newlines between them), run as
//! ReACT's `fusion=none` does: split into three-address form
//! ([`spindle_ir::program`]), each statement a kernel through the same
//! pipeline as a single statement, its output the dense input of the
//! statements after it.
//!
//! GNN kernel 1 as two statements, `H` a temporary whose shape is inferred:
//!
//! ```
//! use spindle::{CBackend, Input, Problem, Schedule, TimingOptions};
//! use spindle_formats::DType;
//!
//! let problem = Problem::new("H[i,h] = A[i,k] * X[k,h]; Z[i,j] = H[i,h] * W[h,j]")
//!     .tensor("A", Input::random(&[30, 20], DType::F32, 1))
//!     .tensor("X", Input::random(&[20, 8], DType::F32, 2))
//!     .tensor("W", Input::random(&[8, 4], DType::F32, 3));
//! assert!(problem.is_program());
//! let run = problem.run_program(&CBackend::new(), &Schedule::default(), TimingOptions { warmup: 0, repeats: 1 }, true)?;
//! assert_eq!(run.statements, ["H[i,h] = A[i,k] * X[k,h]", "Z[i,j] = H[i,h] * W[h,j]"]);
//! assert_eq!((run.output.as_str(), run.result.shape()), ("Z", &[30, 4][..]));
//! assert!(run.checks.iter().all(|c| c.passed()));
//! # Ok::<(), spindle::Error>(())
//! ```

use std::collections::BTreeMap;

use ndarray::ArrayD;
use spindle_ir::kernel::schedule::Schedule;
use spindle_ir::lang::{Declaration, Declarations, Einsum};
use spindle_ir::program::{Program, parse_program, split_program};

use crate::backend::Backend;
use crate::check::Check;
use crate::error::{Error, Result};
use crate::input::{Input, kernel_dtype, load};
use crate::problem::Problem;
use crate::timing::{Timing, TimingOptions};

/// What a program's run produced.
#[derive(Clone, Debug)]
pub struct ProgramRun {
    /// The statements that ran, in three-address form, in order.
    pub statements: Vec<String>,
    /// Each statement's timing, in order.
    pub timings: Vec<Timing>,
    /// Each statement's kernel against the reference evaluator on the same
    /// inputs (the earlier kernels' outputs), where asked.
    pub checks: Vec<Check>,
    /// The last statement's output and its values.
    pub output: String,
    pub result: ArrayD<f64>,
    /// The last statement, checked (its output's name, shape and dtype).
    pub last: Option<Einsum>,
}

impl ProgramRun {
    /// The sum of the statements' medians.
    pub fn median_ms(&self) -> f64 {
        self.timings.iter().map(|t| t.median_ms).sum()
    }
}

impl Problem {
    /// The text split into three-address form (one product per statement,
    /// temporaries and undeclared outputs declared by inference), checked
    /// against the data's shapes and dtypes.
    pub fn program(&self) -> Result<Program> {
        let src = self.statement();
        let statements = parse_program(src).map_err(|d| Error::statement(d, src))?;
        let mut declarations = Declarations::new();
        for (name, input) in &self.inputs {
            let loaded = load(input).map_err(|e| e.context(&format!("tensor {name}")))?;
            let dtype = kernel_dtype(input, &loaded);
            declarations.insert(name.clone(), Declaration { shape: loaded.shape().to_vec(), dtype });
        }
        split_program(&statements, &declarations).map_err(|d| Error::statement(d, src))
    }

    /// The formats given, parsed.
    pub fn formats(&self) -> Result<BTreeMap<String, spindle_formats::FormatSpec>> {
        self.formats
            .iter()
            .map(|(n, f)| {
                f.parse().map(|f| (n.clone(), f)).map_err(|e| Error::input(format!("format of {n}: {e}")))
            })
            .collect()
    }

    /// Whether the text holds several statements.
    pub fn is_program(&self) -> bool {
        parse_program(self.statement()).is_ok_and(|s| s.len() > 1)
    }

    /// Runs the program statement by statement on `backend` under
    /// `schedule`, each timed with `opts` and, with `check`, compared with
    /// the reference evaluator. Formats apply to the tensors the program
    /// reads; what it writes stays dense.
    pub fn run_program(
        &self,
        backend: &dyn Backend,
        schedule: &Schedule,
        opts: TimingOptions,
        check: bool,
    ) -> Result<ProgramRun> {
        let program = self.program()?;
        for einsum in &program.statements {
            let out = &einsum.output().name;
            if self.formats.iter().any(|(n, _)| n == out) {
                return Err(Error::input(format!(
                    "`{out}` is written by the program and has a format: a program's outputs are dense for now"
                )));
            }
        }
        let mut written: BTreeMap<String, ArrayD<f64>> = BTreeMap::new();
        let mut run = ProgramRun {
            statements: Vec::new(),
            timings: Vec::new(),
            checks: Vec::new(),
            output: String::new(),
            result: ArrayD::zeros(vec![0]),
            last: None,
        };
        for einsum in &program.statements {
            let text = einsum.statement.to_string();
            let out = einsum.output().name.clone();
            let mut problem = Problem::new(text.as_str());
            for name in einsum.tensors.keys() {
                if let Some(values) = written.get(name) {
                    problem = problem.tensor(name.as_str(), values.clone());
                } else if let Some((_, input)) = self.inputs.iter().find(|(n, _)| n == name) {
                    problem = problem.tensor(name.as_str(), input.clone());
                } else if name == &out {
                    let d = &program.temporaries[name];
                    problem = problem.tensor(name.as_str(), Input::shape(&d.shape, d.dtype));
                }
                if let Some((_, spec)) = self.formats.iter().find(|(n, _)| n == name) {
                    problem = problem.format(name.as_str(), spec.as_str());
                }
            }
            let prepared = problem.prepare()?;
            let compiled = prepared.compile(backend, schedule)?;
            let (result, timing) = compiled.run_and_time(opts)?;
            if check {
                run.checks.push(compiled.compare(&result)?);
            }
            run.statements.push(text);
            run.timings.push(timing);
            written.insert(out.clone(), result.clone());
            run.output = out;
            run.result = result;
            run.last = Some(einsum.clone());
        }
        Ok(run)
    }
}
