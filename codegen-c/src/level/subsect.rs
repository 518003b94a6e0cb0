//! Printing subsection loops ([`Node::Subsect`], [`Node::Resolve`],
//! [`Node::Taps`]): the C
//! twin of `spindle_conv::subsect` and its executor, statement for
//! statement, so the two agree.
//!
//! A subsection loop over a compressed level gathers the position ranges it
//! looks in (one when every level above is resolved; otherwise the children
//! of every position the unresolved levels reach within their windows, into
//! buffers allocated once per kernel or thread; the positions of a level
//! that an enclosing subsection loop walks are taken from its cursors, not
//! searched again), then steps its variable to
//! each value whose window holds a coordinate, moving each range's cursor
//! forward only. A resolve loop walks the level's entries under its parent
//! from the window's start (a binary search) and breaks past its end.

use spindle_ir::kernel::Reduction;
use spindle_ir::level::{AffineOperand, Expr, Node, Position, Reach, VarId, taps_order};

use super::{LaneSplit, Printer};
use crate::dialect::Dialect;
use crate::print::c_type;

/// `static inline` helpers the subsection loops call.
pub(super) const HELPERS: &str = "\
static inline int64_t spindle_ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static inline int64_t spindle_floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
#define SPINDLE_LOWER_BOUND(crd, lo, hi, x) ({ \\
    int64_t l_ = (lo), h_ = (hi); const int64_t x_ = (x); \\
    while (l_ < h_) { const int64_t m_ = l_ + (h_ - l_) / 2; if ((int64_t)(crd)[m_] < x_) l_ = m_ + 1; else h_ = m_; } \\
    l_; })
";

/// Values of a subsection loop's variable handed to a thread at a time are
/// about its extent over this many.
const CHUNKS: usize = 256;

/// An enclosing subsection loop of `level` of affine operand `operand`, its
/// cursors where a resolve loop of that level, or the gathering of a deeper
/// subsection loop, starts; opened with `bound` variables bound (its own
/// included) and `resolved` levels of the operand resolved.
pub(super) struct Opened {
    operand: usize,
    level: usize,
    at: Cursor,
    bound: usize,
    resolved: usize,
}

/// Where an enclosing subsection loop's cursors are.
pub(super) enum Cursor {
    /// One range, of subsection loop `n`: `s{n}_cur` up to `s{n}_end`.
    One(usize),
    /// Several, in the buffers of subsection loop `n`: `s{n}_par` (each
    /// range's parent position, ascending), `s{n}_cur` and `s{n}_end`.
    Ranges(usize),
}

/// Where a subsection loop looks: one range, or several in buffers.
pub(super) fn buffered(first_unresolved: usize, level: usize) -> bool {
    first_unresolved < level
}

