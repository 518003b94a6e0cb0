//! Running printed kernels on a GPU through cudarc's driver API.
//!
//! cudarc loads `libcuda` at run time, so this module builds and its
//! no-GPU paths are tested on machines without one: [`Gpu::open`] answers
//! [`RuntimeError::NoDriver`] or [`RuntimeError::NoDevice`] instead of
//! panicking. On a GPU:
//! - [`Gpu::load`] compiles a printed kernel with NVRTC for the device's
//!   arch and loads it; modules are cached by a stable hash of the source
//!   and arch, in memory and as CUBIN files on disk ([`cache_dir`]).
//! - [`Gpu::upload`] puts every kernel tensor on the device in its dtype,
//!   with the output initialised as [`OutputInit`] says (the contract of
//!   the C backend and the emulation).
//! - [`Gpu::time`] times with CUDA events: warm-up launches, then the
//!   median of the timed ones; an output that starts as zeros is zeroed
//!   inside the timed region (the kernel needs it, as cuSPARSE's and
//!   cuBLAS's `beta = 0` does its own), any other is reset outside it;
//!   and when the inputs fit in L2 several
//!   copies are uploaded and rotated, so each launch reads from DRAM as in
//!   a real pipeline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
    sys,
};
use half::{bf16, f16};
use ndarray::ArrayD;
use spindle_ir::kernel::{Kernel, OutputInit, TensorParam};
use spindle_ir::lang::ElemType;
use spindle_ir::level::LevelKernel;
use spindle_ir::tensor::{TensorValue, Tensors};

use crate::cubin_cache::{self, CacheEntry};
use crate::nvrtc::{self, Arch, CompileError, Resources};
use crate::print::{
    Carry, CudaKernel, LaunchGeometry, PrintError, ROUND_BLOCK, RoundKernel, RowSplit, device_kernel,
    device_level_kernel, widened_level_output, widened_output,
};

/// Why a kernel could not run on the GPU.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "no CUDA driver: libcuda could not be loaded, so this machine has no usable NVIDIA GPU \
         (`--target c` runs on the CPU; `spindle compile --target cuda --resources` compiles without a GPU)"
    )]
    NoDriver,
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("the GPU {name} has compute capability {major}.{minor}; Spindle compiles for sm_80 and sm_90")]
    UnsupportedArch { name: String, major: i32, minor: i32 },
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    Print(#[from] PrintError),
    #[error("{0}")]
    Data(String),
    #[error("{0}")]
    Library(String),
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Facts about the device that results are reported against.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    pub memory_bytes: usize,
    pub l2_bytes: usize,
    /// The CUDA driver's version, e.g. 13000.
    pub driver_version: i32,
}

pub use crate::cubin_cache::{CACHE_DIR_ENV, cache_dir};

/// Whether a CUDA driver can be loaded and sees at least one device. Never
/// panics.
pub fn available() -> bool {
    // SAFETY: only tries `dlopen`s.
    let present = unsafe { sys::is_culib_present() };
    present && CudaContext::device_count().is_ok_and(|n| n > 0)
}

/// One GPU with its context, stream and loaded modules.
#[derive(Debug)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    arch: Arch,
    modules: Mutex<HashMap<String, Arc<CudaModule>>>,
}

/// A kernel loaded on the device.
#[derive(Debug, Clone)]
pub struct LoadedKernel {
    function: CudaFunction,
    pub symbol: String,
    pub launch: LaunchGeometry,
    /// What ptxas reported for this kernel.
    pub resources: Option<Resources>,
    /// Whether the CUBIN came from the cache (memory or disk).
    pub cache_hit: bool,
    /// The kernel that rounds a widened output (see
    /// [`crate::print::RoundKernel`]), launched after this one.
    round: Option<(CudaFunction, RoundKernel)>,
    /// The kernel writes every output element without reading it
    /// ([`CudaKernel::writes_output`]): timing zeroes nothing first.
    pub writes_output: bool,
    /// The block-row mapping's work list ([`CudaKernel::split`]), built
    /// at upload from the data.
    pub split: Option<RowSplit>,
    /// Zeroed counters after the tensors ([`CudaKernel::fill_counts`]).
    pub fill_counts: Option<usize>,
    /// The warp walk's carried rows ([`CudaKernel::carry`]): the scratch
    /// buffer after the tensors, and the kernel launched after this one
    /// with the same arguments.
    carry: Option<(CudaFunction, Carry)>,
}

/// One tensor on the device, in its dtype.
#[derive(Debug)]
pub enum DeviceTensor {
    F64(CudaSlice<f64>),
    F32(CudaSlice<f32>),
    F16(CudaSlice<f16>),
    Bf16(CudaSlice<bf16>),
    I32(CudaSlice<i32>),
    I64(CudaSlice<i64>),
}

