//! Notebooks as Markdown files: every fenced block opened by a line
//! ```` ```spindle ```` and closed by a line ```` ``` ```` is a code cell; the
//! text between code cells is kept, byte for byte, as Markdown cells. So a
//! notebook diffs well, renders on any forge, and an unedited notebook
//! saves back to the same bytes.
//!
//! What a save normalises: a closing fence that ends the file without a
//! newline gets one, and a code cell whose last line has no newline gets
//! one (the fence must start a line). A fence opened but never closed is
//! not a cell: its text stays Markdown.

use std::ops::{Deref, DerefMut};
use std::path::Path;

use anyhow::{Context, Result};

/// What a cell holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellKind {
    /// Text shown as it is.
    Markdown,
    /// A `spindle` code cell (the cell language of [`super::cell`]).
    Spindle,
}

/// One cell: Markdown text, or the source of a code cell without its
/// fences (each line with its newline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    pub kind: CellKind,
    pub source: String,
}

impl Cell {
    pub fn markdown(source: impl Into<String>) -> Cell {
        Cell { kind: CellKind::Markdown, source: source.into() }
    }

    pub fn spindle(source: impl Into<String>) -> Cell {
        Cell { kind: CellKind::Spindle, source: source.into() }
    }
}

/// The cells of a notebook in file order. Derefs to `Vec<Cell>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Notebook {
    pub cells: Vec<Cell>,
}

impl Deref for Notebook {
    type Target = Vec<Cell>;

    fn deref(&self) -> &Vec<Cell> {
        &self.cells
    }
}

impl DerefMut for Notebook {
    fn deref_mut(&mut self) -> &mut Vec<Cell> {
        &mut self.cells
    }
}

impl From<Vec<Cell>> for Notebook {
    fn from(cells: Vec<Cell>) -> Notebook {
        Notebook { cells }
    }
}

/// The opening fence of a code cell.
pub const OPEN: &str = "```spindle";
/// The closing fence.
pub const CLOSE: &str = "```";

/// A line without its line ending (`\n` or `\r\n`).
fn bare(line: &str) -> &str {
    let line = line.strip_suffix('\n').unwrap_or(line);
    line.strip_suffix('\r').unwrap_or(line)
}

/// The fence a line opens or closes, as CommonMark reads one: up to three
/// spaces, then three or more backticks or tildes (its character and
/// length), then the info string, which after backticks holds none.
fn fence(line: &str) -> Option<(char, usize, &str)> {
    let line = bare(line);
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let c = rest.chars().next().filter(|c| (*c == '`' || *c == '~') && indent <= 3)?;
    let run = rest.len() - rest.trim_start_matches(c).len();
    let info = &rest[run..];
    (run >= 3 && !(c == '`' && info.contains('`'))).then_some((c, run, info))
}

/// Where line `i` opens a fenced block other than a code cell (```` ```rust ````,
/// or four backticks around an example notebook) that a later line
/// closes, the line after that one: its lines are Markdown, fences of
/// cells inside it included. A fence never closed is not taken for a
/// block (CommonMark would run it to the end of the text): a stray one
/// would swallow every cell after it.
fn past_other_block(lines: &[&str], i: usize) -> Option<usize> {
    if bare(lines[i]) == OPEN {
        return None;
    }
    let (c, run, _) = fence(lines[i])?;
    let closes = |l: &&str| fence(l).is_some_and(|(d, n, info)| d == c && n >= run && info.trim().is_empty());
    lines[i + 1..].iter().position(closes).map(|len| i + len + 2)
}

/// Where line `i` opens a code cell that a later line closes, the number
/// of lines of its source (between the fences).
fn cell_at(lines: &[&str], i: usize) -> Option<usize> {
    if bare(lines[i]) != OPEN {
        return None;
    }
    lines[i + 1..].iter().position(|l| bare(l) == CLOSE)
}

impl Notebook {
    /// Splits Markdown text into cells.
    pub fn parse(text: &str) -> Notebook {
        let mut cells = Vec::new();
        let mut markdown = String::new();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let mut i = 0;
        while i < lines.len() {
            if let Some(next) = past_other_block(&lines, i) {
                markdown.push_str(&lines[i..next].concat());
                i = next;
                continue;
            }
            if let Some(len) = cell_at(&lines, i) {
                if !markdown.is_empty() {
                    cells.push(Cell::markdown(std::mem::take(&mut markdown)));
                }
                cells.push(Cell::spindle(lines[i + 1..i + 1 + len].concat()));
                i += len + 2;
                continue;
            }
            markdown.push_str(lines[i]);
            i += 1;
        }
        if !markdown.is_empty() {
            cells.push(Cell::markdown(markdown));
        }
        Notebook { cells }
    }

