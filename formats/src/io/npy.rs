//! NumPy `.npy` files for dense tensors, through the `npyz` crate.
//!
//! Reading accepts C- and Fortran-order files (a Fortran-order file comes
//! back as a C-order array with the same logical contents) and any byte
//! order. Writing always produces little-endian C order.
//!
//! Failures carry the path: a file that cannot be opened is a
//! [`FormatError::Io`] with the OS error; a file whose contents are not a
//! usable `.npy` array (bad magic, truncated data, unsupported dtype) is a
//! [`FormatError::Io`] of kind [`std::io::ErrorKind::InvalidData`] whose
//! message says what is wrong.

use std::io::Write;
use std::path::Path;

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn, ShapeBuilder};
use npyz::{DType as NpyDType, NpyFile, NpyHeader, TypeChar, TypeStr, WriterBuilder};

use super::text::io_error;
use crate::scalar::{DType, IType, Index, Value};
use crate::{FormatError, Result};

/// A content error in an `.npy` file.
fn bad(path: &Path, message: impl Into<String>) -> FormatError {
    io_error(path, std::io::Error::new(std::io::ErrorKind::InvalidData, message.into()))
}

/// Reads a dense array of any float or integer dtype (`f8`, `f4`, `f2`,
/// `i1`..`i8`, `u1`..`u8`, `bool`), converting element-wise through `f64`.
pub fn read_npy_dense<V: Value>(path: &Path) -> Result<ArrayD<V>> {
    let npy = NpyBytes::read(path)?;
    let ts = npy.type_str.clone();
    let to = V::from_f64;
    match (ts.type_char(), ts.size_field()) {
        (TypeChar::Float, 8) => npy.collect(|x: f64| to(x)),
        (TypeChar::Float, 4) => npy.collect(|x: f32| to(x as f64)),
        (TypeChar::Float, 2) => npy.collect(|x: f16| to(x.to_f64())),
        (TypeChar::Int, 1) => npy.collect(|x: i8| to(x as f64)),
        (TypeChar::Int, 2) => npy.collect(|x: i16| to(x as f64)),
        (TypeChar::Int, 4) => npy.collect(|x: i32| to(x as f64)),
        (TypeChar::Int, 8) => npy.collect(|x: i64| to(x as f64)),
        (TypeChar::Uint, 1) => npy.collect(|x: u8| to(x as f64)),
        (TypeChar::Uint, 2) => npy.collect(|x: u16| to(x as f64)),
        (TypeChar::Uint, 4) => npy.collect(|x: u32| to(x as f64)),
        (TypeChar::Uint, 8) => npy.collect(|x: u64| to(x as f64)),
        (TypeChar::Bool, 1) => npy.collect(|x: bool| to(if x { 1.0 } else { 0.0 })),
        // (NumPy's `<f16` is a 128-bit long double, not a half float.)
        (TypeChar::Float, width) => Err(bad(
            path,
            format!(
                "unsupported dtype `{ts}` ({}-bit floats) for a dense array: expected float16, float32 or float64",
                width * 8
            ),
        )),
        _ => Err(bad(
            path,
            format!("unsupported dtype `{ts}` for a dense array: expected a float, integer or bool dtype"),
        )),
    }
}

/// The value type a float `.npy` file holds (`f8`, `f4`, `f2`), read from
/// its header alone; `None` for other dtypes (integers are indices).
pub fn npy_value_dtype(path: &Path) -> Result<Option<DType>> {
    Ok(match npy_header(path)?.dtype() {
        NpyDType::Plain(ts) if ts.type_char() == TypeChar::Float => match ts.size_field() {
            8 => Some(DType::F64),
            4 => Some(DType::F32),
            2 => Some(DType::F16),
            _ => None,
        },
        _ => None,
    })
}

/// Whether a `.npy` file holds `bool`s (read as values 0 and 1), from its
/// header alone.
pub fn npy_holds_bool(path: &Path) -> Result<bool> {
    Ok(matches!(npy_header(path)?.dtype(), NpyDType::Plain(ts) if ts.type_char() == TypeChar::Bool))
}

/// Whether a `.npy` file holds integers (signed or unsigned), from its
/// header alone.
pub fn npy_holds_integers(path: &Path) -> Result<bool> {
    Ok(matches!(npy_header(path)?.dtype(),
        NpyDType::Plain(ts) if matches!(ts.type_char(), TypeChar::Int | TypeChar::Uint)))
}

fn npy_header(path: &Path) -> Result<NpyHeader> {
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    NpyHeader::from_reader(std::io::BufReader::new(file))
        .map_err(|e| bad(path, format!("not a valid npy file: {e}")))
}

