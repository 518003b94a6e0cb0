//! A prepared statement compiled on a backend: run, check, time.

use ndarray::ArrayD;
use spindle_ir::formats::Assembled;
use spindle_ir::kernel::Kernel;
use spindle_ir::kernel::schedule::{KernelKind, Path, Schedule, ScheduleError};
use spindle_ir::level::LevelKernel;

use crate::autotune::{TuneCache, TuneKey, Tuned, space, tune};
use crate::backend::{Backend, CompileReport, Executable};
use crate::check::{Check, as_stored, max_rel_error, tolerance};
use crate::error::{Error, Result};
use crate::problem::Prepared;
use crate::target::Target;
use crate::timing::{Timing, TimingOptions};

/// The kernel IR a statement was lowered to: a tile program, or a loop
/// tree over stored operands' levels (`path=levels`).
#[derive(Clone, Debug)]
pub enum Lowering {
    Tiles(Kernel),
    Levels(LevelKernel),
}

impl Lowering {
    /// The schedule items this kernel reads, on CUDA (`cuda`) or C.
    pub fn kind(&self, cuda: bool) -> KernelKind {
        match self {
            Lowering::Tiles(_) => KernelKind::tiles(cuda),
            Lowering::Levels(kernel) => KernelKind::levels(kernel, cuda),
        }
    }

    /// The tile program, when the statement took the tile path.
    pub fn tiles(&self) -> Option<&Kernel> {
        match self {
            Lowering::Tiles(k) => Some(k),
            Lowering::Levels(_) => None,
        }
    }
}

impl std::fmt::Display for Lowering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lowering::Tiles(k) => k.fmt(f),
            Lowering::Levels(k) => k.fmt(f),
        }
    }
}

/// A kernel compiled for one backend, with the statement and data it runs on.
pub struct Compiled<'p> {
    pub prepared: &'p Prepared,
    /// The schedule the kernel was lowered under (the tuned one when
    /// autotuned).
    pub schedule: Schedule,
    pub kernel: Lowering,
    /// The search that chose the schedule, when it was autotuned.
    pub tuned: Option<Tuned>,
    executable: Box<dyn Executable>,
}

impl std::fmt::Debug for Compiled<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("statement", &self.prepared.text)
            .field("schedule", &self.schedule.to_string())
            .field("report", self.report())
            .finish_non_exhaustive()
    }
}

impl<'p> Compiled<'p> {
    /// The printed source (C or CUDA C).
    pub fn source(&self) -> &str {
        self.executable.source()
    }

    pub fn report(&self) -> &CompileReport {
        self.executable.report()
    }

    /// Runs once on the prepared data and returns the output (f64, rounded
    /// to the output's dtype).
    pub fn run(&self) -> Result<ArrayD<f64>> {
        let mut uploaded = self.executable.upload(&self.prepared.data)?;
        uploaded.launch()?;
        uploaded.output()
    }

    /// Runs once and compares the output with the reference evaluator.
    pub fn check(&self) -> Result<(ArrayD<f64>, Check)> {
        if self.assembles() {
            let mut uploaded = self.executable.upload(&self.prepared.data)?;
            uploaded.launch()?;
            let got =
                uploaded.assembled()?.ok_or_else(|| Error::input("the output is dense, not assembled"))?;
            let check = self.compare_assembled(&got)?;
            return Ok((crate::check::expand(&got)?, check));
        }
        let got = self.run()?;
        let check = self.compare(&got)?;
        Ok((got, check))
    }

    /// Compares an output of this kernel with the reference evaluator.
    pub fn compare(&self, got: &ArrayD<f64>) -> Result<Check> {
        let want = self.stored_reference()?;
        Ok(Check {
            max_rel_error: max_rel_error(got, &want),
            tolerance: tolerance(&self.prepared.einsum),
            stored: None,
        })
    }

    /// The reference output as the output's dtype holds it, dense or
    /// assembled alike. A value beyond its range is infinite in the
    /// kernel's output as in the reference's (the kernel was blamed for an
    /// f16 output's overflow), and a 16-bit sparse output is compared with
    /// the rounded reference (the C backend's bf16 sparse output reported
    /// 2e-3 where the same bytes from the emulated GPU reported 0).
    fn stored_reference(&self) -> Result<ArrayD<f64>> {
        let dtype = self.prepared.einsum.output().dtype;
        Ok(self.prepared.reference()?.mapv(|w| as_stored(dtype, w)))
    }

