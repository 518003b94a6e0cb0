//! `spindle`: the command line of the Spindle sparse tensor compiler.
//!
//! With no arguments, or a notebook file, `spindle` opens the notebook
//! explorer (`tui`); the subcommands serve scripts.

mod bench;
mod convert;
mod einsum;
mod input;
mod notebook;
mod stats;
mod tui;

use std::process::ExitCode;

/// Large arrays on transparent huge pages, as NumPy's (the baselines') are.
#[global_allocator]
static ALLOC: spindle::hugepages::HugePages = spindle::hugepages::HugePages;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use spindle_formats::{DType, IType};

/// Spindle: sparse tensor formats, kernels and their exploration.
#[derive(Debug, Parser)]
#[command(
    name = "spindle",
    version,
    about = "Spindle: sparse tensor formats, kernels and their exploration",
    long_about = "Spindle: sparse tensor formats, kernels and their exploration.\n\n\
        With no command, opens the notebook explorer on the bundled notebook (SpMM with \
        GroupCOO and a sweep over g on cora), or on FILE; `?` in the explorer lists every key.",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// A notebook to open in the explorer: Markdown with fenced `spindle`
    /// cells (created on the first save when it does not exist).
    file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

pub use spindle_bench::counted;

/// The most timed runs `--repeats` takes (as a notebook's `repeats N`).
pub const MAX_REPEATS: usize = 4096;

/// `--repeats N`: from 1 to [`MAX_REPEATS`].
pub fn repeats(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_REPEATS).contains(&n) => Ok(n),
        _ => Err(format!("the number of timed runs is an integer from 1 to {MAX_REPEATS}")),
    }
}

/// `--threads N`: 0 (`zero` says what it means) to the most threads a
/// schedule takes.
pub fn threads(text: &str, zero: &str) -> Result<usize, String> {
    let most = spindle::Schedule::MAX_THREADS;
    match text.parse::<usize>() {
        Ok(n) if n <= most => Ok(n),
        _ => Err(format!("the number of threads is an integer from 1 to {most}, or 0 for {zero}")),
    }
}

/// A benchmark's `--threads`: 0 (as when not given) is every CPU thread.
pub fn bench_threads(text: &str) -> Result<usize, String> {
    threads(text, "every CPU thread")
}

/// Refuses a folder path for a command to write into when a path on the
/// way exists but is not a folder (a file, a device such as /dev/null),
/// naming it, with `hint`: the OS would only say "File exists".
pub fn check_folder(dir: &std::path::Path, hint: &str) -> anyhow::Result<()> {
    let blocker = dir.ancestors().find(|a| !a.as_os_str().is_empty() && a.exists() && !a.is_dir());
    match blocker {
        Some(b) if b == dir => anyhow::bail!("{} exists and is not a folder: {hint}", dir.display()),
        Some(b) => anyhow::bail!(
            "{} exists and is not a folder, so the folder {} cannot be made: {hint}",
            b.display(),
            dir.display()
        ),
        None => Ok(()),
    }
}

/// Creates the folder `dir` and its parents, after [`check_folder`].
pub fn create_folder(dir: &std::path::Path, hint: &str) -> anyhow::Result<()> {
    use anyhow::Context as _;
    check_folder(dir, hint)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating the folder {}", dir.display()))
}

