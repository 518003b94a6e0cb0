//! `spindle-tests`: cross-crate tests.
//!
//! This crate will hold the Einsum corpus (`corpus/*.toml`), one snapshot
//! of emitted code per fixture, and differential tests across backends.
//! Its library part holds only helpers shared by those tests.

pub use spindle_formats::data::shared_data_dir;