    /// The line (from 1) of the first ```` ```spindle ```` fence that no
    /// ```` ``` ```` line closes: [`Notebook::parse`] keeps it as Markdown
    /// text, so its cell never runs.
    pub fn unclosed_fence(text: &str) -> Option<usize> {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let mut i = 0;
        while i < lines.len() {
            if let Some(next) = past_other_block(&lines, i) {
                i = next;
                continue;
            }
            if let Some(len) = cell_at(&lines, i) {
                i += len + 2;
                continue;
            }
            if bare(lines[i]) == OPEN {
                return Some(i + 1);
            }
            i += 1;
        }
        None
    }

    /// The first ```` ```spindle ```` line inside another fenced block (its line
    /// and the block's, from 1): Markdown, so its cell never runs.
    pub fn fenced_in(text: &str) -> Option<(usize, usize)> {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let mut i = 0;
        while i < lines.len() {
            if let Some(next) = past_other_block(&lines, i) {
                if let Some(at) = lines[i + 1..next].iter().position(|l| bare(l) == OPEN) {
                    return Some((i + at + 2, i + 1));
                }
                i = next;
                continue;
            }
            // A cell's closing fence opens no block.
            if let Some(len) = cell_at(&lines, i) {
                i += len + 2;
                continue;
            }
            i += 1;
        }
        None
    }

    /// The Markdown text of the cells.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        for cell in &self.cells {
            match cell.kind {
                CellKind::Markdown => out.push_str(&cell.source),
                CellKind::Spindle => {
                    // A fence starts a line: close off Markdown text that
                    // ends mid-line.
                    if !out.is_empty() && !out.ends_with('\n') {
                        out.push('\n');
                    }
                    out.push_str(OPEN);
                    out.push('\n');
                    out.push_str(&cell.source);
                    if !cell.source.is_empty() && !cell.source.ends_with('\n') {
                        out.push('\n');
                    }
                    out.push_str(CLOSE);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// The code cells with their position among all cells.
    pub fn code_cells(&self) -> impl Iterator<Item = (usize, &Cell)> {
        self.cells.iter().enumerate().filter(|(_, c)| c.kind == CellKind::Spindle)
    }
}

/// Reads a notebook file.
pub fn load(path: &Path) -> Result<Notebook> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Notebook::parse(&text))
}

/// Writes a notebook file (through a temporary file beside it, so a failed
/// write leaves the old file whole).
pub fn save(path: &Path, notebook: &Notebook) -> Result<()> {
    let text = notebook.to_markdown();
    let name =
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "notebook".into());
    let tmp = path.with_file_name(format!(".{name}.spindle-save"));
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))
}

/// The bundled default notebook (what `spindle` opens with no arguments).
pub const DEFAULT: &str = include_str!("default.md");