impl DeviceTensor {
    /// The element type it holds.
    fn dtype(&self) -> ElemType {
        use spindle_ir::formats::{DType, IType};
        match self {
            DeviceTensor::F64(_) => ElemType::Value(DType::F64),
            DeviceTensor::F32(_) => ElemType::Value(DType::F32),
            DeviceTensor::F16(_) => ElemType::Value(DType::F16),
            DeviceTensor::Bf16(_) => ElemType::Value(DType::Bf16),
            DeviceTensor::I32(_) => ElemType::Index(IType::I32),
            DeviceTensor::I64(_) => ElemType::Index(IType::I64),
        }
    }
}

/// Every tensor of a kernel on the device, in the kernel's argument order.
#[derive(Debug)]
pub struct DeviceBuffers {
    pub tensors: Vec<DeviceTensor>,
    /// The output's position in `tensors`.
    output: usize,
    /// The output's initial contents, to reset it between timed launches.
    initial_output: DeviceTensor,
    /// Whether those contents are all zeros: a memset restores them, and
    /// that memset is part of the kernel's work.
    zero_start: bool,
    out_shape: Vec<usize>,
    /// Where the output is summed in f32 (`tensors[output]`), the output in
    /// its own 16-bit type, which the rounding kernel writes.
    rounded: Option<DeviceTensor>,
}

/// The times of one measurement, in milliseconds: the one timing type of
/// Spindle (the driver re-exports it for every backend and baseline).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// Timed launches (after the warm-up).
    pub runs: usize,
    /// Copies of the inputs rotated through (GPU timing, so repeats do not
    /// hit in L2); 1 when they do not fit in L2, and on the CPU.
    pub input_sets: usize,
}

impl Timing {
    /// The timing of these launch times (milliseconds, any order).
    pub fn of(mut times_ms: Vec<f64>, input_sets: usize) -> Timing {
        times_ms.sort_by(f64::total_cmp);
        let runs = times_ms.len();
        let median_ms = match runs {
            0 => f64::NAN,
            n if n % 2 == 1 => times_ms[n / 2],
            n => (times_ms[n / 2 - 1] + times_ms[n / 2]) / 2.0,
        };
        let min_ms = times_ms.first().copied().unwrap_or(f64::NAN);
        let max_ms = times_ms.last().copied().unwrap_or(f64::NAN);
        Timing { median_ms, min_ms, max_ms, runs, input_sets }
    }

    /// (max − min) / median: how much the runs disagree.
    pub fn spread(&self) -> f64 {
        (self.max_ms - self.min_ms) / self.median_ms
    }
}

/// How to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingOptions {
    /// Untimed launches first (caches, page faults, thread start-up).
    pub warmup: usize,
    /// Timed launches (at least one).
    pub repeats: usize,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions { warmup: 3, repeats: 20 }
    }
}

/// The arch Spindle compiles for on a device of this compute capability.
/// (A CUBIN runs on its own major version only.)
pub fn arch_for(major: i32, _minor: i32) -> Option<Arch> {
    match major {
        8 => Some(Arch::Sm80),
        9 => Some(Arch::Sm90),
        _ => None,
    }
}

