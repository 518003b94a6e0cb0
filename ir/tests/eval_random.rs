//! Random well-formed statements over small random tensors: the reference
//! evaluator (through the parser and the checker) against a naive loop nest
//! written here, over the generator's own description of the statement.
//!
//! A case is built from a list of proptest numbers read as choices (0 is
//! always the simplest), so shrinking simplifies the statement.

use std::collections::BTreeMap;

use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;
use spindle_ir::eval::evaluate;
use spindle_ir::formats::{DType, IType};
use spindle_ir::lang::{Declaration, Declarations, ElemType, check, parse};
use spindle_ir::tensor::{TensorValue, Tensors};

const INDEX_NAMES: [&str; 4] = ["i", "j", "k", "l"];

// ---- the generator's own statement ----

#[derive(Debug)]
enum Atom {
    Index(usize),
    Indirect(Access),
}

/// Σ coeff·atom + offset.
#[derive(Debug)]
struct Sub {
    terms: Vec<(i64, Atom)>,
    offset: i64,
}

#[derive(Debug)]
struct Access {
    name: String,
    subs: Vec<Sub>,
}

#[derive(Debug)]
enum Expr {
    Lit(f64),
    Read(Access),
    Neg(Box<Expr>),
    Bin(char, Box<Expr>, Box<Expr>),
    Call(&'static str, Vec<Expr>),
}

#[derive(Debug)]
struct Case {
    lhs: Access,
    op: &'static str,
    rhs: Expr,
    /// Extents of `INDEX_NAMES[..n]`.
    extents: Vec<usize>,
    /// Which of them the statement uses.
    used: Vec<bool>,
    /// Data of every tensor; the output's only sometimes.
    data: Tensors,
    /// Every tensor's shape, the output's included.
    shapes: BTreeMap<String, Vec<usize>>,
}

impl Sub {
    /// `X[...]` alone: coefficient 1, no offset.
    fn whole_indirect(&self) -> bool {
        matches!(&self.terms[..], [(1, Atom::Indirect(_))]) && self.offset == 0
    }
}

// ---- printing ----

fn show_access(a: &Access) -> String {
    if a.subs.is_empty() {
        return a.name.clone();
    }
    let subs: Vec<String> = a.subs.iter().map(show_sub).collect();
    format!("{}[{}]", a.name, subs.join(", "))
}

fn show_sub(s: &Sub) -> String {
    let mut out = String::new();
    for (n, (c, atom)) in s.terms.iter().enumerate() {
        let atom = match atom {
            Atom::Index(k) => INDEX_NAMES[*k].to_string(),
            Atom::Indirect(x) => show_access(x),
        };
        let sign = if *c < 0 {
            "-"
        } else if n > 0 {
            "+"
        } else {
            ""
        };
        let mag = c.unsigned_abs();
        out += &if mag == 1 { format!("{sign}{atom}") } else { format!("{sign}{mag}*{atom}") };
    }
    match (s.terms.is_empty(), s.offset) {
        (true, o) => out += &o.to_string(),
        (false, 0) => {}
        (false, o) if o > 0 => out += &format!("+{o}"),
        (false, o) => out += &o.to_string(),
    }
    out
}

fn show_expr(e: &Expr) -> String {
    match e {
        Expr::Lit(v) => format!("{v}"),
        Expr::Read(a) => show_access(a),
        Expr::Neg(e) => format!("-({})", show_expr(e)),
        Expr::Bin(op, a, b) => format!("({} {op} {})", show_expr(a), show_expr(b)),
        Expr::Call(f, args) => {
            let args: Vec<String> = args.iter().map(show_expr).collect();
            format!("{f}({})", args.join(", "))
        }
    }
}

fn show_case(case: &Case) -> String {
    let mut s = format!("{} {} {}", show_access(&case.lhs), case.op, show_expr(&case.rhs));
    let wheres: Vec<String> = (0..case.extents.len())
        .filter(|&k| case.used[k])
        .map(|k| format!("{} < {}", INDEX_NAMES[k], case.extents[k]))
        .collect();
    if !wheres.is_empty() {
        s += &format!(" where {}", wheres.join(", "));
    }
    s
}

// ---- generation ----

struct Gen<'a> {
    raw: &'a [u32],
    pos: usize,
    extents: Vec<usize>,
    used: Vec<bool>,
    data: Tensors,
    shapes: BTreeMap<String, Vec<usize>>,
    /// Index tensors may hold values just out of range: the case must then
    /// fail where such a value is used as a whole subscript.
    bad: bool,
    fresh: usize,
}

