//! `spindle-formats`: sparse tensor formats for Spindle.
//!
//! Level formats and concrete formats (Dense, COO, CSR, CSC, DCSR, DCSC, CSF,
//! ELL, BCSR, GroupCOO, BlockGroupCOO, and d/c level lists such as `dddc`),
//! conversion between all of them,
//! Matrix Market / FROSTT / `.npy` I/O, statistics (padding, occupancy,
//! bytes, F(g), g*) and seeded generators. See `DESIGN.md` §4.
//!
//! ```
//! use spindle_formats::{Coo, FormatSpec, SparseTensor};
//!
//! // Insum Figure 4: row occupancies 3, 1, 1, 2.
//! let a = Coo::<f32, i32>::from_triplets(4, 4, &[
//!     (0, 0, 1.0), (0, 1, 2.0), (0, 3, 3.0), (1, 2, 4.0), (2, 0, 5.0), (3, 1, 6.0), (3, 3, 7.0),
//! ])?;
//! let grouped = SparseTensor::from_coo(&a, &"groupcoo:dim=0,g=2".parse()?)?;
//! let SparseTensor::GroupCoo(g) = &grouped else { unreachable!() };
//! assert_eq!(g.grp, [0, 0, 1, 2, 3]);
//! assert_eq!(grouped.stats()?.grouping.f_of_g[&2], 15); // (2+1)·(2+1+1+1)
//! assert_eq!(grouped.convert(&FormatSpec::Csr)?.to_coo()?, a);
//! # Ok::<(), spindle_formats::FormatError>(())
//! ```

pub mod assembled;
pub mod block;
pub mod compressed;
pub mod coo;
pub mod csf;
pub mod data;
pub mod dense;
pub mod ell;
pub mod error;
pub mod generate;
pub mod group;
pub mod interop;
pub mod io;
pub mod level;
pub mod levels;
pub mod scalar;
pub mod spec;
pub mod stats;
pub mod tensor;

pub use assembled::{Assembled, AssembledLevel};
pub use block::{Bcsr, BlockGroupCoo};
pub use compressed::{Compressed, DoublyCompressed};
pub use coo::Coo;
pub use csf::Csf;
pub use dense::Dense;
pub use ell::Ell;
pub use error::{FormatError, MAX_ARRAY_BYTES, Result, check_array};
pub use group::GroupCoo;
pub use level::{Children, DimPart, Level, LevelArrays, LevelCapabilities, LevelFormat};
pub use levels::LevelTensor;
pub use scalar::{DType, IType, Index, Value, narrow};
pub use spec::{FormatSpec, GroupSize};
pub use stats::Stats;
pub use tensor::SparseTensor;