/// Element types of the stored arrays.
#[derive(Debug, Clone, clap::Args)]
pub struct Types {
    /// Value type of the stored values.
    #[arg(long, value_enum, default_value_t = ValueType::F32)]
    pub dtype: ValueType,
    /// Index type of coordinate and position arrays.
    #[arg(long, value_enum, default_value_t = IndexType::I32)]
    pub itype: IndexType,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ValueType {
    F64,
    F32,
    F16,
    Bf16,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum IndexType {
    I32,
    I64,
}

impl From<ValueType> for DType {
    fn from(v: ValueType) -> Self {
        match v {
            ValueType::F64 => DType::F64,
            ValueType::F32 => DType::F32,
            ValueType::F16 => DType::F16,
            ValueType::Bf16 => DType::Bf16,
        }
    }
}

impl From<IndexType> for IType {
    fn from(i: IndexType) -> Self {
        match i {
            IndexType::I32 => IType::I32,
            IndexType::I64 => IType::I64,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Statistics of a sparse tensor stored in a format: nnz, stored entries,
    /// padding, bytes per array, occupancy, F(g) and g*.
    Stats {
        /// A `.mtx` or `.tns` file, or a generator such as
        /// `gen:powerlaw:rows=100000,cols=100000,nnz=1000000,seed=1`.
        input: String,
        /// The format to store it in: dense, coo, csr, csc, dcsr, dcsc,
        /// csf[:modes=0-1-2], ell, bcsr:bm=B,bk=B, groupcoo[:dim=D,g=G|auto],
        /// blockgroupcoo:bm=B,bk=B[,dim=D,g=G|auto], or a d/c level list
        /// (one letter per dimension: dddc, dccc, dcc[:modes=2-0-1]).
        #[arg(long, default_value = "groupcoo:dim=0,g=auto")]
        format: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        types: Types,
    },
    /// Convert a sparse tensor to another format and write it out.
    ///
    /// OUT ending in `.mtx` or `.tns` writes the converted tensor as a text
    /// file; `.npy` writes a dense array (format `dense`); any other path is
    /// a folder that receives one `.npy` per format array plus
    /// `format.json`, ready for NumPy or PyTorch.
    Convert {
        /// A `.mtx` or `.tns` file, or `gen:SPEC`.
        input: String,
        /// The target format (the syntax of `stats --format`).
        #[arg(long)]
        to: String,
        /// Where to write.
        #[arg(long)]
        out: std::path::PathBuf,
        #[command(flatten)]
        types: Types,
    },
    /// Check an Einsum statement and print its tensors, index extents and
    /// which indices are reduced; a diagnostic with a caret when it is wrong.
    /// A program (statements separated by `;`) prints each statement of its
    /// three-address form.
    ///
    /// Example: spindle check "C[m,n] += A[m,k] * B[k,n]" --shape A=64x32 --shape B=32x16
    Check {
        /// The statement, e.g. "C[AM[p],n] += AV[p] * B[AK[p],n]".
        statement: String,
        /// A tensor's shape and dtype: NAME=64x32 or NAME=64x32:f16
        /// (NAME=scalar for rank 0; index tensors need :i32 or :i64). An
        /// undeclared output takes its shape from the right-hand side.
        #[arg(long = "shape", value_name = "NAME=DIMS[:DTYPE]")]
        shapes: Vec<String>,
    },
    /// Evaluate an Einsum statement (or a program, as `run` takes it) with
    /// the reference evaluator.
    ///
    /// Example: spindle eval "y[i] = A[i,j] * x[j]" --tensor A=../shared/data/matrices/cora.mtx
    /// --rand x=2708:f32:1 --format A=groupcoo:dim=0,g=auto --out y=y.npy
    Eval {
        #[command(flatten)]
        data: einsum::DataArgs,
        /// Write the output: NAME=out.npy, or for an output given a format
        /// (`--format NAME=csr`) NAME=out.mtx (a matrix) or NAME=out.tns.
        /// Without it a preview is printed.
        #[arg(long, value_name = "NAME=PATH")]
        out: Option<String>,
    },
    /// Compile a statement to a kernel and print its IR or source.
    ///
    /// Example: spindle compile "C[m,n] += A[m,k] * B[k,n]" --tensor A=a.mtx --rand B=2708x64:f32:1
    /// --format A=groupcoo:g=4 --schedule "tile.p=8 tile.n=64" --target c --emit c (or --emit plan:
    /// what the CUDA printer decided, tile by tile)
    Compile {
        #[command(flatten)]
        data: einsum::DataArgs,
        /// The schedule, space-separated items: path=tiles|levels;
        /// tile.INDEX=N, reduce=atomic|accumulate|segment(R)|parallel[(R)],
        /// broadcast=lazy|eager, matmul=on|off, parallel=I+J, order=I+J;
        /// threads=N (C); tensorcores=on|off, tf32=on|off, block=N,
        /// map=tiles|walk|rows, l2hints=on|off, split=on|off (CUDA);
        /// workspace=auto|dense|bucket|hash|coord|map|vector, ws.indexing|realloc|double_buffer|pipeline=on|off,
        /// ws.cap=N, ws.pipeline_min=N (sparse outputs on the level path);
        /// subsect=on|off (convolutions); fusion=none|maximal|trie, strip=auto|N
        /// (programs). An item the kernel does not read gets a note.
        #[arg(long, default_value = "")]
        schedule: String,
        /// Where the kernel runs: c, cuda or emulate.
        #[arg(long, value_parser = einsum::target_arg(), default_value = "c")]
        target: spindle::Target,
        /// What to print.
        #[arg(long, value_enum, default_value_t = einsum::Emit::Ir)]
        emit: einsum::Emit,
        /// The GPU architecture for --resources and --emit sass.
        #[arg(long, value_enum, default_value_t = einsum::GpuArch::Sm90)]
        arch: einsum::GpuArch,
        /// Compile the CUDA kernel with NVRTC and report registers, shared
        /// memory, stack and spills (to stderr); needs --target cuda.
        #[arg(long)]
        resources: bool,
    },
    /// Compile a statement, run it, and time it (median of repeats).
    ///
    /// Example: spindle run "y[i] = A[i,j] * x[j]" --tensor A=../shared/data/matrices/cora.mtx
    /// --rand x=2708:f32:1 --format A=csr --target c --check
    Run {
        #[command(flatten)]
        data: einsum::DataArgs,
        /// The schedule (see `spindle compile --help`). Without one the
        /// driver autotunes tiles and threads, and caches the winner per
        /// statement, shapes and device.
        #[arg(long, default_value = "")]
        schedule: String,
        /// Where the kernel runs: c, cuda (an NVIDIA GPU) or emulate (the
        /// CUDA kernel on the CPU, under a sanitizer).
        #[arg(long, value_parser = einsum::target_arg(), default_value = "c")]
        target: spindle::Target,
        /// Compare with the reference evaluator and print the max relative
        /// error: the largest |kernel - reference| over the reference's
        /// largest |value| (fails above 1e-3, or 1e-2 where a tensor is f16
        /// or bf16).
        #[arg(long)]
        check: bool,
        /// CPU threads, 1 to 4096 (0 = chosen by the autotuner; with an
        /// explicit --schedule, all cores, except that a kernel with too
        /// little work to share runs on one thread, as the run says).
        #[arg(long, default_value_t = 0, value_parser = |t: &str| threads(t, "the autotuner's choice"))]
        threads: usize,
        /// Timed runs (1 to 4096); the median is printed. 10 unless told, 1
        /// on `--target emulate` (whose times say nothing of a GPU's).
        #[arg(long, value_parser = crate::repeats)]
        repeats: Option<usize>,
        /// Write the output: NAME=out.npy, or for a sparse output (one given
        /// `--format NAME=...` and no data) NAME=out.mtx (a matrix) or
        /// NAME=out.tns.
        #[arg(long, value_name = "NAME=PATH")]
        out: Option<String>,
    },
    /// Notebooks (Markdown with fenced `spindle` cells) without the
    /// explorer: `spindle notebook run FILE.md --export DIR`.
    Notebook {
        #[command(subcommand)]
        action: notebook::headless::NotebookCommand,
    },
    /// Run a benchmark suite and print ratios against baselines measured in
    /// the same run.
    Bench {
        #[command(subcommand)]
        suite: bench::Suite,
    },
}

fn main() -> ExitCode {
    // Output piped into `head` or `grep -q` ends like any Unix tool's when
    // the reader goes: Rust ignores SIGPIPE, and `println!` then panicked
    // on the broken pipe (exit 101 with a backtrace).
    // SAFETY: at the start of main, before any thread is started; setting
    // a signal's disposition to its default touches no Rust state.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let formats = format!("Formats: {}", spindle_formats::spec::FORMAT_SYNTAX);
    let matches = Cli::command().after_help(formats).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        None => return tui::main(cli.file),
        Some(Command::Stats { input, format, json, types }) => stats::run(&input, &format, json, &types),
        Some(Command::Convert { input, to, out, types }) => convert::run(&input, &to, &out, &types),
        Some(Command::Bench { suite }) => bench::run(suite),
        Some(Command::Notebook { action }) => notebook::headless::run(action),
        Some(Command::Check { statement, shapes }) => einsum::run_check(&statement, &shapes),
        Some(Command::Eval { data, out }) => einsum::run_eval(&data, out.as_deref()),
        Some(Command::Compile { data, schedule, target, emit, arch, resources }) => einsum::run_compile(
            &data,
            &einsum::CompileArgs { schedule: &schedule, target, emit, arch, resources },
        ),
        Some(Command::Run { data, schedule, target, check, threads, repeats, out }) => {
            let repeats = repeats.unwrap_or(if target == spindle::Target::Emulate { 1 } else { 10 });
            let run =
                einsum::RunArgs { schedule: &schedule, target, check, threads, repeats, out: out.as_deref() };
            einsum::run_kernel(&data, &run)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Diagnostics are printed where they arise, with their caret.
            if e.downcast_ref::<einsum::Reported>().is_none() {
                eprintln!("error: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}
