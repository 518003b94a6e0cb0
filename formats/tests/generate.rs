//! Seeded generators: determinism, exact counts, canonical output, the
//! shape of each pattern, parameter errors and spec parsing.

use std::collections::BTreeSet;

use half::{bf16, f16};
use proptest::prelude::*;
use spindle_formats::generate::{
    DEFAULT_ALPHA, DEFAULT_BLOCK, DEFAULT_SEED, GeneratorSpec, banded, block_sparse, power_law, uniform,
    uniform_tensor, voxelize,
};
use spindle_formats::{Coo, FormatError, Index, Value};

/// The invariants every matrix generator promises.
fn check<V: Value, I: Index>(a: &Coo<V, I>, rows: usize, cols: usize, nnz: usize) {
    assert_eq!(a.shape, vec![rows, cols]);
    assert_eq!(a.nnz(), nnz);
    assert_eq!(a.crd.len(), 2);
    assert!(a.is_canonical(), "not canonical");
    for (k, v) in a.val.iter().enumerate() {
        let x = v.to_f64().abs();
        assert!((0.099..=1.0).contains(&x), "value {k} is {v:?}");
    }
    assert!(a.crd[0].iter().all(|r| r.to_usize() < rows));
    assert!(a.crd[1].iter().all(|c| c.to_usize() < cols));
}

fn positions<V: Value, I: Index>(a: &Coo<V, I>) -> Vec<(usize, usize)> {
    (0..a.nnz()).map(|k| (a.crd[0][k].to_usize(), a.crd[1][k].to_usize())).collect()
}

fn message(err: FormatError) -> String {
    err.to_string()
}

// ---------------------------------------------------------------- uniform

#[test]
fn uniform_is_seeded_exact_and_canonical() {
    let a = uniform::<f64, i32>(1000, 800, 5000, 1).unwrap();
    check(&a, 1000, 800, 5000);
    assert_eq!(a, uniform::<f64, i32>(1000, 800, 5000, 1).unwrap());
    let b = uniform::<f64, i32>(1000, 800, 5000, 2).unwrap();
    check(&b, 1000, 800, 5000);
    assert_ne!(positions(&a), positions(&b));
    assert_ne!(a.val, b.val);
    // Both signs appear.
    assert!(a.val.iter().any(|&v| v < 0.0) && a.val.iter().any(|&v| v > 0.0));
}

/// A golden sample: the generators must not drift between platforms or
/// refactorings, since benchmarks and tests name matrices by seed.
#[test]
fn uniform_output_is_pinned() {
    let a = uniform::<f64, i64>(6, 7, 5, 42).unwrap();
    let got: Vec<(usize, usize, f64)> =
        (0..a.nnz()).map(|k| (a.coord(k)[0], a.coord(k)[1], (a.val[k] * 1e6).round() / 1e6)).collect();
    assert_eq!(got, PINNED_UNIFORM);
}

const PINNED_UNIFORM: [(usize, usize, f64); 5] =
    [(1, 1, 0.55618), (1, 5, -0.626564), (2, 4, -0.633681), (4, 1, 0.377401), (4, 6, 0.617854)];

#[test]
fn uniform_in_every_dtype() {
    check(&uniform::<f32, i64>(300, 200, 4000, 3).unwrap(), 300, 200, 4000);
    check(&uniform::<f16, i32>(300, 200, 4000, 3).unwrap(), 300, 200, 4000);
    check(&uniform::<bf16, i64>(300, 200, 4000, 3).unwrap(), 300, 200, 4000);
    // Same positions whatever the value type.
    assert_eq!(
        positions(&uniform::<f64, i32>(300, 200, 4000, 3).unwrap()),
        positions(&uniform::<bf16, i32>(300, 200, 4000, 3).unwrap())
    );
}

#[test]
fn uniform_dense_and_full() {
    // Dense-ish: selection sampling path.
    let a = uniform::<f64, i32>(100, 100, 6000, 5).unwrap();
    check(&a, 100, 100, 6000);
    // Completely full.
    let full = uniform::<f64, i32>(30, 40, 1200, 5).unwrap();
    check(&full, 30, 40, 1200);
    let all: Vec<_> = (0..30).flat_map(|i| (0..40).map(move |j| (i, j))).collect();
    assert_eq!(positions(&full), all);
    // Degenerate shapes.
    check(&uniform::<f64, i32>(0, 10, 0, 5).unwrap(), 0, 10, 0);
    check(&uniform::<f64, i32>(10, 10, 0, 5).unwrap(), 10, 10, 0);
    check(&uniform::<f64, i32>(1, 1, 1, 5).unwrap(), 1, 1, 1);
}

