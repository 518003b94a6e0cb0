//! The textual form of a loop tree, for tests, snapshots and `--emit ir`.

use std::fmt::{self, Write as _};

use super::*;

impl Position {
    /// The position variable's name: `pA1` for level 1 of `A`.
    pub fn name(&self) -> String {
        match self {
            Position::Root => "0".to_string(),
            Position::Level { tensor, level } => format!("p{tensor}{level}"),
        }
    }
}

impl LevelRef {
    pub fn position(&self) -> Position {
        Position::Level { tensor: self.tensor.clone(), level: self.level }
    }

    /// The position of this level's parent.
    pub fn parent(&self) -> Position {
        match self.level {
            0 => Position::Root,
            l => Position::Level { tensor: self.tensor.clone(), level: l - 1 },
        }
    }
}

impl LevelKernel {
    pub fn expr_text(&self, e: &Expr) -> String {
        match e {
            Expr::Const(c) => format!("{c}"),
            Expr::Stored { val, at } => format!("{}[{}]", self.tensor(*val).name, at.name()),
            Expr::Dense { tensor, at } => {
                let vars: Vec<&str> = at.iter().map(|&v| self.var(v).name.as_str()).collect();
                format!("{}[{}]", self.tensor(*tensor).name, vars.join(","))
            }
            Expr::Local { local, at } => self.local_text(*local, at),
            Expr::Neg(x) => format!("-({})", self.expr_text(x)),
            Expr::Binary { op, lhs, rhs } => {
                format!("({} {} {})", self.expr_text(lhs), op.symbol(), self.expr_text(rhs))
            }
            Expr::Call { func, args } => {
                let args: Vec<String> = args.iter().map(|a| self.expr_text(a)).collect();
                format!("{}({})", func.name(), args.join(", "))
            }
        }
    }

    fn local_text(&self, local: LocalId, at: &Place) -> String {
        let name = &self.local(local).name;
        match at {
            Place::Coords(vars) if vars.is_empty() => name.clone(),
            Place::Coords(vars) => {
                let vars: Vec<&str> = vars.iter().map(|&v| self.var(v).name.as_str()).collect();
                format!("{name}[{}]", vars.join(","))
            }
            Place::Position(p, then) => {
                let mut at = vec![p.name()];
                at.extend(then.iter().map(|&v| self.var(v).name.clone()));
                format!("{name}[{}]", at.join(","))
            }
        }
    }

    fn level_text(&self, l: &LevelRef) -> String {
        let kind = match &l.kind {
            Reach::Dense => "dense".to_string(),
            Reach::Compressed { pos: Some(pos), crd, .. } => {
                format!("compressed {} {}", self.tensor(*pos).name, self.tensor(*crd).name)
            }
            Reach::Compressed { pos: None, crd, .. } => format!("compressed {}", self.tensor(*crd).name),
            Reach::Singleton { crd } => format!("singleton {}", self.tensor(*crd).name),
            Reach::Padded { g, crd, .. } => format!("padded({g}) {}", self.tensor(*crd).name),
        };
        format!("{} = {} from {} ({kind})", l.position().name(), l.tensor, l.parent().name())
    }

    /// `2*i+p-1`.
    pub fn affine_text(&self, a: &Affine) -> String {
        let mut text = String::new();
        for &(v, c) in &a.terms {
            if !text.is_empty() {
                text.push('+');
            }
            if c != 1 {
                let _ = write!(text, "{c}*");
            }
            text.push_str(&self.var(v).name);
        }
        match a.offset {
            0 if !text.is_empty() => {}
            b if b < 0 || text.is_empty() => {
                let _ = write!(text, "{b}");
            }
            b => {
                let _ = write!(text, "+{b}");
            }
        }
        text
    }

    fn affine_level_text(&self, operand: usize, level: usize) -> String {
        let op = &self.affine[operand];
        let l = &op.levels[level];
        let kind = match l.kind {
            Reach::Dense => "dense",
            _ => "compressed",
        };
        format!("{} level {level} ({kind}) at {}", op.tensor, self.affine_text(&op.subscripts[level]))
    }

