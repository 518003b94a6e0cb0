//! Real Clebsch–Gordan coefficients of SO(3) and the sparse 4-D CG tensor
//! of a fully connected equivariant tensor product (the §6.5 case study:
//! `Z[b,i,w] = CG[i,j,k,l] · X[b,j,u] · Y[b,k] · W[b,l,u,w]`).
//!
//! The coefficients follow e3nn's `o3.wigner_3j` (`_so3_clebsch_gordan`):
//! the complex (Condon–Shortley) Clebsch–Gordan coefficients, from Racah's
//! formula, are taken to e3nn's real basis with its unitary
//! `change_basis_real_to_complex` matrix `Q_l` (including the `(-i)^l`
//! phase that makes every block real), then scaled to unit Frobenius norm.
//! Component `m` of an irrep `l` is index `l + m`, `m = -l..=l`. In terms of
//! the complex spherical harmonics `Y_l^m` (Condon–Shortley phase), e3nn's
//! real basis function of index `l + m` is, up to the common phase
//! `(-i)^l`, `√2 (-1)^m Re Y_l^m` for `m > 0`, `Y_l^0` for `m = 0` and
//! `-√2 (-1)^|m| Im Y_l^|m|` for `m < 0` (the opposite sign to the usual
//! real harmonics for negative `m`).

use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

/// The largest `l` handled. Racah's alternating sum is evaluated exactly in
/// `i128` up to here, so every coefficient is accurate to a few ulps.
pub const MAX_L: u32 = 20;

/// Coefficients at or below this magnitude are structural zeros: they are
/// rounding noise of the basis change and are stored as exact zeros.
pub const ZERO_TOLERANCE: f64 = 1e-12;

/// A complex number, just what the basis change needs.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Complex {
    re: f64,
    im: f64,
}

impl Complex {
    const ONE: Complex = Complex { re: 1.0, im: 0.0 };

    fn new(re: f64, im: f64) -> Self {
        Complex { re, im }
    }

    fn mul(self, o: Complex) -> Complex {
        Complex::new(self.re * o.re - self.im * o.im, self.re * o.im + self.im * o.re)
    }

    fn conj(self) -> Complex {
        Complex::new(self.re, -self.im)
    }

    fn scale(self, s: f64) -> Complex {
        Complex::new(self.re * s, self.im * s)
    }

    /// `(-i)^n`.
    fn minus_i_pow(n: u32) -> Complex {
        match n % 4 {
            0 => Complex::new(1.0, 0.0),
            1 => Complex::new(0.0, -1.0),
            2 => Complex::new(-1.0, 0.0),
            _ => Complex::new(0.0, 1.0),
        }
    }
}

/// `n!` as f64: exact up to `22!`, within a few ulps beyond.
fn factorial(n: i64) -> f64 {
    (2..=n).map(|k| k as f64).product()
}

/// The binomial coefficient `C(n, k)`, exact; 0 outside `0 <= k <= n`.
fn binomial(n: i64, k: i64) -> i128 {
    if k < 0 || k > n {
        return 0;
    }
    let k = k.min(n - k);
    let mut r: i128 = 1;
    for i in 0..k {
        // Exact at every step: r * (n - i) is divisible by i + 1.
        r = r * (n - i) as i128 / (i + 1) as i128;
    }
    r
}

/// True when `l3` can couple `l1` and `l2`: `|l1 - l2| <= l3 <= l1 + l2`.
pub fn triangle(l1: u32, l2: u32, l3: u32) -> bool {
    l1.abs_diff(l2) <= l3 && l3 <= l1 + l2
}

