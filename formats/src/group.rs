//! GroupCOO (Insum §4): the entries of each slice along a chosen dimension
//! are split into ⌈occ/g⌉ groups of exactly `g`; the grouped coordinate is
//! stored once per group. Padding repeats the group's last coordinate with
//! value 0, so it is always in range and adds nothing.

use crate::scalar::{Index, Value};
use crate::spec::GroupSize;
use crate::stats::auto_group_size;
use crate::{Compressed, Coo, FormatError, Result, check_array};

#[derive(Clone, Debug, PartialEq)]
pub struct GroupCoo<V, I = i32> {
    pub shape: Vec<usize>,
    /// The grouped dimension (0 groups the rows of a matrix).
    pub dim: usize,
    /// Entries per group.
    pub g: usize,
    /// `grp[p]`: the coordinate along `dim` shared by group `p`.
    pub grp: Vec<I>,
    /// One array per other dimension (in increasing order), each `[P, g]`
    /// row-major: `crd[d][p * g + q]`.
    pub crd: Vec<Vec<I>>,
    /// `[P, g]` row-major.
    pub val: Vec<V>,
}

/// Splits sorted runs of equal keys into groups of `g`: for each group, its
/// key and the range of entries it covers (shorter than `g` at a run's end).
pub(crate) fn group_runs(keys: &[usize], g: usize) -> Vec<(usize, std::ops::Range<usize>)> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < keys.len() {
        let key = keys[start];
        let run_end = start + keys[start..].iter().take_while(|&&k| k == key).count();
        let mut s = start;
        while s < run_end {
            let e = s.saturating_add(g).min(run_end);
            groups.push((key, s..e));
            s = e;
        }
        start = run_end;
    }
    groups
}

/// Checks that `groups` groups padded to `g` entries of `per_entry`
/// values each stay within the array limit. Past it with `g` above the
/// fullest slice's occupancy, the reason says so: the padding is the cost.
/// `unit`: what a group holds (`entries`, or `blocks` of `per_entry`
/// values each).
pub(crate) fn check_padded<V>(
    format: &str,
    g: usize,
    groups: usize,
    (unit, per_entry): (&str, usize),
    fullest: usize,
) -> Result<()> {
    let count = groups.checked_mul(g).and_then(|n| n.checked_mul(per_entry));
    match check_array::<V>(&format!("{format} val"), count) {
        Err(FormatError::Invalid { reason, .. }) if g > fullest => Err(FormatError::invalid(
            format,
            format!(
                "g={g} pads {} to {g} {unit} though the fullest slice holds {fullest}: {reason} (g=auto picks \
                 a size from the occupancy)",
                if groups == 1 {
                    "its one group".to_string()
                } else {
                    format!("each of its {groups} groups")
                }
            ),
        )),
        other => other.map(|_| ()),
    }
}

/// Resolves `g=auto` from the occupancy along the grouped dimension.
/// `slices` counts empty slices too; `occupancy` may leave them out.
pub fn resolve_group_size(g: GroupSize, slices: usize, occupancy: &[usize]) -> usize {
    match g {
        GroupSize::Fixed(g) => g,
        GroupSize::Auto => auto_group_size(slices, occupancy),
    }
}

impl<V: Value, I: Index> GroupCoo<V, I> {
    pub fn from_coo(coo: &Coo<V, I>, dim: usize, g: GroupSize) -> Result<Self> {
        if dim >= coo.order() {
            return Err(FormatError::invalid(
                "GroupCOO",
                format!("dim={dim} but the tensor has order {}", coo.order()),
            ));
        }
        if coo.order() == 2 && coo.shape[dim] <= 4 * coo.nnz() + 4096 {
            // Matrices go through CSR / CSC: linear, and no COO sort. Not
            // for hypersparse ones, whose pos array would dwarf the entries.
            return Self::from_compressed(&Compressed::from_coo(coo, dim)?, g);
        }
        // Grouped dimension first, the others after in their order.
        let mut perm = vec![dim];
        perm.extend((0..coo.order()).filter(|&d| d != dim));
        let sorted = if dim == 0 { coo.clone().canonicalize() } else { coo.permute(&perm)? };
        let keys: Vec<usize> = sorted.crd[0].iter().map(|c| c.to_usize()).collect();
        // Occupancy of the non-empty slices, after duplicates are summed.
        let runs: Vec<usize> = group_runs(&keys, usize::MAX).iter().map(|(_, r)| r.len()).collect();
        let g = resolve_group_size(g, sorted.shape[0], &runs);
        if g == 0 {
            return Err(FormatError::invalid("GroupCOO", "group size must be positive"));
        }
        let groups = group_runs(&keys, g);
        check_padded::<V>(
            "GroupCOO",
            g,
            groups.len(),
            ("entries", 1),
            runs.iter().copied().max().unwrap_or(0),
        )?;
        let others = coo.order() - 1;
        let mut grp = Vec::with_capacity(groups.len());
        let mut crd: Vec<Vec<I>> = vec![Vec::with_capacity(groups.len() * g); others];
        let mut val = Vec::with_capacity(groups.len() * g);
        for (key, range) in groups {
            grp.push(I::from_usize(key)?);
            let last = range.end - 1;
            for k in range.clone().chain(std::iter::repeat_n(last, g - range.len())) {
                for (d, c) in crd.iter_mut().enumerate() {
                    c.push(sorted.crd[d + 1][k]);
                }
            }
            val.extend(range.clone().map(|k| sorted.val[k]));
            val.extend(std::iter::repeat_n(V::zero(), g - range.len()));
        }
        Ok(GroupCoo { shape: coo.shape.clone(), dim, g, grp, crd, val })
    }