#[test]
fn uniform_huge_sparse_shape_needs_no_dense_work() {
    let n = 1usize << 40;
    let a = uniform::<f32, i64>(n, n, 10_000, 9).unwrap();
    check(&a, n, n, 10_000);
    // The same shape cannot be indexed with i32.
    let err = message(uniform::<f32, i32>(n, n, 10, 9).unwrap_err());
    assert_eq!(err, format!("{n} does not fit in an i32 index"));
}

#[test]
fn uniform_spreads_over_rows() {
    // 100 rows, 100_000 entries: each row expects 1000; allow 5 sigma.
    let a = uniform::<f64, i32>(100, 10_000, 100_000, 11).unwrap();
    for (r, &occ) in a.occupancy(0).iter().enumerate() {
        assert!(occ.abs_diff(1000) < 160, "row {r} has {occ}");
    }
    for (c, &occ) in a.occupancy(1).iter().enumerate().take(100) {
        assert!(occ < 40, "column {c} has {occ}");
    }
}

#[test]
fn uniform_rejects_too_many_entries() {
    let err = message(uniform::<f64, i32>(10, 10, 101, 0).unwrap_err());
    assert_eq!(err, "invalid uniform generator: nnz 101 exceeds rows*cols = 10*10 = 100");
    assert!(uniform::<f64, i32>(0, 10, 1, 0).is_err());
}

#[test]
fn absurd_sizes_are_errors_not_aborts() {
    let n = 1usize << 40;
    let err = message(uniform::<f32, i64>(n, n, 1 << 62, 0).unwrap_err());
    assert_eq!(
        err,
        format!(
            "invalid uniform generator: {} elements of i64 (8 bytes each) exceed the 4 GiB limit on one array",
            1u64 << 62
        )
    );
    let err = message(block_sparse::<f32, i64>(n, n, 1, 1, 0.5, 0).unwrap_err());
    assert_eq!(err, "invalid block-sparse generator: 604462909807314587353088 blocks do not fit in memory");
    let err = message(block_sparse::<f32, i64>(n, n, 1, 1, 1e-9, 0).unwrap_err());
    assert!(err.starts_with("invalid generator: cannot allocate 1208925819614629 positions"), "{err}");
    let err = message(power_law::<f32, i64>(1 << 60, 10, 10, 2.0, 0).unwrap_err());
    let want = format!("invalid power-law generator: {} elements of", 1u64 << 60);
    assert!(err.starts_with(&want) && err.ends_with("exceed the 4 GiB limit on one array"), "{err}");
}

// -------------------------------------------------------------- power law

#[test]
fn power_law_is_heavy_tailed_and_exact() {
    let (rows, cols, nnz) = (20_000, 20_000, 200_000);
    let a = power_law::<f32, i32>(rows, cols, nnz, DEFAULT_ALPHA, 7).unwrap();
    check(&a, rows, cols, nnz);
    assert_eq!(a, power_law::<f32, i32>(rows, cols, nnz, DEFAULT_ALPHA, 7).unwrap());
    let b = power_law::<f32, i32>(rows, cols, nnz, DEFAULT_ALPHA, 8).unwrap();
    assert_ne!(a.occupancy(0), b.occupancy(0));

    let occ = a.occupancy(0);
    assert_eq!(occ.iter().sum::<usize>(), nnz);
    let mean = nnz as f64 / rows as f64;
    let max = *occ.iter().max().unwrap();
    // Pareto(2) weights: the longest row is about sqrt(rows)/2 = 70 times
    // the mean; below 20 times has probability e^-12.
    assert!(max as f64 > 20.0 * mean, "max row {max} vs mean {mean}");
    // Most rows are below the mean (for Pareto(2), 3/4 of them): the mass
    // sits in the tail.
    let below = occ.iter().filter(|&&l| (l as f64) < mean).count();
    assert!(below > rows * 7 / 10, "{below} rows below the mean");
    // Rows are in random order, not sorted by length.
    assert!(occ.windows(2).any(|w| w[0] < w[1]) && occ.windows(2).any(|w| w[0] > w[1]));
    let heaviest = occ.iter().position(|&l| l == max).unwrap();
    assert!(heaviest > 0 && heaviest < rows - 1);
}

