//! Shared plumbing for the line-oriented text formats: a line reader that
//! counts lines and turns I/O and UTF-8 failures into [`FormatError`]s, and
//! small number parsers that never panic.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use crate::{FormatError, Result};

/// Reads lines one at a time into a reused buffer, counting them from 1.
pub(crate) struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    line: usize,
    path: PathBuf,
}

impl<R: BufRead> Lines<R> {
    pub(crate) fn new(reader: R, path: &Path) -> Self {
        Lines { reader, buf: Vec::new(), line: 0, path: path.to_path_buf() }
    }

    /// The next line without its `\n` / `\r\n` terminator and its 1-based
    /// number, or `None` at the end of the input.
    pub(crate) fn next_line(&mut self) -> Result<Option<(usize, &str)>> {
        self.buf.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.buf)
            .map_err(|error| FormatError::Io { path: self.path.clone(), error })?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        }
        match std::str::from_utf8(&self.buf) {
            Ok(text) => Ok(Some((self.line, text))),
            Err(_) => Err(parse_error(&self.path, self.line, "line is not valid UTF-8")),
        }
    }

    /// The line number to blame when the input ends too early: the last line
    /// read (line 1 for an empty input).
    pub(crate) fn eof_line(&self) -> usize {
        self.line.max(1)
    }
}

/// A [`FormatError::Parse`] at `line` of `path`.
pub(crate) fn parse_error(path: &Path, line: usize, message: impl Into<String>) -> FormatError {
    FormatError::Parse { path: path.to_path_buf(), line, message: message.into() }
}

/// A [`FormatError::Io`] for `path`.
pub(crate) fn io_error(path: &Path, error: std::io::Error) -> FormatError {
    FormatError::Io { path: path.to_path_buf(), error }
}

/// Opens `path` for buffered reading.
pub(crate) fn open(path: &Path) -> Result<std::io::BufReader<std::fs::File>> {
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    Ok(std::io::BufReader::with_capacity(1 << 16, file))
}

/// Creates `path` for buffered writing, runs `body` on it and flushes.
pub(crate) fn create_with(
    path: &Path,
    body: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<()>,
) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| io_error(path, e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
    body(&mut out)?;
    out.flush().map_err(|e| io_error(path, e))
}

/// Up to `N` whitespace-separated fields of `line` and the total count.
pub(crate) fn fields<const N: usize>(line: &str) -> ([&str; N], usize) {
    let mut out = [""; N];
    let mut count = 0;
    for (k, tok) in line.split_ascii_whitespace().enumerate() {
        if let Some(slot) = out.get_mut(k) {
            *slot = tok;
        }
        count = k + 1;
    }
    (out, count)
}

/// A real number as written by C, Python, Rust or Fortran (`1.5D+00`).
///
/// The error, to follow the value's name in a message: `` `x`: expected a
/// real number ``, or `` `1e400`: past the range of f64 `` for a finite
/// literal that would read as an infinity (`inf` written out is one).
pub(crate) fn parse_real(tok: &str) -> Result<f64, String> {
    let x = tok
        .parse::<f64>()
        .ok()
        .or_else(|| {
            if tok.contains(['d', 'D']) { tok.replace(['d', 'D'], "e").parse::<f64>().ok() } else { None }
        })
        .ok_or_else(|| format!("`{}`: expected a real number", quote(tok)))?;
    if x.is_infinite() && !tok.to_ascii_lowercase().contains("inf") {
        return Err(format!("`{}`: past the range of f64", quote(tok)));
    }
    Ok(x)
}

/// A non-negative integer (`usize`), no sign other than `+`.
pub(crate) fn parse_count(tok: &str) -> Option<usize> {
    tok.parse::<usize>().ok()
}

/// `tok` shortened for quoting in a message.
pub(crate) fn quote(tok: &str) -> String {
    const MAX: usize = 40;
    if tok.chars().count() <= MAX {
        tok.to_string()
    } else {
        let short: String = tok.chars().take(MAX).collect();
        format!("{short}...")
    }
}

/// Writes with I/O errors mapped to `path`.
pub(crate) fn write_fmt_to(out: &mut impl Write, path: &Path, args: std::fmt::Arguments<'_>) -> Result<()> {
    out.write_fmt(args).map_err(|e| io_error(path, e))
}
