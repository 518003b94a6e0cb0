//! Point clouds to sparse 3-D occupancy grids.

use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

/// Voxel coordinates at or above this are refused: far past any index
/// type's reach and still exact in f64.
const MAX_VOXEL: f64 = (1u64 << 53) as f64;

/// A 3-D sparse occupancy grid of `points`: one entry per occupied voxel,
/// holding the number of points in it.
///
/// The voxel of a point `p` is `floor((p - min_corner) / voxel_size)` per
/// axis, where `min_corner` is the per-axis minimum over all points, and
/// the shape is the largest voxel coordinate plus one per axis. Counts are
/// exact in `f64` and `f32`, and in `f16` / `bf16` up to 2048 / 256 points
/// per voxel. Empty input gives an empty tensor of shape `[0, 0, 0]`.
///
/// Fails when `voxel_size` is not a finite positive number, when a point
/// has a non-finite coordinate, or when the grid does not fit in `I`.
///
/// ```
/// use spindle_formats::generate::voxelize;
///
/// let points = [[0.0, 0.0, 0.0], [0.2, 0.1, 0.3], [1.5, 0.0, 0.0]];
/// let grid = voxelize::<f32, i32>(&points, 0.5)?;
/// assert_eq!(grid.shape, vec![4, 1, 1]);
/// assert_eq!(grid.crd, vec![vec![0, 3], vec![0, 0], vec![0, 0]]);
/// assert_eq!(grid.val, vec![2.0, 1.0]);
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn voxelize<V: Value, I: Index>(points: &[[f64; 3]], voxel_size: f64) -> Result<Coo<V, I>> {
    const WHAT: &str = "voxelizer";
    if !(voxel_size.is_finite() && voxel_size > 0.0) {
        return Err(FormatError::invalid(
            WHAT,
            format!("voxel size must be a finite positive number, got {voxel_size}"),
        ));
    }
    if let Some(k) = points.iter().position(|p| !p.iter().all(|x| x.is_finite())) {
        return Err(FormatError::invalid(WHAT, format!("point {k} is {:?}, not finite", points[k])));
    }
    if points.is_empty() {
        return Ok(Coo::empty(vec![0, 0, 0]));
    }
    let mut min = [f64::INFINITY; 3];
    for p in points {
        for d in 0..3 {
            min[d] = min[d].min(p[d]);
        }
    }
    let mut voxels = Vec::new();
    voxels
        .try_reserve_exact(points.len())
        .map_err(|_| FormatError::invalid(WHAT, format!("cannot allocate {} voxels", points.len())))?;
    for (k, p) in points.iter().enumerate() {
        let mut v = [0usize; 3];
        for d in 0..3 {
            let x = ((p[d] - min[d]) / voxel_size).floor();
            // Never NaN (finite inputs); catches an infinite quotient too.
            if x >= MAX_VOXEL {
                return Err(FormatError::invalid(
                    WHAT,
                    format!("point {k} lies {x} voxels from the corner along axis {d}; use larger voxels"),
                ));
            }
            v[d] = x as usize;
        }
        voxels.push(v);
    }
    voxels.sort_unstable();
    let mut shape = vec![0usize; 3];
    for v in &voxels {
        for d in 0..3 {
            shape[d] = shape[d].max(v[d] + 1);
        }
    }
    for &extent in &shape {
        I::from_usize(extent)?;
    }
    let mut crd: Vec<Vec<I>> = vec![Vec::new(); 3];
    let mut val = Vec::new();
    for run in voxels.chunk_by(|a, b| a == b) {
        for d in 0..3 {
            crd[d].push(I::from_usize(run[0][d])?);
        }
        val.push(V::from_f64(run.len() as f64));
    }
    Coo::new(shape, crd, val)
}