/// Reads an integer array (`i1`..`i8`, `u1`..`u8`) as `i64`. Float dtypes
/// are refused, as are `u8` values above `i64::MAX`.
pub fn read_npy_index(path: &Path) -> Result<ArrayD<i64>> {
    let npy = NpyBytes::read(path)?;
    let ts = npy.type_str.clone();
    let out = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Int, 1) => npy.collect(|x: i8| Some(x as i64)),
        (TypeChar::Int, 2) => npy.collect(|x: i16| Some(x as i64)),
        (TypeChar::Int, 4) => npy.collect(|x: i32| Some(x as i64)),
        (TypeChar::Int, 8) => npy.collect(|x: i64| Some(x)),
        (TypeChar::Uint, 1) => npy.collect(|x: u8| Some(x as i64)),
        (TypeChar::Uint, 2) => npy.collect(|x: u16| Some(x as i64)),
        (TypeChar::Uint, 4) => npy.collect(|x: u32| Some(x as i64)),
        (TypeChar::Uint, 8) => npy.collect(|x: u64| i64::try_from(x).ok()),
        (TypeChar::Float, _) => {
            return Err(bad(
                path,
                format!("floating-point dtype `{ts}` cannot hold indices: expected an integer dtype"),
            ));
        }
        _ => {
            return Err(bad(
                path,
                format!("unsupported dtype `{ts}` for an index array: expected an integer dtype"),
            ));
        }
    }?;
    if out.iter().any(Option::is_none) {
        return Err(bad(path, "a u8 value does not fit in i64"));
    }
    Ok(out.mapv(|x| x.unwrap_or_default()))
}

/// A whole `.npy` file in memory with its header checked against its size.
struct NpyBytes<'p> {
    path: &'p Path,
    bytes: Vec<u8>,
    header: NpyHeader,
    /// Offset of the first data byte.
    data_start: usize,
    type_str: TypeStr,
    shape: Vec<usize>,
}

impl<'p> NpyBytes<'p> {
    fn read(path: &'p Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| io_error(path, e))?;
        precheck(&bytes).map_err(|m| bad(path, m))?;
        let mut rest: &[u8] = &bytes;
        let header =
            NpyHeader::from_reader(&mut rest).map_err(|e| bad(path, format!("not a valid npy file: {e}")))?;
        let data_start = bytes.len() - rest.len();
        let type_str = match header.dtype() {
            NpyDType::Plain(ts) => ts,
            other => {
                return Err(bad(path, format!("structured dtype {} is not supported", other.descr())));
            }
        };
        let item =
            type_str.num_bytes().ok_or_else(|| bad(path, format!("dtype `{type_str}` has no fixed size")))?;
        let shape = header
            .shape()
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| bad(path, format!("shape {:?} is too large", header.shape())))?;
        let need = usize::try_from(header.len())
            .ok()
            .and_then(|n| n.checked_mul(item))
            .ok_or_else(|| bad(path, format!("shape {:?} is too large", header.shape())))?;
        let have = bytes.len() - data_start;
        if have < need {
            return Err(bad(
                path,
                format!(
                    "truncated file: shape {shape:?} of `{type_str}` needs {need} data bytes, found {have}"
                ),
            ));
        }
        Ok(NpyBytes { path, bytes, header, data_start, type_str, shape })
    }

    /// Reads every element as `T`, maps it, and arranges the result in C
    /// order.
    fn collect<T: npyz::Deserialize, U: Clone>(self, f: impl Fn(T) -> U) -> Result<ArrayD<U>> {
        let NpyBytes { path, bytes, header, data_start, shape, .. } = self;
        let order = header.order();
        let len = usize::try_from(header.len()).unwrap_or(usize::MAX);
        let data = bytes.get(data_start..).unwrap_or(&[]);
        let reader = NpyFile::with_header(header, data).data::<T>().map_err(|e| bad(path, e.to_string()))?;
        let mut out = Vec::with_capacity(len);
        for x in reader {
            out.push(f(x.map_err(|e| bad(path, format!("reading data: {e}")))?));
        }
        let array = match order {
            npyz::Order::C => ArrayD::from_shape_vec(IxDyn(&shape), out),
            npyz::Order::Fortran => ArrayD::from_shape_vec(IxDyn(&shape).f(), out),
        }
        .map_err(|e| bad(path, format!("shape {shape:?}: {e}")))?;
        Ok(match order {
            npyz::Order::C => array,
            npyz::Order::Fortran => array.as_standard_layout().into_owned(),
        })
    }
}

