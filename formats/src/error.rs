//! Errors of the formats crate. Every failure on user input is one of these,
//! never a panic.

use std::path::PathBuf;

use crate::scalar::IType;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{value} does not fit in an {} index", itype.name())]
    IndexOverflow { value: usize, itype: IType },

    #[error("coordinate {coord:?} is outside the shape {shape:?}")]
    OutOfBounds { coord: Vec<usize>, shape: Vec<usize> },

    #[error("{format} needs a tensor of order {expected}, got order {got}")]
    Order { format: String, expected: usize, got: usize },

    #[error("invalid {what}: {reason}")]
    Invalid { what: String, reason: String },

    #[error("{path}:{line}: {message}")]
    Parse { path: PathBuf, line: usize, message: String },

    /// The reason is in the message, not a source: an error chain
    /// printed with its causes would say it twice.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
}

impl FormatError {
    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        FormatError::Invalid { what: what.into(), reason: reason.into() }
    }
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;

/// The largest array a format may allocate, in bytes (4 GiB). Formats check
/// their array sizes against it before allocating, so a huge group size,
/// block shape or declared extent is an error instead of an abort.
pub const MAX_ARRAY_BYTES: usize = 1 << 32;

/// Checks that an array of `count` elements of `T` (`None` when the count
/// itself overflowed) stays within [`MAX_ARRAY_BYTES`]; returns the count.
pub fn check_array<T>(what: &str, count: Option<usize>) -> Result<usize> {
    let size = std::mem::size_of::<T>().max(1);
    match count {
        Some(n) if n.checked_mul(size).is_some_and(|b| b <= MAX_ARRAY_BYTES) => Ok(n),
        _ => Err(FormatError::invalid(
            what,
            format!(
                "{} elements of {} ({size} bytes each) exceed the {} GiB limit on one array",
                count.map_or("more than usize::MAX".to_string(), |n| n.to_string()),
                std::any::type_name::<T>(),
                MAX_ARRAY_BYTES >> 30
            ),
        )),
    }
}
