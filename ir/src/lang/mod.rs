//! The Einsum language: syntax tree, parser, checker and diagnostics.

pub mod ast;
pub mod diagnostic;
pub mod einsum;

pub use ast::*;
pub use diagnostic::Diagnostic;
pub use einsum::*;
