//! Physics generators: real Clebsch–Gordan coefficients (checked against
//! rotations built from spherical harmonics evaluated in this file, not from
//! the module under test) and submanifold sparse-convolution kernel maps.

// Small dense linear algebra reads best with explicit indices.
#![allow(clippy::needless_range_loop)]

use std::collections::{BTreeSet, HashMap};
use std::f64::consts::PI;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_formats::generate::clebsch_gordan::{MAX_L, clebsch_gordan_coefficient};
use spindle_formats::generate::{
    cg_tensor, kernel_map, real_clebsch_gordan, tensor_product_paths, uniform, voxelize,
};
use spindle_formats::io::read_xyz;
use spindle_formats::{Coo, FormatError, Index, Value};

// ---------------------------------------------------------------------------
// Independent machinery: real spherical harmonics, rotations, Wigner D.
// ---------------------------------------------------------------------------

type Mat = Vec<Vec<f64>>;

fn dim(l: u32) -> usize {
    2 * l as usize + 1
}

fn factorial(n: u32) -> f64 {
    (2..=n).map(f64::from).product()
}

/// The real spherical harmonics of degree `l` at the unit vector `p`, in
/// e3nn's real basis (index `l + m`): `√2 N P̄_l^m cos(mφ)` for `m > 0`,
/// `N P̄_l^0` for `m = 0` and `-√2 N P̄_l^|m| sin(|m|φ)` for `m < 0`, where
/// `P̄` is the associated Legendre function without the Condon–Shortley
/// phase and `N = √((2l+1)/4π (l-|m|)!/(l+|m|)!)`. (That is
/// `√2 (-1)^m Re Y_l^m` and `-√2 (-1)^m Im Y_l^m` of the complex,
/// Condon–Shortley harmonics: e3nn's `change_basis_real_to_complex`.)
fn real_sh(l: u32, p: [f64; 3]) -> Vec<f64> {
    let (x, y, z) = (p[0], p[1], p[2]);
    let s = (x * x + y * y).sqrt();
    let phi = y.atan2(x);
    let li = l as i32;
    let mut out = vec![0.0; dim(l)];
    for m in 0..=l {
        // P̄_m^m = (2m-1)!! s^m, then upward in degree.
        let mut p_mm = 1.0;
        for k in 0..m {
            p_mm *= (2 * k + 1) as f64 * s;
        }
        let mut p_prev = p_mm;
        let mut p_cur = if l > m { z * (2 * m + 1) as f64 * p_mm } else { p_mm };
        if l > m + 1 {
            for ll in (m + 2)..=l {
                let next = ((2 * ll - 1) as f64 * z * p_cur - (ll + m - 1) as f64 * p_prev) / (ll - m) as f64;
                p_prev = p_cur;
                p_cur = next;
            }
        }
        let p_lm = if l == m { p_mm } else { p_cur };
        let norm = ((2 * l + 1) as f64 / (4.0 * PI) * factorial(l - m) / factorial(l + m)).sqrt();
        let mi = m as i32;
        if m == 0 {
            out[li as usize] = norm * p_lm;
        } else {
            let a = 2f64.sqrt() * norm * p_lm;
            out[(li + mi) as usize] = a * (mi as f64 * phi).cos();
            out[(li - mi) as usize] = -a * (mi as f64 * phi).sin();
        }
    }
    out
}

fn random_unit(rng: &mut ChaCha8Rng) -> [f64; 3] {
    loop {
        let v: [f64; 3] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
        let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        if n > 0.1 && n <= 1.0 {
            return v.map(|c| c / n);
        }
    }
}

/// A uniformly random rotation matrix (Shoemake's unit quaternion).
fn random_rotation(rng: &mut ChaCha8Rng) -> [[f64; 3]; 3] {
    let (u1, u2, u3): (f64, f64, f64) = (rng.random(), rng.random(), rng.random());
    let (a, b) = ((1.0 - u1).sqrt(), u1.sqrt());
    let (w, x, y, z) = (
        a * (2.0 * PI * u2).sin(),
        a * (2.0 * PI * u2).cos(),
        b * (2.0 * PI * u3).sin(),
        b * (2.0 * PI * u3).cos(),
    );
    [
        [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)],
        [2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)],
        [2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)],
    ]
}

fn apply(r: &[[f64; 3]; 3], p: [f64; 3]) -> [f64; 3] {
    std::array::from_fn(|i| (0..3).map(|j| r[i][j] * p[j]).sum())
}