/// The complex Clebsch–Gordan coefficient `<l1 m1 l2 m2 | l3 m3>` in the
/// Condon–Shortley convention, from Racah's formula. Zero unless
/// `m3 = m1 + m2`, every `|m| <= l` and the triangle rule holds.
///
/// Racah's alternating sum `Σ_k (-1)^k / [k! (a-k)! (b-k)! (c-k)! (d+k)!
/// (e+k)!]` is rewritten as `Σ_k (-1)^k C(a,k) C(b+d,b-k) C(c+e,c-k)`
/// over `a! (b+d)! (c+e)!` and summed exactly in integers, so the only
/// rounding is in the final square root of a ratio of factorials.
///
/// # Panics
///
/// When an `l` exceeds [`MAX_L`].
///
/// ```
/// use spindle_formats::generate::clebsch_gordan::clebsch_gordan_coefficient as cg;
///
/// assert!((cg(1, 1, 1, -1, 0, 0) - 1.0 / 3f64.sqrt()).abs() < 1e-15);
/// assert!((cg(1, 0, 1, 0, 2, 0) - (2.0f64 / 3.0).sqrt()).abs() < 1e-15);
/// assert_eq!(cg(1, 0, 1, 0, 1, 0), 0.0);
/// ```
pub fn clebsch_gordan_coefficient(l1: u32, m1: i32, l2: u32, m2: i32, l3: u32, m3: i32) -> f64 {
    assert!(l1.max(l2).max(l3) <= MAX_L, "l = ({l1}, {l2}, {l3}) exceeds MAX_L = {MAX_L}");
    let (j1, j2, j) = (l1 as i64, l2 as i64, l3 as i64);
    let (m1, m2, m) = (m1 as i64, m2 as i64, m3 as i64);
    if !triangle(l1, l2, l3) || m != m1 + m2 || m1.abs() > j1 || m2.abs() > j2 || m.abs() > j {
        return 0.0;
    }
    let a = j1 + j2 - j;
    let b = j1 - m1;
    let c = j2 + m2;
    let d = j - j2 + m1;
    let e = j - j1 - m2;
    let k_min = 0.max(-d).max(-e);
    let k_max = a.min(b).min(c);
    let mut sum: i128 = 0;
    for k in k_min..=k_max {
        let term = binomial(a, k) * binomial(b + d, b - k) * binomial(c + e, c - k);
        sum += if k % 2 == 0 { term } else { -term };
    }
    if sum == 0 {
        return 0.0;
    }
    // <..|..>^2 = (2J+1) Π(j±m)! S^2 / [(j1+j2+J+1)! a! (J+j1-j2)! (J-j1+j2)!]
    let num = (2 * j + 1) as f64
        * factorial(j + m)
        * factorial(j - m)
        * factorial(j1 - m1)
        * factorial(j1 + m1)
        * factorial(j2 - m2)
        * factorial(j2 + m2);
    let den = factorial(j1 + j2 + j + 1) * factorial(a) * factorial(j + j1 - j2) * factorial(j - j1 + j2);
    sum as f64 * (num / den).sqrt()
}

/// e3nn's `change_basis_real_to_complex(l)`, by columns: column `r` (a real
/// component) lists the complex components `(row, Q[row][r])` it mixes.
/// `Q` takes real coordinates to complex ones, `v_complex = Q v_real`.
fn real_to_complex_columns(l: u32) -> Vec<Vec<(usize, Complex)>> {
    let li = l as i64;
    let phase = Complex::minus_i_pow(l);
    let h = std::f64::consts::FRAC_1_SQRT_2;
    (-li..=li)
        .map(|m| {
            let am = m.unsigned_abs() as usize;
            let (neg, pos) = (l as usize - am, l as usize + am);
            let sign = if am.is_multiple_of(2) { 1.0 } else { -1.0 };
            let col = match m.cmp(&0) {
                std::cmp::Ordering::Equal => vec![(l as usize, Complex::ONE)],
                std::cmp::Ordering::Greater => {
                    vec![(neg, Complex::new(h, 0.0)), (pos, Complex::new(sign * h, 0.0))]
                }
                std::cmp::Ordering::Less => {
                    vec![(neg, Complex::new(0.0, -h)), (pos, Complex::new(0.0, sign * h))]
                }
            };
            col.into_iter().map(|(row, q)| (row, q.mul(phase))).collect()
        })
        .collect()
}

