//! The primitives of non-empty subsection iteration (paper 002 §3.1, §5.2)
//! over levels of any format whose coordinates ascend: subsect_begin
//! ([`Subsections::begin`]), next, offset and end.
//!
//! A loop that *reduces* an affine subscript such as `i` in `I[i+p]` (with
//! `p` in `0..3` bound later) need not visit every `i`: only those whose
//! *window* `[i, i+2]` holds a stored coordinate. With coefficients the
//! window of value `v` is `[base + c·v, base + c·v + span]` (`I[2*i+p]`:
//! `c = 2`, `span = 2`). The stored coordinates come from position ranges of
//! the level: one range when every level above is resolved (the paper's
//! initial-tensor case), or the children of every position the unresolved
//! levels above reach within their own windows ([`ranges`], the
//! different-dimension case). Each range keeps a cursor that only moves
//! forward, so a whole loop costs one pass over its ranges.
//!
//! ```
//! use spindle_conv::subsect::Subsections;
//!
//! // The paper's Fig. 3: entries at 2, 8 and 9, windows of width 2.
//! let crd = [2, 8, 9];
//! let mut ss = Subsections::begin(&crd, vec![(0, 3)], 0, 1, 1, 9, 0);
//! let mut offsets = Vec::new();
//! while !ss.end() {
//!     offsets.push(ss.offset());
//!     ss.next();
//! }
//! assert_eq!(offsets, [1, 2, 7, 8]);
//! ```

/// A level of a stored tensor, as subsection loops read it.
#[derive(Clone, Copy, Debug)]
pub enum LevelView<'a> {
    /// Every coordinate `0..extent`; the child of parent `p` at coordinate
    /// `x` is position `p * extent + x`.
    Dense { extent: usize },
    /// Children `pos[p] .. pos[p + 1]` (a root level without `pos`: all of
    /// `crd`), coordinates ascending in `crd`.
    Compressed { pos: Option<&'a [i64]>, crd: &'a [i64] },
    /// One child per parent, at the parent's own position.
    Singleton { crd: &'a [i64] },
}

impl<'a> LevelView<'a> {
    /// The levels of a d/c level list (`dddc`, `dccc`, ...), outermost
    /// first.
    pub fn levels_of<V>(t: &'a spindle_formats::LevelTensor<V, i64>) -> Vec<LevelView<'a>> {
        (0..t.dense.len())
            .map(|l| match t.dense[l] {
                true => LevelView::Dense { extent: t.shape[t.modes[l]] },
                false => LevelView::Compressed { pos: Some(&t.pos[l]), crd: &t.crd[l] },
            })
            .collect()
    }

    /// The positions of `parent`'s children (not for dense levels).
    pub fn children(&self, parent: i64) -> (i64, i64) {
        match self {
            LevelView::Dense { extent } => (parent * *extent as i64, (parent + 1) * *extent as i64),
            LevelView::Compressed { pos: Some(pos), .. } => (pos[parent as usize], pos[parent as usize + 1]),
            LevelView::Compressed { pos: None, crd } => (0, crd.len() as i64),
            LevelView::Singleton { .. } => (parent, parent + 1),
        }
    }

    /// The coordinates of a level with positions.
    pub fn crd(&self) -> &'a [i64] {
        match self {
            LevelView::Compressed { crd, .. } | LevelView::Singleton { crd } => crd,
            LevelView::Dense { .. } => &[],
        }
    }
}

/// The first position in `lo..hi` whose coordinate is at least `x` (`hi`
/// where none is).
pub fn lower_bound(crd: &[i64], lo: i64, hi: i64, x: i64) -> i64 {
    let slice = &crd[lo as usize..hi as usize];
    lo + slice.partition_point(|&c| c < x) as i64
}

/// `⌈a / b⌉` for `b > 0`.
pub fn ceil_div(a: i64, b: i64) -> i64 {
    -((-a).div_euclid(b))
}

