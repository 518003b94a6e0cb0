//! The cell language: what one ```` ```spindle ```` block of a notebook says.
//!
//! A cell is a list of lines; `#` starts a comment. Each line is one of
//!
//! ```text
//! NAME = load PATH [DTYPE] [else gen:SPEC]     a .mtx / .tns (sparse) or .npy (dense) file
//! NAME = gen:KIND:key=value,... [DTYPE]        a generated sparse matrix
//! NAME = rand DIMS [DTYPE] [seed=N] [max=M]    random values in ±[0.1, 1), or indices in 0..M
//! NAME = shape DIMS [DTYPE]                    a tensor with no data (an output)
//! NAME = kernelmap [PATH] voxel=V [kernel=K] [points=N] [seed=S] [else points=N]
//!                                              the kernel map of a voxelized point cloud
//! NAME = cg lmax=L                             the real Clebsch–Gordan tensor CG[i,j,k,path]
//! format NAME = SPEC                           store a tensor in a format (csr, groupcoo:g=auto, ...);
//!                                              an output with no data is assembled in it
//! schedule ITEMS                               tile.INDEX=N reduce=... broadcast=... matmul=...
//! sweep PARAM in [V, V, ...]                   g, reduce, broadcast, matmul, path, workspace, ws.ITEM,
//!                                              fusion (the statements run as one program), order,
//!                                              subsect, tile.INDEX, format.NAME
//! threads N | repeats N | resources first|all|off
//! anything else                                an Einsum statement, e.g. C[m,n] += A[m,k] * B[k,n]
//! ```
//!
//! DIMS is `2708x64`, `scalar`, or uses `NAME.D` for dimension D of a tensor
//! bound above (`B = rand A.1x64`). A relative PATH is looked up in the
//! shared data folder (`../shared/data`, or `$SPINDLE_DATA`), then beside
//! the notebook. Several sweeps run as their cartesian product, the first
//! outermost.
//!
//! Parsing never fails on the first problem alone: it stops at the first
//! error and returns it as a [`Diagnostic`] whose span is a byte range of
//! the cell's text, so [`render`] can put a caret under it with the cell's
//! line and column.

use std::collections::BTreeMap;

use spindle_formats::FormatSpec;
use spindle_formats::generate::GeneratorSpec;
use spindle_ir::kernel::Strategy;
use spindle_ir::kernel::schedule::Schedule;
use spindle_ir::lang::{Diagnostic, ElemType, Span};

/// A cell, parsed. Every span is a byte range of the cell's text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellProgram {
    pub bindings: Vec<Binding>,
    pub formats: Vec<FormatChoice>,
    pub statements: Vec<Spanned<String>>,
    /// The schedule as written (empty: the default schedule).
    pub schedule: Option<Spanned<String>>,
    pub sweeps: Vec<SweepDecl>,
    pub threads: Option<usize>,
    pub repeats: Option<usize>,
    pub resources: ResourceMode,
}

/// A value and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Spanned<T> {
    pub value: T,
    pub span: Span,
}

/// `NAME = SOURCE`.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub name: Spanned<String>,
    pub source: Source,
    /// The whole line, without its comment.
    pub span: Span,
}

/// Where a tensor's data come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A file; when it is absent, the fallback generator.
    Load {
        path: Spanned<String>,
        dtype: Option<ElemType>,
        fallback: Option<Spanned<GeneratorSpec>>,
    },
    Gen {
        spec: Spanned<GeneratorSpec>,
        dtype: Option<ElemType>,
    },
    /// Random values (or indices in `0..max`).
    Rand {
        dims: Vec<Dim>,
        dtype: ElemType,
        seed: u64,
        max: Option<i64>,
    },
    /// A declaration without data.
    Shape {
        dims: Vec<Dim>,
        dtype: ElemType,
    },
    /// The submanifold convolution map of a point cloud.
    KernelMap {
        cloud: Cloud,
        voxel: f64,
        kernel: usize,
    },
    /// The real Clebsch–Gordan tensor up to degree `lmax`.
    ClebschGordan {
        lmax: u32,
    },
}

/// The points a kernel map is built from.
#[derive(Clone, Debug, PartialEq)]
pub enum Cloud {
    /// An `.xyz` file, or random points when it is absent and a fallback
    /// was given.
    File { path: Spanned<String>, fallback: Option<(usize, u64)> },
    /// `points` seeded random points in [0,1)² × [0,0.5).
    Random { points: usize, seed: u64 },
}

/// One dimension of a `rand` / `shape` binding.
#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    Fixed(usize),
    /// Dimension `dim` of a tensor bound earlier.
    Of {
        tensor: String,
        dim: usize,
        span: Span,
    },
}

/// `format NAME = SPEC`.
#[derive(Clone, Debug, PartialEq)]
pub struct FormatChoice {
    pub tensor: Spanned<String>,
    pub spec: Spanned<FormatSpec>,
}

/// What a sweep varies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SweepParam {
    /// The group size of every GroupCOO / BlockGroupCOO format.
    G,
    Reduce,
    Broadcast,
    Matmul,
    /// `path`: the tile path or the level path.
    Path,
    /// `tile.INDEX`.
    Tile(String),
    /// `format.NAME`: the whole format of one tensor.
    Format(String),
    /// `workspace` or `ws.ITEM`: the level path's workspace policy or one
    /// of the ISM's options, as the schedule item of that key.
    Workspace(String),
    /// `fusion`: how the cell's statements share loops (ReACT); the cell
    /// then runs as one program.
    Fusion,
    /// `strip`: a fused program kernel's rows in strips (`auto` or a row
    /// count), as the schedule item; the cell then runs as one program.
    Strip,
    /// `order`: the loop order (`i+p+q+j`), as the schedule item.
    Order,
    /// `subsect`: subsection loops (on) or TACO-UCF's dense outer loops
    /// (off) for affine subscripts on stored operands.
    Subsect,
}

