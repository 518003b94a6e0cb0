//! CSR SpMM, `C[m,n] += A[m,k] * B[k,n]` with N = 64 dense columns (f32),
//! two ways on the C backend: the level path's row loops (a thread owns
//! whole rows: no expansion of `pos`, no atomics, no private outputs) and
//! the tile path, which expands `pos` into a row per non-zero and scatters
//! through it, autotuned over its tiles as `spindle run` does. On one
//! thread and on all threads, on every shared matrix and the generated
//! power-law matrix of the SpMM suite.
//!
//! Both are timed by the driver (`Compiled::time`: warm-up, then timed
//! launches, the output reset outside the clock before each); their outputs
//! are compared with each other (the suite's matrices are past the
//! reference evaluator's index space; both paths are checked against it on
//! smaller problems by the test suite).

use anyhow::Result;
use serde::{Deserialize, Serialize};
use spindle::{CBackend, Input, Problem, Schedule, Timing, TimingOptions, Tuner};
use spindle_formats::DType;

use crate::spmm::inputs;
use crate::{Machine, geomean, loadavg, machine};

pub const STATEMENT: &str = "C[m,n] += A[m,k] * B[k,n]";
pub const N: usize = 64;
pub const GOAL: &str = "row loops >= 1.0x the tile path on one thread, and >= 1.6x their own one-thread speed on two \
                        threads, on ca-CondMat and powerlaw-1M";

#[derive(Clone, Debug)]
pub struct RowsOptions {
    pub timing: TimingOptions,
    pub threads: usize,
    pub filter: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowsReport {
    pub suite: String,
    pub statement: String,
    pub n: usize,
    pub machine: Machine,
    pub loadavg_before: Option<String>,
    pub loadavg_after: Option<String>,
    pub threads: usize,
    pub goal: String,
    pub results: Vec<RowsResult>,
    /// Geometric means over the matrices of tile time / row-loop time.
    pub geomean_one_thread: Option<f64>,
    pub geomean_all_threads: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowsResult {
    pub matrix: String,
    pub rows: usize,
    pub nnz: usize,
    pub levels_one_thread: Timing,
    pub levels_all_threads: Timing,
    /// The tile path's autotuned schedules and times.
    pub tiles_one_thread: Timing,
    pub tiles_one_thread_schedule: String,
    pub tiles_all_threads: Timing,
    pub tiles_all_threads_schedule: String,
    /// Max |levels − tiles| over max |tiles|.
    pub max_rel_difference: f64,
}

impl RowsResult {
    /// Tile time / row-loop time.
    pub fn speedup(&self, all: bool) -> f64 {
        match all {
            false => self.tiles_one_thread.median_ms / self.levels_one_thread.median_ms,
            true => self.tiles_all_threads.median_ms / self.levels_all_threads.median_ms,
        }
    }

    /// The row loops' all-thread speed over their one-thread speed.
    pub fn scaling(&self) -> f64 {
        self.levels_one_thread.median_ms / self.levels_all_threads.median_ms
    }
}

pub fn run(opts: &RowsOptions, progress: &mut dyn FnMut(&str)) -> Result<RowsReport> {
    let loadavg_before = loadavg();
    let matrices = inputs(&opts.filter, &mut *progress)?;
    let backend = CBackend::new();
    let mut results = Vec::new();
    for (i, m) in matrices.iter().enumerate() {
        let (rows, cols) = (m.coo.shape[0], m.coo.shape[1]);
        progress(&format!(
            "rows {}/{}: {} ({rows}x{cols}, {} entries)",
            i + 1,
            matrices.len(),
            m.name,
            m.coo.nnz()
        ));
        let prepared = Problem::new(STATEMENT)
            .tensor("A", m.coo.clone())
            .tensor("B", Input::random(&[cols, N], DType::F32, 1))
            .format("A", "csr")
            .prepare()?;
        let mut times = Vec::new();
        let mut outputs = Vec::new();
        for threads in [1, opts.threads] {
            let levels: Schedule = format!("path=levels threads={threads}").parse()?;
            let compiled = prepared.compile(&backend, &levels)?;
            let (out, t_levels) = compiled.run_and_time(opts.timing)?;
            let mut tuner = Tuner::in_memory();
            tuner.threads = Some(threads);
            tuner.tile_path_only = true;
            tuner.timing = opts.timing;
            let tiles = prepared.autotune(&backend, &mut tuner)?;
            let (tiled, t_tiles) = tiles.run_and_time(opts.timing)?;
            outputs.push((out, tiled));
            times.push((t_levels, t_tiles, tiles.schedule.to_string()));
        }
        let max_rel_difference = outputs
            .iter()
            .map(|(levels, tiles)| spindle::check::max_rel_error(levels, tiles))
            .fold(0.0f64, f64::max);
        let [(l1, t1, s1), (la, ta, sa)]: [_; 2] = times.try_into().expect("two thread settings");
        let result = RowsResult {
            matrix: m.name.clone(),
            rows,
            nnz: m.coo.nnz(),
            levels_one_thread: l1,
            levels_all_threads: la,
            tiles_one_thread: t1,
            tiles_one_thread_schedule: s1,
            tiles_all_threads: ta,
            tiles_all_threads_schedule: sa,
            max_rel_difference,
        };
        progress(&format!(
            "  rows {} / {} ms, tiles {} / {} ms (1 / {} threads): {:.2}x, {:.2}x; rows scale {:.2}x",
            crate::ms_text(Some(result.levels_one_thread.median_ms)),
            crate::ms_text(Some(result.levels_all_threads.median_ms)),
            crate::ms_text(Some(result.tiles_one_thread.median_ms)),
            crate::ms_text(Some(result.tiles_all_threads.median_ms)),
            opts.threads,
            result.speedup(false),
            result.speedup(true),
            result.scaling()
        ));
        results.push(result);
    }
    Ok(RowsReport {
        suite: "rows".into(),
        statement: STATEMENT.into(),
        n: N,
        machine: machine(),
        loadavg_before,
        loadavg_after: loadavg(),
        threads: opts.threads,
        goal: GOAL.into(),
        geomean_one_thread: geomean(results.iter().map(|r| r.speedup(false))),
        geomean_all_threads: geomean(results.iter().map(|r| r.speedup(true))),
        results,
    })
}