/// The values `v` in `0..extent` whose window `[base + c·v, base + c·v +
/// span]` meets `0..n`: a dense level's subsections (every coordinate is
/// stored), and with `span = 0` the values a dense level resolves.
pub fn dense_values(n: usize, base: i64, coeff: i64, span: i64, extent: usize) -> std::ops::Range<i64> {
    let first = ceil_div(-base - span, coeff).max(0);
    let last = (n as i64 - 1 - base).div_euclid(coeff).min(extent as i64 - 1);
    first..(last + 1).max(first)
}

/// The position ranges of level `level` that subsections look in: the
/// children of every position that levels `first..level` reach from
/// `parent` (a position of level `first - 1`, or the root 0) with each
/// coordinate in its level's window, each range starting at its first
/// coordinate not below the window of `level`. `windows[m]` is level `m`'s
/// `[lo, hi]`. Returns each range's parent (a position of level `level -
/// 1`, ascending) and the range.
pub fn ranges(
    levels: &[LevelView],
    first: usize,
    parent: i64,
    windows: &[(i64, i64)],
    level: usize,
) -> Vec<(i64, (i64, i64))> {
    let mut out = Vec::new();
    walk_ranges(levels, first, parent, windows, level, &mut out);
    out
}

/// [`ranges`] from an enclosing subsection loop of level `m < level`: the
/// positions of level `m` in its window lie in `starts` (each from a cursor
/// at most the window's start to its range's end, ascending), so the levels
/// above `m` are not walked again.
pub fn ranges_from(
    levels: &[LevelView],
    m: usize,
    starts: &[(i64, i64)],
    windows: &[(i64, i64)],
    level: usize,
) -> Vec<(i64, (i64, i64))> {
    let (lo, hi) = windows[m];
    let crd = levels[m].crd();
    let mut out = Vec::new();
    for &(from, end) in starts {
        let mut p = from;
        while p < end && crd[p as usize] <= hi {
            if crd[p as usize] >= lo {
                walk_ranges(levels, m + 1, p, windows, level, &mut out);
            }
            p += 1;
        }
    }
    out
}

fn walk_ranges(
    levels: &[LevelView],
    m: usize,
    parent: i64,
    windows: &[(i64, i64)],
    level: usize,
    out: &mut Vec<(i64, (i64, i64))>,
) {
    let (lo, hi) = windows[m];
    match levels[m] {
        _ if m == level => {
            let (b, e) = levels[m].children(parent);
            out.push((parent, (lower_bound(levels[m].crd(), b, e, lo), e)));
        }
        LevelView::Dense { extent } => {
            for x in lo.max(0)..=hi.min(extent as i64 - 1) {
                walk_ranges(levels, m + 1, parent * extent as i64 + x, windows, level, out);
            }
        }
        view => {
            let crd = view.crd();
            let (b, e) = view.children(parent);
            let mut p = lower_bound(crd, b, e, lo);
            while p < e && crd[p as usize] <= hi {
                walk_ranges(levels, m + 1, p, windows, level, out);
                p += 1;
            }
        }
    }
}

/// The non-empty subsections of one level along an index variable `v` in
/// `0..extent`, in increasing `v`: the window of `v` is `[base + coeff·v,
/// base + coeff·v + span]`, and it is non-empty when a coordinate of the
/// ranges falls in it.
#[derive(Clone, Debug)]
pub struct Subsections<'a> {
    crd: &'a [i64],
    /// Per range, the first position not yet expired, and the range's end.
    cur: Vec<i64>,
    end: Vec<i64>,
    base: i64,
    coeff: i64,
    span: i64,
    extent: i64,
    offset: i64,
}

