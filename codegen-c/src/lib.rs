//! `spindle-c`: the C backend.
//!
//! This crate will print the kernel IR from `spindle-ir` as C11 with OpenMP,
//! compile it with the system C compiler (`cc -O3 -march=native -fopenmp
//! -shared`), cache the shared objects by a hash of their source, load them
//! with libloading and run them on CPU buffers. See `DESIGN.md` §5.
//!
//! What is here so far is the runtime half:
//!
//! - [`compile`]: [`Compiler`] / [`CProgram::compile`] — compile a C source
//!   with `$CC` (default `cc`) and [`C_FLAGS`], cached on disk under
//!   `$SPINDLE_CACHE_DIR` or `<workspace>/target/spindle-cache/c/` by a
//!   stable hash of the source, flags, compiler version and host CPU, then
//!   load the kernel function. A missing compiler or a failed compile is a
//!   [`CompileError`] carrying the compiler output and the `.c` path.
//! - [`runtime`]: [`Buffer`]s (f64, f32, i32, i64; f16/bf16 values travel
//!   as f32), [`CProgram::run`], [`time_median`] and [`cpu_threads`];
//!   [`wait_passively`] makes OpenMP threads sleep rather than spin while
//!   they wait (set before the first kernel is loaded).
//! - [`dialect`]: the printer the C and CUDA backends share (values,
//!   addresses, functions, folds, literals) and the [`Dialect`](dialect::Dialect)
//!   each spells them in; [`namer`] makes user names legal identifiers.
//! - [`print`](mod@print): the kernel IR as C; how programs are shared among threads
//!   (row ownership of sorted scatter targets, one thread for small work)
//!   is described there.
//!
//! Every kernel has the fixed C signature
//! `void NAME(void *const *args, int64_t nthreads)`: one pointer per buffer
//! in the order the printer documents, and the OpenMP thread count. The
//! level printer puts the work in a `static` `NAME_body` taking each buffer
//! as a `restrict` parameter (GCC ignores `restrict` on locals read from
//! `args`), and a threaded level kernel runs a serial copy on one thread
//! (OpenMP's outlined regions lose the parameters' `restrict`).
//!
//! ```
//! use spindle_c::{Buffer, CProgram};
//!
//! let src = r#"
//! #include <stdint.h>
//! void twice(void *const *args, int64_t nthreads) {
//!     float *x = args[0];
//!     const int64_t *n = args[1];
//!     #pragma omp parallel for num_threads(nthreads)
//!     for (int64_t i = 0; i < n[0]; i++) x[i] *= 2.0f;
//! }
//! "#;
//! let kernel = CProgram::compile(src, "twice")?;
//! let mut bufs = [Buffer::F32(vec![1.0, 2.0]), Buffer::I64(vec![2])];
//! kernel.run(&mut bufs, 1)?;
//! assert_eq!(bufs[0].to_f64(), [2.0, 4.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use spindle_ir as ir;

pub mod cache;
pub mod compile;
pub mod dialect;
pub mod exec;
pub mod level;
pub mod namer;
pub mod print;
pub mod runtime;

pub use compile::{C_FLAGS, CProgram, CompileError, Compiler, KernelFn, cache_dir, default_cache_dir};

/// The line both printers open a kernel that runs on one thread with,
/// whatever thread count it is given (too little work to share, or nothing
/// to share it by).
pub const ONE_THREAD: &str = "(void)nthreads;";

/// The threads a printed kernel runs on when given `threads`.
pub fn threads_used(source: &str, threads: usize) -> usize {
    if source.contains(ONE_THREAD) { 1 } else { threads }
}

/// The comment both printers say why a kernel runs on one thread in.
const ONE_THREAD_WHY: &str = "// One thread: ";

/// Why a printed kernel runs on one thread, where it does.
pub fn one_thread_reason(source: &str) -> Option<&str> {
    source.contains(ONE_THREAD).then_some(())?;
    let line = source.lines().find_map(|l| l.trim_start().strip_prefix(ONE_THREAD_WHY))?;
    Some(line.trim_end_matches('.'))
}
pub use runtime::{Buffer, BufferKind, RunError, cpu_threads, time_median, wait_passively};