impl<D: Dialect> Printer<'_, D> {
    fn operand(&self, operand: usize) -> &AffineOperand {
        &self.k.affine[operand]
    }

    /// The window of `level` under the bound variables: the C expression of
    /// its lowest coordinate and the constant its highest lies above that.
    fn window(&self, operand: usize, level: usize) -> (String, i64) {
        let s = &self.operand(operand).subscripts[level];
        let mut lo = s.offset.to_string();
        let mut span = 0;
        for &(v, c) in &s.terms {
            if self.bound.contains(&v) {
                lo = match c {
                    1 => format!("{lo} + {}", self.var(v)),
                    c => format!("{lo} + {c} * {}", self.var(v)),
                };
            } else {
                span += c * (self.k.var(v).extent as i64 - 1);
            }
        }
        (lo, span)
    }

    /// The C expression of `level`'s subscript, every variable of it bound
    /// (by any loop: a find's subscripts may be bound by merges, which
    /// [`Self::window`] does not see).
    fn coordinate(&self, operand: usize, level: usize) -> String {
        let s = &self.operand(operand).subscripts[level];
        s.terms.iter().fold(s.offset.to_string(), |lo, &(v, c)| match c {
            1 => format!("{lo} + {}", self.var(v)),
            c => format!("{lo} + {c} * {}", self.var(v)),
        })
    }

    fn crd_of(&self, operand: usize, level: usize) -> (String, String) {
        let l = &self.operand(operand).levels[level];
        let crd = match &l.kind {
            Reach::Compressed { crd, .. } | Reach::Singleton { crd } => *crd,
            _ => unreachable!("walked levels have coordinates"),
        };
        (self.tensor(crd).to_string(), c_type(self.k.tensor(crd).dtype).to_string())
    }

    /// The first and end positions of `parent`'s children at `level`.
    fn children(&self, operand: usize, level: usize, parent: &str) -> (String, String) {
        let l = &self.operand(operand).levels[level];
        match &l.kind {
            Reach::Compressed { pos: Some(pos), .. } => {
                let pos = self.tensor(*pos);
                (format!("{pos}[{parent}]"), format!("{pos}[{parent} + 1]"))
            }
            Reach::Compressed { pos: None, len, .. } => ("0".to_string(), len.to_string()),
            Reach::Singleton { .. } => (parent.to_string(), format!("{parent} + 1")),
            Reach::Dense | Reach::Padded { .. } => unreachable!("dense levels are located"),
        }
    }

    fn parent(&self, operand: usize, level: usize) -> String {
        match level {
            0 => "0".to_string(),
            l => Self::position(&Position::Level {
                tensor: self.operand(operand).tensor.clone(),
                level: l - 1,
            }),
        }
    }

    fn bind(&mut self, var: VarId) {
        self.bound.push(var);
    }

    fn unbind(&mut self) {
        self.bound.pop();
    }

    /// The buffers of every subsection loop that gathers several ranges,
    /// sized by the positions of its level's parents.
    pub(super) fn subsect_buffers(&mut self, depth: usize) {
        let mut found = Vec::new();
        collect(&self.k.body, &mut vec![0; self.k.affine.len()], &mut found);
        for (n, operand, level) in found {
            let parents = match level {
                0 => 1,
                l => positions(&self.operand(operand).levels[..l], self.k),
            };
            for array in ["cur", "end", "par"] {
                let line = format!("int64_t *restrict s{n}_{array} = malloc({parents} * sizeof(int64_t));");
                self.line(depth, &line);
            }
        }
    }

    /// Whether a subsection loop gathers several ranges into buffers.
    pub(super) fn has_subsect_buffers(&self) -> bool {
        let mut found = Vec::new();
        collect(&self.k.body, &mut vec![0; self.k.affine.len()], &mut found);
        !found.is_empty()
    }

    pub(super) fn free_subsect_buffers(&mut self, depth: usize) {
        let mut found = Vec::new();
        collect(&self.k.body, &mut vec![0; self.k.affine.len()], &mut found);
        for (n, ..) in found {
            self.line(depth, &format!("free(s{n}_cur); free(s{n}_end); free(s{n}_par);"));
        }
    }

    /// Whether a loop is the kernel's outermost on threads: it must be a
    /// bare `for` right after the `omp for` pragma.
    fn outermost(&self) -> bool {
        self.threads && self.bound.is_empty()
    }

    /// Opens the scope of a loop over a variable's `extent` values: on
    /// threads (the kernel's outermost loop), a loop over chunks of them,
    /// each chunk beginning its own walk; else a block. Returns the C
    /// expressions of the first value and the end. The caller closes it.
    fn open_values(&mut self, name: &str, extent: usize, depth: usize) -> (String, String) {
        if !self.outermost() {
            self.line(depth, "{");
            return ("0".to_string(), extent.to_string());
        }
        // An extent of 0 runs no chunk (a chunk of 1 value keeps the
        // division defined).
        let per = extent.div_ceil(CHUNKS).max(1);
        let chunks = extent.div_ceil(per);
        self.line(
            depth,
            &format!("for (int64_t {name}_chunk = 0; {name}_chunk < {chunks}; {name}_chunk++) {{"),
        );
        self.line(depth + 1, &format!("const int64_t {name}_from = {name}_chunk * {per};"));
        let to = format!("{name}_from + {per} < {extent} ? {name}_from + {per} : {extent}");
        self.line(depth + 1, &format!("const int64_t {name}_to = {to};"));
        (format!("{name}_from"), format!("{name}_to"))
    }

    pub(super) fn subsect(&mut self, var: VarId, operand: usize, level: usize, body: &[Node], depth: usize) {
        let n = self.ss_next;
        self.ss_next += 1;
        let v = self.var(var).to_string();
        let extent = self.k.var(var).extent;
        let coeff = self.operand(operand).subscripts[level].coeff(var);
        let (base, span_all) = self.window(operand, level);
        let span = span_all - coeff * (extent as i64 - 1);
        let (from, to) = self.open_values(&format!("s{n}"), extent, depth);
        let d = depth + 1;
        self.line(d, &format!("const int64_t s{n}_base = {base};"));
        if let Reach::Dense = self.operand(operand).levels[level].kind {
            // Every coordinate is stored: the values whose window meets
            // the dimension.
            let n_level = self.operand(operand).levels[level].extent;
            let first = format!("spindle_ceil_div(-s{n}_base - {span}, {coeff})");
            let last = format!("spindle_floor_div({} - s{n}_base, {coeff}) + 1", n_level as i64 - 1);
            self.line(d, &format!("const int64_t s{n}_first = {first} > {from} ? {first} : {from};"));
            self.line(d, &format!("const int64_t s{n}_last = {last} < {to} ? {last} : {to};"));
            self.line(d, &format!("for (int64_t {v} = s{n}_first; {v} < s{n}_last; {v}++) {{"));
            self.bind(var);
            body.iter().for_each(|b| self.node(b, d + 1));
            self.unbind();
            self.line(d, "}");
            self.line(depth, "}");
            return;
        }
        let first_unresolved = self.resolved[operand];
        let (crd, _) = self.crd_of(operand, level);
        let start = format!("s{n}_base + {coeff} * {from}");
        let buffers = buffered(first_unresolved, level);
        if buffers {
            self.line(d, &format!("int64_t s{n}_ranges = 0;"));
            let from_level = self.gather_from(operand, first_unresolved, level);
            let opened = self.gather(n, operand, from_level, level, &start, d);
            for k in (0..opened).rev() {
                self.line(d + k, "}");
            }
        } else {
            let parent = self.parent(operand, level);
            let (b, e) = self.children(operand, level, &parent);
            self.line(d, &format!("int64_t s{n}_cur = SPINDLE_LOWER_BOUND({crd}, {b}, {e}, {start});"));
            self.line(d, &format!("const int64_t s{n}_end = {e};"));
        }
        self.line(d, &format!("int64_t {v} = {from};"));
        self.line(d, &format!("while ({v} < {to}) {{"));
        let e = d + 1;
        // Expire the coordinates below the window, then find the smallest
        // left.
        self.line(e, &format!("const int64_t s{n}_lo = s{n}_base + {coeff} * {v};"));
        self.line(e, &format!("int64_t s{n}_min = INT64_MAX;"));
        let (cur, end) = match buffers {
            true => {
                self.line(e, &format!("for (int64_t r = 0; r < s{n}_ranges; r++) {{"));
                (format!("s{n}_cur[r]"), format!("s{n}_end[r]"))
            }
            false => (format!("s{n}_cur"), format!("s{n}_end")),
        };
        let f = if buffers { e + 1 } else { e };
        self.line(f, &format!("while ({cur} < {end} && {crd}[{cur}] < s{n}_lo) {cur}++;"));
        self.line(f, &format!("if ({cur} < {end} && {crd}[{cur}] < s{n}_min) s{n}_min = {crd}[{cur}];"));
        if buffers {
            self.line(e, "}");
        }
        self.line(e, &format!("if (s{n}_min == INT64_MAX) break;"));
        // The window does not reach it: jump to the first that does.
        self.line(e, &format!("if (s{n}_min - {span} > s{n}_lo) {{"));
        self.line(e + 1, &format!("{v} = spindle_ceil_div(s{n}_min - {span} - s{n}_base, {coeff});"));
        self.line(e + 1, "continue;");
        self.line(e, "}");
        self.bind(var);
        let at = if buffers { Cursor::Ranges(n) } else { Cursor::One(n) };
        let (bound, resolved) = (self.bound.len(), first_unresolved);
        self.cursors.push(Opened { operand, level, at, bound, resolved });
        body.iter().for_each(|b| self.node(b, e));
        self.cursors.pop();
        self.unbind();
        self.line(e, &format!("{v}++;"));
        self.line(d, "}");
        self.line(depth, "}");
    }

    /// The loops that gather subsection loop `n`'s ranges at `level`: over
    /// levels `m..level` within their windows. Returns how many loops it
    /// opened (the caller closes them).
    fn gather(
        &mut self,
        n: usize,
        operand: usize,
        m: usize,
        level: usize,
        start: &str,
        depth: usize,
    ) -> usize {
        let parent = match m {
            0 => "0".to_string(),
            _ if m == self.resolved[operand] => self.parent(operand, m),
            _ => format!("g{n}_{}", m - 1),
        };
        if m < level
            && let Some(at) = self.reusable(operand, m)
        {
            // The enclosing subsection loop of this level has its ranges'
            // cursors at its window's start: the positions in the window
            // follow them, no search (the window here starts no earlier).
            let (lo, span) = self.window(operand, m);
            let (crd, _) = self.crd_of(operand, m);
            let g = format!("g{n}_{m}");
            let (cur, end, opened) = match *at {
                Cursor::One(k) => (format!("s{k}_cur"), format!("s{k}_end"), 1),
                Cursor::Ranges(k) => {
                    let c = format!("c{n}_{m}");
                    self.line(depth, &format!("for (int64_t {c} = 0; {c} < s{k}_ranges; {c}++) {{"));
                    (format!("s{k}_cur[{c}]"), format!("s{k}_end[{c}]"), 2)
                }
            };
            let d = depth + opened - 1;
            self.line(d, &format!("for (int64_t {g} = {cur}, {g}_end = {end}; {g} < {g}_end && {crd}[{g}] <= ({lo}) + {span}; {g}++) {{"));
            self.line(d + 1, &format!("if ({crd}[{g}] < {lo}) continue;"));
            return opened + self.gather(n, operand, m + 1, level, start, d + 1);
        }
        if m == level {
            let (crd, _) = self.crd_of(operand, level);
            let (b, e) = self.children(operand, level, &parent);
            self.line(depth, &format!("s{n}_par[s{n}_ranges] = {parent};"));
            self.line(
                depth,
                &format!("s{n}_cur[s{n}_ranges] = SPINDLE_LOWER_BOUND({crd}, {b}, {e}, {start});"),
            );
            self.line(depth, &format!("s{n}_end[s{n}_ranges++] = {e};"));
            return 0;
        }
        let (lo, span) = self.window(operand, m);
        let l = &self.operand(operand).levels[m];
        match &l.kind {
            Reach::Dense => {
                let extent = l.extent;
                let x = format!("x{n}_{m}");
                self.line(depth, &format!("for (int64_t {x} = ({lo}) > 0 ? ({lo}) : 0; {x} <= ({lo}) + {span} && {x} < {extent}; {x}++) {{"));
                self.line(depth + 1, &format!("const int64_t g{n}_{m} = {parent} * {extent} + {x};"));
            }
            _ => {
                let (crd, _) = self.crd_of(operand, m);
                let (b, e) = self.children(operand, m, &parent);
                let g = format!("g{n}_{m}");
                self.line(depth, &format!("for (int64_t {g} = SPINDLE_LOWER_BOUND({crd}, {b}, {e}, {lo}), {g}_end = {e}; {g} < {g}_end && {crd}[{g}] <= ({lo}) + {span}; {g}++) {{"));
            }
        }
        1 + self.gather(n, operand, m + 1, level, start, depth + 1)
    }

    /// The enclosing subsection loop of `level` of `operand` whose cursors a
    /// deeper subsection loop can gather its ranges from: opened with the
    /// same levels resolved and no variable bound since, so its ranges are
    /// the positions the levels above reach now.
    fn reusable(&self, operand: usize, level: usize) -> Option<&Cursor> {
        self.opened(operand, level)
            .filter(|o| o.bound == self.bound.len() && o.resolved == self.resolved[operand])
            .map(|o| &o.at)
    }

    /// Where a subsection loop of `level` starts gathering its ranges: at
    /// the deepest level above it with reusable cursors, else at the first
    /// unresolved one.
    fn gather_from(&self, operand: usize, first_unresolved: usize, level: usize) -> usize {
        (first_unresolved..level)
            .rev()
            .find(|&m| self.reusable(operand, m).is_some())
            .unwrap_or(first_unresolved)
    }

    /// The innermost enclosing subsection loop of `level` of `operand`.
    fn opened(&self, operand: usize, level: usize) -> Option<&Opened> {
        self.cursors.iter().rev().find(|o| (o.operand, o.level) == (operand, level))
    }

    pub(super) fn resolve(&mut self, var: VarId, operand: usize, level: usize, body: &[Node], depth: usize) {
        let n = self.ss_next;
        self.ss_next += 1;
        let v = self.var(var).to_string();
        let extent = self.k.var(var).extent as i64;
        let coeff = self.operand(operand).subscripts[level].coeff(var);
        let (base, _) = self.window(operand, level);
        let parent = self.parent(operand, level);
        let tensor = self.operand(operand).tensor.clone();
        let p = Self::position(&Position::Level { tensor, level });
        let dense = matches!(self.operand(operand).levels[level].kind, Reach::Dense);
        let was = self.resolved[operand];
        if dense && self.outermost() {
            // Nothing is bound yet: the window is a constant, and the loop
            // a bare `for` for the `omp for` above it.
            let base: i64 = self.operand(operand).subscripts[level].offset;
            let n_level = self.operand(operand).levels[level].extent as i64;
            let first = (-base).div_euclid(coeff) + i64::from((-base).rem_euclid(coeff) != 0);
            let last = ((n_level - 1 - base).div_euclid(coeff) + 1).min(extent);
            self.line(depth, &format!("for (int64_t {v} = {}; {v} < {last}; {v}++) {{", first.max(0)));
            let at = affine_at(&parent, n_level, &base.to_string(), coeff, &v);
            self.line(depth + 1, &format!("const int64_t {p} = {at};"));
            self.resolved[operand] = level + 1;
            self.bind(var);
            body.iter().for_each(|b| self.node(b, depth + 1));
            self.unbind();
            self.resolved[operand] = was;
            self.line(depth, "}");
            return;
        }
        self.line(depth, "{");
        let d = depth + 1;
        self.line(d, &format!("const int64_t r{n}_base = {base};"));
        self.resolved[operand] = level + 1;
        self.bind(var);
        if dense {
            let n_level = self.operand(operand).levels[level].extent as i64;
            let first = format!("spindle_ceil_div(-r{n}_base, {coeff})");
            let last = format!("spindle_floor_div({} - r{n}_base, {coeff}) + 1", n_level - 1);
            self.line(d, &format!("const int64_t r{n}_first = {first} > 0 ? {first} : 0;"));
            self.line(d, &format!("const int64_t r{n}_last = {last} < {extent} ? {last} : {extent};"));
            self.line(d, &format!("for (int64_t {v} = r{n}_first; {v} < r{n}_last; {v}++) {{"));
            let at = affine_at(&parent, n_level, &format!("r{n}_base"), coeff, &v);
            self.line(d + 1, &format!("const int64_t {p} = {at};"));
        } else {
            let (crd, _) = self.crd_of(operand, level);
            let (b, e) = self.children(operand, level, &parent);
            // A plain index starts at its parent's first child; under a
            // subsection loop of this level, at its cursor (the first
            // coordinate of its window, at most this window's start).
            let s = &self.operand(operand).subscripts[level];
            let search = format!("SPINDLE_LOWER_BOUND({crd}, {b}, {e}, r{n}_base)");
            let cursor = self.opened(operand, level).map(|o| &o.at);
            let begin = match (&s.terms[..], s.offset, cursor) {
                ([_], 0, _) => b.clone(),
                (.., Some(Cursor::One(k))) => format!("s{k}_cur"),
                // The range gathered under this parent, found by its
                // position among the ranges' (ascending) parents.
                (.., Some(Cursor::Ranges(m))) => format!(
                    "({{ const int64_t k_ = SPINDLE_LOWER_BOUND(s{m}_par, 0, s{m}_ranges, {parent}); \
                     k_ < s{m}_ranges && s{m}_par[k_] == {parent} ? s{m}_cur[k_] : {search}; }})"
                ),
                _ => search,
            };
            let skip = cursor.is_some();
            self.line(d, &format!("const int64_t r{n}_end = {e};"));
            self.line(d, &format!("int64_t r{n}_begin = {begin};"));
            if skip {
                self.line(
                    d,
                    &format!("while (r{n}_begin < r{n}_end && {crd}[r{n}_begin] < r{n}_base) r{n}_begin++;"),
                );
            }
            // The walk is the kernel's hottest loop: a body of a few
            // instructions, unrolled (about 10 % on a 3-D convolution).
            self.line(d, "#pragma GCC unroll 4");
            self.line(d, &format!("for (int64_t {p} = r{n}_begin; {p} < r{n}_end; {p}++) {{"));
            self.line(d + 1, &format!("const int64_t r{n}_d = {crd}[{p}] - r{n}_base;"));
            self.line(d + 1, &format!("if (r{n}_d > {}) break;", coeff * (extent - 1)));
            if coeff != 1 {
                self.line(d + 1, &format!("if (r{n}_d % {coeff}) continue;"));
                self.line(d + 1, &format!("const int64_t {v} = r{n}_d / {coeff};"));
            } else {
                self.line(d + 1, &format!("const int64_t {v} = r{n}_d;"));
            }
        }
        body.iter().for_each(|b| self.node(b, d + 1));
        self.line(d, "}");
        self.unbind();
        self.resolved[operand] = was;
        self.line(depth, "}");
    }
}

