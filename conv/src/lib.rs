//! `spindle-conv`: sparse convolution through affine subscripts (DESIGN.md
//! §7, paper 002).
//!
//! A statement such as `O[i,j] += I[i+p, j+q] * F[p,q]` with `I` stored
//! sparse reads `I` at affine subscripts. [`lower`] turns it into a loop
//! tree of the level path whose loops over `I` are *non-empty subsection*
//! loops: a variable that reduces a subscript (`i` in `i+p` when `p` is
//! bound later) visits only the values whose window of the level holds an
//! entry. [`subsect`] has the primitives (begin, next, offset, end) over
//! level formats, and [`execute`] runs a lowered kernel in Rust, without a C
//! compiler; the C backend prints the same tree. [`kernel_map`] finds the
//! (output, input, offset) triples of a point cloud's submanifold
//! convolution the same way.

pub mod exec;
pub mod kernel_map;
pub mod lower;
pub mod subsect;

pub use exec::{ExecError, execute};
pub use kernel_map::kernel_map;
pub use lower::{default_order, lower, reads_affine};
pub use spindle_ir as ir;
