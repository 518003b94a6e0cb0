//! `spindle-conv`: sparse convolution through affine subscripts.
//!
//! This crate will own non-empty subsection iteration over level formats
//! (subsect_begin / next / offset / end), sparse convolution in one to three
//! dimensions with strides, and kernel maps for point clouds.
//! See `DESIGN.md` §7.

pub use spindle_ir as ir;
