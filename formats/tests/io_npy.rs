//! `.npy` round trips for every dtype, foreign files written through `npyz`
//! directly (Fortran order, big-endian, unsigned), and refusals.

use std::path::PathBuf;

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use npyz::WriterBuilder;
use spindle_formats::FormatError;
use spindle_formats::io::{
    npy_holds_bool, read_npy_dense, read_npy_index, write_npy, write_npy_indices, write_npy_values,
};

/// A temp file removed on drop.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        Temp(std::env::temp_dir().join(format!("spindle-io-npy-{}-{k}-{name}", std::process::id())))
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

fn expected<T: Clone>(shape: &[usize], data: &[T]) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(shape), data.to_vec()).unwrap()
}

/// The dtype string recorded in the file's header.
fn descr(path: &std::path::Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    npy.dtype().descr()
}

#[test]
fn f64_round_trip() {
    let t = Temp::new("a.npy");
    let data = [0.1, -2.5, 1e-300, f64::MAX, 0.0, 1.0 / 3.0];
    write_npy(&t.0, &[2, 3], &data).unwrap();
    assert_eq!(descr(&t.0), "'<f8'");
    assert_eq!(read_npy_dense::<f64>(&t.0).unwrap(), expected(&[2, 3], &data));
}

#[test]
fn f32_round_trip() {
    let t = Temp::new("a.npy");
    let data = [0.1f32, -2.5, 3.0e38, 7.0];
    write_npy(&t.0, &[2, 1, 2], &data).unwrap();
    assert_eq!(descr(&t.0), "'<f4'");
    assert_eq!(read_npy_dense::<f32>(&t.0).unwrap(), expected(&[2, 1, 2], &data));
    // Widening to f64 is exact.
    let wide: Vec<f64> = data.iter().map(|&x| x as f64).collect();
    assert_eq!(read_npy_dense::<f64>(&t.0).unwrap(), expected(&[2, 1, 2], &wide));
}

#[test]
fn f16_round_trip() {
    let t = Temp::new("a.npy");
    let data: Vec<f16> = [0.1, -2.5, 65504.0, 6e-8].iter().map(|&x| f16::from_f64(x)).collect();
    write_npy(&t.0, &[4], &data).unwrap();
    assert_eq!(descr(&t.0), "'<f2'");
    assert_eq!(read_npy_dense::<f16>(&t.0).unwrap(), expected(&[4], &data));
}

#[test]
fn bf16_is_stored_as_f32_and_reads_back_exactly() {
    let t = Temp::new("a.npy");
    let data: Vec<bf16> = [0.1, -2.5, 3.0e38, 1e-30].iter().map(|&x| bf16::from_f64(x)).collect();
    write_npy(&t.0, &[2, 2], &data).unwrap();
    assert_eq!(descr(&t.0), "'<f4'");
    assert_eq!(read_npy_dense::<bf16>(&t.0).unwrap(), expected(&[2, 2], &data));
}

#[test]
fn i32_round_trip() {
    let t = Temp::new("a.npy");
    let data = [0i32, -1, i32::MAX, i32::MIN, 7, 8];
    write_npy(&t.0, &[3, 2], &data).unwrap();
    assert_eq!(descr(&t.0), "'<i4'");
    let wide: Vec<i64> = data.iter().map(|&x| x as i64).collect();
    assert_eq!(read_npy_index(&t.0).unwrap(), expected(&[3, 2], &wide));
    let as_f64: Vec<f64> = data.iter().map(|&x| x as f64).collect();
    assert_eq!(read_npy_dense::<f64>(&t.0).unwrap(), expected(&[3, 2], &as_f64));
}

#[test]
fn i64_round_trip() {
    let t = Temp::new("a.npy");
    let data = [0i64, -1, i64::MAX, i64::MIN];
    write_npy(&t.0, &[4], &data).unwrap();
    assert_eq!(descr(&t.0), "'<i8'");
    assert_eq!(read_npy_index(&t.0).unwrap(), expected(&[4], &data));
}

#[test]
fn scalar_and_empty_shapes() {
    let t = Temp::new("a.npy");
    write_npy(&t.0, &[], &[4.5f64]).unwrap();
    assert_eq!(read_npy_dense::<f64>(&t.0).unwrap(), expected(&[], &[4.5]));
    write_npy::<f32>(&t.0, &[0, 3], &[]).unwrap();
    assert_eq!(read_npy_dense::<f32>(&t.0).unwrap().shape(), &[0, 3]);
}