impl Gen<'_> {
    /// A choice in `0..n`; 0 once the numbers run out.
    fn pick(&mut self, n: usize) -> usize {
        let v = self.raw.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        v as usize % n
    }

    /// A choice in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.pick((hi - lo + 1) as usize) as i64
    }

    fn index(&mut self) -> usize {
        let k = self.pick(self.extents.len());
        self.used[k] = true;
        k
    }

    fn name(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}{}", self.fresh)
    }

    fn value_data(&mut self, shape: &[usize]) -> ArrayD<f64> {
        ArrayD::from_shape_fn(IxDyn(shape), |_| self.range(-16, 16) as f64 / 4.0)
    }

    /// A read of a new integer tensor whose values lie in `0..range` (some
    /// are -1 or `range` in a bad case); its own reads stay inside it.
    fn index_access(&mut self, range: usize, depth: usize) -> Access {
        let rank = 1 + self.pick(2);
        let mut subs = Vec::new();
        let mut shape = Vec::new();
        for _ in 0..rank {
            let kind = if depth == 0 { self.pick(2) * 3 } else { self.pick(4) };
            let (sub, extent) = match kind {
                // An index alone.
                0 => {
                    let k = self.index();
                    (Sub { terms: vec![(1, Atom::Index(k))], offset: 0 }, self.extents[k])
                }
                // Nonnegative affine: its largest value sets the extent.
                1 => {
                    let mut terms = Vec::new();
                    let offset = self.range(0, 1);
                    let mut max = offset;
                    for _ in 0..1 + self.pick(2) {
                        let c = self.range(1, 2);
                        if self.pick(3) == 0 {
                            let r = 1 + self.pick(3);
                            terms.push((c, Atom::Indirect(self.index_access(r, depth - 1))));
                            max += c * (r as i64 - 1);
                        } else {
                            let k = self.index();
                            terms.push((c, Atom::Index(k)));
                            max += c * (self.extents[k] as i64 - 1);
                        }
                    }
                    (Sub { terms, offset }, max as usize + 1)
                }
                // A nested indirect access alone.
                2 => {
                    let r = 1 + self.pick(4);
                    (Sub { terms: vec![(1, Atom::Indirect(self.index_access(r, depth - 1)))], offset: 0 }, r)
                }
                // A constant.
                _ => {
                    let c = self.range(0, 2);
                    (Sub { terms: vec![], offset: c }, c as usize + 1 + self.pick(2))
                }
            };
            subs.push(sub);
            shape.push(extent);
        }
        let name = self.name("X");
        let data = ArrayD::from_shape_fn(IxDyn(&shape), |_| {
            if self.bad && self.pick(6) == 5 {
                [-1, range as i64][self.pick(2)]
            } else {
                self.range(0, range as i64 - 1)
            }
        });
        self.data.insert(name.clone(), TensorValue::Indices(data));
        self.shapes.insert(name.clone(), shape);
        Access { name, subs }
    }

    /// A subscript for a dimension of a value tensor and that dimension's
    /// extent. `lhs_alone` lists the indices alone on the left (for the
    /// left-hand side only, whose affine terms may use only those).
    fn value_sub(&mut self, lhs_alone: Option<&[usize]>) -> (Sub, usize) {
        match self.pick(4) {
            0 if lhs_alone.is_none() => {
                let k = self.index();
                (Sub { terms: vec![(1, Atom::Index(k))], offset: 0 }, self.extents[k])
            }
            0 | 1 => {
                let mut terms = Vec::new();
                // The extent a lone term would force: a whole subscript
                // `i` or `X[...]` must match or be in range.
                let mut lone_extent = 0;
                for _ in 0..1 + self.pick(2) {
                    let c = [1, -1, 2, -2, 3][self.pick(5)];
                    let atom = match lhs_alone {
                        Some(alone) if !alone.is_empty() && self.pick(3) > 0 => {
                            Atom::Index(alone[self.pick(alone.len())])
                        }
                        None if self.pick(3) > 0 => Atom::Index(self.index()),
                        _ => {
                            let r = 1 + self.pick(4);
                            lone_extent = r;
                            Atom::Indirect(self.index_access(r, 1))
                        }
                    };
                    if let Atom::Index(k) = atom {
                        lone_extent = self.extents[k];
                    }
                    terms.push((c, atom));
                }
                let sub = Sub { terms, offset: self.range(-2, 2) };
                let whole = matches!(&sub.terms[..], [(1, _)]) && sub.offset == 0;
                (sub, if whole { lone_extent } else { 1 + self.pick(4) })
            }
            2 => {
                let r = 1 + self.pick(4);
                (Sub { terms: vec![(1, Atom::Indirect(self.index_access(r, 1)))], offset: 0 }, r)
            }
            _ => (Sub { terms: vec![], offset: self.range(-1, 4) }, 1 + self.pick(4)),
        }
    }

    fn read(&mut self) -> Access {
        let rank = self.pick(4);
        let (subs, shape): (Vec<Sub>, Vec<usize>) = (0..rank).map(|_| self.value_sub(None)).unzip();
        let name = self.name("A");
        let data = self.value_data(&shape);
        self.data.insert(name.clone(), TensorValue::Values(data));
        self.shapes.insert(name.clone(), shape);
        Access { name, subs }
    }

    fn expr(&mut self, depth: usize) -> Expr {
        let kind = if depth == 0 { self.pick(2) } else { self.pick(7) };
        match kind {
            0 | 2 => Expr::Read(self.read()),
            1 => Expr::Lit([1.0, 0.5, 2.0, 3.0, 0.25, 1.5][self.pick(6)]),
            3 => Expr::Neg(Box::new(self.expr(depth - 1))),
            4 | 5 => {
                let op = ['*', '+', '-', '/'][self.pick(4)];
                Expr::Bin(op, Box::new(self.expr(depth - 1)), Box::new(self.expr(depth - 1)))
            }
            _ => {
                let f = ["relu", "exp", "sigmoid", "sqrt", "abs", "max", "min"][self.pick(7)];
                let arity = if f == "max" || f == "min" { 2 } else { 1 };
                Expr::Call(f, (0..arity).map(|_| self.expr(depth - 1)).collect())
            }
        }
    }

    fn case(raw: &[u32]) -> Case {
        let mut g = Gen {
            raw,
            pos: 0,
            extents: Vec::new(),
            used: Vec::new(),
            data: Tensors::new(),
            shapes: BTreeMap::new(),
            bad: false,
            fresh: 0,
        };
        let n = 1 + g.pick(4);
        g.extents = (0..n).map(|_| 1 + g.pick(4)).collect();
        g.used = vec![false; n];
        g.bad = g.pick(4) == 3;

        // The left-hand side: indices alone first, then the other subscripts.
        let rank = g.pick(4);
        let alone_dims: Vec<bool> = (0..rank).map(|_| g.pick(3) > 0).collect();
        let alone: Vec<usize> = alone_dims.iter().filter(|&&a| a).map(|_| g.index()).collect();
        let mut next_alone = alone.iter();
        let mut subs = Vec::new();
        let mut shape = Vec::new();
        for &is_alone in &alone_dims {
            let (sub, extent) = match is_alone.then(|| next_alone.next()).flatten() {
                Some(&k) => (Sub { terms: vec![(1, Atom::Index(k))], offset: 0 }, g.extents[k]),
                None => g.value_sub(Some(&alone)),
            };
            subs.push(sub);
            shape.push(extent);
        }
        let lhs = Access { name: "O".to_string(), subs };
        let op = ["+=", "=", "max=", "min="][g.pick(4)];
        let rhs = g.expr(3);
        if g.pick(2) == 0 {
            let data = g.value_data(&shape);
            g.data.insert("O".to_string(), TensorValue::Values(data));
        }
        g.shapes.insert("O".to_string(), shape);
        Case { lhs, op, rhs, extents: g.extents, used: g.used, data: g.data, shapes: g.shapes }
    }
}

