//! A small highlighter for the printed C and CUDA: keywords, types, CUDA
//! built-ins, numbers, strings, comments and preprocessor lines, written to
//! ratatui spans. The printers emit a narrow, regular subset of C, so a
//! tokenizer of a hundred lines covers it; syntect would add grammar
//! loading and a large dependency tree to every CI build on two cores for
//! no visible gain.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

const KEYWORDS: &[&str] = &[
    "if",
    "else",
    "for",
    "while",
    "do",
    "return",
    "break",
    "continue",
    "switch",
    "case",
    "default",
    "goto",
    "sizeof",
    "typedef",
    "struct",
    "union",
    "enum",
    "static",
    "const",
    "extern",
    "inline",
    "restrict",
    "__restrict__",
    "volatile",
    "register",
    "auto",
    "_Pragma",
    "static_assert",
    "template",
    "namespace",
    "using",
    "constexpr",
];

const TYPES: &[&str] = &[
    "void",
    "char",
    "short",
    "int",
    "long",
    "float",
    "double",
    "signed",
    "unsigned",
    "bool",
    "_Bool",
    "size_t",
    "ptrdiff_t",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "half",
    "__half",
    "__half2",
    "__nv_bfloat16",
    "__nv_bfloat162",
    "_Float16",
    "float2",
    "float4",
    "int2",
    "int4",
    "dim3",
];

/// CUDA qualifiers, built-in variables and intrinsics.
const CUDA: &[&str] = &[
    "__global__",
    "__device__",
    "__host__",
    "__shared__",
    "__constant__",
    "__forceinline__",
    "__launch_bounds__",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "__syncthreads",
    "__syncwarp",
    "atomicAdd",
    "atomicMax",
    "atomicMin",
    "atomicCAS",
    "__ldg",
    "__shfl_sync",
    "__shfl_down_sync",
    "__float2half",
    "__half2float",
    "__float2bfloat16",
    "__bfloat162float",
    "wmma",
    "nvcuda",
];

/// The style of each token class.
fn style(class: Class) -> Style {
    match class {
        Class::Plain => Style::default(),
        Class::Keyword => Style::default().fg(Color::Blue).add_modifier(Modifier::BOLD),
        Class::Type => Style::default().fg(Color::Cyan),
        Class::Cuda => Style::default().fg(Color::Magenta),
        Class::Number => Style::default().fg(Color::Yellow),
        Class::String => Style::default().fg(Color::Green),
        Class::Comment => Style::default().fg(Color::DarkGray).add_modifier(Modifier::ITALIC),
        Class::Preprocessor => Style::default().fg(Color::LightMagenta),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Plain,
    Keyword,
    Type,
    Cuda,
    Number,
    String,
    Comment,
    Preprocessor,
}

/// Splits C or CUDA source into lines of classified tokens. Block comments
/// carry across lines; everything else is line-local.
pub fn tokenize(source: &str) -> Vec<Vec<(Class, String)>> {
    let mut in_comment = false;
    source.lines().map(|line| tokenize_line(line, &mut in_comment)).collect()
}

fn tokenize_line(line: &str, in_comment: &mut bool) -> Vec<(Class, String)> {
    let chars: Vec<char> = line.chars().collect();
    let mut out: Vec<(Class, String)> = Vec::new();
    let mut push = |class: Class, text: String| match out.last_mut() {
        Some((c, t)) if *c == class => t.push_str(&text),
        _ => out.push((class, text)),
    };
    let mut i = 0;
    if !*in_comment && line.trim_start().starts_with('#') {
        push(Class::Preprocessor, line.to_string());
        return out;
    }
    while i < chars.len() {
        if *in_comment {
            let start = i;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            if i < chars.len() {
                i += 2;
                *in_comment = false;
            }
            push(Class::Comment, chars[start..i].iter().collect());
            continue;
        }
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            push(Class::Comment, chars[i..].iter().collect());
            break;
        }
        if c == '/' && next == Some('*') {
            *in_comment = true;
            push(Class::Comment, "/*".into());
            i += 2;
            continue;
        }
        if c == '"' || c == '\'' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != c {
                // An escape keeps the quote after it inside the literal.
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i = (i + 1).min(chars.len());
            push(Class::String, chars[start..i].iter().collect());
            continue;
        }
        let starts_number = c.is_ascii_digit() || (c == '.' && next.is_some_and(|n| n.is_ascii_digit()));
        if starts_number {
            let start = i;
            while i < chars.len() {
                let d = chars[i];
                let exponent_sign = (d == '-' || d == '+') && matches!(chars[i - 1], 'e' | 'E' | 'p' | 'P');
                if d.is_ascii_alphanumeric() || d == '.' || exponent_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            push(Class::Number, chars[start..i].iter().collect());
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let class = if KEYWORDS.contains(&word.as_str()) {
                Class::Keyword
            } else if TYPES.contains(&word.as_str()) {
                Class::Type
            } else if CUDA.contains(&word.as_str()) {
                Class::Cuda
            } else {
                Class::Plain
            };
            push(class, word);
            continue;
        }
        push(Class::Plain, c.to_string());
        i += 1;
    }
    out
}

/// Highlighted lines with right-aligned line numbers.
pub fn highlight(source: &str) -> Vec<Line<'static>> {
    let tokens = tokenize(source);
    let width = tokens.len().max(1).to_string().len();
    let number_style = Style::default().fg(Color::DarkGray);
    tokens
        .into_iter()
        .enumerate()
        .map(|(n, line)| {
            let mut spans = vec![Span::styled(format!("{:>width$} ", n + 1), number_style)];
            spans.extend(line.into_iter().map(|(class, text)| Span::styled(text, style(class))));
            Line::from(spans)
        })
        .collect()
}

