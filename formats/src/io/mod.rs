//! File formats: Matrix Market, FROSTT `.tns` and `.npy`.
//!
//! Text readers come in two forms: `read_*` opens a path, `parse_*` reads any
//! [`BufRead`](std::io::BufRead) and uses its name argument only in error
//! messages. Sparse readers return entries in file order, 0-based, not
//! canonicalized: call [`Coo::canonicalize`] to sort and sum duplicates.
//! Point clouds (`.xyz`) are read here too.

pub mod mtx;
pub mod npy;
mod text;
pub mod tns;
pub mod xyz;

use std::path::Path;

pub use mtx::{parse_mtx, read_mtx, write_mtx, write_mtx_to};
pub use npy::{
    NpyElement, npy_holds_bool, npy_holds_integers, npy_value_dtype, read_npy_dense, read_npy_index,
    write_npy, write_npy_indices, write_npy_values,
};
pub use tns::{parse_tns, read_tns, write_tns, write_tns_to};
pub use xyz::{parse_xyz, read_xyz};

use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

/// Reads a sparse tensor, choosing the reader by extension (case
/// insensitive): `.mtx` is Matrix Market, `.tns` is FROSTT.
pub fn read_tensor<V: Value, I: Index>(path: &Path) -> Result<Coo<V, I>> {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("mtx") => read_mtx(path),
        Some("tns") => read_tns(path),
        _ => Err(FormatError::invalid(
            "tensor file",
            format!(
                "{}: unsupported extension; expected .mtx (Matrix Market) or .tns (FROSTT)",
                path.display()
            ),
        )),
    }
}
