//! Parsing the textual form `print.rs` writes, so pass tests can be IR-in /
//! IR-out files. Parsing checks syntax and names only; [`Kernel::verify`]
//! checks the meaning, so tests can also write broken kernels.
//!
//! Value ids are the numbers of the text (`%7` is arena slot 7): printed
//! names, and the C and CUDA names made from them, survive a round trip.
//! Slots the text skips (values a pass left dead) hold dead literals.

use std::collections::HashMap;
use std::str::FromStr;

use super::*;

/// Text that is not a kernel: where (1-based line and column) and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {reason}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub reason: String,
}

/// Value numbers above this are refused: the arena keeps a slot for every
/// number below the largest, and no kernel comes near it.
const MAX_VALUE_ID: u32 = 1 << 16;

impl FromStr for Kernel {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Kernel, ParseError> {
        Parser::default().parse(text)
    }
}

impl Kernel {
    /// Parses the textual form (what `Display` prints). Lines starting
    /// with `//` are comments.
    pub fn parse(text: &str) -> Result<Kernel, ParseError> {
        text.parse()
    }
}

/// One line being read: a cursor over it.
struct Line<'a> {
    text: &'a str,
    pos: usize,
    number: usize,
}

type Result<T, E = ParseError> = std::result::Result<T, E>;

impl<'a> Line<'a> {
    fn error_at(&self, pos: usize, reason: impl Into<String>) -> ParseError {
        let column = self.text[..pos].chars().count() + 1;
        ParseError { line: self.number, column, reason: reason.into() }
    }

