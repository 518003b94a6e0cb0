//! The Einsum language: syntax tree, parser, checker and diagnostics.

pub mod ast;
pub mod check;
pub mod diagnostic;
pub mod einsum;
pub mod lexer;
pub mod parser;

pub use ast::*;
pub use check::{
    check, check_subscript_reach, declare_output, operand_mistake, output_dtype, output_shape_unknown,
};
pub use diagnostic::Diagnostic;
pub use einsum::*;
pub use parser::parse;
