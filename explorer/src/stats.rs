//! `spindle stats`: the statistics of a tensor in a format, as a table or
//! JSON.

use std::fmt::Write as _;

use anyhow::Result;
use spindle_formats::{FormatSpec, Index, SparseTensor, Stats, Value};

use crate::input::load;
use crate::{Types, with_types};

pub fn run(input: &str, format: &str, json: bool, types: &Types) -> Result<()> {
    let spec: FormatSpec = format.parse()?;
    with_types!(types, print_stats(input, &spec, json))
}

fn print_stats<V: Value, I: Index>(input: &str, spec: &FormatSpec, json: bool) -> Result<()> {
    let loaded = load::<V, I>(input)?;
    let stats = SparseTensor::stats_of(&loaded.coo, spec)?;
    if json {
        let mut value = serde_json::to_value(&stats)?;
        value["input"] = loaded.name.clone().into();
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", render(&loaded.name, spec, &stats));
        println!("  (read in {:.1} ms)", loaded.seconds * 1e3);
    }
    Ok(())
}

/// The human-readable report.
pub fn render(name: &str, requested: &FormatSpec, s: &Stats) -> String {
    let mut out = String::new();
    let shape: Vec<String> = s.shape.iter().map(|d| d.to_string()).collect();
    let requested = requested.to_string();
    let format =
        if requested == s.format { requested } else { format!("{} (asked for {requested})", s.format) };
    let _ = writeln!(out, "{name}");
    let _ = writeln!(out, "  format      {format}");
    let _ = writeln!(out, "  shape       {}", shape.join(" x "));
    let _ = writeln!(out, "  nnz         {}", s.nnz);
    let _ = writeln!(out, "  stored      {}  (padding {:.1}%)", s.stored, 100.0 * s.padding_ratio);
    let arrays: Vec<String> =
        s.arrays.iter().map(|a| format!("{} {}x{} {}B", a.name, a.len, a.dtype, a.bytes)).collect();
    let _ = writeln!(out, "  bytes       {}  ({})", s.bytes, arrays.join(", "));
    let o = &s.occupancy;
    let _ = writeln!(
        out,
        "  occupancy   min {}  median {}  mean {:.2}  max {}  ({} per slice of dim {})",
        o.min, o.median, o.mean, o.max, s.group_unit, s.group_dim
    );
    let hist: Vec<String> = o
        .histogram
        .iter()
        .map(|b| {
            if b.lo == b.hi {
                format!("{}: {}", b.lo, b.count)
            } else {
                format!("{}-{}: {}", b.lo, b.hi, b.count)
            }
        })
        .collect();
    let _ = writeln!(out, "  histogram   {}", hist.join("  "));
    let g = &s.grouping;
    if g.n == 0 {
        // (g* = sqrt(S / n) has no rows to average over.)
        let _ = writeln!(out, "  g*          none: no entries to group");
        return out;
    }
    let _ = writeln!(
        out,
        "  g*          {:.2} = sqrt({} / {})  -> powers of two {} and {}; smallest F(g) at g = {}",
        g.g_star, g.s, g.n, g.g_star_pow2[0], g.g_star_pow2[1], g.g_best
    );
    let _ = writeln!(out, "  {:>6}  {:>14}  {:>9}", "g", "F(g)", "padding");
    for (gv, f) in &g.f_of_g {
        let mark = match (*gv == g.g_best, g.g_star_pow2.contains(gv)) {
            (true, true) => "  <- g*, smallest F",
            (true, false) => "  <- smallest F",
            (false, true) => "  <- g*",
            (false, false) => "",
        };
        let _ = writeln!(out, "  {:>6}  {:>14}  {:>8.1}%{mark}", gv, f, 100.0 * g.padding_of_g[gv]);
    }
    out
}