impl<D: Dialect> Printer<'_, D> {
    /// A subsection loop fused with its resolve ([`Node::Taps`]): the
    /// level's entries in the window of both variables walked once, each
    /// trying every value of the variable with fewer and solving the other.
    /// On threads, each chunk of `outer`'s values walks the entries its
    /// values reach. Where the body is the updates alone (the innermost
    /// loop), the tries are unrolled, the dense reads that change only with
    /// the tried variable (a filter's taps) are loaded once before the walk,
    /// and the entries whose every try lands in range are walked without
    /// the range checks (3-D convolution at 80 %: 2.8 -> 2.0 ms).
    pub(super) fn taps(
        &mut self,
        (outer, inner): (VarId, VarId),
        operand: usize,
        level: usize,
        body: &[Node],
        depth: usize,
    ) {
        let n = self.ss_next;
        self.ss_next += 1;
        let (base, _) = self.window(operand, level);
        let outer_extent = self.k.var(outer).extent;
        let (from, to) = self.open_values(&format!("t{n}"), outer_extent, depth);
        // Each variable's values: `outer`'s this chunk's, `inner`'s all.
        let range = |v: VarId| match v == outer {
            true => (from.clone(), to.clone()),
            false => ("0".to_string(), self.k.var(v).extent.to_string()),
        };
        let (tried, solved) = taps_order(&self.k.vars, outer, inner);
        let subscript = &self.operand(operand).subscripts[level];
        let (a_outer, a_inner) = (subscript.coeff(outer), subscript.coeff(inner));
        let (a_tried, a_solved) = (subscript.coeff(tried), subscript.coeff(solved));
        let ((x_lo, x_hi), (y_lo, y_hi)) = (range(tried), range(solved));
        let (x, y) = (self.var(tried).to_string(), self.var(solved).to_string());
        let leaf = body.iter().all(|b| matches!(b, Node::Update { .. }));
        let d = depth + 1;
        let parent = self.parent(operand, level);
        let (crd, _) = self.crd_of(operand, level);
        let (b, e) = self.children(operand, level, &parent);
        let tensor = self.operand(operand).tensor.clone();
        let p = Self::position(&Position::Level { tensor, level });
        self.line(d, &format!("const int64_t t{n}_base = {base};"));
        let last = edge(a_outer, &to, a_inner, &(self.k.var(inner).extent - 1).to_string());
        self.line(d, &format!("const int64_t t{n}_last = {last};"));
        self.line(d, &format!("const int64_t t{n}_end = {e};"));
        // The entries from `outer`'s first value's window on; a window
        // from 0 starts at the first child.
        let begin = match (base.as_str(), from.as_str()) {
            ("0", "0") => b,
            _ => format!("SPINDLE_LOWER_BOUND({crd}, {b}, {e}, t{n}_base + {a_outer} * {from})"),
        };
        self.line(d, &format!("int64_t {p} = {begin};"));
        let reads = match leaf {
            true => self.tap_reads(tried, body),
            false => Vec::new(),
        };
        let extent = self.k.var(tried).extent;
        let hoisted_before = self.hoisted.len();
        for (m, read) in reads.iter().enumerate() {
            // Each tap's value, before the walk.
            let Expr::Dense { tensor, .. } = read else { unreachable!("tap reads are dense loads") };
            let ty = c_type(self.k.tensor(*tensor).dtype);
            let load = self.expr(read);
            let array = format!("t{n}_f{m}");
            self.line(d, &format!("{ty} {array}[{extent}];"));
            self.line(d, &format!("for (int64_t {x} = 0; {x} < {extent}; {x}++) {array}[{x}] = {load};"));
            self.hoisted.push((read.clone(), format!("{array}[{x}]")));
        }
        // Leaf walks: the entries below the first whose every try lands in
        // range, those up to the last such, and the rest; else one walk.
        let walks = match leaf {
            true => vec![
                (format!("t{n}_d >= {}", edge(a_tried, &x_hi, a_solved, &y_lo)), true),
                (format!("t{n}_d > {}", edge(a_solved, &y_hi, a_tried, &x_lo)), false),
                (format!("t{n}_d > t{n}_last"), true),
            ],
            false => vec![(format!("t{n}_d > t{n}_last"), true)],
        };
        let was = self.resolved[operand];
        self.resolved[operand] = level + 1;
        self.bind(outer);
        self.bind(inner);
        for (stop, checked) in walks {
            self.line(d, &format!("for (; {p} < t{n}_end; {p}++) {{"));
            self.line(d + 1, &format!("const int64_t t{n}_d = {crd}[{p}] - t{n}_base;"));
            self.line(d + 1, &format!("if ({stop}) break;"));
            let value = leaf.then(|| self.entry_value(operand, level, body)).flatten();
            if let Some((val, ty)) = &value {
                // The entry's value, once for every try.
                let load = self.expr(val);
                self.line(d + 1, &format!("const {ty} t{n}_v = {load};"));
                self.hoisted.push((val.clone(), format!("t{n}_v")));
            }
            if leaf {
                self.line(d + 1, &format!("#pragma GCC unroll {extent}"));
            }
            self.line(d + 1, &format!("for (int64_t {x} = {x_lo}; {x} < {x_hi}; {x}++) {{"));
            let rest = match a_tried {
                1 => format!("t{n}_d - {x}"),
                a => format!("t{n}_d - {a} * {x}"),
            };
            match a_solved {
                1 => self.line(d + 2, &format!("const int64_t {y} = {rest};")),
                a => {
                    self.line(d + 2, &format!("const int64_t t{n}_rest = {rest};"));
                    self.line(d + 2, &format!("if (t{n}_rest % {a}) continue;"));
                    self.line(d + 2, &format!("const int64_t {y} = t{n}_rest / {a};"));
                }
            }
            if checked {
                self.line(d + 2, &format!("if ({y} < {y_lo} || {y} >= {y_hi}) continue;"));
            }
            body.iter().for_each(|b| self.node(b, d + 2));
            if value.is_some() {
                self.hoisted.pop();
            }
            self.line(d + 1, "}");
            self.line(d, "}");
        }
        self.hoisted.truncate(hoisted_before);
        self.unbind();
        self.unbind();
        self.resolved[operand] = was;
        self.line(depth, "}");
    }

    /// The dense reads of a leaf [`Node::Taps`]'s updates that change with
    /// `tried` and otherwise only with variables bound outside it: loaded
    /// into an array over `tried`'s values before the walk (GCC reloads
    /// them after every store otherwise: the output may alias them, as far
    /// as it knows). 3-D convolution at 80 %: 2.4 -> 2.0 ms.
    fn tap_reads(&self, tried: VarId, body: &[Node]) -> Vec<Expr> {
        let mut found: Vec<Expr> = Vec::new();
        visit_reads(body, &mut |e| {
            if let Expr::Dense { at, .. } = e
                && at.contains(&tried)
                && at.iter().all(|v| *v == tried || self.bound.contains(v))
                && !found.contains(e)
            {
                found.push(e.clone());
            }
        });
        found
    }

    /// The stored value a leaf [`Node::Taps`]'s updates read at the walked
    /// entry, with its C type: loaded once per entry.
    fn entry_value(&self, operand: usize, level: usize, body: &[Node]) -> Option<(Expr, &'static str)> {
        let tensor = self.operand(operand).tensor.clone();
        let at = Position::Level { tensor, level };
        let mut found = None;
        visit_reads(body, &mut |e| {
            if let Expr::Stored { val, at: p } = e
                && *p == at
            {
                found = Some((e.clone(), c_type(self.k.tensor(*val).dtype)));
            }
        });
        found
    }

    /// The entries of a level at the coordinate its subscript gives: a
    /// search of the parent's children, or a locate; the body runs only
    /// there.
    pub(super) fn find(&mut self, operand: usize, level: usize, body: &[Node], depth: usize) {
        let n = self.ss_next;
        self.ss_next += 1;
        let at = self.coordinate(operand, level);
        let parent = self.parent(operand, level);
        let tensor = self.operand(operand).tensor.clone();
        let p = Self::position(&Position::Level { tensor, level });
        self.line(depth, "{");
        let d = depth + 1;
        self.line(d, &format!("const int64_t f{n}_at = {at};"));
        if let Reach::Dense = self.operand(operand).levels[level].kind {
            let n_level = self.operand(operand).levels[level].extent;
            self.line(d, &format!("if (f{n}_at >= 0 && f{n}_at < {n_level}) {{"));
            let at = match parent.as_str() {
                "0" => format!("f{n}_at"),
                parent => format!("{parent} * {n_level} + f{n}_at"),
            };
            self.line(d + 1, &format!("const int64_t {p} = {at};"));
        } else {
            let (crd, _) = self.crd_of(operand, level);
            let (b, e) = self.children(operand, level, &parent);
            // Every entry at the coordinate: one on a unique level, a run
            // of them on a level that repeats coordinates (COO's rows).
            self.line(d, &format!("const int64_t f{n}_end = {e};"));
            self.line(
                d,
                &format!(
                    "for (int64_t {p} = SPINDLE_LOWER_BOUND({crd}, {b}, f{n}_end, f{n}_at); {p} < f{n}_end && \
                     {crd}[{p}] == f{n}_at; {p}++) {{"
                ),
            );
        }
        let was = self.resolved[operand];
        self.resolved[operand] = level + 1;
        body.iter().for_each(|b| self.node(b, d + 1));
        self.resolved[operand] = was;
        self.line(d, "}");
        self.line(depth, "}");
    }

    /// Pooling's window: count the stored points its updates visit, and
    /// fold zero in where some point was not stored.
    /// A [`Node::Fill`]: one count in a register where `at` is bound
    /// around it, else one per element of the output indices bound inside
    /// it, checked by loops over them after `body`.
    pub(super) fn fill(&mut self, at: &[VarId], points: usize, body: &[Node], depth: usize) {
        let n = self.ss_next;
        self.ss_next += 1;
        // (Bound by the loops inside it: the printer does not track every
        // loop around it, a merge's among them.)
        let inner: Vec<VarId> = at.iter().copied().filter(|v| super::binds(body, &[*v])).collect();
        let names: Vec<String> = inner.iter().map(|&v| self.var(v).to_string()).collect();
        let element = self.flat_element(&inner);
        let hits = match inner.is_empty() {
            true => format!("f{n}_hits"),
            false => format!("f{n}_hits[{element}]"),
        };
        self.line(depth, "{");
        match inner.is_empty() {
            true => self.line(depth + 1, &format!("int64_t {hits} = 0;")),
            false => {
                let len: usize = inner.iter().map(|&v| self.k.var(v).extent).product();
                self.line(
                    depth + 1,
                    &format!("int32_t *restrict f{n}_hits = calloc({len}, sizeof(int32_t));"),
                );
            }
        }
        let was = self.hits.replace(hits.clone());
        body.iter().for_each(|b| self.node(b, depth + 1));
        self.hits = was;
        let out = self.tensor(self.k.output).to_string();
        let address = self.dense_address(self.k.output, at);
        let fold = self.d.fold(self.k.reduction, &format!("{out}[{address}]"), &self.d.float(0.0));
        let d = depth + 1 + inner.len();
        for (k, (&v, name)) in inner.iter().zip(&names).enumerate() {
            let extent = self.k.var(v).extent;
            self.line(depth + 1 + k, &format!("for (int64_t {name} = 0; {name} < {extent}; {name}++) {{"));
        }
        // A GPU warp's lanes (its updates are lane 0's, or each lane's own
        // elements inside a split over the output's columns): where they
        // split the row's positions, each counted its own; else each
        // counted the whole row.
        let check = match (self.split, self.in_split) {
            (Some(split), None) => {
                if let LaneSplit::Positions(_) = split {
                    self.fold_lanes(Reduction::Sum, &hits, d);
                }
                format!("{} && {hits} < {points}", self.writer())
            }
            _ => format!("{hits} < {points}"),
        };
        self.line(d, &format!("if ({check}) {fold}"));
        for k in (0..inner.len()).rev() {
            self.line(depth + 1 + k, "}");
        }
        if !inner.is_empty() {
            self.line(depth + 1, &format!("free(f{n}_hits);"));
        }
        self.line(depth, "}");
    }
}

