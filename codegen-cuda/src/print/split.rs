//! The work list of the block-row mapping (`map=rows`, one block row a
//! block): which groups each block multiplies, built on the host from the
//! data, so a block row whose work is far above the average is split
//! across blocks instead of holding the launch up alone.
//!
//! A row of at most [`RowSplit::cap`] groups is one entry: its block sums
//! every group in registers and writes the row. A longer row is cut into
//! `ceil(len / cap)` even parts, each an entry of its own; each part's
//! block stores its f32 sums in a slot of a scratch buffer, and the part
//! that finishes last (a counter per row and slab) adds the slots in order
//! of the parts and writes the row, so the result does not depend on which
//! part finished last. Entries are ordered by decreasing work, the longest
//! first, so no long part starts in the last wave.
//!
//! The list is `4 * entries` values `(row, lo, hi, slot)` (groups `[lo,
//! hi)` of block row `row`; `slot` is -1 for a whole row; `row` is -1 for
//! an entry no row needs), then per slot `(first, parts)`: the row's first
//! slot and its number of parts. The bound on entries is static (rows plus
//! groups over the cap), so the launch does not depend on the data.

use spindle_ir::tensor::{TensorValue, Tensors};

/// Parts shorter than this many blocks are not worth a split: the copy
/// ring keeps `STAGES` blocks in flight.
const MIN_PART_BLOCKS: usize = 2 * super::rows::STAGES;

/// A row is split when it holds more than this many times the average
/// row's groups.
const HEAVY: usize = 2;

/// How a block-row kernel's work is split: what the host needs to build the
/// list, and the sizes of the scratch buffers beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowSplit {
    /// `R`: the block row of each group, nondecreasing.
    pub rows: String,
    pub block_rows: usize,
    pub groups: usize,
    /// The most groups a part holds: rows with more are split.
    pub cap: usize,
    /// Entries of the list: the launch's blocks over its slabs.
    pub entries: usize,
    /// Column slabs of the output; a block owns an entry at one slab.
    pub slabs: usize,
    /// f32 sums of one part at one slab (`bm * slab`).
    pub tile: usize,
}

/// The list for one set of data, and how many partial slots it uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitWork {
    pub list: Vec<i64>,
    pub slots: usize,
}

impl RowSplit {
    /// The split of `groups` groups of `group` blocks over `block_rows`
    /// rows: a row is cut when it holds more than [`HEAVY`] times the
    /// average, into parts of at least [`MIN_PART_BLOCKS`] blocks; with
    /// `split` false no row is cut (a block a row, the longest first).
    pub fn new(
        rows: String,
        block_rows: usize,
        groups: usize,
        group: usize,
        slabs: usize,
        tile: usize,
        split: bool,
    ) -> Self {
        let average = groups.div_ceil(block_rows.max(1));
        let cap = if split { (HEAVY * average).max(MIN_PART_BLOCKS.div_ceil(group.max(1))) } else { groups };
        let cap = cap.max(1);
        RowSplit { rows, block_rows, groups, cap, entries: block_rows + groups / cap, slabs, tile }
    }

    /// The list for `rows` (each group's block row, nondecreasing; other
    /// data give a wrong list, not a panic: the caller checks the order).
    pub fn work(&self, rows: &[i64]) -> SplitWork {
        // (row, lo, hi, slot), one per part; a row's slots are consecutive.
        let mut parts = Vec::with_capacity(self.entries);
        let mut firsts = Vec::new();
        // Groups of a row below 0 belong to no block row (the kernel's mask
        // skips them, as the reference does).
        let mut lo = rows.partition_point(|&r| r < 0);
        for row in 0..self.block_rows {
            let hi = lo + rows[lo..].partition_point(|&r| r <= row as i64);
            let len = hi - lo;
            if len <= self.cap {
                parts.push([row as i64, lo as i64, hi as i64, -1]);
            } else {
                let count = len.div_ceil(self.cap);
                let first = firsts.len() / 2;
                for i in 0..count {
                    let (a, b) = (lo + len * i / count, lo + len * (i + 1) / count);
                    parts.push([row as i64, a as i64, b as i64, (first + i) as i64]);
                    firsts.extend([first as i64, count as i64]);
                }
            }
            lo = hi;
        }
        // Each row's parts are 1 + floor((len - 1) / cap) <= 1 + floor(len / cap),
        // and a sum of floors is at most the floor of the sum.
        assert!(parts.len() <= self.entries, "{} parts for {} entries", parts.len(), self.entries);
        // The longest first (stable: rows in order among equals).
        parts.sort_by_key(|p| std::cmp::Reverse(p[2] - p[1]));
        parts.resize(self.entries, [-1, 0, 0, -1]);
        let slots = firsts.len() / 2;
        let mut list: Vec<i64> = parts.into_iter().flatten().collect();
        list.extend(firsts);
        SplitWork { list, slots }
    }

    /// [`RowSplit::work`] for the rows tensor in `tensors`.
    pub fn work_for(&self, tensors: &Tensors) -> Result<SplitWork, String> {
        match tensors.get(&self.rows) {
            Some(TensorValue::Indices(r)) if r.len() == self.groups => {
                let rows: Vec<i64> = r.iter().copied().collect();
                if let Some(i) = rows.windows(2).position(|w| w[1] < w[0]) {
                    return Err(format!(
                        "the block-row mapping needs {} nondecreasing, but {}[{}] = {} follows {}",
                        self.rows,
                        self.rows,
                        i + 1,
                        rows[i + 1],
                        rows[i]
                    ));
                }
                Ok(self.work(&rows))
            }
            _ => Err(format!("no index data of {} groups for {}", self.groups, self.rows)),
        }
    }

