//! FROSTT `.tns` reading and writing.
//!
//! One entry per line: `i j k ... value`, indices 1-based. `#` starts a
//! comment line; blank lines are skipped. An optional header comes first: a
//! line holding only the order, then a line with that many dimensions. With
//! no header the order is taken from the first entry and each dimension is
//! the largest index seen along it.
//!
//! Entries keep file order (not canonicalized); indices become 0-based.
//! Malformed input gives a [`FormatError::Parse`] naming the 1-based line.

use std::io::{BufRead, Write};
use std::path::Path;

use super::text::{
    Lines, create_with, fields, open, parse_count, parse_error, parse_real, quote, write_fmt_to,
};
use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

/// Reads a FROSTT `.tns` file. See the module documentation.
pub fn read_tns<V: Value, I: Index>(path: &Path) -> Result<Coo<V, I>> {
    parse_tns(open(path)?, path)
}

/// Parses FROSTT text from any reader; `source_name` only names the input in
/// error messages.
pub fn parse_tns<V: Value, I: Index, R: BufRead>(reader: R, source_name: &Path) -> Result<Coo<V, I>> {
    let path = source_name;
    let mut lines = Lines::new(reader, path);
    let err = |line: usize, message: String| parse_error(path, line, message);

    // `Some((dims, line))` once a header has been read.
    let mut header: Option<(Vec<usize>, usize)> = None;
    let mut order: Option<usize> = None;
    let mut max_index: Vec<usize> = Vec::new();
    let mut crd: Vec<Vec<I>> = Vec::new();
    let mut val: Vec<V> = Vec::new();

    while let Some((n, text)) = lines.next_line()? {
        if is_skipped(text) {
            continue;
        }
        let found = text.split_ascii_whitespace().count();
        let order = match order {
            Some(order) => order,
            None if found == 1 => {
                // Header: the order, then the dims on the next non-comment line.
                let (toks, _) = fields::<1>(text);
                let o = parse_count(toks[0]).filter(|&o| o > 0).ok_or_else(|| {
                    err(
                        n,
                        format!(
                            "invalid order `{}` in the header: expected a positive integer",
                            quote(toks[0])
                        ),
                    )
                })?;
                let (dims_line, dims) = loop {
                    let Some((m, text)) = lines.next_line()? else {
                        let eof = lines.eof_line();
                        return Err(err(
                            eof,
                            format!("missing dims line after the order {o} declared on line {n}"),
                        ));
                    };
                    if is_skipped(text) {
                        continue;
                    }
                    let count = text.split_ascii_whitespace().count();
                    if count != o {
                        return Err(err(
                            m,
                            format!(
                                "the header declares order {o} on line {n} but this line lists {count} dims"
                            ),
                        ));
                    }
                    let mut dims = Vec::with_capacity(o);
                    for (k, tok) in text.split_ascii_whitespace().enumerate() {
                        let d = parse_count(tok).ok_or_else(|| {
                            err(
                                m,
                                format!(
                                    "invalid dim `{}` in column {}: expected a non-negative integer",
                                    quote(tok),
                                    k + 1
                                ),
                            )
                        })?;
                        I::from_usize(d).map_err(|e| err(m, format!("dim {d} is too large: {e}")))?;
                        dims.push(d);
                    }
                    break (m, dims);
                };
                header = Some((dims, dims_line));
                order = Some(o);
                crd = vec![Vec::new(); o];
                continue;
            }
            None => {
                let o = found - 1;
                order = Some(o);
                max_index = vec![0; o];
                crd = vec![Vec::new(); o];
                o
            }
        };

        if found != order + 1 {
            return Err(err(
                n,
                format!("expected {} fields ({order} indices and a value), found {found}", order + 1),
            ));
        }
        let mut toks = text.split_ascii_whitespace();
        for (k, tok) in toks.by_ref().take(order).enumerate() {
            let column = k + 1;
            let x = parse_count(tok).ok_or_else(|| {
                err(
                    n,
                    format!("invalid index `{}` in column {column}: expected a positive integer", quote(tok)),
                )
            })?;
            if x == 0 {
                return Err(err(n, format!("index 0 in column {column} is invalid: indices are 1-based")));
            }
            match &header {
                Some((dims, dims_line)) => {
                    let extent = dims.get(k).copied().unwrap_or(0);
                    if x > extent {
                        return Err(err(
                            n,
                            format!(
                                "index {x} in column {column} is beyond the dim {extent} declared on line {dims_line}"
                            ),
                        ));
                    }
                }
                None => {
                    I::from_usize(x)
                        .map_err(|e| err(n, format!("index {x} in column {column} is too large: {e}")))?;
                    if let Some(m) = max_index.get_mut(k) {
                        *m = (*m).max(x);
                    }
                }
            }
            let stored = I::from_usize(x - 1).map_err(|e| err(n, e.to_string()))?;
            if let Some(c) = crd.get_mut(k) {
                c.push(stored);
            }
        }
        let tok = toks.next().unwrap_or("");
        let v = parse_real(tok).map_err(|e| err(n, format!("invalid value {e}")))?;
        let fits = V::from_f64_checked(v);
        val.push(fits.ok_or_else(|| err(n, format!("value {v} does not fit in {}", V::DTYPE.name())))?);
    }

    let shape = match header {
        Some((dims, _)) => dims,
        None if order.is_none() => {
            return Err(err(
                lines.eof_line(),
                "no header and no entries: the tensor's order is unknown".into(),
            ));
        }
        None => max_index,
    };
    Coo::new(shape, crd, val)
}