    /// Whether the output is sparse: assembled by the kernel in the format
    /// it was given.
    pub fn assembles(&self) -> bool {
        matches!(&self.kernel, Lowering::Levels(k) if k.assembly.is_some())
    }

    /// Where a sparse output is gathered in a workspace over several
    /// levels because the loops follow a stored operand's level order
    /// (SpTTM `A[i,j,l] = T[k,i,j] * M[k,l]` with T in CSF by its modes
    /// k, i, j), the same operand with its levels in the output's order,
    /// whose loops would reach the output's levels in turn (on FROSTT
    /// med.tns, one thread: 96.7 ms -> 8.1 ms). A note for the user: the
    /// format is theirs to choose.
    pub fn level_order_advice(&self) -> Option<String> {
        use spindle_formats::FormatSpec;
        use spindle_ir::level::WorkspaceKind;
        let Lowering::Levels(k) = &self.kernel else { return None };
        let a = k.assembly.as_ref()?;
        if !matches!(a.workspace, WorkspaceKind::Ism(_)) || a.levels.len() - a.gathered < 2 {
            return None;
        }
        let stored = self.prepared.stored.as_ref()?;
        let statement = &stored.original.statement;
        let output: Vec<String> =
            statement.lhs.subscripts.iter().filter_map(|s| s.as_index().map(|i| i.name.clone())).collect();
        for access in statement.rhs.accesses() {
            let name = &access.tensor.name;
            let Some(modes) = (match stored.formats.get(name)? {
                FormatSpec::Csf { modes } | FormatSpec::Levels { modes, .. } => Some(modes),
                _ => None,
            }) else {
                continue;
            };
            let indices: Option<Vec<String>> =
                access.subscripts.iter().map(|s| s.as_index().map(|i| i.name.clone())).collect();
            let Some(indices) = indices else { continue };
            let current: Vec<usize> = match modes.is_empty() {
                true => (0..indices.len()).collect(),
                false => modes.clone(),
            };
            let in_output = |m: &usize| output.contains(&indices[*m]);
            let mut wanted: Vec<usize> =
                output.iter().filter_map(|o| indices.iter().position(|i| i == o)).collect();
            wanted.extend(current.iter().filter(|m| !in_output(m)));
            if wanted == current || wanted.len() != current.len() {
                continue;
            }
            let spec = match stored.formats[name].clone() {
                FormatSpec::Csf { .. } => FormatSpec::Csf { modes: wanted.clone() },
                FormatSpec::Levels { dense, .. } => FormatSpec::Levels { dense, modes: wanted.clone() },
                _ => continue,
            };
            let order = |ms: &[usize]| ms.iter().map(|&m| indices[m].as_str()).collect::<Vec<_>>().join(", ");
            return Some(format!(
                "`{}` is gathered in a workspace over {} levels: the loops follow `{name}`'s levels ({}); \
                 stored with its levels in the output's order ({}), `--format {name}={spec}`, they would reach \
                 `{}`'s levels in turn",
                a.tensor,
                a.levels.len() - a.gathered,
                order(&current),
                order(&wanted),
                a.tensor
            ));
        }
        None
    }

    /// One run for the sparse output, then the timing (each timed launch
    /// counts, sizes and fills the output, as a user's run does).
    pub fn assemble_and_time(&self, opts: TimingOptions) -> Result<(Assembled, Timing)> {
        let (assembled, timing, _) = self.assemble_time_and_measure(opts)?;
        Ok((assembled, timing))
    }

    /// [`Compiled::assemble_and_time`], and the most bytes a thread's ISM
    /// workspace held in the first run (`None` without one).
    pub fn assemble_time_and_measure(
        &self,
        opts: TimingOptions,
    ) -> Result<(Assembled, Timing, Option<usize>)> {
        let mut uploaded = self.executable.upload(&self.prepared.data)?;
        uploaded.launch()?;
        let assembled =
            uploaded.assembled()?.ok_or_else(|| Error::input("the output is dense, not assembled"))?;
        let peak = uploaded.workspace_peak();
        let timing = uploaded.time(opts)?;
        Ok((assembled, timing, peak))
    }

    /// The most bytes a thread's ISM workspace held in one run; `None` (and
    /// nothing run) when the kernel has none.
    pub fn workspace_peak(&self) -> Result<Option<usize>> {
        let ism = matches!(&self.kernel, Lowering::Levels(k)
            if matches!(&k.assembly, Some(a) if matches!(a.workspace, spindle_ir::level::WorkspaceKind::Ism(_))));
        if !ism {
            return Ok(None);
        }
        let mut uploaded = self.executable.upload(&self.prepared.data)?;
        uploaded.launch()?;
        Ok(uploaded.workspace_peak())
    }

