//! The element types a format can hold: values (f64, f32, f16, bf16) and
//! indices (i32, i64).

use std::fmt::Debug;
use std::ops::Add;

use crate::FormatError;

/// A value dtype name, as users write it (`f32`) and as files record it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F64,
    F32,
    F16,
    Bf16,
}

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }
    /// `x` as this dtype stores it (rounded to nearest; beyond its range,
    /// infinity).
    pub fn round(self, x: f64) -> f64 {
        match self {
            DType::F64 => x,
            DType::F32 => x as f32 as f64,
            DType::F16 => half::f16::from_f64(x).to_f64(),
            DType::Bf16 => half::bf16::from_f64(x).to_f64(),
        }
    }
    /// The dtype a result of `self` and `other` is kept in: the wider of
    /// the two, and f32 for f16 with bf16 (neither holds the other), as
    /// NumPy and PyTorch promote.
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        match (self, other) {
            (a, b) if a == b => a,
            (F64, _) | (_, F64) => F64,
            _ => F32,
        }
    }
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 => 8,
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
        }
    }
}

/// An index dtype name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IType {
    I32,
    I64,
}

impl IType {
    pub fn name(self) -> &'static str {
        match self {
            IType::I32 => "i32",
            IType::I64 => "i64",
        }
    }
    pub fn size_bytes(self) -> usize {
        match self {
            IType::I32 => 4,
            IType::I64 => 8,
        }
    }
}

/// A value type stored in a format. Duplicates combine with `+` in the
/// value type itself; conversions to and from f64 are for I/O and checks.
pub trait Value:
    Copy + Debug + PartialEq + PartialOrd + Default + Send + Sync + Add<Output = Self> + 'static
{
    const DTYPE: DType;
    fn zero() -> Self;
    fn to_f64(self) -> f64;
    fn from_f64(x: f64) -> Self;
    fn is_zero(self) -> bool {
        self == Self::zero()
    }
    /// Converts, or `None` when this type cannot hold `x`: a finite value
    /// that overflows to infinity or a non-zero one that flushes to zero.
    fn from_f64_checked(x: f64) -> Option<Self> {
        let v = Self::from_f64(x);
        let back = v.to_f64();
        let lost = (x.is_finite() && !back.is_finite()) || (x != 0.0 && back == 0.0);
        (!lost).then_some(v)
    }
}

impl Value for f64 {
    const DTYPE: DType = DType::F64;
    fn zero() -> Self {
        0.0
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
}

impl Value for f32 {
    const DTYPE: DType = DType::F32;
    fn zero() -> Self {
        0.0
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

impl Value for half::f16 {
    const DTYPE: DType = DType::F16;
    fn zero() -> Self {
        half::f16::ZERO
    }
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(x: f64) -> Self {
        half::f16::from_f64(x)
    }
}

impl Value for half::bf16 {
    const DTYPE: DType = DType::Bf16;
    fn zero() -> Self {
        half::bf16::ZERO
    }
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(x: f64) -> Self {
        half::bf16::from_f64(x)
    }
}

/// An index type stored in a format's coordinate and position arrays.
pub trait Index: Copy + Debug + Ord + Default + Send + Sync + std::hash::Hash + 'static {
    const ITYPE: IType;
    /// Widens a stored index. Stored indices are never negative.
    fn to_usize(self) -> usize;
    /// Narrows a position or coordinate, failing when it does not fit.
    fn from_usize(x: usize) -> Result<Self, FormatError>;
}

impl Index for i32 {
    const ITYPE: IType = IType::I32;
    fn to_usize(self) -> usize {
        self as usize
    }
    fn from_usize(x: usize) -> Result<Self, FormatError> {
        i32::try_from(x).map_err(|_| FormatError::IndexOverflow { value: x, itype: IType::I32 })
    }
}

impl Index for i64 {
    const ITYPE: IType = IType::I64;
    fn to_usize(self) -> usize {
        self as usize
    }
    fn from_usize(x: usize) -> Result<Self, FormatError> {
        i64::try_from(x).map_err(|_| FormatError::IndexOverflow { value: x, itype: IType::I64 })
    }
}

/// Narrows a whole slice of usize to an index type.
pub fn narrow<I: Index>(xs: &[usize]) -> Result<Vec<I>, FormatError> {
    // Checking the maximum once keeps the hot loop a plain cast.
    if let Some(&max) = xs.iter().max() {
        I::from_usize(max)?;
    }
    Ok(xs.iter().map(|&x| I::from_usize(x).unwrap_or_default()).collect())
}