    fn error(&self, reason: impl Into<String>) -> ParseError {
        self.error_at(self.pos, reason)
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn skip_spaces(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start_matches([' ', '\t']).len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_spaces();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<()> {
        if self.eat(token) { Ok(()) } else { Err(self.error(format!("expected `{token}`"))) }
    }

    /// The longest run of characters matching `keep`, after spaces, with
    /// where it starts.
    fn token(&mut self, keep: impl Fn(char) -> bool) -> (&'a str, usize) {
        self.skip_spaces();
        let start = self.pos;
        let rest = self.rest();
        let len = rest.find(|c: char| !keep(c)).unwrap_or(rest.len());
        self.pos += len;
        (&rest[..len], start)
    }

    fn ident(&mut self, what: &str) -> Result<(&'a str, usize)> {
        let (word, start) = self.token(|c| c.is_ascii_alphanumeric() || c == '_');
        if word.is_empty() || word.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(self.error_at(start, format!("expected {what}")));
        }
        Ok((word, start))
    }

    /// A number in Rust's syntax (`inf`, `NaN` and exponents included).
    fn number<T: FromStr>(&mut self, what: &str) -> Result<T> {
        let (word, start) = self.token(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-'));
        word.parse().map_err(|_| self.error_at(start, format!("expected {what}, found `{word}`")))
    }

    fn end(&mut self) -> Result<()> {
        self.skip_spaces();
        if self.rest().is_empty() {
            Ok(())
        } else {
            Err(self.error("unexpected text at the end of the line"))
        }
    }
}

#[derive(Default)]
struct Parser {
    name: Option<String>,
    tensors: PrimaryMap<TensorId, TensorParam>,
    axes: Option<PrimaryMap<AxisId, Axis>>,
    init: Option<OutputInit>,
    /// Values by number, with the line that defines them.
    values: HashMap<u32, (Value, usize)>,
    order: Vec<ValueId>,
    accumulate: Option<Accumulate>,
    sink: Option<Sink>,
    /// Every `%N` read, with where, to report numbers never defined.
    uses: Vec<(u32, usize, usize)>,
}

impl Parser {
    fn parse(mut self, text: &str) -> Result<Kernel> {
        let mut last = 0;
        for (i, text) in text.lines().enumerate() {
            let mut line = Line { text, pos: 0, number: i + 1 };
            line.skip_spaces();
            if line.rest().is_empty() || line.rest().starts_with("//") {
                continue;
            }
            last = i + 1;
            self.line(&mut line)?;
        }
        let missing = |reason: &str| ParseError { line: last + 1, column: 1, reason: reason.to_string() };
        let name = self.name.ok_or_else(|| missing("expected `kernel NAME(...)`"))?;
        let axes = self.axes.ok_or_else(|| missing("expected `axes ...`"))?;
        let init = self.init.ok_or_else(|| missing("expected `init ...`"))?;
        let sink = self.sink.ok_or_else(|| missing("expected a sink: `store ...` or `atomic ...`"))?;
        if let Some(&(n, line, column)) = self.uses.iter().find(|(n, ..)| !self.values.contains_key(n)) {
            return Err(ParseError { line, column, reason: format!("%{n} is not defined") });
        }
        // Slots the text skips were dead values: keep them dead, so the
        // numbers stay the ids.
        let len = self.values.keys().max().map_or(0, |&n| n + 1);
        let mut values = PrimaryMap::with_capacity(len as usize);
        for n in 0..len {
            let dead = Value { op: Op::Const(F64Bits(0.0)), shape: Vec::new(), scalar: Scalar::Float };
            values.push(self.values.remove(&n).map_or(dead, |(v, _)| v));
        }
        Ok(Kernel {
            name,
            tensors: self.tensors,
            axes,
            values,
            order: self.order,
            accumulate: self.accumulate,
            sink,
            init,
        })
    }

    fn line(&mut self, line: &mut Line) -> Result<()> {
        let start = line.pos;
        let word = if line.rest().starts_with('%') { "%" } else { line.ident("a keyword")?.0 };
        match word {
            "kernel" if self.name.is_none() => self.header(line),
            "kernel" => Err(line.error_at(start, "a second `kernel` line")),
            _ if self.name.is_none() => Err(line.error_at(start, "expected `kernel NAME(...)` first")),
            "axes" if self.axes.is_none() => self.axes(line),
            "axes" => Err(line.error_at(start, "a second `axes` line")),
            _ if self.axes.is_none() => {
                Err(line.error_at(start, "expected `axes ...` after the kernel line"))
            }
            "init" if self.init.is_none() => self.init(line),
            "init" => Err(line.error_at(start, "a second `init` line")),
            _ if self.init.is_none() => Err(line.error_at(start, "expected `init ...` after the axes")),
            "%" => self.value(line),
            // Section headers only group the body for the reader: phases are
            // computed from the values.
            "program" | "epilogue" => {
                line.expect(":")?;
                line.end()
            }
            "loop" => {
                let end = line.text.trim_end().len();
                if line.text[..end].ends_with(':') { Ok(()) } else { Err(line.error_at(end, "expected `:`")) }
            }
            "acc" => self.accumulate(line, start),
            "store" | "atomic" => self.sink(line, start, word == "store"),
            _ => Err(line.error_at(start, format!("unknown line `{word}`"))),
        }
    }

    /// `kernel NAME(T: f32[15,10] out, ...)`
    fn header(&mut self, line: &mut Line) -> Result<()> {
        let (name, _) = line.ident("the kernel's name")?;
        line.expect("(")?;
        if !line.eat(")") {
            loop {
                let (tensor, start) = line.ident("a tensor name")?;
                if self.tensors.values().any(|t| t.name == tensor) {
                    return Err(line.error_at(start, format!("a second tensor named `{tensor}`")));
                }
                line.expect(":")?;
                let (dtype, at) = line.ident("an element type")?;
                let dtype = ElemType::parse(dtype)
                    .ok_or_else(|| line.error_at(at, format!("unknown element type `{dtype}`")))?;
                line.expect("[")?;
                let mut shape = Vec::new();
                if !line.eat("]") {
                    loop {
                        shape.push(line.number("a dimension")?);
                        if line.eat("]") {
                            break;
                        }
                        line.expect(",")?;
                    }
                }
                let output = line.eat("out");
                self.tensors.push(TensorParam { name: tensor.to_string(), dtype, shape, output });
                if line.eat(")") {
                    break;
                }
                line.expect(",")?;
            }
        }
        line.end()?;
        self.name = Some(name.to_string());
        Ok(())
    }

    /// `axes y 20/16 parallel, r 12/16 reduced`
    fn axes(&mut self, line: &mut Line) -> Result<()> {
        let mut axes: PrimaryMap<AxisId, Axis> = PrimaryMap::new();
        line.skip_spaces();
        while !line.rest().is_empty() {
            let (name, start) = line.ident("an axis name")?;
            if axes.values().any(|a| a.name == name) {
                return Err(line.error_at(start, format!("a second axis named `{name}`")));
            }
            let extent = line.number("an extent")?;
            line.expect("/")?;
            let tile = line.number("a tile size")?;
            let (role, at) = line.ident("`parallel` or `reduced`")?;
            let role = match role {
                "parallel" => AxisRole::Parallel,
                "reduced" => AxisRole::Reduced,
                _ => return Err(line.error_at(at, "expected `parallel` or `reduced`")),
            };
            axes.push(Axis { name: name.to_string(), extent, tile, role });
            if !line.eat(",") {
                line.end()?;
                break;
            }
        }
        self.axes = Some(axes);
        Ok(())
    }

    /// `init zero`, `init keep` or `init identity(max)`
    fn init(&mut self, line: &mut Line) -> Result<()> {
        let (word, at) = line.ident("`zero`, `keep` or `identity(...)`")?;
        let init = match word {
            "zero" => OutputInit::Zero,
            "keep" => OutputInit::Keep,
            "identity" => {
                line.expect("(")?;
                let r = reduction(line)?;
                line.expect(")")?;
                OutputInit::Identity(r)
            }
            _ => return Err(line.error_at(at, "expected `zero`, `keep` or `identity(...)`")),
        };
        line.end()?;
        self.init = Some(init);
        Ok(())
    }

    fn axis(&self, line: &mut Line) -> Result<AxisId> {
        let (name, at) = line.ident("an axis name")?;
        let no_axes = PrimaryMap::new();
        self.axes
            .as_ref()
            .unwrap_or(&no_axes)
            .iter()
            .find(|(_, a)| a.name == name)
            .map(|(id, _)| id)
            .ok_or_else(|| line.error_at(at, format!("unknown axis `{name}`")))
    }

    fn tensor(&self, line: &mut Line) -> Result<TensorId> {
        let (name, at) = line.ident("a tensor name")?;
        self.tensors
            .iter()
            .find(|(_, t)| t.name == name)
            .map(|(id, _)| id)
            .ok_or_else(|| line.error_at(at, format!("unknown tensor `{name}`")))
    }

    /// `%N`, a number below [`MAX_VALUE_ID`].
    fn number(&self, line: &mut Line) -> Result<u32> {
        line.skip_spaces();
        let start = line.pos;
        line.expect("%")?;
        let (digits, _) = line.token(|c| c.is_ascii_digit());
        match digits.parse::<u32>() {
            Ok(n) if n < MAX_VALUE_ID => Ok(n),
            Ok(_) => Err(line.error_at(start, format!("value numbers stop at %{}", MAX_VALUE_ID - 1))),
            Err(_) => Err(line.error_at(start, "expected a value such as `%3`")),
        }
    }

    /// A value read at this point of the line.
    fn operand(&mut self, line: &mut Line) -> Result<ValueId> {
        line.skip_spaces();
        let at = line.pos;
        let n = self.number(line)?;
        let column = line.text[..at].chars().count() + 1;
        self.uses.push((n, line.number, column));
        Ok(ValueId::from_u32(n))
    }

    /// `%a, %b, ...` up to `close`.
    fn operand_list(&mut self, line: &mut Line, close: &str) -> Result<Vec<ValueId>> {
        let mut list = Vec::new();
        if line.eat(close) {
            return Ok(list);
        }
        loop {
            list.push(self.operand(line)?);
            if line.eat(close) {
                return Ok(list);
            }
            if !line.eat(",") {
                return Err(line.error(format!("expected `,` or `{close}`")));
            }
        }
    }

    /// An optional `segment(R) over AXIS` or `parallel(R) over AXIS`.
    fn group(&mut self, line: &mut Line) -> Result<Option<SinkGroup>> {
        let before = line.pos;
        let kind = match line.ident("") {
            Ok(("segment", _)) => GroupKind::Segment,
            Ok(("parallel", _)) => GroupKind::Parallel,
            _ => {
                line.pos = before;
                return Ok(None);
            }
        };
        line.expect("(")?;
        let lanes = line.number("a group size")?;
        line.expect(")")?;
        keyword(line, "over")?;
        let axis = self.axis(line)?;
        Ok(Some(SinkGroup { axis, lanes, kind }))
    }

    fn mask(&mut self, line: &mut Line) -> Result<Option<ValueId>> {
        let before = line.pos;
        match line.ident("") {
            Ok(("mask", _)) => Ok(Some(self.operand(line)?)),
            _ => {
                line.pos = before;
                Ok(None)
            }
        }
    }

    /// `[a,b]`
    fn shape(&self, line: &mut Line) -> Result<Shape> {
        line.expect("[")?;
        let mut shape = Vec::new();
        if line.eat("]") {
            return Ok(shape);
        }
        loop {
            shape.push(self.axis(line)?);
            if line.eat("]") {
                return Ok(shape);
            }
            line.expect(",")?;
        }
    }

    /// `%N = OP ... : [axes] scalar`
    fn value(&mut self, line: &mut Line) -> Result<()> {
        let start = line.pos;
        let n = self.number(line)?;
        if let Some((_, first)) = self.values.get(&n) {
            return Err(line.error_at(start, format!("%{n} is already defined on line {first}")));
        }
        line.expect("=")?;
        let (word, at) = line.ident("an operation")?;
        // A literal's type comes after it: keep its text until then.
        let mut literal = None;
        let op = match word {
            "range" => Op::Range(self.axis(line)?),
            "const" => {
                let (text, at) = line.token(|c| !c.is_whitespace());
                literal = Some((text, at));
                Op::ConstInt(0)
            }
            "load" => {
                let tensor = self.tensor(line)?;
                line.expect("[")?;
                let index = self.operand_list(line, "]")?;
                Op::Load { tensor, index, mask: self.mask(line)? }
            }
            "neg" => Op::Unary(UnaryOp::Neg, self.operand(line)?),
            "reduce" => {
                line.expect(".")?;
                let reduction = reduction(line)?;
                let value = self.operand(line)?;
                keyword(line, "over")?;
                let axis = self.axis(line)?;
                Op::Reduce { reduction, value, axis, mask: self.mask(line)? }
            }
            "dot" => {
                let a = self.operand(line)?;
                line.expect(",")?;
                let b = self.operand(line)?;
                keyword(line, "over")?;
                let axis = self.axis(line)?;
                Op::Dot { a, b, axis, mask: self.mask(line)? }
            }
            "broadcast" => Op::Broadcast { value: self.operand(line)? },
            "acc" => Op::Accumulator,
            _ => {
                if let Some(op) = BinaryOp::ALL.into_iter().find(|op| op.name() == word) {
                    let a = self.operand(line)?;
                    line.expect(",")?;
                    Op::Binary(op, a, self.operand(line)?)
                } else if let Some(func) = crate::lang::Func::from_name(word) {
                    Op::Unary(UnaryOp::Func(func), self.operand(line)?)
                } else {
                    return Err(line.error_at(at, format!("unknown operation `{word}`")));
                }
            }
        };
        line.expect(":")?;
        let shape = self.shape(line)?;
        let (scalar, at_scalar) = line.ident("`float`, `int` or `bool`")?;
        let scalar = Scalar::ALL
            .into_iter()
            .find(|s| s.name() == scalar)
            .ok_or_else(|| line.error_at(at_scalar, "expected `float`, `int` or `bool`"))?;
        line.end()?;
        let op = match (literal, scalar) {
            (Some((text, at)), Scalar::Float) => Op::Const(F64Bits(
                text.parse().map_err(|_| line.error_at(at, format!("expected a number, found `{text}`")))?,
            )),
            (Some((text, at)), Scalar::Int) => Op::ConstInt(
                text.parse()
                    .map_err(|_| line.error_at(at, format!("expected an integer, found `{text}`")))?,
            ),
            (Some((_, at)), Scalar::Bool) => return Err(line.error_at(at, "literals are `float` or `int`")),
            (None, _) => op,
        };
        self.values.insert(n, (Value { op, shape, scalar }, line.number));
        self.order.push(ValueId::from_u32(n));
        Ok(())
    }

    /// `acc sum= %5 : [p,n]`
    fn accumulate(&mut self, line: &mut Line, start: usize) -> Result<()> {
        if self.accumulate.is_some() {
            return Err(line.error_at(start, "a second `acc` line"));
        }
        let reduction = reduction(line)?;
        line.expect("=")?;
        let partial = self.operand(line)?;
        line.expect(":")?;
        let shape = self.shape(line)?;
        line.end()?;
        self.accumulate = Some(Accumulate { reduction, partial, shape });
        Ok(())
    }

    /// `store C[%1, %2] sum= %9 mask %4` (or `atomic ...`), optionally
    /// ending `segment(8) over p` or `parallel(4) over q`.
    fn sink(&mut self, line: &mut Line, start: usize, exclusive: bool) -> Result<()> {
        if self.sink.is_some() {
            return Err(line.error_at(start, "a second sink"));
        }
        let tensor = self.tensor(line)?;
        line.expect("[")?;
        let index = self.operand_list(line, "]")?;
        let reduction = reduction(line)?;
        line.expect("=")?;
        let value = self.operand(line)?;
        let mask = self.mask(line)?;
        let group = self.group(line)?;
        line.end()?;
        self.sink = Some(Sink { tensor, index, value, mask, reduction, exclusive, group });
        Ok(())
    }
}

fn reduction(line: &mut Line) -> Result<Reduction> {
    let (word, at) = line.ident("`sum`, `max` or `min`")?;
    Reduction::ALL
        .into_iter()
        .find(|r| r.name() == word)
        .ok_or_else(|| line.error_at(at, "expected `sum`, `max` or `min`"))
}

fn keyword(line: &mut Line, word: &str) -> Result<()> {
    match line.ident(&format!("`{word}`"))? {
        (w, _) if w == word => Ok(()),
        (_, at) => Err(line.error_at(at, format!("expected `{word}`"))),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::kernel::lower::{lower, lower_only};
    use crate::lang::{check, declarations, parse};

    /// The statements the IR's own tests lower, with their declarations.
    fn statements() -> Vec<(&'static str, crate::lang::Declarations)> {
        let gds = declarations(&[
            ("C", &[15, 10], "f32"),
            ("A", &[20, 30], "f32"),
            ("B", &[12, 10], "f32"),
            ("E", &[12], "i32"),
            ("D", &[20], "i32"),
        ]);
        let groupcoo = declarations(&[
            ("C", &[96, 24], "f32"),
            ("A_grp", &[40], "i32"),
            ("A_val", &[40, 4], "f32"),
            ("A_crd", &[40, 4], "i32"),
            ("B", &[80, 24], "f32"),
        ]);
        let vectors = declarations(&[
            ("y", &[10], "f64"),
            ("A", &[10, 12], "f64"),
            ("x", &[12], "f64"),
            ("s", &[10], "f64"),
        ]);
        let segments = declarations(&[("out", &[6], "f32"), ("seg", &[9], "i64"), ("v", &[9], "f32")]);
        let conv = declarations(&[("O", &[30], "f32"), ("I", &[30], "f32"), ("F", &[3], "f32")]);
        vec![
            ("C[D[y],x] += A[y,E[r]] * B[r,x]", gds),
            ("C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]", groupcoo),
            ("y[i] += exp(A[i,k]) + x[k]", vectors.clone()),
            ("y[i] += A[i,k] * s[i]", vectors.clone()),
            ("y[i] = -sigmoid(A[i,k] * x[k]) / 2.5 - max(s[i], 0)", vectors.clone()),
            ("y[i] max= A[i,k] * x[k]", vectors),
            ("out[seg[e]] max= v[e]", segments),
            ("O[i] += I[i+p-1] * F[p]", conv),
        ]
    }

    const SCHEDULES: [&str; 8] = [
        "",
        "reduce=segment(4)",
        "reduce=parallel",
        "matmul=off",
        "broadcast=eager matmul=off",
        "broadcast=eager",
        "reduce=atomic tile.i=4",
        "tile.i=1 tile.k=2",
    ];

    /// Every kernel the statements lower to, before and after the passes.
    fn kernels() -> Vec<Kernel> {
        let mut out = Vec::new();
        for (statement, decls) in statements() {
            let einsum =
                check(&parse(statement).unwrap(), &decls).unwrap_or_else(|e| panic!("{statement}: {e}"));
            for schedule in SCHEDULES {
                let schedule = schedule.parse().unwrap();
                // Schedules naming an index the statement lacks are refused.
                out.extend(lower_only(&einsum, &schedule, "k"));
                out.extend(lower(&einsum, &schedule, "k"));
            }
        }
        out
    }

    #[test]
    fn print_parse_print_is_identical_for_every_lowered_kernel() {
        let kernels = kernels();
        assert!(kernels.len() >= 40, "{}", kernels.len());
        for k in kernels {
            let text = k.to_string();
            let parsed = Kernel::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(parsed.to_string(), text);
            assert_eq!(parsed.verify(), Ok(()), "{text}");
            // Every live value comes back as it was, in the same phase;
            // the body is in the printed order (by phase, which keeps it
            // topological).
            let (phases, parsed_phases) = (k.phases(), parsed.phases());
            let mut order = k.order.clone();
            order.sort_by_key(|&id| phases[id]);
            assert_eq!(parsed.order, order);
            for &id in &k.order {
                assert_eq!(parsed.value(id), k.value(id), "{id} in\n{text}");
                assert_eq!(parsed_phases[id], phases[id], "{id} in\n{text}");
            }
            assert_eq!((&parsed.tensors, &parsed.axes, &parsed.sink), (&k.tensors, &k.axes, &k.sink));
            assert_eq!((&parsed.accumulate, parsed.init), (&k.accumulate, k.init));
        }
    }

    #[track_caller]
    fn error(text: &str) -> String {
        Kernel::parse(text).expect_err(text).to_string()
    }

    const SMALL: &str = "\
kernel k(y: f32[8] out, x: f32[8])
  axes i 8/8 parallel
  init zero
  program:
    %0 = range i : [i] int
    %1 = load x[%0] : [i] float
    store y[%0] sum= %1
";

    #[test]
    fn errors_name_the_line_and_column() {
        assert_eq!(Kernel::parse(SMALL).map(|k| k.to_string()), Ok(SMALL.to_string()));
        let cases = [
            ("range i : [i]", "range z : [i]", "5:16: unknown axis `z`"),
            ("load x[%0]", "load w[%0]", "6:15: unknown tensor `w`"),
            ("load x[%0]", "load x[%7]", "6:17: %7 is not defined"),
            ("load x[%0]", "load x[%0", "6:20: expected `,` or `]`"),
            ("float\n", "real\n", "6:27: expected `float`, `int` or `bool`"),
            ("%1 = load", "%0 = load", "6:5: %0 is already defined on line 5"),
            ("%1 = load", "%1 = lode", "6:10: unknown operation `lode`"),
            ("f32[8] out", "f33[8] out", "1:13: unknown element type `f33`"),
            ("8/8 parallel", "8/8 sideways", "2:14: expected `parallel` or `reduced`"),
            ("8/8", "8/x", "2:12: expected a tile size, found `x`"),
            ("init zero", "init some", "3:8: expected `zero`, `keep` or `identity(...)`"),
            ("sum= %1", "add= %1", "7:17: expected `sum`, `max` or `min`"),
            ("    store y[%0] sum= %1\n", "", "7:1: expected a sink: `store ...` or `atomic ...`"),
            ("  axes i 8/8 parallel\n", "", "2:3: expected `axes ...` after the kernel line"),
            (
                "%1 = load x[%0] : [i] float",
                "%1 = load x[%0] : [i] float extra",
                "6:33: unexpected text at the end of the line",
            ),
            ("%1 = load", "%99999999999 = load", "6:5: expected a value such as `%3`"),
            ("%1 = load", "%70000 = load", "6:5: value numbers stop at %65535"),
        ];
        let mut wrong = Vec::new();
        for (from, to, want) in cases {
            assert!(SMALL.contains(from), "{from}");
            let got = error(&SMALL.replacen(from, to, 1));
            if got != want {
                wrong.push(format!("{from:?} -> {to:?}: got {got:?}, expected {want:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert_eq!(error(""), "1:1: expected `kernel NAME(...)`");
        assert_eq!(error("// only a comment\n"), "1:1: expected `kernel NAME(...)`");
        assert_eq!(error("  program:"), "1:3: expected `kernel NAME(...)` first");
        assert_eq!(error("kernel k(é: f32[1] out)"), "1:10: expected a tensor name");
        // A literal's text is read against the type after it.
        let bad_int = SMALL.replace("%1 = load x[%0] : [i] float", "%1 = const 1.5 : [] int");
        assert_eq!(error(&bad_int), "6:16: expected an integer, found `1.5`");
    }

    #[test]
    fn literals_keep_their_bits() {
        for (literal, value) in [
            ("-0", -0.0),
            ("inf", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("0.25", 0.25),
            ("1e300", 1e300),
        ] {
            let text =
                SMALL.replace("%1 = load x[%0] : [i] float", &format!("%1 = const {literal} : [] float"));
            let k = Kernel::parse(&text).unwrap();
            assert_eq!(k.value(ValueId::from_u32(1)).op, Op::Const(F64Bits(value)), "{literal}");
            let again = Kernel::parse(&k.to_string()).unwrap();
            assert_eq!(again.value(ValueId::from_u32(1)).op, Op::Const(F64Bits(value)), "{literal}");
        }
    }

    #[test]
    fn values_the_text_skips_keep_their_numbers() {
        let text = SMALL.replace("%1", "%5");
        let k = Kernel::parse(&text).unwrap();
        assert_eq!(k.values.len(), 6);
        assert_eq!(k.order, [ValueId::from_u32(0), ValueId::from_u32(5)]);
        assert_eq!(k.verify(), Ok(()));
        assert_eq!(k.to_string(), text);
    }

    proptest! {
        /// Garbage, and printed kernels with a few bytes changed, never
        /// panic the parser, the verifier or the printer; whatever parses
        /// and verifies prints back to a text that parses to the same.
        #[test]
        fn no_input_panics(
            garbage in "[ -~\n]{0,200}",
            edits in proptest::collection::vec((any::<prop::sample::Index>(), "[ -~\n]{0,3}", 0usize..4), 1..4),
        ) {
            let _ = Kernel::parse(&garbage);
            let mut text = SMALL.to_string();
            for (at, insert, remove) in edits {
                let mut at = at.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                let end = (at + remove).min(text.len());
                if text.is_char_boundary(end) {
                    text.replace_range(at..end, &insert);
                }
            }
            match Kernel::parse(&text) {
                Err(e) => prop_assert!(e.line >= 1 && e.column >= 1, "{e}"),
                Ok(k) => {
                    if k.verify().is_ok() {
                        let printed = k.to_string();
                        let again = Kernel::parse(&printed).unwrap();
                        prop_assert_eq!(again.to_string(), printed);
                    }
                }
            }
        }
    }
}
