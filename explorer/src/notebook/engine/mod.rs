//! Running one notebook cell: make its data, rewrite each statement over
//! its formats, lower, compile and time every sweep point on the C backend,
//! check each against the reference evaluator, time the baselines, and
//! gather what the output tabs show.
//!
//! [`run_cell`] runs on whatever thread calls it (the TUI calls it from a
//! background thread), reports progress before every step, checks the
//! cancel flag between steps, and never panics on user input: everything a
//! cell can get wrong comes back in [`CellOutput::error`] with a caret
//! under the cell's text.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use spindle::Backend as _;
use spindle_formats::Coo;
use spindle_ir::lang::{Declaration, Declarations, Diagnostic, Einsum, Span};
use spindle_ir::tensor::{TensorValue, Tensors};

use super::cell::{self, CellProgram, SweepParam, parse_cell};
use super::output::{CellOutput, Progress, SweepPoint};

mod baselines;
mod data;
mod program;
mod report;
mod sweep;

use baselines::spmm_shape;
use sweep::{KernelText, PointRun, Reference, group_size, is_group};

/// How cells run, whatever they say.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The notebook's folder: relative paths not in the shared data folder
    /// are looked up here.
    pub base_dir: Option<PathBuf>,
    /// Threads for the C kernels (a cell's `threads N` wins); default all
    /// cores.
    pub threads: Option<usize>,
    /// Timed runs per point (a cell's `repeats N` wins); default
    /// [`DEFAULT_REPEATS`].
    pub repeats: Option<usize>,
    /// Skip the NVRTC resource report (about a second per kernel).
    pub skip_nvrtc: bool,
}

/// Timed runs per sweep point unless told otherwise (after one warm-up).
pub const DEFAULT_REPEATS: usize = 5;

/// A sparse tensor read without a format is made dense; beyond this many
/// elements the cell is asked to give it a format instead.
const MAX_DENSE_ELEMENTS: usize = spindle::MAX_DENSE_ELEMENTS;

/// Unless the schedule names `tile.q`, a group of GroupCOO is one tile of
/// `q` (so it is summed in registers before its one scatter), up to this.
const MAX_GROUP_TILE: usize = 256;

/// The GPU, opened once per process and shared by every cell run; `None`
/// where there is none (then the explorer runs the C backend only and says
/// so).
pub fn gpu() -> Option<&'static spindle::CudaBackend> {
    static GPU: OnceLock<Option<spindle::CudaBackend>> = OnceLock::new();
    GPU.get_or_init(|| spindle::CudaBackend::open().ok()).as_ref()
}

/// Whether a GPU can run kernels here.
pub fn gpu_available() -> bool {
    gpu().is_some()
}

/// The status line's note when there is no GPU.
pub const NO_GPU_NOTE: &str = "no GPU: ran the C backend only";

/// Runs one cell. Callable from any thread; `progress` is called before
/// every step; when `cancel` becomes true the run stops at the next step
/// and returns what finished, with `cancelled` set.
pub fn run_cell(
    source: &str,
    options: &RunOptions,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> CellOutput {
    let start = Instant::now();
    let mut out = CellOutput::default();
    // The libraries below are not supposed to panic on any input; if one
    // does, the cell reports it instead of taking the explorer down.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut run = Run { source, options, progress, cancel, out: &mut out, done: 0, total: 1 };
        run.run()
    }));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(Stop::Error(message))) => out.error = Some(message),
        Ok(Err(Stop::Cancelled)) => {
            out.cancelled = true;
            out.notes.push("cancelled: the results shown are the points that finished".into());
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            out.error = Some(format!("internal error (a bug in Spindle, please report it): {what}"));
        }
    }
    out.seconds = start.elapsed().as_secs_f64();
    out
}

/// Why a run stopped early.
enum Stop {
    /// The message, already rendered (caret diagnostics included).
    Error(String),
    Cancelled,
}

type Step<T> = Result<T, Stop>;

/// The cell's tensors as they are made.
#[derive(Default)]
struct Data {
    /// Dense data (values or indices), including the outputs of earlier
    /// statements.
    dense: Tensors,
    /// Entries of sparse tensors (files, generators).
    sparse: BTreeMap<String, Coo<f64, i64>>,
    declarations: Declarations,
}

/// One statement, checked, with its formats.
struct Prepared {
    /// The statement's text and where it sits in the cell.
    text: String,
    at: usize,
    original: Einsum,
    /// Tensors of this statement that have a format (at some point).
    formatted: BTreeSet<String>,
    spmm: Option<SpmmShape>,
}

/// `O[i,j] (+)= A[i,k] * B[k,j]` with A sparse and B dense: the shape the
/// sprs and faer baselines compute.
#[derive(Clone, Debug, PartialEq)]
struct SpmmShape {
    sparse: String,
    dense: String,
    /// B was written first (`B[k,j] * A[i,k]` is not an SpMM of A·B as
    /// sprs computes it unless A comes first; both are the same product).
    _dense_first: bool,
}

