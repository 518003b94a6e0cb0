//! Matrix Market (`.mtx`) reading and writing.
//!
//! Reads the `matrix` object in `coordinate` and `array` format with the
//! fields `real`, `double`, `integer` and `pattern` (value 1) and the
//! symmetries `general`, `symmetric` and `skew-symmetric`. `complex` and
//! `hermitian` files are refused.
//!
//! Symmetric and skew-symmetric files store one triangle; the returned matrix
//! holds both: every off-diagonal entry is followed directly by its mirror
//! (negated for skew-symmetric). Entries keep file order and are not
//! canonicalized; indices become 0-based. Array files keep every entry,
//! zeros included, in column-major order.
//!
//! Every malformed input gives a [`FormatError::Parse`] naming the 1-based
//! line and what was expected there.

use std::io::{BufRead, Write};
use std::path::Path;

use super::text::{
    Lines, create_with, fields, open, parse_count, parse_error, parse_real, quote, write_fmt_to,
};
use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

const BANNER: &str = "%%MatrixMarket";
const BANNER_FORM: &str = "`%%MatrixMarket matrix <format> <field> <symmetry>`";
/// Never reserve more than this many entries up front: the declared count is
/// untrusted input.
const MAX_RESERVE: usize = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Coordinate,
    Array,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Real,
    Integer,
    Pattern,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Symmetry {
    General,
    Symmetric,
    SkewSymmetric,
}

/// Reads a Matrix Market file. See the module documentation.
pub fn read_mtx<V: Value, I: Index>(path: &Path) -> Result<Coo<V, I>> {
    parse_mtx(open(path)?, path)
}

