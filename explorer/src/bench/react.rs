//! `spindle bench react`: arguments and tables of the ReACT suite
//! (`spindle_bench::react`).

use std::path::PathBuf;

use anyhow::Result;
use spindle_bench::react::{FUSIONS, ReactOptions, ReactReport};

#[derive(Debug, clap::Args)]
pub struct ReactArgs {
    /// Rounds, in which every policy takes a turn (a warm-up launch, then a
    /// batch of timed ones): a policy's time is the median over the rounds,
    /// a ratio between two the median of their rounds' ratios.
    #[arg(long, default_value_t = 9, value_parser = crate::repeats)]
    pub repeats: usize,
    /// Only these inputs (file stems such as `cora` or `med`).
    #[arg(long = "input", value_name = "NAME")]
    pub inputs: Vec<String>,
    /// Only these kernels.
    #[arg(long = "kernel", value_name = "NAME", value_parser = ["sddmm", "gnn1", "gnn2", "mttkrp"])]
    pub kernels: Vec<String>,
    /// Skip SciPy (otherwise installed on first use into
    /// target/python-baselines).
    #[arg(long)]
    pub no_python: bool,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this folder as `react-<date>.json`.
    #[arg(long)]
    pub record: Option<PathBuf>,
}

pub fn run(args: ReactArgs) -> Result<()> {
    let opts = ReactOptions {
        timing: spindle::TimingOptions { warmup: 1, repeats: args.repeats.max(1) },
        python: !args.no_python,
        filter: args.inputs,
        kernels: args.kernels,
    };
    let report = spindle_bench::react::run(&opts, &mut |line| eprintln!("{line}"))?;
    super::finish(&report, args.json, args.record.as_deref(), "react", print_tables)
}

fn print_tables(report: &ReactReport) {
    println!(
        "ReACT kernels, f64, one thread, medians of {} rounds (ms; ratios: medians of the rounds' ratios)",
        report.repeats
    );
    print!("{:<8} {:<24} {:>7}", "kernel", "input", "size");
    for f in FUSIONS {
        print!(" {:>10}", f);
    }
    println!(" {:>10} {:>9} {:>9} {:>9}", "scipy", "max/trie", "trie/none", "agree");
    for r in &report.runs {
        let ms = |f: &str| r.policies.iter().find(|p| p.fusion == f).map_or(f64::NAN, |p| p.timing.median_ms);
        print!("{:<8} {:<24} {:>7}", r.kernel, r.input, format!("{}={}", r.size_name, r.size));
        for f in FUSIONS {
            print!(" {:>10}", super::ms(Some(ms(f))));
        }
        let scipy = super::ms(r.scipy_ms);
        println!(
            " {scipy:>10} {:>9.2} {:>9.2} {:>9.1e}",
            r.ratio("maximal", "trie"),
            r.ratio("trie", "none"),
            r.max_rel_error_between_policies
        );
    }
    let s = &report.summary;
    println!();
    if let Some(g) = s.sddmm_trie_over_maximal {
        println!("SDDMM maximal/trie (geomean): {g:.2}x (goal >= 1.5x)");
    }
    for (nh, g) in &s.gnn1_trie_over_maximal_by_nh {
        println!("GNN kernel 1 maximal/trie at NH={nh} (geomean): {g:.1}x");
    }
    for (nj, g, work) in &s.gnn1_trie_over_maximal_by_nj {
        println!("GNN kernel 1 maximal/trie at NJ={nj}, NH=128 (geomean): {g:.1}x (by work: {work:.1}x)");
    }
    if let Some((at, r)) = &s.worst_trie_over_none {
        println!("worst trie/none: {r:.3} ({at}) (goal <= 1.05)");
    }
    for (k, g) in &s.scipy_over_trie {
        println!("{k}: SciPy/trie (geomean) {g:.2}x");
    }
}
