//! Spindle as a library: a statement, its data and formats become a kernel
//! on a backend, which runs, is checked against the reference evaluator and
//! is timed. The command line, the notebook, the benchmarks and the corpus
//! runner all go through this crate, so a Rust user gets what they show.
//!
//! SpMM with A in GroupCOO, on the C backend, checked and timed:
//!
//! ```
//! use spindle::{CBackend, Input, Problem, Schedule, TimingOptions};
//! use spindle_formats::DType;
//!
//! let prepared = Problem::new("C[m,n] += A[m,k] * B[k,n]")
//!     .tensor("A", Input::random(&[64, 48], DType::F32, 1))
//!     .tensor("B", Input::random(&[48, 16], DType::F32, 2))
//!     .format("A", "groupcoo:dim=0,g=4")
//!     .prepare()?;
//! // The statement that runs, over the format's arrays.
//! assert_eq!(prepared.text, "C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]");
//!
//! let backend = CBackend::new();
//! let schedule: Schedule = "tile.p=4 tile.q=4 tile.n=16".parse()?;
//! let kernel = prepared.compile(&backend, &schedule)?;
//! let (output, check) = kernel.check()?;
//! assert_eq!(output.shape(), [64, 16]);
//! assert!(check.passed(), "max relative error {}", check.max_rel_error);
//!
//! let timing = kernel.time(TimingOptions { warmup: 1, repeats: 5 })?;
//! assert!(timing.min_ms <= timing.median_ms && timing.median_ms <= timing.max_ms);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The indirect form runs as written; without a schedule the driver's
//! autotuner picks one (here kept in memory; [`Tuner::for_target`] caches
//! the winner on disk per statement, shapes and device):
//!
//! ```
//! use spindle::{CBackend, Input, Problem, Tuner};
//! use spindle_formats::{DType, IType};
//!
//! let prepared = Problem::new("C[AM[p],n] += AV[p] * B[AK[p],n]")
//!     .tensor("AM", Input::random_indices(&[200], IType::I32, 1, 32))
//!     .tensor("AK", Input::random_indices(&[200], IType::I32, 2, 24))
//!     .tensor("AV", Input::random(&[200], DType::F32, 3))
//!     .tensor("B", Input::random(&[24, 8], DType::F32, 4))
//!     .tensor("C", Input::shape(&[32, 8], spindle::ElemType::Value(DType::F32)))
//!     .prepare()?;
//! let kernel = prepared.autotune(&CBackend::new(), &mut Tuner::in_memory())?;
//! let tuned = kernel.tuned.as_ref().expect("searched");
//! assert!(tuned.tried.len() >= 2);
//! assert!(kernel.check()?.1.passed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A schedule sweep: every point lowered, compiled, checked and timed.
//!
//! ```
//! use spindle::{CBackend, Problem, Input, TimingOptions};
//! use spindle_formats::DType;
//!
//! let prepared = Problem::new("y[i] = A[i,j] * x[j]")
//!     .tensor("A", Input::random(&[128, 96], DType::F32, 1))
//!     .tensor("x", Input::random(&[96], DType::F32, 2))
//!     .format("A", "csr")
//!     .prepare()?;
//! let backend = CBackend::new();
//! for tile in [1, 4, 16] {
//!     let kernel = prepared.compile(&backend, &format!("tile.p={tile} threads=1").parse()?)?;
//!     assert!(kernel.check()?.1.passed());
//!     let t = kernel.time(TimingOptions { warmup: 1, repeats: 3 })?;
//!     println!("tile.p={tile}: {:.4} ms", t.median_ms);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Mistakes in a statement come back with the span they point at, drawn
//! with a caret by [`Error::render`]:
//!
//! ```
//! use spindle::{Input, Problem};
//! use spindle_formats::DType;
//!
//! let err = Problem::new("C[m,n] += A[m,k] * B[n,k]")
//!     .tensor("A", Input::random(&[4, 3], DType::F32, 1))
//!     .tensor("B", Input::random(&[3, 2], DType::F32, 2))
//!     .prepare()
//!     .unwrap_err();
//! assert!(err.render(false).contains("extent"), "{}", err.render(false));
//! ```

mod advice;
pub mod autotune;
pub mod backend;
pub mod check;
mod compiled;
pub mod error;
pub mod hugepages;
pub mod input;
mod problem;
mod program;
mod source;
pub mod target;
pub mod timing;

pub use backend::{Backend, CBackend, CompileReport, CudaBackend, EmulateBackend, Executable, Uploaded};
pub use check::Check;
pub use compiled::{Compiled, Lowering, Tuner};
pub use error::{Error, Result};
pub use input::Input;
pub use problem::{Evaluation, MAX_DENSE_ELEMENTS, Prepared, Problem, Stored};
pub use program::ProgramRun;
pub use source::{CudaReport, cuda_plan, cuda_report, cuda_sass, print, print_levels, print_levels_cuda};
pub use spindle_ir::kernel::schedule::Schedule;
pub use spindle_ir::lang::ElemType;
pub use target::Target;
pub use timing::{Timing, TimingOptions};

pub use spindle_c as c;
pub use spindle_cuda as cuda;
pub use spindle_formats as formats;
pub use spindle_ir as ir;

/// A backend for `target`: C always; CUDA when a GPU and its driver are
/// there (otherwise an error saying why not); the emulation when a C++
/// compiler is.
pub fn backend(target: Target) -> Result<Box<dyn Backend>> {
    Ok(match target {
        Target::C => Box::new(CBackend::new()),
        Target::Cuda => Box::new(CudaBackend::open()?),
        Target::Emulate => Box::new(EmulateBackend::from_env()),
    })
}
