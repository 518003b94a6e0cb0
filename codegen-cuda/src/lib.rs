//! `spindle-cuda`: the CUDA backend.
//!
//! - [`mod@print`]: the kernel IR as CUDA C++ — one `extern "C" __global__`
//!   function per kernel, one thread block per program, shared tiles,
//!   Tensor Core `dot`s through WMMA with an FMA fallback, register
//!   accumulators, atomic or plain scatters — with its launch geometry
//!   ([`print::print_kernel`]).
//! - [`nvrtc`]: CUDA C++ to CUBIN through NVRTC, with the registers, shared
//!   memory, stack and spills ptxas reports.
//! - [`emulate`]: printed kernels run on the CPU (C++20 threads standing in
//!   for CUDA threads), to check what they compute where there is no GPU.
//!
//! - [`runtime`]: printed kernels on a GPU through cudarc (dynamic
//!   loading: a machine without a GPU gets an error, never a panic):
//!   upload, launch, event timing, module cache.
//! - [`baseline`]: cuSPARSE SpMM (CSR, BSR) and cuBLAS GEMM, timed the
//!   same way.
//!
//! Autotuning, backend-agnostic, lives in the driver (`spindle::autotune`).

pub use spindle_ir as ir;

pub mod baseline;
pub mod cubin_cache;
pub mod emulate;
pub mod nvrtc;
pub mod print;
pub mod runtime;
pub mod sass;

pub use print::{
    CudaKernel, DotPath, LaunchGeometry, PrintError, PrintOptions, plan_text, print, print_kernel,
};