impl SweepParam {
    /// As written in the cell: `g`, `tile.n`, `format.A`.
    pub fn name(&self) -> String {
        match self {
            SweepParam::G => "g".into(),
            SweepParam::Reduce => "reduce".into(),
            SweepParam::Broadcast => "broadcast".into(),
            SweepParam::Matmul => "matmul".into(),
            SweepParam::Path => "path".into(),
            SweepParam::Tile(i) => format!("tile.{i}"),
            SweepParam::Format(t) => format!("format.{t}"),
            SweepParam::Workspace(key) => key.clone(),
            SweepParam::Fusion => "fusion".into(),
            SweepParam::Strip => "strip".into(),
            SweepParam::Order => "order".into(),
            SweepParam::Subsect => "subsect".into(),
        }
    }
}

/// `sweep PARAM in [V, ...]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepDecl {
    pub param: Spanned<SweepParam>,
    pub values: Vec<Spanned<String>>,
}

/// Which sweep points NVRTC compiles for the resource report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResourceMode {
    /// The first point only (NVRTC takes about a second a kernel).
    #[default]
    First,
    All,
    Off,
}

/// The syntax summary that errors point to.
pub const CELL_SYNTAX: &str = "a cell line is `NAME = load PATH [else gen:SPEC]`, `NAME = gen:SPEC`, \
`NAME = rand DIMS [DTYPE] [seed=N] [max=M]`, `NAME = shape DIMS`, `NAME = kernelmap ...`, `NAME = cg lmax=L`, \
`format NAME = SPEC`, `schedule ...`, `sweep PARAM in [...]`, `threads N`, `repeats N`, \
`resources first|all|off`, or an Einsum statement";

const DATA_SOURCES: &str = "load, gen:SPEC, rand, shape, kernelmap or cg";

/// A word of a line and its span in the cell.
#[derive(Clone, Copy, Debug)]
struct Word<'a> {
    text: &'a str,
    span: Span,
}

/// Parses a cell's text.
pub fn parse_cell(src: &str) -> Result<CellProgram, Diagnostic> {
    let mut program = CellProgram::default();
    let mut bound: BTreeMap<String, Span> = BTreeMap::new();
    let mut option_lines: BTreeMap<&'static str, Span> = BTreeMap::new();
    let mut offset = 0;
    for raw in src.split_inclusive('\n') {
        let start = offset;
        offset += raw.len();
        let line = raw.split('#').next().unwrap_or("").trim_end();
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        let at = start + (line.len() - trimmed.len());
        let span = Span::new(at, at + trimmed.len());
        let words = words(trimmed, at);
        let first = words[0];
        match first.text {
            "format" => program.formats.push(format_line(&words, span)?),
            "schedule" => {
                if let Some(before) = option_lines.insert("schedule", span) {
                    return Err(twice("schedule", span, before));
                }
                let text_start = first.span.end;
                let text = src[text_start..span.end].trim();
                let value_span = if text.is_empty() { first.span } else { find(src, text_start, text) };
                text.parse::<Schedule>().map_err(|e| {
                    Diagnostic::new(e.to_string(), value_span)
                        .with_label("not a schedule item")
                        .with_note(format!("schedules: {}", spindle_ir::kernel::schedule::SCHEDULE_SYNTAX))
                })?;
                program.schedule = Some(Spanned { value: text.to_string(), span: value_span });
            }
            "sweep" => {
                let decl = sweep_line(src, &words, span)?;
                if let Some(other) = program.sweeps.iter().find(|s| s.param.value == decl.param.value) {
                    return Err(Diagnostic::new(
                        format!("`{}` is swept twice", decl.param.value.name()),
                        decl.param.span,
                    )
                    .with_label("second sweep")
                    .with_secondary(other.param.span, "first sweep")
                    .with_note("list every value in one sweep"));
                }
                program.sweeps.push(decl);
            }
            "threads" | "repeats" => {
                let key = if first.text == "threads" { "threads" } else { "repeats" };
                if let Some(before) = option_lines.insert(key, span) {
                    return Err(twice(key, span, before));
                }
                if key == "threads" {
                    // 0: all cores, as `--threads 0`.
                    let n = single_number(&words, 0, 4096)?;
                    program.threads = Some(if n == 0 { spindle_c::cpu_threads() } else { n });
                } else {
                    let n = single_number(&words, 1, 4096)?;
                    program.repeats = Some(n);
                }
            }
            "resources" => {
                if let Some(before) = option_lines.insert("resources", span) {
                    return Err(twice("resources", span, before));
                }
                program.resources = match words.get(1).map(|w| w.text) {
                    Some("first") if words.len() == 2 => ResourceMode::First,
                    Some("all") if words.len() == 2 => ResourceMode::All,
                    Some("off") if words.len() == 2 => ResourceMode::Off,
                    _ => {
                        return Err(Diagnostic::new("expected `resources first`, `all` or `off`", span)
                            .with_label("which sweep points NVRTC compiles"));
                    }
                }
            }
            _ => match binding_line(src, trimmed, at, span)? {
                Some(binding) => {
                    if let Some(before) = bound.insert(binding.name.value.clone(), binding.name.span) {
                        return Err(Diagnostic::new(
                            format!("`{}` is bound twice", binding.name.value),
                            binding.name.span,
                        )
                        .with_label("bound again here")
                        .with_secondary(before, "first bound here"));
                    }
                    check_dims_refer_back(&binding, &bound)?;
                    program.bindings.push(binding);
                }
                None => program.statements.push(Spanned { value: trimmed.to_string(), span }),
            },
        }
    }
    let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
    for f in &program.formats {
        if let Some(before) = seen.insert(&f.tensor.value, f.tensor.span) {
            return Err(Diagnostic::new(format!("`{}` is given two formats", f.tensor.value), f.tensor.span)
                .with_label("second format")
                .with_secondary(before, "first format")
                .with_note("to compare formats, sweep them: sweep format.A in [csr, \"groupcoo:g=4\"]"));
        }
    }
    if program.statements.is_empty() {
        let span = Span::new(0, src.len().min(src.find('\n').unwrap_or(src.len())));
        return Err(Diagnostic::new("the cell has no statement to run", span)
            .with_label("add an Einsum statement, e.g. C[m,n] += A[m,k] * B[k,n]")
            .with_note(CELL_SYNTAX));
    }
    Ok(program)
}