#[test]
fn power_law_alpha_controls_the_tail() {
    let max_row = |alpha: f64| {
        let a = power_law::<f64, i32>(10_000, 10_000, 100_000, alpha, 3).unwrap();
        check(&a, 10_000, 10_000, 100_000);
        *a.occupancy(0).iter().max().unwrap()
    };
    let (heavy, light) = (max_row(1.5), max_row(3.0));
    assert!(heavy > 4 * light, "alpha 1.5: {heavy}, alpha 3: {light}");
}

#[test]
fn power_law_saturates_rows_at_cols() {
    // Nearly full: every row is at most 5 long and the total still exact.
    let a = power_law::<f64, i64>(100, 5, 499, 2.0, 1).unwrap();
    check(&a, 100, 5, 499);
    assert!(a.occupancy(0).iter().all(|&l| l <= 5));
    let full = power_law::<f64, i64>(100, 5, 500, 2.0, 1).unwrap();
    assert!(full.occupancy(0).iter().all(|&l| l == 5));
    // Tiny alpha: astronomically heavy weights stay finite.
    check(&power_law::<f64, i32>(1000, 50, 10_000, 0.001, 2).unwrap(), 1000, 50, 10_000);
    check(&power_law::<f64, i32>(1000, 5000, 10_000, 0.5, 2).unwrap(), 1000, 5000, 10_000);
    check(&power_law::<f64, i32>(0, 0, 0, 2.0, 2).unwrap(), 0, 0, 0);
    check(&power_law::<f64, i32>(10, 10, 0, 2.0, 2).unwrap(), 10, 10, 0);
}

#[test]
fn power_law_million_entries() {
    // Generation speed is measured by `spindle bench formats`, not here.
    let a = power_law::<f32, i32>(100_000, 100_000, 1_000_000, DEFAULT_ALPHA, 7).unwrap();
    check(&a, 100_000, 100_000, 1_000_000);
    let occ = a.occupancy(0);
    assert!(*occ.iter().max().unwrap() > 100, "heavy tail: max row {}", occ.iter().max().unwrap());
}

#[test]
fn power_law_rejects_bad_parameters() {
    for alpha in [0.0, -2.0, f64::NAN, f64::INFINITY] {
        let err = message(power_law::<f64, i32>(10, 10, 10, alpha, 0).unwrap_err());
        assert_eq!(
            err,
            format!("invalid power-law generator: alpha must be a finite positive number, got {alpha}")
        );
    }
    let err = message(power_law::<f64, i32>(3, 4, 13, 2.0, 0).unwrap_err());
    assert_eq!(err, "invalid power-law generator: nnz 13 exceeds rows*cols = 3*4 = 12");
}

// ----------------------------------------------------------- block sparse

/// Checks a block-sparse matrix block by block and returns the chosen
/// blocks.
fn check_blocks(
    a: &Coo<f32, i32>,
    rows: usize,
    cols: usize,
    bm: usize,
    bk: usize,
    density: f64,
) -> BTreeSet<(usize, usize)> {
    let (gr, gc) = (rows.div_ceil(bm), cols.div_ceil(bk));
    let expected_blocks = (density * (gr * gc) as f64).round() as usize;
    let entries: BTreeSet<(usize, usize)> = positions(a).into_iter().collect();
    let blocks: BTreeSet<(usize, usize)> = entries.iter().map(|&(i, j)| (i / bm, j / bk)).collect();
    assert_eq!(blocks.len(), expected_blocks);
    let mut total = 0;
    for &(br, bc) in &blocks {
        for i in br * bm..((br + 1) * bm).min(rows) {
            for j in bc * bk..((bc + 1) * bk).min(cols) {
                assert!(entries.contains(&(i, j)), "block ({br}, {bc}) misses ({i}, {j})");
                total += 1;
            }
        }
    }
    // Every entry lies in a chosen block, and each block is complete.
    assert_eq!(total, a.nnz());
    check(a, rows, cols, total);
    blocks
}

#[test]
fn block_sparse_insum_setting() {
    for (sparsity, seed) in [(0.5, 1), (0.8, 2), (0.95, 3), (0.99, 4)] {
        let density = 1.0 - sparsity;
        let a = block_sparse::<f32, i32>(4096, 4096, 32, 32, density, seed).unwrap();
        let blocks = check_blocks(&a, 4096, 4096, 32, 32, density);
        assert_eq!(a.nnz(), blocks.len() * 1024);
    }
}

