//! One `Backend` trait over C, CUDA and the CPU emulation of CUDA: compile
//! with a report, upload, launch, time. The pipeline above it does not know
//! which one it drives.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

use ndarray::ArrayD;
use spindle_c::exec::CKernel;
use spindle_c::level::CLevelKernel;
use spindle_c::runtime::Buffer;
use spindle_cuda::emulate::EmulateOptions;
use spindle_cuda::nvrtc::Resources;
use spindle_cuda::print::levels::print_level;
use spindle_cuda::print::{CudaKernel, PrintOptions, mapped, print_kernel};
use spindle_cuda::runtime::DeviceArgs;
use spindle_cuda::runtime::{DeviceBuffers, Gpu, LoadedKernel};
use spindle_ir::formats::Assembled;
use spindle_ir::kernel::Kernel;
use spindle_ir::kernel::schedule::Schedule;
use spindle_ir::level::{LevelKernel, Lowered};
use spindle_ir::tensor::{TensorValue, Tensors};

use crate::error::{Error, Result};
use crate::target::Target;
use crate::timing::{Timing, TimingOptions, wall_clock};

/// The symbol every printed kernel is exported as.
pub const SYMBOL: &str = spindle_c::exec::SYMBOL;

/// A place kernels compile for and run on.
pub trait Backend {
    fn target(&self) -> Target;

    /// The device, as tuned schedules are cached under it.
    fn device(&self) -> String;

    /// Prints and compiles `kernel` (cached by its source where the backend
    /// can). `schedule` carries the settings the kernel IR does not: CPU
    /// threads, and the CUDA printer's Tensor Core, tf32 and block choices.
    fn compile(&self, kernel: &Kernel, schedule: &Schedule) -> Result<Box<dyn Executable>>;

    /// Prints and compiles a level-path kernel (`path=levels`), which
    /// brings its format arrays along.
    fn compile_levels(&self, lowered: &Lowered, schedule: &Schedule) -> Result<Box<dyn Executable>> {
        let _ = (lowered, schedule);
        Err(Error::input(format!("the level path (path=levels) does not run on {}", self.target().name())))
    }

    /// Compiles many kernels ahead of [`Backend::compile`] (in parallel where
    /// the backend can), so a search does not wait on each compile in turn.
    /// Failures are left for `compile` to report.
    fn precompile(&self, kernels: &[(Kernel, Schedule)]) {
        let _ = kernels;
    }
}

/// What compiling said.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct CompileReport {
    /// Whether the compiled code came from a cache.
    pub cached: bool,
    /// Where the compiled code's source lives, when it is a file.
    pub source_path: Option<PathBuf>,
    /// CPU threads a launch uses (C).
    pub threads: Option<usize>,
    /// Why a C kernel runs on one thread whatever it is given, where it
    /// does.
    pub one_thread: Option<String>,
    /// Grid and block (CUDA), as `grid G x block B threads`.
    pub launch: Option<String>,
    /// What ptxas reported (CUDA).
    #[serde(skip)]
    pub resources: Option<Resources>,
}

/// The C printer's options for a schedule. Without a thread count, a
/// kernel with little work runs on one thread whatever `nthreads` says
/// (waking a second costs more than it saves). An explicit `threads=N`
/// above one is honoured at any size: the user asked for it, or the
/// autotuner times it against `threads=1` and keeps the faster.
fn c_options(schedule: &Schedule) -> spindle_c::print::Options {
    match schedule.threads {
        Some(n) if n > 1 => spindle_c::print::Options { serial_work: 0 },
        _ => spindle_c::print::Options::default(),
    }
}

/// A compiled kernel.
pub trait Executable {
    /// The printed source (C or CUDA C).
    fn source(&self) -> &str;
    fn report(&self) -> &CompileReport;
    /// The kernel's buffers on the device, the output prepared as the
    /// kernel's `OutputInit` says. Index tensors are checked first.
    fn upload<'a>(&'a self, data: &'a Tensors) -> Result<Box<dyn Uploaded + 'a>>;
}