/// Solves `a x = b` (square, column by column) by Gaussian elimination
/// with partial pivoting.
fn solve(mut a: Mat, mut b: Mat) -> Mat {
    let n = a.len();
    for col in 0..n {
        let piv = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs())).unwrap();
        a.swap(col, piv);
        b.swap(col, piv);
        for row in col + 1..n {
            let f = a[row][col] / a[col][col];
            for c in col..n {
                a[row][c] -= f * a[col][c];
            }
            for c in 0..b[row].len() {
                b[row][c] -= f * b[col][c];
            }
        }
    }
    let mut x = vec![vec![0.0; b[0].len()]; n];
    for row in (0..n).rev() {
        for c in 0..b[0].len() {
            let s: f64 = (row + 1..n).map(|k| a[row][k] * x[k][c]).sum();
            x[row][c] = (b[row][c] - s) / a[row][row];
        }
    }
    x
}

/// The real Wigner matrix `D_l(R)` defined by `Y(R p) = D Y(p)` for the
/// harmonics of [`real_sh`], fitted by least squares on random points and
/// checked to be orthogonal and to predict fresh points.
fn wigner_d(l: u32, r: &[[f64; 3]; 3], rng: &mut ChaCha8Rng) -> Mat {
    let d = dim(l);
    let samples = 4 * d + 16;
    let points: Vec<[f64; 3]> = (0..samples).map(|_| random_unit(rng)).collect();
    let a: Mat = points.iter().map(|&p| real_sh(l, p)).collect();
    let b: Mat = points.iter().map(|&p| real_sh(l, apply(r, p))).collect();
    // Normal equations (Aᵀ A) Dᵀ = Aᵀ B.
    let ata: Mat =
        (0..d).map(|i| (0..d).map(|j| (0..samples).map(|s| a[s][i] * a[s][j]).sum()).collect()).collect();
    let atb: Mat =
        (0..d).map(|i| (0..d).map(|j| (0..samples).map(|s| a[s][i] * b[s][j]).sum()).collect()).collect();
    let dt = solve(ata, atb);
    let dm: Mat = (0..d).map(|i| (0..d).map(|j| dt[j][i]).collect()).collect();
    for i in 0..d {
        for j in 0..d {
            let dot: f64 = (0..d).map(|k| dm[i][k] * dm[j][k]).sum();
            let expected = if i == j { 1.0 } else { 0.0 };
            assert!((dot - expected).abs() < 1e-11, "D_{l} not orthogonal: ({i},{j}) = {dot}");
        }
    }
    for _ in 0..5 {
        let p = random_unit(rng);
        let (y, yr) = (real_sh(l, p), real_sh(l, apply(r, p)));
        for i in 0..d {
            let pred: f64 = (0..d).map(|k| dm[i][k] * y[k]).sum();
            assert!((pred - yr[i]).abs() < 1e-11, "D_{l} does not predict Y(Rp)");
        }
    }
    dm
}