impl Gpu {
    /// Opens device 0, or says why there is none.
    pub fn open() -> Result<Gpu> {
        // SAFETY: only tries `dlopen`s; cudarc would panic where this is false.
        if !unsafe { sys::is_culib_present() } {
            return Err(RuntimeError::NoDriver);
        }
        let count = CudaContext::device_count().map_err(|e| RuntimeError::NoDevice(e.to_string()))?;
        if count < 1 {
            return Err(RuntimeError::NoDevice("the driver reports 0 devices".into()));
        }
        let ctx = CudaContext::new(0)?;
        let stream = ctx.default_stream();
        let (major, minor) = ctx.compute_capability()?;
        let name = ctx.name()?;
        let arch = arch_for(major, minor).ok_or(RuntimeError::UnsupportedArch {
            name: name.clone(),
            major,
            minor,
        })?;
        let attr = |a| ctx.attribute(a);
        let info = DeviceInfo {
            name,
            compute_capability: (major, minor),
            multiprocessors: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            memory_bytes: ctx.total_mem()?,
            l2_bytes: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize,
            driver_version: driver_version(),
        };
        Ok(Gpu { ctx, stream, info, arch, modules: Mutex::new(HashMap::new()) })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Compiles (or finds in the cache) and loads a printed kernel.
    pub fn load(&self, printed: &CudaKernel) -> Result<LoadedKernel> {
        let mut loaded = self.load_source(&printed.source, &printed.symbol, printed.launch)?;
        loaded.writes_output = printed.writes_output;
        loaded.split = printed.split.clone();
        loaded.fill_counts = printed.fill_counts;
        if let Some(carry) = &printed.carry {
            let module = self.module_of(&printed.source, &printed.symbol)?;
            loaded.carry = Some((module.load_function(&carry.symbol)?, carry.clone()));
        }
        if let Some(round) = &printed.round {
            let module = self.module_of(&printed.source, &printed.symbol)?;
            loaded.round = Some((module.load_function(&round.symbol)?, round.clone()));
        }
        Ok(loaded)
    }

    /// The loaded module of a source [`Gpu::load_source`] loaded.
    fn module_of(&self, source: &str, symbol: &str) -> Result<Arc<CudaModule>> {
        let key = CacheEntry::of(self.arch, symbol, source).key;
        self.modules
            .lock()
            .map_err(|_| RuntimeError::Data("module cache poisoned".into()))?
            .get(&key)
            .cloned()
            .ok_or_else(|| RuntimeError::Data(format!("the module of `{symbol}` is not loaded")))
    }

    /// Compiles the printed kernels not yet in the CUBIN cache for this
    /// device's arch, all at once ([`cubin_cache::precompile`]), so that
    /// loading each afterwards finds it; returns how many it compiled.
    pub fn precompile(&self, printed: &[CudaKernel]) -> usize {
        let kernels: Vec<(&str, &str)> =
            printed.iter().map(|k| (k.symbol.as_str(), k.source.as_str())).collect();
        cubin_cache::precompile(self.arch, &kernels)
    }

    /// Compiles (or finds in the cache) and loads CUDA source holding the
    /// `extern "C"` kernel `symbol`.
    pub fn load_source(&self, source: &str, symbol: &str, launch: LaunchGeometry) -> Result<LoadedKernel> {
        let entry = CacheEntry::of(self.arch, symbol, source);
        let mut cache_hit = true;
        let cached = self
            .modules
            .lock()
            .map_err(|_| RuntimeError::Data("module cache poisoned".into()))?
            .get(&entry.key)
            .cloned();
        let (module, log) = match cached {
            Some(module) => (module, entry.log().unwrap_or_default()),
            None => {
                let compile = || entry.compile(self.arch, symbol, source).map_err(RuntimeError::from);
                let (cubin, log) = match entry.read(source) {
                    Some(found) => found,
                    None => {
                        cache_hit = false;
                        compile()?
                    }
                };
                let module = match self.ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)) {
                    Ok(m) => m,
                    // A damaged cached CUBIN: compile again.
                    Err(_) if cache_hit => {
                        cache_hit = false;
                        let (cubin, _) = compile()?;
                        self.ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?
                    }
                    Err(e) => return Err(e.into()),
                };
                self.modules
                    .lock()
                    .map_err(|_| RuntimeError::Data("module cache poisoned".into()))?
                    .insert(entry.key.clone(), module.clone());
                (module, log)
            }
        };
        let function = module.load_function(symbol)?;
        if launch.dynamic {
            // Beyond 48 KB a kernel must opt into its dynamic shared memory.
            let bytes = i32::try_from(launch.shared_bytes)
                .map_err(|_| RuntimeError::Data(format!("{} bytes of shared memory", launch.shared_bytes)))?;
            function.set_attribute(
                sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )?;
        }
        let resources = nvrtc::parse_ptxas_log(&log).get(symbol).copied();
        Ok(LoadedKernel {
            function,
            symbol: symbol.to_string(),
            launch,
            resources,
            cache_hit,
            round: None,
            writes_output: false,
            split: None,
            fill_counts: None,
            carry: None,
        })
    }

    /// Uploads the kernel's tensors (a tile or a level kernel). Values are converted from f64 to each
    /// tensor's dtype; the output starts as the kernel's [`OutputInit`]
    /// says. A 16-bit output summed by atomics gets an f32 buffer to sum in
    /// and one of its own type for the rounding kernel ([`device_kernel`]).
    /// A block-row kernel's work list is built from the data and follows
    /// the tensors, with its scratch buffers ([`RowSplit`]).
    pub fn upload<K: DeviceArgs + ?Sized>(
        &self,
        kernel: &K,
        loaded: &LoadedKernel,
        tensors: &Tensors,
    ) -> Result<DeviceBuffers> {
        kernel.check_data(tensors).map_err(RuntimeError::Data)?;
        let rounded = match kernel.rounded_output() {
            Some((dtype, len)) => Some(self.put(dtype, &HostData::Values(vec![0.0; len]))?),
            None => None,
        };
        let init = kernel.output_init();
        let params = kernel.device_params();
        let mut out = Vec::with_capacity(params.len());
        let mut output = None;
        let mut out_shape = Vec::new();
        let mut initial_output = None;
        let mut zero_start = false;
        for (i, t) in params.iter().enumerate() {
            let len: usize = t.shape.iter().product();
            let data = tensors.get(&t.name);
            let host: HostData = if t.output {
                output = Some(i);
                out_shape = t.shape.clone();
                let start = match (init, data) {
                    (OutputInit::Zero, _) | (OutputInit::Keep, None) => vec![0.0; len],
                    (OutputInit::Identity(r), None) => vec![r.identity(); len],
                    (_, Some(TensorValue::Values(a))) => a.iter().copied().collect(),
                    (_, Some(TensorValue::Indices(a))) => a.iter().map(|&x| x as f64).collect(),
                };
                zero_start = start.iter().all(|&x| x == 0.0);
                HostData::Values(start)
            } else {
                match (t.dtype, data) {
                    (ElemType::Value(_), Some(TensorValue::Values(a))) if a.len() == len => {
                        HostData::Values(a.iter().copied().collect())
                    }
                    (ElemType::Index(_), Some(TensorValue::Indices(a))) if a.len() == len => {
                        HostData::Indices(a.iter().copied().collect())
                    }
                    _ => return Err(RuntimeError::Data(format!("no fitting data for tensor {}", t.name))),
                }
            };
            let device = self.put(t.dtype, &host)?;
            if t.output {
                initial_output = Some(self.copy(&device)?);
            }
            out.push(device);
        }
        let output = output.ok_or_else(|| RuntimeError::Data("the kernel has no output".into()))?;
        let initial_output = initial_output.expect("set with the output");
        if let Some(split) = &loaded.split {
            let work = split.work_for(tensors).map_err(RuntimeError::Data)?;
            let s = &self.stream;
            out.push(DeviceTensor::I64(s.clone_htod(&work.list)?));
            out.push(DeviceTensor::F32(s.alloc_zeros(split.partials_len(work.slots))?));
            out.push(DeviceTensor::I32(s.alloc_zeros(split.counters_len(work.slots))?));
        }
        if let Some(len) = loaded.fill_counts {
            out.push(DeviceTensor::I64(self.stream.alloc_zeros(len)?));
        }
        if let Some((_, carry)) = &loaded.carry {
            // (Every slot the second kernel reads, the walk wrote first:
            // zeroed on the device, with no host copy, only to be defined.)
            let (s, len) = (&self.stream, carry.len.max(1));
            out.push(match carry.dtype {
                ElemType::Value(spindle_ir::formats::DType::F64) => DeviceTensor::F64(s.alloc_zeros(len)?),
                _ => DeviceTensor::F32(s.alloc_zeros(len)?),
            });
        }
        Ok(DeviceBuffers { tensors: out, output, initial_output, zero_start, out_shape, rounded })
    }

    /// One tensor on the device in `dtype`. Empty tensors get one element,
    /// since a zero-byte allocation is an error for the driver.
    fn put(&self, dtype: ElemType, host: &HostData) -> Result<DeviceTensor> {
        use spindle_ir::formats::{DType, IType};
        let s = &self.stream;
        // Converts element by element into the device type, padding an
        // empty tensor to one element.
        fn convert<T>(host: &HostData, f: impl Fn(f64) -> T, g: impl Fn(i64) -> T, zero: T) -> Vec<T> {
            let mut v: Vec<T> = match host {
                HostData::Values(v) => v.iter().map(|&x| f(x)).collect(),
                HostData::Indices(v) => v.iter().map(|&x| g(x)).collect(),
            };
            if v.is_empty() {
                v.push(zero);
            }
            v
        }
        Ok(match dtype {
            ElemType::Value(DType::F64) => {
                DeviceTensor::F64(s.clone_htod(&convert(host, |x| x, |x| x as f64, 0.0))?)
            }
            ElemType::Value(DType::F32) => {
                DeviceTensor::F32(s.clone_htod(&convert(host, |x| x as f32, |x| x as f32, 0.0))?)
            }
            ElemType::Value(DType::F16) => DeviceTensor::F16(s.clone_htod(&convert(
                host,
                f16::from_f64,
                |x| f16::from_f64(x as f64),
                f16::ZERO,
            ))?),
            ElemType::Value(DType::Bf16) => DeviceTensor::Bf16(s.clone_htod(&convert(
                host,
                bf16::from_f64,
                |x| bf16::from_f64(x as f64),
                bf16::ZERO,
            ))?),
            ElemType::Index(IType::I32) => {
                DeviceTensor::I32(s.clone_htod(&convert(host, |x| x as i32, |x| x as i32, 0))?)
            }
            ElemType::Index(IType::I64) => {
                DeviceTensor::I64(s.clone_htod(&convert(host, |x| x as i64, |x| x, 0))?)
            }
        })
    }

    /// A device-side copy of a tensor.
    fn copy(&self, t: &DeviceTensor) -> Result<DeviceTensor> {
        let s = &self.stream;
        Ok(match t {
            DeviceTensor::F64(d) => DeviceTensor::F64(s.clone_dtod(d)?),
            DeviceTensor::F32(d) => DeviceTensor::F32(s.clone_dtod(d)?),
            DeviceTensor::F16(d) => DeviceTensor::F16(s.clone_dtod(d)?),
            DeviceTensor::Bf16(d) => DeviceTensor::Bf16(s.clone_dtod(d)?),
            DeviceTensor::I32(d) => DeviceTensor::I32(s.clone_dtod(d)?),
            DeviceTensor::I64(d) => DeviceTensor::I64(s.clone_dtod(d)?),
        })
    }

    /// Launches `kernel` on `buffers` (asynchronously, on the stream).
    pub fn launch(&self, kernel: &LoadedKernel, buffers: &mut DeviceBuffers) -> Result<()> {
        let functions = std::iter::once(&kernel.function).chain(kernel.carry.as_ref().map(|(f, _)| f));
        for function in functions {
            let mut args = self.stream.launch_builder(function);
            for t in &buffers.tensors {
                match t {
                    DeviceTensor::F64(s) => args.arg(s),
                    DeviceTensor::F32(s) => args.arg(s),
                    DeviceTensor::F16(s) => args.arg(s),
                    DeviceTensor::Bf16(s) => args.arg(s),
                    DeviceTensor::I32(s) => args.arg(s),
                    DeviceTensor::I64(s) => args.arg(s),
                };
            }
            let config = LaunchConfig {
                grid_dim: (kernel.launch.grid, 1, 1),
                block_dim: (kernel.launch.block, 1, 1),
                // Static shared memory needs nothing here; dynamic, its bytes.
                shared_mem_bytes: if kernel.launch.dynamic { kernel.launch.shared_bytes as u32 } else { 0 },
            };
            if kernel.launch.grid > 0 {
                // SAFETY: the arguments are the kernel's tensors in its
                // parameter order with the printed pointer types
                // ([`crate::print::cuda_type`] of each dtype, the output's
                // widened by [`device_kernel`] as the upload widened it), each as
                // long as its declared shape, then the scratch buffers the
                // upload appended for it; the printed kernel masks every
                // access to those shapes. The carried walk's second kernel
                // has the walk's parameters and launch.
                unsafe { args.launch(config) }?;
            }
        }
        if let Some((function, round)) = &kernel.round {
            let (DeviceTensor::F32(acc), Some(out)) =
                (&buffers.tensors[buffers.output], &mut buffers.rounded)
            else {
                return Err(RuntimeError::Data(format!(
                    "`{}` rounds a widened output, but the buffers were not uploaded for it",
                    kernel.symbol
                )));
            };
            let len = round.len as i64;
            let mut args = self.stream.launch_builder(function);
            args.arg(acc);
            match out {
                DeviceTensor::F16(o) => args.arg(o),
                DeviceTensor::Bf16(o) => args.arg(o),
                _ => return Err(RuntimeError::Data("a widened output is f16 or bf16".into())),
            };
            args.arg(&len);
            let config = LaunchConfig {
                grid_dim: (round.grid(), 1, 1),
                block_dim: (ROUND_BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: `acc` (f32) and `out` (the output's 16-bit type) both
            // hold `len` elements, the printed rounding kernel's arguments.
            unsafe { args.launch(config) }?;
        }
        Ok(())
    }

    /// Zeroes the output (the f32 copy of a 16-bit one).
    pub fn zero_output(&self, buffers: &mut DeviceBuffers) -> Result<()> {
        let s = &self.stream;
        match &mut buffers.tensors[buffers.output] {
            DeviceTensor::F64(d) => s.memset_zeros(d)?,
            DeviceTensor::F32(d) => s.memset_zeros(d)?,
            DeviceTensor::F16(d) => s.memset_zeros(d)?,
            DeviceTensor::Bf16(d) => s.memset_zeros(d)?,
            DeviceTensor::I32(d) => s.memset_zeros(d)?,
            DeviceTensor::I64(d) => s.memset_zeros(d)?,
        }
        Ok(())
    }

    /// Fills the output with NaN before the checked run of a kernel that
    /// writes every element without reading it
    /// ([`CudaKernel::writes_output`]): an element it fails to write shows
    /// as NaN instead of passing as the zero it started from.
    fn poison_output(&self, buffers: &mut DeviceBuffers, writes_output: bool) -> Result<()> {
        if !(writes_output && buffers.zero_start) {
            return Ok(());
        }
        let len: usize = buffers.out_shape.iter().product();
        let dtype = buffers.tensors[buffers.output].dtype();
        buffers.tensors[buffers.output] = self.put(dtype, &HostData::Values(vec![f64::NAN; len]))?;
        Ok(())
    }

    /// Puts the output back to its initial contents.
    pub fn reset_output(&self, buffers: &mut DeviceBuffers) -> Result<()> {
        let s = &self.stream;
        match (&mut buffers.tensors[buffers.output], &buffers.initial_output) {
            (DeviceTensor::F64(d), DeviceTensor::F64(i)) => s.memcpy_dtod(i, d)?,
            (DeviceTensor::F32(d), DeviceTensor::F32(i)) => s.memcpy_dtod(i, d)?,
            (DeviceTensor::F16(d), DeviceTensor::F16(i)) => s.memcpy_dtod(i, d)?,
            (DeviceTensor::Bf16(d), DeviceTensor::Bf16(i)) => s.memcpy_dtod(i, d)?,
            (DeviceTensor::I32(d), DeviceTensor::I32(i)) => s.memcpy_dtod(i, d)?,
            (DeviceTensor::I64(d), DeviceTensor::I64(i)) => s.memcpy_dtod(i, d)?,
            _ => return Err(RuntimeError::Data("output and its initial copy differ in dtype".into())),
        }
        Ok(())
    }

    /// The output in f64. For `max=` / `min=` without data, entries no
    /// program reached are 0 (as on the C backend).
    pub fn download<K: DeviceArgs + ?Sized>(
        &self,
        kernel: &K,
        buffers: &DeviceBuffers,
        had_data: bool,
    ) -> Result<ArrayD<f64>> {
        let mut data = self.to_host(buffers.rounded.as_ref().unwrap_or(&buffers.tensors[buffers.output]))?;
        let len: usize = buffers.out_shape.iter().product();
        data.truncate(len);
        if let (OutputInit::Identity(r), false) = (kernel.output_init(), had_data) {
            data.iter_mut().filter(|x| **x == r.identity()).for_each(|x| *x = 0.0);
        }
        ArrayD::from_shape_vec(buffers.out_shape.clone(), data).map_err(|e| RuntimeError::Data(e.to_string()))
    }

    /// A device tensor's contents in f64.
    pub fn to_host(&self, t: &DeviceTensor) -> Result<Vec<f64>> {
        let s = &self.stream;
        Ok(match t {
            DeviceTensor::F64(d) => s.clone_dtoh(d)?,
            DeviceTensor::F32(d) => s.clone_dtoh(d)?.into_iter().map(f64::from).collect(),
            DeviceTensor::F16(d) => s.clone_dtoh(d)?.into_iter().map(f64::from).collect(),
            DeviceTensor::Bf16(d) => s.clone_dtoh(d)?.into_iter().map(f64::from).collect(),
            DeviceTensor::I32(d) => s.clone_dtoh(d)?.into_iter().map(f64::from).collect(),
            DeviceTensor::I64(d) => s.clone_dtoh(d)?.into_iter().map(|x| x as f64).collect(),
        })
    }

    /// Uploads, launches once, synchronises and downloads: the result of
    /// `kernel` on `tensors`, checked for launch errors.
    pub fn run<K: DeviceArgs + ?Sized>(
        &self,
        kernel: &K,
        printed: &CudaKernel,
        tensors: &Tensors,
    ) -> Result<ArrayD<f64>> {
        let loaded = self.load(printed)?;
        let mut buffers = self.upload(kernel, &loaded, tensors)?;
        self.poison_output(&mut buffers, loaded.writes_output)?;
        self.launch(&loaded, &mut buffers)?;
        self.stream.synchronize()?;
        self.download(kernel, &buffers, tensors.contains_key(&output_name(kernel)))
    }

    /// Runs `loaded` once on `tensors` and returns its output (as
    /// [`Gpu::run`] does), then times it on the same uploaded data (as
    /// [`Gpu::time`] does): one upload serves both.
    pub fn run_and_time<K: DeviceArgs + ?Sized>(
        &self,
        kernel: &K,
        loaded: &LoadedKernel,
        tensors: &Tensors,
        opts: TimingOptions,
    ) -> Result<(ArrayD<f64>, Timing)> {
        let mut first = self.upload(kernel, loaded, tensors)?;
        self.poison_output(&mut first, loaded.writes_output)?;
        self.launch(loaded, &mut first)?;
        self.stream.synchronize()?;
        let output = self.download(kernel, &first, tensors.contains_key(&output_name(kernel)))?;
        let timing = self.time_uploaded(kernel, loaded, tensors, &mut first, opts)?;
        Ok((output, timing))
    }

    /// Times `loaded` on `tensors` with events: `opts.warmup` launches, then
    /// the median of `opts.repeats`. Each launch starts from the initial
    /// output with L2 flushed, as the library baselines do
    /// ([`crate::baseline`]). An output that starts as zeros is zeroed
    /// inside the timed region, after the flush: the kernel sums into it,
    /// so the memset is its work, as writing C is cuSPARSE's and cuBLAS's
    /// with `beta = 0`. Other initial contents are restored before the
    /// flush, untimed; a kernel that writes every output element without
    /// reading it needs neither. When the inputs fit in L2, up to eight copies are
    /// rotated as well.
    pub fn time<K: DeviceArgs + ?Sized>(
        &self,
        kernel: &K,
        loaded: &LoadedKernel,
        tensors: &Tensors,
        opts: TimingOptions,
    ) -> Result<Timing> {
        let mut first = self.upload(kernel, loaded, tensors)?;
        self.time_uploaded(kernel, loaded, tensors, &mut first, opts)
    }

    /// [`Gpu::time`] with the first input set already on the device, in
    /// `first` (uploaded from `tensors`; its output is reset before each
    /// launch, so it may hold an earlier launch's): the other sets, where
    /// the inputs fit in L2, are uploaded here.
    pub fn time_uploaded<K: DeviceArgs + ?Sized>(
        &self,
        kernel: &K,
        loaded: &LoadedKernel,
        tensors: &Tensors,
        first: &mut DeviceBuffers,
        opts: TimingOptions,
    ) -> Result<Timing> {
        let sets = input_sets(buffers_bytes(kernel), self.info.l2_bytes);
        let mut others = Vec::with_capacity(sets - 1);
        for _ in 1..sets {
            others.push(self.upload(kernel, loaded, tensors)?);
        }
        // Both closures need the buffers; they never run at the same time.
        let all = std::cell::RefCell::new((first, others));
        let mut flusher = self.l2_flusher()?;
        self.time_with_events(
            opts,
            |i, gpu| {
                let mut all = all.borrow_mut();
                let (first, others) = &mut *all;
                let buffers = input_set(first, others, i % sets);
                if !buffers.zero_start {
                    gpu.reset_output(buffers)?;
                }
                flusher.flush(gpu)
            },
            |i, gpu| {
                let mut all = all.borrow_mut();
                let (first, others) = &mut *all;
                let buffers = input_set(first, others, i % sets);
                if buffers.zero_start && !loaded.writes_output {
                    gpu.zero_output(buffers)?;
                }
                gpu.launch(loaded, buffers)
            },
        )
        .map(|t| Timing { input_sets: sets, ..t })
    }

    /// Times `body` with events around each call: `warmup` untimed calls,
    /// then `repeats` timed ones; `before` runs before each call, outside
    /// the timed region. Both get the call's number.
    pub fn time_with_events<B, F>(&self, opts: TimingOptions, mut before: B, mut body: F) -> Result<Timing>
    where
        B: FnMut(usize, &Gpu) -> Result<()>,
        F: FnMut(usize, &Gpu) -> Result<()>,
    {
        for i in 0..opts.warmup {
            before(i, self)?;
            body(i, self)?;
        }
        self.stream.synchronize()?;
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.ctx.new_event(flags)?;
        let end = self.ctx.new_event(flags)?;
        let mut times = Vec::with_capacity(opts.repeats.max(1));
        for i in 0..opts.repeats.max(1) {
            before(opts.warmup + i, self)?;
            start.record(&self.stream)?;
            body(opts.warmup + i, self)?;
            end.record(&self.stream)?;
            end.synchronize()?;
            times.push(f64::from(start.elapsed_ms(&end)?));
        }
        Ok(Timing::of(times, 1))
    }

    /// A scratch buffer twice the L2 size, zeroed before a timed call so the
    /// call starts with nothing of its inputs in L2 (for library baselines,
    /// whose inputs cannot be rotated as [`Gpu::time`] rotates ours).
    pub fn l2_flusher(&self) -> Result<L2Flusher> {
        Ok(L2Flusher(self.stream.alloc_zeros::<u8>((2 * self.info.l2_bytes).max(1))?))
    }

    /// Device-to-device copy bandwidth in GB/s (bytes read plus written),
    /// the ceiling memory-bound kernels are reported against.
    pub fn copy_bandwidth(&self, bytes: usize) -> Result<f64> {
        let n = (bytes / 4).max(1);
        let src = self.stream.alloc_zeros::<f32>(n)?;
        let mut dst = self.stream.alloc_zeros::<f32>(n)?;
        let t = self.time_with_events(
            TimingOptions { warmup: 3, repeats: 20 },
            |_, _| Ok(()),
            |_, gpu| Ok(gpu.stream.memcpy_dtod(&src, &mut dst)?),
        )?;
        Ok(2.0 * (n * 4) as f64 / (t.median_ms * 1e-3) / 1e9)
    }
}

/// The driver's CUDA version (e.g. 13000), 0 when it cannot say.
fn driver_version() -> i32 {
    let mut version = 0;
    // SAFETY: writes one int; only called after the driver library loaded.
    let status = unsafe { sys::cuDriverGetVersion(&mut version) };
    if status == sys::CUresult::CUDA_SUCCESS { version } else { 0 }
}

/// Input set `k` of a timing: `first`, then `others`.
fn input_set<'a>(
    first: &'a mut DeviceBuffers,
    others: &'a mut [DeviceBuffers],
    k: usize,
) -> &'a mut DeviceBuffers {
    match k {
        0 => first,
        k => &mut others[k - 1],
    }
}