    fn node_text(&self, n: &Node, depth: usize, out: &mut String) {
        let pad = "  ".repeat(depth);
        match n {
            Node::Subsect { var, operand, level, body } => {
                let v = self.var(*var);
                let _ = writeln!(
                    out,
                    "{pad}subsections {} in 0..{} of {}",
                    v.name,
                    v.extent,
                    self.affine_level_text(*operand, *level)
                );
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
            }
            Node::Find { operand, level, body } => {
                let position = self.affine[*operand].levels[*level].position().name();
                let _ = writeln!(out, "{pad}find {position} = {}", self.affine_level_text(*operand, *level));
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
            }
            Node::Fill { at, points, body } => {
                let vars: Vec<&str> = at.iter().map(|&v| self.var(v).name.as_str()).collect();
                let _ = writeln!(
                    out,
                    "{pad}count the updates of {}[{}]: zero folded in where fewer than {points} points are stored",
                    self.tensor(self.output).name,
                    vars.join(",")
                );
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
            }
            Node::Resolve { var, operand, level, body } => {
                let v = self.var(*var);
                let position = self.affine[*operand].levels[*level].position().name();
                let _ = writeln!(
                    out,
                    "{pad}resolve {} in 0..{}: {position} = {}",
                    v.name,
                    v.extent,
                    self.affine_level_text(*operand, *level)
                );
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
            }
            Node::Taps { outer, inner, operand, level, body } => {
                let (o, i) = (self.var(*outer), self.var(*inner));
                let position = self.affine[*operand].levels[*level].position().name();
                let _ = writeln!(
                    out,
                    "{pad}taps {} in 0..{}, {} in 0..{}: each {position} of {}",
                    o.name,
                    o.extent,
                    i.name,
                    i.extent,
                    self.affine_level_text(*operand, *level)
                );
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
            }
            Node::Strip { start, row, body } => {
                let (s, r) = (self.var(*start), self.var(*row));
                let _ = writeln!(out, "{pad}for {} in 0..{} by strips of {}", s.name, s.extent, r.extent);
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
            }
            Node::Rows { start, row, var, body } => {
                let (s, r) = (&self.var(*start).name, self.var(*row));
                let _ = match var {
                    Some(v) => {
                        let v = self.var(*v);
                        writeln!(
                            out,
                            "{pad}for {} in 0..{}: {} = {s} + {} below {}",
                            r.name, r.extent, v.name, r.name, v.extent
                        )
                    }
                    None => writeln!(out, "{pad}for {} in 0..{} (the whole strip)", r.name, r.extent),
                };
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
            }
            Node::Dense { var, body } => {
                let v = self.var(*var);
                let _ = writeln!(out, "{pad}for {} in 0..{}", v.name, v.extent);
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
            }
            Node::Merge { var, levels, full, points } => {
                let walks: Vec<String> = levels.iter().map(|l| self.level_text(l)).collect();
                let how = if *full { "sweep" } else { "merge" };
                let _ = writeln!(out, "{pad}{how} {} over {}", self.var(*var).name, walks.join("; "));
                for p in points {
                    let names: Vec<&str> = levels
                        .iter()
                        .zip(&p.present)
                        .filter(|(_, on)| **on)
                        .map(|(l, _)| l.tensor.as_str())
                        .collect();
                    let _ = writeln!(out, "{pad}  case {{{}}}", names.join(", "));
                    p.body.iter().for_each(|b| self.node_text(b, depth + 2, out));
                }
            }
            Node::Locate { level, var } => {
                let _ = writeln!(
                    out,
                    "{pad}{} = {} * {} + {}",
                    level.position().name(),
                    level.parent().name(),
                    level.extent,
                    self.var(*var).name
                );
            }
            Node::Entry { level, body } => {
                let a = self.assembly.as_ref().expect("entries belong to a sparse output");
                let l = &a.levels[*level];
                let _ = writeln!(out, "{pad}entry {} level {level} at {}", a.tensor, self.var(l.var).name);
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
            }
            Node::Workspace { body } => {
                let a = self.assembly.as_ref().expect("workspaces belong to a sparse output");
                let over: Vec<&str> =
                    a.levels[a.gathered..].iter().map(|l| self.var(l.var).name.as_str()).collect();
                let kind = match a.workspace {
                    WorkspaceKind::Dense => String::new(),
                    WorkspaceKind::Ism(p) => format!(" ({p})"),
                };
                let _ = writeln!(out, "{pad}workspace {} over {}{kind}", a.tensor, over.join(","));
                body.iter().for_each(|b| self.node_text(b, depth + 1, out));
                let levels: Vec<String> = (a.gathered..a.levels.len()).map(|l| l.to_string()).collect();
                let _ = writeln!(out, "{pad}drain into {} level {}", a.tensor, levels.join(","));
            }
            Node::Accumulate { value } => {
                let a = self.assembly.as_ref().expect("accumulations belong to a sparse output");
                let mut by_dim: Vec<&OutLevel> = a.levels.iter().collect();
                by_dim.sort_by_key(|l| l.dim);
                let vars: Vec<&str> = by_dim.iter().map(|l| self.var(l.var).name.as_str()).collect();
                let _ = writeln!(out, "{pad}{}[{}] += {}", a.tensor, vars.join(","), self.expr_text(value));
            }
            Node::Store { target: Target::Local(local), at, value } => {
                let _ = writeln!(out, "{pad}{} += {}", self.local_text(*local, at), self.expr_text(value));
            }
            Node::Store { target: Target::Output, at, value } => {
                let at = match at {
                    Place::Position(p, _) => p.name(),
                    Place::Coords(vars) => {
                        vars.iter().map(|&v| self.var(v).name.as_str()).collect::<Vec<_>>().join(",")
                    }
                };
                let _ = writeln!(
                    out,
                    "{pad}{}[{at}] += {}",
                    self.tensor(self.output).name,
                    self.expr_text(value)
                );
            }
            Node::Clear { local } => {
                let _ = writeln!(out, "{pad}clear {}", self.local(*local).name);
            }
            Node::Update { at, value } => {
                let vars: Vec<&str> = at.iter().map(|&v| self.var(v).name.as_str()).collect();
                let _ = writeln!(
                    out,
                    "{pad}{}[{}] {}= {}",
                    self.tensor(self.output).name,
                    vars.join(","),
                    match self.reduction {
                        Reduction::Sum => "+",
                        Reduction::Max => "max",
                        Reduction::Min => "min",
                    },
                    self.expr_text(value)
                );
            }
        }
    }
}

