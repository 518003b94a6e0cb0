//! One error type for the whole pipeline. A mistake in the statement keeps
//! its span and the text it points into, so every front end can draw the
//! caret the same way.

use spindle_ir::lang::Diagnostic;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A mistake in the statement (or the rewritten statement it became).
    #[error("{}", .diagnostic.message)]
    Statement {
        diagnostic: Box<Diagnostic>,
        /// The statement text the diagnostic's spans point into.
        text: String,
    },
    /// The output has no data or shape, and the right-hand side does not
    /// give it one (a front end says how to give it).
    #[error(
        "the shape of the output `{name}` cannot be worked out from the right-hand side: give it a shape"
    )]
    OutputShape {
        name: String,
        /// Where and why ([`spindle_ir::lang::output_shape_unknown`]).
        diagnostic: Box<Diagnostic>,
        /// The statement text the diagnostic's span points into.
        text: String,
    },
    /// An argument, file or piece of data the pipeline cannot use.
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Format(#[from] spindle_formats::FormatError),
    #[error(transparent)]
    Schedule(#[from] spindle_ir::kernel::schedule::ScheduleError),
    /// Printing, compiling or running on the C backend.
    #[error(transparent)]
    C(#[from] spindle_c::exec::BackendError),
    /// Printing, compiling or running on a GPU (or its CPU emulation).
    #[error(transparent)]
    Cuda(#[from] spindle_cuda::runtime::RuntimeError),
    #[error(transparent)]
    Emulate(#[from] spindle_cuda::emulate::EmulateError),
    #[error(transparent)]
    CudaPrint(#[from] spindle_cuda::print::PrintError),
    /// Compiling CUDA C with NVRTC, without a GPU.
    #[error(transparent)]
    Nvrtc(#[from] spindle_cuda::nvrtc::CompileError),
    /// Reading a compiled kernel's machine code.
    #[error(transparent)]
    Sass(#[from] spindle_cuda::sass::SassError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn statement(diagnostic: Diagnostic, text: &str) -> Error {
        Error::Statement { diagnostic: Box::new(diagnostic), text: text.to_string() }
    }

    pub(crate) fn input(message: impl Into<String>) -> Error {
        Error::Input(message.into())
    }

    /// The error as a terminal shows it: a statement error with its excerpt
    /// and caret (ANSI colours when `color`), anything else on one line.
    pub fn render(&self, color: bool) -> String {
        match self {
            Error::Statement { diagnostic, text } | Error::OutputShape { diagnostic, text, .. } => {
                diagnostic.render(text, color)
            }
            other => format!("error: {other}\n"),
        }
    }

    /// Whether this is the refusal of a loop order that resolves a stored
    /// operand's level before the level above it (a convolution's order
    /// that its formats do not allow).
    pub fn is_out_of_storage_order(&self) -> bool {
        matches!(self, Error::Statement { diagnostic, .. } if diagnostic.label == spindle_conv::lower::RESOLVED_EARLY)
    }

    /// Adds what was being done to an input error's message.
    pub(crate) fn context(self, what: &str) -> Error {
        match self {
            Error::Input(m) => Error::Input(format!("{what}: {m}")),
            Error::Format(e) => Error::Input(format!("{what}: {e}")),
            other => other,
        }
    }
}