#[test]
fn generic_value_and_index_writers() {
    let t = Temp::new("a.npy");
    let vals: Vec<bf16> = [1.5, -0.1].iter().map(|&x| bf16::from_f64(x)).collect();
    write_npy_values(&t.0, &[2], &vals).unwrap();
    assert_eq!(descr(&t.0), "'<f4'");
    assert_eq!(read_npy_dense::<bf16>(&t.0).unwrap(), expected(&[2], &vals));
    let vals: Vec<f16> = [1.5, -0.1].iter().map(|&x| f16::from_f64(x)).collect();
    write_npy_values(&t.0, &[1, 2], &vals).unwrap();
    assert_eq!(descr(&t.0), "'<f2'");
    assert_eq!(read_npy_dense::<f16>(&t.0).unwrap(), expected(&[1, 2], &vals));
    write_npy_indices(&t.0, &[3], &[5i32, 0, 9]).unwrap();
    assert_eq!(descr(&t.0), "'<i4'");
    assert_eq!(read_npy_index(&t.0).unwrap(), expected(&[3], &[5, 0, 9]));
    write_npy_indices(&t.0, &[3], &[5i64, 0, 9]).unwrap();
    assert_eq!(descr(&t.0), "'<i8'");
}

/// Writes `data` as `dtype` in `order` through npyz directly, as NumPy would.
fn write_foreign<T: npyz::Serialize>(
    path: &std::path::Path,
    dtype: &str,
    order: npyz::Order,
    shape: &[u64],
    data: &[T],
) {
    let dtype = npyz::DType::Plain(dtype.parse().unwrap());
    let mut out = Vec::new();
    let mut w = npyz::WriteOptions::<T>::new()
        .dtype(dtype)
        .order(order)
        .shape(shape)
        .writer(&mut out)
        .begin_nd()
        .unwrap();
    for x in data {
        w.push(x).unwrap();
    }
    w.finish().unwrap();
    std::fs::write(path, out).unwrap();
}

