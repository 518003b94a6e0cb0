//! `spindle-cuda`: the CUDA backend.
//!
//! This crate will print the kernel IR as CUDA C (one `__global__` per fused
//! kernel, Tensor Core `dot`s, atomic or segment scatters), compile it with
//! NVRTC, report registers, shared memory and spills, and launch it through
//! cudarc, with cuSPARSE / cuBLAS baselines. See `DESIGN.md` §5.

pub use spindle_ir as ir;

pub mod nvrtc;
