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

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl FormatError {
    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        FormatError::Invalid { what: what.into(), reason: reason.into() }
    }
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;