/// An Einsum statement with tensor names, operators and numbers coloured.
pub fn einsum_line(statement: &str) -> Line<'static> {
    let chars: Vec<char> = statement.chars().collect();
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // A name followed by '[' is a tensor; the rest are indices and functions.
            let style = if chars.get(i) == Some(&'[') {
                Style::default().fg(Color::Cyan).add_modifier(Modifier::BOLD)
            } else {
                Style::default()
            };
            spans.push(Span::styled(word, style));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            spans.push(Span::styled(chars[start..i].iter().collect::<String>(), style(Class::Number)));
        } else if "=+-*/<>".contains(c) {
            while i < chars.len() && "=+-*/<>".contains(chars[i]) {
                i += 1;
            }
            let op: String = chars[start..i].iter().collect();
            spans.push(Span::styled(op, Style::default().fg(Color::Yellow)));
        } else {
            i += 1;
            spans.push(Span::raw(c.to_string()));
        }
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(line: &str) -> Vec<(Class, String)> {
        tokenize(line).into_iter().next().unwrap_or_default()
    }

    #[test]
    fn keywords_types_numbers_and_cuda() {
        let t =
            classes("__global__ void k(const float* a) { for (int i = 0; i < 1.5e-3f; i++) a[i] = 0x1F; }");
        let find = |w: &str| t.iter().find(|(_, s)| s == w).map(|(c, _)| *c);
        assert_eq!(find("__global__"), Some(Class::Cuda));
        assert_eq!(find("void"), Some(Class::Type));
        assert_eq!(find("const"), Some(Class::Keyword));
        assert_eq!(find("for"), Some(Class::Keyword));
        assert_eq!(find("1.5e-3f"), Some(Class::Number));
        assert_eq!(find("0x1F"), Some(Class::Number));
        // Identifiers that merely contain a digit are not numbers.
        let t = classes("x1 = y2;");
        assert_eq!(t[0], (Class::Plain, "x1 = y2;".into()));
    }

    #[test]
    fn comments_strings_and_preprocessor() {
        let lines = tokenize(
            "#include <omp.h>\nint a; // done \"x\"\n/* one\ntwo */ int b = 'c';\nchar* s = \"a\\\"b\";",
        );
        assert_eq!(lines[0], vec![(Class::Preprocessor, "#include <omp.h>".into())]);
        assert_eq!(lines[1].last().unwrap(), &(Class::Comment, "// done \"x\"".into()));
        assert_eq!(lines[2], vec![(Class::Comment, "/* one".into())]);
        assert_eq!(lines[3][0], (Class::Comment, "two */".into()));
        assert!(lines[3].contains(&(Class::String, "'c'".into())));
        assert!(lines[4].contains(&(Class::String, "\"a\\\"b\"".into())));
    }

    #[test]
    fn numbered_lines_keep_the_text() {
        let lines = highlight("int a;\nreturn a;");
        let text: Vec<String> =
            lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect();
        assert_eq!(text, ["1 int a;", "2 return a;"]);
        assert_eq!(lines[1].spans[1].style, style(Class::Keyword));
    }

    #[test]
    fn einsum_tensors_and_operators() {
        let line = einsum_line("C[AM[p],n] += AV[p] * 2");
        let styled: Vec<(&str, Option<Color>)> =
            line.spans.iter().map(|s| (s.content.as_ref(), s.style.fg)).collect();
        assert!(styled.contains(&("C", Some(Color::Cyan))));
        assert!(styled.contains(&("AM", Some(Color::Cyan))));
        assert!(styled.contains(&("p", None)), "an index is plain");
        assert!(styled.contains(&("+=", Some(Color::Yellow))));
        assert!(styled.contains(&("2", Some(Color::Yellow))));
    }
}
