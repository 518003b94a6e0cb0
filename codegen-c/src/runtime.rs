//! CPU buffers, launching kernels, and timing.
//!
//! # Element types at the boundary
//!
//! A [`Buffer`] holds what the C kernel reads and writes: `double`,
//! `float`, `int32_t` or `int64_t`. f64 and f32 values stay as they are.
//! **f16 and bf16 values are converted to f32 at the boundary** and the C
//! kernels compute on them in f32 (C11 has no portable half type): a value
//! is first rounded to the half type, so the kernel sees exactly what an
//! f16/bf16 tensor holds, then widened to f32 (exactly). Results come back
//! with [`Buffer::to_f16`], [`Buffer::to_bf16`] or
//! [`Buffer::to_f64_as`], which round each f32 result to the half type
//! once. Index arrays are i32 or i64 as their format stores them.

use std::ffi::c_void;
use std::fmt;
use std::time::{Duration, Instant};

use half::{bf16, f16};
use spindle_ir::formats::{DType, IType, Index, Value};
use spindle_ir::lang::ElemType;

use crate::compile::CProgram;

/// The C element type of a [`Buffer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferKind {
    F64,
    F32,
    I32,
    I64,
}

impl BufferKind {
    /// The buffer kind that holds values of `dtype` (f16/bf16 → f32).
    pub fn for_dtype(dtype: DType) -> Self {
        match dtype {
            DType::F64 => BufferKind::F64,
            DType::F32 | DType::F16 | DType::Bf16 => BufferKind::F32,
        }
    }

    /// The buffer kind that holds indices of `itype`.
    pub fn for_itype(itype: IType) -> Self {
        match itype {
            IType::I32 => BufferKind::I32,
            IType::I64 => BufferKind::I64,
        }
    }

    /// The buffer kind for a tensor's element type.
    pub fn for_elem(elem: ElemType) -> Self {
        match elem {
            ElemType::Value(d) => Self::for_dtype(d),
            ElemType::Index(i) => Self::for_itype(i),
        }
    }

    /// The C type a kernel declares for this buffer's elements.
    pub fn c_type(self) -> &'static str {
        match self {
            BufferKind::F64 => "double",
            BufferKind::F32 => "float",
            BufferKind::I32 => "int32_t",
            BufferKind::I64 => "int64_t",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BufferKind::F64 => "f64",
            BufferKind::F32 => "f32",
            BufferKind::I32 => "i32",
            BufferKind::I64 => "i64",
        }
    }
}