/// `(A ⊗ B ⊗ C) v` for a row-major `(da, db, dc)` tensor `v`, or with each
/// matrix transposed.
fn rotate3(v: &[f64], a: &Mat, b: &Mat, c: &Mat, transpose: bool) -> Vec<f64> {
    let (da, db, dc) = (a.len(), b.len(), c.len());
    let at = |m: &Mat, i: usize, j: usize| if transpose { m[j][i] } else { m[i][j] };
    let mut t1 = vec![0.0; da * db * dc];
    for i in 0..da {
        for i2 in 0..da {
            let f = at(a, i, i2);
            if f != 0.0 {
                for jk in 0..db * dc {
                    t1[i * db * dc + jk] += f * v[i2 * db * dc + jk];
                }
            }
        }
    }
    let mut t2 = vec![0.0; da * db * dc];
    for i in 0..da {
        for j in 0..db {
            for j2 in 0..db {
                let f = at(b, j, j2);
                for k in 0..dc {
                    t2[(i * db + j) * dc + k] += f * t1[(i * db + j2) * dc + k];
                }
            }
        }
    }
    let mut t3 = vec![0.0; da * db * dc];
    for ij in 0..da * db {
        for k in 0..dc {
            t3[ij * dc + k] = (0..dc).map(|k2| at(c, k, k2) * t2[ij * dc + k2]).sum();
        }
    }
    t3
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// The invariant of `l1 ⊗ l2 ⊗ l3` found without the module under test:
/// power iteration of the group average over random rotations (and their
/// inverses) from a random start, normalised and signed like `reference`.
fn numeric_invariant(l1: u32, l2: u32, l3: u32, reference: &[f64], rng: &mut ChaCha8Rng) -> Vec<f64> {
    let rotations: Vec<[Mat; 3]> = (0..8)
        .map(|_| {
            let r = random_rotation(rng);
            [wigner_d(l1, &r, rng), wigner_d(l2, &r, rng), wigner_d(l3, &r, rng)]
        })
        .collect();
    let n = dim(l1) * dim(l2) * dim(l3);
    let mut v: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    for iteration in 0.. {
        // v <- (v + mean_R (K(R) + K(R)ᵀ) v / 2) / 2: eigenvalues in [0, 1],
        // exactly 1 on the invariants only.
        let mut next = v.iter().map(|x| x / 2.0).collect::<Vec<_>>();
        let w = 1.0 / (4.0 * rotations.len() as f64);
        for [a, b, c] in &rotations {
            for t in [false, true] {
                for (x, y) in next.iter_mut().zip(rotate3(&v, a, b, c, t)) {
                    *x += w * y;
                }
            }
        }
        let norm = next.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!(norm > 1e-300, "({l1},{l2},{l3}): the iteration lost the invariant");
        next.iter_mut().for_each(|x| *x /= norm);
        let change = max_diff(&next, &v);
        v = next;
        if change < 1e-15 || iteration > 20_000 {
            break;
        }
    }
    let residual =
        rotations.iter().map(|[a, b, c]| max_diff(&rotate3(&v, a, b, c, false), &v)).fold(0.0, f64::max);
    assert!(residual < 1e-11, "({l1},{l2},{l3}): numeric invariant not converged, residual {residual}");
    let dot: f64 = v.iter().zip(reference).map(|(x, y)| x * y).sum();
    if dot < 0.0 {
        v.iter_mut().for_each(|x| *x = -*x);
    }
    v
}

// ---------------------------------------------------------------------------
// Complex Clebsch–Gordan coefficients.
// ---------------------------------------------------------------------------

#[test]
fn complex_cg_known_values() {
    let cg = clebsch_gordan_coefficient;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
    assert!(close(cg(1, 1, 1, -1, 0, 0), 1.0 / 3f64.sqrt()));
    assert!(close(cg(1, 0, 1, 0, 0, 0), -1.0 / 3f64.sqrt()));
    assert!(close(cg(1, 1, 1, 0, 2, 1), 1.0 / 2f64.sqrt()));
    assert!(close(cg(1, 1, 1, 0, 1, 1), 1.0 / 2f64.sqrt()));
    assert!(close(cg(1, 0, 1, 1, 1, 1), -1.0 / 2f64.sqrt()));
    assert!(close(cg(1, 0, 1, 0, 2, 0), (2.0f64 / 3.0).sqrt()));
    assert!(close(cg(2, 0, 2, 0, 2, 0), -(2.0f64 / 7.0).sqrt()));
    assert!(close(cg(2, 1, 1, -1, 1, 0), (3.0f64 / 10.0).sqrt()));
    assert_eq!(cg(1, 0, 1, 0, 1, 0), 0.0);
    // Selection rules.
    assert_eq!(cg(1, 1, 1, 1, 1, 1), 0.0);
    assert_eq!(cg(1, 0, 1, 0, 3, 0), 0.0);
    assert_eq!(cg(2, 3, 1, 0, 3, 3), 0.0);
    // Stretched states.
    for (l1, l2) in [(0, 0), (1, 2), (4, 4), (7, 3), (MAX_L / 2, MAX_L / 2), (MAX_L - 1, 1)] {
        let (m1, m2) = (l1 as i32, l2 as i32);
        assert!(close(cg(l1, m1, l2, m2, l1 + l2, m1 + m2), 1.0), "({l1},{l2})");
    }
}

/// Orthonormality of the complex coefficients up to l = 4 to 1e-13, and
/// the exchange symmetry, which tests Racah's sum at every (m1, m2).
#[test]
fn complex_cg_orthonormal_and_symmetric() {
    let mut worst: f64 = 0.0;
    for l1 in 0..=4u32 {
        for l2 in 0..=4u32 {
            let (i1, i2) = (l1 as i32, l2 as i32);
            for j in l1.abs_diff(l2)..=l1 + l2 {
                for jp in l1.abs_diff(l2)..=l1 + l2 {
                    for m in -(j as i32)..=j as i32 {
                        let mut s = 0.0;
                        for m1 in -i1..=i1 {
                            let m2 = m - m1;
                            s += clebsch_gordan_coefficient(l1, m1, l2, m2, j, m)
                                * clebsch_gordan_coefficient(l1, m1, l2, m2, jp, m);
                        }
                        let expected = if j == jp { 1.0 } else { 0.0 };
                        worst = worst.max((s - expected).abs());
                    }
                }
                let sign = if (l1 + l2 + j) % 2 == 0 { 1.0 } else { -1.0 };
                for m1 in -i1..=i1 {
                    for m2 in -i2..=i2 {
                        let m = m1 + m2;
                        let a = clebsch_gordan_coefficient(l1, m1, l2, m2, j, m);
                        let b = clebsch_gordan_coefficient(l2, m2, l1, m1, j, m);
                        assert!((a - sign * b).abs() < 1e-15);
                    }
                }
            }
        }
    }
    assert!(worst < 1e-13, "orthonormality off by {worst}");
}

/// At the largest supported l the exact integer Racah sum keeps the
/// coefficients orthonormal too.
#[test]
fn complex_cg_accurate_at_max_l() {
    let (l1, l2) = (MAX_L, MAX_L - 3);
    let i1 = l1 as i32;
    for (j, jp) in [(3, 3), (3, 5), (20, 20), (18, 20), (11, 19), (19, 19), (4, 20)] {
        for m in [0, 1, -3] {
            let s: f64 = (-i1..=i1)
                .map(|m1| {
                    clebsch_gordan_coefficient(l1, m1, l2, m - m1, j, m)
                        * clebsch_gordan_coefficient(l1, m1, l2, m - m1, jp, m)
                })
                .sum();
            let expected = if j == jp { 1.0 } else { 0.0 };
            assert!((s - expected).abs() < 1e-12, "({j},{jp},{m}): {s}");
        }
    }
}

// ---------------------------------------------------------------------------
// Real Clebsch–Gordan blocks.
// ---------------------------------------------------------------------------

#[test]
fn real_cg_shapes_norm_and_triangle() {
    for l1 in 0..=4 {
        for l2 in 0..=4 {
            for l3 in 0..=9 {
                let c = real_clebsch_gordan(l1, l2, l3);
                assert_eq!(c.len(), dim(l1) * dim(l2) * dim(l3));
                let norm2: f64 = c.iter().map(|x| x * x).sum();
                if l1.abs_diff(l2) <= l3 && l3 <= l1 + l2 {
                    assert!((norm2 - 1.0).abs() < 1e-13, "({l1},{l2},{l3}): Σ C² = {norm2}");
                } else {
                    assert_eq!(norm2, 0.0, "({l1},{l2},{l3}) breaks the triangle rule");
                }
            }
        }
    }
}

#[test]
fn real_cg_known_blocks() {
    // (1, 1, 0): ±identity / √3.
    let c = real_clebsch_gordan(1, 1, 0);
    let s = c[0].signum();
    for a in 0..3 {
        for b in 0..3 {
            let expected = if a == b { s / 3f64.sqrt() } else { 0.0 };
            assert!((c[a * 3 + b] - expected).abs() < 1e-15, "(1,1,0)[{a},{b}] = {}", c[a * 3 + b]);
        }
    }
    // (0, l, l), (l, 0, l) and (l, l, 0): ±identity / √(2l+1).
    for l in 0..=4 {
        let d = dim(l);
        for (block, name) in [
            (real_clebsch_gordan(0, l, l), "(0,l,l)"),
            (real_clebsch_gordan(l, 0, l), "(l,0,l)"),
            (real_clebsch_gordan(l, l, 0), "(l,l,0)"),
        ] {
            let s = block[0].signum();
            for a in 0..d {
                for b in 0..d {
                    let expected = if a == b { s / (d as f64).sqrt() } else { 0.0 };
                    assert!((block[a * d + b] - expected).abs() < 1e-14, "{name} l={l} [{a},{b}]");
                }
            }
        }
    }
    // (1, 1, 1): ±ε / √6 in some order of the axes.
    let c = real_clebsch_gordan(1, 1, 1);
    let at = |a: usize, b: usize, k: usize| c[(a * 3 + b) * 3 + k];
    let mut nonzero = 0;
    for a in 0..3 {
        for b in 0..3 {
            for k in 0..3 {
                assert!((at(a, b, k) + at(b, a, k)).abs() < 1e-15, "not antisymmetric in (m1, m2)");
                assert!((at(a, b, k) + at(a, k, b)).abs() < 1e-15, "not antisymmetric in (m2, m3)");
                let x = at(a, b, k).abs();
                if x > 1e-12 {
                    nonzero += 1;
                    assert!((x - 1.0 / 6f64.sqrt()).abs() < 1e-15);
                    assert!(a != b && b != k && a != k);
                }
            }
        }
    }
    assert_eq!(nonzero, 6);
}

/// `Σ_{m1,m2} C[m1,m2,m3] C[m1,m2,m3'] = δ(m3,m3') / (2l3+1)` up to l = 4.
#[test]
fn real_cg_orthogonality() {
    for l1 in 0..=4u32 {
        for l2 in 0..=4 {
            for l3 in l1.abs_diff(l2)..=l1 + l2 {
                let c = real_clebsch_gordan(l1, l2, l3);
                let d3 = dim(l3);
                for m in 0..d3 {
                    for mp in 0..d3 {
                        let s: f64 = (0..dim(l1) * dim(l2)).map(|ab| c[ab * d3 + m] * c[ab * d3 + mp]).sum();
                        let expected = if m == mp { 1.0 / d3 as f64 } else { 0.0 };
                        assert!((s - expected).abs() < 1e-13, "({l1},{l2},{l3}) [{m},{mp}]: {s}");
                    }
                }
            }
        }
    }
}

/// The proof of correctness: every real block with l <= 3 is invariant
/// under `D1 ⊗ D2 ⊗ D3` for random rotations, with the Wigner matrices
/// fitted from spherical harmonics evaluated here. Also `D(R1 R2) =
/// D(R1) D(R2)`, so the fitted matrices are a representation.
#[test]
fn real_cg_is_rotation_invariant() {
    let mut rng = ChaCha8Rng::seed_from_u64(2024);
    let lmax = 3;
    let mut worst: f64 = 0.0;
    for _ in 0..4 {
        let r = random_rotation(&mut rng);
        let d: Vec<Mat> = (0..=lmax).map(|l| wigner_d(l, &r, &mut rng)).collect();
        for &(l1, l2, l3) in &tensor_product_paths(lmax) {
            let c = real_clebsch_gordan(l1, l2, l3);
            let (a, b, k) = (&d[l1 as usize], &d[l2 as usize], &d[l3 as usize]);
            worst = worst.max(max_diff(&rotate3(&c, a, b, k, false), &c));
            worst = worst.max(max_diff(&rotate3(&c, a, b, k, true), &c));
        }
    }
    eprintln!("worst deviation from invariance over lmax = {lmax}: {worst:.2e}");
    assert!(worst < 1e-10, "real CG not invariant: {worst}");

    // Homomorphism check of the fitted D (for l = 3).
    let (r1, r2) = (random_rotation(&mut rng), random_rotation(&mut rng));
    let r12: [[f64; 3]; 3] =
        std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| r1[i][k] * r2[k][j]).sum()));
    let (d1, d2, d12) = (wigner_d(3, &r1, &mut rng), wigner_d(3, &r2, &mut rng), wigner_d(3, &r12, &mut rng));
    for i in 0..7 {
        for j in 0..7 {
            let p: f64 = (0..7).map(|k| d1[i][k] * d2[k][j]).sum();
            assert!((p - d12[i][j]).abs() < 1e-11);
        }
    }
}

