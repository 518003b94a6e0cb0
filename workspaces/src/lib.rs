//! `spindle-workspaces`: sparse workspaces after the insert-sort-merge (ISM)
//! template.
//!
//! This crate will own the accumulation and all arrays with their policies
//! (Bucket, Hash, Coord, Map, Vector, dense), the workspace insertion
//! analysis, and the sparse-output kernels (SpGEMM, SpMTTKRP, SpTTM).
//! See `DESIGN.md` §6.

pub use spindle_ir as ir;
