//! The notebook explorer's engine: notebooks as Markdown files, the cell
//! language, running a cell (data, rewrite, kernels, sweeps, baselines),
//! plots, and the headless `spindle notebook run`. The TUI (`crate::tui`)
//! shows what [`engine::run_cell`] returns ([`output::CellOutput`]).

pub mod cell;
pub mod engine;
pub mod headless;
pub mod markdown;
pub mod output;
pub mod plot;