    /// f32 elements of the partial sums for `slots` slots (at least one).
    pub fn partials_len(&self, slots: usize) -> usize {
        (slots * self.slabs * self.tile).max(1)
    }

    /// Counters for `slots` slots (at least one): one per split row and
    /// slab, at its first slot, zero between launches.
    pub fn counters_len(&self, slots: usize) -> usize {
        (slots * self.slabs).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(block_rows: usize, groups: usize, group: usize) -> RowSplit {
        RowSplit::new("R".into(), block_rows, groups, group, 2, 32 * 64, true)
    }

    /// The entries as (row, lo, hi, slot) and the slots' (first, parts).
    fn entries(s: &RowSplit, w: &SplitWork) -> (Vec<[i64; 4]>, Vec<[i64; 2]>) {
        let (head, tail) = w.list.split_at(4 * s.entries);
        let entries = head.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
        (entries, tail.chunks(2).map(|c| [c[0], c[1]]).collect())
    }

    #[test]
    fn uniform_rows_are_one_entry_each_in_order() {
        // 4 rows of 3 groups: average 3, cap max(6, 8 / 1) = 8.
        let s = split(4, 12, 1);
        assert_eq!((s.cap, s.entries), (8, 5));
        let rows: Vec<i64> = (0..12).map(|p| p / 3).collect();
        let w = s.work(&rows);
        let (e, slots) = entries(&s, &w);
        assert_eq!(w.slots, 0);
        assert!(slots.is_empty());
        assert_eq!(e, vec![[0, 0, 3, -1], [1, 3, 6, -1], [2, 6, 9, -1], [3, 9, 12, -1], [-1, 0, 0, -1]]);
    }

    #[test]
    fn a_heavy_row_is_cut_into_even_parts_longest_first() {
        // Row 1 holds 25 of 32 groups, rows 0 and 3 are short, row 2 is
        // empty: average 8, cap 16; row 1 becomes 2 parts (12 and 13).
        let s = split(4, 32, 1);
        assert_eq!((s.cap, s.entries), (16, 6));
        let mut rows = vec![0i64; 3];
        rows.extend(std::iter::repeat_n(1, 25));
        rows.extend(std::iter::repeat_n(3, 4));
        let w = s.work(&rows);
        let (e, slots) = entries(&s, &w);
        assert_eq!(w.slots, 2);
        assert_eq!(slots, vec![[0, 2], [0, 2]]);
        assert_eq!(
            e,
            vec![
                [1, 15, 28, 1],
                [1, 3, 15, 0],
                [3, 28, 32, -1],
                [0, 0, 3, -1],
                [2, 28, 28, -1],
                [-1, 0, 0, -1]
            ]
        );
        assert_eq!(s.partials_len(w.slots), 2 * 2 * 32 * 64);
        assert_eq!(s.counters_len(w.slots), 4);
    }

    #[test]
    fn groups_of_negative_rows_belong_to_no_row() {
        let s = split(2, 4, 1);
        let w = s.work(&[-1, 0, 0, 1]);
        let (e, _) = entries(&s, &w);
        assert_eq!(e[..2], [[0, 1, 3, -1], [1, 3, 4, -1]]);
    }

    #[test]
    fn without_the_split_a_heavy_row_stays_whole() {
        let s = RowSplit::new("R".into(), 4, 32, 1, 2, 32 * 64, false);
        let mut rows = vec![0i64; 3];
        rows.extend(std::iter::repeat_n(1, 25));
        rows.extend(std::iter::repeat_n(3, 4));
        let w = s.work(&rows);
        let (e, _) = entries(&s, &w);
        assert_eq!(w.slots, 0);
        assert_eq!(e[0], [1, 3, 28, -1]);
        assert_eq!(e.iter().filter(|e| e[0] >= 0).count(), 4);
    }

    #[test]
    fn every_group_is_in_exactly_one_entry_within_the_bound() {
        // Power-law-like rows: row r holds about 1000 / (r + 1) groups.
        for group in [1, 2, 4] {
            let mut rows = Vec::new();
            for r in 0..64i64 {
                rows.extend(std::iter::repeat_n(r, (1000 / (r + 1)) as usize));
            }
            let s = split(64, rows.len(), group);
            let w = s.work(&rows);
            let (e, slots) = entries(&s, &w);
            let mut seen = vec![0; rows.len()];
            for &[row, lo, hi, slot] in e.iter().filter(|e| e[0] >= 0) {
                assert!(hi - lo <= s.cap as i64, "g={group}: part [{lo}, {hi}) over the cap {}", s.cap);
                for p in lo..hi {
                    seen[p as usize] += 1;
                    assert_eq!(rows[p as usize], row);
                }
                if slot >= 0 {
                    let [first, parts] = slots[slot as usize];
                    assert!((first..first + parts).contains(&slot));
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "g={group}");
            assert!(e.windows(2).all(|w| w[0][2] - w[0][1] >= w[1][2] - w[1][1]), "longest first");
        }
    }

    #[test]
    fn unsorted_rows_are_an_error_with_the_place() {
        let s = split(4, 3, 1);
        let mut t = Tensors::new();
        t.insert("R".into(), TensorValue::Indices(ndarray::arr1(&[0i64, 2, 1]).into_dyn()));
        let err = s.work_for(&t).unwrap_err();
        assert!(err.contains("R[2] = 1 follows 2"), "{err}");
    }
}