/// Parses Matrix Market text from any reader; `source_name` only names the
/// input in error messages.
pub fn parse_mtx<V: Value, I: Index, R: BufRead>(reader: R, source_name: &Path) -> Result<Coo<V, I>> {
    let path = source_name;
    let mut lines = Lines::new(reader, path);
    let err = |line: usize, message: String| parse_error(path, line, message);

    // Banner.
    let (layout, field, symmetry) = match lines.next_line()? {
        None => {
            return Err(err(1, format!("empty file: expected the banner {BANNER_FORM}")));
        }
        Some((n, text)) => {
            parse_banner(text.strip_prefix('\u{feff}').unwrap_or(text)).map_err(|message| err(n, message))?
        }
    };

    // Size line, after any comments and blank lines.
    let size_form = match layout {
        Layout::Coordinate => "`rows cols entries`",
        Layout::Array => "`rows cols`",
    };
    let (size_line, rows, cols, declared) = loop {
        let Some((n, text)) = lines.next_line()? else {
            let eof = lines.eof_line();
            return Err(err(eof, format!("missing size line: expected {size_form}")));
        };
        if is_skipped(text) {
            continue;
        }
        let (toks, count) = fields::<3>(text);
        let want = if layout == Layout::Coordinate { 3 } else { 2 };
        if count != want {
            return Err(err(n, format!("size line must be {size_form}, found {count} field(s)")));
        }
        let names = ["rows", "cols", "entries"];
        let mut nums = [0usize; 3];
        for k in 0..want {
            nums[k] = parse_count(toks[k]).ok_or_else(|| {
                err(
                    n,
                    format!(
                        "invalid {} `{}` in the size line: expected a non-negative integer",
                        names[k],
                        quote(toks[k])
                    ),
                )
            })?;
        }
        break (n, nums[0], nums[1], nums[2]);
    };
    if symmetry != Symmetry::General && rows != cols {
        return Err(err(
            size_line,
            format!("a {} matrix must be square, got {rows}x{cols}", symmetry_name(symmetry)),
        ));
    }
    for extent in [rows, cols] {
        I::from_usize(extent).map_err(|e| err(size_line, format!("size {extent} is too large: {e}")))?;
    }
    let expected = match (layout, symmetry) {
        (Layout::Coordinate, _) => Some(declared),
        (Layout::Array, Symmetry::General) => rows.checked_mul(cols),
        (Layout::Array, Symmetry::Symmetric) => rows.checked_mul(rows.saturating_add(1)).map(|x| x / 2),
        (Layout::Array, Symmetry::SkewSymmetric) => rows.checked_mul(rows.saturating_sub(1)).map(|x| x / 2),
    }
    .ok_or_else(|| err(size_line, format!("matrix size {rows}x{cols} overflows")))?;

    // Entries.
    let mirrored = symmetry != Symmetry::General;
    let reserve = expected.min(MAX_RESERVE) * if mirrored { 2 } else { 1 };
    let mut row_idx: Vec<I> = Vec::with_capacity(reserve);
    let mut col_idx: Vec<I> = Vec::with_capacity(reserve);
    let mut val: Vec<V> = Vec::with_capacity(reserve);
    let mut count = 0usize;
    // Array position of the next value (0-based), column-major.
    let (mut ai, mut aj) = (if symmetry == Symmetry::SkewSymmetric { 1 } else { 0 }, 0usize);

    while let Some((n, text)) = lines.next_line()? {
        if is_skipped(text) {
            continue;
        }
        if count == expected {
            return Err(err(n, format!("more entries than the {expected} declared on line {size_line}")));
        }
        let (i, j, v) = match layout {
            Layout::Coordinate => {
                let (toks, found) = fields::<3>(text);
                let want = if field == Field::Pattern { 2 } else { 3 };
                let form = if field == Field::Pattern { "`row col`" } else { "`row col value`" };
                if found < want {
                    return Err(err(n, format!("expected {form}, found {found} field(s)")));
                }
                if found > want {
                    let message = if field == Field::Pattern {
                        format!("pattern entries have no value: expected `row col`, found {found} fields")
                    } else {
                        format!("too many fields: expected `row col value`, found {found}")
                    };
                    return Err(err(n, message));
                }
                let i = parse_index(toks[0], "row", rows, size_line).map_err(|m| err(n, m))?;
                let j = parse_index(toks[1], "column", cols, size_line).map_err(|m| err(n, m))?;
                let v = parse_value(toks[2], field).map_err(|m| err(n, m))?;
                (i, j, v)
            }
            Layout::Array => {
                let (toks, found) = fields::<1>(text);
                if found != 1 {
                    return Err(err(
                        n,
                        format!("array entries hold one value per line, found {found} fields"),
                    ));
                }
                let v = parse_value(toks[0], field).map_err(|m| err(n, m))?;
                let pos = (ai, aj);
                ai += 1;
                if ai == rows {
                    aj += 1;
                    ai = match symmetry {
                        Symmetry::General => 0,
                        Symmetry::Symmetric => aj,
                        Symmetry::SkewSymmetric => aj + 1,
                    };
                }
                (pos.0, pos.1, v)
            }
        };
        if i == j && symmetry == Symmetry::SkewSymmetric {
            return Err(err(
                n,
                format!("skew-symmetric matrices have no diagonal entries, found ({}, {})", i + 1, j + 1),
            ));
        }
        let to_index = |x: usize| I::from_usize(x).map_err(|e| err(n, e.to_string()));
        let (ri, cj) = (to_index(i)?, to_index(j)?);
        row_idx.push(ri);
        col_idx.push(cj);
        let fit = |x: f64| {
            V::from_f64_checked(x)
                .ok_or_else(|| err(n, format!("value {x} does not fit in {}", V::DTYPE.name())))
        };
        val.push(fit(v)?);
        if mirrored && i != j {
            row_idx.push(cj);
            col_idx.push(ri);
            let m = if symmetry == Symmetry::SkewSymmetric { -v } else { v };
            val.push(fit(m)?);
        }
        count += 1;
    }
    if count < expected {
        return Err(err(
            lines.eof_line(),
            format!("unexpected end of file: expected {expected} entries, found {count}"),
        ));
    }
    Coo::new(vec![rows, cols], vec![row_idx, col_idx], val)
}

/// Blank lines and `%` comments may appear anywhere after the banner.
fn is_skipped(text: &str) -> bool {
    let t = text.trim_start();
    t.is_empty() || t.starts_with('%')
}

fn symmetry_name(s: Symmetry) -> &'static str {
    match s {
        Symmetry::General => "general",
        Symmetry::Symmetric => "symmetric",
        Symmetry::SkewSymmetric => "skew-symmetric",
    }
}

