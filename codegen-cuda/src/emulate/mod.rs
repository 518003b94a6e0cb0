//! Running printed CUDA kernels on the CPU, to check what they compute
//! where there is no GPU (this machine has none; NVRTC only compiles).
//!
//! The printed source is compiled as C++20 with the system C++ compiler
//! (`$CXX`, else `c++`) against `cuda_emu.h`, a stand-in for the CUDA the
//! printer uses: one OS thread per CUDA thread, one block after another,
//! `__shared__` arrays as function statics, `__syncthreads()` as a
//! `std::barrier`, atomics as `std::atomic_ref`, `__half` as `_Float16`,
//! `__nv_bfloat16` with round-to-nearest-even conversions, and WMMA
//! fragments that hold their whole tile in every lane (lane 0 stores). It
//! runs under AddressSanitizer and UndefinedBehaviorSanitizer by default, so
//! out-of-bounds reads of tensors or shared tiles fail the run (a CPU
//! counterpart of compute-sanitizer's memcheck), or under ThreadSanitizer,
//! which finds missing barriers ([`Sanitizer`]).
//!
//! What it cannot show: timing, the real fragment layouts, and races that
//! the CPU's scheduling happens not to expose.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use ndarray::ArrayD;
use spindle_ir::kernel::{Kernel, OutputInit, TensorParam};
use spindle_ir::lang::ElemType;
use spindle_ir::level::LevelKernel;
use spindle_ir::tensor::{TensorValue, Tensors};

use crate::print::{
    CudaKernel, PrintError, ROUND_BLOCK, SplitWork, cuda_type, device_kernel, device_level_kernel,
};

/// The emulation of the CUDA built-ins the printer uses.
pub const EMULATION_HEADER: &str = include_str!("cuda_emu.h");

/// The environment variable naming the C++ compiler.
pub const CXX_ENV: &str = "CXX";