impl<'a> Subsections<'a> {
    /// subsect_begin(T, level, size): the windows of `size` consecutive
    /// coordinates of level `level` of `levels` under `parent` (a position
    /// of the level above, 0 for the first) that hold an entry, by their
    /// first coordinate (the offset) in `0..extent`.
    ///
    /// ```
    /// use spindle_conv::subsect::{LevelView, Subsections};
    /// use spindle_formats::{Coo, LevelTensor};
    ///
    /// // A 2 x 10 matrix in `dc` (CSR): row 1 holds 2, 8 and 9.
    /// let m = Coo::<f64, i64>::new(vec![2, 10], vec![vec![0, 1, 1, 1], vec![5, 2, 8, 9]], vec![1.0; 4])?;
    /// let t = LevelTensor::from_coo(&m, &[], &[true, false])?;
    /// let levels = LevelView::levels_of(&t);
    /// let mut ss = Subsections::of(&levels, 1, 1, 2, 9);
    /// let mut offsets = Vec::new();
    /// while !ss.end() {
    ///     offsets.push(ss.offset());
    ///     ss.next();
    /// }
    /// assert_eq!(offsets, [1, 2, 7, 8]);
    /// # Ok::<(), spindle_formats::FormatError>(())
    /// ```
    pub fn of(
        levels: &[LevelView<'a>],
        level: usize,
        parent: i64,
        size: usize,
        extent: usize,
    ) -> Subsections<'a> {
        let (b, e) = levels[level].children(parent);
        Subsections::begin(levels[level].crd(), vec![(b, e)], 0, 1, size as i64 - 1, extent, 0)
    }

