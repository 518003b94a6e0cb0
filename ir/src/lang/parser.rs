//! A recursive-descent parser from statement text to the syntax tree. Every
//! failure is a [`Diagnostic`] pointing at the token where the grammar could
//! not go on, saying what it expected there.

use super::ast::*;
use super::diagnostic::Diagnostic;
use super::lexer::{Tok, Token, lex};

/// Nesting deeper than this is refused, so no input can overflow the stack.
const MAX_DEPTH: usize = 64;

/// Parses one statement, which may end in `;` as each of a program's does.
pub fn parse(src: &str) -> Result<Statement, Diagnostic> {
    // The text before the `;` keeps every span where it was.
    let tokens = lex(src.trim_end().strip_suffix(';').unwrap_or(src))?;
    let mut p = Parser { tokens, at: 0, depth: 0 };
    p.statement()
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        &self.tokens[(self.at + ahead).min(self.tokens.len() - 1)].tok
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if t.tok != Tok::Eof {
            self.at += 1;
        }
        t
    }

    fn eat(&mut self, tok: &Tok) -> Option<Span> {
        (self.peek().tok == *tok).then(|| self.bump().span)
    }

    /// A diagnostic at the current token: "expected X, found Y".
    fn expected(&self, what: &str, context: &str) -> Diagnostic {
        let t = self.peek();
        Diagnostic::new(format!("expected {what} {context}, found {}", t.describe()), t.span)
            .with_label(format!("expected {what}"))
    }

    fn expect(&mut self, tok: Tok, context: &str) -> Result<Span, Diagnostic> {
        match self.eat(&tok) {
            Some(span) => Ok(span),
            None => Err(self.expected(&tok.describe(), context)),
        }
    }

    fn ident(&mut self, what: &str, context: &str) -> Result<Ident, Diagnostic> {
        match &self.peek().tok {
            Tok::Ident(name) => {
                let name = name.clone();
                let span = self.bump().span;
                Ok(Ident { name, span })
            }
            _ => Err(self.expected(what, context)),
        }
    }

    fn enter(&mut self) -> Result<(), Diagnostic> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let span = self.peek().span;
            return Err(Diagnostic::new(format!("nesting deeper than {MAX_DEPTH} levels"), span));
        }
        Ok(())
    }

    fn statement(&mut self) -> Result<Statement, Diagnostic> {
        if self.peek().tok == Tok::Eof {
            return Err(self.expected("a tensor name", "to start the statement"));
        }
        let lhs = self.access("the left-hand side")?;
        let op_token = self.bump();
        let op = match &op_token.tok {
            Tok::Assign => AssignOp::Assign,
            Tok::AddAssign => AssignOp::AddAssign,
            Tok::MaxAssign => AssignOp::MaxAssign,
            Tok::MinAssign => AssignOp::MinAssign,
            _ => {
                return Err(Diagnostic::new(
                    format!(
                        "expected `=`, `+=`, `max=` or `min=` after the left-hand side, found {}",
                        op_token.describe()
                    ),
                    op_token.span,
                )
                .with_label("expected an assignment"));
            }
        };
        if self.peek().tok == Tok::Eof {
            return Err(self.expected("an expression", "after the assignment"));
        }
        let rhs = self.expr()?;
        let mut wheres = Vec::new();
        if self.eat(&Tok::Where).is_some() {
            loop {
                wheres.push(self.where_clause()?);
                if self.eat(&Tok::Comma).is_none() {
                    break;
                }
            }
        }
        if self.peek().tok != Tok::Eof {
            let (what, after) = match wheres.is_empty() {
                true => ("an operator or `where`", "after the right-hand side"),
                false => ("`,` or the end", "after a `where` clause"),
            };
            return Err(self.expected(what, after));
        }
        let end = self.tokens.last().map_or(0, |t| t.span.end);
        Ok(Statement { span: Span::new(lhs.span.start, end), lhs, op, op_span: op_token.span, rhs, wheres })
    }

    fn where_clause(&mut self) -> Result<WhereClause, Diagnostic> {
        let name = self.ident("an index or tensor name", "in the `where` clause")?;
        if self.eat(&Tok::Less).is_some() {
            let t = self.bump();
            // Digits past u64 lex as a float.
            if let Tok::Float(f) = t.tok
                && f.fract() == 0.0
                && f >= u64::MAX as f64
            {
                return Err(Diagnostic::new(
                    format!("the extent of `{}` is too large: {} is past 2^64", name.name, t.describe()),
                    t.span,
                )
                .with_label("too large"));
            }
            let Tok::Int(n) = t.tok else {
                return Err(Diagnostic::new(
                    format!(
                        "expected an extent (an integer) after `{} <`, found {}",
                        name.name,
                        t.describe()
                    ),
                    t.span,
                )
                .with_label("expected an integer"));
            };
            let extent = usize::try_from(n).unwrap_or(usize::MAX);
            return Ok(WhereClause::Extent { span: name.span.to(t.span), index: name, extent });
        }
        if self.eat(&Tok::Colon).is_some() {
            let t = self.bump();
            let dtype = match &t.tok {
                Tok::Ident(word) => ElemType::parse(word),
                _ => None,
            };
            let Some(dtype) = dtype else {
                return Err(Diagnostic::new(
                    format!(
                        "expected a dtype (f64, f32, f16, bf16, i32, i64) after `{}:`, found {}",
                        name.name,
                        t.describe()
                    ),
                    t.span,
                )
                .with_label("expected a dtype"));
            };
            return Ok(WhereClause::Dtype { span: name.span.to(t.span), tensor: name, dtype });
        }
        Err(self.expected(
            "`<` (an extent) or `:` (a dtype)",
            &format!("after `{}` in the `where` clause", name.name),
        ))
    }

    /// `NAME` or `NAME[subscript, ...]`.
    fn access(&mut self, context: &str) -> Result<Access, Diagnostic> {
        let tensor = self.ident("a tensor name", &format!("in {context}"))?;
        let mut subscripts = Vec::new();
        let mut end = tensor.span;
        if self.eat(&Tok::LBracket).is_some() {
            self.enter()?;
            if let Some(span) = self.eat(&Tok::RBracket) {
                end = span;
            } else {
                loop {
                    subscripts.push(self.subscript(&tensor.name)?);
                    if self.eat(&Tok::Comma).is_some() {
                        continue;
                    }
                    end =
                        self.expect(Tok::RBracket, &format!("to close the subscripts of `{}`", tensor.name))?;
                    break;
                }
            }
            self.depth -= 1;
        }
        Ok(Access { span: tensor.span.to(end), tensor, subscripts })
    }

    /// An affine combination: `2*i + p - 1`, `X[p]`, `bm*AM[p] + i`.
    fn subscript(&mut self, tensor: &str) -> Result<Subscript, Diagnostic> {
        let start = self.peek().span;
        let context = format!("in a subscript of `{tensor}`");
        let mut terms = Vec::new();
        let mut offset: i64 = 0;
        let mut sign: i64 = if self.eat(&Tok::Minus).is_some() { -1 } else { 1 };
        loop {
            let term_start = self.peek().span;
            match self.peek().tok.clone() {
                Tok::Int(n) => {
                    self.bump();
                    let n = self.int(n, term_start)?;
                    if self.eat(&Tok::Star).is_some() {
                        let atom = self.atom(&context)?;
                        let span = term_start.to(self.prev_span());
                        terms.push(Term { coeff: sign * n, atom, span });
                    } else {
                        offset = offset.checked_add(sign * n).ok_or_else(|| overflow(term_start))?;
                    }
                }
                Tok::Ident(_) => {
                    let atom = self.atom(&context)?;
                    let mut coeff = sign;
                    if self.eat(&Tok::Star).is_some() {
                        let t = self.bump();
                        if too_large(&t.tok) {
                            return Err(overflow(t.span));
                        }
                        let Tok::Int(n) = t.tok else {
                            return Err(Diagnostic::new(
                                format!(
                                    "expected an integer coefficient after `*` {context}, found {}",
                                    t.describe()
                                ),
                                t.span,
                            )
                            .with_label("subscripts are affine: only integer coefficients"));
                        };
                        coeff *= self.int(n, t.span)?;
                    }
                    terms.push(Term { coeff, atom, span: term_start.to(self.prev_span()) });
                }
                ref t if too_large(t) => return Err(overflow(term_start)),
                _ => return Err(self.expected("an index, an integer or an index tensor", &context)),
            }
            sign = match self.peek().tok {
                Tok::Plus => 1,
                Tok::Minus => -1,
                _ => break,
            };
            self.bump();
        }
        Ok(Subscript { terms, offset, span: start.to(self.prev_span()) })
    }

    fn int(&self, n: u64, span: Span) -> Result<i64, Diagnostic> {
        i64::try_from(n).map_err(|_| overflow(span))
    }

    fn prev_span(&self) -> Span {
        self.tokens[self.at.saturating_sub(1)].span
    }

    /// An index variable, or an indirect access when followed by `[`.
    fn atom(&mut self, context: &str) -> Result<Atom, Diagnostic> {
        if matches!(self.peek_at(1), Tok::LBracket) {
            Ok(Atom::Indirect(Box::new(self.access(context)?)))
        } else {
            Ok(Atom::Index(self.ident("an index", context)?))
        }
    }

    fn expr(&mut self) -> Result<Expr, Diagnostic> {
        self.enter()?;
        let mut lhs = self.product()?;
        while let Some(op) = match self.peek().tok {
            Tok::Plus => Some(BinOp::Add),
            Tok::Minus => Some(BinOp::Sub),
            _ => None,
        } {
            self.bump();
            let rhs = self.product()?;
            let span = lhs.span().to(rhs.span());
            lhs = Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs), span };
        }
        self.depth -= 1;
        Ok(lhs)
    }

    fn product(&mut self) -> Result<Expr, Diagnostic> {
        let mut lhs = self.unary()?;
        while let Some(op) = match self.peek().tok {
            Tok::Star => Some(BinOp::Mul),
            Tok::Slash => Some(BinOp::Div),
            _ => None,
        } {
            self.bump();
            let rhs = self.unary()?;
            let span = lhs.span().to(rhs.span());
            lhs = Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs), span };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, Diagnostic> {
        if let Some(minus) = self.eat(&Tok::Minus) {
            self.enter()?;
            let expr = self.unary()?;
            self.depth -= 1;
            let span = minus.to(expr.span());
            return Ok(Expr::Neg { expr: Box::new(expr), span });
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, Diagnostic> {
        let t = self.peek().clone();
        match t.tok {
            Tok::Int(n) => {
                self.bump();
                Ok(Expr::Literal { value: n as f64, span: t.span })
            }
            Tok::Float(x) => {
                self.bump();
                Ok(Expr::Literal { value: x, span: t.span })
            }
            Tok::LParen => {
                self.bump();
                let inner = self.expr()?;
                self.expect(Tok::RParen, "to close the parenthesis")?;
                Ok(inner)
            }
            Tok::Ident(ref name) if matches!(self.peek_at(1), Tok::LParen) => {
                let Some(func) = Func::from_name(name) else {
                    let known: Vec<&str> = Func::ALL.iter().map(|f| f.name()).collect();
                    return Err(Diagnostic::new(format!("unknown function `{name}`"), t.span)
                        .with_label("not a function")
                        .with_note(format!("functions: {}", known.join(", "))));
                };
                self.bump();
                self.bump();
                self.enter()?;
                let mut args = Vec::new();
                if self.peek().tok != Tok::RParen {
                    loop {
                        args.push(self.expr()?);
                        if self.eat(&Tok::Comma).is_none() {
                            break;
                        }
                    }
                }
                let close = self.expect(Tok::RParen, &format!("to close the arguments of `{name}`"))?;
                self.depth -= 1;
                let span = t.span.to(close);
                if args.len() != func.arity() {
                    return Err(Diagnostic::new(
                        format!(
                            "`{name}` takes {} argument{}, found {}",
                            func.arity(),
                            if func.arity() == 1 { "" } else { "s" },
                            args.len()
                        ),
                        span,
                    ));
                }
                Ok(Expr::Call { func, args, span })
            }
            Tok::Ident(_) => Ok(Expr::Access(self.access("the right-hand side")?)),
            _ => Err(self.expected("a tensor, a number, a function or `(`", "in the expression")),
        }
    }
}

/// Digits past u64 lex as a float: a whole one past i64 is an integer
/// too large for a subscript, not a missing one.
fn too_large(t: &Tok) -> bool {
    matches!(t, Tok::Float(x) if x.fract() == 0.0 && x.abs() >= i64::MAX as f64)
}

fn overflow(span: Span) -> Diagnostic {
    Diagnostic::new("integer in a subscript is too large", span).with_label("out of the i64 range")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(src: &str, printed: &str) {
        let s = parse(src).unwrap_or_else(|d| panic!("{src}: {}", d.render(src, false)));
        assert_eq!(s.to_string(), printed);
        assert_eq!(parse(printed).unwrap().to_string(), printed);
    }

    #[test]
    fn statements_print_back() {
        round_trip("C[m,n] += A[m,k] * B[k,n]", "C[m,n] += A[m,k] * B[k,n]");
        round_trip("C[AM[p],n] += AV[p,q]*B[AK[p,q],n]", "C[AM[p],n] += AV[p,q] * B[AK[p,q],n]");
        round_trip(
            "O[i,j] += I[2*i+p-1, j+q] * F[p,q] where p < 3, q<3",
            "O[i,j] += I[2*i+p-1,j+q] * F[p,q] where p < 3, q < 3",
        );
        round_trip("Y[i] = A[X[p, Y2[q]], i]", "Y[i] = A[X[p,Y2[q]],i]");
        round_trip(
            "y[i] max= -x[i] / (a[i] - b[i]) + exp(relu(z[i]))",
            "y[i] max= -x[i] / (a[i] - b[i]) + exp(relu(z[i]))",
        );
        round_trip("s min= max(a[i], 2.5) where a: f16", "s min= max(a[i], 2.5) where a: f16");
        round_trip("C[i] = s*2 + A[i - 3] where s: f16", "C[i] = s * 2 + A[i-3] where s: f16");
        round_trip("C[4*AM[p]+i, n] = A[-i+1, 0]", "C[4*AM[p]+i,n] = A[-i+1,0]");
        // One statement may end in `;`, as a program's do; a second `;` is
        // still a stray character, at its place.
        round_trip("C[m,n] += A[m,k] * B[k,n] ; ", "C[m,n] += A[m,k] * B[k,n]");
        let stray = parse("C[i] = A[i];;").unwrap_err();
        assert_eq!((stray.span.start, stray.span.end), (11, 12), "{}", stray.message);
    }

    #[test]
    fn affine_terms_keep_coefficients() {
        let s = parse("O[i] = I[2*i - 3*p + 4 - 1]").unwrap();
        let sub = &s.rhs.accesses()[0].subscripts[0];
        let coeffs: Vec<i64> = sub.terms.iter().map(|t| t.coeff).collect();
        assert_eq!(coeffs, vec![2, -3]);
        assert_eq!(sub.offset, 3);
    }

    fn error(src: &str) -> String {
        parse(src).unwrap_err().message
    }

    #[test]
    fn syntax_errors_say_what_was_expected() {
        assert_eq!(
            error(""),
            "expected a tensor name to start the statement, found the end of the statement"
        );
        assert_eq!(
            error("C[i] A[i]"),
            "expected `=`, `+=`, `max=` or `min=` after the left-hand side, found `A`"
        );
        assert_eq!(
            error("C[i] ="),
            "expected an expression after the assignment, found the end of the statement"
        );
        assert_eq!(error("C[i = A[i]"), "expected `]` to close the subscripts of `C`, found `=`");
        assert_eq!(
            error("C[] = A[i,]"),
            "expected an index, an integer or an index tensor in a subscript of `A`, found `]`"
        );
        assert_eq!(
            error("C[i] = A[i*j]"),
            "expected an integer coefficient after `*` in a subscript of `A`, found `j`"
        );
        assert_eq!(
            error("C[i] = A[i] B[i]"),
            "expected an operator or `where` after the right-hand side, found `B`"
        );
        assert_eq!(
            error("C[i] = (A[i]"),
            "expected `)` to close the parenthesis, found the end of the statement"
        );
        assert_eq!(error("C[i] = foo(A[i])"), "unknown function `foo`");
        assert_eq!(error("C[i] = max(A[i])"), "`max` takes 2 arguments, found 1");
        assert_eq!(
            error("C[i] = A[i] where i"),
            "expected `<` (an extent) or `:` (a dtype) after `i` in the `where` clause, found the end of the statement"
        );
        assert_eq!(
            error("C[i] = A[i] where i < x"),
            "expected an extent (an integer) after `i <`, found `x`"
        );
        assert_eq!(
            error("C[i] = A[i] where A: f8"),
            "expected a dtype (f64, f32, f16, bf16, i32, i64) after `A:`, found `f8`"
        );
        assert_eq!(
            error("C[i] = A[i] where i < 3 j < 2"),
            "expected `,` or the end after a `where` clause, found `j`"
        );
        assert_eq!(error("C[i] = A[i] $"), "unexpected character `$`");
        assert_eq!(error("C[i] = A[99999999999999999999]"), "integer in a subscript is too large");
        assert_eq!(error("C[i] = A[i-99999999999999999999]"), "integer in a subscript is too large");
        assert_eq!(error("C[i] = A[i*99999999999999999999]"), "integer in a subscript is too large");
        assert_eq!(error("C[i] = A[9223372036854775808]"), "integer in a subscript is too large");
        assert_eq!(
            error("C[i] = +A[i]"),
            "expected a tensor, a number, a function or `(` in the expression, found `+`"
        );
    }

    #[test]
    fn errors_point_at_the_offending_token() {
        let src = "C[m,n] += A[m,k] ** B[k,n]";
        let d = parse(src).unwrap_err();
        assert_eq!(&src[d.span.start..d.span.end], "*");
        assert_eq!(d.span.start, 18);
        let rendered = d.render(src, false);
        assert!(rendered.contains("C[m,n] += A[m,k] ** B[k,n]"), "{rendered}");
        assert!(rendered.contains('^') || rendered.contains('─'), "{rendered}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let src = format!("C[i] = {}A[i]{}", "(".repeat(500), ")".repeat(500));
        assert_eq!(error(&src), "nesting deeper than 64 levels");
        let src = format!("C[i] = {}A[i]", "-".repeat(500));
        assert_eq!(error(&src), "nesting deeper than 64 levels");
        let src = format!("C[i] = A[{}i{}]", "X[".repeat(500), "]".repeat(500));
        assert_eq!(error(&src), "nesting deeper than 64 levels");
    }
}
