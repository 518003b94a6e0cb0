//! `spindle notebook run FILE.md [--export DIR]`: runs every `spindle`
//! cell of a notebook in order without the TUI, progress on stderr, a
//! summary per cell on stdout; with `--export`, writes
//!
//! ```text
//! DIR/results.json                 notebook, machine, and every cell's output
//! DIR/cell-N/plot.svg, plot.png    the runtime plot of the sweep
//! DIR/cell-N/kernel.c, kernel.cu   the emitted C and CUDA (first sweep point;
//!                                  a program's cell: each point's C)
//! DIR/cell-N/ir.txt                the kernel IR
//! DIR/cell-N/rewritten.txt         the indirect Einsum that runs
//! ```
//!
//! N counts the code cells from 1. The exit code is 1 when the file cannot
//! be read or has no code cells, a cell failed (its error is printed) or a
//! sweep point failed its check.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::engine::{RunOptions, run_cell};
use super::markdown::{CellKind, Notebook};
use super::output::CellOutput;
use super::plot;

#[derive(Debug, clap::Subcommand)]
pub enum NotebookCommand {
    /// Run every `spindle` cell of a notebook headless and print what each
    /// measured; with --export, write plots, emitted code and results.json.
    ///
    /// Example: spindle notebook run examples/notebooks/unstructured-spmm.md --export /tmp/out
    Run {
        /// The notebook: Markdown with fenced `spindle` cells.
        file: PathBuf,
        /// Write DIR/results.json and DIR/cell-N/{plot.svg, plot.png,
        /// kernel.c, kernel.cu, ir.txt, rewritten.txt}.
        #[arg(long, value_name = "DIR")]
        export: Option<PathBuf>,
        /// Timed runs per sweep point (a cell's `repeats N` wins).
        #[arg(long, value_parser = crate::repeats)]
        repeats: Option<usize>,
        /// Threads for the C kernels, 1 to 4096, or 0 for all cores (the
        /// default); a cell's `threads N` wins.
        #[arg(long, value_parser = threads_arg)]
        threads: Option<usize>,
        /// Skip the NVRTC resource report.
        #[arg(long)]
        no_nvrtc: bool,
    },
}

/// `--threads N`: 0 (all cores, as when it is not given) to the most a
/// schedule takes.
fn threads_arg(text: &str) -> Result<usize, String> {
    crate::threads(text, "all cores")
}

pub fn run(command: NotebookCommand) -> Result<()> {
    let NotebookCommand::Run { file, export, repeats, threads, no_nvrtc } = command;
    let notebook = read(&file)?;
    // 0: all cores, as when --threads is not given.
    let threads = threads.filter(|&t| t != 0);
    let options =
        RunOptions { base_dir: file.parent().map(Path::to_path_buf), threads, repeats, skip_nvrtc: no_nvrtc };
    let report = run_notebook(&file, &notebook, &options, export.as_deref())?;
    if report.failed > 0 {
        bail!("{} of {} cells failed", report.failed, report.cells);
    }
    Ok(())
}

/// Reads a notebook to run headless (`spindle notebook run FILE`, and
/// `spindle FILE` without a terminal): the file must be readable, its
/// fences closed, and it must have code to run.
pub fn read(file: &Path) -> Result<Notebook> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    if let Some(line) = Notebook::unclosed_fence(&text) {
        bail!(
            "{}:{line}: this ```spindle fence is never closed, so its cell would not run: end the cell with a line ```",
            file.display()
        );
    }
    let notebook = Notebook::parse(&text);
    let fenced_in = Notebook::fenced_in(&text).map(|(line, block)| {
        format!(
            "{}:{line}: this ```spindle fence is inside the fenced block opened at line {block}, so it is that \
             block's text, not a cell",
            file.display()
        )
    });
    if !has_code(&notebook) {
        match fenced_in {
            Some(why) => bail!("{why}: close the block before the cell"),
            None => {
                // An indented or tilde fence is a code block to Markdown,
                // but a cell only at the start of a line in backticks.
                let near = text.lines().position(|l| {
                    let t = l.trim();
                    (t == "```spindle" && l != t) || t == "~~~spindle"
                });
                let hint = near.map_or(String::new(), |n| {
                    format!(
                        " (line {} is not one: a cell's fence is ```spindle at the start of its line)",
                        n + 1
                    )
                });
                bail!(
                    "{}: the notebook has no code cells to run: write a statement between a line ```spindle and a line \
                     ```{hint}",
                    file.display()
                )
            }
        }
    }
    if let Some(why) = fenced_in {
        eprintln!("note: {why}");
    }
    Ok(notebook)
}