/// The real Clebsch–Gordan block `C[m1, m2, m3]` coupling irreps `l1` and
/// `l2` into `l3`, dense and row-major with shape
/// `(2l1+1, 2l2+1, 2l3+1)`, normalised to `Σ C² = 1` as e3nn's
/// `wigner_3j(l1, l2, l3)`. All zeros when the triangle rule fails.
///
/// `C` is invariant under rotations, `C = (D1 ⊗ D2 ⊗ D3) C` for the real
/// Wigner matrices `D_l` of every rotation, and so
/// `Σ_{m1,m2} C[m1,m2,m3] C[m1,m2,m3'] = δ(m3,m3') / (2l3+1)`.
/// Entries within [`ZERO_TOLERANCE`] of zero are exact zeros.
///
/// # Panics
///
/// When an `l` exceeds [`MAX_L`], or if the basis change were to leave an
/// imaginary part (it cannot: the `(-i)^l` phases make every block real).
///
/// ```
/// use spindle_formats::generate::real_clebsch_gordan;
///
/// // (0, l, l) is the identity over √(2l+1).
/// let c = real_clebsch_gordan(0, 2, 2);
/// for a in 0..5 {
///     for b in 0..5 {
///         let expected = if a == b { 1.0 / 5f64.sqrt() } else { 0.0 };
///         assert!((c[a * 5 + b].abs() - expected).abs() < 1e-14);
///     }
/// }
/// ```
pub fn real_clebsch_gordan(l1: u32, l2: u32, l3: u32) -> Vec<f64> {
    assert!(l1.max(l2).max(l3) <= MAX_L, "l = ({l1}, {l2}, {l3}) exceeds MAX_L = {MAX_L}");
    let (d1, d2, d3) = (2 * l1 as usize + 1, 2 * l2 as usize + 1, 2 * l3 as usize + 1);
    let mut out = vec![0.0; d1 * d2 * d3];
    if !triangle(l1, l2, l3) {
        return out;
    }
    // The complex block, indexed [l1 + m1][l2 + m2]; m3 = m1 + m2.
    let (i1, i2) = (l1 as i32, l2 as i32);
    let complex: Vec<Vec<f64>> = (-i1..=i1)
        .map(|m1| (-i2..=i2).map(|m2| clebsch_gordan_coefficient(l1, m1, l2, m2, l3, m1 + m2)).collect())
        .collect();
    let cg = |i: usize, k: usize, n: usize| -> f64 {
        // m3 index n must equal (i - l1) + (k - l2) + l3.
        if i + k + l3 as usize == n + l1 as usize + l2 as usize { complex[i][k] } else { 0.0 }
    };
    let (q1, q2, q3) =
        (real_to_complex_columns(l1), real_to_complex_columns(l2), real_to_complex_columns(l3));
    // C_real[j,l,m] = Σ_{i,k,n} Q1[i,j] Q2[k,l] conj(Q3[n,m]) C[i,k,n]
    // (e3nn's einsum "ij,kl,mn,ikn->jlm" with conj(Q3.T)).
    let (mut norm2, mut max_im) = (0.0f64, 0.0f64);
    for (j, col1) in q1.iter().enumerate() {
        for (l, col2) in q2.iter().enumerate() {
            for (m, col3) in q3.iter().enumerate() {
                let mut acc = Complex::new(0.0, 0.0);
                for &(i, a) in col1 {
                    for &(k, b) in col2 {
                        for &(n, c) in col3 {
                            let x = cg(i, k, n);
                            if x != 0.0 {
                                let t = a.mul(b).mul(c.conj()).scale(x);
                                acc = Complex::new(acc.re + t.re, acc.im + t.im);
                            }
                        }
                    }
                }
                norm2 += acc.re * acc.re;
                max_im = max_im.max(acc.im.abs());
                out[(j * d2 + l) * d3 + m] = acc.re;
            }
        }
    }
    let norm = norm2.sqrt();
    assert!(
        norm > 0.0 && max_im <= ZERO_TOLERANCE * norm,
        "real CG ({l1}, {l2}, {l3}): imaginary part {max_im} against norm {norm}"
    );
    for x in &mut out {
        *x /= norm;
        if x.abs() <= ZERO_TOLERANCE {
            *x = 0.0;
        }
    }
    out
}