fn twice(what: &str, span: Span, before: Span) -> Diagnostic {
    Diagnostic::new(format!("`{what}` is given twice"), span)
        .with_label("second one")
        .with_secondary(before, "first one")
}

/// The span of `needle`, which occurs in `src` at or after `from`.
fn find(src: &str, from: usize, needle: &str) -> Span {
    let at = src[from..].find(needle).map_or(from, |i| from + i);
    Span::new(at, at + needle.len())
}

/// Whitespace-separated words with their spans (`at` is the line's
/// offset in the cell). Never empty for a non-blank line.
fn words(line: &str, at: usize) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices().chain(std::iter::once((line.len(), ' '))) {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push(Word { text: &line[s..i], span: Span::new(at + s, at + i) });
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    out
}

fn single_number(words: &[Word<'_>], min: usize, max: usize) -> Result<usize, Diagnostic> {
    let what = words[0].text;
    let Some(w) = words.get(1) else {
        return Err(Diagnostic::new(format!("`{what}` needs a number, e.g. `{what} 4`"), words[0].span));
    };
    if let Some(extra) = words.get(2) {
        return Err(
            Diagnostic::new(format!("`{what}` takes one number"), extra.span).with_label("unexpected")
        );
    }
    match w.text.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(Diagnostic::new(format!("`{what}` is a whole number from {min} to {max}"), w.span)
            .with_label("not a number in range")),
    }
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `format NAME = SPEC` (the `=` may be left out).
fn format_line(words: &[Word<'_>], span: Span) -> Result<FormatChoice, Diagnostic> {
    let usage = "expected `format NAME = SPEC`, e.g. `format A = groupcoo:dim=0,g=auto`";
    let rest: Vec<Word<'_>> = words[1..].iter().copied().filter(|w| w.text != "=").collect();
    let (name, spec) = match rest[..] {
        [name, spec] => (name, spec),
        // `format A=csr`
        [one] if one.text.contains('=') => {
            let (n, s) = one.text.split_once('=').unwrap_or((one.text, ""));
            let split = one.span.start + n.len();
            (
                Word { text: n, span: Span::new(one.span.start, split) },
                Word { text: s, span: Span::new(split + 1, one.span.end) },
            )
        }
        _ => return Err(Diagnostic::new(usage, span).with_label("not a format line")),
    };
    if !is_ident(name.text) {
        return Err(Diagnostic::new(format!("`{}` is not a tensor name", name.text), name.span)
            .with_label("expected a tensor name")
            .with_note(usage));
    }
    let parsed: FormatSpec = spec.text.parse().map_err(|e: spindle_formats::FormatError| {
        Diagnostic::new(e.to_string(), spec.span)
            .with_label("not a format")
            .with_note(format!("formats: {}", spindle_formats::spec::FORMAT_SYNTAX))
    })?;
    Ok(FormatChoice {
        tensor: Spanned { value: name.text.to_string(), span: name.span },
        spec: Spanned { value: parsed, span: spec.span },
    })
}

/// `sweep PARAM in [V, V, ...]`.
fn sweep_line(src: &str, words: &[Word<'_>], span: Span) -> Result<SweepDecl, Diagnostic> {
    let usage = "expected `sweep PARAM in [V, V, ...]`, e.g. `sweep g in [1, 2, 4, 8]`";
    let (Some(param), Some(kw)) = (words.get(1), words.get(2)) else {
        return Err(Diagnostic::new(usage, span).with_label("incomplete sweep"));
    };
    if kw.text != "in" {
        return Err(Diagnostic::new(usage, kw.span).with_label("expected `in`"));
    }
    let p = match param.text {
        "g" => SweepParam::G,
        "reduce" => SweepParam::Reduce,
        "broadcast" => SweepParam::Broadcast,
        "matmul" => SweepParam::Matmul,
        "path" => SweepParam::Path,
        t if t.starts_with("tile.") && is_ident(&t[5..]) => SweepParam::Tile(t[5..].to_string()),
        t if t.starts_with("format.") && is_ident(&t[7..]) => SweepParam::Format(t[7..].to_string()),
        t if t == "workspace" || t.starts_with("ws.") => SweepParam::Workspace(t.to_string()),
        "fusion" => SweepParam::Fusion,
        "strip" => SweepParam::Strip,
        "order" => SweepParam::Order,
        "subsect" => SweepParam::Subsect,
        _ => {
            return Err(Diagnostic::new(format!("cannot sweep `{}`", param.text), param.span)
                .with_label("unknown sweep parameter")
                .with_note(
                    "sweep g, reduce, broadcast, matmul, path, workspace, ws.ITEM, fusion, strip, order, subsect, \
                     tile.INDEX or format.TENSOR",
                ));
        }
    };
    let list_start = kw.span.end;
    let list = &src[list_start..span.end];
    let open = list.find('[');
    let close = list.rfind(']');
    let (Some(open), Some(close)) = (open, close) else {
        let at = Span::new(list_start, span.end);
        return Err(Diagnostic::new("expected a list in brackets: [1, 2, 4]", at).with_label("not a list"));
    };
    if close < open || !list[..open].trim().is_empty() || !list[close + 1..].trim().is_empty() {
        let at = Span::new(list_start, span.end);
        return Err(Diagnostic::new("expected a list in brackets: [1, 2, 4]", at).with_label("not a list"));
    }
    let inner_start = list_start + open + 1;
    let values = list_items(&src[inner_start..list_start + close], inner_start)?;
    if values.is_empty() {
        return Err(Diagnostic::new(
            "the sweep has no values",
            Span::new(list_start + open, list_start + close + 1),
        )
        .with_label("empty list"));
    }
    for v in &values {
        check_sweep_value(&p, v)?;
    }
    Ok(SweepDecl { param: Spanned { value: p, span: param.span }, values })
}

/// Items separated by commas; an item in double quotes may hold commas
/// (`"groupcoo:dim=0,g=4"`).
fn list_items(inner: &str, at: usize) -> Result<Vec<Spanned<String>>, Diagnostic> {
    let mut items = Vec::new();
    let bytes = inner.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && (bytes[i] as char).is_whitespace() {
            i += 1;
        }
        if i >= bytes.len() {
            break;
        }
        let (value, span, next) = if bytes[i] == b'"' {
            let Some(len) = inner[i + 1..].find('"') else {
                return Err(Diagnostic::new("unclosed quote", Span::new(at + i, at + inner.len()))
                    .with_label("this quote is never closed"));
            };
            let value = &inner[i + 1..i + 1 + len];
            (value, Span::new(at + i, at + i + len + 2), i + len + 2)
        } else {
            let end = inner[i..].find(',').map_or(inner.len(), |e| i + e);
            let raw = inner[i..end].trim_end();
            (raw, Span::new(at + i, at + i + raw.len()), end)
        };
        if value.is_empty() {
            return Err(Diagnostic::new("empty value in the list", Span::new(at + i, at + i + 1))
                .with_label("expected a value"));
        }
        items.push(Spanned { value: value.to_string(), span });
        // After an item: spaces, then a comma or the end.
        let mut j = next;
        while j < bytes.len() && (bytes[j] as char).is_whitespace() {
            j += 1;
        }
        if j < bytes.len() {
            if bytes[j] != b',' {
                return Err(Diagnostic::new("expected `,` between values", Span::new(at + j, at + j + 1))
                    .with_label("expected `,`"));
            }
            j += 1;
        }
        i = j;
    }
    Ok(items)
}

fn check_sweep_value(param: &SweepParam, v: &Spanned<String>) -> Result<(), Diagnostic> {
    let bad = |msg: String| Diagnostic::new(msg, v.span).with_label("not a value of this sweep");
    let s = v.value.as_str();
    match param {
        SweepParam::G => match s.parse::<usize>() {
            Ok(g) if g >= 1 => Ok(()),
            _ if s == "auto" => Ok(()),
            _ => Err(bad(format!("g is a positive whole number or auto, not `{s}`"))),
        },
        SweepParam::Reduce => s.parse::<Strategy>().map(drop).map_err(|e| bad(format!("{e}, not `{s}`"))),
        SweepParam::Broadcast if ["lazy", "eager"].contains(&s) => Ok(()),
        SweepParam::Broadcast => Err(bad(format!("broadcast is lazy or eager, not `{s}`"))),
        SweepParam::Matmul if ["on", "off"].contains(&s) => Ok(()),
        SweepParam::Matmul => Err(bad(format!("matmul is on or off, not `{s}`"))),
        SweepParam::Path if ["tiles", "levels"].contains(&s) => Ok(()),
        SweepParam::Path => Err(bad(format!("path is tiles or levels, not `{s}`"))),
        SweepParam::Fusion if ["none", "maximal", "trie"].contains(&s) => Ok(()),
        SweepParam::Fusion => Err(bad(format!("fusion is none, maximal or trie, not `{s}`"))),
        SweepParam::Subsect if ["on", "off"].contains(&s) => Ok(()),
        SweepParam::Subsect => Err(bad(format!("subsect is on or off, not `{s}`"))),
        SweepParam::Strip => {
            format!("strip={s}").parse::<Schedule>().map(drop).map_err(|e| bad(e.to_string()))
        }
        SweepParam::Order => {
            format!("order={s}").parse::<Schedule>().map(drop).map_err(|e| bad(e.to_string()))
        }
        SweepParam::Tile(_) => match s.parse::<usize>() {
            Ok(n) if n.is_power_of_two() && n <= Schedule::MAX_TILE => Ok(()),
            _ => Err(bad(format!("tile sizes are powers of two up to {}, not `{s}`", Schedule::MAX_TILE))),
        },
        SweepParam::Format(_) => s.parse::<FormatSpec>().map(drop).map_err(|e| {
            bad(e.to_string()).with_note(format!("formats: {}", spindle_formats::spec::FORMAT_SYNTAX))
        }),
        SweepParam::Workspace(key) => format!("{key}={s}").parse::<Schedule>().map(drop).map_err(|e| {
            bad(e.to_string())
                .with_note(format!("schedules: {}", spindle_ir::kernel::schedule::SCHEDULE_SYNTAX))
        }),
    }
}

/// `NAME = SOURCE ...`, or `None` when the line is a statement.
fn binding_line(src: &str, line: &str, at: usize, span: Span) -> Result<Option<Binding>, Diagnostic> {
    let Some(eq) = line.find('=') else { return Ok(None) };
    let name = line[..eq].trim_end();
    // `C[m,n] = ...`, `y += ...`, `m max= ...` are statements.
    if !is_ident(name) || line[eq + 1..].starts_with('=') {
        return Ok(None);
    }
    let rhs_at = at + eq + 1;
    let rhs = &src[rhs_at..span.end];
    let words = words(rhs, rhs_at);
    let Some(&kind) = words.first() else {
        return Err(Diagnostic::new(format!("`{name} =` needs a data source"), span)
            .with_label("nothing after `=`")
            .with_note(format!("data sources: {DATA_SOURCES}")));
    };
    let name = Spanned { value: name.to_string(), span: Span::new(at, at + name.len()) };
    let args = &words[1..];
    let source = match kind.text {
        "load" => load_source(kind, args)?,
        t if t.starts_with("gen:") => {
            let (dtype, rest) = take_dtype(args)?;
            reject_extra(rest, "gen:SPEC [DTYPE]")?;
            Source::Gen { spec: generator(kind)?, dtype }
        }
        "rand" => rand_source(kind, args)?,
        "shape" => {
            let Some(dims) = args.first() else {
                return Err(Diagnostic::new("`shape` needs dimensions, e.g. `shape 64x32`", kind.span));
            };
            let (dtype, rest) = take_dtype(&args[1..])?;
            reject_extra(rest, "shape DIMS [DTYPE]")?;
            Source::Shape { dims: parse_dims(dims)?, dtype: dtype.unwrap_or(F32) }
        }
        "kernelmap" => kernel_map_source(kind, args)?,
        "cg" => {
            let keys = keys(args, &["lmax"], "cg lmax=L")?;
            let lmax = match keys.get("lmax") {
                Some((v, s)) => match v.parse::<u32>() {
                    Ok(l) if l <= 4 => l,
                    _ => return Err(Diagnostic::new("lmax is a whole number from 0 to 4", *s)),
                },
                None => return Err(Diagnostic::new("`cg` needs `lmax=L`, e.g. `cg lmax=2`", kind.span)),
            };
            Source::ClebschGordan { lmax }
        }
        // `s = A[i] * x[i]`, `s = 2 * t` and other statements.
        _ if rhs.contains(['[', '*', '+', '-', '/', '(']) || !is_ident(kind.text) => return Ok(None),
        other => {
            return Err(Diagnostic::new(format!("unknown data source `{other}`"), kind.span)
                .with_label(format!("expected {DATA_SOURCES}"))
                .with_note(CELL_SYNTAX));
        }
    };
    Ok(Some(Binding { name, source, span }))
}

const F32: ElemType = ElemType::Value(spindle_formats::DType::F32);

fn generator(w: Word<'_>) -> Result<Spanned<GeneratorSpec>, Diagnostic> {
    let spec = w.text.strip_prefix("gen:").unwrap_or(w.text);
    spec.parse::<GeneratorSpec>()
        .map(|value| Spanned { value, span: w.span })
        .map_err(|e| Diagnostic::new(e.to_string(), w.span).with_label("not a generator spec"))
}

/// An optional dtype word first among `args`.
fn take_dtype<'a, 'b>(args: &'b [Word<'a>]) -> Result<(Option<ElemType>, &'b [Word<'a>]), Diagnostic> {
    match args.first() {
        Some(w) if !w.text.contains('=') && w.text != "else" => match ElemType::parse(w.text) {
            Some(t) => Ok((Some(t), &args[1..])),
            None => Err(Diagnostic::new(format!("unknown dtype `{}`", w.text), w.span)
                .with_label("expected f64, f32, f16, bf16, i32 or i64")),
        },
        _ => Ok((None, args)),
    }
}