impl fmt::Display for BufferKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One array a kernel reads or writes, in the element type the C code
/// uses (see the module docs for f16/bf16).
#[derive(Debug, PartialEq)]
pub enum Buffer {
    F64(Vec<f64>),
    F32(Vec<f32>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Clone for Buffer {
    fn clone(&self) -> Buffer {
        match self {
            Buffer::F64(v) => Buffer::F64(v.clone()),
            Buffer::F32(v) => Buffer::F32(v.clone()),
            Buffer::I32(v) => Buffer::I32(v.clone()),
            Buffer::I64(v) => Buffer::I64(v.clone()),
        }
    }

    /// In place where the kinds match (a timed launch's reset rewrites its
    /// buffers, not reallocates them: the same memory every launch).
    fn clone_from(&mut self, source: &Buffer) {
        match (self, source) {
            (Buffer::F64(a), Buffer::F64(b)) => a.clone_from(b),
            (Buffer::F32(a), Buffer::F32(b)) => a.clone_from(b),
            (Buffer::I32(a), Buffer::I32(b)) => a.clone_from(b),
            (Buffer::I64(a), Buffer::I64(b)) => a.clone_from(b),
            (this, _) => *this = source.clone(),
        }
    }
}

impl Buffer {
    /// Values of `dtype` given as f64: rounded to `dtype`, then (for
    /// f16/bf16) widened to f32.
    pub fn from_f64(values: &[f64], dtype: DType) -> Buffer {
        match dtype {
            DType::F64 => Buffer::F64(values.to_vec()),
            DType::F32 => Buffer::F32(values.iter().map(|&x| x as f32).collect()),
            DType::F16 => Buffer::F32(values.iter().map(|&x| f16::from_f64(x).to_f32()).collect()),
            DType::Bf16 => Buffer::F32(values.iter().map(|&x| bf16::from_f64(x).to_f32()).collect()),
        }
    }

    /// Indices of `itype` given as i64; fails when one does not fit.
    pub fn from_i64(values: &[i64], itype: IType) -> Result<Buffer, RunError> {
        Ok(match itype {
            IType::I64 => Buffer::I64(values.to_vec()),
            IType::I32 => Buffer::I32(
                values
                    .iter()
                    .enumerate()
                    .map(|(position, &value)| {
                        i32::try_from(value).map_err(|_| RunError::IndexOverflow { position, value })
                    })
                    .collect::<Result<_, _>>()?,
            ),
        })
    }

    /// A format's value array, converted as the kernels expect it (f16 and
    /// bf16 widen to f32 exactly).
    pub fn from_values<T: Value>(values: &[T]) -> Buffer {
        match T::DTYPE {
            DType::F64 => Buffer::F64(values.iter().map(|v| v.to_f64()).collect()),
            // Exact: every f32, f16 and bf16 value is an f32.
            DType::F32 | DType::F16 | DType::Bf16 => {
                Buffer::F32(values.iter().map(|v| v.to_f64() as f32).collect())
            }
        }
    }

    /// A format's index array.
    pub fn from_indices<I: Index>(indices: &[I]) -> Buffer {
        match I::ITYPE {
            // `to_usize` of a stored index fits its own type.
            IType::I32 => Buffer::I32(indices.iter().map(|i| i.to_usize() as i32).collect()),
            IType::I64 => Buffer::I64(indices.iter().map(|i| i.to_usize() as i64).collect()),
        }
    }

    /// `len` zeros of `kind` (an output buffer).
    pub fn zeros(kind: BufferKind, len: usize) -> Buffer {
        match kind {
            BufferKind::F64 => Buffer::F64(vec![0.0; len]),
            BufferKind::F32 => Buffer::F32(vec![0.0; len]),
            BufferKind::I32 => Buffer::I32(vec![0; len]),
            BufferKind::I64 => Buffer::I64(vec![0; len]),
        }
    }

    /// Makes this a buffer of `kind` with `len` elements, keeping its
    /// allocation (and its first elements) when it already is of `kind`:
    /// an output rebuilt by every launch takes no fresh pages per launch.
    pub fn resize(&mut self, kind: BufferKind, len: usize) {
        match self {
            Buffer::F64(v) if kind == BufferKind::F64 => v.resize(len, 0.0),
            Buffer::F32(v) if kind == BufferKind::F32 => v.resize(len, 0.0),
            Buffer::I32(v) if kind == BufferKind::I32 => v.resize(len, 0),
            Buffer::I64(v) if kind == BufferKind::I64 => v.resize(len, 0),
            _ => *self = Buffer::zeros(kind, len),
        }
    }

    /// Integer contents widened to i64 (`None` for values).
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        match self {
            Buffer::I32(v) => Some(v.iter().map(|&x| x as i64).collect()),
            Buffer::I64(v) => Some(v.clone()),
            _ => None,
        }
    }

    pub fn kind(&self) -> BufferKind {
        match self {
            Buffer::F64(_) => BufferKind::F64,
            Buffer::F32(_) => BufferKind::F32,
            Buffer::I32(_) => BufferKind::I32,
            Buffer::I64(_) => BufferKind::I64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Buffer::F64(v) => v.len(),
            Buffer::F32(v) => v.len(),
            Buffer::I32(v) => v.len(),
            Buffer::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every element as f64 (exact for all kinds except i64 beyond 2^53).
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            Buffer::F64(v) => v.clone(),
            Buffer::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Buffer::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Buffer::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// Every element rounded to `dtype` (once), as f64: what a tensor of
    /// `dtype` holds after the kernel. For an f16/bf16 output computed in
    /// f32 this is the round-trip back.
    pub fn to_f64_as(&self, dtype: DType) -> Vec<f64> {
        match dtype {
            DType::F64 => self.to_f64(),
            DType::F32 => self.to_values::<f32>().into_iter().map(f64::from).collect(),
            DType::F16 => self.to_f16().into_iter().map(f64::from).collect(),
            DType::Bf16 => self.to_bf16().into_iter().map(f64::from).collect(),
        }
    }

    /// Every element converted to the value type `T`, rounding once.
    pub fn to_values<T: Value>(&self) -> Vec<T> {
        match self {
            // f32 → f64 is exact, so this rounds once, from the f32 value.
            Buffer::F32(v) => v.iter().map(|&x| T::from_f64(f64::from(x))).collect(),
            other => other.to_f64().into_iter().map(T::from_f64).collect(),
        }
    }

    /// The round-trip back to f16 (round to nearest even).
    pub fn to_f16(&self) -> Vec<f16> {
        self.to_values()
    }

    /// The round-trip back to bf16 (round to nearest even).
    pub fn to_bf16(&self) -> Vec<bf16> {
        self.to_values()
    }

    pub fn as_f64(&self) -> Option<&[f64]> {
        if let Buffer::F64(v) = self { Some(v) } else { None }
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        if let Buffer::F32(v) = self { Some(v) } else { None }
    }

    pub fn as_i32(&self) -> Option<&[i32]> {
        if let Buffer::I32(v) = self { Some(v) } else { None }
    }

    pub fn as_i64(&self) -> Option<&[i64]> {
        if let Buffer::I64(v) = self { Some(v) } else { None }
    }

    /// The pointer a kernel receives for this buffer.
    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        match self {
            Buffer::F64(v) => v.as_mut_ptr().cast(),
            Buffer::F32(v) => v.as_mut_ptr().cast(),
            Buffer::I32(v) => v.as_mut_ptr().cast(),
            Buffer::I64(v) => v.as_mut_ptr().cast(),
        }
    }
}

impl From<Vec<f64>> for Buffer {
    fn from(v: Vec<f64>) -> Self {
        Buffer::F64(v)
    }
}

impl From<Vec<f32>> for Buffer {
    fn from(v: Vec<f32>) -> Self {
        Buffer::F32(v)
    }
}

impl From<Vec<i32>> for Buffer {
    fn from(v: Vec<i32>) -> Self {
        Buffer::I32(v)
    }
}

impl From<Vec<i64>> for Buffer {
    fn from(v: Vec<i64>) -> Self {
        Buffer::I64(v)
    }
}

/// Why a kernel could not be launched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("kernel `{symbol}` takes {expected} buffers, got {got}")]
    ArgCount { symbol: String, expected: usize, got: usize },
    #[error("kernel `{symbol}` takes a {expected} buffer as argument {index}, got {got}")]
    ArgKind { symbol: String, index: usize, expected: BufferKind, got: BufferKind },
    #[error("thread count {0} is out of range")]
    Threads(usize),
    #[error("index {value} at position {position} does not fit in i32")]
    IndexOverflow { position: usize, value: i64 },
}

impl CProgram {
    /// Declares the buffers the kernel takes, in order; [`CProgram::run`]
    /// then checks their number and kinds before every launch.
    pub fn with_signature(mut self, kinds: Vec<BufferKind>) -> Self {
        self.signature = Some(kinds);
        self
    }