/// A point's median time (ms, summed over statements), largest error, and
/// why it failed.
/// A point's time (summed over statements), error (their max), failures,
/// and its workspaces' peak bytes (their max, where a statement has one).
type Measured = (Option<f64>, Option<f64>, Vec<String>, Option<usize>);

/// One point of the cartesian product of the sweeps.
#[derive(Clone, Debug)]
struct Point {
    values: Vec<String>,
    label: String,
}

/// A rewritten statement ready to lower (the driver's).
type Rewritten = spindle::Prepared;

struct Run<'a> {
    source: &'a str,
    options: &'a RunOptions,
    progress: &'a mut dyn FnMut(Progress),
    cancel: &'a AtomicBool,
    out: &'a mut CellOutput,
    done: usize,
    total: usize,
}

impl Run<'_> {
    fn step(&mut self, message: impl Into<String>) -> Step<()> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(Stop::Cancelled);
        }
        (self.progress)(Progress { done: self.done, total: self.total, message: message.into() });
        self.done += 1;
        Ok(())
    }

    /// A diagnostic rendered against the cell.
    fn cell_error(&self, d: &Diagnostic) -> Stop {
        Stop::Error(cell::render(d, self.source, "cell"))
    }

    fn run(&mut self) -> Step<()> {
        let program = parse_cell(self.source).map_err(|d| self.cell_error(&d))?;
        let threads = program.threads.or(self.options.threads).unwrap_or_else(spindle_c::cpu_threads).max(1);
        let repeats = program.repeats.or(self.options.repeats).unwrap_or(DEFAULT_REPEATS).max(1);
        let points = points(&program);
        self.out.sweep.parameters = program.sweeps.iter().map(|s| s.param.value.name()).collect();
        self.check_sweeps_apply(&program)?;

        // Steps: data, then per statement: compile + run per point,
        // baselines when the statement is an SpMM; then the format view and
        // NVRTC.
        let statements = program.statements.len();
        let nvrtc = self.nvrtc_plan(&program, points.len());
        let gpu_steps = if gpu_available() { statements * points.len() } else { 0 };
        // A program: statements joined by `;`, or a fusion or strip policy
        // to apply (swept or in the schedule); each line alone otherwise.
        let as_program =
            program.sweeps.iter().any(|s| matches!(s.param.value, SweepParam::Fusion | SweepParam::Strip))
                || program.statements.iter().any(|s| s.value.contains(';'))
                || program.schedule.as_ref().is_some_and(|s| spindle::Schedule::sets_program_items(&s.value));
        self.total = match as_program {
            // Data, the reference, then each point.
            true => 2 + points.len(),
            false => 1 + statements * points.len() * 2 + gpu_steps + statements + nvrtc * statements + 1,
        };
        self.step("making the data")?;
        let mut data = self.make_data(&program)?;

        self.out.notes.push(format!(
            "C backend: {}, median of {} after one warm-up",
            crate::counted(threads, "thread"),
            crate::counted(repeats, "run")
        ));
        match gpu() {
            Some(gpu) => self.out.notes.push(format!(
                "GPU: {}: CUDA events, median of {} after one warm-up",
                gpu.device(),
                crate::counted(repeats, "run")
            )),
            None => self.out.notes.push(NO_GPU_NOTE.into()),
        }
        if let Some(load) = busy(threads) {
            self.out.notes.push(format!(
                "the machine is busy (load {load:.1} on {} cores): times on several threads wait for CPU \
                 and move a lot; `threads 1` measures steadier",
                spindle_c::cpu_threads()
            ));
        }

        if as_program {
            return self.run_program_points(&program, &data, &points, threads, repeats);
        }
        // Per point: (time, error) summed / maxed over statements.
        let mut measured: Vec<Measured> = vec![(Some(0.0), Some(0.0), Vec::new(), None); points.len()];
        // The same on the GPU, when there is one.
        let mut measured_gpu = measured.clone();
        let mut first_kernels = Vec::new();
        for (s, stmt) in program.statements.iter().enumerate() {
            let prepared = self.prepare(&program, &mut data, &stmt.value, stmt.span.start)?;
            let tag = if statements > 1 { format!("statement {}: ", s + 1) } else { String::new() };
            let mut rewrites: BTreeMap<String, Rewritten> = BTreeMap::new();
            let mut reference = Reference::default();
            let mut kernels = Vec::new();
            for (i, point) in points.iter().enumerate() {
                let result = self.run_point(
                    &program,
                    &prepared,
                    &data,
                    point,
                    &mut rewrites,
                    &mut reference,
                    &tag,
                    threads,
                    repeats,
                );
                let PointRun { time, err, kernel, gpu: on_gpu, workspace } = match result {
                    Ok(r) => r,
                    Err(Stop::Error(message)) => {
                        if points.len() == 1 {
                            return Err(Stop::Error(message));
                        }
                        PointRun::failed(message)
                    }
                    Err(Stop::Cancelled) => {
                        self.finish_points(&points, &measured[..i], &measured_gpu[..i]);
                        return Err(Stop::Cancelled);
                    }
                };
                let tolerance = spindle::check::tolerance(&prepared.original);
                if let Some(g) = on_gpu {
                    let m = &mut measured_gpu[i];
                    m.0 = m.0.zip(g.time).map(|(a, b)| a + b);
                    m.1 = m.1.zip(g.err).map(|(a, b)| a.max(b));
                    m.2.extend(g.error.map(|e| format!("{tag}{e}")));
                    if let (Some(e), Some(_)) = (g.err, g.time)
                        && e > tolerance
                    {
                        m.2.push(format!(
                            "{tag}max relative error {e:.2e} against the reference evaluator (above {tolerance:.0e})"
                        ));
                    }
                } else if gpu_available() {
                    measured_gpu[i].0 = None;
                }
                let m = &mut measured[i];
                m.0 = m.0.zip(time).map(|(a, b)| a + b);
                m.1 = m.1.zip(err).map(|(a, b)| a.max(b));
                m.3 = m.3.max(workspace);
                match kernel {
                    Ok(k) => kernels.push(Some(k)),
                    Err(message) => {
                        m.2.push(format!("{tag}{message}"));
                        kernels.push(None);
                    }
                }
                if let (Some(e), Some(_)) = (err, time)
                    && e > tolerance
                {
                    m.2.push(format!(
                        "{tag}max relative error {e:.2e} against the reference evaluator (above {tolerance:.0e})"
                    ));
                }
            }
            if kernels.iter().all(Option::is_none) {
                // Every point failed the same way more or less: the cell
                // cannot run, and the first message says why.
                self.finish_points(&points, &measured, &measured_gpu);
                let first = measured.iter().find_map(|m| m.2.first().cloned()).unwrap_or_default();
                return Err(Stop::Error(first));
            }
            // The first point that lowered gives the tabs' text.
            let first = kernels.iter().position(Option::is_some).unwrap_or(0);
            let rw = self.rewrite_key(&program, &prepared, &points[first]);
            if let Some(r) = rewrites.get(&rw) {
                self.out.rewritten.push(r.einsum.statement.to_string());
            }
            first_kernels.push((tag.clone(), kernels));
            // The statement's output is data for the statements after it.
            if let Some(result) = reference.dense {
                let out = prepared.original.output().clone();
                data.sparse.remove(&out.name);
                data.declarations
                    .insert(out.name.clone(), Declaration { shape: out.shape, dtype: out.dtype });
                data.dense.insert(out.name, TensorValue::Values(result));
            }
            self.baselines(&prepared, &data, threads, repeats)?;
        }
        self.finish_points(&points, &measured, &measured_gpu);
        self.note_unread_sweeps(&program, &points, &first_kernels);
        for (_, kernels) in &first_kernels {
            if let Some(k) = kernels.iter().flatten().next() {
                self.out.ir.push(k.ir.clone());
                self.out.c_source.push(k.c.clone());
                self.out.cuda_source.push(k.cuda.clone());
            }
        }
        self.step("format statistics")?;
        self.format_views(&program, &data, &points)?;
        self.resources(&program, &points, &first_kernels)?;
        Ok(())
    }

    /// A note for each swept schedule item that no point's kernel reads
    /// (`sweep workspace in [dense, hash]` over a dense output): its rows
    /// differ only by noise, as `spindle run` says of the item.
    fn note_unread_sweeps(
        &mut self,
        program: &CellProgram,
        points: &[Point],
        kernels: &[(String, Vec<Option<KernelText>>)],
    ) {
        for (d, sweep) in program.sweeps.iter().enumerate() {
            let scheduled = matches!(
                sweep.param.value,
                SweepParam::Reduce
                    | SweepParam::Broadcast
                    | SweepParam::Matmul
                    | SweepParam::Tile(_)
                    | SweepParam::Workspace(_)
                    | SweepParam::Subsect
            );
            if !scheduled {
                continue;
            }
            let mut notes = Vec::new();
            for (_, per_point) in kernels {
                for (point, text) in points.iter().zip(per_point) {
                    let (Some(text), Some(value)) = (text, point.values.get(d)) else { continue };
                    let item = format!("{}={value}", sweep.param.value.name());
                    notes.push(spindle::Schedule::unread(&item, text.kind).into_iter().next());
                }
            }
            if let Some(Some(first)) = notes.first()
                && notes.iter().all(Option::is_some)
            {
                let why = first.split_once(": ").map_or(first.as_str(), |(_, why)| why);
                self.out.notes.push(format!(
                    "sweep {}: no point's kernel reads it ({why}), so its rows differ only by noise",
                    sweep.param.value.name()
                ));
            }
        }
    }

    /// Writes the sweep rows for the points measured so far: the C
    /// backend's, then the GPU's when there is one.
    fn finish_points(&mut self, points: &[Point], measured: &[Measured], measured_gpu: &[Measured]) {
        let rows = |backend: &str, measured: &[Measured]| -> Vec<SweepPoint> {
            points
                .iter()
                .zip(measured)
                .map(|(p, (time, err, errors, workspace))| SweepPoint {
                    values: p.values.clone(),
                    backend: backend.into(),
                    median_ms: *time,
                    max_rel_error: *err,
                    error: (!errors.is_empty()).then(|| errors.join("; ")),
                    workspace_bytes: *workspace,
                })
                .collect()
        };
        self.out.sweep.points = rows("c", measured);
        if gpu_available() {
            self.out.sweep.points.extend(rows("cuda", measured_gpu));
        }
    }

    /// Sweeps must change something: `g` needs a group format, `format.A`
    /// a bound tensor.
    fn check_sweeps_apply(&self, program: &CellProgram) -> Step<()> {
        let bound = |name: &str| program.bindings.iter().any(|b| b.name.value == name);
        for sweep in &program.sweeps {
            match &sweep.param.value {
                SweepParam::G => {
                    let grouped = program.formats.iter().any(|f| is_group(&f.spec.value))
                        || program.sweeps.iter().any(|s| {
                            matches!(s.param.value, SweepParam::Format(_))
                                && s.values.iter().any(|v| v.value.parse().is_ok_and(|f| is_group(&f)))
                        });
                    if !grouped {
                        return Err(self.cell_error(
                            &Diagnostic::new(
                                "no tensor has a grouped format to sweep g over",
                                sweep.param.span,
                            )
                            .with_label("nothing to sweep")
                            .with_note("give a tensor one: format A = groupcoo:dim=0,g=auto"),
                        ));
                    }
                }
                SweepParam::Format(t) if !bound(t) => {
                    return Err(self.cell_error(
                        &Diagnostic::new(format!("`{t}` is not bound in this cell"), sweep.param.span)
                            .with_label("unknown tensor"),
                    ));
                }
                _ => {}
            }
        }
        for f in &program.formats {
            if !bound(&f.tensor.value) {
                return Err(self.cell_error(
                    &Diagnostic::new(
                        format!("`{}` is not bound in this cell", f.tensor.value),
                        f.tensor.span,
                    )
                    .with_label("no data for this tensor")
                    .with_note("bind it first, e.g. A = load matrices/cora.mtx"),
                ));
            }
        }
        Ok(())
    }
}

