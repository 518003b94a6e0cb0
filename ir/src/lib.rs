//! `spindle-ir`: the middle of the compiler.
//!
//! This crate will own the Einsum language (parsing with spans, checking,
//! caret diagnostics), the reference evaluator that every test compares
//! against, the format-conscious rewrite from a format-agnostic Einsum plus
//! formats into an indirect Einsum, schedules, and the tile-level kernel IR
//! with its passes (native matmul, lazy broadcasting, reduction strategies,
//! ReACT fusion, affine lowering). See `DESIGN.md` §3 and §5.
//!
//! Today it only re-exports the formats it will rewrite over.

pub use spindle_formats as formats;