// ---- the naive loop nest ----

fn indices_of<'a>(data: &'a Tensors, name: &str) -> &'a ArrayD<i64> {
    match &data[name] {
        TensorValue::Indices(a) => a,
        TensorValue::Values(_) => panic!("{name} holds values"),
    }
}

/// The position `a` names in a tensor of `shape` at `env`, or None when an
/// affine subscript falls outside; Err when an indirect index is out of
/// range or an integer tensor is read outside its bounds.
fn locate(a: &Access, shape: &[usize], env: &[i64], data: &Tensors) -> Result<Option<Vec<usize>>, String> {
    let mut pos = Vec::new();
    let mut inside = true;
    for (d, s) in a.subs.iter().enumerate() {
        let mut v = s.offset;
        for (c, atom) in &s.terms {
            v += c * match atom {
                Atom::Index(k) => env[*k],
                Atom::Indirect(x) => {
                    let xs = indices_of(data, &x.name);
                    match locate(x, xs.shape(), env, data)? {
                        Some(p) => xs[IxDyn(&p)],
                        None => return Err(format!("{} read outside", x.name)),
                    }
                }
            };
        }
        if v < 0 || v >= shape[d] as i64 {
            if s.whole_indirect() {
                return Err(format!("{v} out of range for {} dimension {d}", a.name));
            }
            inside = false;
        } else {
            pos.push(v as usize);
        }
    }
    Ok(if inside { Some(pos) } else { None })
}

