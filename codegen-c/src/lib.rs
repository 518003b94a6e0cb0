//! `spindle-c`: the C backend.
//!
//! This crate will print the kernel IR from `spindle-ir` as C11 with OpenMP,
//! compile it with the system C compiler (`cc -O3 -march=native -fopenmp
//! -shared`), cache the shared objects by a hash of their source, load them
//! with libloading and run them on CPU buffers. See `DESIGN.md` §5.

pub use spindle_ir as ir;
