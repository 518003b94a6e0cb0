//! The kernel map of a submanifold sparse convolution on a voxel grid: the
//! 3-D sparse `Map[x, y, z]` of the §6.4 case study,
//! `Out[x, m] = Map[x, y, z] · In[y, c] · Weight[z, c, m]`.

use std::collections::HashMap;

use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

/// The number of offsets of a `kernel³` map over `voxels`, once both are
/// checked: a grid of order 3 and an odd kernel size.
pub fn kernel_volume<V, I>(voxels: &Coo<V, I>, kernel: usize) -> Result<usize> {
    const WHAT: &str = "kernel map";
    if voxels.shape.len() != 3 {
        return Err(FormatError::Order { format: WHAT.into(), expected: 3, got: voxels.shape.len() });
    }
    if kernel == 0 || kernel.is_multiple_of(2) {
        return Err(FormatError::invalid(WHAT, format!("the kernel size must be odd, got {kernel}")));
    }
    kernel
        .checked_mul(kernel)
        .and_then(|k2| k2.checked_mul(kernel))
        .ok_or_else(|| FormatError::invalid(WHAT, format!("kernel {kernel}³ overflows usize")))
}

/// The submanifold sparse-convolution map of a 3-D occupancy grid.
///
/// The sites are the occupied voxels (stored entries with a non-zero
/// value), numbered by their position in the canonical (sorted) voxel
/// list; output sites equal input sites. Entry `(x, y, z)` is 1 when input
/// voxel `y` lies at offset number `z` from output voxel `x`:
/// `voxel(y) = voxel(x) + (dx, dy, dz)`, where the offsets of the
/// `kernel³` cube `[-r, r]³` (`r = kernel / 2`) are numbered
/// lexicographically, `z = ((dx + r) * kernel + (dy + r)) * kernel + (dz + r)`.
/// The centre offset is `(kernel³ - 1) / 2` and every site meets itself
/// there; `(x, y, z)` is stored iff `(y, x, kernel³ - 1 - z)` is. The shape
/// is `[n, n, kernel³]` for `n` sites and the result is canonical. Input
/// that is not canonical is canonicalized first (summing duplicates).
///
/// Fails when `kernel` is zero or even, when `voxels` is not of order 3,
/// or when `n` or `kernel³` does not fit in `I`.
///
/// ```
/// use spindle_formats::Coo;
/// use spindle_formats::generate::kernel_map;
///
/// // Two voxels side by side along the last axis.
/// let grid = Coo::<f32, i32>::new(vec![1, 1, 2], vec![vec![0, 0], vec![0, 0], vec![0, 1]], vec![1.0; 2])?;
/// let map = kernel_map(&grid, 3)?;
/// assert_eq!(map.shape, vec![2, 2, 27]);
/// // Each voxel meets itself at the centre (13) and the other at dz = ±1.
/// assert_eq!(map.crd, vec![vec![0, 0, 1, 1], vec![0, 1, 0, 1], vec![13, 14, 12, 13]]);
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn kernel_map<V: Value, I: Index>(voxels: &Coo<V, I>, kernel: usize) -> Result<Coo<V, I>> {
    let volume = kernel_volume(voxels, kernel)?;
    I::from_usize(volume)?;

    let canonical;
    let voxels = if voxels.is_canonical() {
        voxels
    } else {
        canonical = voxels.clone().canonicalize();
        &canonical
    };
    let sites: Vec<[i64; 3]> = (0..voxels.nnz())
        .filter(|&k| !voxels.val[k].is_zero())
        .map(|k| std::array::from_fn(|d| voxels.crd[d][k].to_usize() as i64))
        .collect();
    let n = sites.len();
    I::from_usize(n)?;
    let number: HashMap<[i64; 3], usize> = sites.iter().enumerate().map(|(k, &v)| (v, k)).collect();

    // Offsets that can reach another voxel: |d| < extent along each axis.
    let r = (kernel / 2) as i64;
    let reach = |d: usize| r.min(voxels.shape[d].saturating_sub(1) as i64);
    let (rx, ry, rz) = (reach(0), reach(1), reach(2));
    let k = kernel as i64;

    let mut crd: Vec<Vec<I>> = vec![Vec::new(); 3];
    let mut row: Vec<(usize, usize)> = Vec::new();
    for (x, s) in sites.iter().enumerate() {
        row.clear();
        for dx in -rx..=rx {
            for dy in -ry..=ry {
                for dz in -rz..=rz {
                    if let Some(&y) = number.get(&[s[0] + dx, s[1] + dy, s[2] + dz]) {
                        let z = ((dx + r) * k + (dy + r)) * k + (dz + r);
                        row.push((y, z as usize));
                    }
                }
            }
        }
        // Each input voxel sits at exactly one offset, so sorting by y
        // alone gives canonical order.
        row.sort_unstable();
        let xi = I::from_usize(x)?;
        for &(y, z) in &row {
            crd[0].push(xi);
            crd[1].push(I::from_usize(y)?);
            crd[2].push(I::from_usize(z)?);
        }
    }
    let val = vec![V::from_f64(1.0); crd[0].len()];
    let map = Coo::new(vec![n, n, volume], crd, val)?;
    debug_assert!(map.is_canonical());
    Ok(map)
}
