//! Statistics every format reports: sizes, padding, bytes per array,
//! occupancy, and for grouping the Insum cost F(g) = (g+1)·Σ⌈occᵢ/g⌉ with
//! the heuristic g* = √(S/n).

use std::collections::BTreeMap;

use serde::Serialize;

/// F(g) and g* from the per-slice occupancy along the grouped dimension.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupAnalysis {
    /// Slices along the grouped dimension (rows), empty ones included.
    pub n: usize,
    /// Entries in all slices (S).
    pub s: usize,
    pub max_occupancy: usize,
    /// √(S/n), the minimiser of the relaxed cost (Insum §4.2).
    pub g_star: f64,
    /// The powers of two just below and above g* (equal when g* is one).
    pub g_star_pow2: [usize; 2],
    /// F(g) for g = 1, 2, 4, … up to the first power of two ≥ the maximum
    /// occupancy (where GroupCOO becomes ELL).
    pub f_of_g: BTreeMap<usize, u64>,
    /// The power of two with the smallest F(g) (the smaller g on ties).
    pub g_best: usize,
    /// For the same g: the fraction of GroupCOO's stored values that are
    /// padding, 1 − S / (g·Σ⌈occᵢ/g⌉).
    pub padding_of_g: BTreeMap<usize, f64>,
}

/// Exact F(g) = (g+1)·Σᵢ⌈occᵢ/g⌉: one scatter and g gathers per group.
pub fn f_of_g(occupancy: &[usize], g: usize) -> u64 {
    let groups: u64 = occupancy.iter().map(|&o| o.div_ceil(g) as u64).sum();
    (g as u64 + 1) * groups
}

impl GroupAnalysis {
    pub fn new(occupancy: &[usize]) -> Self {
        let n = occupancy.len();
        let s: usize = occupancy.iter().sum();
        let max_occupancy = occupancy.iter().copied().max().unwrap_or(0);
        let (g_star, [lo, hi]) = g_star(n, s);
        let top = max_occupancy.max(1).next_power_of_two();
        let f_of_g: BTreeMap<usize, u64> = std::iter::successors(Some(1usize), |g| Some(g * 2))
            .take_while(|&g| g <= top)
            .map(|g| (g, f_of_g(occupancy, g)))
            .collect();
        let padding_of_g = f_of_g
            .iter()
            .map(|(&g, &f)| {
                let stored = f / (g as u64 + 1) * g as u64;
                (g, if stored == 0 { 0.0 } else { 1.0 - s as f64 / stored as f64 })
            })
            .collect();
        let g_best = f_of_g.iter().min_by_key(|&(g, f)| (*f, *g)).map(|(g, _)| *g).unwrap_or(1);
        GroupAnalysis { n, s, max_occupancy, g_star, g_star_pow2: [lo, hi], f_of_g, g_best, padding_of_g }
    }
}

/// g* = √(S/n) and the powers of two just below and above it.
fn g_star(n: usize, s: usize) -> (f64, [usize; 2]) {
    let g_star = if n == 0 { 1.0 } else { (s as f64 / n as f64).sqrt() };
    let lo = prev_power_of_two(g_star.floor().max(1.0) as usize);
    let hi = if (lo as f64) < g_star { lo * 2 } else { lo };
    (g_star, [lo, hi])
}

/// `g=auto`: whichever neighbouring power of two of g* has the smaller
/// F(g), as the Insum paper rounds g* to powers of two. Two passes over the
/// occupancy, so conversions can afford it. `slices` is n, the number of
/// slices including empty ones, which `occupancy` may leave out (they add
/// nothing to F).
pub fn auto_group_size(slices: usize, occupancy: &[usize]) -> usize {
    let (_, [lo, hi]) = g_star(slices, occupancy.iter().sum());
    if f_of_g(occupancy, hi) < f_of_g(occupancy, lo) { hi } else { lo }
}

fn prev_power_of_two(x: usize) -> usize {
    if x == 0 { 1 } else { 1 << (usize::BITS - 1 - x.leading_zeros()) }
}

/// Min, median, mean and max of the per-slice occupancy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Occupancy {
    pub min: usize,
    pub median: f64,
    pub mean: f64,
    pub max: usize,
    /// Slices per bucket: 0, 1, 2–3, 4–7, … (`lo`..=`hi`, count).
    pub histogram: Vec<HistogramBucket>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HistogramBucket {
    pub lo: usize,
    pub hi: usize,
    pub count: usize,
}

