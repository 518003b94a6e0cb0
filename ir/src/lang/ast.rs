//! The syntax tree of an Einsum statement, with byte spans into the source
//! so every diagnostic can point at the offending text.
//!
//! ```text
//! statement := access op expr [ "where" clause ("," clause)* ]
//! op        := "=" | "+=" | "max=" | "min="
//! access    := NAME [ "[" subscript ("," subscript)* "]" ]
//! subscript := ["-"] term (("+" | "-") term)*          -- affine
//! term      := INT | INT "*" atom | atom ["*" INT] | atom
//! atom      := NAME                                      -- an index variable
//!            | NAME "[" subscript, ... "]"               -- indirect: an integer tensor
//! expr      := sum of products of unary "-", literals, accesses, calls, "(" expr ")"
//! call      := ("exp" | "relu" | "sigmoid" | "sqrt" | "abs" | "max" | "min") "(" expr, ... ")"
//! clause    := NAME "<" INT                               -- the extent of an index
//!            | NAME ":" DTYPE                             -- f64 f32 f16 bf16 i32 i64
//! ```

use std::fmt;

use spindle_formats::{DType, IType};

/// Byte offsets `start..end` into the statement text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AssignOp {
    /// `=`: the output starts at zero, contributions are summed.
    Assign,
    /// `+=`: contributions are added to the output's values.
    AddAssign,
    /// `max=`: an output given data keeps the maximum of its value and its
    /// contributions; one given none holds the maximum of its contributions
    /// alone, and 0 where none reaches it (an empty row or segment).
    MaxAssign,
    /// `min=`: as `max=`, the minimum.
    MinAssign,
}

impl AssignOp {
    pub fn as_str(self) -> &'static str {
        match self {
            AssignOp::Assign => "=",
            AssignOp::AddAssign => "+=",
            AssignOp::MaxAssign => "max=",
            AssignOp::MinAssign => "min=",
        }
    }
}

/// The element type of a tensor: values or indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    Value(DType),
    Index(IType),
}