/// See [`Gpu::l2_flusher`].
#[derive(Debug)]
pub struct L2Flusher(CudaSlice<u8>);

impl L2Flusher {
    /// Overwrites the scratch buffer (asynchronously, on the stream), after
    /// returning persisting lines to normal: lines a kernel read with an
    /// L2 `evict_last` policy (block rows' and `l2hints=on` walks' rows of
    /// B) would otherwise outlast a flush of normal priority, and the next
    /// launch would find its inputs warm where a baseline's are cold.
    pub fn flush(&mut self, gpu: &Gpu) -> Result<()> {
        gpu.stream.synchronize()?;
        // Best effort: a GPU without the feature (a MIG slice) refuses the
        // call, and has no persisting lines to reset either.
        // SAFETY: a driver call on the current context, with no arguments.
        let _ = unsafe { sys::cuCtxResetPersistingL2Cache() };
        gpu.stream.memset_zeros(&mut self.0)?;
        Ok(())
    }
}

/// Host data before conversion to a device dtype.
enum HostData {
    Values(Vec<f64>),
    Indices(Vec<i64>),
}

/// Bytes of a kernel's tensors on the device.
pub fn buffers_bytes<K: DeviceArgs + ?Sized>(kernel: &K) -> usize {
    kernel.device_params().iter().map(|t| t.shape.iter().product::<usize>() * t.dtype.size_bytes()).sum()
}

