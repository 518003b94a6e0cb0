//! Point clouds as `.xyz` text: one point per line, `x y z` separated by
//! whitespace. Further columns (normals, colours) are ignored; blank lines
//! and `#` comments are skipped. Malformed lines give a
//! [`FormatError::Parse`](crate::FormatError::Parse) naming the 1-based line.

use std::io::BufRead;
use std::path::Path;

use super::text::{Lines, fields, open, parse_error, parse_real};
use crate::Result;

/// Reads an `.xyz` point cloud.
pub fn read_xyz(path: &Path) -> Result<Vec<[f64; 3]>> {
    parse_xyz(open(path)?, path)
}

/// Parses `.xyz` text from any reader; `source_name` only names the input in
/// error messages.
pub fn parse_xyz<R: BufRead>(reader: R, source_name: &Path) -> Result<Vec<[f64; 3]>> {
    let mut lines = Lines::new(reader, source_name);
    let mut points = Vec::new();
    while let Some((n, text)) = lines.next_line()? {
        let t = text.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let (toks, found) = fields::<3>(text);
        if found < 3 {
            return Err(parse_error(
                source_name,
                n,
                format!("expected at least 3 columns (`x y z`), found {found}"),
            ));
        }
        let mut point = [0.0; 3];
        for (k, name) in ["x", "y", "z"].into_iter().enumerate() {
            point[k] = parse_real(toks[k])
                .map_err(|e| parse_error(source_name, n, format!("invalid {name} coordinate {e}")))?;
        }
        points.push(point);
    }
    Ok(points)
}
