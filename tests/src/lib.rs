//! `spindle-tests`: cross-crate tests.
//!
//! This crate holds the Einsum corpus (`corpus/*.toml`), one snapshot of
//! emitted code per fixture (`tests/snapshots.rs`), and differential tests
//! across backends (`tests/corpus.rs`). Its library part holds only
//! helpers shared by those tests: [`corpus`] loads the entries and makes
//! their data.

pub mod corpus;

pub use spindle_formats::data::shared_data_dir;