/// [`DEFAULT`], parsed.
pub fn default_notebook() -> Notebook {
    Notebook::parse(DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# Title\n\nSome text.\n\n```spindle\nA = rand 4x4\nC[i] = A[i,j]\n```\n\nMore.\n```rust\nfn main() {}\n```\n```spindle\nx = rand 3\n```\n";

    #[test]
    fn every_example_notebook_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/notebooks");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                let notebook = load(&path).unwrap();
                for (_, cell) in notebook.code_cells() {
                    if let Err(d) = crate::notebook::cell::parse_cell(&cell.source) {
                        panic!("{}: {} in\n{}", path.display(), d.message, cell.source);
                    }
                }
                seen += 1;
            }
        }
        assert!(seen >= 7, "{seen} notebooks in {}", dir.display());
    }

    #[test]
    fn cells_split_at_spindle_fences() {
        let nb = Notebook::parse(TEXT);
        let kinds: Vec<CellKind> = nb.iter().map(|c| c.kind).collect();
        use CellKind::*;
        assert_eq!(kinds, [Markdown, Spindle, Markdown, Spindle]);
        assert_eq!(nb[0].source, "# Title\n\nSome text.\n\n");
        assert_eq!(nb[1].source, "A = rand 4x4\nC[i] = A[i,j]\n");
        // Other fenced blocks stay Markdown.
        assert_eq!(nb[2].source, "\nMore.\n```rust\nfn main() {}\n```\n");
        assert_eq!(nb[3].source, "x = rand 3\n");
        assert_eq!(nb.code_cells().map(|(i, _)| i).collect::<Vec<_>>(), [1, 3]);
    }

    #[test]
    fn unedited_notebooks_round_trip_byte_for_byte() {
        for text in [
            TEXT,
            "",
            "just text, no newline",
            "```spindle\n```\n",
            "```spindle\r\nA = rand 3\r\n```\r\n",
            "a\n```spindle\nunclosed\n",
            "```spindle\nA\n```\ntrailing text without newline",
            DEFAULT,
        ] {
            let nb = Notebook::parse(text);
            // CRLF fences are written as LF; everything else is exact.
            let expected = text.replace("```spindle\r\n", "```spindle\n").replace("\r\n```\r\n", "\r\n```\n");
            assert_eq!(nb.to_markdown(), expected, "{text:?}");
        }
        assert_eq!(Notebook::parse("```spindle\nA\n```\n").len(), 1);
        assert_eq!(Notebook::parse("a\n```spindle\nunclosed\n").len(), 1);
        assert_eq!(Notebook::unclosed_fence("a\n```spindle\nunclosed\n"), Some(2));
        assert_eq!(Notebook::unclosed_fence("```spindle\nA\n```\n```spindle\nB\n"), Some(4));
        assert_eq!(Notebook::unclosed_fence("```spindle\nA\n```\n"), None);
        assert_eq!(Notebook::unclosed_fence("````md\n```spindle\nA\n````\n"), None);
    }

    /// A cell's fences inside another fenced block (four backticks around
    /// an example notebook, a ```` ```text ```` block, tildes) are that
    /// block's text: Markdown, not a cell that runs (it ran). The text
    /// saves back to the same bytes.
    #[test]
    fn fences_inside_other_blocks_are_markdown() {
        for text in [
            "intro\n````markdown\n```spindle\nA = rand 3\n```\n````\nend\n",
            "```text\n```spindle\n```\n",
            "~~~\n```spindle\nA = rand 3\n```\n~~~\n",
            "  ````\n```spindle\nA\n```\n`````\n",
        ] {
            let nb = Notebook::parse(text);
            assert!(nb.iter().all(|c| c.kind == CellKind::Markdown), "{text:?}: {nb:?}");
            assert_eq!(nb.to_markdown(), text);
        }
        // A cell after the block still is one; a ```` ```spindle ```` line is a
        // cell, not another block's fence.
        let nb = Notebook::parse("````\n```spindle\nA\n```\n````\n```spindle\nB = rand 2\n```\n");
        assert_eq!(nb.code_cells().map(|(_, c)| c.source.as_str()).collect::<Vec<_>>(), ["B = rand 2\n"]);
        assert_eq!(Notebook::fenced_in("x\n````\n```spindle\nA\n```\n````\n"), Some((3, 2)));
        // A fence never closed opens no block: a stray one swallows no
        // cell after it.
        let nb = Notebook::parse("intro\n````\nstray\n```spindle\nA = rand 3\n```\n");
        assert_eq!(nb.code_cells().count(), 1);
        assert_eq!(Notebook::fenced_in("intro\n````\nstray\n```spindle\nA = rand 3\n```\n"), None);
        // A cell's closing fence opens no block: two cells in a row are
        // two cells, with no note (it had said the second was inside a
        // block opened by the first's closing fence).
        let two = "```spindle\nA = rand 3\n```\n\ntext\n```spindle\nB = rand 2\n```\n";
        assert_eq!(Notebook::parse(two).code_cells().count(), 2);
        assert_eq!(Notebook::fenced_in(two), None);
    }

    #[test]
    fn edited_cells_keep_fences_on_their_own_lines() {
        let mut nb = Notebook::parse("intro");
        nb.push(Cell::spindle("C[i] = A[i,j]"));
        nb.push(Cell::markdown("end\n"));
        assert_eq!(nb.to_markdown(), "intro\n```spindle\nC[i] = A[i,j]\n```\nend\n");
        let again = Notebook::parse(&nb.to_markdown());
        assert_eq!(again[1].source, "C[i] = A[i,j]\n");
    }

    #[test]
    fn save_and_load() {
        let dir = std::env::temp_dir().join(format!("spindle-md-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nb.md");
        let nb = Notebook::parse(TEXT);
        save(&path, &nb).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), TEXT);
        assert_eq!(load(&path).unwrap(), nb);
        assert!(load(&dir.join("missing.md")).unwrap_err().to_string().contains("missing.md"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_default_notebook_has_code_cells() {
        let nb = default_notebook();
        assert!(nb.code_cells().count() >= 1);
        for (_, cell) in nb.code_cells() {
            super::super::cell::parse_cell(&cell.source).unwrap();
        }
    }
}