/// The coupling paths `(l1, l2, l3)` of a fully connected tensor product of
/// the irreps `0..=lmax` with themselves into `0..=lmax` (parity ignored):
/// every triple with each `l <= lmax` that satisfies the triangle rule, in
/// lexicographic order. Path `p` of [`cg_tensor`] is entry `p` here.
///
/// ```
/// use spindle_formats::generate::tensor_product_paths;
///
/// assert_eq!(
///     tensor_product_paths(1),
///     vec![(0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
/// );
/// ```
pub fn tensor_product_paths(lmax: u32) -> Vec<(u32, u32, u32)> {
    let mut paths = Vec::new();
    for l1 in 0..=lmax {
        for l2 in 0..=lmax {
            for l3 in l1.abs_diff(l2)..=(l1 + l2).min(lmax) {
                paths.push((l1, l2, l3));
            }
        }
    }
    paths
}

/// The 4-D sparse Clebsch–Gordan tensor `CG[i, j, k, l]` of the fully
/// connected tensor product of irreps `0..=lmax`.
///
/// `i` indexes the output's components, `j` the first input's and `k` the
/// second input's, each laid out as the irreps `0..=lmax` concatenated
/// (irrep `l` at offset `l²`, component `m` at `l² + l + m`, extent
/// `(lmax+1)²`); `l` is the path index into [`tensor_product_paths`].
/// Path `(l1, l2, l3)` contributes the non-zeros (`|c| > `
/// [`ZERO_TOLERANCE`]) of `real_clebsch_gordan(l1, l2, l3)` with `m1` on
/// `j`, `m2` on `k` and `m3` on `i`. The result is canonical.
///
/// Fails when `lmax` exceeds [`MAX_L`], when an extent does not fit in `I`,
/// or when a coefficient does not survive conversion to `V`.
///
/// ```
/// use spindle_formats::generate::cg_tensor;
///
/// let cg = cg_tensor::<f32, i32>(1)?;
/// assert_eq!(cg.shape, vec![4, 4, 4, 5]);
/// assert!(cg.is_canonical());
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn cg_tensor<V: Value, I: Index>(lmax: u32) -> Result<Coo<V, I>> {
    const WHAT: &str = "CG tensor";
    if lmax > MAX_L {
        return Err(FormatError::invalid(WHAT, format!("lmax {lmax} exceeds the supported {MAX_L}")));
    }
    let paths = tensor_product_paths(lmax);
    let dim = (lmax as usize + 1).pow(2);
    let shape = vec![dim, dim, dim, paths.len()];
    for &extent in &shape {
        I::from_usize(extent)?;
    }
    let offset = |l: u32| (l as usize).pow(2);
    // (i, j, k, path, value)
    let mut entries: Vec<(usize, usize, usize, usize, f64)> = Vec::new();
    for (p, &(l1, l2, l3)) in paths.iter().enumerate() {
        let block = real_clebsch_gordan(l1, l2, l3);
        let (d2, d3) = (2 * l2 as usize + 1, 2 * l3 as usize + 1);
        for (flat, &c) in block.iter().enumerate() {
            if c.abs() > ZERO_TOLERANCE {
                let (m1, m2, m3) = (flat / (d2 * d3), flat / d3 % d2, flat % d3);
                entries.push((offset(l3) + m3, offset(l1) + m1, offset(l2) + m2, p, c));
            }
        }
    }
    entries.sort_unstable_by_key(|e| (e.0, e.1, e.2, e.3));
    let mut crd: Vec<Vec<I>> = (0..4).map(|_| Vec::with_capacity(entries.len())).collect();
    let mut val = Vec::with_capacity(entries.len());
    for &(i, j, k, p, c) in &entries {
        for (d, x) in [i, j, k, p].into_iter().enumerate() {
            crd[d].push(I::from_usize(x)?);
        }
        val.push(V::from_f64_checked(c).ok_or_else(|| {
            FormatError::invalid(WHAT, format!("coefficient {c} does not fit in {}", V::DTYPE.name()))
        })?);
    }
    let coo = Coo::new(shape, crd, val)?;
    debug_assert!(coo.is_canonical());
    Ok(coo)
}
