//! `spindle-formats`: sparse tensor formats for Spindle.
//!
//! Level formats and concrete formats (Dense, COO, CSR, CSC, DCSR, DCSC, CSF,
//! ELL, BCSR, GroupCOO, BlockGroupCOO), conversion between all of them,
//! Matrix Market / FROSTT / `.npy` I/O, statistics (padding, occupancy,
//! bytes, F(g), g*) and seeded generators. See `DESIGN.md` §4.

pub mod coo;
pub mod data;
pub mod error;
pub mod generate;
pub mod io;
pub mod scalar;

pub use coo::Coo;
pub use error::{FormatError, Result};
pub use scalar::{DType, IType, Index, Value, narrow};