/// `a * (hi - 1) + b * lo` in C, a number where both are.
fn edge(a: i64, hi: &str, b: i64, lo: &str) -> String {
    match (hi.parse::<i64>(), lo.parse::<i64>()) {
        (Ok(hi), Ok(lo)) => (a * (hi - 1) + b * lo).to_string(),
        _ => format!("{a} * ({hi} - 1) + {b} * ({lo})"),
    }
}

/// Calls `f` on every load in the values of the updates of `nodes`.
fn visit_reads(nodes: &[Node], f: &mut dyn FnMut(&Expr)) {
    for n in nodes {
        if let Node::Update { value, .. } = n {
            value.visit(&mut |e| {
                if matches!(e, Expr::Dense { .. } | Expr::Stored { .. }) {
                    f(e);
                }
            });
        }
    }
}

/// The position a dense level locates: `parent * n + base + coeff * v`.
fn affine_at(parent: &str, n: i64, base: &str, coeff: i64, v: &str) -> String {
    let step = if coeff == 1 { v.to_string() } else { format!("{coeff} * {v}") };
    match parent {
        "0" => format!("{base} + {step}"),
        p => format!("{p} * {n} + {base} + {step}"),
    }
}

/// The subsection loops of `nodes` that gather several ranges, numbered in
/// the order the printer meets every subsection and resolve loop:
/// (number, operand, level).
fn collect(nodes: &[Node], resolved: &mut Vec<usize>, found: &mut Vec<(usize, usize, usize)>) {
    // The printer numbers subsection and resolve loops in pre-order.
    fn walk(
        nodes: &[Node],
        resolved: &mut Vec<usize>,
        count: &mut usize,
        found: &mut Vec<(usize, usize, usize)>,
    ) {
        for n in nodes {
            match n {
                Node::Subsect { operand, level, body, .. } => {
                    if buffered(resolved[*operand], *level) {
                        found.push((*count, *operand, *level));
                    }
                    *count += 1;
                    walk(body, resolved, count, found);
                }
                Node::Resolve { operand, level, body, .. } | Node::Taps { operand, level, body, .. } => {
                    *count += 1;
                    let was = resolved[*operand];
                    resolved[*operand] = level + 1;
                    walk(body, resolved, count, found);
                    resolved[*operand] = was;
                }
                Node::Fill { body, .. } => {
                    *count += 1;
                    walk(body, resolved, count, found);
                }
                Node::Find { operand, level, body } => {
                    *count += 1;
                    let was = resolved[*operand];
                    resolved[*operand] = level + 1;
                    walk(body, resolved, count, found);
                    resolved[*operand] = was;
                }
                Node::Dense { body, .. } => walk(body, resolved, count, found),
                _ => {}
            }
        }
    }
    walk(nodes, resolved, &mut 0, found);
}

/// Positions of the last of `levels` (a prefix of an operand's levels):
/// the parents a range of the next level can have.
fn positions(levels: &[spindle_ir::level::LevelRef], k: &spindle_ir::level::LevelKernel) -> usize {
    levels.iter().fold(1, |parents, l| match &l.kind {
        Reach::Dense => parents * l.extent,
        Reach::Compressed { crd, .. } | Reach::Singleton { crd } | Reach::Padded { crd, .. } => {
            k.tensor(*crd).shape[0]
        }
    })
}