/// Whether some code cell has more than white space.
pub fn has_code(notebook: &Notebook) -> bool {
    notebook.code_cells().any(|(_, c)| !c.source.trim().is_empty())
}

/// What a headless run did.
#[derive(Debug)]
pub struct Report {
    pub cells: usize,
    pub failed: usize,
}

/// One cell in results.json.
#[derive(Serialize)]
struct CellResult<'a> {
    /// The code cell's number, from 1.
    cell: usize,
    /// The file line of the cell's first source line.
    line: usize,
    source: &'a str,
    output: &'a CellOutput,
}

/// Runs the code cells in order; exports when `export` is given.
pub fn run_notebook(
    file: &Path,
    notebook: &Notebook,
    options: &RunOptions,
    export: Option<&Path>,
) -> Result<Report> {
    let lines = first_lines(notebook);
    let code: Vec<(usize, &str)> =
        notebook.code_cells().map(|(i, c)| (lines[i], c.source.as_str())).collect();
    if let Some(dir) = export {
        crate::create_folder(dir, "give --export the path of a folder (made when missing)")
            .context("--export")?;
    }
    let cancel = AtomicBool::new(false);
    let mut outputs = Vec::with_capacity(code.len());
    let mut failed = 0;
    for (n, (line, source)) in code.iter().enumerate() {
        let number = n + 1;
        let mut progress = |p: super::output::Progress| {
            eprintln!("cell {number}/{} [{}/{}] {}", code.len(), p.done + 1, p.total, p.message);
        };
        let output = run_cell(source, options, &mut progress, &cancel);
        let ok = print_summary(file, number, *line, &output);
        if !ok {
            failed += 1;
        }
        if let Some(dir) = export {
            write_cell(&dir.join(format!("cell-{number}")), &output)?;
        }
        outputs.push(output);
    }
    if let Some(dir) = export {
        let cells: Vec<CellResult<'_>> = code
            .iter()
            .zip(&outputs)
            .enumerate()
            .map(|(n, ((line, source), output))| CellResult { cell: n + 1, line: *line, source, output })
            .collect();
        let json = serde_json::json!({
            "notebook": file.display().to_string(),
            "machine": crate::bench::machine(),
            "cells": cells,
            "failed": failed,
        });
        let path = dir.join("results.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(Report { cells: code.len(), failed })
}

/// The file line (from 1) where each cell's text starts (for code cells,
/// the line after the opening fence).
fn first_lines(notebook: &Notebook) -> Vec<usize> {
    let mut line = 1;
    let mut out = Vec::with_capacity(notebook.len());
    for cell in notebook.iter() {
        match cell.kind {
            CellKind::Markdown => {
                out.push(line);
                line += cell.source.matches('\n').count();
            }
            CellKind::Spindle => {
                out.push(line + 1);
                let body = cell.source.matches('\n').count()
                    + usize::from(!cell.source.is_empty() && !cell.source.ends_with('\n'));
                line += body + 2;
            }
        }
    }
    out
}

/// Prints what a cell measured (stdout) or why it failed (stderr); false
/// when it failed or a point failed.
fn print_summary(file: &Path, number: usize, line: usize, out: &CellOutput) -> bool {
    let mut stdout = std::io::stdout().lock();
    let where_ = format!("{} cell {number} (line {line})", file.display());
    if let Some(error) = &out.error {
        eprintln!("{where_}: error\n{error}");
        return false;
    }
    let _ =
        writeln!(stdout, "{where_}: {:.2} s{}", out.seconds, if out.cancelled { " (cancelled)" } else { "" });
    for r in &out.rewritten {
        let _ = writeln!(stdout, "  runs     {r}");
    }
    for f in &out.formats {
        let _ = writeln!(
            stdout,
            "  format   {} = {}: {} bytes, padding {:.1}%, g* {:.2}, smallest F(g) at g = {}",
            f.tensor,
            f.spec,
            f.stats.bytes,
            100.0 * f.stats.padding_ratio,
            f.stats.grouping.g_star,
            f.stats.grouping.g_best
        );
    }
    let params =
        if out.sweep.parameters.is_empty() { "point".to_string() } else { out.sweep.parameters.join(" ") };
    // The workspace column where a point gathered its output in an ISM.
    let bytes = out.sweep.points.iter().any(|p| p.workspace_bytes.is_some());
    let header = if bytes { format!(" {:>14}", "workspace B") } else { String::new() };
    let _ =
        writeln!(stdout, "  {params:<24} {:>8} {:>12} {:>10}{header}", "backend", "median ms", "max error");
    let mut ok = true;
    for p in &out.sweep.points {
        let values = if p.values.is_empty() { "default".to_string() } else { p.values.join(" ") };
        let ms = crate::bench::ms(p.median_ms);
        let err = p.max_rel_error.map_or("-".into(), |e| format!("{e:.1e}"));
        let ws = match (bytes, p.workspace_bytes) {
            (false, _) => String::new(),
            (true, b) => format!(" {:>14}", b.map_or("-".to_string(), |b| b.to_string())),
        };
        let _ = writeln!(stdout, "  {values:<24} {:>8} {ms:>12} {err:>10}{ws}", p.backend);
        if let Some(e) = &p.error {
            ok = false;
            eprintln!("{where_}: point {values} failed\n{e}");
        }
    }
    for b in &out.sweep.baselines {
        let _ = writeln!(stdout, "  {:<24} {:>8} {:>12.4}", b.name, b.backend, b.median_ms);
    }
    for r in &out.resources {
        let _ = writeln!(
            stdout,
            "  nvrtc    {} {}: {} registers, {} B shared, {} B stack, {} B spilled, launch {}",
            r.point, r.arch, r.registers, r.shared_bytes, r.stack_bytes, r.spill_bytes, r.launch
        );
    }
    for note in &out.notes {
        let _ = writeln!(stdout, "  note     {note}");
    }
    ok && !out.cancelled
}

/// Writes one cell's files.
fn write_cell(dir: &Path, out: &CellOutput) -> Result<()> {
    crate::create_folder(dir, "move it away, or give --export another folder")?;
    let write = |name: &str, text: String| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    if out.error.is_some() {
        return write("error.txt", out.error.clone().unwrap_or_default());
    }
    write("kernel.c", join_code(out, &out.c_source, "//"))?;
    write("kernel.cu", join_code(out, &out.cuda_source, "//"))?;
    write("ir.txt", join_code(out, &out.ir, "#"))?;
    write("rewritten.txt", out.rewritten.iter().map(|r| format!("{r}\n")).collect())?;
    if out.sweep.points.iter().any(|p| p.median_ms.is_some()) {
        plot::to_svg(&out.sweep, &dir.join("plot.svg"))?;
        plot::to_png(&out.sweep, &dir.join("plot.png"))?;
    }
    Ok(())
}

/// One text per statement (or program sweep point); several are
/// separated by a comment line that names it.
fn join_code(out: &CellOutput, parts: &[String], comment: &str) -> String {
    if parts.len() == 1 {
        return parts[0].clone();
    }
    parts.iter().enumerate().map(|(i, p)| format!("{comment} {}\n{p}\n", out.code_label(i))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notebook::markdown::Notebook;

    #[test]
    fn cell_lines_count_fences() {
        let nb = Notebook::parse("# T\n\n```spindle\nA = rand 3\nB\n```\ntext\n```spindle\nC\n```\n");
        assert_eq!(first_lines(&nb), [1, 4, 7, 9]);
    }

    #[test]
    fn threads_are_0_for_all_cores_to_4096() {
        assert_eq!(threads_arg("0"), Ok(0));
        assert_eq!(threads_arg("4096"), Ok(4096));
        for bad in ["4097", "-1", "all"] {
            assert!(threads_arg(bad).unwrap_err().contains("or 0 for all cores"), "{bad}");
        }
    }

    #[test]
    fn a_notebook_of_empty_cells_has_no_code() {
        assert!(!has_code(&Notebook::parse("# T\n\n```spindle\n  \n```\n")));
        assert!(has_code(&Notebook::parse("```spindle\n\n```\n```spindle\nx = rand 3\n```\n")));
    }

    #[test]
    fn code_is_joined_per_statement() {
        let out = CellOutput::default();
        assert_eq!(join_code(&out, &["a\n".into()], "//"), "a\n");
        assert_eq!(join_code(&out, &["a".into(), "b".into()], "#"), "# statement 1\na\n# statement 2\nb\n");
        // A program's cell: one per sweep point.
        let out = CellOutput { code_labels: vec!["fusion=none".into(), "fusion=trie".into()], ..out };
        assert_eq!(join_code(&out, &["a".into(), "b".into()], "#"), "# fusion=none\na\n# fusion=trie\nb\n");
    }
}
