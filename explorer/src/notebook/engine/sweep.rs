//! One sweep point: its formats and schedules, compiled, run, checked and
//! timed through the driver on the C backend and, when there is one, the GPU.

use std::collections::{BTreeMap, BTreeSet};

use ndarray::ArrayD;
use spindle::Backend as _;
use spindle_formats::{Coo, FormatSpec, GroupSize};
use spindle_ir::kernel::Strategy;
use spindle_ir::kernel::schedule::{Broadcasting, Path, Schedule};
use spindle_ir::lang::{Diagnostic, Einsum};
use spindle_ir::tensor::Tensors;

use crate::notebook::cell::{self, CellProgram, SweepParam};

use super::*;

impl Run<'_> {
    /// The formats of a point: the cell's, with the sweep's `g` and
    /// `format.A` applied.
    pub(super) fn point_formats(
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

    pub(super) fn rewrite_key(&self, program: &CellProgram, prepared: &Prepared, point: &Point) -> String {
        let formats = self.point_formats(program, &prepared.formatted, point);
        formats.iter().map(|(t, f)| format!("{t}={f}")).collect::<Vec<_>>().join(" ")
    }

    /// Rewrites the statement over a point's formats (cached by formats).
    pub(super) fn rewrite<'r>(
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

    /// The cell's schedule with a point's sweep items applied.
    pub(super) fn point_items(&self, program: &CellProgram, point: &Point) -> Schedule {
        let base = program.schedule.as_ref().map_or("", |s| s.value.as_str());
        // Checked when the cell was parsed.
        let mut schedule: Schedule = base.parse().unwrap_or_default();
        for (sweep, value) in program.sweeps.iter().zip(&point.values) {
            match &sweep.param.value {
                // Checked when the cell was parsed.
                SweepParam::Reduce => {
                    schedule.strategy = value.parse().unwrap_or(Strategy::AccumulateThenAtomic)
                }
                SweepParam::Broadcast => {
                    schedule.broadcasting =
                        if value == "eager" { Broadcasting::Eager } else { Broadcasting::Lazy }
                }
                SweepParam::Matmul => schedule.native_matmul = value == "on",
                SweepParam::Path => {
                    schedule.path = if value == "levels" { Path::Levels } else { Path::Tiles }
                }
                SweepParam::Tile(index) => {
                    schedule.tiles.insert(index.clone(), value.parse().unwrap_or(1));
                }
                SweepParam::Workspace(key) => {
                    // Checked when the cell was parsed.
                    let item: Schedule = format!("{key}={value}").parse().unwrap_or_default();
                    match key.strip_prefix("ws.") {
                        Some(name) => {
                            let _ = schedule.ws.set(name, value);
                        }
                        None => schedule.workspace = item.workspace,
                    }
                }
                SweepParam::Fusion => {
                    // Checked when the cell was parsed.
                    schedule.fusion =
                        format!("fusion={value}").parse::<Schedule>().map(|s| s.fusion).unwrap_or_default()
                }
                SweepParam::Strip => {
                    // Checked when the cell was parsed.
                    schedule.strip =
                        format!("strip={value}").parse::<Schedule>().map(|s| s.strip).unwrap_or_default()
                }
                SweepParam::Order => {
                    // Checked when the cell was parsed.
                    schedule.order =
                        format!("order={value}").parse::<Schedule>().map(|s| s.order).unwrap_or_default()
                }
                SweepParam::Subsect => schedule.subsections = value == "on",
                SweepParam::G | SweepParam::Format(_) => {}
            }
        }
        schedule
    }

    /// A point's schedules to try in order: the cell's with the sweep's
    /// items and the automatic tiles (a group as one tile of q, a tile of p
    /// that divides its extent) unless the schedule names them; the same
    /// with smaller tiles of p; then the cell's as written with the sweep's
    /// items. The first that lowers and compiles runs: tiles have size
    /// limits, and the automatic ones must not make a cell fail.
    pub(super) fn point_schedules(
        &self,
        program: &CellProgram,
        point: &Point,
        einsum: &Einsum,
    ) -> Vec<Schedule> {
        let mut schedule = self.point_items(program, point);
        let names_q = schedule.tiles.contains_key("q");
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
    pub(super) fn run_point(
        &mut self,
        program: &CellProgram,
        prepared: &Prepared,
        data: &Data,
        point: &Point,
        rewrites: &mut BTreeMap<String, Rewritten>,
        reference: &mut Reference,
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
        // What the CLI says before a run, said once per cell.
        for note in [r.padding_advice(), r.stored_zeros_note()].into_iter().flatten() {
            let note = format!("{tag}{note}");
            if !self.out.notes.contains(&note) {
                self.out.notes.push(note);
            }
        }
        let schedules = self.point_schedules(program, point, &r.einsum);
        let source = self.source;
        let render = |d: &Diagnostic| {
            if let Some(at) = schedule_item_at(program, d) {
                return cell::render(&d.at_schedule_item(at), source, "cell");
            }
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
        let cuda = match &compiled.kernel {
            spindle::Lowering::Tiles(kernel) => {
                spindle::print(kernel, &compiled.schedule, spindle::Target::Cuda)
            }
            spindle::Lowering::Levels(kernel) => spindle::print_levels_cuda(kernel),
        }
        .map_err(|e| e.to_string());
        let text = KernelText {
            ir: compiled.kernel.to_string(),
            c: compiled.source().to_string(),
            cuda: match &cuda {
                Ok(source) => source.clone(),
                Err(e) => format!("// this kernel cannot be printed as CUDA: {e}\n"),
            },
            kernel: compiled
                .kernel
                .tiles()
                .filter(|_| cuda.is_ok())
                .map(|k| (k.clone(), compiled.schedule.clone())),
            point: point.label.clone(),
            kind: match &compiled.kernel {
                spindle::Lowering::Tiles(_) => spindle_ir::kernel::schedule::KernelKind::tiles(false),
                spindle::Lowering::Levels(k) => spindle_ir::kernel::schedule::KernelKind::levels(k, false),
            },
        };
        self.step(format!("{label}: running on {}", crate::counted(threads, "thread")))?;
        let opts = spindle::TimingOptions { warmup: 1, repeats };
        // A sparse output is read back as assembled: its structure checked,
        // never expanded unless compared with a dense reference.
        let ran = if compiled.assembles() {
            compiled.assemble_time_and_measure(opts).map(|(a, t, peak)| (Ran::Sparse(a), t, peak))
        } else {
            compiled.run_and_time(opts).map(|(d, t)| (Ran::Dense(d), t, None))
        };
        let (result, median, workspace) = match ran {
            Ok((result, timing, peak)) => (result, timing.median_ms / 1e3, peak),
            Err(e) => return Ok(PointRun::failed(format!("C backend: {e}"))),
        };
        if reference.dense.is_none() && reference.first.is_none() {
            // The driver's reference: over the stored operands' entries
            // where the level path runs them as written; not built for a
            // sparse output too big to compare with it dense.
            let reference_of = || match &result {
                Ran::Sparse(assembled) => spindle::check::fits_dense(assembled).and_then(|()| r.reference()),
                _ => r.reference(),
            };
            match reference_of() {
                Ok(want) => reference.dense = Some(want),
                Err(e) => {
                    let message = match e {
                        spindle::Error::Statement { diagnostic, .. } => render(&diagnostic),
                        other => other.to_string(),
                    };
                    // Too large for the evaluator: the sparse outputs of
                    // the points are compared with the first one's.
                    if let Ran::Sparse(assembled) = &result {
                        let first = spindle::check::entries(assembled).map_err(|e| e.to_string());
                        match first {
                            Ok(coo) => {
                                let summary = message.lines().next().unwrap_or_default().to_string();
                                self.out.notes.push(format!(
                                    "{tag}not checked against the reference evaluator ({summary}): each point's \
                                     output is compared with the first point's ({})",
                                    point.label
                                ));
                                reference.first = Some(coo);
                                return Ok(PointRun {
                                    time: Some(median * 1e3),
                                    err: None,
                                    kernel: Ok(text),
                                    gpu: None,
                                    workspace,
                                });
                            }
                            Err(e) => return Ok(PointRun::failed(format!("C backend: {e}"))),
                        }
                    }
                    return Ok(PointRun {
                        time: Some(median * 1e3),
                        err: None,
                        kernel: Err(message),
                        gpu: None,
                        workspace,
                    });
                }
            }
        }
        let err = match (&result, &reference.dense, &reference.first) {
            (Ran::Dense(got), Some(want), _) => Some(spindle::check::max_rel_error(got, want)),
            (Ran::Sparse(got), Some(want), _) => {
                spindle::check::expand(got).ok().map(|got| spindle::check::max_rel_error(&got, want))
            }
            (Ran::Sparse(got), None, Some(first)) => match spindle::check::entries(got) {
                Ok(coo) => Some(spindle::check::max_rel_error_entries(&coo, first)),
                Err(e) => return Ok(PointRun::failed(format!("C backend: {e}"))),
            },
            _ => None,
        };
        let on_gpu = match gpu() {
            Some(gpu) => {
                self.step(format!("{label}: running on the GPU"))?;
                Some(run_on_gpu(gpu, &compiled, reference.dense.as_ref(), repeats))
            }
            None => None,
        };
        Ok(PointRun { time: Some(median * 1e3), err, kernel: Ok(text), gpu: on_gpu, workspace })
    }
}

/// What a point's output is checked against.
#[derive(Default)]
pub(super) struct Reference {
    /// The reference evaluator's output, once computed.
    pub(super) dense: Option<ArrayD<f64>>,
    /// Where the evaluator cannot walk the problem: the first point's sparse
    /// output.
    pub(super) first: Option<Coo<f64, i64>>,
}

/// A point's output: dense, or a sparse output as assembled.
enum Ran {
    Dense(ArrayD<f64>),
    Sparse(spindle_formats::Assembled),
}

/// One statement at one sweep point: its median time (ms), its error
/// against the reference, and its texts or why it failed; the same on the
/// GPU when there is one.
pub(super) struct PointRun {
    pub(super) time: Option<f64>,
    pub(super) err: Option<f64>,
    pub(super) kernel: Result<KernelText, String>,
    pub(super) gpu: Option<GpuRun>,
    /// The peak bytes of its ISM workspace, where it has one.
    pub(super) workspace: Option<usize>,
}

impl PointRun {
    pub(super) fn failed(message: String) -> PointRun {
        PointRun { time: None, err: None, kernel: Err(message), gpu: None, workspace: None }
    }
}

/// One point on the GPU.
pub(super) struct GpuRun {
    pub(super) time: Option<f64>,
    pub(super) err: Option<f64>,
    pub(super) error: Option<String>,
}

/// Compiles (NVRTC, cached), runs, checks and times on the GPU the kernel
/// the C backend ran.
pub(super) fn run_on_gpu(
    gpu: &spindle::CudaBackend,
    compiled: &spindle::Compiled<'_>,
    reference: Option<&ArrayD<f64>>,
    repeats: usize,
) -> GpuRun {
    let failed = |e: spindle::Error| GpuRun { time: None, err: None, error: Some(format!("CUDA: {e}")) };
    let run = || {
        let executable = match &compiled.kernel {
            spindle::Lowering::Tiles(kernel) => gpu.compile(kernel, &compiled.schedule)?,
            spindle::Lowering::Levels(_) => {
                return Err(spindle::Error::Input("the level path runs on the C backend only so far".into()));
            }
        };
        let mut uploaded = executable.upload(&compiled.prepared.data)?;
        uploaded.launch()?;
        let result = uploaded.output()?;
        let err = reference.map(|want| spindle::check::max_rel_error(&result, want));
        let timing = uploaded.time(spindle::TimingOptions { warmup: 1, repeats });
        Ok::<_, spindle::Error>((err, timing))
    };
    match run() {
        Ok((err, Ok(t))) => GpuRun { time: Some(t.median_ms), err, error: None },
        Ok((err, Err(e))) => GpuRun { err, ..failed(e) },
        Err(e) => failed(e),
    }
}

/// The texts of one lowered point.
#[derive(Clone, Debug)]
pub(super) struct KernelText {
    pub(super) ir: String,
    pub(super) c: String,
    pub(super) cuda: String,
    /// The kernel and its schedule, when it prints as CUDA (for the NVRTC
    /// report).
    pub(super) kernel: Option<(spindle_ir::kernel::Kernel, Schedule)>,
    pub(super) point: String,
    /// What the C kernel is, for the schedule items it reads.
    pub(super) kind: spindle_ir::kernel::schedule::KernelKind,
}

pub(super) fn is_group(spec: &FormatSpec) -> bool {
    matches!(spec, FormatSpec::GroupCoo { .. } | FormatSpec::BlockGroupCoo { .. })
}

pub(super) fn group_size(spec: &FormatSpec) -> Option<usize> {
    match spec {
        FormatSpec::GroupCoo { g: GroupSize::Fixed(g), .. }
        | FormatSpec::BlockGroupCoo { g: GroupSize::Fixed(g), .. } => Some(*g),
        _ => None,
    }
}

pub(super) fn with_g(spec: &FormatSpec, g: GroupSize) -> FormatSpec {
    match spec {
        FormatSpec::GroupCoo { dim, .. } => FormatSpec::GroupCoo { dim: *dim, g },
        FormatSpec::BlockGroupCoo { bm, bk, dim, .. } => {
            FormatSpec::BlockGroupCoo { bm: *bm, bk: *bk, dim: *dim, g }
        }
        other => other.clone(),
    }
}

/// Where in the cell the schedule item a diagnostic is about was written:
/// the sweep that sets it, else the item on the `schedule` line (as the
/// CLI puts the caret under the item in `--schedule`).
pub(super) fn schedule_item_at(program: &CellProgram, d: &Diagnostic) -> Option<Span> {
    let key = d.schedule_item.as_deref()?.as_str();
    if let Some(sweep) = program.sweeps.iter().find(|s| s.param.value.name() == key) {
        return Some(sweep.param.span);
    }
    let schedule = program.schedule.as_ref()?;
    let at = spindle_ir::kernel::schedule::item_span(&schedule.value, key)?;
    Some(Span { start: schedule.span.start + at.start, end: schedule.span.start + at.end })
}