/// A diagnostic of a statement moved to where the statement sits in the
/// cell.
fn shift(mut d: Diagnostic, at: usize) -> Diagnostic {
    let move_span = |s: Span| Span::new(s.start + at, s.end + at);
    d.span = move_span(d.span);
    for (s, _) in &mut d.secondary {
        *s = move_span(*s);
    }
    d
}

/// The cartesian product of the sweeps, the first sweep outermost; one
/// point with no values when the cell has no sweep.
fn points(program: &CellProgram) -> Vec<Point> {
    let mut points = vec![Vec::<String>::new()];
    for sweep in &program.sweeps {
        points = points
            .into_iter()
            .flat_map(|p| {
                sweep.values.iter().map(move |v| {
                    let mut p = p.clone();
                    p.push(v.value.clone());
                    p
                })
            })
            .collect();
    }
    points
        .into_iter()
        .map(|values| {
            let label = if values.is_empty() {
                "default".to_string()
            } else {
                program
                    .sweeps
                    .iter()
                    .zip(&values)
                    .map(|(s, v)| format!("{}={v}", s.param.value.name()))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            Point { values, label }
        })
        .collect()
}

/// The 1-minute load average when it exceeds the cores and the kernels
/// use more than one thread: then OpenMP's threads queue behind other work.
fn busy(threads: usize) -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let load: f64 = text.split_whitespace().next()?.parse().ok()?;
    (threads > 1 && load > spindle_c::cpu_threads() as f64).then_some(load)
}

