//! `spindle bench`: the command line of the suites in `spindle-bench`
//! (arguments, tables, JSON, recording). The suites themselves, their
//! typed reports and baselines live in that crate.

mod conv;
mod formats;
pub(crate) mod gpu;
mod react;
mod rows;
mod spgemm;
pub(crate) mod spmm;
mod workspaces;

use anyhow::{Context, Result};

/// Where and when a benchmark ran (the notebook's exports record it too).
pub use spindle_bench::machine;

#[derive(Debug, clap::Subcommand)]
pub enum Suite {
    /// COO→CSR and COO→GroupCOO(g*) against sprs TriMat→CSR, on ca-CondMat
    /// (when the shared data folder is present) and a generated 1M-nonzero
    /// power-law matrix.
    Formats {
        /// Timed repetitions per measurement (the median is reported).
        #[arg(long, default_value_t = 11, value_parser = crate::repeats)]
        repeats: usize,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// Also write the JSON to this folder as `formats-<date>.json`
        /// (the repository keeps them in `bench/results/`).
        #[arg(long)]
        record: Option<std::path::PathBuf>,
    },
    /// SpMM C += A·B (N = 64, f32): our C kernels (COO, CSR, GroupCOO over
    /// g) and Spindle as a user gets it (CSR, autotuned) against sprs,
    /// faer, SciPy, Intel MKL and SuiteSparse:GraphBLAS, on one thread and
    /// all cores, with F(g), achieved bandwidth against a measured copy,
    /// and geometric means of the ratios.
    Spmm(spmm::SpmmArgs),
    /// SpGEMM C = A·B with A, B and C in CSR (f64; B = Aᵀ with its columns
    /// shifted by one, as paper 001): the level path's row-wise kernel on
    /// one and all threads against sprs, SciPy and Intel MKL, on every
    /// shared matrix, with the workspace's bytes.
    Spgemm(spgemm::SpgemmArgs),
    /// CSR SpMM C += A·B (N = 64, f32) as the level path's row loops
    /// against the tile path's expanded rows (autotuned), on one and all
    /// threads, on the shared matrices and powerlaw-1M.
    Rows(rows::RowsArgs),
    /// Sparse workspaces (paper 001): row-wise SpGEMM under the dense
    /// workspace and every ISM policy (bucket, hash, coord, map, vector)
    /// against sprs, SciPy and MKL with peak workspace bytes; the
    /// synthetic row-wise and outer-product sweeps (plotted with --record),
    /// the optimizations' ablation, and the parallel ISM.
    Workspaces(workspaces::WorkspacesArgs),
    /// ReACT's kernels (paper 003): SDDMM (NK 16/32/64), GNN kernels 1
    /// (NH 128/256 at NJ 16, NJ 32/64 at NH 128) and 2 (NK 128/256) on the
    /// shared matrices and MTTKRP (R 16/32) on
    /// the FROSTT tensors, each under fusion=none, maximal and trie, with
    /// SciPy where it can express the kernel; one thread, f64.
    React(react::ReactArgs),
    /// Sparse convolution through subsection loops (paper 002 §6.2-6.3):
    /// O[i] = I[i+p]*F[p] (I 999,999 in c), O[i,j] = I[i+p,j+q]*F[p,q] (I
    /// 999x999 in CSR) and the 3-D one (I 99^3 in CSF), filters of 3 per
    /// dimension, at sparsities 0-99.9%: every legal loop order (3-D: all
    /// 120 at 90/99/99.9%, a selection elsewhere), the dense-outer-loop
    /// variant (subsect=off), the dense direct convolution (tile path,
    /// autotuned) and the plain command, on one and all threads; f64.
    Conv(conv::ConvArgs),
    /// Block-sparse SpMM on the GPU: A 4096x4096 with 32x32 blocks at
    /// sparsity 50-99% in BlockGroupCOO (Tensor Cores, f16) against
    /// cuSPARSE BSR and cuBLAS dense GEMM.
    Bsr(gpu::BsrArgs),
    /// Install the Python baselines of `bench spmm` (SciPy, MKL,
    /// GraphBLAS, pinned) into target/python-baselines of the workspace
    /// the binary was built in, or $SPINDLE_PYTHON_BASELINES, as `bench
    /// spmm` does on first use.
    SetupPython,
}

pub fn run(suite: Suite) -> Result<()> {
    // A folder that cannot take the JSON is said before the suite runs
    // (some run for hours), not after.
    let record = match &suite {
        Suite::Formats { record, .. } => record,
        Suite::Spmm(args) => &args.record,
        Suite::Spgemm(args) => &args.record,
        Suite::Rows(args) => &args.record,
        Suite::Workspaces(args) => &args.record,
        Suite::React(args) => &args.record,
        Suite::Conv(args) => &args.record,
        Suite::Bsr(args) => &args.record,
        Suite::SetupPython => &None,
    };
    if let Some(dir) = record {
        if dir.exists() && !dir.is_dir() {
            anyhow::bail!("--record {}: exists and is not a folder", dir.display());
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--record {}: creating the folder", dir.display()))?;
    }
    match suite {
        Suite::Formats { repeats, json, record } => formats::run(repeats, json, record.as_deref()),
        Suite::Spmm(args) => spmm::run(args),
        Suite::Spgemm(args) => spgemm::run(args),
        Suite::Rows(args) => rows::run(args),
        Suite::Workspaces(args) => workspaces::run(args),
        Suite::React(args) => react::run(args),
        Suite::Conv(args) => conv::run(args),
        Suite::Bsr(args) => gpu::bsr(&args),
        Suite::SetupPython => {
            let env =
                spindle_bench::python::ensure(|line| eprintln!("{line}")).map_err(anyhow::Error::msg)?;
            println!(
                "Python baselines: {} ({})",
                env.dir.display(),
                spindle_bench::python::REQUIREMENTS.join(" ")
            );
            Ok(())
        }
    }
}

/// Prints the report as JSON or a table, and records it in `record`.
pub(crate) fn finish<T: serde::Serialize>(
    report: &T,
    json: bool,
    record: Option<&std::path::Path>,
    stem: &str,
    table: impl FnOnce(&T),
) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        table(report);
    }
    if let Some(dir) = record {
        let path = spindle_bench::record(report, dir, stem)?;
        eprintln!("recorded {}", path.display());
    }
    Ok(())
}

pub(crate) use spindle_bench::ms_text as ms;