fn value(e: &Expr, env: &[i64], data: &Tensors) -> Result<f64, String> {
    Ok(match e {
        Expr::Lit(v) => *v,
        Expr::Read(a) => {
            let TensorValue::Values(t) = &data[&a.name] else { panic!("{} holds indices", a.name) };
            match locate(a, t.shape(), env, data)? {
                Some(p) => t[IxDyn(&p)],
                None => 0.0,
            }
        }
        Expr::Neg(e) => -value(e, env, data)?,
        Expr::Bin(op, a, b) => {
            let (a, b) = (value(a, env, data)?, value(b, env, data)?);
            match op {
                '+' => a + b,
                '-' => a - b,
                '*' => a * b,
                _ => a / b,
            }
        }
        Expr::Call(f, args) => {
            let x = value(&args[0], env, data)?;
            match *f {
                "relu" => {
                    if x > 0.0 {
                        x
                    } else {
                        0.0
                    }
                }
                "exp" => x.exp(),
                "sigmoid" => 1.0 / (1.0 + (-x).exp()),
                "sqrt" => x.sqrt(),
                "abs" => x.abs(),
                "max" => x.max(value(&args[1], env, data)?),
                _ => x.min(value(&args[1], env, data)?),
            }
        }
    })
}

/// Nested loops over the used indices, one level per index.
fn each_point(
    case: &Case,
    level: usize,
    env: &mut Vec<i64>,
    body: &mut dyn FnMut(&[i64]) -> Result<(), String>,
) -> Result<(), String> {
    if level == case.extents.len() {
        return body(env);
    }
    if !case.used[level] {
        return each_point(case, level + 1, env, body);
    }
    for v in 0..case.extents[level] as i64 {
        env[level] = v;
        each_point(case, level + 1, env, body)?;
    }
    Ok(())
}

/// The output and, per entry, the sum of the magnitudes that went into it
/// (the scale of its rounding error).
fn naive(case: &Case) -> Result<(ArrayD<f64>, ArrayD<f64>), String> {
    let shape = &case.shapes["O"];
    let mut out = match (case.op, case.data.get("O")) {
        ("=", _) | (_, None) => ArrayD::zeros(IxDyn(shape)),
        (_, Some(TensorValue::Values(o))) => o.clone(),
        (_, Some(TensorValue::Indices(_))) => unreachable!(),
    };
    let mut scale = out.mapv(f64::abs);
    // max= / min= without output data: the first contribution is the value.
    let mut fresh = ArrayD::from_elem(IxDyn(shape), !case.data.contains_key("O"));
    let mut env = vec![0; case.extents.len()];
    each_point(case, 0, &mut env, &mut |env| {
        let v = value(&case.rhs, env, &case.data)?;
        if let Some(p) = locate(&case.lhs, shape, env, &case.data)? {
            let p = IxDyn(&p);
            let first = std::mem::replace(&mut fresh[&p], false);
            out[&p] = match case.op {
                "max=" | "min=" if first => v,
                "max=" => out[&p].max(v),
                "min=" => out[&p].min(v),
                _ => out[&p] + v,
            };
            if v.is_finite() {
                scale[&p] += v.abs();
            }
        }
        Ok(())
    })?;
    Ok((out, scale))
}

fn close(a: f64, b: f64, scale: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-9 * scale.max(a.abs()).max(b.abs()).max(1.0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_statements_agree_with_a_naive_loop_nest(raw in prop::collection::vec(any::<u32>(), 256)) {
        let case = Gen::case(&raw);
        let text = show_case(&case);
        let statement = parse(&text).map_err(|d| TestCaseError::fail(format!("{text}: {}", d.message)))?;
        let decls: Declarations = case
            .shapes
            .iter()
            .map(|(name, shape)| {
                let dtype = match case.data.get(name) {
                    Some(TensorValue::Indices(_)) => ElemType::Index(IType::I64),
                    _ => ElemType::Value(DType::F64),
                };
                (name.clone(), Declaration { shape: shape.clone(), dtype })
            })
            .collect();
        let einsum = check(&statement, &decls).map_err(|d| TestCaseError::fail(format!("{text}: {}", d.message)))?;
        let got = evaluate(&einsum, &case.data);
        match naive(&case) {
            Err(why) => prop_assert!(got.is_err(), "{text}: the loop nest fails ({why}), evaluate gave {got:?}"),
            Ok((want, scale)) => {
                let got = got.map_err(|d| TestCaseError::fail(format!("{text}: {}", d.message)))?;
                prop_assert_eq!(got.shape(), want.shape(), "{}", text);
                for ((g, w), s) in got.iter().zip(&want).zip(&scale) {
                    prop_assert!(close(*g, *w, *s), "{text}: {got} vs {want}");
                }
            }
        }
    }
}