/// A compiled kernel with its data on the device.
pub trait Uploaded {
    /// One launch on the buffers as they are.
    fn launch(&mut self) -> Result<()>;
    /// The output as it is now, in f64 (a sparse output expanded, where
    /// that fits).
    fn output(&mut self) -> Result<ArrayD<f64>>;
    /// A sparse output (`--format C=csr`) as the last launch assembled it;
    /// `None` for a dense output.
    fn assembled(&mut self) -> Result<Option<Assembled>> {
        Ok(None)
    }
    /// The most bytes a thread's ISM workspace held in the last launch;
    /// `None` without one.
    fn workspace_peak(&mut self) -> Option<usize> {
        None
    }
    /// Warm-up launches, then timed ones, each from the initial output
    /// (reset outside the timed region, or zeroed inside it where the
    /// kernel sums into zeros), on these buffers: afterwards they hold the
    /// last timed launch's output.
    fn time(&mut self, opts: TimingOptions) -> Result<Timing>;
}

fn output_has_data(kernel: &Kernel, data: &Tensors) -> bool {
    kernel.tensors.values().find(|t| t.output).is_some_and(|t| data.contains_key(&t.name))
}

// ---------------------------------------------------------------- C

/// C11 + OpenMP through the system C compiler.
#[derive(Debug, Clone)]
pub struct CBackend {
    compiler: spindle_c::Compiler,
}

impl Default for CBackend {
    fn default() -> Self {
        CBackend::new()
    }
}

impl CBackend {
    /// The compiler in `$CC` (default `cc`), caching in the default folder.
    pub fn new() -> CBackend {
        CBackend { compiler: spindle_c::Compiler::from_env() }
    }

    pub fn with_compiler(compiler: spindle_c::Compiler) -> CBackend {
        CBackend { compiler }
    }

    /// Every core of this machine.
    pub fn max_threads() -> usize {
        spindle_c::cpu_threads()
    }
}

/// The CPU's model name and core count, e.g. `AMD EPYC 7B13 (2 cores)`.
pub fn cpu_name() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    format!("{model} ({} cores)", spindle_c::cpu_threads())
}

impl Backend for CBackend {
    fn target(&self) -> Target {
        Target::C
    }

    fn device(&self) -> String {
        cpu_name()
    }

    fn compile(&self, kernel: &Kernel, schedule: &Schedule) -> Result<Box<dyn Executable>> {
        let compiled = CKernel::compile_with_options(kernel, &self.compiler, &c_options(schedule))?;
        let threads =
            spindle_c::threads_used(&compiled.source, schedule.threads.unwrap_or_else(CBackend::max_threads));
        let report = CompileReport {
            cached: compiled.program.cache_hit(),
            source_path: Some(compiled.program.source_path().to_path_buf()),
            threads: Some(threads),
            one_thread: spindle_c::one_thread_reason(&compiled.source).map(str::to_string),
            ..CompileReport::default()
        };
        Ok(Box::new(CExecutable { compiled, threads, report }))
    }

    fn compile_levels(&self, lowered: &Lowered, schedule: &Schedule) -> Result<Box<dyn Executable>> {
        let compiled =
            CLevelKernel::compile_with(&lowered.kernel, &self.compiler, c_options(schedule).serial_work)?;
        let threads =
            spindle_c::threads_used(&compiled.source, schedule.threads.unwrap_or_else(CBackend::max_threads));
        let report = CompileReport {
            cached: compiled.program.cache_hit(),
            source_path: Some(compiled.program.source_path().to_path_buf()),
            threads: Some(threads),
            one_thread: spindle_c::one_thread_reason(&compiled.source).map(str::to_string),
            ..CompileReport::default()
        };
        let compiled = LevelWithArrays { compiled, arrays: lowered.arrays.clone() };
        Ok(Box::new(CExecutable { compiled, threads, report }))
    }

    fn precompile(&self, kernels: &[(Kernel, Schedule)]) {
        // One compile per distinct source (an explicit thread count prints
        // the same source as the default once the work is large).
        let mut sources = std::collections::BTreeMap::new();
        for (kernel, schedule) in kernels {
            if let Ok(source) = spindle_c::print::print_with(kernel, SYMBOL, &c_options(schedule)) {
                sources.entry(source).or_insert((kernel, schedule));
            }
        }
        std::thread::scope(|s| {
            for (kernel, schedule) in sources.into_values() {
                s.spawn(|| CKernel::compile_with_options(kernel, &self.compiler, &c_options(schedule)));
            }
        });
    }
}