#[test]
fn fortran_order_input_comes_back_in_c_order() {
    let t = Temp::new("f.npy");
    // The 2x3 matrix [[1 2 3] [4 5 6]] stored column by column.
    write_foreign(&t.0, "<f8", npyz::Order::Fortran, &[2, 3], &[1.0f64, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let a = read_npy_dense::<f64>(&t.0).unwrap();
    assert_eq!(a, expected(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    assert!(a.is_standard_layout());
    write_foreign(&t.0, "<i8", npyz::Order::Fortran, &[2, 2], &[1i64, 3, 2, 4]);
    assert_eq!(read_npy_index(&t.0).unwrap(), expected(&[2, 2], &[1, 2, 3, 4]));
}

#[test]
fn big_endian_and_unsigned_and_small_integer_input() {
    let t = Temp::new("b.npy");
    write_foreign(&t.0, ">f8", npyz::Order::C, &[2], &[1.5f64, -2.0]);
    assert_eq!(read_npy_dense::<f32>(&t.0).unwrap(), expected(&[2], &[1.5f32, -2.0]));
    write_foreign(&t.0, "<u4", npyz::Order::C, &[3], &[0u32, 7, u32::MAX]);
    assert_eq!(read_npy_index(&t.0).unwrap(), expected(&[3], &[0, 7, u32::MAX as i64]));
    write_foreign(&t.0, "|i1", npyz::Order::C, &[2], &[-3i8, 4]);
    assert_eq!(read_npy_dense::<f64>(&t.0).unwrap(), expected(&[2], &[-3.0, 4.0]));
    write_foreign(&t.0, ">i2", npyz::Order::C, &[1], &[-300i16]);
    assert_eq!(read_npy_index(&t.0).unwrap(), expected(&[1], &[-300]));
}

fn message(e: FormatError) -> String {
    assert!(matches!(e, FormatError::Io { .. }), "{e:?}");
    e.to_string()
}

#[test]
fn index_reader_refuses_floats() {
    let t = Temp::new("c.npy");
    write_npy(&t.0, &[2], &[1.0f32, 2.0]).unwrap();
    assert_eq!(
        message(read_npy_index(&t.0).unwrap_err()),
        format!(
            "{}: floating-point dtype `<f4` cannot hold indices: expected an integer dtype",
            t.0.display()
        )
    );
}

#[test]
fn index_reader_refuses_u64_beyond_i64() {
    let t = Temp::new("c.npy");
    write_foreign(&t.0, "<u8", npyz::Order::C, &[2], &[1u64, u64::MAX]);
    assert_eq!(
        message(read_npy_index(&t.0).unwrap_err()),
        format!("{}: a u8 value does not fit in i64", t.0.display())
    );
}

#[test]
fn not_an_npy_file() {
    let t = Temp::new("d.npy");
    std::fs::write(&t.0, b"hello, world").unwrap();
    assert_eq!(
        message(read_npy_dense::<f64>(&t.0).unwrap_err()),
        format!("{}: not an npy file: the `\\x93NUMPY` magic is missing", t.0.display())
    );
}

#[test]
fn truncated_data() {
    let t = Temp::new("e.npy");
    write_npy(&t.0, &[4], &[1.0f64, 2.0, 3.0, 4.0]).unwrap();
    let bytes = std::fs::read(&t.0).unwrap();
    std::fs::write(&t.0, &bytes[..bytes.len() - 5]).unwrap();
    assert_eq!(
        message(read_npy_dense::<f64>(&t.0).unwrap_err()),
        format!("{}: truncated file: shape [4] of `<f8` needs 32 data bytes, found 27", t.0.display())
    );
}

/// A hand-made version 1.0 file with the given header dict and no data.
fn raw_npy(dict: &str) -> Vec<u8> {
    let mut header = dict.to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes
}

/// NumPy's bools (`|b1`) read as the values 0 and 1, are no indices, and
/// are told from floats by the header.
#[test]
fn bools_read_as_zero_and_one() {
    let t = Temp::new("bool.npy");
    let mut bytes = raw_npy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }");
    bytes.extend([1u8, 0, 1]);
    std::fs::write(&t.0, bytes).unwrap();
    assert_eq!(read_npy_dense::<f32>(&t.0).unwrap(), expected(&[3], &[1.0f32, 0.0, 1.0]));
    assert!(read_npy_index(&t.0).is_err());
    assert!(npy_holds_bool(&t.0).unwrap());
    let f = Temp::new("float.npy");
    write_npy(&f.0, &[2], &[1.0f32, 2.0]).unwrap();
    assert!(!npy_holds_bool(&f.0).unwrap());
}

/// NumPy's long double (`<f16`, 128 bits) is named by its width: Spindle's
/// f16 is a half float.
#[test]
fn long_doubles_are_named_by_their_width() {
    let t = Temp::new("longdouble.npy");
    let mut bytes = raw_npy("{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }");
    bytes.extend([0u8; 16]);
    std::fs::write(&t.0, bytes).unwrap();
    assert_eq!(
        message(read_npy_dense::<f64>(&t.0).unwrap_err()),
        format!(
            "{}: unsupported dtype `<f16` (128-bit floats) for a dense array: expected float16, float32 or float64",
            t.0.display()
        )
    );
}

#[test]
fn huge_declared_shape_is_refused_without_allocating() {
    let t = Temp::new("g.npy");
    std::fs::write(&t.0, raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"))
        .unwrap();
    assert_eq!(
        message(read_npy_dense::<f64>(&t.0).unwrap_err()),
        format!(
            "{}: truncated file: shape [1000000000000] of `<f8` needs 8000000000000 data bytes, found 0",
            t.0.display()
        )
    );
    let dict = "{'descr': '<f8', 'fortran_order': True, 'shape': (4294967296, 4294967296, 0), }";
    std::fs::write(&t.0, raw_npy(dict)).unwrap();
    assert_eq!(
        message(read_npy_dense::<f64>(&t.0).unwrap_err()),
        format!("{}: shape (4294967296, 4294967296, 0) has too many elements", t.0.display())
    );
}

#[test]
fn unsupported_dtype_is_refused() {
    let t = Temp::new("c.npy");
    let mut bytes = raw_npy("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }");
    bytes.extend([0u8; 16]);
    std::fs::write(&t.0, &bytes).unwrap();
    assert_eq!(
        message(read_npy_dense::<f64>(&t.0).unwrap_err()),
        format!(
            "{}: unsupported dtype `<c16` for a dense array: expected a float, integer or bool dtype",
            t.0.display()
        )
    );
    assert_eq!(
        message(read_npy_index(&t.0).unwrap_err()),
        format!("{}: unsupported dtype `<c16` for an index array: expected an integer dtype", t.0.display())
    );
}

#[test]
fn header_longer_than_the_file() {
    let t = Temp::new("h.npy");
    let mut bytes = raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }");
    bytes[8] = 0xff;
    bytes[9] = 0xff;
    std::fs::write(&t.0, &bytes).unwrap();
    let e = message(read_npy_dense::<f64>(&t.0).unwrap_err());
    assert!(e.contains("truncated file: the header needs 65535 bytes"), "{e}");
}

#[test]
fn write_shape_mismatch() {
    let t = Temp::new("i.npy");
    let e = write_npy(&t.0, &[2, 2], &[1.0f64, 2.0, 3.0]).unwrap_err();
    assert_eq!(e.to_string(), "invalid npy array: shape [2, 2] does not hold the 3 elements given");
}

#[test]
fn missing_file() {
    let t = Temp::new("missing.npy");
    let e = read_npy_dense::<f64>(&t.0).unwrap_err();
    assert!(
        matches!(&e, FormatError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound),
        "{e:?}"
    );
}