#[test]
fn block_sparse_is_seeded() {
    let a = block_sparse::<f32, i32>(512, 512, 32, 32, 0.3, 1).unwrap();
    assert_eq!(a, block_sparse::<f32, i32>(512, 512, 32, 32, 0.3, 1).unwrap());
    let b = block_sparse::<f32, i32>(512, 512, 32, 32, 0.3, 2).unwrap();
    assert_eq!(a.nnz(), b.nnz());
    assert_ne!(positions(&a), positions(&b));
}

#[test]
fn block_sparse_ragged_edges() {
    // 100 x 70 with 32 x 16 blocks: a 4 x 5 grid, last row 4 tall, last column 6 wide.
    for density in [0.0, 0.1, 0.5, 0.77, 1.0] {
        let a = block_sparse::<f32, i32>(100, 70, 32, 16, density, 5).unwrap();
        check_blocks(&a, 100, 70, 32, 16, density);
    }
    let full = block_sparse::<f32, i32>(100, 70, 32, 16, 1.0, 5).unwrap();
    assert_eq!(full.nnz(), 7000);
    // Blocks larger than the matrix.
    let one = block_sparse::<f32, i32>(5, 3, 32, 32, 1.0, 5).unwrap();
    assert_eq!(one.nnz(), 15);
    // Dense-grid path: most blocks chosen.
    let a = block_sparse::<f32, i32>(640, 640, 8, 8, 0.9, 6).unwrap();
    check_blocks(&a, 640, 640, 8, 8, 0.9);
}

#[test]
fn block_sparse_rejects_bad_parameters() {
    let err = message(block_sparse::<f32, i32>(64, 64, 0, 32, 0.5, 0).unwrap_err());
    assert_eq!(err, "invalid block-sparse generator: blocks must be at least 1x1, got 0x32");
    for density in [1.5, -0.1, f64::NAN] {
        let err = message(block_sparse::<f32, i32>(64, 64, 32, 32, density, 0).unwrap_err());
        assert_eq!(
            err,
            format!(
                "invalid block-sparse generator: block density must be a fraction in [0, 1], got {density}"
            )
        );
    }
}

// ----------------------------------------------------------------- banded

/// Entries of an `n x n` band: sum over diagonals of their lengths.
fn band_count(n: usize, lower: usize, upper: usize) -> usize {
    let l = lower.min(n.saturating_sub(1));
    let u = upper.min(n.saturating_sub(1));
    if n == 0 { 0 } else { n * (l + u + 1) - l * (l + 1) / 2 - u * (u + 1) / 2 }
}

#[test]
fn banded_pattern_is_exact() {
    for (n, lower, upper) in
        [(1000, 2, 3), (10, 0, 0), (10, 9, 0), (7, 100, 2), (5, 50, 50), (1, 3, 3), (0, 1, 1)]
    {
        let a = banded::<f64, i32>(n, lower, upper, 4).unwrap();
        check(&a, n, n, band_count(n, lower, upper));
        let expected: Vec<(usize, usize)> = (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|&(i, j)| j + lower >= i && j <= i + upper)
            .collect();
        assert_eq!(positions(&a), expected, "n={n} lower={lower} upper={upper}");
    }
    assert_eq!(band_count(1000, 2, 3), 6 * 1000 - 3 - 6);
    assert_eq!(banded::<f64, i32>(10, 10, 10, 0).unwrap().nnz(), 100);
}

/// A band past the limit on one array is refused at once (n = 2^62 spun
/// in a counting loop; n = 1e9 reserved its arrays, which Linux promised,
/// and was killed filling them).
#[test]
fn a_huge_band_is_refused_before_any_work() {
    for n in [1usize << 62, 1_000_000_000] {
        let err = banded::<f64, i64>(n, 1, 1, 1).unwrap_err().to_string();
        assert!(err.contains("limit on one array") || err.contains("overflows"), "{n}: {err}");
    }
}

#[test]
fn banded_seed_changes_values_only() {
    let a = banded::<f64, i32>(50, 1, 2, 1).unwrap();
    let b = banded::<f64, i32>(50, 1, 2, 2).unwrap();
    assert_eq!(a.crd, b.crd);
    assert_ne!(a.val, b.val);
    assert_eq!(a, banded::<f64, i32>(50, 1, 2, 1).unwrap());
}

