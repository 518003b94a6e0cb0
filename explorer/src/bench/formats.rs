//! `spindle bench formats`: conversion speed against sprs.

use std::path::Path;

use anyhow::Result;
use spindle_bench::formats::{FormatsReport, GOALS};

pub fn run(repeats: usize, json: bool, record: Option<&Path>) -> Result<()> {
    let report = spindle_bench::formats::run(repeats, |line| eprintln!("{line}"))?;
    super::finish(&report, json, record, "formats", print_table)
}

fn print_table(report: &FormatsReport) {
    println!(
        "{:<12} {:>9} {:>4} {:>11} {:>11} {:>13} {:>12} {:>14}",
        "matrix", "nnz", "g", "sprs ms", "csr ms", "groupcoo ms", "csr vs sprs", "groupcoo/csr"
    );
    for r in &report.results {
        println!(
            "{:<12} {:>9} {:>4} {:>11.2} {:>11.2} {:>13.2} {:>11.2}x {:>13.2}x",
            r.matrix,
            r.nnz,
            r.g,
            r.sprs_trimat_to_csr_s * 1e3,
            r.coo_to_csr_s * 1e3,
            r.coo_to_groupcoo_s * 1e3,
            r.csr_speedup_vs_sprs,
            r.groupcoo_over_csr,
        );
    }
    println!("goals: {GOALS}");
}