/// What the C executable needs of a compiled kernel: tile and level
/// kernels differ only in where their buffers come from.
trait CCompiled {
    fn source(&self) -> &str;
    /// The buffers of a run on `data`, and whether the output had data.
    fn buffers(&self, data: &Tensors) -> Result<(Vec<Buffer>, bool)>;
    fn launch(&self, buffers: &mut [Buffer], threads: usize) -> Result<()>;
    fn output(&self, buffers: &[Buffer], had_data: bool) -> Result<ArrayD<f64>>;
    fn assembled(&self, buffers: &[Buffer]) -> Option<Assembled> {
        let _ = buffers;
        None
    }
    fn workspace_peak(&self, buffers: &[Buffer]) -> Option<usize> {
        let _ = buffers;
        None
    }
    /// The buffers (by position) that a timed launch must find as they
    /// were first made: the ones the kernel writes (its output; an input
    /// is `const` in the printed C). A sparse output is rebuilt by every
    /// launch: none.
    fn written(&self) -> Vec<usize>;
}

/// The positions of the output parameters among `params`.
fn outputs<'a>(params: impl Iterator<Item = &'a spindle_ir::kernel::TensorParam>) -> Vec<usize> {
    params.enumerate().filter(|(_, t)| t.output).map(|(i, _)| i).collect()
}

impl CCompiled for CKernel {
    fn source(&self) -> &str {
        &self.source
    }

    fn buffers(&self, data: &Tensors) -> Result<(Vec<Buffer>, bool)> {
        Ok((CKernel::buffers(self, data)?, output_has_data(&self.kernel, data)))
    }

    fn launch(&self, buffers: &mut [Buffer], threads: usize) -> Result<()> {
        Ok(CKernel::launch(self, buffers, threads)?)
    }

    fn output(&self, buffers: &[Buffer], had_data: bool) -> Result<ArrayD<f64>> {
        Ok(CKernel::output(self, buffers, had_data)?)
    }

    fn written(&self) -> Vec<usize> {
        outputs(self.kernel.tensors.values())
    }
}

/// A level kernel with the format arrays it was lowered with: it reads
/// them beside the problem's dense tensors.
struct LevelWithArrays {
    compiled: CLevelKernel,
    arrays: Tensors,
}

impl CCompiled for LevelWithArrays {
    fn source(&self) -> &str {
        &self.compiled.source
    }

    fn buffers(&self, data: &Tensors) -> Result<(Vec<Buffer>, bool)> {
        let mut all = data.clone();
        all.extend(self.arrays.iter().map(|(n, v)| (n.clone(), v.clone())));
        let out = &self.compiled.kernel.tensor(self.compiled.kernel.output).name;
        Ok((self.compiled.buffers(&all)?, data.contains_key(out)))
    }

    fn launch(&self, buffers: &mut [Buffer], threads: usize) -> Result<()> {
        Ok(self.compiled.launch(buffers, threads)?)
    }

    fn output(&self, buffers: &[Buffer], had_data: bool) -> Result<ArrayD<f64>> {
        if let Some(assembled) = self.compiled.assembled(buffers) {
            return crate::check::expand(&assembled);
        }
        Ok(self.compiled.output(buffers, had_data)?)
    }

    fn assembled(&self, buffers: &[Buffer]) -> Option<Assembled> {
        self.compiled.assembled(buffers)
    }

    fn workspace_peak(&self, buffers: &[Buffer]) -> Option<usize> {
        self.compiled.workspace_peak(buffers)
    }

    fn written(&self) -> Vec<usize> {
        match self.compiled.kernel.assembly {
            Some(_) => Vec::new(),
            None => outputs(self.compiled.kernel.tensors.values()),
        }
    }
}

struct CExecutable<K> {
    compiled: K,
    threads: usize,
    report: CompileReport,
}

impl<K: CCompiled> Executable for CExecutable<K> {
    fn source(&self) -> &str {
        self.compiled.source()
    }

    fn report(&self) -> &CompileReport {
        &self.report
    }