impl fmt::Display for LevelKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let params: Vec<String> = self.tensors.values().map(|t| t.to_string()).collect();
        writeln!(f, "level kernel {}({})", self.name, params.join(", "))?;
        if let Some(a) = &self.assembly {
            let levels: Vec<String> = a
                .levels
                .iter()
                .map(|l| format!("{}", spindle_formats::Level::new(l.dim, l.format)))
                .collect();
            let rows = if a.rows > 1 { format!(", counted per row of {}", a.rows) } else { String::new() };
            writeln!(
                f,
                "  assembles {} as {} in two phases (count, fill{rows})",
                a.tensor,
                levels.join(", ")
            )?;
            if let Some(bound) = a.bound {
                writeln!(f, "  or, on one thread, in one pass into at most {bound} entries")?;
            }
            writeln!(f, "  workspace: {}", a.note)?;
        }
        if self.parallel {
            writeln!(f, "  parallel outermost loop")?;
        }
        if self.row_runs {
            writeln!(f, "  outermost loop on threads in whole runs of a row")?;
        }
        for local in self.locals.values() {
            let dims: Vec<String> = local.shape.iter().map(usize::to_string).collect();
            match dims.is_empty() {
                true => writeln!(f, "  local {} (a scalar)", local.name)?,
                false => writeln!(f, "  local {}[{}]", local.name, dims.join("x"))?,
            }
        }
        let mut body = String::new();
        for n in &self.body {
            self.node_text(n, 1, &mut body);
        }
        f.write_str(&body)
    }
}