/// A block that is right up to the sign of one real component would still
/// be unit-norm and orthogonal, but not invariant: flipping a basis sign
/// must break the check above, so the check can fail.
#[test]
fn invariance_check_detects_a_wrong_basis() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let r = random_rotation(&mut rng);
    let d: Vec<Mat> = (0..=2).map(|l| wigner_d(l, &r, &mut rng)).collect();
    let mut c = real_clebsch_gordan(1, 2, 2);
    // Flip m1 = -1 (first index 0).
    for x in &mut c[..25] {
        *x = -*x;
    }
    let dev = max_diff(&rotate3(&c, &d[1], &d[2], &d[2], false), &c);
    assert!(dev > 1e-3, "a sign error went unnoticed: {dev}");
}

/// Coupling a harmonic with itself gives the harmonic of the output degree
/// (the Gaunt relation): `Σ C[a,b,c] Y1_a(p) Y2_b(p) = κ Y3_c(p)` with `κ`
/// independent of `p`, and `κ = 0` when `l1 + l2 + l3` is odd (parity).
#[test]
fn real_cg_couples_harmonics() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for &(l1, l2, l3) in &tensor_product_paths(3) {
        let c = real_clebsch_gordan(l1, l2, l3);
        let (d1, d2, d3) = (dim(l1), dim(l2), dim(l3));
        let mut kappa = None;
        for _ in 0..6 {
            let p = random_unit(&mut rng);
            let (y1, y2, y3) = (real_sh(l1, p), real_sh(l2, p), real_sh(l3, p));
            let v: Vec<f64> = (0..d3)
                .map(|k| {
                    (0..d1)
                        .flat_map(|a| (0..d2).map(move |b| (a, b)))
                        .map(|(a, b)| c[(a * d2 + b) * d3 + k] * y1[a] * y2[b])
                        .sum()
                })
                .collect();
            let yy: f64 = y3.iter().map(|y| y * y).sum();
            let k: f64 = v.iter().zip(&y3).map(|(a, b)| a * b).sum::<f64>() / yy;
            for i in 0..d3 {
                assert!((v[i] - k * y3[i]).abs() < 1e-12, "({l1},{l2},{l3}): not proportional to Y_{l3}");
            }
            if (l1 + l2 + l3) % 2 == 1 {
                assert!(k.abs() < 1e-12, "({l1},{l2},{l3}): odd path couples to {k}");
            } else {
                assert!(k.abs() > 1e-3);
            }
            let k0 = *kappa.get_or_insert(k);
            assert!((k - k0).abs() < 1e-12, "({l1},{l2},{l3}): κ depends on the point");
        }
    }
}