    fn upload<'a>(&'a self, data: &'a Tensors) -> Result<Box<dyn Uploaded + 'a>> {
        let (fresh, had_data) = self.compiled.buffers(data)?;
        Ok(Box::new(CUploaded { exe: self, buffers: fresh.clone(), fresh, had_data }))
    }
}

struct CUploaded<'a, K> {
    exe: &'a CExecutable<K>,
    fresh: Vec<Buffer>,
    buffers: Vec<Buffer>,
    had_data: bool,
}

impl<K: CCompiled> Uploaded for CUploaded<'_, K> {
    fn launch(&mut self) -> Result<()> {
        self.exe.compiled.launch(&mut self.buffers, self.exe.threads)
    }

    fn output(&mut self) -> Result<ArrayD<f64>> {
        self.exe.compiled.output(&self.buffers, self.had_data)
    }

    fn assembled(&mut self) -> Result<Option<Assembled>> {
        Ok(self.exe.compiled.assembled(&self.buffers))
    }

    fn workspace_peak(&mut self) -> Option<usize> {
        self.exe.compiled.workspace_peak(&self.buffers)
    }

    fn time(&mut self, opts: TimingOptions) -> Result<Timing> {
        let (exe, fresh) = (self.exe, &self.fresh);
        let buffers = std::cell::RefCell::new(&mut self.buffers);
        // Only what the kernel writes is rewritten: copying its inputs too
        // (100 MB for GNN kernel 2 on ca-CondMat) filled the caches with
        // dirty lines before every launch, which the launch then paid to
        // write back, unlike any baseline's.
        let written = exe.compiled.written();
        wall_clock(
            opts,
            || {
                let mut buffers = buffers.borrow_mut();
                for &b in &written {
                    buffers[b].clone_from(&fresh[b]);
                }
                Ok(())
            },
            || exe.compiled.launch(&mut buffers.borrow_mut(), exe.threads),
        )
    }
}

// ---------------------------------------------------------------- CUDA

/// CUDA C through NVRTC, run with the CUDA driver.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    gpu: Arc<Gpu>,
}

impl CudaBackend {
    /// The first GPU, or an error saying why there is none.
    pub fn open() -> Result<CudaBackend> {
        Ok(CudaBackend { gpu: Arc::new(Gpu::open()?) })
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }
}

impl Backend for CudaBackend {
    fn target(&self) -> Target {
        Target::Cuda
    }

    fn device(&self) -> String {
        format!("{} ({})", self.gpu.info().name, self.gpu.arch())
    }

    fn compile(&self, kernel: &Kernel, schedule: &Schedule) -> Result<Box<dyn Executable>> {
        let opts = PrintOptions::from(schedule);
        let printed = print_kernel(kernel, SYMBOL, &opts)?;
        self.load(printed, Box::new(mapped(kernel, &opts).into_owned()), Tensors::new())
    }

    /// NVRTC on every core into the CUBIN cache
    /// ([`spindle_cuda::cubin_cache`]).
    fn precompile(&self, kernels: &[(Kernel, Schedule)]) {
        let printed: Vec<CudaKernel> = kernels
            .iter()
            .filter_map(|(kernel, schedule)| print_kernel(kernel, SYMBOL, &PrintOptions::from(schedule)).ok())
            .collect();
        self.gpu.precompile(&printed);
    }

    /// A warp per row ([`spindle_cuda::print::levels`]).
    fn compile_levels(&self, lowered: &Lowered, _schedule: &Schedule) -> Result<Box<dyn Executable>> {
        let printed = print_level(&lowered.kernel, SYMBOL)?;
        self.load(printed, Box::new(lowered.kernel.clone()), lowered.arrays.clone())
    }
}

impl CudaBackend {
    /// Compiles (cached) and loads a printed kernel of `kernel`, whose
    /// format arrays (a level kernel's) are `arrays`.
    fn load(
        &self,
        printed: CudaKernel,
        kernel: Box<dyn DeviceArgs>,
        arrays: Tensors,
    ) -> Result<Box<dyn Executable>> {
        let loaded = self.gpu.load(&printed)?;
        let launch = &loaded.launch;
        let report = CompileReport {
            cached: loaded.cache_hit,
            launch: Some(format!("grid {} x block {} threads", launch.grid, launch.block)),
            resources: loaded.resources,
            ..CompileReport::default()
        };
        Ok(Box::new(CudaExecutable { gpu: self.gpu.clone(), kernel, arrays, printed, loaded, report }))
    }
}