fn reject_extra(rest: &[Word<'_>], usage: &str) -> Result<(), Diagnostic> {
    match rest.first() {
        Some(w) => Err(Diagnostic::new(format!("unexpected `{}`", w.text), w.span)
            .with_label("not expected here")
            .with_note(format!("the form is `NAME = {usage}`"))),
        None => Ok(()),
    }
}

/// `key=value` words, each key at most once and from `allowed`.
fn keys<'a>(
    args: &[Word<'a>],
    allowed: &[&str],
    usage: &str,
) -> Result<BTreeMap<&'a str, (&'a str, Span)>, Diagnostic> {
    let mut out = BTreeMap::new();
    for w in args {
        let Some((k, v)) = w.text.split_once('=') else {
            return Err(Diagnostic::new(format!("unexpected `{}`", w.text), w.span)
                .with_label("expected key=value")
                .with_note(format!("the form is `NAME = {usage}`")));
        };
        if !allowed.contains(&k) {
            return Err(Diagnostic::new(format!("unknown key `{k}`"), w.span)
                .with_label(format!("expected {}", allowed.join(", ")))
                .with_note(format!("the form is `NAME = {usage}`")));
        }
        let value_span = Span::new(w.span.start + k.len() + 1, w.span.end);
        if out.insert(k, (v, value_span)).is_some() {
            return Err(Diagnostic::new(format!("`{k}` is given twice"), w.span));
        }
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(v: (&str, Span), what: &str) -> Result<T, Diagnostic> {
    v.0.parse::<T>()
        .map_err(|_| Diagnostic::new(format!("{what}, not `{}`", v.0), v.1).with_label("not a valid number"))
}

fn load_source(kind: Word<'_>, args: &[Word<'_>]) -> Result<Source, Diagnostic> {
    let usage = "load PATH [DTYPE] [else gen:SPEC]";
    let Some(path) = args.first().filter(|w| w.text != "else") else {
        return Err(Diagnostic::new("`load` needs a path, e.g. `load matrices/cora.mtx`", kind.span)
            .with_note(format!("the form is `NAME = {usage}`")));
    };
    let (dtype, rest) = take_dtype(&args[1..])?;
    let fallback = match rest {
        [] => None,
        [e, g] if e.text == "else" && g.text.starts_with("gen:") => Some(generator(*g)?),
        [e] if e.text == "else" => {
            return Err(Diagnostic::new("`else` needs a generator, e.g. `else gen:powerlaw:...`", e.span));
        }
        [e, g, ..] if e.text == "else" && !g.text.starts_with("gen:") => {
            return Err(Diagnostic::new(format!("`{}` is not a generator spec", g.text), g.span)
                .with_label("expected gen:KIND:key=value,..."));
        }
        _ => {
            // `else gen:SPEC extra...` or a stray word before `else`.
            let extra = if rest[0].text == "else" { rest.get(2..).unwrap_or(&[]) } else { rest };
            reject_extra(extra, usage)?;
            None
        }
    };
    Ok(Source::Load { path: Spanned { value: path.text.to_string(), span: path.span }, dtype, fallback })
}

fn rand_source(kind: Word<'_>, args: &[Word<'_>]) -> Result<Source, Diagnostic> {
    let usage = "rand DIMS [DTYPE] [seed=N] [max=M]";
    let Some(dims) = args.first() else {
        return Err(Diagnostic::new("`rand` needs dimensions, e.g. `rand 2708x64`", kind.span)
            .with_note(format!("the form is `NAME = {usage}`")));
    };
    let dims = parse_dims(dims)?;
    let (dtype, rest) = take_dtype(&args[1..])?;
    let dtype = dtype.unwrap_or(F32);
    let keys = keys(rest, &["seed", "max"], usage)?;
    let seed = keys.get("seed").map(|&v| number::<u64>(v, "the seed is a whole number")).transpose()?;
    let max = keys.get("max").map(|&v| number::<i64>(v, "max is a positive whole number")).transpose()?;
    match (dtype.is_index(), max) {
        (true, None) => {
            return Err(Diagnostic::new("index tensors need a range: add max=M (values 0..M)", kind.span)
                .with_label("rand of an index type"));
        }
        (true, Some(m)) if m <= 0 => {
            let span = keys["max"].1;
            return Err(Diagnostic::new("max is a positive whole number", span));
        }
        // Values run to max - 1, which the index type must hold.
        (true, Some(m))
            if dtype == ElemType::Index(spindle_formats::IType::I32) && m - 1 > i64::from(i32::MAX) =>
        {
            let span = keys["max"].1;
            return Err(Diagnostic::new(
                format!("i32 indices run to {}, so max is at most {}", i32::MAX, 1i64 << 31),
                span,
            )
            .with_label("past i32")
            .with_note("give the tensor i64 indices, or a smaller max"));
        }
        (false, Some(_)) => {
            let span = keys["max"].1;
            return Err(Diagnostic::new("max is for index tensors (i32, i64)", span)
                .with_label("values are drawn from ±[0.1, 1)"));
        }
        _ => {}
    }
    Ok(Source::Rand { dims, dtype, seed: seed.unwrap_or(0), max })
}