    /// subsect_begin: the first non-empty subsection with `v >= from`.
    pub fn begin(
        crd: &'a [i64],
        ranges: Vec<(i64, i64)>,
        base: i64,
        coeff: i64,
        span: i64,
        extent: usize,
        from: i64,
    ) -> Subsections<'a> {
        let (cur, end) = ranges.into_iter().unzip();
        let mut ss = Subsections { crd, cur, end, base, coeff, span, extent: extent as i64, offset: from };
        ss.seek();
        ss
    }

    /// subsect_offset: the value of the variable, the current window's
    /// start being `base + coeff·offset`.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The first position of range `r` not below the current window.
    pub fn cursor(&self, r: usize) -> i64 {
        self.cur[r]
    }

    /// subsect_end: no non-empty subsection is left.
    pub fn end(&self) -> bool {
        self.offset >= self.extent
    }

    /// subsect_next: the next non-empty subsection.
    pub fn next(&mut self) {
        self.offset += 1;
        self.seek();
    }

    /// From `offset`, the first value whose window holds a coordinate:
    /// expire the coordinates below the window, then jump to the first
    /// window that reaches the smallest one left.
    fn seek(&mut self) {
        while self.offset < self.extent {
            let lo = self.base + self.coeff * self.offset;
            let mut min = i64::MAX;
            for (cur, &end) in self.cur.iter_mut().zip(&self.end) {
                while *cur < end && self.crd[*cur as usize] < lo {
                    *cur += 1;
                }
                if *cur < end {
                    min = min.min(self.crd[*cur as usize]);
                }
            }
            if min == i64::MAX {
                break;
            }
            if min - self.span <= lo {
                return;
            }
            self.offset = ceil_div(min - self.span - self.base, self.coeff);
        }
        self.offset = self.extent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value whose window holds a coordinate, by brute force.
    fn brute(crd: &[i64], base: i64, coeff: i64, span: i64, extent: usize) -> Vec<i64> {
        (0..extent as i64)
            .filter(|v| crd.iter().any(|&x| x >= base + coeff * v && x <= base + coeff * v + span))
            .collect()
    }

    #[test]
    fn offsets_match_brute_force_with_strides_and_intercepts() {
        let crd = [0, 3, 4, 9, 17, 18, 30];
        for coeff in 1..4 {
            for span in 0..5 {
                for base in -3..3 {
                    let mut ss =
                        Subsections::begin(&crd, vec![(0, crd.len() as i64)], base, coeff, span, 12, 0);
                    let mut got = Vec::new();
                    while !ss.end() {
                        got.push(ss.offset());
                        ss.next();
                    }
                    assert_eq!(got, brute(&crd, base, coeff, span, 12), "c={coeff} span={span} base={base}");
                }
            }
        }
    }

    #[test]
    fn several_ranges_merge_their_coordinates() {
        // Two rows' coordinates: 1, 7 and 4, 12.
        let crd = [1, 7, 4, 12];
        let mut ss = Subsections::begin(&crd, vec![(0, 2), (2, 4)], 0, 1, 1, 20, 0);
        let mut got = Vec::new();
        while !ss.end() {
            got.push(ss.offset());
            ss.next();
        }
        assert_eq!(got, [0, 1, 3, 4, 6, 7, 11, 12]);
    }

    #[test]
    fn dense_values_clip_to_the_dimension() {
        // Windows [2v - 1, 2v + 1] meeting 0..5.
        let values =
            |base, coeff, span, extent| dense_values(5, base, coeff, span, extent).collect::<Vec<_>>();
        assert_eq!(values(-1, 2, 2, 10), [0, 1, 2]);
        assert_eq!(values(7, 1, 0, 10), []);
        assert_eq!(values(-4, 1, 0, 3), []);
        assert_eq!(values(-4, 1, 0, 6), [4, 5]);
    }

    #[test]
    fn ranges_walk_unresolved_levels_within_their_windows() {
        // DCSR rows 0, 2, 5 with columns {1, 3}, {0}, {2, 4}.
        let crd0 = [0, 2, 5];
        let pos1 = [0, 2, 3, 5];
        let crd1 = [1, 3, 0, 2, 4];
        let levels = [
            LevelView::Compressed { pos: None, crd: &crd0 },
            LevelView::Compressed { pos: Some(&pos1), crd: &crd1 },
        ];
        // Rows within [1, 5], columns from 2: rows 2 and 5.
        assert_eq!(ranges(&levels, 0, 0, &[(1, 5), (2, 9)], 1), [(1, (3, 3)), (2, (3, 5))]);
        // CSR over a dense first level: rows 1..=2 of a 3-row matrix.
        let pos = [0, 1, 3, 4];
        let crd = [0, 1, 2, 0];
        let csr = [LevelView::Dense { extent: 3 }, LevelView::Compressed { pos: Some(&pos), crd: &crd }];
        assert_eq!(ranges(&csr, 0, 0, &[(1, 7), (0, 9)], 1), [(1, (1, 3)), (2, (3, 4))]);
    }

    #[test]
    fn ranges_from_an_enclosing_cursor_match_a_fresh_walk() {
        // CSF: i in {0, 2}; (0, j) in {1, 4}, (2, j) in {2}; k below each.
        let crd0 = [0, 2];
        let (pos1, crd1) = ([0, 2, 3], [1, 4, 2]);
        let (pos2, crd2) = ([0, 2, 3, 5], [0, 3, 1, 2, 6]);
        let levels = [
            LevelView::Compressed { pos: None, crd: &crd0 },
            LevelView::Compressed { pos: Some(&pos1), crd: &crd1 },
            LevelView::Compressed { pos: Some(&pos2), crd: &crd2 },
        ];
        let windows = [(0, 2), (2, 4), (1, 9)];
        let fresh = ranges(&levels, 0, 0, &windows, 2);
        assert_eq!(fresh, [(1, (2, 3)), (2, (3, 5))]);
        // An enclosing loop of level 1 with cursors at or before its window's
        // start: from (0, j)'s first entry and (2, j)'s.
        assert_eq!(ranges_from(&levels, 1, &[(0, 2), (2, 3)], &windows, 2), fresh);
        // Its window moved on (j from 3): (0, 4) alone.
        assert_eq!(ranges_from(&levels, 1, &[(1, 2), (3, 3)], &[(0, 2), (3, 5), (1, 9)], 2), [(1, (2, 3))]);
    }
}