/// How many copies of the inputs to rotate through: enough to overflow
/// twice the L2, at most eight; one when a copy does not fit in L2.
pub fn input_sets(bytes: usize, l2_bytes: usize) -> usize {
    if bytes == 0 || bytes >= l2_bytes { 1 } else { (2 * l2_bytes).div_ceil(bytes).clamp(1, 8) }
}

/// What the runtime needs of a kernel to hold its arguments on the device:
/// tile kernels ([`Kernel`]) and level kernels ([`LevelKernel`]) alike.
pub trait DeviceArgs {
    /// The parameters in order, as the device holds them (a 16-bit output
    /// summed by atomics in f32, see [`device_kernel`]).
    fn device_params(&self) -> Vec<TensorParam>;
    fn output_init(&self) -> OutputInit;
    /// Checks index tensors before they reach the device.
    fn check_data(&self, tensors: &Tensors) -> std::result::Result<(), String>;
    /// The type and length of the output a second kernel rounds into.
    fn rounded_output(&self) -> Option<(ElemType, usize)>;
}

impl DeviceArgs for Kernel {
    fn device_params(&self) -> Vec<TensorParam> {
        device_kernel(self).tensors.values().cloned().collect()
    }

    fn output_init(&self) -> OutputInit {
        self.init
    }