fn kernel_map_source(kind: Word<'_>, args: &[Word<'_>]) -> Result<Source, Diagnostic> {
    let usage = "kernelmap [PATH] voxel=V [kernel=K] [points=N] [seed=S] [else points=N [seed=S]]";
    let (path, rest) = match args.first() {
        Some(w) if !w.text.contains('=') && w.text != "else" => (Some(*w), &args[1..]),
        _ => (None, args),
    };
    let split = rest.iter().position(|w| w.text == "else");
    let (main, fallback) = match split {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let keys = keys(main, &["voxel", "kernel", "points", "seed"], usage)?;
    let Some(&voxel) = keys.get("voxel") else {
        return Err(Diagnostic::new("`kernelmap` needs a voxel size: voxel=0.05", kind.span)
            .with_note(format!("the form is `NAME = {usage}`")));
    };
    let voxel: f64 = number(voxel, "the voxel size is a positive number")?;
    if !(voxel.is_finite() && voxel > 0.0) {
        return Err(Diagnostic::new("the voxel size is a positive number", keys["voxel"].1));
    }
    let kernel =
        keys.get("kernel").map(|&v| number::<usize>(v, "the kernel is an odd number")).transpose()?;
    let kernel = kernel.unwrap_or(3);
    if kernel % 2 == 0 || kernel > 9 {
        let span = keys.get("kernel").map_or(kind.span, |k| k.1);
        return Err(Diagnostic::new("the kernel size is odd, from 1 to 9", span));
    }
    let seed = keys.get("seed").map(|&v| number::<u64>(v, "the seed is a whole number")).transpose()?;
    let points = keys.get("points").map(|&v| number::<usize>(v, "points is a whole number")).transpose()?;
    let fallback = match fallback {
        None => None,
        Some(words) => {
            let k = self::keys(words, &["points", "seed"], usage)?;
            let Some(&p) = k.get("points") else {
                let span = words.first().map_or(kind.span, |w| w.span);
                return Err(Diagnostic::new("`else` needs points=N (random points)", span));
            };
            let s = k.get("seed").map(|&v| number::<u64>(v, "the seed is a whole number")).transpose()?;
            Some((number::<usize>(p, "points is a whole number")?, s.or(seed).unwrap_or(0)))
        }
    };
    let cloud = match (path, points) {
        (Some(p), None) => {
            Cloud::File { path: Spanned { value: p.text.to_string(), span: p.span }, fallback }
        }
        (None, Some(n)) if fallback.is_none() => Cloud::Random { points: n, seed: seed.unwrap_or(0) },
        (Some(_), Some(_)) => {
            return Err(Diagnostic::new("give a file or points=N, not both", keys["points"].1)
                .with_note("random points stand in for a missing file with `else points=N`"));
        }
        _ => {
            return Err(Diagnostic::new("`kernelmap` needs an .xyz file or points=N", kind.span)
                .with_note(format!("the form is `NAME = {usage}`")));
        }
    };
    if let Cloud::Random { points: 0, .. } | Cloud::File { fallback: Some((0, _)), .. } = cloud {
        return Err(Diagnostic::new("points must be at least 1", kind.span));
    }
    Ok(Source::KernelMap { cloud, voxel, kernel })
}

/// `64x32`, `scalar`, `A.1x64`.
fn parse_dims(w: &Word<'_>) -> Result<Vec<Dim>, Diagnostic> {
    if w.text == "scalar" {
        return Ok(Vec::new());
    }
    let bad = |at: usize| {
        Diagnostic::new(format!("`{}` is not a list of dimensions", w.text), w.span)
            .with_label(format!("at character {}", at + 1))
            .with_note("dimensions look like 64x32, scalar, or A.1x64 (dimension 1 of A)")
    };
    let bytes = w.text.as_bytes();
    let mut dims = Vec::new();
    let mut i = 0;
    loop {
        let start = i;
        if i < bytes.len() && bytes[i].is_ascii_digit() {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            dims.push(Dim::Fixed(w.text[start..i].parse().map_err(|_| bad(start))?));
        } else {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let name = &w.text[start..i];
            if !is_ident(name) || bytes.get(i) != Some(&b'.') {
                return Err(bad(start));
            }
            i += 1;
            let d0 = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let dim = w.text[d0..i].parse().map_err(|_| bad(d0))?;
            let span = Span::new(w.span.start + start, w.span.start + i);
            dims.push(Dim::Of { tensor: name.to_string(), dim, span });
        }
        match bytes.get(i) {
            None => return Ok(dims),
            Some(b'x') => i += 1,
            Some(_) => return Err(bad(i)),
        }
    }
}

/// `NAME.D` in dimensions may only name tensors bound on an earlier line.
fn check_dims_refer_back(binding: &Binding, bound: &BTreeMap<String, Span>) -> Result<(), Diagnostic> {
    let dims = match &binding.source {
        Source::Rand { dims, .. } | Source::Shape { dims, .. } => dims,
        _ => return Ok(()),
    };
    for d in dims {
        if let Dim::Of { tensor, span, .. } = d
            && (!bound.contains_key(tensor) || *tensor == binding.name.value)
        {
            return Err(Diagnostic::new(format!("`{tensor}` is not bound above this line"), *span)
                .with_label("unknown tensor")
                .with_note("bind a tensor on an earlier line to use its dimensions"));
        }
    }
    Ok(())
}

/// The diagnostic with the cell's excerpt and a caret under its span, no
/// colour; the header names the cell's line and column (`cell:3:7`).
pub fn render(d: &Diagnostic, source: &str, name: &str) -> String {
    d.render_named(source, name, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPMM: &str = "\
# SpMM on cora
A = load matrices/cora.mtx else gen:powerlaw:rows=2708,cols=2708,nnz=10556,seed=1
B = rand A.1x64 seed=2
format A = groupcoo:dim=0,g=auto
C[m,n] += A[m,k] * B[k,n]
schedule tile.n=64 tile.p=8
sweep g in [1, 2, 4, 8, 16, 32]
sweep reduce in [atomic, accumulate]
repeats 3
";

    fn err(src: &str) -> String {
        let d = parse_cell(src).unwrap_err();
        render(&d, src, "cell")
    }

    #[test]
    fn threads_0_is_every_core_as_on_the_command_line() {
        let cell = |line: &str| parse_cell(&format!("{line}\ny[i] = x[i]\n"));
        assert_eq!(cell("threads 0").unwrap().threads, Some(spindle_c::cpu_threads()));
        assert_eq!(cell("threads 3").unwrap().threads, Some(3));
        assert!(cell("threads 4097").is_err());
    }

    #[test]
    fn a_full_cell_parses() {
        let p = parse_cell(SPMM).unwrap();
        assert_eq!(p.bindings.len(), 2);
        let Source::Load { path, fallback, dtype } = &p.bindings[0].source else { panic!() };
        assert_eq!(path.value, "matrices/cora.mtx");
        assert_eq!(&SPMM[path.span.start..path.span.end], "matrices/cora.mtx");
        assert_eq!(fallback.as_ref().unwrap().value.shape(), vec![2708, 2708]);
        assert_eq!(*dtype, None);
        let Source::Rand { dims, seed, max, .. } = &p.bindings[1].source else { panic!() };
        assert_eq!(*seed, 2);
        assert_eq!(*max, None);
        assert!(matches!(&dims[0], Dim::Of { tensor, dim: 1, .. } if tensor == "A"));
        assert_eq!(dims[1], Dim::Fixed(64));
        assert_eq!(p.formats[0].tensor.value, "A");
        assert_eq!(p.formats[0].spec.value.to_string(), "groupcoo:dim=0,g=auto");
        assert_eq!(p.statements[0].value, "C[m,n] += A[m,k] * B[k,n]");
        let s = p.statements[0].span;
        assert_eq!(&SPMM[s.start..s.end], "C[m,n] += A[m,k] * B[k,n]");
        assert_eq!(p.schedule.as_ref().unwrap().value, "tile.n=64 tile.p=8");
        assert_eq!(p.sweeps.len(), 2);
        assert_eq!(p.sweeps[0].param.value, SweepParam::G);
        let g: Vec<&str> = p.sweeps[0].values.iter().map(|v| v.value.as_str()).collect();
        assert_eq!(g, ["1", "2", "4", "8", "16", "32"]);
        let v = &p.sweeps[0].values[4];
        assert_eq!(&SPMM[v.span.start..v.span.end], "16");
        assert_eq!(p.sweeps[1].param.value.name(), "reduce");
        assert_eq!(p.repeats, Some(3));
        assert_eq!(p.threads, None);
        assert_eq!(p.resources, ResourceMode::First);
    }

    #[test]
    fn other_sources_and_quoted_sweep_values() {
        let src = "\
Map = kernelmap pointclouds/bunny.xyz voxel=0.05 kernel=3 else points=400 seed=5
R = kernelmap points=300 voxel=0.25 seed=9
CG = cg lmax=2
I = rand 100 i32 max=64 seed=3
G = gen:blocks:rows=64,cols=72,bm=8,bk=8,density=0.3,seed=3 f16
O = shape Map.0x4
s = A[i] * x[i]
sweep format.G in [csr, \"blockgroupcoo:bm=8,bk=8,g=2\"]
sweep tile.p in [8,16]
resources all
threads 2
";
        let p = parse_cell(src).unwrap();
        let Source::KernelMap { cloud: Cloud::File { path, fallback }, voxel, kernel } =
            &p.bindings[0].source
        else {
            panic!("{:?}", p.bindings[0])
        };
        assert_eq!(
            (path.value.as_str(), *fallback, *voxel, *kernel),
            ("pointclouds/bunny.xyz", Some((400, 5)), 0.05, 3)
        );
        assert_eq!(
            p.bindings[1].source,
            Source::KernelMap { cloud: Cloud::Random { points: 300, seed: 9 }, voxel: 0.25, kernel: 3 }
        );
        assert_eq!(p.bindings[2].source, Source::ClebschGordan { lmax: 2 });
        assert!(matches!(p.bindings[3].source, Source::Rand { max: Some(64), seed: 3, .. }));
        assert!(matches!(&p.bindings[4].source, Source::Gen { dtype: Some(t), .. } if t.name() == "f16"));
        assert!(matches!(&p.bindings[5].source, Source::Shape { dims, .. } if dims.len() == 2));
        assert_eq!(p.statements[0].value, "s = A[i] * x[i]");
        let f: Vec<&str> = p.sweeps[0].values.iter().map(|v| v.value.as_str()).collect();
        assert_eq!(f, ["csr", "blockgroupcoo:bm=8,bk=8,g=2"]);
        assert_eq!(p.sweeps[0].param.value, SweepParam::Format("G".into()));
        assert_eq!(p.sweeps[1].param.value, SweepParam::Tile("p".into()));
        assert_eq!((p.resources, p.threads), (ResourceMode::All, Some(2)));
    }

    #[test]
    fn errors_point_at_the_line_and_column() {
        let e = err("A = rand 10x10\nformat A = groupcoo:g=three\nC[i] = A[i,j]\n");
        assert!(e.contains("cell:2:12"), "{e}");
        assert!(e.contains("^^^^^") || e.contains("─┬─"), "{e}");
        assert!(e.contains("groupcoo"), "{e}");

        let e = err("A = rand 10x10\nC[i] = A[i,j]\nsweep g in [1, 2, x]\n");
        assert!(e.contains("g is a positive whole number or auto, not `x`"), "{e}");
        assert!(e.contains("cell:3:19"), "{e}");

        let e = err("A = random 10x10\nC[i] = A[i,j]\n");
        assert!(e.contains("unknown data source `random`"), "{e}");
        assert!(e.contains("cell:1:5"), "{e}");

        let e = err("B = rand Q.1x4\nC[i] = B[i,j]\n");
        assert!(e.contains("`Q` is not bound above this line"), "{e}");

        let e = err("A = rand 4x4\nA = rand 4x4\nC[i] = A[i,j]\n");
        assert!(e.contains("`A` is bound twice"), "{e}");
        assert!(e.contains("cell:2:1"), "{e}");

        let e = err("I = rand 10 i32\nC[i] = I[i]\n");
        assert!(e.contains("index tensors need a range"), "{e}");

        // A range past i32 is refused at its key (it failed in the backend,
        // without a line).
        let e = err("I = rand 10 i32 max=99999999999\nC[i] = I[i]\n");
        assert!(e.contains("so max is at most 2147483648") && e.contains("cell:1:21"), "{e}");

        let e = err("A = rand 4x4\nschedule tile.n=48\nC[i] = A[i,j]\n");
        assert!(e.contains("tile sizes are powers of two"), "{e}");
        assert!(e.contains("cell:2:10"), "{e}");

        let e = err("A = rand 4x4\n");
        assert!(e.contains("the cell has no statement to run"), "{e}");

        let e = err("A = rand 4x4\nsweep g in [1, 2\nC[i] = A[i,j]\n");
        assert!(e.contains("expected a list in brackets"), "{e}");

        let e = err("A = rand 4x4\nsweep g in [1]\nsweep g in [2]\nC[i] = A[i,j]\n");
        assert!(e.contains("`g` is swept twice"), "{e}");
        // One excerpt, headed by the second sweep's line, showing both lines
        // in order (a label above the one before it opened a second excerpt
        // headed by the wrong line).
        assert_eq!(e.matches("[ cell:").count(), 1, "{e}");
        assert!(e.contains("[ cell:3:7 ]"), "{e}");
        assert!(e.find("first sweep").unwrap() < e.find("second sweep").unwrap(), "{e}");

        let e = err("A = load x.mtx else nothing\nC[i] = A[i,j]\n");
        assert!(e.contains("`nothing` is not a generator spec"), "{e}");

        let e = err("A = gen:powerlaw:rows=10\nC[i] = A[i,j]\n");
        assert!(e.contains("cell:1:5"), "{e}");
    }

    #[test]
    fn nothing_panics_on_odd_input() {
        for src in [
            "",
            "\n\n",
            "=",
            "A =",
            "A = load",
            "A = rand",
            "A = rand x",
            "A = rand 3xx4",
            "A = kernelmap",
            "A = kernelmap voxel=-1",
            "A = kernelmap a.xyz points=3 voxel=1",
            "sweep",
            "sweep g",
            "sweep g in",
            "sweep g in []",
            "sweep g in [\"1",
            "sweep g in [1,,2]",
            "format",
            "format A",
            "format A = ",
            "threads",
            "threads 0",
            "repeats 1 2",
            "resources maybe",
            "A = cg lmax=99",
            "é = rand 3 ∑",
            "A = rand 3 i32 max=0",
            "A = rand 3 max=4",
        ] {
            let _ = parse_cell(src).map_err(|d| render(&d, src, "cell"));
        }
    }
}