    /// The declared buffer kinds, if any.
    pub fn signature(&self) -> Option<&[BufferKind]> {
        self.signature.as_deref()
    }

    /// Runs the kernel on `buffers` (one per kernel argument, in the
    /// kernel's order) with `nthreads` OpenMP threads; 0 means
    /// [`cpu_threads`].
    ///
    /// The kernel is trusted to read and write only within the lengths of
    /// the buffers it is given (the printer emits kernels that take their
    /// extents as arguments); the number and kinds of buffers are checked
    /// here when [`CProgram::with_signature`] declared them.
    pub fn run(&self, buffers: &mut [Buffer], nthreads: usize) -> Result<(), RunError> {
        if let Some(kinds) = &self.signature {
            if kinds.len() != buffers.len() {
                return Err(RunError::ArgCount {
                    symbol: self.symbol().to_owned(),
                    expected: kinds.len(),
                    got: buffers.len(),
                });
            }
            for (index, (&expected, b)) in kinds.iter().zip(buffers.iter()).enumerate() {
                if b.kind() != expected {
                    return Err(RunError::ArgKind {
                        symbol: self.symbol().to_owned(),
                        index,
                        expected,
                        got: b.kind(),
                    });
                }
            }
        }
        let nthreads = if nthreads == 0 { cpu_threads() } else { nthreads };
        let n = i64::try_from(nthreads)
            .ok()
            .filter(|&n| n <= i64::from(i32::MAX))
            .ok_or(RunError::Threads(nthreads))?;
        let args: Vec<*mut c_void> = buffers.iter_mut().map(Buffer::as_mut_ptr).collect();
        // SAFETY: each pointer comes from a distinct buffer borrowed mutably
        // for the call, with the element type its kind names; lengths are
        // the kernel's contract (see above).
        unsafe { self.call(&args, n) };
        Ok(())
    }
}

/// Makes OpenMP threads that wait for work sleep instead of spinning,
/// unless the user chose a policy (`$OMP_WAIT_POLICY` or
/// `$GOMP_SPINCOUNT` is set).
///
/// By default libgomp spins for about 3 ms at every barrier and between
/// parallel regions: with other busy processes on the machine, a spinning
/// thread holds the core the thread it waits for needs, and a kernel gets
/// many times slower. Passive waiting costs 10-80 µs to wake a thread per
/// parallel region instead, which is why small kernels run on one thread
/// (see [`crate::print::SERIAL_WORK`]).
///
/// libgomp reads the policy once, when it is loaded, which is the first
/// `dlopen` of a kernel; [`crate::CProgram`]s call this just before that.
/// A program that starts threads calling C code that reads the
/// environment (`getenv`) should call it first, from `main`, so that no
/// such read runs while the variable is set. Calling it again does nothing.
pub fn wait_passively() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let chosen = ["OMP_WAIT_POLICY", "GOMP_SPINCOUNT"].iter().any(|v| std::env::var_os(v).is_some());
        if !chosen {
            // SAFETY: `set_var` is unsound only against a concurrent read
            // of the environment that bypasses std's lock, i.e. C code
            // calling `getenv` in another thread. This runs once, before
            // the first kernel library (the C code this crate runs) is
            // loaded, under the loader's lock; the rest of Spindle reads
            // the environment through std only. Programs that run other C
            // code on other threads call this from `main` first (see above).
            unsafe { std::env::set_var("OMP_WAIT_POLICY", "passive") };
        }
    });
}