/// Checks what `npyz` would otherwise trust: the magic, that the header
/// length fits in the file, and that the shape's element count fits in
/// `u64` (its products are unchecked).
fn precheck(bytes: &[u8]) -> std::result::Result<(), String> {
    if bytes.len() < 10 || !bytes.starts_with(b"\x93NUMPY") {
        return Err("not an npy file: the `\\x93NUMPY` magic is missing".into());
    }
    let (len, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => {
            (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
        }
        2 | 3 => return Err("truncated file: the header length is missing".into()),
        v => return Err(format!("unsupported npy format version {v}")),
    };
    let end = start.checked_add(len).filter(|&e| e <= bytes.len()).ok_or_else(|| {
        format!("truncated file: the header needs {len} bytes, found {}", bytes.len() - start)
    })?;
    let text = String::from_utf8_lossy(&bytes[start..end]);
    // Best effort: npyz parses the header properly afterwards.
    let Some(at) = text.find("shape") else { return Ok(()) };
    let after = &text[at..];
    if let (Some(open), Some(close)) = (after.find('('), after.find(')'))
        && open < close
    {
        let dims = after[open + 1..close].split(',').filter_map(|p| p.trim().parse::<u64>().ok());
        let mut nonzero = dims.filter(|&d| d != 0);
        if nonzero.try_fold(1u64, |acc, d| acc.checked_mul(d)).is_none() {
            return Err(format!("shape {} has too many elements", &after[open..=close]));
        }
    }
    Ok(())
}

/// An element type [`write_npy`] can store. Sealed: implemented for `f64`,
/// `f32`, `f16`, `bf16`, `i32` and `i64`.
///
/// NumPy has no bfloat16, so `bf16` is stored as `f4` (`f32`), which holds
/// every bf16 value exactly; reading it back as `bf16` is lossless.
pub trait NpyElement: Copy + sealed::Sealed {
    /// The NumPy dtype the element is written as (always little-endian).
    const NPY_DTYPE: &'static str;
    #[doc(hidden)]
    type Stored: npyz::Serialize + Copy;
    #[doc(hidden)]
    fn to_stored(self) -> Self::Stored;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f64 {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
}

macro_rules! npy_element {
    ($($t:ty => $stored:ty, $name:literal, $conv:expr;)*) => {$(
        impl NpyElement for $t {
            const NPY_DTYPE: &'static str = $name;
            type Stored = $stored;
            fn to_stored(self) -> $stored {
                let conv: fn($t) -> $stored = $conv;
                conv(self)
            }
        }
    )*};
}

npy_element! {
    f64 => f64, "<f8", |x| x;
    f32 => f32, "<f4", |x| x;
    f16 => f16, "<f2", |x| x;
    bf16 => f32, "<f4", |x| x.to_f32();
    i32 => i32, "<i4", |x| x;
    i64 => i64, "<i8", |x| x;
}

/// Writes `data` (C order) with the given shape. See [`NpyElement`] for the
/// dtype each element type becomes.
pub fn write_npy<T: NpyElement>(path: &Path, shape: &[usize], data: &[T]) -> Result<()> {
    write_stream(path, shape, T::NPY_DTYPE, data.len(), data.iter().map(|x| x.to_stored()))
}

/// Writes the values of any [`Value`] type in its own dtype (`bf16` as
/// `f32`), for code generic over the value type.
pub fn write_npy_values<V: Value>(path: &Path, shape: &[usize], data: &[V]) -> Result<()> {
    let n = data.len();
    let it = data.iter().map(|v| v.to_f64());
    match V::DTYPE {
        DType::F64 => write_stream(path, shape, "<f8", n, it),
        DType::F32 | DType::Bf16 => write_stream(path, shape, "<f4", n, it.map(|x| x as f32)),
        DType::F16 => write_stream(path, shape, "<f2", n, it.map(f16::from_f64)),
    }
}

/// Writes an index array in its own dtype (`i4` or `i8`), for code generic
/// over the index type.
pub fn write_npy_indices<I: Index>(path: &Path, shape: &[usize], data: &[I]) -> Result<()> {
    let n = data.len();
    match I::ITYPE {
        IType::I32 => {
            let it = data.iter().map(|x| i32::try_from(x.to_usize()).unwrap_or(i32::MAX));
            write_stream(path, shape, "<i4", n, it)
        }
        IType::I64 => {
            let it = data.iter().map(|x| i64::try_from(x.to_usize()).unwrap_or(i64::MAX));
            write_stream(path, shape, "<i8", n, it)
        }
    }
}

/// Writes `len` elements from `data` as the little-endian `dtype`.
fn write_stream<S: npyz::Serialize>(
    path: &Path,
    shape: &[usize],
    dtype: &str,
    len: usize,
    data: impl Iterator<Item = S>,
) -> Result<()> {
    let count = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if count != Some(len) {
        return Err(FormatError::invalid(
            "npy array",
            format!("shape {shape:?} does not hold the {len} elements given"),
        ));
    }
    let shape64: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let type_str: TypeStr =
        dtype.parse().map_err(|e| FormatError::invalid("npy dtype", format!("`{dtype}`: {e}")))?;
    let file = std::fs::File::create(path).map_err(|e| io_error(path, e))?;
    let mut out = std::io::BufWriter::new(file);
    let io = |e| io_error(path, e);
    let mut writer = npyz::WriteOptions::<S>::new()
        .dtype(NpyDType::Plain(type_str))
        .shape(&shape64)
        .writer(&mut out)
        .begin_nd()
        .map_err(io)?;
    writer.extend(data).map_err(io)?;
    writer.finish().map_err(io)?;
    out.flush().map_err(io)
}