/// The problem's data with a level kernel's format arrays beside it.
fn with_arrays<'a>(data: &'a Tensors, arrays: &Tensors) -> Cow<'a, Tensors> {
    if arrays.is_empty() {
        return Cow::Borrowed(data);
    }
    let mut all = data.clone();
    all.extend(arrays.iter().map(|(n, v)| (n.clone(), v.clone())));
    Cow::Owned(all)
}

/// The index tensor a printed kernel needs in order (the warp walk's and
/// the block rows' `R`, [`CudaKernel::sorted`]) is nondecreasing in `data`.
fn check_sorted(printed: &CudaKernel, data: &Tensors) -> Result<()> {
    let Some(name) = &printed.sorted else { return Ok(()) };
    let Some(TensorValue::Indices(rows)) = data.get(name) else {
        return Err(Error::input(format!("no index data for {name}")));
    };
    match rows.iter().zip(rows.iter().skip(1)).position(|(a, b)| b < a) {
        None => Ok(()),
        Some(i) => Err(Error::input(format!(
            "the kernel's mapping (map=walk or map=rows) walks the output's rows in order, so it needs {name} \
             in nondecreasing order, but {name}[{}] = {} follows {name}[{i}] = {}. A format keeps in order the \
             index it stores first: an operand read with another index first (A[k,m] into C[m,n]) is in its \
             own order, so store it with the output's row first (groupcoo:dim=1 for A[k,m]) or use map=tiles, \
             as for index data not sorted by row",
            i + 1,
            rows.iter().nth(i + 1).copied().unwrap_or_default(),
            rows.iter().nth(i).copied().unwrap_or_default()
        ))),
    }
}

/// Whether the data hold the output's initial values.
fn has_output(kernel: &dyn DeviceArgs, data: &Tensors) -> bool {
    kernel.device_params().iter().any(|t| t.output && data.contains_key(&t.name))
}

struct CudaExecutable {
    gpu: Arc<Gpu>,
    /// A tile kernel, or a level kernel whose format arrays are `arrays`.
    kernel: Box<dyn DeviceArgs>,
    arrays: Tensors,
    printed: CudaKernel,
    loaded: LoadedKernel,
    report: CompileReport,
}

impl Executable for CudaExecutable {
    fn source(&self) -> &str {
        &self.printed.source
    }

    fn report(&self) -> &CompileReport {
        &self.report
    }

    fn upload<'a>(&'a self, data: &'a Tensors) -> Result<Box<dyn Uploaded + 'a>> {
        check_sorted(&self.printed, data)?;
        let data = with_arrays(data, &self.arrays);
        let buffers = self.gpu.upload(self.kernel.as_ref(), &self.loaded, &data)?;
        Ok(Box::new(CudaUploaded { exe: self, data, buffers }))
    }
}

struct CudaUploaded<'a> {
    exe: &'a CudaExecutable,
    data: Cow<'a, Tensors>,
    buffers: DeviceBuffers,
}

impl Uploaded for CudaUploaded<'_> {
    fn launch(&mut self) -> Result<()> {
        self.exe.gpu.launch(&self.exe.loaded, &mut self.buffers)?;
        self.exe.gpu.stream().synchronize().map_err(spindle_cuda::runtime::RuntimeError::from)?;
        Ok(())
    }

    fn output(&mut self) -> Result<ArrayD<f64>> {
        let exe = self.exe;
        let had_data = has_output(exe.kernel.as_ref(), &self.data);
        Ok(exe.gpu.download(exe.kernel.as_ref(), &self.buffers, had_data)?)
    }

    /// CUDA events around each launch, on the buffers uploaded (a second
    /// upload converted every input again); when the inputs fit in L2,
    /// copies of them are rotated so repeats do not hit in the cache.
    fn time(&mut self, opts: TimingOptions) -> Result<Timing> {
        let exe = self.exe;
        let opts = TimingOptions { repeats: opts.repeats.max(1), ..opts };
        Ok(exe.gpu.time_uploaded(exe.kernel.as_ref(), &exe.loaded, &self.data, &mut self.buffers, opts)?)
    }
}

// ---------------------------------------------------------------- emulation