// --------------------------------------------------------------- voxelize

#[test]
fn voxelize_counts_points_per_voxel() {
    let points = [
        [1.0, 2.0, 3.0],  // voxel (0, 0, 0)
        [1.4, 2.4, 3.4],  // voxel (0, 0, 0)
        [1.5, 2.0, 3.0],  // voxel (1, 0, 0)
        [3.2, 2.0, 3.99], // voxel (4, 0, 1)
        [1.0, 3.0, 3.0],  // voxel (0, 2, 0)
        [1.49, 3.1, 3.2], // voxel (0, 2, 0)
        [1.0, 3.0, 3.0],  // voxel (0, 2, 0), a repeated point
    ];
    let grid = voxelize::<f64, i32>(&points, 0.5).unwrap();
    assert_eq!(grid.shape, vec![5, 3, 2]);
    assert!(grid.is_canonical());
    let got: Vec<(Vec<usize>, f64)> = (0..grid.nnz()).map(|k| (grid.coord(k), grid.val[k])).collect();
    assert_eq!(
        got,
        vec![(vec![0, 0, 0], 2.0), (vec![0, 2, 0], 3.0), (vec![1, 0, 0], 1.0), (vec![4, 0, 1], 1.0)]
    );
    // Negative coordinates: the corner moves, voxels stay put relative to it.
    let shifted: Vec<[f64; 3]> = points.iter().map(|p| [p[0] - 10.0, p[1] - 20.0, p[2] - 30.0]).collect();
    assert_eq!(voxelize::<f64, i32>(&shifted, 0.5).unwrap().crd, grid.crd);
    // One point: a 1x1x1 grid.
    let one = voxelize::<f32, i64>(&[[5.0, -1.0, 2.0]], 0.1).unwrap();
    assert_eq!((one.shape.clone(), one.val.clone()), (vec![1, 1, 1], vec![1.0]));
    // One huge voxel holds everything.
    let all = voxelize::<f16, i32>(&points, 100.0).unwrap();
    assert_eq!(all.val, vec![f16::from_f64(7.0)]);
}

#[test]
fn voxelize_empty_and_errors() {
    let empty = voxelize::<f64, i32>(&[], 1.0).unwrap();
    assert_eq!(empty.shape, vec![0, 0, 0]);
    assert_eq!(empty.nnz(), 0);
    assert_eq!(empty.crd.len(), 3);
    for size in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = message(voxelize::<f64, i32>(&[[0.0; 3]], size).unwrap_err());
        assert_eq!(
            err,
            format!("invalid voxelizer: voxel size must be a finite positive number, got {size}")
        );
    }
    let err = message(voxelize::<f64, i32>(&[[0.0; 3], [1.0, f64::NAN, 0.0]], 1.0).unwrap_err());
    assert_eq!(err, "invalid voxelizer: point 1 is [1.0, NaN, 0.0], not finite");
    let err = message(voxelize::<f64, i32>(&[[0.0; 3], [1.0, 0.0, 0.0]], 1e-300).unwrap_err());
    assert!(err.contains("voxels from the corner along axis 0; use larger voxels"), "{err}");
    // Fits in f64 but not in an i32 grid.
    let err = message(voxelize::<f64, i32>(&[[0.0; 3], [1.0, 0.0, 0.0]], 1e-10).unwrap_err());
    assert_eq!(err, "10000000001 does not fit in an i32 index");
}

#[test]
fn voxelize_bunny() {
    let Some(path) = spindle_formats::data::shared_file("pointclouds/bunny.xyz") else {
        eprintln!("SKIPPED: pointclouds/bunny.xyz not found in the shared data folder");
        return;
    };
    let points = spindle_formats::io::read_xyz(&path).unwrap();
    assert_eq!(points.len(), 7244);
    let mut occupied = Vec::new();
    for size in [0.02, 0.05, 0.2] {
        let grid = voxelize::<f32, i32>(&points, size).unwrap();
        assert!(grid.is_canonical());
        assert_eq!(grid.order(), 3);
        assert_eq!(grid.val.iter().map(|&v| v as f64).sum::<f64>(), 7244.0);
        assert!(grid.val.iter().all(|&v| v >= 1.0 && v.fract() == 0.0));
        for d in 0..3 {
            assert_eq!(grid.occupancy(d).len(), grid.shape[d]);
            assert!(grid.occupancy(d)[0] > 0, "the min corner is occupied along axis {d}");
            assert!(*grid.occupancy(d).last().unwrap() > 0, "the far face is occupied along axis {d}");
        }
        occupied.push(grid.nnz());
    }
    // Coarser voxels merge points.
    assert!(occupied[0] > occupied[1] && occupied[1] > occupied[2], "{occupied:?}");
}