impl Occupancy {
    pub fn new(occupancy: &[usize]) -> Self {
        let mut sorted = occupancy.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let median = match n {
            0 => 0.0,
            _ if n % 2 == 1 => sorted[n / 2] as f64,
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0,
        };
        let mean = if n == 0 { 0.0 } else { sorted.iter().sum::<usize>() as f64 / n as f64 };
        let mut histogram: Vec<HistogramBucket> = Vec::new();
        for &o in &sorted {
            let (lo, hi) = if o == 0 { (0, 0) } else { (prev_power_of_two(o), prev_power_of_two(o) * 2 - 1) };
            match histogram.last_mut() {
                Some(b) if b.lo == lo => b.count += 1,
                _ => histogram.push(HistogramBucket { lo, hi, count: 1 }),
            }
        }
        Occupancy {
            min: sorted.first().copied().unwrap_or(0),
            median,
            mean,
            max: sorted.last().copied().unwrap_or(0),
            histogram,
        }
    }
}

/// One stored array of a format.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ArrayInfo {
    pub name: String,
    pub dtype: String,
    pub len: usize,
    pub bytes: usize,
}

/// The statistics of a tensor stored in one format.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stats {
    pub format: String,
    pub shape: Vec<usize>,
    /// Rows and columns for matrices (the first two dimensions otherwise).
    pub rows: usize,
    pub cols: usize,
    /// Entries of the tensor (non-padding; for block and dense formats, the
    /// non-zero values).
    pub nnz: usize,
    /// Value slots stored, padding and fill included.
    pub stored: usize,
    /// (stored − nnz) / stored: the fraction of stored values that are
    /// padding or fill.
    pub padding_ratio: f64,
    pub arrays: Vec<ArrayInfo>,
    /// Total bytes over all arrays.
    pub bytes: usize,
    /// The dimension occupancy and grouping are measured along.
    pub group_dim: usize,
    /// Whether occupancy counts blocks (BlockGroupCOO) or entries.
    pub group_unit: String,
    pub occupancy: Occupancy,
    #[serde(flatten)]
    pub grouping: GroupAnalysis,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure4_costs() {
        // Insum Figure 4: occ = [3, 1, 1, 2].
        let a = GroupAnalysis::new(&[3, 1, 1, 2]);
        assert_eq!(a.f_of_g[&1], 2 * 7);
        assert_eq!(a.f_of_g[&2], 3 * 5);
        assert_eq!(a.f_of_g[&4], 5 * 4);
        assert_eq!(a.f_of_g.len(), 3);
        assert!((a.g_star - (7.0f64 / 4.0).sqrt()).abs() < 1e-12);
        assert_eq!(a.g_star_pow2, [1, 2]);
        assert_eq!(a.g_best, 1);
        assert_eq!(auto_group_size(4, &[3, 1, 1, 2]), 1);
        // g* = 2.6; F(2) = F(4) = 45, and ties go to the smaller g.
        assert_eq!(auto_group_size(4, &[9, 9, 9, 0]), 2);
        assert_eq!(auto_group_size(4, &[9, 9, 9]), 2);
        assert_eq!(a.padding_of_g[&2], 1.0 - 7.0 / 10.0);
    }

    #[test]
    fn g_star_on_a_power_of_two_has_equal_neighbours() {
        let a = GroupAnalysis::new(&[16, 16, 16, 16]);
        assert_eq!(a.g_star, 4.0);
        assert_eq!(a.g_star_pow2, [4, 4]);
        assert_eq!(a.g_best, 16);
    }

    #[test]
    fn occupancy_summary_and_histogram() {
        let o = Occupancy::new(&[0, 1, 2, 3, 9, 0]);
        assert_eq!((o.min, o.max), (0, 9));
        assert_eq!(o.median, 1.5);
        assert_eq!(o.mean, 15.0 / 6.0);
        let buckets: Vec<_> = o.histogram.iter().map(|b| (b.lo, b.hi, b.count)).collect();
        assert_eq!(buckets, vec![(0, 0, 2), (1, 1, 1), (2, 3, 2), (8, 15, 1)]);
    }
}