/// The order the file at `path` is read as when it opens without a header
/// (a line holding only the order): its first entry's fields less the
/// value; `None` with a header or no entry (blank lines and `#` comments
/// are skipped). Without one, the extents are the largest indices, which
/// a tensor with trailing empty slices does not reach, and a file of
/// coordinates alone reads as one order lower.
pub fn headerless_order(path: &Path) -> Result<Option<usize>> {
    let mut lines = Lines::new(open(path)?, path);
    while let Some((_, text)) = lines.next_line()? {
        if !is_skipped(text) {
            let fields = text.split_ascii_whitespace().count();
            return Ok((fields != 1).then(|| fields.saturating_sub(1)));
        }
    }
    Ok(None)
}

fn is_skipped(text: &str) -> bool {
    let t = text.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// Writes a tensor in the header form: the order, the dims, then one
/// 1-based entry per line with values that read back to the same `f64`.
pub fn write_tns<V: Value, I: Index>(coo: &Coo<V, I>, path: &Path) -> Result<()> {
    check_writable(coo)?;
    create_with(path, |out| write_tns_to(coo, out, path))
}

/// [`write_tns`] into any writer; `dest_name` only names the output in error
/// messages.
pub fn write_tns_to<V: Value, I: Index, W: Write>(
    coo: &Coo<V, I>,
    mut writer: W,
    dest_name: &Path,
) -> Result<()> {
    check_writable(coo)?;
    let out = &mut writer;
    let dims: Vec<String> = coo.shape.iter().map(|d| d.to_string()).collect();
    write_fmt_to(out, dest_name, format_args!("{}\n{}\n", coo.order(), dims.join(" ")))?;
    let mut line = String::new();
    for (k, v) in coo.val.iter().enumerate() {
        line.clear();
        for c in &coo.crd {
            let x = c.get(k).map_or(0, |x| x.to_usize()) + 1;
            line.push_str(&x.to_string());
            line.push(' ');
        }
        write_fmt_to(out, dest_name, format_args!("{line}{:?}\n", v.to_f64()))?;
    }
    out.flush().map_err(|e| FormatError::Io { path: dest_name.to_path_buf(), error: e })
}

fn check_writable<V, I>(coo: &Coo<V, I>) -> Result<()> {
    if coo.shape.is_empty() {
        return Err(FormatError::invalid("FROSTT tensor", "a tensor of order 0 cannot be written"));
    }
    Ok(())
}