// ------------------------------------------------------------------ specs

#[test]
fn specs_parse_and_generate() {
    let cases = [
        (
            "uniform:rows=1000,cols=1000,nnz=5000,seed=1",
            GeneratorSpec::Uniform { rows: 1000, cols: 1000, nnz: 5000, seed: 1 },
        ),
        (
            "powerlaw:rows=100000,cols=100000,nnz=1000000,alpha=2,seed=7",
            GeneratorSpec::PowerLaw { rows: 100_000, cols: 100_000, nnz: 1_000_000, alpha: 2.0, seed: 7 },
        ),
        (
            "blocks:rows=4096,cols=4096,bm=32,bk=32,density=0.2,seed=1",
            GeneratorSpec::Blocks { rows: 4096, cols: 4096, bm: 32, bk: 32, density: 0.2, seed: 1 },
        ),
        (
            "banded:n=1000,lower=2,upper=3",
            GeneratorSpec::Banded { n: 1000, lower: 2, upper: 3, seed: DEFAULT_SEED },
        ),
    ];
    for (text, expected) in cases {
        let spec: GeneratorSpec = text.parse().unwrap();
        assert_eq!(spec, expected, "{text}");
        // Display writes every key, and parses back to the same spec.
        assert_eq!(spec.to_string().parse::<GeneratorSpec>().unwrap(), spec);
    }
    let spec: GeneratorSpec = "banded:n=1000,lower=2,upper=3".parse().unwrap();
    assert_eq!(spec.to_string(), "banded:n=1000,lower=2,upper=3,seed=0");
    assert_eq!(spec.shape(), vec![1000, 1000]);
    assert_eq!(spec.kind(), "banded");
    assert_eq!(spec.generate::<f64, i32>().unwrap(), banded::<f64, i32>(1000, 2, 3, DEFAULT_SEED).unwrap());

    let spec: GeneratorSpec = "uniform:rows=1000,cols=1000,nnz=5000,seed=1".parse().unwrap();
    assert_eq!(spec.generate::<f32, i64>().unwrap(), uniform::<f32, i64>(1000, 1000, 5000, 1).unwrap());
    assert_eq!(spec.seed(), 1);
    assert_eq!(spec.clone().with_seed(9).seed(), 9);

    let spec: GeneratorSpec = "blocks:rows=256,cols=128,bm=16,bk=8,density=0.25,seed=3".parse().unwrap();
    assert_eq!(
        spec.generate::<f32, i32>().unwrap(),
        block_sparse::<f32, i32>(256, 128, 16, 8, 0.25, 3).unwrap()
    );
    let spec: GeneratorSpec = "powerlaw:rows=500,cols=400,nnz=3000,alpha=2.5,seed=4".parse().unwrap();
    assert_eq!(spec.generate::<f64, i32>().unwrap(), power_law::<f64, i32>(500, 400, 3000, 2.5, 4).unwrap());
}

