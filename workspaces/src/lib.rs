//! `spindle-workspaces`: sparse workspaces after the insert-sort-merge (ISM)
//! template of paper 001 (DESIGN.md §6).
//!
//! - [`ism`]: the library, usable alone — labels of coordinates of any
//!   order, the accumulation array as a trait with the paper's policies
//!   (Bucket, Hash, Coord; the Map and Vector extremes; the dense
//!   workspace), the all array merged into (double-buffered or not), the
//!   accumulation array's piecewise-linear growth, compression into an
//!   output format, the sort and merge pipelined on a second thread
//!   ([`ism::Pipelined`]) and a parallel ISM whose per-thread workspaces are
//!   merged in pairs ([`ism::parallel`]).
//! - [`insert`]: the automatic insertion analysis (where a workspace goes,
//!   of which order, read back in which order), which the level path's
//!   lowering runs on its loop orders.
//! - [`runtime`]: the same policies and switches as a C header that printed
//!   kernels call.
//!
//! A second-order workspace of a sparse output, deduplicated as it goes:
//!
//! ```
//! use spindle_formats::FormatSpec;
//! use spindle_workspaces::ism::{Bucket, Ism, Labels, Options, compress};
//!
//! let labels = Labels::new(&[4, 5])?;
//! let mut ws = Ism::new(labels.clone(), Bucket::new(labels.clone(), 2), Options::default());
//! for (i, j, v) in [(3, 1, 1.0), (0, 4, 2.0), (3, 1, 3.0), (1, 0, -1.0)] {
//!     ws.insert(&[i, j], v);
//! }
//! let all = ws.finish();
//! let csr = compress(&labels, &all, &FormatSpec::Csr)?;
//! let coo = csr.to_coo()?;
//! assert_eq!(coo.crd, [vec![0, 1, 3], vec![4, 0, 1]]);
//! assert_eq!(coo.val, [2.0, -1.0, 4.0]);
//! # Ok::<(), spindle_formats::FormatError>(())
//! ```

pub mod insert;
pub mod ism;
pub mod runtime;