    /// Groups the major slices of a CSR (rows) or CSC (columns) directly.
    pub fn from_compressed(c: &Compressed<V, I>, g: GroupSize) -> Result<Self> {
        let occupancy: Vec<usize> = (0..c.shape[c.major]).map(|i| c.slice(i).len()).collect();
        let g = resolve_group_size(g, occupancy.len(), &occupancy);
        if g == 0 {
            return Err(FormatError::invalid("GroupCOO", "group size must be positive"));
        }
        let groups: usize = occupancy.iter().map(|o| o.div_ceil(g)).sum();
        check_padded::<V>(
            "GroupCOO",
            g,
            groups,
            ("entries", 1),
            occupancy.iter().copied().max().unwrap_or(0),
        )?;
        // Each slice's entries are contiguous in the output too: copy them in
        // one go, then pad the slice's last group.
        let mut grp = Vec::with_capacity(groups);
        let mut crd = vec![I::default(); groups * g];
        let mut val = vec![V::zero(); groups * g];
        let mut out = 0;
        for (i, &occ) in occupancy.iter().enumerate() {
            if occ == 0 {
                continue;
            }
            let slice = c.slice(i);
            let padded = occ.div_ceil(g) * g;
            grp.extend(std::iter::repeat_n(I::from_usize(i)?, padded / g));
            crd[out..out + occ].copy_from_slice(&c.crd[slice.clone()]);
            crd[out + occ..out + padded].fill(c.crd[slice.end - 1]);
            val[out..out + occ].copy_from_slice(&c.val[slice]);
            out += padded;
        }
        Ok(GroupCoo { shape: c.shape.to_vec(), dim: c.major, g, grp, crd: vec![crd], val })
    }

    /// Number of groups (P).
    pub fn groups(&self) -> usize {
        self.grp.len()
    }

    /// Stored entries, padding included: P·g.
    pub fn stored(&self) -> usize {
        self.val.len()
    }

    /// True when slot `q` of group `p` is padding: it repeats the previous
    /// slot's coordinate (real entries of a group never repeat).
    pub fn is_padding(&self, p: usize, q: usize) -> bool {
        q > 0 && self.crd.iter().all(|c| c[p * self.g + q] == c[p * self.g + q - 1])
    }

    /// Canonical COO without the padding.
    pub fn to_coo(&self) -> Coo<V, I> {
        let order = self.shape.len();
        let mut crd: Vec<Vec<I>> = vec![Vec::with_capacity(self.stored()); order];
        let mut val = Vec::with_capacity(self.stored());
        for p in 0..self.groups() {
            for q in (0..self.g).filter(|&q| !self.is_padding(p, q)) {
                let mut other = self.crd.iter();
                for (d, c) in crd.iter_mut().enumerate() {
                    c.push(if d == self.dim { self.grp[p] } else { other.next().unwrap()[p * self.g + q] });
                }
                val.push(self.val[p * self.g + q]);
            }
        }
        let coo = Coo { shape: self.shape.clone(), crd, val };
        if self.dim == 0 { coo } else { coo.canonicalize() }
    }

    /// Non-padding entries.
    pub fn nnz(&self) -> usize {
        (0..self.groups()).map(|p| (0..self.g).filter(|&q| !self.is_padding(p, q)).count()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figure 4 of the Insum paper: occupancies [3, 1, 1, 2].
    fn figure4() -> Coo<f64, i32> {
        Coo::from_triplets(
            4,
            4,
            &[(0, 0, 1.0), (0, 1, 2.0), (0, 3, 3.0), (1, 2, 4.0), (2, 0, 5.0), (3, 1, 6.0), (3, 3, 7.0)],
        )
        .unwrap()
    }

    #[test]
    fn group_size_two_pads_with_the_last_coordinate() {
        let gc = GroupCoo::from_coo(&figure4(), 0, GroupSize::Fixed(2)).unwrap();
        assert_eq!(gc.grp, vec![0, 0, 1, 2, 3]);
        assert_eq!(gc.crd, vec![vec![0, 1, 3, 3, 2, 2, 0, 0, 1, 3]]);
        assert_eq!(gc.val, vec![1.0, 2.0, 3.0, 0.0, 4.0, 0.0, 5.0, 0.0, 6.0, 7.0]);
        assert_eq!(gc.nnz(), 7);
        assert_eq!(gc.to_coo(), figure4());
    }

    #[test]
    fn group_size_max_is_ell_and_one_is_coo() {
        let ell = GroupCoo::from_coo(&figure4(), 0, GroupSize::Fixed(3)).unwrap();
        assert_eq!(ell.grp, vec![0, 1, 2, 3]);
        let coo = GroupCoo::from_coo(&figure4(), 0, GroupSize::Fixed(1)).unwrap();
        assert_eq!(coo.grp, figure4().crd[0]);
        assert_eq!(coo.crd[0], figure4().crd[1]);
    }

    #[test]
    fn grouping_columns() {
        let gc = GroupCoo::from_coo(&figure4(), 1, GroupSize::Fixed(2)).unwrap();
        assert_eq!(gc.grp, vec![0, 1, 2, 3]);
        assert_eq!(gc.crd, vec![vec![0, 2, 0, 3, 1, 1, 0, 3]]);
        assert_eq!(gc.to_coo(), figure4());
    }

    #[test]
    fn explicit_zeros_survive() {
        let coo = Coo::<f64, i32>::from_triplets(2, 3, &[(0, 0, 0.0), (0, 2, 1.0), (1, 1, 0.0)]).unwrap();
        let gc = GroupCoo::from_coo(&coo, 0, GroupSize::Fixed(4)).unwrap();
        assert_eq!(gc.to_coo(), coo);
    }
}
