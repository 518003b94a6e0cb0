//! The kernel map of a submanifold sparse convolution (Insum §6.4), found by
//! subsection iteration over the voxel grid instead of a hash table.
//!
//! Output site `x = (a, b, c)` meets input site `y` at offset `(dx, dy, dz)`
//! when `y = (a+dx, b+dy, c+dz)` is occupied: the grid read at affine
//! subscripts, `V[a+dx, b+dy, c+dz]`. Walking the grid in CSF (sorted), the
//! neighbours of every site are found level by level inside windows of
//! width `kernel`: the level-0 neighbours once per `a`, the level-1 ones
//! once per `(a, b)`, and the level-2 ones by a cursor per neighbouring
//! fibre that only moves forward as `c` grows — the paper's subsection
//! cursors, so each lookup costs O(1) amortized and no coordinate is
//! hashed. A site's number is its position in the sorted grid, which is its
//! leaf position in CSF.

use spindle_formats::{Coo, Csf, FormatError};

use crate::subsect::lower_bound;

/// The map as [`spindle_formats::generate::kernel_map`] builds it (the
/// brute-force reference): shape `[n, n, kernel³]`, entry `(x, y, z)` = 1
/// when input site `y` is at offset number `z = ((dx+r)·k + (dy+r))·k +
/// (dz+r)` from output site `x` (`r = kernel / 2`), canonical order.
///
/// ```
/// use spindle_formats::Coo;
///
/// // Two voxels side by side along the last axis.
/// let grid = Coo::<f64, i64>::new(vec![1, 1, 2], vec![vec![0, 0], vec![0, 0], vec![0, 1]], vec![1.0; 2])?;
/// let map = spindle_conv::kernel_map(&grid, 3)?;
/// assert_eq!(map.crd, vec![vec![0, 0, 1, 1], vec![0, 1, 0, 1], vec![13, 14, 12, 13]]);
/// assert_eq!(map, spindle_formats::generate::kernel_map(&grid, 3)?);
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn kernel_map(voxels: &Coo<f64, i64>, kernel: usize) -> Result<Coo<f64, i64>, FormatError> {
    let volume = spindle_formats::generate::kernel_volume(voxels, kernel)?;
    // The sites: stored entries with a non-zero value, sorted.
    let sites = voxels.clone().canonicalize().without_zeros();
    let grid = Csf::from_coo(&sites, &[])?;
    let n = grid.nnz();
    let (r, k) = ((kernel / 2) as i64, kernel as i64);
    let (pos, crd) = (&grid.pos, &grid.crd);
    let children = |l: usize, p: i64| (pos[l][p as usize], pos[l][p as usize + 1]);

    let mut out: [Vec<i64>; 3] = Default::default();
    // Level-0 neighbours of the current `a`: (position, dx).
    let mut near0: Vec<(i64, i64)> = Vec::new();
    // Level-1 neighbours of the current `(a, b)`: (position, offset of
    // (dx, dy)); and per such fibre, the cursor into its level-2 children.
    let mut near1: Vec<(i64, i64)> = Vec::new();
    let mut cursors: Vec<(i64, i64)> = Vec::new();
    let (b0, e0) = children(0, 0);
    let mut start0 = b0;
    for p0 in b0..e0 {
        let a = crd[0][p0 as usize];
        // Sites below the window never come back: `a` only grows.
        while start0 < e0 && crd[0][start0 as usize] < a - r {
            start0 += 1;
        }
        near0.clear();
        let mut q0 = start0;
        while q0 < e0 && crd[0][q0 as usize] <= a + r {
            near0.push((q0, crd[0][q0 as usize] - a));
            q0 += 1;
        }
        let (b1, e1) = children(1, p0);
        for p1 in b1..e1 {
            let b = crd[1][p1 as usize];
            near1.clear();
            cursors.clear();
            for &(q0, dx) in &near0 {
                let (lo, hi) = children(1, q0);
                let mut q1 = lower_bound(&crd[1], lo, hi, b - r);
                while q1 < hi && crd[1][q1 as usize] <= b + r {
                    let dy = crd[1][q1 as usize] - b;
                    near1.push((q1, ((dx + r) * k + (dy + r)) * k));
                    cursors.push(children(2, q1));
                    q1 += 1;
                }
            }
            let (b2, e2) = children(2, p1);
            for x in b2..e2 {
                let c = crd[2][x as usize];
                for (&(_, offset), (cur, end)) in near1.iter().zip(cursors.iter_mut()) {
                    while *cur < *end && crd[2][*cur as usize] < c - r {
                        *cur += 1;
                    }
                    let mut y = *cur;
                    while y < *end && crd[2][y as usize] <= c + r {
                        out[0].push(x);
                        out[1].push(y);
                        out[2].push(offset + crd[2][y as usize] - c + r);
                        y += 1;
                    }
                }
            }
        }
    }
    let entries = out[0].len();
    Coo::new(vec![n, n, volume], out.into(), vec![1.0; entries])
}
