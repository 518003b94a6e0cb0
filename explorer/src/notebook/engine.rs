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
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use ndarray::ArrayD;
use spindle_cuda::runtime::{Gpu, TimingOptions};
use spindle_formats::{Coo, DType, FormatSpec, GroupSize, SparseTensor};
use spindle_ir::kernel::Strategy;
use spindle_ir::kernel::schedule::{Broadcasting, Schedule};
use spindle_ir::lang::{
    AssignOp, BinOp, Declaration, Declarations, Diagnostic, Einsum, ElemType, Expr, Span, check,
    declare_output, parse,
};
use spindle_ir::tensor::{TensorValue, Tensors};

use super::cell::{self, Binding, CellProgram, Cloud, Dim, ResourceMode, Source, SweepParam, parse_cell};
use super::output::{Baseline, CellOutput, FormatView, Progress, ResourceRow, SweepPoint};

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
const MAX_DENSE_ELEMENTS: usize = 1 << 24;

/// Unless the schedule names `tile.q`, a group of GroupCOO is one tile of
/// `q` (so it is summed in registers before its one scatter), up to this.
const MAX_GROUP_TILE: usize = 256;

/// The GPU, opened once per process and shared by every cell run; `None`
/// where there is none (then the explorer runs the C backend only and says
/// so).
pub fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Option<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| Gpu::open().ok()).as_ref()
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
type Measured = (Option<f64>, Option<f64>, Vec<String>);

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
        self.total = 1 + statements * points.len() * 2 + gpu_steps + statements + nvrtc * statements + 1;
        self.step("making the data")?;
        let mut data = self.make_data(&program)?;

        self.out.notes.push(format!(
            "C backend: {threads} thread{}, median of {repeats} run{} after one warm-up",
            if threads == 1 { "" } else { "s" },
            if repeats == 1 { "" } else { "s" }
        ));
        match gpu() {
            Some(gpu) => self.out.notes.push(format!(
                "GPU: {} ({}): CUDA events, median of {repeats} run{} after one warm-up",
                gpu.info().name,
                gpu.arch(),
                if repeats == 1 { "" } else { "s" }
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

        // Per point: (time, error) summed / maxed over statements.
        let mut measured: Vec<Measured> = vec![(Some(0.0), Some(0.0), Vec::new()); points.len()];
        // The same on the GPU, when there is one.
        let mut measured_gpu = measured.clone();
        let mut first_kernels = Vec::new();
        for (s, stmt) in program.statements.iter().enumerate() {
            let prepared = self.prepare(&program, &mut data, &stmt.value, stmt.span.start)?;
            let tag = if statements > 1 { format!("statement {}: ", s + 1) } else { String::new() };
            let mut rewrites: BTreeMap<String, Rewritten> = BTreeMap::new();
            let mut reference: Option<ArrayD<f64>> = None;
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
                let PointRun { time, err, kernel, gpu: on_gpu } = match result {
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
            if let Some(result) = reference {
                let out = prepared.original.output().clone();
                data.sparse.remove(&out.name);
                data.declarations
                    .insert(out.name.clone(), Declaration { shape: out.shape, dtype: out.dtype });
                data.dense.insert(out.name, TensorValue::Values(result));
            }
            self.baselines(&prepared, &data, threads, repeats)?;
        }
        self.finish_points(&points, &measured, &measured_gpu);
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

    /// Writes the sweep rows for the points measured so far: the C
    /// backend's, then the GPU's when there is one.
    fn finish_points(&mut self, points: &[Point], measured: &[Measured], measured_gpu: &[Measured]) {
        let rows = |backend: &str, measured: &[Measured]| -> Vec<SweepPoint> {
            points
                .iter()
                .zip(measured)
                .map(|(p, (time, err, errors))| SweepPoint {
                    values: p.values.clone(),
                    backend: backend.into(),
                    median_ms: *time,
                    max_rel_error: *err,
                    error: (!errors.is_empty()).then(|| errors.join("; ")),
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

    fn nvrtc_plan(&mut self, program: &CellProgram, points: usize) -> usize {
        if self.options.skip_nvrtc || program.resources == ResourceMode::Off {
            return 0;
        }
        match spindle_cuda::nvrtc::Toolchain::locate() {
            Ok(_) => match program.resources {
                ResourceMode::All => points,
                _ => 1,
            },
            Err(_) => {
                self.out.notes.push(
                    "CUDA toolchain missing: run `cargo xtask setup-cuda` for the NVRTC resource report"
                        .into(),
                );
                0
            }
        }
    }

    // ---- data ---------------------------------------------------------

    fn make_data(&mut self, program: &CellProgram) -> Step<Data> {
        let mut data = Data::default();
        for b in &program.bindings {
            self.bind(b, &mut data)?;
        }
        Ok(data)
    }

    fn dims(&self, dims: &[Dim], data: &Data) -> Step<Vec<usize>> {
        dims.iter()
            .map(|d| match d {
                Dim::Fixed(n) => Ok(*n),
                Dim::Of { tensor, dim, span } => {
                    let shape = &data.declarations[tensor].shape;
                    shape.get(*dim).copied().ok_or_else(|| {
                        self.cell_error(
                            &Diagnostic::new(
                                format!(
                                    "`{tensor}` has {} dimension{}",
                                    shape.len(),
                                    if shape.len() == 1 { "" } else { "s" }
                                ),
                                *span,
                            )
                            .with_label(format!("no dimension {dim}"))
                            .with_note("dimensions count from 0"),
                        )
                    })
                }
            })
            .collect()
    }

    fn bind(&mut self, b: &Binding, data: &mut Data) -> Step<()> {
        let name = b.name.value.clone();
        let fail = |run: &Self, msg: String, span: Span| {
            run.cell_error(&Diagnostic::new(msg, span).with_label("while making this tensor"))
        };
        let sparse = |data: &mut Data, coo: Coo<f64, i64>, dtype: Option<ElemType>| {
            let dtype = dtype.unwrap_or(ElemType::Value(DType::F32));
            data.declarations.insert(name.clone(), Declaration { shape: coo.shape.clone(), dtype });
            data.sparse.insert(name.clone(), coo);
        };
        match &b.source {
            Source::Load { path, dtype, fallback } => {
                match resolve(&path.value, self.options.base_dir.as_deref()) {
                    Some(file) => {
                        let loaded = spindle::input::read_file(&file).map_err(|e| {
                            fail(self, format!("reading {}: {e:#}", file.display()), path.span)
                        })?;
                        match loaded {
                            spindle::input::Loaded::Dense(value) => {
                                let mut decl = value.declaration();
                                if let Some(t) = dtype {
                                    decl.dtype = *t;
                                }
                                data.declarations.insert(name.clone(), decl);
                                data.dense.insert(name.clone(), value);
                            }
                            spindle::input::Loaded::Sparse(coo) => sparse(data, coo, *dtype),
                            spindle::input::Loaded::Shape(_) => unreachable!("files hold data"),
                        }
                    }
                    None => {
                        let Some(spec) = fallback else {
                            return Err(self.cell_error(
                                &Diagnostic::new(format!("`{}` was not found", path.value), path.span)
                                    .with_label("no such file")
                                    .with_note(format!(
                                        "relative paths are looked up in the shared data folder ({}) and beside the notebook; \
                                         add `else gen:...` to stand in a generated tensor",
                                        shared_dir_text()
                                    )),
                            ));
                        };
                        let coo = spec
                            .value
                            .generate::<f64, i64>()
                            .map_err(|e| fail(self, e.to_string(), spec.span))?;
                        self.out.notes.push(format!(
                            "{} not found: {name} is the generated gen:{} instead",
                            path.value, spec.value
                        ));
                        sparse(data, coo, *dtype);
                    }
                }
            }
            Source::Gen { spec, dtype } => {
                let coo =
                    spec.value.generate::<f64, i64>().map_err(|e| fail(self, e.to_string(), spec.span))?;
                sparse(data, coo, *dtype);
            }
            Source::Rand { dims, dtype, seed, max } => {
                let shape = self.dims(dims, data)?;
                let max = match (dtype, max) {
                    (ElemType::Index(_), None) => {
                        return Err(fail(self, "index tensors need a range: max=M".to_string(), b.span));
                    }
                    (ElemType::Index(_), Some(m)) => Some(*m),
                    (ElemType::Value(_), _) => None,
                };
                let value = spindle::input::random(&shape, *seed, max)
                    .map_err(|e| fail(self, e.to_string(), b.span))?;
                data.declarations.insert(name.clone(), Declaration { shape: shape.clone(), dtype: *dtype });
                data.dense.insert(name.clone(), value);
            }
            Source::Shape { dims, dtype } => {
                let shape = self.dims(dims, data)?;
                data.declarations.insert(name.clone(), Declaration { shape, dtype: *dtype });
            }
            Source::KernelMap { cloud, voxel, kernel } => {
                let points = match cloud {
                    Cloud::File { path, fallback } => {
                        match resolve(&path.value, self.options.base_dir.as_deref()) {
                            Some(file) => spindle_formats::io::read_xyz(&file).map_err(|e| {
                                fail(self, format!("reading {}: {e}", file.display()), path.span)
                            })?,
                            None => {
                                match fallback {
                                    Some((n, seed)) => {
                                        self.out.notes.push(format!(
                                    "{} not found: {name} is built from {n} random points (seed {seed}) instead",
                                    path.value
                                ));
                                        random_points(*n, *seed)
                                    }
                                    None => {
                                        return Err(self.cell_error(
                                    &Diagnostic::new(format!("`{}` was not found", path.value), path.span)
                                        .with_label("no such file")
                                        .with_note("add `else points=N` to build the map from random points instead"),
                                ));
                                    }
                                }
                            }
                        }
                    }
                    Cloud::Random { points, seed } => random_points(*points, *seed),
                };
                let voxels: Coo<f64, i64> = spindle_formats::generate::voxelize(&points, *voxel)
                    .map_err(|e| fail(self, e.to_string(), b.span))?;
                let map = spindle_formats::generate::kernel_map(&voxels, *kernel)
                    .map_err(|e| fail(self, e.to_string(), b.span))?;
                self.out.notes.push(format!(
                    "{name}: {} points in {} voxels, kernel map {} with {} entries",
                    points.len(),
                    voxels.nnz(),
                    shape_text(&map.shape),
                    map.nnz()
                ));
                sparse(data, map, None);
            }
            Source::ClebschGordan { lmax } => {
                let cg = spindle_formats::generate::cg_tensor::<f64, i64>(*lmax)
                    .map_err(|e| fail(self, e.to_string(), b.span))?;
                sparse(data, cg, None);
            }
        }
        Ok(())
    }

    // ---- statements ---------------------------------------------------

    /// Parses and checks a statement against the cell's data; makes dense
    /// copies of sparse tensors it reads without a format.
    fn prepare(&mut self, program: &CellProgram, data: &mut Data, text: &str, at: usize) -> Step<Prepared> {
        let shifted = |d: Diagnostic| shift(d, at);
        let statement = parse(text).map_err(|d| self.cell_error(&shifted(d)))?;
        let mut declarations = data.declarations.clone();
        if !declare_output(&statement, &mut declarations) {
            let name = &statement.lhs.tensor.name;
            return Err(self.cell_error(&shifted(
                Diagnostic::new(
                    format!("the shape of the output `{name}` cannot be worked out from the right-hand side"),
                    statement.lhs.span,
                )
                .with_label("unknown shape")
                .with_note(format!("declare it on a line above: {name} = shape 64x32")),
            )));
        }
        let original = check(&statement, &declarations).map_err(|d| self.cell_error(&shifted(d)))?;
        let swept_formats: BTreeSet<&str> = program
            .sweeps
            .iter()
            .filter_map(|s| match &s.param.value {
                SweepParam::Format(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        let formatted: BTreeSet<String> = original
            .tensors
            .keys()
            .filter(|t| {
                program.formats.iter().any(|f| &f.tensor.value == *t) || swept_formats.contains(t.as_str())
            })
            .cloned()
            .collect();
        // Sparse tensors read as they are need their dense form; dense
        // tensors with a format need their entries.
        for (name, info) in &original.tensors {
            if info.role == spindle_ir::lang::Role::Output {
                continue;
            }
            if formatted.contains(name) {
                if !data.sparse.contains_key(name)
                    && let Some(TensorValue::Values(dense)) = data.dense.get(name)
                {
                    let coo = Coo::from_ndarray(dense).map_err(|e| Stop::Error(e.to_string()))?;
                    data.sparse.insert(name.clone(), coo);
                }
            } else if !data.dense.contains_key(name)
                && let Some(coo) = data.sparse.get(name)
            {
                let elements: usize = coo.shape.iter().product();
                if elements > MAX_DENSE_ELEMENTS {
                    let span =
                        statement.rhs.accesses().iter().find(|a| &a.tensor.name == name).map(|a| a.span);
                    return Err(self.cell_error(&shifted(
                        Diagnostic::new(
                            format!(
                                "`{name}` is sparse ({}) and has no format; its dense copy would have {elements} elements",
                                shape_text(&coo.shape)
                            ),
                            span.unwrap_or(statement.span),
                        )
                        .with_label("read without a format")
                        .with_note(format!("give it one: format {name} = csr")),
                    )));
                }
                let dense = coo.to_ndarray().map_err(|e| Stop::Error(e.to_string()))?;
                data.dense.insert(name.clone(), TensorValue::Values(dense));
            }
        }
        let spmm = spmm_shape(&original, data, &formatted);
        Ok(Prepared { text: text.to_string(), at, original, formatted, spmm })
    }

    /// The formats of a point: the cell's, with the sweep's `g` and
    /// `format.A` applied.
    fn point_formats(
        &self,
        program: &CellProgram,
        formatted: &BTreeSet<String>,
        point: &Point,
    ) -> BTreeMap<String, FormatSpec> {
        let mut formats: BTreeMap<String, FormatSpec> = program
            .formats
            .iter()
            .filter(|f| formatted.contains(&f.tensor.value))
            .map(|f| (f.tensor.value.clone(), f.spec.value.clone()))
            .collect();
        for (sweep, value) in program.sweeps.iter().zip(&point.values) {
            if let SweepParam::Format(t) = &sweep.param.value
                && formatted.contains(t)
                && let Ok(spec) = value.parse::<FormatSpec>()
            {
                formats.insert(t.clone(), spec);
            }
        }
        for (sweep, value) in program.sweeps.iter().zip(&point.values) {
            if sweep.param.value == SweepParam::G {
                let g = if value == "auto" {
                    GroupSize::Auto
                } else {
                    GroupSize::Fixed(value.parse().unwrap_or(1))
                };
                for spec in formats.values_mut() {
                    *spec = with_g(spec, g);
                }
            }
        }
        formats
    }

    fn rewrite_key(&self, program: &CellProgram, prepared: &Prepared, point: &Point) -> String {
        let formats = self.point_formats(program, &prepared.formatted, point);
        formats.iter().map(|(t, f)| format!("{t}={f}")).collect::<Vec<_>>().join(" ")
    }

    /// Rewrites the statement over a point's formats (cached by formats).
    fn rewrite<'r>(
        &self,
        program: &CellProgram,
        prepared: &Prepared,
        data: &Data,
        point: &Point,
        cache: &'r mut BTreeMap<String, Rewritten>,
    ) -> Result<&'r Rewritten, String> {
        let key = self.rewrite_key(program, prepared, point);
        if !cache.contains_key(&key) {
            let formats = self.point_formats(program, &prepared.formatted, point);
            let reads: Tensors = data
                .dense
                .iter()
                .filter(|(n, _)| prepared.original.tensors.contains_key(*n))
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect();
            let sparse: BTreeMap<String, Coo<f64, i64>> = data
                .sparse
                .iter()
                .filter(|(n, _)| formats.contains_key(*n))
                .map(|(n, c)| (n.clone(), c.clone()))
                .collect();
            let r = Rewritten::rewrite(&prepared.original, &prepared.text, reads, &sparse, &formats)
                .map_err(|e| match e {
                    spindle::Error::Statement { diagnostic, text } if text == prepared.text => {
                        cell::render(&shift(*diagnostic, prepared.at), self.source, "cell")
                    }
                    spindle::Error::Statement { diagnostic, text } => {
                        cell::render(&diagnostic, &text, "rewritten")
                    }
                    other => other.to_string(),
                })?;
            cache.insert(key.clone(), r);
        }
        Ok(&cache[&key])
    }

    /// A point's schedules to try in order: the cell's with the sweep's
    /// items and the automatic tiles (a group as one tile of q, a tile of p
    /// that divides its extent) unless the schedule names them; the same
    /// with smaller tiles of p; then the cell's as written with the sweep's
    /// items. The first that lowers and compiles runs: tiles have size
    /// limits, and the automatic ones must not make a cell fail.
    fn point_schedules(&self, program: &CellProgram, point: &Point, einsum: &Einsum) -> Vec<Schedule> {
        let base = program.schedule.as_ref().map_or("", |s| s.value.as_str());
        // Checked when the cell was parsed.
        let mut schedule: Schedule = base.parse().unwrap_or_default();
        let mut names_q = schedule.tiles.contains_key("q");
        for (sweep, value) in program.sweeps.iter().zip(&point.values) {
            match &sweep.param.value {
                SweepParam::Reduce => {
                    schedule.strategy = if value == "atomic" {
                        Strategy::AtomicPerElement
                    } else {
                        Strategy::AccumulateThenAtomic
                    }
                }
                SweepParam::Broadcast => {
                    schedule.broadcasting =
                        if value == "eager" { Broadcasting::Eager } else { Broadcasting::Lazy }
                }
                SweepParam::Matmul => schedule.native_matmul = value == "on",
                SweepParam::Tile(index) => {
                    names_q |= index == "q";
                    schedule.tiles.insert(index.clone(), value.parse().unwrap_or(1));
                }
                SweepParam::G | SweepParam::Format(_) => {}
            }
        }
        // One schedule serves every statement of the cell: each takes the
        // items about its own indices. (With one statement an unknown index
        // stays, so the lowering says which.)
        if program.statements.len() > 1 {
            let uses = |i: &String| einsum.index(i).is_some();
            schedule.tiles.retain(|i, _| uses(i));
            schedule.order.retain(uses);
            if let Some(parallel) = &mut schedule.parallel {
                parallel.retain(uses);
            }
        }
        let plain = schedule.clone();
        let grouped = einsum.index("q").is_some_and(|q| q.reduced);
        if !names_q
            && let Some(q) = einsum.index("q")
            && q.reduced
        {
            schedule.tiles.insert("q".into(), q.extent.max(1).next_power_of_two().min(MAX_GROUP_TILE));
        }
        // A ragged tile of p turns the gathers into masked ones, several
        // times slower: unless named, tile.p divides p's extent (as the
        // SpMM bench chooses it).
        use crate::bench::spmm::{COO_P_CAP, GROUPCOO_P_CAP, auto_tile_p};
        let cap = if grouped { GROUPCOO_P_CAP } else { COO_P_CAP };
        let auto: Schedule = auto_tile_p(&schedule.to_string(), einsum, cap).parse().unwrap_or(schedule);
        // Smaller automatic tiles of p when the first does not fit.
        let mut tries = vec![auto.clone()];
        if !plain.tiles.contains_key("p") {
            let mut smaller = auto;
            while let Some(&t) = smaller.tiles.get("p")
                && t > 1
            {
                smaller.tiles.insert("p".into(), t / 2);
                tries.push(smaller.clone());
            }
        }
        if !tries.contains(&plain) {
            tries.push(plain);
        }
        tries
    }

    #[allow(clippy::too_many_arguments)]
    fn run_point(
        &mut self,
        program: &CellProgram,
        prepared: &Prepared,
        data: &Data,
        point: &Point,
        rewrites: &mut BTreeMap<String, Rewritten>,
        reference: &mut Option<ArrayD<f64>>,
        tag: &str,
        threads: usize,
        repeats: usize,
    ) -> Step<PointRun> {
        let label = format!("{tag}{}", point.label);
        self.step(format!("{label}: compiling C"))?;
        let r = match self.rewrite(program, prepared, data, point, rewrites) {
            Ok(r) => r,
            Err(message) => {
                self.done += 1;
                return Ok(PointRun::failed(message));
            }
        };
        let schedules = self.point_schedules(program, point, &r.einsum);
        let source = self.source;
        let render = |d: &Diagnostic| {
            if r.rewritten {
                cell::render(d, &r.text, "rewritten")
            } else {
                cell::render(&shift(d.clone(), prepared.at), source, "cell")
            }
        };
        let mut failure = String::new();
        let mut built = None;
        let backend = spindle::CBackend::new();
        for schedule in &schedules {
            let schedule = Schedule { threads: Some(threads), ..schedule.clone() };
            match r.compile(&backend, &schedule) {
                Err(spindle::Error::Statement { diagnostic, .. }) => failure = render(&diagnostic),
                Err(e) => failure = format!("C backend: {e}"),
                Ok(compiled) => {
                    built = Some(compiled);
                    break;
                }
            }
        }
        let Some(compiled) = built else {
            self.done += 1;
            return Ok(PointRun::failed(failure));
        };
        let kernel = &compiled.kernel;
        let cuda = match spindle_cuda::print::print_kernel(kernel, "spindle_kernel", &Default::default()) {
            Ok(k) => Ok(k),
            Err(e) => Err(e.to_string()),
        };
        let text = KernelText {
            ir: kernel.to_string(),
            c: compiled.source().to_string(),
            cuda: match &cuda {
                Ok(k) => k.source.clone(),
                Err(e) => format!("// this kernel cannot be printed as CUDA: {e}\n"),
            },
            cuda_kernel: cuda.ok(),
            point: point.label.clone(),
        };
        self.step(format!("{label}: running on {threads} thread{}", if threads == 1 { "" } else { "s" }))?;
        let (result, median) = match compiled.run_and_time(spindle::TimingOptions { warmup: 1, repeats }) {
            Ok((result, timing)) => (result, timing.median_ms / 1e3),
            Err(e) => return Ok(PointRun::failed(format!("C backend: {e}"))),
        };
        if reference.is_none() {
            match spindle_ir::eval::evaluate(&r.einsum, &r.data) {
                Ok(want) => *reference = Some(want),
                Err(d) => {
                    return Ok(PointRun {
                        time: Some(median * 1e3),
                        err: None,
                        kernel: Err(render(&d)),
                        gpu: None,
                    });
                }
            }
        }
        let err = reference.as_ref().map(|want| spindle::check::max_rel_error(&result, want));
        let on_gpu = match gpu() {
            Some(gpu) => {
                self.step(format!("{label}: running on the GPU"))?;
                Some(run_on_gpu(gpu, kernel, text.cuda_kernel.as_ref(), &r.data, reference.as_ref(), repeats))
            }
            None => None,
        };
        Ok(PointRun { time: Some(median * 1e3), err, kernel: Ok(text), gpu: on_gpu })
    }

    // ---- baselines, formats, resources --------------------------------

    fn baselines(&mut self, prepared: &Prepared, data: &Data, threads: usize, repeats: usize) -> Step<()> {
        self.step("baselines")?;
        let Some(shape) = &prepared.spmm else { return Ok(()) };
        let (Some(coo), Some(TensorValue::Values(b))) =
            (data.sparse.get(&shape.sparse), data.dense.get(&shape.dense))
        else {
            return Ok(());
        };
        match spmm_baselines(coo, b, threads, repeats) {
            Ok(found) => {
                for (name, ms) in found {
                    if !self.out.sweep.baselines.iter().any(|b| b.name == name) {
                        self.out.sweep.baselines.push(Baseline { name, backend: "c".into(), median_ms: ms });
                    }
                }
            }
            Err(e) => self.out.notes.push(format!("baselines skipped: {e:#}")),
        }
        if let Some(gpu) = gpu() {
            let half = matches!(
                data.declarations.get(&shape.dense).map(|d| d.dtype),
                Some(ElemType::Value(DType::F16 | DType::Bf16))
            );
            match cusparse_baseline(gpu, coo, b, half, repeats) {
                Ok(ms) => {
                    let name = "cuSPARSE CSR".to_string();
                    if !self.out.sweep.baselines.iter().any(|b| b.name == name) {
                        self.out.sweep.baselines.push(Baseline {
                            name,
                            backend: "cuda".into(),
                            median_ms: ms,
                        });
                    }
                }
                Err(e) => self.out.notes.push(format!("cuSPARSE baseline skipped: {e:#}")),
            }
        }
        Ok(())
    }

    fn format_views(&mut self, program: &CellProgram, data: &Data, points: &[Point]) -> Step<()> {
        let mut names: Vec<String> = program.formats.iter().map(|f| f.tensor.value.clone()).collect();
        for s in &program.sweeps {
            if let SweepParam::Format(t) = &s.param.value
                && !names.contains(t)
            {
                names.push(t.clone());
            }
        }
        for name in names {
            let Some(coo) = data.sparse.get(&name) else { continue };
            let dtype = match data.declarations.get(&name).map(|d| d.dtype) {
                Some(ElemType::Value(d)) => d,
                _ => DType::F32,
            };
            let only = BTreeSet::from([name.clone()]);
            let mut specs: Vec<FormatSpec> = Vec::new();
            for point in points {
                if let Some(spec) = self.point_formats(program, &only, point).remove(&name)
                    && !specs.contains(&spec)
                {
                    specs.push(spec);
                }
            }
            let Some(first) = specs.first() else { continue };
            let (spec, stats) = match format_stats(coo, first, dtype) {
                Ok(s) => s,
                Err(e) => {
                    self.out.notes.push(format!("format view of {name}: {e}"));
                    continue;
                }
            };
            let mut per_g: Vec<(usize, usize, f64)> = Vec::new();
            for s in specs.iter().filter(|s| is_group(s)) {
                if let Ok((resolved, st)) = format_stats(coo, s, dtype)
                    && let Some(g) = group_size(&resolved)
                    && !per_g.iter().any(|(h, _, _)| *h == g)
                {
                    per_g.push((g, st.bytes, st.padding_ratio));
                }
            }
            per_g.sort_by_key(|r| r.0);
            self.out.formats.push(FormatView { tensor: name, spec: spec.to_string(), stats, per_g });
        }
        Ok(())
    }

    fn resources(
        &mut self,
        program: &CellProgram,
        points: &[Point],
        kernels: &[(String, Vec<Option<KernelText>>)],
    ) -> Step<()> {
        let wanted = match program.resources {
            _ if self.options.skip_nvrtc => return Ok(()),
            ResourceMode::Off => return Ok(()),
            ResourceMode::First => 1,
            ResourceMode::All => points.len(),
        };
        if spindle_cuda::nvrtc::Toolchain::locate().is_err() {
            return Ok(());
        }
        for (tag, list) in kernels {
            for k in list.iter().flatten().take(wanted) {
                self.step(format!("{tag}{}: NVRTC for sm_90", k.point))?;
                let Some(cuda) = &k.cuda_kernel else { continue };
                let arch = spindle_cuda::nvrtc::Arch::Sm90;
                match spindle_cuda::nvrtc::compile(&cuda.source, "spindle", arch, &Default::default()) {
                    Ok(compiled) => {
                        let r = compiled
                            .resources_of(&cuda.symbol)
                            .or_else(|| compiled.resources.values().next())
                            .copied()
                            .unwrap_or_default();
                        self.out.resources.push(ResourceRow {
                            point: format!("{tag}{}", k.point),
                            arch: arch.as_str().into(),
                            registers: r.registers,
                            shared_bytes: r.shared_mem_bytes,
                            stack_bytes: r.stack_bytes,
                            spill_bytes: r.spill_stores_bytes + r.spill_loads_bytes,
                            launch: format!("{} x {}", cuda.launch.grid, cuda.launch.block),
                        });
                    }
                    Err(e) => {
                        let first = e.to_string().lines().next().unwrap_or_default().to_string();
                        self.out.notes.push(format!("NVRTC ({tag}{}): {first}", k.point));
                    }
                }
            }
        }
        Ok(())
    }
}

/// One statement at one sweep point: its median time (ms), its error
/// against the reference, and its texts or why it failed; the same on the
/// GPU when there is one.
struct PointRun {
    time: Option<f64>,
    err: Option<f64>,
    kernel: Result<KernelText, String>,
    gpu: Option<GpuRun>,
}

impl PointRun {
    fn failed(message: String) -> PointRun {
        PointRun { time: None, err: None, kernel: Err(message), gpu: None }
    }
}

/// One point on the GPU.
struct GpuRun {
    time: Option<f64>,
    err: Option<f64>,
    error: Option<String>,
}

/// Loads (NVRTC, cached), runs, checks and times a printed kernel on the GPU.
fn run_on_gpu(
    gpu: &Gpu,
    kernel: &spindle_ir::kernel::Kernel,
    printed: Option<&spindle_cuda::CudaKernel>,
    data: &Tensors,
    reference: Option<&ArrayD<f64>>,
    repeats: usize,
) -> GpuRun {
    let failed = |e: String| GpuRun { time: None, err: None, error: Some(format!("CUDA: {e}")) };
    let Some(printed) = printed else { return failed("this kernel cannot be printed as CUDA".into()) };
    let loaded = match gpu.load(printed) {
        Ok(l) => l,
        Err(e) => return failed(e.to_string()),
    };
    let result = match gpu.run(kernel, printed, data) {
        Ok(r) => r,
        Err(e) => return failed(e.to_string()),
    };
    let err = reference.map(|want| spindle::check::max_rel_error(&result, want));
    match gpu.time(kernel, &loaded, data, TimingOptions { warmup: 1, repeats }) {
        Ok(t) => GpuRun { time: Some(t.median_ms), err, error: None },
        Err(e) => GpuRun { err, ..failed(e.to_string()) },
    }
}

/// The texts of one lowered point.
#[derive(Clone, Debug)]
struct KernelText {
    ir: String,
    c: String,
    cuda: String,
    cuda_kernel: Option<spindle_cuda::CudaKernel>,
    point: String,
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

fn is_group(spec: &FormatSpec) -> bool {
    matches!(spec, FormatSpec::GroupCoo { .. } | FormatSpec::BlockGroupCoo { .. })
}

fn group_size(spec: &FormatSpec) -> Option<usize> {
    match spec {
        FormatSpec::GroupCoo { g: GroupSize::Fixed(g), .. }
        | FormatSpec::BlockGroupCoo { g: GroupSize::Fixed(g), .. } => Some(*g),
        _ => None,
    }
}

fn with_g(spec: &FormatSpec, g: GroupSize) -> FormatSpec {
    match spec {
        FormatSpec::GroupCoo { dim, .. } => FormatSpec::GroupCoo { dim: *dim, g },
        FormatSpec::BlockGroupCoo { bm, bk, dim, .. } => {
            FormatSpec::BlockGroupCoo { bm: *bm, bk: *bk, dim: *dim, g }
        }
        other => other.clone(),
    }
}

/// Statistics of `coo` stored in `spec` (values of `dtype`, i32 indices),
/// with the spec as resolved (g=auto replaced by its choice).
fn format_stats(
    coo: &Coo<f64, i64>,
    spec: &FormatSpec,
    dtype: DType,
) -> spindle_formats::Result<(FormatSpec, spindle_formats::Stats)> {
    fn go<V: spindle_formats::Value>(
        coo: &Coo<f64, i64>,
        spec: &FormatSpec,
    ) -> spindle_formats::Result<(FormatSpec, spindle_formats::Stats)> {
        let t = SparseTensor::<V, i32>::from_coo(&coo.cast::<V, i32>()?, spec)?;
        Ok((t.spec(), t.stats()?))
    }
    match dtype {
        DType::F64 => go::<f64>(coo, spec),
        DType::F32 => go::<f32>(coo, spec),
        DType::F16 => go::<half::f16>(coo, spec),
        DType::Bf16 => go::<half::bf16>(coo, spec),
    }
}

/// The sprs and faer times of A·B (f32, A in CSR or CSC), in ms.
fn spmm_baselines(
    coo: &Coo<f64, i64>,
    b: &ArrayD<f64>,
    threads: usize,
    repeats: usize,
) -> anyhow::Result<Vec<(String, f64)>> {
    use crate::bench::spmm::{faer_baselines, time_reset};
    let coo = coo.cast::<f32, i32>()?.canonicalize();
    let (m, _) = coo.expect_matrix("spmm")?;
    let b = b.mapv(|x| x as f32).into_dimensionality::<ndarray::Ix2>()?;
    let csr = spindle_formats::Compressed::from_coo(&coo, 0)?;
    let a = csr.to_sprs()?;
    let mut want = ndarray::Array2::<f32>::zeros((m, b.ncols()));
    sprs::prod::csr_mulacc_dense_rowmaj(a.view(), b.view(), want.view_mut());
    let want_flat: Vec<f32> = want.iter().copied().collect();
    let mut c = ndarray::Array2::<f32>::zeros((m, b.ncols()));
    let t_sprs = time_reset(
        repeats,
        &mut c,
        |c| c.fill(0.0),
        |c| sprs::prod::csr_mulacc_dense_rowmaj(a.view(), b.view(), c.view_mut()),
    );
    let faer = faer_baselines(&coo, &b, &want_flat, threads, repeats)?;
    Ok(vec![
        ("sprs CSR (1 thread)".into(), t_sprs * 1e3),
        ("faer CSR".into(), faer.csr_1 * 1e3),
        ("faer CSC".into(), faer.csc_1 * 1e3),
    ])
}

/// cuSPARSE SpMM on CSR (f32, or f16 when B is half), in ms.
fn cusparse_baseline(
    gpu: &Gpu,
    coo: &Coo<f64, i64>,
    b: &ArrayD<f64>,
    half: bool,
    repeats: usize,
) -> anyhow::Result<f64> {
    use spindle_cuda::baseline::{CsrHost, Precision, cusparse_spmm_csr};
    let coo = coo.clone().canonicalize();
    let (rows, cols) = coo.expect_matrix("spmm")?;
    let csr = spindle_formats::Compressed::from_coo(&coo, 0)?;
    let a = CsrHost {
        rows,
        cols,
        indptr: csr.pos.iter().map(|&x| i32::try_from(x)).collect::<Result<_, _>>()?,
        indices: csr.crd.iter().map(|&x| i32::try_from(x)).collect::<Result<_, _>>()?,
        values: csr.val.clone(),
    };
    let n = b.shape().get(1).copied().unwrap_or(1);
    let dense: Vec<f64> = b.iter().copied().collect();
    let precision = if half { Precision::F16 } else { Precision::F32 };
    let run = cusparse_spmm_csr(gpu, &a, &dense, n, precision, TimingOptions { warmup: 1, repeats })?;
    Ok(run.timing.median_ms)
}

/// Recognises `O[i,j] (+)= A[i,k] * B[k,j]` (either factor first) with A
/// sparse and B dense values.
fn spmm_shape(e: &Einsum, data: &Data, formatted: &BTreeSet<String>) -> Option<SpmmShape> {
    let st = &e.statement;
    if !matches!(st.op, AssignOp::Assign | AssignOp::AddAssign) || !st.wheres.is_empty() {
        return None;
    }
    let plain = |a: &spindle_ir::lang::Access| -> Option<Vec<String>> {
        a.subscripts.iter().map(|s| s.as_index().map(|i| i.name.clone())).collect()
    };
    let lhs = plain(&st.lhs)?;
    let Expr::Binary { op: BinOp::Mul, lhs: x, rhs: y, .. } = &st.rhs else { return None };
    let (Expr::Access(x), Expr::Access(y)) = (x.as_ref(), y.as_ref()) else { return None };
    let (xs, ys) = (plain(x)?, plain(y)?);
    if lhs.len() != 2 || xs.len() != 2 || ys.len() != 2 {
        return None;
    }
    let is_sparse = |n: &str| data.sparse.contains_key(n) && formatted.contains(n);
    let is_dense =
        |n: &str| matches!(data.dense.get(n), Some(TensorValue::Values(_))) && !formatted.contains(n);
    let (a, ai, b, bi, dense_first) = if is_sparse(&x.tensor.name) {
        (&x.tensor.name, &xs, &y.tensor.name, &ys, false)
    } else {
        (&y.tensor.name, &ys, &x.tensor.name, &xs, true)
    };
    let (i, j) = (&lhs[0], &lhs[1]);
    let shaped = ai[0] == *i && bi[1] == *j && ai[1] == bi[0] && ai[1] != *i && ai[1] != *j && i != j;
    (shaped && is_sparse(a) && is_dense(b)).then(|| SpmmShape {
        sparse: a.clone(),
        dense: b.clone(),
        _dense_first: dense_first,
    })
}

/// Seeded points in [0,1)² × [0,0.5): a thin slab, so the kernel map has
/// the many-neighbour sites of a surface (as the corpus builds them).
fn random_points(n: usize, seed: u64) -> Vec<[f64; 3]> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| [rng.random::<f64>(), rng.random::<f64>(), rng.random::<f64>() * 0.5]).collect()
}

/// The 1-minute load average when it exceeds the cores and the kernels
/// use more than one thread: then OpenMP's threads queue behind other work.
fn busy(threads: usize) -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let load: f64 = text.split_whitespace().next()?.parse().ok()?;
    (threads > 1 && load > spindle_c::cpu_threads() as f64).then_some(load)
}

/// A path as the cell names it: absolute; else in the shared data folder;
/// else beside the notebook; else from the working folder.
fn resolve(path: &str, base: Option<&Path>) -> Option<PathBuf> {
    let p = Path::new(path);
    if p.is_absolute() {
        return p.is_file().then(|| p.to_path_buf());
    }
    if let Some(f) = spindle_formats::data::shared_file(path) {
        return Some(f);
    }
    if let Some(b) = base {
        let f = b.join(p);
        if f.is_file() {
            return Some(f);
        }
    }
    p.is_file().then(|| p.to_path_buf())
}

fn shared_dir_text() -> String {
    match spindle_formats::data::shared_data_dir() {
        Some(d) => d.display().to_string(),
        None => "../shared/data or $SPINDLE_DATA, absent here".into(),
    }
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

    #[test]
    fn spmm_shapes_are_recognised() {
        let mut data = Data::default();
        data.sparse.insert("A".into(), spindle_formats::generate::uniform(4, 5, 6, 1).unwrap());
        data.dense.insert("B".into(), TensorValue::Values(ArrayD::zeros(vec![5, 3])));
        let decls: Declarations = [("A", vec![4, 5]), ("B", vec![5, 3]), ("C", vec![4, 3])]
            .into_iter()
            .map(|(n, s)| (n.to_string(), Declaration { shape: s, dtype: ElemType::Value(DType::F32) }))
            .collect();
        let formatted = BTreeSet::from(["A".to_string()]);
        let shape = |s: &str| spmm_shape(&check(&parse(s).unwrap(), &decls).unwrap(), &data, &formatted);
        assert_eq!(shape("C[m,n] += A[m,k] * B[k,n]").unwrap().sparse, "A");
        assert_eq!(shape("C[m,n] = B[k,n] * A[m,k]").unwrap().dense, "B");
        assert_eq!(shape("C[m,n] += A[m,k] * B[k,n] * 2"), None);
        assert_eq!(shape("C[m,n] max= A[m,k] * B[k,n]"), None);
    }
}