/// The printed CUDA kernel run on the CPU, one thread per CUDA thread, under
/// a sanitizer: GPU kernels tested without a GPU.
#[derive(Debug, Clone, Default)]
pub struct EmulateBackend {
    options: EmulateOptions,
}

impl EmulateBackend {
    /// The sanitizer `$SPINDLE_EMU_SANITIZER` names (address by default).
    pub fn from_env() -> EmulateBackend {
        EmulateBackend { options: EmulateOptions::from_env() }
    }

    /// Under these options (a sanitizer chosen by the caller).
    pub fn with(options: EmulateOptions) -> EmulateBackend {
        EmulateBackend { options }
    }
}

impl Backend for EmulateBackend {
    fn target(&self) -> Target {
        Target::Emulate
    }

    fn device(&self) -> String {
        format!("emulated GPU on {}", cpu_name())
    }

    fn compile(&self, kernel: &Kernel, schedule: &Schedule) -> Result<Box<dyn Executable>> {
        let opts = PrintOptions::from(schedule);
        let printed = print_kernel(kernel, SYMBOL, &opts)?;
        let launch = &printed.launch;
        let report = CompileReport {
            launch: Some(format!("grid {} x block {} threads", launch.grid, launch.block)),
            ..CompileReport::default()
        };
        Ok(Box::new(EmulateExecutable {
            kernel: Emulated::Tiles(mapped(kernel, &opts).into_owned()),
            printed,
            options: self.options.clone(),
            report,
        }))
    }

    fn compile_levels(&self, lowered: &Lowered, _schedule: &Schedule) -> Result<Box<dyn Executable>> {
        let printed = print_level(&lowered.kernel, SYMBOL)?;
        let launch = &printed.launch;
        let report = CompileReport {
            launch: Some(format!("grid {} x block {} threads", launch.grid, launch.block)),
            ..CompileReport::default()
        };
        Ok(Box::new(EmulateExecutable {
            kernel: Emulated::Levels(lowered.kernel.clone(), lowered.arrays.clone()),
            printed,
            options: self.options.clone(),
            report,
        }))
    }
}

/// What the emulation runs: a tile kernel, or a level kernel with its
/// format arrays.
enum Emulated {
    Tiles(Kernel),
    Levels(LevelKernel, Tensors),
}

struct EmulateExecutable {
    kernel: Emulated,
    printed: CudaKernel,
    options: EmulateOptions,
    report: CompileReport,
}

impl Executable for EmulateExecutable {
    fn source(&self) -> &str {
        &self.printed.source
    }

    fn report(&self) -> &CompileReport {
        &self.report
    }

    fn upload<'a>(&'a self, data: &'a Tensors) -> Result<Box<dyn Uploaded + 'a>> {
        let data = match &self.kernel {
            Emulated::Tiles(kernel) => {
                kernel.check_indices(data).map_err(Error::Input)?;
                check_sorted(&self.printed, data)?;
                Cow::Borrowed(data)
            }
            Emulated::Levels(_, arrays) => with_arrays(data, arrays),
        };
        Ok(Box::new(EmulateUploaded { exe: self, data, output: None }))
    }
}

/// The emulation runs the whole kernel on the host data per launch.
struct EmulateUploaded<'a> {
    exe: &'a EmulateExecutable,
    data: Cow<'a, Tensors>,
    output: Option<ArrayD<f64>>,
}

impl Uploaded for EmulateUploaded<'_> {
    fn launch(&mut self) -> Result<()> {
        let exe = self.exe;
        self.output = Some(match &exe.kernel {
            Emulated::Tiles(k) => spindle_cuda::emulate::run(k, &exe.printed, &self.data, &exe.options)?,
            Emulated::Levels(k, _) => {
                spindle_cuda::emulate::run_level(k, &exe.printed, &self.data, &exe.options)?
            }
        });
        Ok(())
    }

    fn output(&mut self) -> Result<ArrayD<f64>> {
        match &self.output {
            Some(out) => Ok(out.clone()),
            None => Err(Error::input("the emulated kernel has not been launched")),
        }
    }

    fn time(&mut self, opts: TimingOptions) -> Result<Timing> {
        wall_clock(opts, || Ok(()), || self.launch())
    }
}
