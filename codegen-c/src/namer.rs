//! Legal, unique C and CUDA C++ identifiers for user names, shared by both
//! printers ([`Names`]).
//!
//! Tensor and index names come from the user: `int`, `float`, `_X`, `x__y`
//! or `threadIdx` are all possible Einsum names. Every identifier made from
//! a user name is a fixed prefix plus the name *sanitized*: characters
//! outside `[A-Za-z0-9_]` become `_`, runs of `_` collapse to one and
//! leading and trailing `_` go. So no such identifier is a keyword, starts
//! with an underscore or holds a double underscore (C++ reserves both). The
//! printer's own names (`e`, `k`, `acc`, `warp`, ...) never start with a
//! prefix the namer uses, and two user names that sanitize alike get `_2`,
//! `_3`, ... suffixes.

use std::collections::HashSet;

use spindle_ir::kernel::{AxisId, Kernel, Op, SecondaryMap, TensorId, ValueId};

/// The identifiers of a kernel's tensors (`prefix` and the sanitized
/// name), axes (the sanitized name; loop variables add `i_` and `t_`) and
/// values (`v3`, or `v3_B` for a load of B), and the namer that handed them
/// out, for a printer's further names.
#[derive(Debug)]
pub struct Names {
    pub tensors: SecondaryMap<TensorId, String>,
    pub axes: SecondaryMap<AxisId, String>,
    pub values: SecondaryMap<ValueId, String>,
    pub namer: Namer,
}

impl Names {
    pub fn new(k: &Kernel, tensor_prefix: &str) -> Names {
        let mut namer = Namer::default();
        let tensors = k.tensors.iter().map(|(id, t)| (id, namer.fresh(tensor_prefix, &t.name))).collect();
        let axes = k.axes.iter().map(|(id, a)| (id, namer.fresh("", &a.name))).collect();
        let values = k
            .values
            .iter()
            .map(|(id, v)| {
                let i = id.as_u32();
                let name = match &v.op {
                    Op::Load { tensor, .. } => format!("v{i}_{}", sanitize(&k.tensor(*tensor).name)),
                    _ => format!("v{i}"),
                };
                (id, name)
            })
            .collect();
        Names { tensors, axes, values, namer }
    }
}

/// Hands out identifiers, each once.
#[derive(Debug, Default)]
pub struct Namer {
    used: HashSet<String>,
}

impl Namer {
    /// `prefix` followed by `user` sanitized, made unique.
    pub fn fresh(&mut self, prefix: &str, user: &str) -> String {
        let base = format!("{prefix}{}", sanitize(user));
        let mut name = base.clone();
        let mut n = 2;
        while !self.used.insert(name.clone()) {
            name = format!("{base}_{n}");
            n += 1;
        }
        name
    }
}

/// `[A-Za-z0-9]` runs joined by single underscores; `x` when nothing is left.
pub fn sanitize(user: &str) -> String {
    let mut out = String::with_capacity(user.len());
    for c in user.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '_' };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() { "x".to_string() } else { out }
}

/// Whether `symbol` can name an `extern "C"` kernel: an identifier that is
/// not reserved (no leading underscore, no double underscore) and not a
/// keyword.
pub fn valid_symbol(symbol: &str) -> bool {
    let mut chars = symbol.chars();
    let Some(first) = chars.next() else { return false };
    (first.is_ascii_alphabetic())
        && symbol.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !symbol.contains("__")
        && !KEYWORDS.contains(&symbol)
}

/// C++17 keywords and the CUDA names a kernel symbol must not take.
const KEYWORDS: &[&str] = &[
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char16_t",
    "char32_t",
    "class",
    "compl",
    "const",
    "constexpr",
    "const_cast",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "main",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizes_reserved_shapes() {
        assert_eq!(sanitize("int"), "int");
        assert_eq!(sanitize("_X"), "X");
        assert_eq!(sanitize("x__y_"), "x_y");
        assert_eq!(sanitize("___"), "x");
        assert_eq!(sanitize("a-b"), "a_b");
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        let mut n = Namer::default();
        assert_eq!(n.fresh("g_", "int"), "g_int");
        assert_eq!(n.fresh("g_", "_int"), "g_int_2");
        assert_eq!(n.fresh("g_", "int_2"), "g_int_2_2");
        assert_eq!(n.fresh("g_", "float"), "g_float");
    }

    #[test]
    fn symbols_are_checked() {
        assert!(valid_symbol("spindle_kernel"));
        assert!(!valid_symbol("int"));
        assert!(!valid_symbol("_k"));
        assert!(!valid_symbol("a__b"));
        assert!(!valid_symbol("9k"));
        assert!(!valid_symbol(""));
        assert!(!valid_symbol("k-1"));
    }
}
