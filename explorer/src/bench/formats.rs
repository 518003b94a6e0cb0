//! `spindle bench formats`: conversion speed against sprs.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::{Compressed, Coo, GroupCoo, GroupSize};

use super::{machine, median_seconds};

/// The generated input: 1M non-zeros with power-law row lengths.
const POWER_LAW: &str = "powerlaw:rows=100000,cols=100000,nnz=1000000,seed=1";

pub fn run(repeats: usize, json: bool, record: Option<&Path>) -> Result<()> {
    let mut inputs: Vec<(String, Coo<f32, i32>)> = Vec::new();
    match spindle_formats::data::shared_file("matrices/ca-CondMat.mtx") {
        Some(path) => inputs.push(("ca-CondMat".into(), spindle_formats::io::read_mtx(&path)?)),
        None => eprintln!("(shared data folder not found: skipping ca-CondMat)"),
    }
    let spec: GeneratorSpec = POWER_LAW.parse()?;
    // Shuffle entry order the way files arrive: generators emit sorted COO.
    let generated = shuffled(spec.generate()?);
    inputs.push(("powerlaw-1M".into(), generated));

    let mut rows = Vec::new();
    for (name, coo) in &inputs {
        eprintln!("timing {name} ({} entries, {repeats} repeats)...", coo.nnz());
        rows.push(measure(name, coo, repeats)?);
    }
    let report =
        serde_json::json!({ "suite": "formats", "machine": machine(), "repeats": repeats, "results": rows });
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&rows);
    }
    if let Some(dir) = record {
        std::fs::create_dir_all(dir)?;
        let date = jiff::Zoned::now().strftime("%Y-%m-%d").to_string();
        let path = dir.join(format!("formats-{date}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("recorded {}", path.display());
    }
    Ok(())
}

fn measure(name: &str, coo: &Coo<f32, i32>, repeats: usize) -> Result<serde_json::Value> {
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
    Ok(serde_json::json!({
        "matrix": name,
        "rows": coo.shape[0],
        "cols": coo.shape[1],
        "entries": coo.nnz(),
        "nnz": ours.nnz(),
        "g": grouped.g,
        "sprs_trimat_to_csr_s": t_sprs,
        "coo_to_csr_s": t_csr,
        "coo_to_groupcoo_s": t_group,
        "csr_speedup_vs_sprs": t_sprs / t_csr,
        "groupcoo_over_csr": t_group / t_csr,
    }))
}

fn print_table(rows: &[serde_json::Value]) {
    println!(
        "{:<12} {:>9} {:>4} {:>11} {:>11} {:>13} {:>12} {:>14}",
        "matrix", "nnz", "g", "sprs ms", "csr ms", "groupcoo ms", "csr vs sprs", "groupcoo/csr"
    );
    for r in rows {
        let ms = |k: &str| r[k].as_f64().unwrap_or(f64::NAN) * 1e3;
        println!(
            "{:<12} {:>9} {:>4} {:>11.2} {:>11.2} {:>13.2} {:>11.2}x {:>13.2}x",
            r["matrix"].as_str().unwrap_or("?"),
            r["nnz"],
            r["g"],
            ms("sprs_trimat_to_csr_s"),
            ms("coo_to_csr_s"),
            ms("coo_to_groupcoo_s"),
            r["csr_speedup_vs_sprs"].as_f64().unwrap_or(f64::NAN),
            r["groupcoo_over_csr"].as_f64().unwrap_or(f64::NAN),
        );
    }
    println!("goals: csr vs sprs >= 1.00x; groupcoo/csr <= 2.00x (GroupCOO at g = auto)");
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