    /// Compares a sparse output with the reference evaluator: its structure
    /// level by level, then every value (a reference non-zero it lacks is
    /// an error of that size).
    pub fn compare_assembled(&self, got: &Assembled) -> Result<Check> {
        let entries = crate::check::entries(got)?;
        // Refused before the reference builds a dense output too big,
        // unless an operand masks the output: then entry by entry.
        let dense = match crate::check::expand(got) {
            Ok(dense) => dense,
            Err(too_big) => {
                let want = self.prepared.reference_entries().ok_or(too_big)??;
                let (dtype, tolerance) =
                    (self.prepared.einsum.output().dtype, tolerance(&self.prepared.einsum));
                return crate::check::check_entries(got, want, dtype, tolerance);
            }
        };
        let want = self.stored_reference()?;
        Ok(Check {
            max_rel_error: max_rel_error(&dense, &want),
            tolerance: tolerance(&self.prepared.einsum),
            stored: Some(entries.nnz()),
        })
    }

    /// Times launches on the prepared data.
    pub fn time(&self, opts: TimingOptions) -> Result<Timing> {
        self.executable.upload(&self.prepared.data)?.time(opts)
    }

    /// One run for the output, then the timing, on one upload.
    pub fn run_and_time(&self, opts: TimingOptions) -> Result<(ArrayD<f64>, Timing)> {
        let mut uploaded = self.executable.upload(&self.prepared.data)?;
        uploaded.launch()?;
        let output = uploaded.output()?;
        let timing = uploaded.time(opts)?;
        Ok((output, timing))
    }
}

