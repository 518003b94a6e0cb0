//! Tokens of the Einsum language, with spans.

use super::ast::Span;
use super::diagnostic::Diagnostic;

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    /// An integer literal (digits only).
    Int(u64),
    /// A literal with a fraction or exponent.
    Float(f64),
    LBracket,
    RBracket,
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
    Star,
    Slash,
    Less,
    Colon,
    Assign,
    AddAssign,
    MaxAssign,
    MinAssign,
    Where,
    Eof,
}

impl Tok {
    /// How the token reads in messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(name) => format!("`{name}`"),
            Tok::Int(n) => format!("`{n}`"),
            Tok::Float(x) => format!("`{x}`"),
            Tok::Eof => "the end of the statement".to_string(),
            other => format!("`{}`", other.text()),
        }
    }

    fn text(&self) -> &'static str {
        match self {
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::Comma => ",",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Less => "<",
            Tok::Colon => ":",
            Tok::Assign => "=",
            Tok::AddAssign => "+=",
            Tok::MaxAssign => "max=",
            Tok::MinAssign => "min=",
            Tok::Where => "where",
            Tok::Ident(_) | Tok::Int(_) | Tok::Float(_) | Tok::Eof => "",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
    /// The source text, so messages quote what was typed.
    pub text: String,
}

impl Token {
    /// How the token reads in messages: as typed.
    pub fn describe(&self) -> String {
        match self.tok {
            Tok::Eof => "the end of the statement".to_string(),
            _ => format!("`{}`", self.text),
        }
    }
}

/// Splits a statement into tokens; the last is always `Eof`.
pub fn lex(src: &str) -> Result<Vec<Token>, Diagnostic> {
    let bytes = src.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let single = match c {
            b'[' => Some(Tok::LBracket),
            b']' => Some(Tok::RBracket),
            b'(' => Some(Tok::LParen),
            b')' => Some(Tok::RParen),
            b',' => Some(Tok::Comma),
            b'-' => Some(Tok::Minus),
            b'*' => Some(Tok::Star),
            b'/' => Some(Tok::Slash),
            b'<' => Some(Tok::Less),
            b':' => Some(Tok::Colon),
            b'=' => Some(Tok::Assign),
            _ => None,
        };
        let tok = if let Some(tok) = single {
            i += 1;
            tok
        } else if c == b'+' {
            if bytes.get(i + 1) == Some(&b'=') {
                i += 2;
                Tok::AddAssign
            } else {
                i += 1;
                Tok::Plus
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &src[start..i];
            match (word, bytes.get(i)) {
                ("max", Some(b'=')) => {
                    i += 1;
                    Tok::MaxAssign
                }
                ("min", Some(b'=')) => {
                    i += 1;
                    Tok::MinAssign
                }
                ("where", _) => Tok::Where,
                _ => Tok::Ident(word.to_string()),
            }
        } else if c.is_ascii_digit() || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            number(src, &mut i)?
        } else {
            let ch = src[start..].chars().next().unwrap_or('?');
            let span = Span::new(start, start + ch.len_utf8());
            return Err(Diagnostic::new(format!("unexpected character `{ch}`"), span)
                .with_label("not part of the Einsum language"));
        };
        tokens.push(Token { tok, span: Span::new(start, i), text: src[start..i].to_string() });
    }
    tokens.push(Token { tok: Tok::Eof, span: Span::new(src.len(), src.len()), text: String::new() });
    Ok(tokens)
}

/// Digits, an optional fraction and an optional exponent.
fn number(src: &str, i: &mut usize) -> Result<Tok, Diagnostic> {
    let bytes = src.as_bytes();
    let start = *i;
    let digits = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(i);
    let mut float = false;
    if *i < bytes.len() && bytes[*i] == b'.' {
        float = true;
        *i += 1;
        digits(i);
    }
    if *i < bytes.len() && (bytes[*i] == b'e' || bytes[*i] == b'E') {
        let mut j = *i + 1;
        if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
            j += 1;
        }
        if j < bytes.len() && bytes[j].is_ascii_digit() {
            float = true;
            *i = j;
            digits(i);
        }
    }
    let text = &src[start..*i];
    let span = Span::new(start, *i);
    if float {
        text.parse::<f64>()
            .map(Tok::Float)
            .map_err(|_| Diagnostic::new(format!("`{text}` is not a number"), span))
    } else {
        // Digits beyond u64 still make a fine literal value.
        match text.parse::<u64>() {
            Ok(n) => Ok(Tok::Int(n)),
            Err(_) => text
                .parse::<f64>()
                .map(Tok::Float)
                .map_err(|_| Diagnostic::new(format!("`{text}` is not a number"), span)),
        }
    }
}