    fn check_data(&self, tensors: &Tensors) -> std::result::Result<(), String> {
        self.check_indices(tensors)
    }

    fn rounded_output(&self) -> Option<(ElemType, usize)> {
        widened_output(self).map(|d| (d, self.tensor(self.sink.tensor).shape.iter().product()))
    }
}

/// A level kernel's arguments are its format arrays and dense tensors as
/// they are (its coordinates are checked when its formats are built), a
/// 16-bit output held in f32 ([`device_level_kernel`]).
impl DeviceArgs for LevelKernel {
    fn device_params(&self) -> Vec<TensorParam> {
        device_level_kernel(self).tensors.values().cloned().collect()
    }

    fn output_init(&self) -> OutputInit {
        self.init
    }

    fn check_data(&self, _: &Tensors) -> std::result::Result<(), String> {
        Ok(())
    }

    fn rounded_output(&self) -> Option<(ElemType, usize)> {
        widened_level_output(self).map(|d| (d, self.tensor(self.output).shape.iter().product()))
    }
}

/// The name of a kernel's output tensor.
fn output_name<K: DeviceArgs + ?Sized>(kernel: &K) -> String {
    kernel.device_params().into_iter().find(|t| t.output).map(|t| t.name).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_gpu_is_an_error_not_a_panic() {
        // This machine may or may not have a GPU; either way nothing panics
        // and the answer agrees with `available`.
        match Gpu::open() {
            Ok(gpu) => {
                assert!(available());
                assert!(gpu.info().multiprocessors > 0);
            }
            Err(e) => {
                assert!(!available());
                let message = e.to_string();
                assert!(
                    message.contains("no CUDA driver") || message.contains("no CUDA device"),
                    "unexpected: {message}"
                );
            }
        }
    }

    #[test]
    fn input_rotation_overflows_the_cache() {
        let l2 = 50 << 20;
        assert_eq!(input_sets(l2, l2), 1, "a copy as large as L2 reads from DRAM anyway");
        assert_eq!(input_sets(0, l2), 1);
        assert_eq!(input_sets(30 << 20, l2), 4, "4 x 30 MiB >= 2 x 50 MiB");
        assert_eq!(input_sets(1 << 10, l2), 8, "capped");
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(Timing::of(vec![3.0, 1.0, 2.0], 1).median_ms, 2.0);
        let t = Timing::of(vec![4.0, 1.0, 2.0, 3.0], 2);
        assert_eq!((t.median_ms, t.min_ms, t.runs, t.input_sets), (2.5, 1.0, 4, 2));
    }

    #[test]
    fn archs_of_compute_capabilities() {
        assert_eq!(arch_for(8, 6), Some(Arch::Sm80));
        assert_eq!(arch_for(9, 0), Some(Arch::Sm90));
        assert_eq!(arch_for(10, 0), None);
        assert_eq!(arch_for(7, 5), None);
    }
}