/// The number of CPU threads available to this process (at least 1).
pub fn cpu_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The median wall time of `repeats` timed calls of `f` (at least one),
/// after `warmup` untimed calls.
pub fn time_median(repeats: usize, warmup: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..warmup {
        f();
    }
    let mut times: Vec<Duration> = (0..repeats.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort_unstable();
    times[times.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_rewrites_buffers_in_place() {
        let fresh = vec![Buffer::F64(vec![0.0; 1000]), Buffer::I32(vec![1, 2, 3])];
        let mut buffers = fresh.clone();
        let Buffer::F64(out) = &mut buffers[0] else { unreachable!() };
        out[7] = 5.0;
        let before = out.as_ptr();
        buffers.clone_from_slice(&fresh);
        assert_eq!(buffers, fresh);
        let Buffer::F64(out) = &buffers[0] else { unreachable!() };
        assert_eq!(out.as_ptr(), before, "the same memory, not a new allocation");
        // Another kind or length is cloned whole.
        let mut other = Buffer::F32(vec![1.0]);
        other.clone_from(&fresh[1]);
        assert_eq!(other, fresh[1]);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        let mut calls = 0;
        let d = time_median(5, 2, || calls += 1);
        assert_eq!(calls, 7);
        assert!(d < Duration::from_secs(1));
        let mut calls = 0;
        time_median(0, 0, || calls += 1);
        assert_eq!(calls, 1);
    }

    #[test]
    fn index_overflow_is_an_error() {
        let e = Buffer::from_i64(&[0, 1 << 40], IType::I32).unwrap_err();
        assert_eq!(e, RunError::IndexOverflow { position: 1, value: 1 << 40 });
        assert_eq!(Buffer::from_i64(&[3, -1], IType::I64).unwrap(), Buffer::I64(vec![3, -1]));
    }

    #[test]
    fn kinds() {
        assert_eq!(BufferKind::for_dtype(DType::Bf16), BufferKind::F32);
        assert_eq!(BufferKind::for_elem(ElemType::Index(IType::I32)).c_type(), "int32_t");
        assert_eq!(Buffer::zeros(BufferKind::I64, 3).len(), 3);
    }
}