#[test]
fn uniform_specs_with_a_shape_make_tensors_of_any_rank() {
    let spec: GeneratorSpec = "uniform:shape=1x34x34x16,density=0.1,seed=3".parse().unwrap();
    assert_eq!(spec, GeneratorSpec::UniformTensor { shape: vec![1, 34, 34, 16], nnz: 1850, seed: 3 });
    assert_eq!(spec.to_string(), "uniform:shape=1x34x34x16,nnz=1850,seed=3");
    assert_eq!(spec.to_string().parse::<GeneratorSpec>().unwrap(), spec);
    assert_eq!((spec.kind(), spec.shape(), spec.seed()), ("uniform", vec![1, 34, 34, 16], 3));
    let t = spec.generate::<f32, i32>().unwrap();
    assert_eq!(t, uniform_tensor::<f32, i32>(&[1, 34, 34, 16], 1850, 3).unwrap());
    assert_eq!((t.nnz(), t.shape.len()), (1850, 4));
    assert!(t.is_canonical() && t.val.iter().all(|v| *v != 0.0));
    // Two dimensions: the matrix `uniform` makes from the same seed.
    let spec: GeneratorSpec = "uniform:shape=300x200,nnz=5000,seed=8".parse().unwrap();
    assert_eq!(spec.generate::<f64, i64>().unwrap(), uniform::<f64, i64>(300, 200, 5000, 8).unwrap());
    for (bad, why) in [
        ("uniform:shape=4x4,nnz=3,density=0.5", "give one of nnz and density"),
        ("uniform:shape=4x4", "give one of nnz and density"),
        ("uniform:shape=4x4,density=1.5", "expected a fraction in [0, 1]"),
        ("uniform:shape=4x4,rows=4,nnz=2", "shape replaces rows and cols"),
        ("uniform:rows=4,cols=4,density=0.5", "density needs a shape"),
        ("uniform:shape=4xfour,nnz=2", "expected extents written AxBxC"),
        ("uniform:shape=2x3x4,nnz=25", "nnz 25 exceeds the 24 cells of 2x3x4"),
    ] {
        assert!(spec_error(bad).contains(why), "{bad}: {}", spec_error(bad));
    }
}

#[test]
fn specs_have_defaults_and_aliases() {
    let spec: GeneratorSpec = " power-law : rows=100_000, cols=1e5, nnz=1e6 ".parse().unwrap();
    assert_eq!(
        spec,
        GeneratorSpec::PowerLaw {
            rows: 100_000,
            cols: 100_000,
            nnz: 1_000_000,
            alpha: DEFAULT_ALPHA,
            seed: DEFAULT_SEED
        }
    );
    let spec: GeneratorSpec = "blocks:rows=64,cols=64,density=0.5".parse().unwrap();
    assert_eq!(
        spec,
        GeneratorSpec::Blocks {
            rows: 64,
            cols: 64,
            bm: DEFAULT_BLOCK,
            bk: DEFAULT_BLOCK,
            density: 0.5,
            seed: 0
        }
    );
    // bk follows bm unless given.
    let spec: GeneratorSpec = "block_sparse:rows=64,cols=64,bm=16,density=0.5".parse().unwrap();
    assert!(matches!(spec, GeneratorSpec::Blocks { bm: 16, bk: 16, .. }));
    let spec: GeneratorSpec = "BAND:n=5,lower=1,upper=1,".parse().unwrap();
    assert_eq!(spec.kind(), "banded");
}

fn spec_error(text: &str) -> String {
    message(text.parse::<GeneratorSpec>().unwrap_err())
}

#[test]
fn bad_specs_name_the_problem() {
    assert_eq!(
        spec_error("uniform:rows=10,cols=10,nzz=5"),
        "invalid generator spec: unknown key \"nzz\" for uniform; expected keys: rows, cols, shape, nnz, density, seed"
    );
    assert_eq!(
        spec_error("uniform:rows=10,cols=10"),
        "invalid generator spec: missing key \"nnz\" for uniform; expected keys: rows, cols, shape, nnz, density, seed"
    );
    assert_eq!(
        spec_error("uniform:rows=10,cols=ten,nnz=5"),
        "invalid generator spec: bad value \"ten\" for key \"cols\" of uniform: expected a non-negative integer"
    );
    assert_eq!(
        spec_error("powerlaw:rows=10,cols=10,nnz=5,alpha=steep"),
        "invalid generator spec: bad value \"steep\" for key \"alpha\" of powerlaw: expected a finite number"
    );
    assert_eq!(
        spec_error("banded:n=10,lower=1,upper=1,lower=2"),
        "invalid generator spec: key \"lower\" given twice for banded; expected keys: n, lower, upper, seed"
    );
    assert_eq!(
        spec_error("banded:n=10,lower,upper=1"),
        "invalid generator spec: \"lower\" has no value (write key=value) for banded; \
         expected keys: n, lower, upper, seed"
    );
    assert_eq!(
        spec_error("random:n=3"),
        "invalid generator spec: unknown generator \"random\" in \"random:n=3\"; \
         expected one of uniform, powerlaw, blocks, banded, written kind:key=value,..."
    );
    assert!(spec_error("").contains("unknown generator \"\""));
    assert!(spec_error("banded:n=-3,lower=1,upper=1").contains("bad value \"-3\" for key \"n\""));
    assert!(spec_error("banded:n=2.5,lower=1,upper=1").contains("bad value \"2.5\" for key \"n\""));
    assert!(spec_error("uniform:rows=1,cols=1,nnz=1,seed=x").contains("key \"seed\""));
    // Parameter checks happen at parse time, with the generators' messages.
    assert_eq!(
        spec_error("uniform:rows=10,cols=10,nnz=500"),
        "invalid uniform generator: nnz 500 exceeds rows*cols = 10*10 = 100"
    );
    assert!(
        spec_error("blocks:rows=10,cols=10,density=2").contains("block density must be a fraction in [0, 1]")
    );
    assert!(spec_error("blocks:rows=10,cols=10,bm=0,density=0.5").contains("at least 1x1"));
    assert!(
        spec_error("powerlaw:rows=10,cols=10,nnz=5,alpha=0")
            .contains("alpha must be a finite positive number")
    );
    assert!(spec_error("powerlaw:rows=10,cols=10,nnz=5,alpha=inf").contains("bad value \"inf\""));
}