// ---------------------------------------------------------------------------
// The sparse CG tensor.
// ---------------------------------------------------------------------------

#[test]
fn paths_follow_the_triangle_rule() {
    for lmax in 0..=5u32 {
        let paths = tensor_product_paths(lmax);
        let mut expected = Vec::new();
        for l1 in 0..=lmax {
            for l2 in 0..=lmax {
                for l3 in 0..=lmax {
                    if l3 + l1.min(l2) >= l1.max(l2) && l3 <= l1 + l2 {
                        expected.push((l1, l2, l3));
                    }
                }
            }
        }
        assert_eq!(paths, expected, "lmax {lmax}");
    }
    assert_eq!(tensor_product_paths(0), vec![(0, 0, 0)]);
    assert_eq!(tensor_product_paths(1).len(), 5);
    assert_eq!(tensor_product_paths(2).len(), 15);
    assert_eq!(tensor_product_paths(3).len(), 34);
}

/// nnz of the CG tensor for lmax = 1, 2, 3 against the non-zeros of the
/// invariants found numerically from rotations (no module code), whose
/// values must also match the module's blocks up to sign.
#[test]
fn cg_tensor_nnz_matches_independent_invariants() {
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let mut independent: HashMap<(u32, u32, u32), usize> = HashMap::new();
    for &(l1, l2, l3) in &tensor_product_paths(3) {
        let block = real_clebsch_gordan(l1, l2, l3);
        let numeric = numeric_invariant(l1, l2, l3, &block, &mut rng);
        let diff = max_diff(&numeric, &block);
        assert!(diff < 1e-10, "({l1},{l2},{l3}): numeric invariant differs by {diff}");
        independent.insert((l1, l2, l3), numeric.iter().filter(|x| x.abs() > 1e-8).count());
    }
    for lmax in 1..=3 {
        let cg = cg_tensor::<f64, i32>(lmax).unwrap();
        let paths = tensor_product_paths(lmax);
        let expected: usize = paths.iter().map(|p| independent[p]).sum();
        eprintln!("lmax = {lmax}: CG shape {:?}, {} paths, nnz = {}", cg.shape, paths.len(), cg.nnz());
        assert_eq!(cg.nnz(), expected, "lmax {lmax}");
        // Per path too.
        let mut per_path = vec![0usize; paths.len()];
        for &p in &cg.crd[3] {
            per_path[p.to_usize()] += 1;
        }
        for (p, &count) in per_path.iter().enumerate() {
            assert_eq!(count, independent[&paths[p]], "path {:?}", paths[p]);
        }
    }
    assert_eq!(cg_tensor::<f64, i32>(1).unwrap().nnz(), 16);
    assert_eq!(cg_tensor::<f64, i32>(2).unwrap().nnz(), 137);
    assert_eq!(cg_tensor::<f64, i32>(3).unwrap().nnz(), 611);
}

