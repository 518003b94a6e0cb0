//! `spindle-ir`: the middle of the compiler.
//!
//! - [`lang`]: the Einsum language — parsing with spans, checking, caret
//!   diagnostics (DESIGN.md §3).
//! - [`eval`]: the reference evaluator every test compares against.
//! - [`rewrite`]: the format-conscious rewrite of a format-agnostic Einsum
//!   plus formats into an indirect Einsum over the formats' arrays (§5).
//! - [`program`]: programs of several statements, split into three-address
//!   form with inferred temporaries (the input of ReACT fusion).
//! - [`react`]: ReACT's index trees, dependence graph, sparse
//!   iteration-space propagation and trie-like fusion over a program.
//!
//! Still to come here: schedules and the tile-level kernel IR with its
//! passes (native matmul, lazy broadcasting, reduction strategies, ReACT
//! fusion, affine lowering).

pub mod eval;
pub mod hash;
pub mod kernel;
pub mod lang;
pub mod level;
pub mod names;
pub mod program;
pub mod react;
pub mod rewrite;
pub mod tensor;

pub use spindle_formats as formats;
