//! The formats suite: conversion speed against sprs (COO→CSR, and
//! COO→GroupCOO at g = auto), on ca-CondMat (when the shared data folder is
//! present) and a generated 1M-nonzero power-law matrix. No kernel runs, so
//! this suite has no Spindle rows.

use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::{Compressed, Coo, GroupCoo, GroupSize};

use crate::{Machine, machine, median_seconds};

/// The generated input: 1M non-zeros with power-law row lengths.
pub const POWER_LAW: &str = "powerlaw:rows=100000,cols=100000,nnz=1000000,seed=1";

/// The goals the table is read against.
pub const GOALS: &str = "csr vs sprs >= 1.00x; groupcoo/csr <= 2.00x (GroupCOO at g = auto)";

/// What `spindle bench formats` reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FormatsReport {
    /// Always `formats`.
    pub suite: String,
    pub machine: Machine,
    /// Timed repetitions per measurement (the median is reported).
    pub repeats: usize,
    pub results: Vec<FormatsRow>,
}

/// One matrix of the formats suite.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FormatsRow {
    pub matrix: String,
    pub rows: usize,
    pub cols: usize,
    /// Entries as read (duplicates included).
    pub entries: usize,
    /// Non-zeros after summing duplicates.
    pub nnz: usize,
    /// The group size g = auto chose.
    pub g: usize,
    pub sprs_trimat_to_csr_s: f64,
    pub coo_to_csr_s: f64,
    pub coo_to_groupcoo_s: f64,
    /// sprs time / ours (> 1: ours is faster).
    pub csr_speedup_vs_sprs: f64,
    pub groupcoo_over_csr: f64,
}

/// Runs the suite; `progress` gets a line per matrix.
pub fn run(repeats: usize, mut progress: impl FnMut(&str)) -> Result<FormatsReport> {
    let repeats = repeats.max(1);
    let mut inputs: Vec<(String, Coo<f32, i32>)> = Vec::new();
    match spindle_formats::data::shared_file("matrices/ca-CondMat.mtx") {
        Some(path) => inputs.push(("ca-CondMat".into(), spindle_formats::io::read_mtx(&path)?)),
        None => progress("(shared data folder not found: skipping ca-CondMat)"),
    }
    let spec: GeneratorSpec = POWER_LAW.parse()?;
    // Shuffle entry order the way files arrive: generators emit sorted COO.
    inputs.push(("powerlaw-1M".into(), shuffled(spec.generate()?)));

    let mut results = Vec::new();
    for (name, coo) in &inputs {
        progress(&format!("timing {name} ({} entries, {repeats} repeats)...", coo.nnz()));
        results.push(measure(name, coo, repeats)?);
    }
    Ok(FormatsReport { suite: "formats".into(), machine: machine(), repeats, results })
}

fn measure(name: &str, coo: &Coo<f32, i32>, repeats: usize) -> Result<FormatsRow> {
    // Same triplets, same order, for both libraries; copying them in is
    // outside the timed region.
    let trimat = coo.to_trimat()?;
    let ours = Compressed::from_coo(coo, 0)?;
    let theirs = Compressed::from_sprs(&trimat.to_csr::<i32>());
    ensure!(ours.pos == theirs.pos && ours.crd == theirs.crd, "{name}: our CSR structure differs from sprs");
    let max_diff = ours.val.iter().zip(&theirs.val).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    ensure!(max_diff <= 1e-4, "{name}: our CSR values differ from sprs by {max_diff}");

    let t_sprs = median_seconds(repeats, || trimat.to_csr::<i32>());
    let t_csr = median_seconds(repeats, || Compressed::from_coo(coo, 0));
    let grouped = GroupCoo::from_coo(coo, 0, GroupSize::Auto)?;
    let t_group = median_seconds(repeats, || GroupCoo::from_coo(coo, 0, GroupSize::Auto));
    Ok(FormatsRow {
        matrix: name.into(),
        rows: coo.shape[0],
        cols: coo.shape[1],
        entries: coo.nnz(),
        nnz: ours.nnz(),
        g: grouped.g,
        sprs_trimat_to_csr_s: t_sprs,
        coo_to_csr_s: t_csr,
        coo_to_groupcoo_s: t_group,
        csr_speedup_vs_sprs: t_sprs / t_csr,
        groupcoo_over_csr: t_group / t_csr,
    })
}

/// The entries in a seeded random order.
fn shuffled(coo: Coo<f32, i32>) -> Coo<f32, i32> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut order: Vec<usize> = (0..coo.nnz()).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(1));
    let crd = coo.crd.iter().map(|c| order.iter().map(|&k| c[k]).collect()).collect();
    let val = order.iter().map(|&k| coo.val[k]).collect();
    Coo { shape: coo.shape, crd, val }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_round_trips_and_a_small_matrix_measures() {
        let spec: GeneratorSpec = "powerlaw:rows=300,cols=200,nnz=2000,seed=3".parse().unwrap();
        let row = measure("tiny", &shuffled(spec.generate().unwrap()), 1).unwrap();
        assert_eq!((row.rows, row.cols, row.entries), (300, 200, 2000));
        assert!(row.coo_to_csr_s > 0.0 && row.csr_speedup_vs_sprs > 0.0);
        let report =
            FormatsReport { suite: "formats".into(), machine: machine(), repeats: 1, results: vec![row] };
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<FormatsReport>(&text).unwrap(), report);
    }
}