/// Every entry sits in its path's block at the right offsets with the
/// block's value, the tensor is canonical, and dtypes agree.
#[test]
fn cg_tensor_layout() {
    let lmax = 3;
    let cg = cg_tensor::<f64, i64>(lmax).unwrap();
    let paths = tensor_product_paths(lmax);
    assert_eq!(cg.shape, vec![16, 16, 16, paths.len()]);
    assert!(cg.is_canonical());
    let irrep = |x: usize| {
        let l = (x as f64).sqrt().floor() as usize;
        (l as u32, x - l * l)
    };
    let mut seen = BTreeSet::new();
    for k in 0..cg.nnz() {
        let [i, j, kk, p] = [0, 1, 2, 3].map(|d| cg.crd[d][k].to_usize());
        let (l1, l2, l3) = paths[p];
        let (li, m3) = irrep(i);
        let (lj, m1) = irrep(j);
        let (lk, m2) = irrep(kk);
        assert_eq!((lj, lk, li), (l1, l2, l3), "entry {k} outside its path's block");
        let block = real_clebsch_gordan(l1, l2, l3);
        assert_eq!(cg.val[k], block[(m1 * dim(l2) + m2) * dim(l3) + m3]);
        assert!(cg.val[k].abs() > 1e-12);
        seen.insert(p);
    }
    assert_eq!(seen.len(), paths.len(), "a path has no entries");
    let f32s = cg_tensor::<f32, i32>(lmax).unwrap();
    assert_eq!(f32s.crd, cg.cast::<f64, i32>().unwrap().crd);
    let halfs = cg_tensor::<half::f16, i32>(lmax).unwrap();
    assert_eq!(halfs.nnz(), cg.nnz());
    assert!(halfs.val.iter().all(|v| !v.is_zero()));
    assert!(cg_tensor::<f64, i32>(MAX_L + 1).is_err());
}

// ---------------------------------------------------------------------------
// Kernel maps.
// ---------------------------------------------------------------------------

fn grid(shape: [usize; 3], voxels: &[[usize; 3]]) -> Coo<f32, i32> {
    let crd = (0..3).map(|d| voxels.iter().map(|v| v[d] as i32).collect()).collect();
    Coo::new(shape.to_vec(), crd, vec![1.0; voxels.len()]).unwrap()
}

fn entries<V: Value, I: Index>(m: &Coo<V, I>) -> BTreeSet<(usize, usize, usize)> {
    (0..m.nnz()).map(|k| (m.crd[0][k].to_usize(), m.crd[1][k].to_usize(), m.crd[2][k].to_usize())).collect()
}

