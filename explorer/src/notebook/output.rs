//! What running one notebook cell produces: everything the output tabs show
//! and the headless run writes. The engine fills it; the TUI and the export
//! only read it.

use serde::Serialize;
use spindle_formats::stats::Stats;

/// The output of one run of one cell.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CellOutput {
    /// Set when the cell could not run: the message, with the caret
    /// diagnostic (plain text, no colour) when it points into the cell.
    pub error: Option<String>,
    /// One line per statement: the indirect Einsum that runs (the
    /// format-conscious rewrite, or the statement itself when no format
    /// was given).
    pub rewritten: Vec<String>,
    /// The kernel IR of the first sweep point, one entry per statement
    /// (a program's cell: one per sweep point).
    pub ir: Vec<String>,
    /// The C source of the first sweep point, one entry per statement
    /// (a program's cell: one per sweep point).
    pub c_source: Vec<String>,
    /// The CUDA source of the first sweep point, one entry per statement.
    pub cuda_source: Vec<String>,
    /// What each entry of `ir`, `c_source` and `cuda_source` is the code
    /// of, where it is not statement 1, 2, ... (a program's sweep points).
    pub code_labels: Vec<String>,
    /// One per sparse operand that has a format: its statistics at each g
    /// the sweep visits (or its one format when nothing is swept over g).
    pub formats: Vec<FormatView>,
    /// What NVRTC reports for each sweep point's CUDA kernel (empty when
    /// the CUDA toolchain is missing; `notes` says so).
    pub resources: Vec<ResourceRow>,
    /// The measurements: one row per (sweep point, backend).
    pub sweep: Sweep,
    /// Lines for the status bar and the report, e.g. "no GPU: ran the C
    /// backend only".
    pub notes: Vec<String>,
    /// Wall time of the whole cell run, in seconds.
    pub seconds: f64,
    /// True when the run was cancelled part-way; what finished is kept.
    pub cancelled: bool,
}

impl CellOutput {
    /// The heading of entry `i` of the cell's code: its statement, or
    /// the sweep point whose program it is.
    pub fn code_label(&self, i: usize) -> String {
        self.code_labels.get(i).cloned().unwrap_or_else(|| format!("statement {}", i + 1))
    }
}

/// The format view of one sparse operand.
#[derive(Clone, Debug, Serialize)]
pub struct FormatView {
    /// The tensor's name in the cell.
    pub tensor: String,
    /// The format spec as written (with g=auto resolved).
    pub spec: String,
    /// Statistics of the format the first sweep point uses: occupancy
    /// histogram, F(g) with g*, padding per g, bytes per array.
    pub stats: Stats,
    /// Bytes and padding ratio at each g the sweep visits: (g, bytes,
    /// padding ratio).
    pub per_g: Vec<(usize, usize, f64)>,
}

/// NVRTC's report for one sweep point's kernel on one arch.
#[derive(Clone, Debug, Serialize)]
pub struct ResourceRow {
    /// The sweep point's label, e.g. "g=4 reduce=atomic".
    pub point: String,
    pub arch: String,
    pub registers: u32,
    pub shared_bytes: u64,
    pub stack_bytes: u64,
    pub spill_bytes: u64,
    /// Grid x block of the launch.
    pub launch: String,
}

/// The sweep's parameters and measurements.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sweep {
    /// The swept parameters in order, e.g. ["g", "reduce"]; empty when the
    /// cell has no sweep (then there is one point).
    pub parameters: Vec<String>,
    pub points: Vec<SweepPoint>,
    /// Baselines measured in the same run (sprs / faer on the CPU,
    /// cuSPARSE on a GPU), where the statement has one.
    pub baselines: Vec<Baseline>,
}

/// One measured point of the sweep on one backend.
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// The parameter values in the order of `Sweep::parameters`.
    pub values: Vec<String>,
    /// "c" or "cuda".
    pub backend: String,
    /// Median time of the timed runs, in milliseconds; None when it failed.
    pub median_ms: Option<f64>,
    /// Max relative error against the reference evaluator.
    pub max_rel_error: Option<f64>,
    /// Why the point failed, if it did.
    pub error: Option<String>,
    /// The most bytes an ISM workspace held (a sparse output gathered by
    /// one); `None` without one.
    pub workspace_bytes: Option<usize>,
}

/// A baseline's median time on the cell's data.
#[derive(Clone, Debug, Serialize)]
pub struct Baseline {
    /// e.g. "sprs CSR", "faer", "cuSPARSE CSR".
    pub name: String,
    /// "c" (CPU) or "cuda".
    pub backend: String,
    pub median_ms: f64,
}

/// Progress of a running cell, reported as it goes.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Steps finished and the total (compile + run per sweep point and
    /// backend, plus baselines).
    pub done: usize,
    pub total: usize,
    /// What is running now, e.g. "g=8: compiling C".
    pub message: String,
}