impl ElemType {
    pub fn name(self) -> &'static str {
        match self {
            ElemType::Value(d) => d.name(),
            ElemType::Index(i) => i.name(),
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "f64" => ElemType::Value(DType::F64),
            "f32" => ElemType::Value(DType::F32),
            "f16" => ElemType::Value(DType::F16),
            "bf16" => ElemType::Value(DType::Bf16),
            "i32" => ElemType::Index(IType::I32),
            "i64" => ElemType::Index(IType::I64),
            _ => return None,
        })
    }

    pub fn is_index(self) -> bool {
        matches!(self, ElemType::Index(_))
    }

    /// Bytes of one element.
    pub fn size_bytes(self) -> usize {
        match self {
            ElemType::Value(d) => d.size_bytes(),
            ElemType::Index(i) => i.size_bytes(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum WhereClause {
    /// `p < 3`
    Extent { index: Ident, extent: usize, span: Span },
    /// `A: f16`
    Dtype { tensor: Ident, dtype: ElemType, span: Span },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    pub lhs: Access,
    pub op: AssignOp,
    pub op_span: Span,
    pub rhs: Expr,
    pub wheres: Vec<WhereClause>,
    pub span: Span,
}

impl Statement {
    /// Every access of the statement: the output, the right-hand side's,
    /// and the index tensors read inside any subscript (recursively).
    pub fn all_accesses(&self) -> Vec<&Access> {
        let mut out: Vec<&Access> = std::iter::once(&self.lhs).chain(self.rhs.accesses()).collect();
        let mut next = 0;
        while let Some(&access) = out.get(next) {
            next += 1;
            for term in access.subscripts.iter().flat_map(|s| &s.terms) {
                if let Atom::Indirect(inner) = &term.atom {
                    out.push(inner);
                }
            }
        }
        out
    }
}

/// `A[s0, s1, ...]`; a tensor of rank 0 has no subscripts.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub tensor: Ident,
    pub subscripts: Vec<Subscript>,
    pub span: Span,
}

/// An affine subscript: Σ coeff·atom + offset.
#[derive(Clone, Debug, PartialEq)]
pub struct Subscript {
    pub terms: Vec<Term>,
    pub offset: i64,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    pub coeff: i64,
    pub atom: Atom,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Atom {
    /// An index variable.
    Index(Ident),
    /// A read of an integer tensor: `X[p, Y[q]]`.
    Indirect(Box<Access>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinOp {
    /// `a op b` in f64 (division by zero as IEEE says).
    pub fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            BinOp::Div => a / b,
        }
    }

    pub fn symbol(self) -> char {
        match self {
            BinOp::Add => '+',
            BinOp::Sub => '-',
            BinOp::Mul => '*',
            BinOp::Div => '/',
        }
    }

    fn precedence(self) -> u8 {
        match self {
            BinOp::Add | BinOp::Sub => 1,
            BinOp::Mul | BinOp::Div => 2,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    Exp,
    Relu,
    Sigmoid,
    Sqrt,
    Abs,
    Max,
    Min,
}

impl Func {
    pub const ALL: [Func; 7] =
        [Func::Exp, Func::Relu, Func::Sigmoid, Func::Sqrt, Func::Abs, Func::Max, Func::Min];

    pub fn name(self) -> &'static str {
        match self {
            Func::Exp => "exp",
            Func::Relu => "relu",
            Func::Sigmoid => "sigmoid",
            Func::Sqrt => "sqrt",
            Func::Abs => "abs",
            Func::Max => "max",
            Func::Min => "min",
        }
    }

    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }

    pub fn arity(self) -> usize {
        match self {
            Func::Max | Func::Min => 2,
            _ => 1,
        }
    }

    /// Applies the function to f64 arguments (`args.len() == arity`).
    pub fn apply(self, args: &[f64]) -> f64 {
        match self {
            Func::Exp => args[0].exp(),
            Func::Relu => args[0].max(0.0),
            Func::Sigmoid => 1.0 / (1.0 + (-args[0]).exp()),
            Func::Sqrt => args[0].sqrt(),
            Func::Abs => args[0].abs(),
            Func::Max => args[0].max(args[1]),
            Func::Min => args[0].min(args[1]),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Literal { value: f64, span: Span },
    Access(Access),
    Neg { expr: Box<Expr>, span: Span },
    Binary { op: BinOp, lhs: Box<Expr>, rhs: Box<Expr>, span: Span },
    Call { func: Func, args: Vec<Expr>, span: Span },
}

impl Expr {
    pub fn span(&self) -> Span {
        match self {
            Expr::Literal { span, .. }
            | Expr::Neg { span, .. }
            | Expr::Binary { span, .. }
            | Expr::Call { span, .. } => *span,
            Expr::Access(a) => a.span,
        }
    }

    /// Every tensor access in the expression, outermost first (indirect
    /// accesses inside subscripts are not included).
    pub fn accesses(&self) -> Vec<&Access> {
        let mut out = Vec::new();
        self.visit_accesses(&mut |a| out.push(a));
        out
    }

    /// Calls `f` on every tensor access in the expression, outermost first,
    /// as [`Expr::accesses`] lists them.
    pub fn for_each_access_mut(&mut self, f: &mut impl FnMut(&mut Access)) {
        match self {
            Expr::Literal { .. } => {}
            Expr::Access(a) => f(a),
            Expr::Neg { expr, .. } => expr.for_each_access_mut(f),
            Expr::Binary { lhs, rhs, .. } => {
                lhs.for_each_access_mut(f);
                rhs.for_each_access_mut(f);
            }
            Expr::Call { args, .. } => args.iter_mut().for_each(|a| a.for_each_access_mut(f)),
        }
    }

    fn visit_accesses<'a>(&'a self, f: &mut impl FnMut(&'a Access)) {
        match self {
            Expr::Literal { .. } => {}
            Expr::Access(a) => f(a),
            Expr::Neg { expr, .. } => expr.visit_accesses(f),
            Expr::Binary { lhs, rhs, .. } => {
                lhs.visit_accesses(f);
                rhs.visit_accesses(f);
            }
            Expr::Call { args, .. } => args.iter().for_each(|a| a.visit_accesses(f)),
        }
    }
}

impl Subscript {
    /// The index variable when the subscript is exactly one, like `i`.
    pub fn as_index(&self) -> Option<&Ident> {
        match &self.terms[..] {
            [Term { coeff: 1, atom: Atom::Index(ident), .. }] if self.offset == 0 => Some(ident),
            _ => None,
        }
    }

    /// A subscript that is one index variable.
    pub fn index(name: &str) -> Self {
        let ident = Ident { name: name.to_string(), span: Span::default() };
        Subscript {
            terms: vec![Term { coeff: 1, atom: Atom::Index(ident), span: Span::default() }],
            offset: 0,
            span: Span::default(),
        }
    }

    /// A subscript that is one indirect access.
    pub fn indirect(access: Access) -> Self {
        Subscript {
            terms: vec![Term { coeff: 1, atom: Atom::Indirect(Box::new(access)), span: Span::default() }],
            offset: 0,
            span: Span::default(),
        }
    }
}

impl Access {
    /// An access built in code (spans empty), e.g. by the rewrite.
    pub fn new(tensor: &str, subscripts: Vec<Subscript>) -> Self {
        Access {
            tensor: Ident { name: tensor.to_string(), span: Span::default() },
            subscripts,
            span: Span::default(),
        }
    }

    /// Index variables in the subscripts, with where they appear, in order
    /// of appearance, recursing into indirect accesses. `alone` is true for
    /// a subscript that is just the index.
    pub fn index_uses(&self) -> Vec<IndexUse<'_>> {
        let mut out = Vec::new();
        self.collect_index_uses(&mut out);
        out
    }

    fn collect_index_uses<'a>(&'a self, out: &mut Vec<IndexUse<'a>>) {
        for (dim, s) in self.subscripts.iter().enumerate() {
            let alone = s.as_index().is_some();
            for t in &s.terms {
                match &t.atom {
                    Atom::Index(ident) => out.push(IndexUse { ident, access: self, dim, alone }),
                    Atom::Indirect(inner) => inner.collect_index_uses(out),
                }
            }
        }
    }
}

/// One appearance of an index variable inside an access.
#[derive(Clone, Copy, Debug)]
pub struct IndexUse<'a> {
    pub ident: &'a Ident,
    /// The access whose subscript holds it (the innermost one).
    pub access: &'a Access,
    /// Which subscript of that access.
    pub dim: usize,
    /// True when the subscript is the index alone (it then sets the extent).
    pub alone: bool,
}

// ---- printing: the canonical text, which parses back to the same tree ----

impl fmt::Display for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.lhs, self.op.as_str(), self.rhs)?;
        for (i, w) in self.wheres.iter().enumerate() {
            f.write_str(if i == 0 { " where " } else { ", " })?;
            match w {
                WhereClause::Extent { index, extent, .. } => write!(f, "{} < {extent}", index.name)?,
                WhereClause::Dtype { tensor, dtype, .. } => write!(f, "{}: {}", tensor.name, dtype.name())?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.tensor.name)?;
        if !self.subscripts.is_empty() {
            f.write_str("[")?;
            for (i, s) in self.subscripts.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{s}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

impl fmt::Display for Subscript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            let c = t.coeff;
            match (i, c < 0) {
                (0, true) => f.write_str("-")?,
                (_, true) => f.write_str("-")?,
                (0, false) => {}
                (_, false) => f.write_str("+")?,
            }
            if c.unsigned_abs() != 1 {
                write!(f, "{}*", c.unsigned_abs())?;
            }
            match &t.atom {
                Atom::Index(ident) => f.write_str(&ident.name)?,
                Atom::Indirect(a) => write!(f, "{a}")?,
            }
        }
        match (self.terms.is_empty(), self.offset) {
            (true, o) => write!(f, "{o}"),
            (false, 0) => Ok(()),
            (false, o) if o > 0 => write!(f, "+{o}"),
            (false, o) => write!(f, "-{}", o.unsigned_abs()),
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_prec(f, 0)
    }
}

impl Expr {
    fn fmt_prec(&self, f: &mut fmt::Formatter<'_>, outer: u8) -> fmt::Result {
        match self {
            // Plain digits where they are short, scientific notation where
            // plain digits would be long; both parse back to the same f64.
            Expr::Literal { value, .. } if *value != 0.0 && !(1e-4..1e15).contains(&value.abs()) => {
                write!(f, "{value:e}")
            }
            Expr::Literal { value, .. } => write!(f, "{value}"),
            Expr::Access(a) => write!(f, "{a}"),
            Expr::Neg { expr, .. } => {
                f.write_str("-")?;
                expr.fmt_prec(f, 3)
            }
            Expr::Binary { op, lhs, rhs, .. } => {
                let p = op.precedence();
                let parens = p < outer;
                if parens {
                    f.write_str("(")?;
                }
                lhs.fmt_prec(f, p)?;
                write!(f, " {} ", op.symbol())?;
                // Left-associative: a right operand of equal precedence needs
                // parentheses (a - (b - c)).
                rhs.fmt_prec(f, p + 1)?;
                if parens {
                    f.write_str(")")?;
                }
                Ok(())
            }
            Expr::Call { func, args, .. } => {
                write!(f, "{}(", func.name())?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    a.fmt_prec(f, 0)?;
                }
                f.write_str(")")
            }
        }
    }
}