#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    #[error(transparent)]
    Print(#[from] PrintError),
    /// No C++20 compiler with `_Float16` could be run.
    #[error("the C++ compiler `{compiler}` is not usable to emulate CUDA kernels: {reason} (set ${CXX_ENV})")]
    CompilerMissing { compiler: String, reason: String },
    #[error("the emulated kernel does not compile ({}):\n{log}", path.display())]
    Compile { path: PathBuf, log: String },
    #[error("the emulated kernel failed ({status}):\n{stderr}")]
    Run { status: String, stderr: String },
    #[error("{0}")]
    Data(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The sanitizer the emulation runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sanitizer {
    None,
    /// AddressSanitizer and UndefinedBehaviorSanitizer: out-of-bounds
    /// reads and writes of tensors and shared tiles fail the run.
    Address,
    /// ThreadSanitizer: a missing `__syncthreads()` between threads that
    /// write and read one shared element fails the run.
    Thread,
}

/// How to build the emulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmulateOptions {
    pub sanitizer: Sanitizer,
}

impl Default for EmulateOptions {
    fn default() -> Self {
        EmulateOptions { sanitizer: Sanitizer::Address }
    }
}

/// The environment variable that picks the sanitizer for
/// [`EmulateOptions::from_env`]: `address` (the default), `thread` or `none`.
pub const SANITIZER_ENV: &str = "SPINDLE_EMU_SANITIZER";

impl EmulateOptions {
    /// The default options, with the sanitizer `$SPINDLE_EMU_SANITIZER` names.
    pub fn from_env() -> Self {
        let sanitizer = match std::env::var(SANITIZER_ENV).as_deref() {
            Ok("thread") => Sanitizer::Thread,
            Ok("none") => Sanitizer::None,
            _ => Sanitizer::Address,
        };
        EmulateOptions { sanitizer }
    }
}

/// For tests that emulate kernels: true when a C++ compiler can run the
/// emulation; otherwise a visible `SKIPPED` line and false. Any other
/// failure of the compiler check panics.
pub fn compiler_or_skip(test: &str) -> bool {
    use std::io::Write as _;
    match compiler() {
        Ok(_) => true,
        Err(e @ EmulateError::CompilerMissing { .. }) => {
            // Straight to the stderr handle: the harness captures `eprintln!`.
            let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {e}");
            false
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// The C++ compiler to use, if one answers `--version`.
pub fn compiler() -> Result<String, EmulateError> {
    let compiler = std::env::var(CXX_ENV).ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "c++".to_string());
    match Command::new(&compiler).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(compiler),
        Ok(out) => {
            Err(EmulateError::CompilerMissing { compiler, reason: format!("--version: {}", out.status) })
        }
        Err(e) => Err(EmulateError::CompilerMissing { compiler, reason: e.to_string() }),
    }
}

/// The C++ program: the emulation, the kernel, and a `main` that reads the
/// tensors from `<dir>/<i>.bin` (f64 values, i64 indices) and a block-row
/// kernel's work list from `<dir>/work.bin` (`work`, built from the data),
/// launches (then the rounding kernel of a widened output, as the runtime
/// does), and writes the output to `<dir>/out.bin` (f64).
pub fn program(kernel: &Kernel, printed: &CudaKernel, work: Option<&SplitWork>) -> String {
    let kernel = device_kernel(kernel);
    program_for(&kernel.tensors.values().cloned().collect::<Vec<_>>(), printed, work)
}

/// [`program`] for a kernel with these parameters, in order.
fn program_for(params: &[TensorParam], printed: &CudaKernel, work: Option<&SplitWork>) -> String {
    let mut src = String::new();
    src.push_str(EMULATION_HEADER);
    src.push_str("#include <string>\n");
    for line in printed.source.lines() {
        let t = line.trim();
        if t.starts_with("#include <cuda_") || t == "#include <mma.h>" {
            continue;
        }
        src.push_str(line);
        src.push('\n');
    }
    src.push_str("\nint main(int argc, char **argv) {\n  if (argc < 2) return 2;\n  const std::string dir = argv[1];\n");
    let mut args = Vec::new();
    let mut output = None;
    for (i, t) in params.iter().enumerate() {
        let n: usize = t.shape.iter().product();
        let file = if t.dtype.is_index() { "long long" } else { "double" };
        let _ = writeln!(
            src,
            "  auto *a{i} = emu::read<{}, {file}>((dir + \"/{i}.bin\").c_str(), {n});",
            cuda_type(t.dtype)
        );
        args.push(format!("a{i}"));
        if t.output {
            output = Some((i, n));
        }
    }
    // The work list and its scratch buffers, zeroed as the runtime's are.
    if let (Some(split), Some(work)) = (&printed.split, work) {
        let _ = writeln!(
            src,
            "  auto *work = emu::read<long long, long long>((dir + \"/work.bin\").c_str(), {});",
            work.list.len()
        );
        let _ = writeln!(src, "  auto *partials = new float[{}]();", split.partials_len(work.slots));
        let _ = writeln!(src, "  auto *counters = new int[{}]();", split.counters_len(work.slots));
        args.extend(["work", "partials", "counters"].map(String::from));
    }
    if let Some(len) = printed.fill_counts {
        let _ = writeln!(src, "  auto *fill_hits = new unsigned long long[{len}]();");
        args.push("fill_hits".into());
    }
    if let Some(carry) = &printed.carry {
        // NaN: a slot read before the walk wrote it shows in the output.
        let (ty, len) = (cuda_type(carry.dtype), carry.len.max(1));
        let _ = writeln!(src, "  auto *carry = new {ty}[{len}];\n  std::fill_n(carry, {len}, ({ty})NAN);");
        args.push("carry".into());
    }
    // The carried walk's second kernel: the walk's arguments and launch.
    let symbols = std::iter::once(&printed.symbol).chain(printed.carry.as_ref().map(|c| &c.symbol));
    for symbol in symbols {
        let _ = writeln!(
            src,
            "  emu::launch({}, {}, [&] {{ {}({}); }});",
            printed.launch.grid,
            printed.launch.block,
            symbol,
            args.join(", ")
        );
    }
    if let (Some((i, _)), Some(round)) = (output, &printed.round) {
        let n = round.len;
        let _ = writeln!(src, "  auto *rounded = new {}[{}]();", cuda_type(round.dtype), n.max(1));
        let _ = writeln!(
            src,
            "  emu::launch({}, {ROUND_BLOCK}, [&] {{ {}(a{i}, rounded, {n}); }});",
            round.grid(),
            round.symbol
        );
        let _ = writeln!(src, "  emu::write((dir + \"/out.bin\").c_str(), rounded, {n});");
    } else if let Some((i, n)) = output {
        let _ = writeln!(src, "  emu::write((dir + \"/out.bin\").c_str(), a{i}, {n});");
    }
    src.push_str("  return 0;\n}\n");
    src
}

/// A scratch folder, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch() -> Result<Scratch, EmulateError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("spindle-cuda-emu-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(Scratch(dir))
}

fn write_f64(path: &Path, data: &[f64]) -> Result<(), EmulateError> {
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    Ok(std::fs::write(path, bytes)?)
}

fn write_i64(path: &Path, data: &[i64]) -> Result<(), EmulateError> {
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    Ok(std::fs::write(path, bytes)?)
}

/// Runs the printed `kernel` on `tensors` on the CPU and returns its output
/// (in f64, rounded to the output's dtype). The output starts as the
/// kernel's [`OutputInit`] says, as on the C backend; for `max=` / `min=`
/// without data, entries no program reached are 0.
pub fn run(
    kernel: &Kernel,
    printed: &CudaKernel,
    tensors: &Tensors,
    opts: &EmulateOptions,
) -> Result<ArrayD<f64>, EmulateError> {
    kernel.check_indices(tensors).map_err(EmulateError::Data)?;
    let params: Vec<TensorParam> = kernel.tensors.values().cloned().collect();
    // A kernel that writes every element without reading it starts from
    // NaN, as on the GPU: an element it fails to write shows.
    let start = if printed.writes_output { Start::Poisoned } else { Start::As(kernel.init) };
    let work = work_list(printed, tensors)?;
    run_with(&params, start, program(kernel, printed, work.as_ref()), work.as_ref(), tensors, opts)
}

/// The work list of a block-row kernel, from the data.
fn work_list(printed: &CudaKernel, tensors: &Tensors) -> Result<Option<SplitWork>, EmulateError> {
    printed.split.as_ref().map(|s| s.work_for(tensors)).transpose().map_err(EmulateError::Data)
}

/// What the output holds before a run.
#[derive(Clone, Copy)]
enum Start {
    /// As the kernel's [`OutputInit`] says.
    As(OutputInit),
    /// NaN everywhere.
    Poisoned,
}

/// Runs a printed level kernel ([`crate::print::levels`]) on `tensors` (its
/// format arrays among them) on the CPU and returns its dense output.
pub fn run_level(
    kernel: &LevelKernel,
    printed: &CudaKernel,
    tensors: &Tensors,
    opts: &EmulateOptions,
) -> Result<ArrayD<f64>, EmulateError> {
    let params: Vec<TensorParam> = device_level_kernel(kernel).tensors.values().cloned().collect();
    let start = if printed.writes_output { Start::Poisoned } else { Start::As(kernel.init) };
    let work = work_list(printed, tensors)?;
    run_with(&params, start, program_for(&params, printed, work.as_ref()), work.as_ref(), tensors, opts)
}

/// The emulation's executable for `program` under `opts`' sanitizer,
/// from the kernel cache (`<cache>/emulate/<hash>`, keyed by the compiler,
/// its flags and the source) or compiled there once. A sanitized build
/// takes seconds; every launch of a timed run rebuilt it.
fn executable(
    cxx: &str,
    program: &str,
    opts: &EmulateOptions,
    scratch: &Path,
) -> Result<PathBuf, EmulateError> {
    // Kernels move 16-byte vectors through `uint4` casts of other types.
    let mut flags = vec!["-std=c++20", "-O1", "-g", "-pthread", "-w", "-fno-strict-aliasing"];
    match opts.sanitizer {
        Sanitizer::None => {}
        Sanitizer::Address => flags.extend([
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
        ]),
        Sanitizer::Thread => flags.push("-fsanitize=thread"),
    }
    // The compiler's version is part of the key: a sanitized executable
    // links its runtime, which an upgrade replaces.
    let version = Command::new(cxx).arg("--version").output().map(|o| o.stdout).unwrap_or_default();
    let key = spindle_ir::hash::hash_fields(
        [cxx.as_bytes(), &version]
            .into_iter()
            .chain(flags.iter().map(|f| f.as_bytes()))
            .chain([program.as_bytes()]),
    );
    let cache = spindle_c::compile::cache_dir().join("emulate");
    let cached = cache.join(&key);
    if cached.is_file() {
        spindle_c::cache::touch(&cached);
        return Ok(cached);
    }
    let source = scratch.join("kernel.cpp");
    std::fs::write(&source, program)?;
    let exe = scratch.join("kernel");
    let mut cmd = Command::new(cxx);
    cmd.args(&flags).arg("-o").arg(&exe).arg(&source);
    let out = cmd
        .output()
        .map_err(|e| EmulateError::CompilerMissing { compiler: cxx.to_string(), reason: e.to_string() })?;
    if !out.status.success() {
        // Keep the source for a look.
        let keep = std::env::temp_dir().join(format!("spindle-cuda-emu-failed-{}.cpp", std::process::id()));
        let _ = std::fs::copy(&source, &keep);
        return Err(EmulateError::Compile {
            path: keep,
            log: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    // Into the cache by a rename from a name of this process and call
    // alone (another thread or process may race us to the same key);
    // where the cache cannot be written, the scratch copy runs.
    static STAGED: AtomicU64 = AtomicU64::new(0);
    let n = STAGED.fetch_add(1, Ordering::Relaxed);
    let staged = cache.join(format!("{key}.{}-{n}.tmp", std::process::id()));
    let stored = std::fs::create_dir_all(&cache).is_ok()
        && std::fs::copy(&exe, &staged).is_ok()
        && std::fs::rename(&staged, &cached).is_ok();
    if stored {
        spindle_c::cache::after_new_entry(&cache, spindle_c::cache::max_bytes());
    } else {
        let _ = std::fs::remove_file(&staged);
    }
    Ok(if stored { cached } else { exe })
}

/// Compiles `source` (a [`program`]) and runs it on `tensors` (and the
/// `work` list it reads), the output (the parameter marked `output`)
/// starting as `start` says.
fn run_with(
    params: &[TensorParam],
    start: Start,
    program: String,
    work: Option<&SplitWork>,
    tensors: &Tensors,
    opts: &EmulateOptions,
) -> Result<ArrayD<f64>, EmulateError> {
    let cxx = compiler()?;
    let dir = scratch()?;
    if let Some(work) = work {
        write_i64(&dir.0.join("work.bin"), &work.list)?;
    }
    let mut out_shape = Vec::new();
    for (i, t) in params.iter().enumerate() {
        let len: usize = t.shape.iter().product();
        let path = dir.0.join(format!("{i}.bin"));
        let data = tensors.get(&t.name);
        if t.output {
            out_shape = t.shape.clone();
            let start = match (start, data) {
                (Start::Poisoned, _) => vec![f64::NAN; len],
                (Start::As(OutputInit::Zero), _) | (Start::As(OutputInit::Keep), None) => vec![0.0; len],
                (Start::As(OutputInit::Identity(r)), None) => vec![r.identity(); len],
                (_, Some(TensorValue::Values(a))) => a.iter().copied().collect(),
                (_, Some(TensorValue::Indices(a))) => a.iter().map(|&x| x as f64).collect(),
            };
            write_f64(&path, &start)?;
            continue;
        }
        match (t.dtype, data) {
            (ElemType::Value(_), Some(TensorValue::Values(a))) if a.len() == len => {
                write_f64(&path, &a.iter().copied().collect::<Vec<_>>())?
            }
            (ElemType::Index(_), Some(TensorValue::Indices(a))) if a.len() == len => {
                write_i64(&path, &a.iter().copied().collect::<Vec<_>>())?
            }
            _ => return Err(EmulateError::Data(format!("no fitting data for tensor {}", t.name))),
        }
    }
    let exe = executable(&cxx, &program, opts, &dir.0)?;
    // ETXTBSY: the executable is still open for writing somewhere (a
    // test thread linking the same program into the same cached path, or
    // a child forked while it was written); retry for up to 5 s.
    let mut tries = 0;
    let run = loop {
        let run = Command::new(&exe)
            .arg(&dir.0)
            .env("ASAN_OPTIONS", "detect_leaks=0")
            .env("TSAN_OPTIONS", "halt_on_error=1 report_signal_unsafe=0")
            .output();
        match run {
            Err(e) if e.raw_os_error() == Some(libc_etxtbsy()) && tries < 250 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other?,
        }
    };
    if !run.status.success() {
        return Err(EmulateError::Run {
            status: run.status.to_string(),
            stderr: String::from_utf8_lossy(&run.stderr).into_owned(),
        });
    }
    let bytes = std::fs::read(dir.0.join("out.bin"))?;
    let mut data: Vec<f64> =
        bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    let out_name = params.iter().find(|t| t.output).map(|t| t.name.as_str()).unwrap_or_default();
    if let (Start::As(OutputInit::Identity(r)), false) = (start, tensors.contains_key(out_name)) {
        data.iter_mut().filter(|x| **x == r.identity()).for_each(|x| *x = 0.0);
    }
    ArrayD::from_shape_vec(out_shape, data).map_err(|e| EmulateError::Data(e.to_string()))
}

/// Linux's "text file busy" error number.
const fn libc_etxtbsy() -> i32 {
    26
}
