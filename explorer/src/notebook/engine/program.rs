//! A cell that sweeps `fusion`: its statements run as one program (paper
//! 003) through the driver at every point — split into three-address
//! form, then trie-fused, unfused or substituted into one statement — each
//! point checked against the reference evaluator's run of the program.

use spindle::{CBackend, Input, Problem, TimingOptions};
use spindle_ir::lang::ElemType;
use spindle_ir::tensor::TensorValue;

use crate::notebook::cell::CellProgram;

use super::*;

impl Run<'_> {
    pub(super) fn run_program_points(
        &mut self,
        program: &CellProgram,
        data: &Data,
        points: &[Point],
        threads: usize,
        repeats: usize,
    ) -> Step<()> {
        let text: Vec<&str> = program.statements.iter().map(|s| s.value.as_str()).collect();
        let text = text.join("\n");
        let mut problem = Problem::new(text.as_str());
        for (name, value) in &data.dense {
            let (TensorValue::Values(v), Some(d)) = (value, data.declarations.get(name)) else { continue };
            problem = problem.tensor(name.as_str(), Input::from(v.clone()).with_dtype(d.dtype));
        }
        for (name, coo) in &data.sparse {
            let dtype =
                data.declarations.get(name).map_or(ElemType::Value(spindle_formats::DType::F32), |d| d.dtype);
            problem = problem.tensor(name.as_str(), Input::from(coo.clone()).with_dtype(dtype));
        }
        // Each point's formats: the cell's `format` lines with its
        // `sweep format.A` values (and `g`) applied; they were ignored, so a
        // point labelled coo ran dense.
        let formatted: BTreeSet<String> = program
            .formats
            .iter()
            .map(|f| f.tensor.value.clone())
            .chain(program.sweeps.iter().filter_map(|s| match &s.param.value {
                SweepParam::Format(t) => Some(t.clone()),
                _ => None,
            }))
            .collect();
        let data_only = problem;
        let problem_at = |run: &Self, point: &Point| {
            run.point_formats(program, &formatted, point)
                .into_iter()
                .fold(data_only.clone(), |p, (name, spec)| p.format(name.as_str(), spec.to_string()))
        };
        let problem = match points.first() {
            Some(first) => problem_at(self, first),
            None => data_only.clone(),
        };
        self.out.notes.push(
            "the statements run as one program (joined by `;`, or fusion or strip set): the time is the program's, its \
             output checked against the reference evaluator's run of the program"
                .to_string(),
        );
        self.step("the reference evaluator's run of the program")?;
        // As the last output's dtype holds it (see `Compiled::compare`).
        let dtype = problem.program().ok().and_then(|p| p.statements.last().map(|s| s.output().dtype));
        let want = match problem.program_reference() {
            Ok(want) => Some(match dtype {
                Some(dtype) => want.mapv(|w| spindle::check::as_stored(dtype, w)),
                None => want,
            }),
            Err(e) => {
                self.out
                    .notes
                    .push(format!("not checked: {}", e.to_string().lines().next().unwrap_or_default()));
                None
            }
        };
        // A 16-bit tensor in any statement rounds what the last one reads.
        let tolerance = problem.program().map_or(1e-3, |p| spindle::check::tolerance_of(&p.statements));
        let mut measured: Vec<Measured> = Vec::new();
        // The same on the GPU, where there is one (its own kernels: a warp
        // per row).
        let mut measured_gpu: Vec<Measured> = Vec::new();
        let opts = TimingOptions { warmup: 1, repeats };
        for point in points {
            self.step(format!("{}: compiling and running the program", point.label))?;
            let schedule = spindle::Schedule { threads: Some(threads), ..self.point_items(program, point) };
            if let Some(gpu) = gpu() {
                let ran =
                    problem_at(self, point).run_program(gpu, &self.point_items(program, point), opts, false);
                measured_gpu.push(match ran {
                    Ok(ran) => {
                        let (err, errors) =
                            self.program_error_of(&ran, want.as_ref(), tolerance, &point.label);
                        (Some(ran.median_ms()), err, errors, None)
                    }
                    Err(e) => (None, None, vec![self.program_error(&e, program, &text)], None),
                });
            }
            match problem_at(self, point).run_program(&CBackend::new(), &schedule, opts, false) {
                Ok(ran) => {
                    let (err, errors) = self.program_error_of(&ran, want.as_ref(), tolerance, &point.label);
                    if self.out.ir.is_empty() {
                        self.out.rewritten = ran.statements.clone();
                    }
                    self.out.ir.push(format!("// fusion={}\n{}", ran.fusion, ran.kernels.join("\n")));
                    self.out.c_source.push(ran.sources.join("\n"));
                    self.out.code_labels.push(point.label.clone());
                    measured.push((Some(ran.median_ms()), err, errors, None));
                }
                Err(e) => measured.push((None, None, vec![self.program_error(&e, program, &text)], None)),
            }
        }
        // The first point's program kernel as CUDA (what `spindle compile
        // --emit cuda` prints; a GPU runs it a warp per row).
        let first = points.first().map_or_else(spindle::Schedule::default, |p| self.point_items(program, p));
        let cuda = problem
            .program_kernel(&first, spindle::Target::Cuda)
            .and_then(|(lowered, _)| spindle::print_levels_cuda(&lowered.kernel));
        self.out.cuda_source = vec![match cuda {
            Ok(source) => source,
            Err(e) => format!(
                "// this program's kernel cannot be printed as CUDA: {}\n",
                e.to_string().lines().next().unwrap_or_default()
            ),
        }];
        if measured.iter().all(|m| m.0.is_none()) {
            let first = measured.iter().find_map(|m| m.2.first().cloned()).unwrap_or_default();
            return Err(Stop::Error(first));
        }
        self.finish_points(points, &measured, &measured_gpu);
        Ok(())
    }

    /// A program's run against the reference's output `want` (where there
    /// is one): its error and, above `tolerance`, why it fails; its notes
    /// join the cell's.
    fn program_error_of(
        &mut self,
        ran: &spindle::ProgramRun,
        want: Option<&ndarray::ArrayD<f64>>,
        tolerance: f64,
        label: &str,
    ) -> (Option<f64>, Vec<String>) {
        let got = match &ran.assembled {
            Some(a) => match spindle::check::expand(a) {
                Ok(got) => Some(got),
                Err(e) => {
                    let why = e.to_string();
                    self.out
                        .notes
                        .push(format!("{label}: not checked: {}", why.lines().next().unwrap_or_default()));
                    None
                }
            },
            None => Some(ran.result.clone()),
        };
        for note in &ran.notes {
            if !self.out.notes.contains(note) {
                self.out.notes.push(note.clone());
            }
        }
        let err = want.zip(got).map(|(w, g)| spindle::check::max_rel_error(&g, w));
        let errors = match err.filter(|e| *e > tolerance) {
            Some(e) => {
                vec![format!(
                    "max relative error {e:.2e} against the reference evaluator (above {tolerance:.0e})"
                )]
            }
            None => Vec::new(),
        };
        (err, errors)
    }

    /// `e` rendered against the cell where it points into the statements
    /// as joined for the driver (it named `statement:L:C` on that text,
    /// whose lines are not the cell's).
    fn program_error(&self, e: &spindle::Error, program: &CellProgram, joined: &str) -> String {
        let spindle::Error::Statement { diagnostic, text } = e else { return e.render(false) };
        if let Some(at) = super::sweep::schedule_item_at(program, diagnostic) {
            return cell::render(&diagnostic.at_schedule_item(at), self.source, "cell");
        }
        if text != joined {
            return e.render(false);
        }
        let to_cell = |offset: usize| {
            let mut start = 0;
            for s in &program.statements {
                if offset <= start + s.value.len() {
                    return s.span.start + (offset - start);
                }
                start += s.value.len() + 1;
            }
            offset
        };
        let shift = |span: Span| Span::new(to_cell(span.start), to_cell(span.end));
        let mut d = (**diagnostic).clone();
        d.span = shift(d.span);
        d.secondary.iter_mut().for_each(|(span, _)| *span = shift(*span));
        cell::render(&d, self.source, "cell")
    }
}