/// The map by brute force over all pairs.
fn brute_force(sites: &[[i64; 3]], kernel: usize) -> BTreeSet<(usize, usize, usize)> {
    let r = (kernel / 2) as i64;
    let k = kernel as i64;
    let mut out = BTreeSet::new();
    for (x, a) in sites.iter().enumerate() {
        for (y, b) in sites.iter().enumerate() {
            let d = [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
            if d.iter().all(|c| c.abs() <= r) {
                out.insert((x, y, (((d[0] + r) * k + d[1] + r) * k + d[2] + r) as usize));
            }
        }
    }
    out
}

fn sites<V: Value, I: Index>(g: &Coo<V, I>) -> Vec<[i64; 3]> {
    (0..g.nnz()).map(|k| std::array::from_fn(|d| g.crd[d][k].to_usize() as i64)).collect()
}

#[test]
fn kernel_map_of_a_2x2x1_grid() {
    let g = grid([2, 2, 1], &[[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]]);
    let m = kernel_map(&g, 3).unwrap();
    assert_eq!(m.shape, vec![4, 4, 27]);
    assert!(m.is_canonical());
    assert_eq!(m.nnz(), 16, "every voxel sees all four (itself included)");
    assert!(m.val.iter().all(|&v| v == 1.0));
    let e = entries(&m);
    // Offsets (dx, dy, dz) -> 9 (dx+1) + 3 (dy+1) + (dz+1); dz = 0 always.
    let off = |dx: i64, dy: i64| (9 * (dx + 1) + 3 * (dy + 1) + 1) as usize;
    for x in 0..4 {
        assert!(e.contains(&(x, x, 13)), "voxel {x} misses itself at the centre");
    }
    let expected: BTreeSet<_> = [
        (0, 0, off(0, 0)),
        (0, 1, off(0, 1)),
        (0, 2, off(1, 0)),
        (0, 3, off(1, 1)),
        (1, 0, off(0, -1)),
        (1, 1, off(0, 0)),
        (1, 2, off(1, -1)),
        (1, 3, off(1, 0)),
        (2, 0, off(-1, 0)),
        (2, 1, off(-1, 1)),
        (2, 2, off(0, 0)),
        (2, 3, off(0, 1)),
        (3, 0, off(-1, -1)),
        (3, 1, off(-1, 0)),
        (3, 2, off(0, -1)),
        (3, 3, off(0, 0)),
    ]
    .into_iter()
    .collect();
    assert_eq!(e, expected);
    assert_eq!(off(0, 1), 16);
    assert_eq!(off(1, 1), 25);
    // Kernel 1: the identity at offset 0.
    let m1 = kernel_map(&g, 1).unwrap();
    assert_eq!(m1.shape, vec![4, 4, 1]);
    assert_eq!(entries(&m1), (0..4).map(|x| (x, x, 0)).collect());
}

#[test]
fn kernel_map_matches_brute_force_and_is_symmetric() {
    for (seed, kernel) in [(1u64, 3usize), (2, 5), (3, 3), (4, 7)] {
        // A random sparse 12x10x8 occupancy grid, reshaped from a matrix.
        let a = uniform::<f32, i32>(12 * 10, 8, 150, seed).unwrap();
        let points: Vec<[f64; 3]> = (0..a.nnz())
            .map(|k| {
                let (r, c) = (a.crd[0][k] as usize, a.crd[1][k] as usize);
                [(r / 10) as f64 + 0.5, (r % 10) as f64 + 0.5, c as f64 + 0.5]
            })
            .collect();
        let g = voxelize::<f32, i32>(&points, 1.0).unwrap();
        let m = kernel_map(&g, kernel).unwrap();
        let n = g.nnz();
        let vol = kernel.pow(3);
        assert_eq!(m.shape, vec![n, n, vol]);
        assert!(m.is_canonical());
        let e = entries(&m);
        assert_eq!(e, brute_force(&sites(&g), kernel), "seed {seed} kernel {kernel}");
        for &(x, y, z) in &e {
            assert!(e.contains(&(y, x, vol - 1 - z)), "({x},{y},{z}) has no mirror");
        }
        let centre = e.iter().filter(|t| t.2 == (vol - 1) / 2).count();
        assert_eq!(centre, n);
    }
}

#[test]
fn kernel_map_numbers_sites_canonically() {
    let sorted = grid([3, 3, 3], &[[0, 0, 1], [0, 1, 0], [1, 1, 1], [2, 2, 2]]);
    let shuffled = grid([3, 3, 3], &[[2, 2, 2], [0, 1, 0], [1, 1, 1], [0, 0, 1]]);
    assert!(!shuffled.is_canonical());
    let (a, b) = (kernel_map(&sorted, 3).unwrap(), kernel_map(&shuffled, 3).unwrap());
    assert_eq!(a, b);
    // Explicit zeros are not sites.
    let mut with_zero = grid([3, 3, 3], &[[0, 0, 1], [0, 1, 0], [1, 1, 1], [1, 2, 2], [2, 2, 2]]);
    with_zero.val[3] = 0.0;
    assert_eq!(kernel_map(&with_zero, 3).unwrap(), a);
    // i64 indices, f64 values.
    let wide = sorted.cast::<f64, i64>().unwrap();
    let m = kernel_map(&wide, 3).unwrap();
    assert_eq!(entries(&m), entries(&a));
}

#[test]
fn kernel_map_rejects_bad_input() {
    let g = grid([2, 2, 1], &[[0, 0, 0], [1, 1, 0]]);
    for kernel in [0, 2, 4] {
        match kernel_map(&g, kernel) {
            Err(FormatError::Invalid { .. }) => {}
            other => panic!("kernel {kernel}: {other:?}"),
        }
    }
    let matrix = Coo::<f32, i32>::from_triplets(2, 2, &[(0, 0, 1.0)]).unwrap();
    assert!(matches!(kernel_map(&matrix, 3), Err(FormatError::Order { expected: 3, got: 2, .. })));
    let four = Coo::<f32, i32>::empty(vec![1, 1, 1, 1]);
    assert!(matches!(kernel_map(&four, 3), Err(FormatError::Order { got: 4, .. })));
    // kernel³ does not fit in i32.
    assert!(matches!(kernel_map(&g, 1291), Err(FormatError::IndexOverflow { .. })));
    assert!(kernel_map(&g, usize::MAX).is_err());
    // An empty grid has an empty map.
    let empty = kernel_map(&Coo::<f32, i32>::empty(vec![0, 0, 0]), 3).unwrap();
    assert_eq!(empty.shape, vec![0, 0, 27]);
    assert_eq!(empty.nnz(), 0);
}

#[test]
fn kernel_map_of_the_bunny() {
    let path = Path::new("/work/shared/data/pointclouds/bunny.xyz");
    if !path.exists() {
        eprintln!("SKIPPED: {} is absent", path.display());
        return;
    }
    let points = read_xyz(path).unwrap();
    let g = voxelize::<f32, i32>(&points, 0.05).unwrap();
    let n = g.nnz();
    for kernel in [3, 5] {
        let m = kernel_map(&g, kernel).unwrap();
        let vol = kernel.pow(3);
        assert_eq!(m.shape, vec![n, n, vol]);
        assert!(m.is_canonical());
        let centre = m.crd[2].iter().filter(|&&z| z as usize == (vol - 1) / 2).count();
        assert_eq!(centre, n, "kernel {kernel}: centre entries");
        let per_offset = m.occupancy(2);
        for z in 0..vol {
            assert_eq!(per_offset[z], per_offset[vol - 1 - z], "offset {z} vs its mirror");
        }
        eprintln!(
            "bunny: {} points -> {n} voxels (grid {:?}); kernel {kernel}: map nnz = {} ({:.2} per voxel)",
            points.len(),
            g.shape,
            m.nnz(),
            m.nnz() as f64 / n as f64
        );
    }
}

/// Reference blocks from e3nn's own algorithm (`o3._wigner._so3_clebsch_gordan`:
/// its Racah formula, `change_basis_real_to_complex` with the `(-i)^l`
/// phase, einsum `"ij,kl,mn,ikn->jlm"` with `conj(Q3.T)`, unit norm),
/// replayed outside this crate: the signs match e3nn's, not just the
/// magnitudes. Entries are `(flat row-major index, value)`; the rest are 0.
#[test]
fn real_cg_matches_e3nn_reference_blocks() {
    let (s6, s10, s30) = (1.0 / 6f64.sqrt(), 1.0 / 10f64.sqrt(), 1.0 / 30f64.sqrt());
    let reference = [
        ((1, 1, 1), vec![(5, s6), (7, -s6), (11, -s6), (15, s6), (19, s6), (21, -s6)]),
        (
            (1, 1, 2),
            vec![
                (2, -s30),
                (4, -s10),
                (6, s10),
                (10, s10),
                (16, s10),
                (22, 2.0 * s30),
                (28, s10),
                (30, s10),
                (38, s10),
                (42, -s30),
                (44, s10),
            ],
        ),
        (
            (2, 1, 1),
            vec![
                (2, s10),
                (6, s10),
                (10, s10),
                (12, s10),
                (18, -s30),
                (22, 2.0 * s30),
                (26, -s30),
                (32, s10),
                (34, s10),
                (36, -s10),
                (44, s10),
            ],
        ),
    ];
    for ((l1, l2, l3), nonzeros) in reference {
        let c = real_clebsch_gordan(l1, l2, l3);
        let mut expected = vec![0.0; c.len()];
        for (k, v) in nonzeros {
            expected[k] = v;
        }
        assert!(max_diff(&c, &expected) < 1e-15, "({l1},{l2},{l3}): {c:?}");
    }
}