impl Prepared {
    /// Lowers under `schedule` (on the path it names) and compiles on
    /// `backend`.
    pub fn compile(&self, backend: &dyn Backend, schedule: &Schedule) -> Result<Compiled<'_>> {
        let levels = schedule.path == Path::Levels || self.tile_refusal.is_some();
        let mut schedule = schedule.clone();
        let (kernel, executable) = match levels {
            false => {
                let mut kernel = self.lower(&schedule)?;
                if backend.target() != Target::C
                    && let Some(columns) = block_row_columns(&kernel, &schedule)
                {
                    schedule = columns;
                    kernel = self.lower(&schedule)?;
                }
                let executable = backend.compile(&kernel, &schedule)?;
                (Lowering::Tiles(kernel), executable)
            }
            true => {
                let lowered = self.lower_levels(&schedule)?;
                let executable = backend.compile_levels(&lowered, &schedule)?;
                (Lowering::Levels(lowered.kernel), executable)
            }
        };
        Ok(Compiled { prepared: self, schedule, kernel, tuned: None, executable })
    }

    /// Compiles the tile-path kernels of `schedules` at once, in parallel
    /// where the backend can ([`Backend::precompile`]), so that
    /// [`Prepared::compile`] then finds each in the backend's cache. A
    /// schedule that does not lower, or a kernel that does not compile, is
    /// left for `compile` to report.
    pub fn precompile(&self, backend: &dyn Backend, schedules: &[Schedule]) {
        let jobs: Vec<(&Prepared, &Schedule)> = schedules.iter().map(|s| (self, s)).collect();
        Prepared::precompile_all(backend, &jobs);
    }

    /// [`Prepared::precompile`] over several problems (a sweep over formats)
    /// at once.
    pub fn precompile_all(backend: &dyn Backend, jobs: &[(&Prepared, &Schedule)]) {
        let kernels: Vec<(Kernel, Schedule)> = jobs
            .iter()
            .filter(|(prepared, s)| s.path == Path::Tiles && prepared.tile_refusal.is_none())
            .filter_map(|(prepared, s)| prepared.lower(s).ok().map(|k| (k, (*s).clone())))
            .collect();
        backend.precompile(&kernels);
    }

    /// The fastest schedule of the driver's search space
    /// ([`autotune::space`](crate::autotune::space)): tiles, and CPU
    /// threads on the C backend, where the level path (`path=levels`) also
    /// competes when the statement lowers to it, as it does on a GPU under
    /// several lane splits of its rows. The winner is cached per (statement,
    /// shapes, device), so the search runs once per problem and machine. On
    /// the emulated GPU nothing is searched: the default schedule.
    pub fn autotune(&self, backend: &dyn Backend, tuner: &mut Tuner) -> Result<Compiled<'_>> {
        if backend.target() == Target::Emulate {
            // The emulated GPU runs under a sanitizer, and its times say
            // nothing of a GPU's: a search would take minutes and choose
            // by noise. The default schedule, on the path that takes it.
            let path = if self.tile_refusal.is_some() { Path::Levels } else { Path::Tiles };
            return self.compile(backend, &Schedule { path, ..Schedule::default() });
        }
        // (On a GPU the level path's lane splits are searched, where there
        // are stored operands and the level path is not left out.)
        let level_search = backend.target() == Target::Cuda && self.stored.is_some() && !tuner.tile_path_only;
        if self.tile_refusal.is_some() && !level_search {
            // Only the level path applies; its loop order is chosen from
            // the levels, so there are no tiles to search.
            let threads = tuner.threads;
            return self.compile(backend, &Schedule { path: Path::Levels, threads, ..Schedule::default() });
        }
        let max_threads = crate::backend::CBackend::max_threads();
        let mut candidates = match &self.tile_refusal {
            None => space(&self.lower(&Schedule::default())?, backend.target(), max_threads),
            Some(_) => Vec::new(),
        };
        // On the CPU, the level path's loops over the stored levels: CSR
        // SpMM's row loops beat the tile path's expanded rows on every
        // shared matrix (`bench rows`, 2026-11-26: 1.43x geomean on one
        // thread, 1.7x on bcsstk13); on a GPU, its rows under several lane
        // splits.
        if self.stored.is_some() && !tuner.tile_path_only {
            candidates.extend(crate::autotune::level_candidates(backend.target(), max_threads));
        }
        if let Some(threads) = tuner.threads.filter(|_| backend.target() == Target::C) {
            candidates.retain(|c| c.ends_with("threads=1"));
            for c in &mut candidates {
                *c = format!("{} threads={threads}", c.trim_end_matches("threads=1").trim_end());
            }
        }
        let key = TuneKey { kernel: self.text.clone(), shapes: self.shapes(), device: backend.device() };
        // Compile every candidate at once.
        let schedules: Vec<Schedule> = candidates.iter().filter_map(|c| c.parse().ok()).collect();
        let searched = tuner.cache.get(&key, &candidates).is_none();
        let tiled = schedules.iter().filter(|s| s.path == Path::Tiles).count();
        if searched && tiled > 1 {
            // (The level path's candidates compile as they are timed.)
            tuner.say(&format!("autotuning: compiling {tiled} tile-path candidates of {}", candidates.len()));
            self.precompile(backend, &schedules);
        }
        let count = candidates.len();
        let mut done = 0;
        let timing = tuner.timing;
        let progress = &mut tuner.progress;
        let mut best_ms = f64::INFINITY;
        let result = tune(&mut tuner.cache, &key, &candidates, |candidate| {
            done += 1;
            if let Some(say) = progress {
                match done <= count {
                    true => say(&format!("autotuning {done}/{count}: {candidate}")),
                    false => say(&format!("autotuning: timing {candidate} again (one of the closest)")),
                }
            }
            let schedule: Schedule = candidate.parse().map_err(|e: ScheduleError| e.to_string())?;
            let compiled = self.compile(backend, &schedule).map_err(|e| e.to_string())?;
            // One run first: a candidate far behind the best so far needs
            // no median, which keeps the search short on large problems.
            // Both on one upload (a GPU upload converts every input).
            let mut uploaded = compiled.executable.upload(&self.data).map_err(|e| e.to_string())?;
            let first = uploaded.time(TimingOptions { warmup: 1, repeats: 1 }).map_err(|e| e.to_string())?;
            if first.median_ms > ABANDON * best_ms {
                return Ok(first.median_ms);
            }
            let ms = uploaded.time(timing).map(|t| t.median_ms).map_err(|e| e.to_string())?;
            best_ms = best_ms.min(ms);
            Ok(ms)
        });
        let (tuned, _cached) = result.map_err(|e| Error::input(format!("autotuning: {e}")))?;
        if searched {
            tuner.save();
        }
        let schedule: Schedule = tuned.schedule.parse()?;
        let mut compiled = self.compile(backend, &schedule)?;
        compiled.tuned = Some(tuned);
        Ok(compiled)
    }
}