// ------------------------------------------------------------- properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn uniform_tensor_invariants(shape in proptest::collection::vec(0usize..9, 1..5), fill in 0.0f64..=1.0, seed in any::<u64>()) {
        let cells: usize = shape.iter().product();
        let nnz = (cells as f64 * fill) as usize;
        let t = uniform_tensor::<f64, i32>(&shape, nnz, seed).unwrap();
        prop_assert_eq!(t.nnz(), nnz);
        prop_assert!(t.is_canonical());
        for (d, &n) in shape.iter().enumerate() {
            prop_assert!(t.crd[d].iter().all(|&c| (c as usize) < n));
        }
        if let [rows, cols] = shape[..] {
            prop_assert_eq!(t, uniform::<f64, i32>(rows, cols, nnz, seed).unwrap());
        }
    }

    #[test]
    fn uniform_invariants(rows in 0usize..60, cols in 0usize..60, fill in 0.0f64..=1.0, seed in any::<u64>()) {
        let nnz = ((rows * cols) as f64 * fill) as usize;
        let a = uniform::<f32, i32>(rows, cols, nnz, seed).unwrap();
        check(&a, rows, cols, nnz);
        prop_assert_eq!(a, uniform::<f32, i32>(rows, cols, nnz, seed).unwrap());
    }

    #[test]
    fn power_law_invariants(
        rows in 0usize..80, cols in 1usize..80, fill in 0.0f64..=1.0, alpha in 0.05f64..4.0, seed in any::<u64>()
    ) {
        let nnz = ((rows * cols) as f64 * fill) as usize;
        let a = power_law::<f64, i64>(rows, cols, nnz, alpha, seed).unwrap();
        check(&a, rows, cols, nnz);
    }

    #[test]
    fn block_sparse_invariants(
        rows in 0usize..70, cols in 0usize..70, bm in 1usize..20, bk in 1usize..20,
        density in 0.0f64..=1.0, seed in any::<u64>()
    ) {
        let a = block_sparse::<f32, i32>(rows, cols, bm, bk, density, seed).unwrap();
        check_blocks(&a, rows, cols, bm, bk, density);
    }

    #[test]
    fn banded_invariants(n in 0usize..40, lower in 0usize..50, upper in 0usize..50, seed in any::<u64>()) {
        let a = banded::<bf16, i32>(n, lower, upper, seed).unwrap();
        check(&a, n, n, band_count(n, lower, upper));
        prop_assert!(positions(&a).iter().all(|&(i, j)| j + lower >= i && j <= i + upper));
    }

    #[test]
    fn voxel_counts_sum_to_points(
        points in proptest::collection::vec(proptest::array::uniform3(-50.0f64..50.0), 0..200),
        size in 0.1f64..20.0
    ) {
        let grid = voxelize::<f64, i64>(&points, size).unwrap();
        prop_assert!(grid.is_canonical());
        prop_assert_eq!(grid.val.iter().sum::<f64>(), points.len() as f64);
        prop_assert!(grid.val.iter().all(|&v| v >= 1.0));
    }

    #[test]
    fn spec_display_round_trips(rows in 0usize..1000, cols in 0usize..1000, density in 0.0f64..=1.0, seed in any::<u64>()) {
        let spec = GeneratorSpec::Blocks { rows, cols, bm: 8, bk: 4, density, seed };
        prop_assert_eq!(spec.to_string().parse::<GeneratorSpec>().unwrap(), spec);
    }
}