fn shape_text(shape: &[usize]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str) -> CellOutput {
        let mut seen = Vec::new();
        let options =
            RunOptions { repeats: Some(1), threads: Some(2), skip_nvrtc: true, ..Default::default() };
        let out = run_cell(src, &options, &mut |p| seen.push(p), &AtomicBool::new(false));
        // Progress counts up to its total, one report per step (none when
        // the cell does not parse).
        assert!(!seen.is_empty() || out.error.is_some());
        for w in seen.windows(2) {
            assert!(w[1].done >= w[0].done && w[1].total == w[0].total, "{seen:?}");
        }
        if let (Some(first), Some(last)) = (seen.first(), seen.last()) {
            assert!(last.done < first.total, "{seen:?}");
        }
        out
    }

    #[test]
    fn a_groupcoo_sweep_measures_every_point() {
        let out = run("\
A = gen:powerlaw:rows=200,cols=150,nnz=1500,seed=3
B = rand A.1x16 seed=2
format A = groupcoo:dim=0,g=auto
C[m,n] += A[m,k] * B[k,n]
schedule tile.n=16
sweep g in [1, 4, auto]
");
        assert_eq!(out.error, None, "{out:#?}");
        assert_eq!(out.sweep.parameters, ["g"]);
        let values: Vec<&str> = out.sweep.points.iter().map(|p| p.values[0].as_str()).collect();
        assert_eq!(values, ["1", "4", "auto"]);
        for p in &out.sweep.points {
            assert_eq!(p.backend, "c");
            assert!(p.median_ms.unwrap() > 0.0, "{p:?}");
            assert!(p.max_rel_error.unwrap() < 1e-5, "{p:?}");
            assert_eq!(p.error, None);
        }
        assert_eq!(out.rewritten.len(), 1);
        assert!(out.rewritten[0].contains("A_grp"), "{}", out.rewritten[0]);
        assert!(out.c_source[0].contains("spindle_kernel"));
        assert!(out.cuda_source[0].contains("__global__"));
        assert!(!out.ir[0].is_empty());
        let names: Vec<&str> = out.sweep.baselines.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["sprs CSR (1 thread)", "faer CSR", "faer CSC"]);
        assert!(out.sweep.baselines.iter().all(|b| b.median_ms > 0.0));
        let view = &out.formats[0];
        assert_eq!(view.tensor, "A");
        assert!(view.spec.starts_with("groupcoo:dim=0,g=") && !view.spec.contains("auto"), "{}", view.spec);
        let gs: Vec<usize> = view.per_g.iter().map(|r| r.0).collect();
        assert!(gs.contains(&1) && gs.contains(&4), "{gs:?}");
        assert!(view.per_g.iter().all(|r| r.1 > 0));
        assert_eq!(view.per_g[0].2, 0.0, "g=1 has no padding");
        assert!(out.notes.iter().any(|n| n == NO_GPU_NOTE));
        assert!(!out.cancelled);
    }

    #[test]
    fn two_statements_chain_and_schedule_sweeps_combine() {
        let out = run("\
A = rand 24x16 seed=1
x = rand 16 seed=2
y[i] = A[i,j] * x[j]
z[i] = relu(y[i])
sweep reduce in [atomic, accumulate]
sweep tile.i in [4, 8]
");
        assert_eq!(out.error, None, "{out:#?}");
        assert_eq!(out.sweep.parameters, ["reduce", "tile.i"]);
        assert_eq!(out.sweep.points.len(), 4);
        assert_eq!(out.sweep.points[1].values, ["atomic", "8"]);
        assert!(out.sweep.points.iter().all(|p| p.max_rel_error.unwrap() < 1e-5 && p.median_ms.is_some()));
        assert_eq!(out.rewritten.len(), 2);
        assert_eq!(out.c_source.len(), 2);
        assert!(out.sweep.baselines.is_empty());
    }

    #[test]
    fn a_fusion_sweep_runs_the_statements_as_one_program() {
        let out = run("\
A = gen:powerlaw:rows=40,cols=40,nnz=160,seed=1
X = rand 40x8 f64 seed=2
W = rand 8x4 f64 seed=3
format A = csr
Z[i,j] = A[i,k] * X[k,h] * W[h,j]
sweep fusion in [none, maximal, trie]
");
        assert_eq!(out.error, None, "{out:#?}");
        assert_eq!(out.sweep.parameters, ["fusion"]);
        assert_eq!(out.sweep.points.len(), 3);
        for p in &out.sweep.points {
            assert!(p.max_rel_error.is_some_and(|e| e < 1e-5) && p.median_ms.is_some(), "{p:?}");
        }
        assert_eq!(out.rewritten, ["T1[i,h] = A[i,k] * X[k,h]", "Z[i,j] = T1[i,h] * W[h,j]"]);
        assert!(out.ir[2].contains("fusion=trie") && out.ir[2].contains("local T1[8]"), "{}", out.ir[2]);
        // Each point's code is headed by the point, not as a statement; the
        // first point's CUDA says why it does not print (fusion=none's
        // nests are several outermost loops, a GPU kernel's warp walks one).
        assert_eq!(out.code_labels, ["fusion=none", "fusion=maximal", "fusion=trie"]);
        assert_eq!(out.c_source.len(), 3);
        assert!(
            out.cuda_source.len() == 1
                && out.cuda_source[0].contains("cannot be printed as CUDA")
                && out.cuda_source[0].contains("this kernel has several"),
            "{:?}",
            out.cuda_source
        );
        // A value the sweep does not know is refused where it is written.
        let bad = run("\
A = rand 4x4 seed=1
x = rand 4 seed=2
y[i] = A[i,j] * x[j]
sweep fusion in [most]
");
        assert!(
            bad.error.as_deref().is_some_and(|e| e.contains("fusion is none, maximal or trie")),
            "{bad:?}"
        );
    }

    /// Statements joined by `;`, or a schedule's `fusion=`, make a program
    /// without a fusion sweep (`;` was refused as "not part of the Einsum
    /// language", and `fusion=maximal` ran the lines one by one).
    #[test]
    fn a_program_runs_without_a_fusion_sweep() {
        let data = "A = gen:powerlaw:rows=30,cols=30,nnz=120,seed=4
X = rand 30x8 f64 seed=2
W = rand 8x4 f64 seed=3
format A = csr
";
        let joined = run(&format!("{data}H[i,h] = A[i,k] * X[k,h]; Z[i,j] = H[i,h] * W[h,j]\n"));
        assert_eq!(joined.error, None, "{joined:#?}");
        assert!(joined.sweep.points[0].max_rel_error.is_some_and(|e| e < 1e-5), "{joined:?}");
        assert!(joined.ir[0].contains("fusion=trie"), "{}", joined.ir[0]);
        let lines = run(&format!(
            "{data}H[i,h] = A[i,k] * X[k,h]\nZ[i,j] = H[i,h] * W[h,j]\nschedule fusion=maximal\n"
        ));
        assert_eq!(lines.error, None, "{lines:#?}");
        assert!(lines.sweep.points[0].max_rel_error.is_some_and(|e| e < 1e-5), "{lines:?}");
        assert!(lines.ir[0].contains("fusion=maximal") && lines.ir.len() == 1, "{:?}", lines.ir);
    }

    /// A program's f16 output whose values lie beyond f16's range is
    /// compared with the reference as f16 holds it (infinite on both
    /// sides), as `run --check` does; the cell failed with an infinite error.
    #[test]
    fn a_program_checks_an_overflowing_f16_output_as_it_is_stored() {
        let dir = std::env::temp_dir().join(format!("spindle-overflow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let entries: String =
            (1..=4).flat_map(|i| (1..=8).map(move |j| format!("{i} {j} 30000\n"))).collect();
        let matrix = dir.join("big.mtx");
        std::fs::write(&matrix, format!("%%MatrixMarket matrix coordinate real general\n4 8 32\n{entries}"))
            .unwrap();
        let out = run(&format!(
            "A = load {0} f16\nB = load {0} f16\nformat A = csr\n\
             T[i,j] = A[i,j] * B[i,j]; z[i] = T[i,j]\n",
            matrix.display()
        ));
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(out.error, None, "{out:#?}");
        let point = &out.sweep.points[0];
        assert!(point.error.is_none() && point.max_rel_error.is_some_and(|e| e < 1e-2), "{point:?}");
    }

    /// A program cell's mistake is shown against the cell, at its line
    /// (it named `statement:2:15`, a line of the statements joined).
    #[test]
    fn a_program_cells_error_points_into_the_cell() {
        let out = run("\
x = rand 8 seed=1
w = rand 8 seed=2
schedule fusion=trie

y[i] = x[i] * w[i]
z[i] = y[i] * q[i]
");
        let error = out.error.expect("q is unknown");
        assert!(error.contains("unknown tensor `q`") && error.contains("cell:6:15"), "{error}");
    }

    /// A cell is checked as the command line is before a kernel is built:
    /// a dense output past the array limit (it aborted the process) and
    /// an index tensor's term past 64 bits (it wrapped in the kernel).
    #[test]
    fn a_cell_refuses_what_would_fail_in_its_kernel() {
        let big = run("y[i,j] = 1 where i < 100000, j < 100000\n");
        assert!(big.error.as_deref().is_some_and(|e| e.contains("GiB limit")), "{big:?}");
        let wide =
            run("x = rand 4 seed=1\nX = rand 4 i32 max=3 seed=2\ny[i] = x[X[i]*4611686018427387904]\n");
        assert!(wide.error.as_deref().is_some_and(|e| e.contains("beyond 64-bit integers")), "{wide:?}");
    }

    /// A program's points take their `sweep format.A` values (they ran
    /// every point dense, whatever the label said).
    #[test]
    fn a_program_sweep_stores_each_point_in_its_format() {
        let out = run("\
A = gen:powerlaw:rows=30,cols=30,nnz=120,seed=4
x = rand 30 f64 seed=2
y[i] = A[i,j] * x[j]
z[j] = A[i,j] * y[i]
sweep format.A in [coo, csr]
sweep fusion in [none, trie]
");
        assert_eq!(out.error, None, "{out:#?}");
        assert_eq!(out.sweep.points.len(), 4);
        for p in &out.sweep.points {
            assert!(p.max_rel_error.is_some_and(|e| e < 1e-5), "{p:?}");
        }
        assert!(out.ir[0].contains("A_crd0") && !out.ir[0].contains("A_pos"), "coo:\n{}", out.ir[0]);
        assert!(out.ir[2].contains("A_pos"), "csr:\n{}", out.ir[2]);
    }

    #[test]
    fn a_strip_sweep_runs_the_fused_rows_in_strips() {
        let out = run("\
A = gen:powerlaw:rows=41,cols=40,nnz=160,seed=1
X = rand 40x8 f64 seed=2
W = rand 8x4 f64 seed=3
format A = csr
Z[i,j] = A[i,k] * X[k,h] * W[h,j]
sweep strip in [1, 3, auto]
");
        assert_eq!(out.error, None, "{out:#?}");
        assert_eq!(out.sweep.parameters, ["strip"]);
        assert_eq!(out.sweep.points.len(), 3);
        for p in &out.sweep.points {
            assert!(p.max_rel_error.is_some_and(|e| e < 1e-5) && p.median_ms.is_some(), "{p:?}");
        }
        // 41 rows in strips of 3: the last strip has 2.
        assert!(out.ir[1].contains("for i_strip in 0..41 by strips of 3"), "{}", out.ir[1]);
        // W (256 bytes) stays cached between rows: auto keeps them apart.
        assert!(!out.ir[0].contains("strips") && !out.ir[2].contains("strips"), "{:?}", out.ir);
        let bad = run("\
A = rand 4x4 seed=1
x = rand 4 seed=2
y[i] = A[i,j] * x[j]
sweep strip in [0]
");
        assert!(
            bad.error.as_deref().is_some_and(|e| e.contains("strip is auto or a number of rows")),
            "{bad:?}"
        );
    }

    #[test]
    fn a_convolution_sweeps_its_loop_order_and_subsections() {
        const CONV: &str = "\
I = gen:uniform:rows=40,cols=40,nnz=120,seed=1 f64
F = rand 3x3 f64 seed=2
O = shape 38x38 f64
format I = csr
O[i,j] = I[i+p,j+q] * F[p,q]
";
        let out = run(&format!("{CONV}sweep order in [i+p+q+j, p+q+i+j]\nsweep subsect in [on, off]\n"));
        assert_eq!(out.error, None, "{out:#?}");
        assert_eq!(out.sweep.parameters, ["order", "subsect"]);
        assert_eq!(out.sweep.points.len(), 4);
        for p in &out.sweep.points {
            assert!(p.max_rel_error.is_some_and(|e| e < 1e-9) && p.median_ms.is_some(), "{p:?}");
        }
        // The window pair on the compressed level is one walk of its entries.
        assert!(out.ir[0].contains("taps q in 0..3, j in 0..38"), "{}", out.ir[0]);
        // An order that resolves a level before the one above it.
        let bad = run(&format!("{CONV}sweep order in [i+j+q+p]\n"));
        let failed = bad.sweep.points.iter().filter_map(|p| p.error.as_deref()).collect::<Vec<_>>();
        assert!(
            bad.error.as_deref().into_iter().chain(failed).any(|e| e.contains("resolve in storage order")),
            "{bad:#?}"
        );
        let bad =
            run("A = rand 4x4 seed=1\nx = rand 4 seed=2\ny[i] = A[i,j] * x[j]\nsweep subsect in [maybe]\n");
        assert!(bad.error.as_deref().is_some_and(|e| e.contains("subsect is on or off")), "{bad:?}");
    }

    /// A swept item no point's kernel reads gets a note (its rows looked
    /// like a measured difference); one the kernels read does not.
    #[test]
    fn a_sweep_over_an_item_no_kernel_reads_says_so() {
        let spmm = "A = rand 40x30 seed=1\nB = rand 30x8 seed=2\nformat A = csr\nC[m,n] += A[m,k] * B[k,n]\n";
        let out = run(&format!("{spmm}sweep workspace in [dense, hash]\n"));
        assert_eq!(out.error, None, "{out:#?}");
        let said = |out: &CellOutput, what: &str| {
            out.notes.iter().any(|n| n.starts_with(&format!("sweep {what}: no point")))
        };
        assert!(said(&out, "workspace"), "{:#?}", out.notes);
        let grouped = spmm.replace("format A = csr", "format A = groupcoo:g=2");
        let out = run(&format!("{grouped}sweep reduce in [atomic, segment(2)]\n"));
        assert_eq!(out.error, None, "{out:#?}");
        assert!(!said(&out, "reduce"), "{:#?}", out.notes);
    }

    #[test]
    fn errors_render_against_the_cell() {
        let out = run("A = rand 4x8\nB = rand 4x8\nC[m,n] += A[m,k] * B[k,n]\n");
        let e = out.error.unwrap();
        assert!(e.contains("cell:3:"), "{e}");
        assert!(e.contains("conflicting extents: `k`"), "{e}");

        let out = run("A = load nowhere/missing.mtx\nC[i] = A[i,j]\n");
        let e = out.error.unwrap();
        assert!(e.contains("`nowhere/missing.mtx` was not found") && e.contains("cell:1:10"), "{e}");

        let out = run("A = rand 4x4\nsweep g in [1, 2]\nC[i] = A[i,j]\n");
        assert!(out.error.unwrap().contains("no tensor has a grouped format"));

        // An operand never bound is named (the output's shape was blamed).
        let out = run("A = rand 4x4\nC[m,n] += A[m,k] * Q[k,n]\n");
        let e = out.error.unwrap();
        assert!(e.contains("unknown tensor `Q`") && e.contains("cell:2:20"), "{e}");

        let out = run("A = rand 4x4\nformat Q = csr\nC[i] = A[i,j]\n");
        assert!(out.error.unwrap().contains("`Q` is not bound in this cell"));

        let out = run("A = rand 4x4\nC[i] = A[i,j] * Z[j]\n");
        let e = out.error.unwrap();
        assert!(e.contains("cell:2:17"), "{e}");
    }

    #[test]
    fn a_fallback_generator_stands_in_for_a_missing_file() {
        let out = run("\
A = load no/such/file.mtx else gen:uniform:rows=30,cols=20,nnz=90,seed=4
x = rand A.1
format A = coo
y[i] = A[i,j] * x[j]
");
        assert_eq!(out.error, None, "{out:#?}");
        assert!(out.notes.iter().any(|n| n.contains("no/such/file.mtx not found")), "{:?}", out.notes);
        assert!(out.sweep.points[0].max_rel_error.unwrap() < 1e-5);
    }

    /// A folder where a data file is expected is named as such, fallback or
    /// not (it was reported "not found").
    #[test]
    fn loading_a_folder_says_it_is_one() {
        let folder = std::env::temp_dir().join(format!("spindle-load-folder-{}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        let f = folder.display();
        for src in [
            format!("A = load {f}\nC[i] = A[i,j]\n"),
            format!("A = load {f} else gen:uniform:rows=3,cols=3,nnz=3,seed=1\nC[i] = A[i,j]\n"),
            format!("M = kernelmap {f} voxel=0.5\nC[x] = M[x,y,z]\n"),
        ] {
            let e = run(&src).error.unwrap_or_else(|| panic!("{src} ran"));
            assert!(e.contains("is not a file") && e.contains("is a folder") && e.contains("cell:1:"), "{e}");
        }
        let _ = std::fs::remove_dir(&folder);
    }

    #[test]
    fn cancelling_stops_between_steps() {
        let cancel = AtomicBool::new(false);
        let mut steps = 0;
        let src = "A = rand 16x16 seed=1\nx = rand 16\nformat A = groupcoo\ny[i] = A[i,j] * x[j]\nsweep g in [1, 2, 4, 8]\n";
        let options = RunOptions { repeats: Some(1), skip_nvrtc: true, ..Default::default() };
        let out = run_cell(
            src,
            &options,
            &mut |p| {
                steps += 1;
                // Cancel once the second point starts compiling.
                if p.message.starts_with("g=2: compiling") {
                    cancel.store(true, Ordering::Relaxed);
                }
            },
            &cancel,
        );
        assert!(out.cancelled, "{out:#?}");
        assert_eq!(out.error, None);
        assert_eq!(out.sweep.points.len(), 1, "only g=1 finished: {:?}", out.sweep.points);
        assert!(out.sweep.points[0].median_ms.is_some());
    }

    #[test]
    fn kernel_maps_and_clebsch_gordan_run() {
        let out = run("\
Map = kernelmap points=200 voxel=0.25 kernel=3 seed=5
In = rand Map.1x4 seed=6
W = rand 27x4x4 seed=7
format Map = groupcoo:dim=2,g=auto
Out[x,m] += Map[x,y,z] * In[y,c] * W[z,c,m]
");
        assert_eq!(out.error, None, "{out:#?}");
        assert!(out.sweep.points[0].max_rel_error.unwrap() < 1e-5);

        let out = run("\
CG = cg lmax=1
X = rand 2x4x3 seed=8
Y = rand 2x4 seed=9
W = rand 2xCG.3x3x2 seed=10
format CG = groupcoo:dim=3,g=auto
Z[b,i,w] += CG[i,j,k,l] * X[b,j,u] * Y[b,k] * W[b,l,u,w]
");
        assert_eq!(out.error, None, "{out:#?}");
        assert!(out.sweep.points[0].max_rel_error.unwrap() < 1e-5);
    }

    #[test]
    fn no_panic_on_odd_cells() {
        for src in [
            "",
            "C[i] = ",
            "A = rand 0x0\nC[i] = A[i,j]",
            "A = rand 3\nformat A = bcsr:bm=2,bk=2\nC[i] = A[i]",
            "A = rand 4x4\nformat A = csr\nC[i] max= A[i,j]",
            "A = gen:uniform:rows=4,cols=4,nnz=3\nformat A = ell\nC[i,j] = A[i,j] * 2",
            "I = rand 4 i32 max=9\nB = rand 4x3\nC[I[p],n] += B[p,n]",
            "A = rand 4x4\nsweep format.A in [csr, dense, \"groupcoo:g=2\"]\nC[i] = A[i,j]",
        ] {
            let out = run(src);
            assert!(out.error.is_some() || !out.sweep.points.is_empty(), "{src}: {out:?}");
        }
    }
}