/// A candidate whose first run takes this many times the best median so
/// far is not timed further.
const ABANDON: f64 = 1.5;

/// A callback that shows a line of progress.
type Progress = Box<dyn FnMut(&str)>;

/// The autotuner's cache and settings.
pub struct Tuner {
    cache: TuneCache,
    /// How each candidate is timed.
    pub timing: TimingOptions,
    /// CPU threads fixed by the user: the search is over the other items
    /// only.
    pub threads: Option<usize>,
    /// Search the tile path alone, leaving out the CPU's level-path
    /// candidates (`bench rows` compares the two paths).
    pub tile_path_only: bool,
    progress: Option<Progress>,
}

impl std::fmt::Debug for Tuner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tuner")
            .field("cache", &self.cache)
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

impl Tuner {
    /// The cache file of `target` ([`TuneCache::default_path`]).
    pub fn for_target(target: Target) -> Tuner {
        Tuner::with_cache(TuneCache::load(&TuneCache::default_path(target)))
    }

    /// A tuner whose results last as long as it does.
    pub fn in_memory() -> Tuner {
        Tuner::with_cache(TuneCache::in_memory())
    }

    pub fn with_cache(cache: TuneCache) -> Tuner {
        Tuner {
            cache,
            timing: TimingOptions { warmup: 1, repeats: 5 },
            threads: None,
            tile_path_only: false,
            progress: None,
        }
    }

    /// Calls `f` with a line per step of a search (for a progress display).
    pub fn on_progress(mut self, f: impl FnMut(&str) + 'static) -> Tuner {
        self.progress = Some(Box::new(f));
        self
    }

    fn say(&mut self, message: &str) {
        if let Some(f) = &mut self.progress {
            f(message);
        }
    }

    /// Writes the cache; a cache that cannot be written only costs a new
    /// search next time.
    fn save(&self) {
        let _ = self.cache.save();
    }
}

/// `schedule` with a column tile where it says `map=rows` over
/// block-sparse SpMM and leaves the column tile to the default, which
/// block rows do not print (16; they take 32 to 256): the smallest of 32,
/// 64 and 128 that covers the output's columns. `None` otherwise.
fn block_row_columns(kernel: &Kernel, schedule: &Schedule) -> Option<Schedule> {
    use spindle_ir::kernel::schedule::Mapping;
    if schedule.map != Mapping::Rows {
        return None;
    }
    let columns = spindle_cuda::print::rows_printable(kernel, schedule.tf32).ok()?;
    if schedule.tiles.contains_key(&columns) {
        return None;
    }
    let extent = kernel.axes.values().find(|a| a.name == columns)?.extent;
    let tile = [32, 64, 128].into_iter().find(|&t| t >= extent).unwrap_or(128);
    let mut given = schedule.clone();
    given.tiles.insert(columns, tile);
    Some(given)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CBackend, Input, Problem, TimingOptions};

    /// A timed launch starts from the output as it was first made (here
    /// `+=` onto given values, so a launch that found the last launch's
    /// output would add twice): the reset, which rewrites only what the
    /// kernel writes, still rewrites the output. Tile and level path.
    #[test]
    fn timed_launches_start_from_the_first_output() {
        let ramp = |shape: &[usize], k: f64| {
            let n: usize = shape.iter().product();
            Input::from(
                ArrayD::from_shape_vec(shape.to_vec(), (0..n).map(|i| 0.5 + (i as f64 * k) % 1.0).collect())
                    .unwrap(),
            )
        };
        let problem = Problem::new("C[m,n] += A[m,k] * B[k,n]")
            .tensor("A", ramp(&[6, 5], 0.37))
            .format("A", "csr")
            .tensor("B", ramp(&[5, 4], 0.53))
            .tensor("C", ramp(&[6, 4], 0.71));
        let prepared = problem.prepare().unwrap();
        for schedule in ["path=tiles threads=1", "path=levels threads=1"] {
            let compiled = prepared.compile(&CBackend::new(), &schedule.parse().unwrap()).unwrap();
            let mut uploaded = compiled.executable.upload(&prepared.data).unwrap();
            uploaded.launch().unwrap();
            let once = uploaded.output().unwrap();
            uploaded.time(TimingOptions { warmup: 1, repeats: 3 }).unwrap();
            assert_eq!(uploaded.output().unwrap(), once, "{schedule}");
            let (_, check) = compiled.check().unwrap();
            assert!(check.passed(), "{schedule}");
        }
    }
}