fn parse_banner(text: &str) -> std::result::Result<(Layout, Field, Symmetry), String> {
    let (toks, count) = fields::<6>(text);
    if count == 0 || !toks[0].eq_ignore_ascii_case(BANNER) {
        let found = text.trim();
        return Err(if found.is_empty() {
            format!("expected the banner {BANNER_FORM}, found a blank line")
        } else {
            format!("expected the banner {BANNER_FORM}, found `{}`", quote(found))
        });
    }
    if count < 5 {
        return Err(format!("incomplete banner: expected {BANNER_FORM}"));
    }
    if count > 5 {
        return Err(format!("unexpected `{}` after the symmetry in the banner", quote(toks[5])));
    }
    let lower = |k: usize| toks[k].to_ascii_lowercase();
    let object = lower(1);
    if object != "matrix" {
        return Err(format!("unsupported object `{}`: only `matrix` is supported", quote(toks[1])));
    }
    let layout = match lower(2).as_str() {
        "coordinate" => Layout::Coordinate,
        "array" => Layout::Array,
        _ => return Err(format!("unknown format `{}`: expected `coordinate` or `array`", quote(toks[2]))),
    };
    let field = match lower(3).as_str() {
        "real" | "double" => Field::Real,
        "integer" => Field::Integer,
        "pattern" => Field::Pattern,
        "complex" => return Err("complex matrices are not supported (field `complex`)".into()),
        _ => {
            return Err(format!(
                "unknown field `{}`: expected `real`, `double`, `integer`, `pattern` or `complex`",
                quote(toks[3])
            ));
        }
    };
    let symmetry = match lower(4).as_str() {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        "skew-symmetric" => Symmetry::SkewSymmetric,
        "hermitian" => return Err("hermitian matrices are not supported (symmetry `hermitian`)".into()),
        _ => {
            return Err(format!(
                "unknown symmetry `{}`: expected `general`, `symmetric`, `skew-symmetric` or `hermitian`",
                quote(toks[4])
            ));
        }
    };
    if field == Field::Pattern && layout == Layout::Array {
        return Err("a pattern matrix must use the `coordinate` format".into());
    }
    if field == Field::Pattern && symmetry == Symmetry::SkewSymmetric {
        return Err("a pattern matrix cannot be skew-symmetric".into());
    }
    Ok((layout, field, symmetry))
}

/// A 1-based index checked against `extent`, returned 0-based.
fn parse_index(tok: &str, what: &str, extent: usize, size_line: usize) -> std::result::Result<usize, String> {
    let x = parse_count(tok)
        .ok_or_else(|| format!("invalid {what} index `{}`: expected a positive integer", quote(tok)))?;
    if x == 0 {
        return Err(format!("{what} index 0 is invalid: indices are 1-based"));
    }
    if x > extent {
        let plural = if what == "row" { "rows" } else { "columns" };
        return Err(format!("{what} index {x} is beyond the {extent} {plural} declared on line {size_line}"));
    }
    Ok(x - 1)
}

fn parse_value(tok: &str, field: Field) -> std::result::Result<f64, String> {
    match field {
        Field::Pattern => Ok(1.0),
        Field::Real => parse_real(tok).map_err(|e| format!("invalid value {e}")),
        Field::Integer => tok
            .parse::<i64>()
            .map(|x| x as f64)
            .map_err(|_| format!("invalid value `{}`: expected an integer", quote(tok))),
    }
}

/// Writes a matrix as `coordinate real general`, entries in stored order,
/// values in the shortest form that reads back to the same `f64`.
pub fn write_mtx<V: Value, I: Index>(coo: &Coo<V, I>, path: &Path) -> Result<()> {
    coo.expect_matrix("Matrix Market")?;
    create_with(path, |out| write_mtx_to(coo, out, path))
}

/// [`write_mtx`] into any writer; `dest_name` only names the output in error
/// messages.
pub fn write_mtx_to<V: Value, I: Index, W: Write>(
    coo: &Coo<V, I>,
    mut writer: W,
    dest_name: &Path,
) -> Result<()> {
    let (rows, cols) = coo.expect_matrix("Matrix Market")?;
    let out = &mut writer;
    write_fmt_to(out, dest_name, format_args!("{BANNER} matrix coordinate real general\n"))?;
    write_fmt_to(out, dest_name, format_args!("{rows} {cols} {}\n", coo.nnz()))?;
    for ((i, j), v) in coo.crd[0].iter().zip(&coo.crd[1]).zip(&coo.val) {
        let (i, j) = (i.to_usize() + 1, j.to_usize() + 1);
        write_fmt_to(out, dest_name, format_args!("{i} {j} {:?}\n", v.to_f64()))?;
    }
    out.flush().map_err(|e| FormatError::Io { path: dest_name.to_path_buf(), error: e })
}
