//! Tensor data for a [`Problem`](crate::Problem): arrays, sparse matrices,
//! files and seeded random data, each with the dtype it has in a kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ndarray::{Array, ArrayD, Dimension};
use rand::{Rng, SeedableRng};
use spindle_formats::{Coo, DType, IType, Index, SparseTensor, Value};
use spindle_ir::lang::{Einsum, ElemType};
use spindle_ir::tensor::{TensorValue, Tensors};

use crate::error::{Error, Result};

/// One tensor's data, or where it comes from.
#[derive(Clone, Debug)]
pub struct Input {
    pub(crate) data: InputData,
    /// The dtype in the kernel; `None`: the data's own (f32 for files and
    /// values read as f64, i32 for index files).
    pub(crate) dtype: Option<ElemType>,
}

#[derive(Clone, Debug)]
pub(crate) enum InputData {
    Dense(TensorValue),
    Sparse(Coo<f64, i64>),
    /// `.npy` (dense values or integer indices), `.mtx` / `.tns` (sparse).
    File(PathBuf),
    /// Values uniform in ±[0.1, 1) (never zero), or indices in `0..max`.
    Random {
        shape: Vec<usize>,
        seed: u64,
        max: Option<i64>,
    },
    /// No data: a shape (usually the output's).
    Shape(Vec<usize>),
}

impl Input {
    /// A `.npy` file (dense values or integer indices) or a `.mtx` / `.tns`
    /// file (sparse entries), read when the problem is prepared.
    pub fn file(path: impl Into<PathBuf>) -> Input {
        Input { data: InputData::File(path.into()), dtype: None }
    }

    /// Seeded random values uniform in ±[0.1, 1), never zero.
    pub fn random(shape: &[usize], dtype: DType, seed: u64) -> Input {
        Input {
            data: InputData::Random { shape: shape.to_vec(), seed, max: None },
            dtype: Some(ElemType::Value(dtype)),
        }
    }

    /// Seeded random indices in `0..max`.
    pub fn random_indices(shape: &[usize], itype: IType, seed: u64, max: i64) -> Input {
        Input {
            data: InputData::Random { shape: shape.to_vec(), seed, max: Some(max) },
            dtype: Some(ElemType::Index(itype)),
        }
    }

    /// A tensor without data: its shape and dtype.
    pub fn shape(shape: &[usize], dtype: ElemType) -> Input {
        Input { data: InputData::Shape(shape.to_vec()), dtype: Some(dtype) }
    }

    /// The same data with another dtype in the kernel.
    pub fn with_dtype(mut self, dtype: ElemType) -> Input {
        self.dtype = Some(dtype);
        self
    }
}

impl<V: Value, D: Dimension> From<Array<V, D>> for Input {
    fn from(a: Array<V, D>) -> Input {
        let values = a.into_dyn().mapv(Value::to_f64);
        Input { data: InputData::Dense(TensorValue::Values(values)), dtype: Some(ElemType::Value(V::DTYPE)) }
    }
}

/// Index tensors: `Array<i32, _>` and `Array<i64, _>` through [`Input::indices`].
impl Input {
    pub fn indices<I: Index + Into<i64>, D: Dimension>(a: Array<I, D>) -> Input {
        let indices = a.into_dyn().mapv(Into::into);
        Input {
            data: InputData::Dense(TensorValue::Indices(indices)),
            dtype: Some(ElemType::Index(I::ITYPE)),
        }
    }
}

impl<V: Value, I: Index> From<Coo<V, I>> for Input {
    fn from(coo: Coo<V, I>) -> Input {
        let dtype = Some(ElemType::Value(V::DTYPE));
        match coo.cast::<f64, i64>() {
            Ok(coo) => Input { data: InputData::Sparse(coo), dtype },
            // Every i32 / i64 coordinate fits i64, so this cannot happen;
            // an error would surface as missing data, never as a panic.
            Err(_) => Input { data: InputData::Shape(coo.shape.clone()), dtype },
        }
    }
}

impl<V: Value, I: Index> From<SparseTensor<V, I>> for Input {
    fn from(t: SparseTensor<V, I>) -> Input {
        match t.to_coo() {
            Ok(coo) => coo.into(),
            Err(_) => Input { data: InputData::Shape(t.shape()), dtype: Some(ElemType::Value(V::DTYPE)) },
        }
    }
}

impl<V: Value, I: sprs::SpIndex> From<&sprs::CsMatI<V, I>> for Input {
    fn from(m: &sprs::CsMatI<V, I>) -> Input {
        let mut crd = [Vec::with_capacity(m.nnz()), Vec::with_capacity(m.nnz())];
        let mut val = Vec::with_capacity(m.nnz());
        for (v, (r, c)) in m.iter() {
            crd[0].push(r.index() as i64);
            crd[1].push(c.index() as i64);
            val.push(v.to_f64());
        }
        let dtype = Some(ElemType::Value(V::DTYPE));
        match Coo::new(vec![m.rows(), m.cols()], crd.into(), val) {
            Ok(coo) => Input { data: InputData::Sparse(coo.canonicalize()), dtype },
            Err(_) => Input { data: InputData::Shape(vec![m.rows(), m.cols()]), dtype },
        }
    }
}

/// What an input became: data for the evaluator and the kernel, or sparse
/// entries a format will store.
#[derive(Clone, Debug)]
pub enum Loaded {
    Dense(TensorValue),
    Sparse(Coo<f64, i64>),
    Shape(Vec<usize>),
}

impl Loaded {
    pub fn shape(&self) -> &[usize] {
        match self {
            Loaded::Dense(v) => v.shape(),
            Loaded::Sparse(c) => &c.shape,
            Loaded::Shape(s) => s,
        }
    }
}

/// Reads or generates an input's data.
/// The dtype `input` has in a kernel: the one asked for, else i32 for
/// index data and f32 for values.
pub(crate) fn kernel_dtype(input: &Input, loaded: &Loaded) -> ElemType {
    input.dtype.unwrap_or(match loaded {
        Loaded::Dense(TensorValue::Indices(_)) => ElemType::Index(spindle_formats::IType::I32),
        // A float `.npy` file's own type (f64, f32, f16), as NumPy holds it.
        _ => ElemType::Value(npy_dtype(input).unwrap_or(spindle_formats::DType::F32)),
    })
}

/// The float type of a `.npy` input's file (read before, so its header is
/// valid).
fn npy_dtype(input: &Input) -> Option<spindle_formats::DType> {
    let InputData::File(path) = &input.data else { return None };
    let npy = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("npy"));
    npy.then(|| spindle_formats::io::npy_value_dtype(path).ok().flatten()).flatten()
}

/// Tensor `name`'s values as a kernel in `dtype` holds them, in place:
/// rounded to it, so that the reference evaluator computes from what a
/// 16-bit kernel reads (from unrounded values, near-cancelling sums failed
/// `--check`, and `eval` differed from `run`). A finite value the dtype
/// cannot hold is refused (1e10 in f16 would be infinite).
fn round_to_kernel<'a>(
    name: &str,
    dtype: ElemType,
    values: impl IntoIterator<Item = &'a mut f64>,
) -> Result<()> {
    let ElemType::Value(dtype) = dtype else { return Ok(()) };
    for x in values {
        let stored = dtype.round(*x);
        if x.is_finite() && !stored.is_finite() {
            return Err(Error::input(format!(
                "tensor {name}: the value {x} does not fit in {} (it would be infinite in the kernel)",
                dtype.name()
            )));
        }
        *x = stored;
    }
    Ok(())
}

/// [`round_to_kernel`] over every value tensor of `einsums` (checked, so
/// with the dtypes `where` clauses give) that `dense` or `sparse` holds.
pub(crate) fn round_inputs<'a>(
    einsums: impl IntoIterator<Item = &'a Einsum>,
    dense: &mut Tensors,
    sparse: &mut BTreeMap<String, Coo<f64, i64>>,
) -> Result<()> {
    let mut done = BTreeSet::new();
    for einsum in einsums {
        for (name, t) in &einsum.tensors {
            if !done.insert(name.clone()) {
                continue;
            }
            if let Some(TensorValue::Values(v)) = dense.get_mut(name) {
                round_to_kernel(name, t.dtype, v.iter_mut())?;
            }
            if let Some(coo) = sparse.get_mut(name) {
                round_to_kernel(name, t.dtype, coo.val.iter_mut())?;
            }
        }
    }
    Ok(())
}

pub(crate) fn load(input: &Input) -> Result<Loaded> {
    Ok(match &input.data {
        InputData::Dense(v) => Loaded::Dense(v.clone()),
        InputData::Sparse(c) => Loaded::Sparse(c.clone()),
        InputData::Shape(s) => Loaded::Shape(s.clone()),
        InputData::File(path) => read_file(path)?,
        InputData::Random { shape, seed, max } => Loaded::Dense(random(shape, *seed, *max)?),
    })
}

/// A `.npy` file as dense values or integer indices; a `.mtx` / `.tns` file
/// as sparse entries; `gen:SPEC` a generated sparse matrix (the `spindle
/// stats gen:...` syntax, e.g. `gen:uniform:rows=999,cols=999,nnz=9980`);
/// `kernelmap:FILE.xyz:voxel=V[,kernel=K]` a point cloud's kernel map
/// ([`kernel_map`]).
pub fn read_file(path: &Path) -> Result<Loaded> {
    if let Some(spec) = path.to_str().and_then(|p| p.strip_prefix("gen:")) {
        let spec: spindle_formats::generate::GeneratorSpec =
            spec.parse().map_err(|e| Error::input(format!("gen:{spec}: {e}")))?;
        return Ok(Loaded::Sparse(spec.generate()?));
    }
    if let Some(spec) = path.to_str().and_then(|p| p.strip_prefix("kernelmap:")) {
        return Ok(Loaded::Sparse(kernel_map(spec)?));
    }
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    if ext == "npy" {
        return Ok(match spindle_formats::io::read_npy_index(path) {
            Ok(indices) => Loaded::Dense(TensorValue::Indices(indices)),
            Err(_) => Loaded::Dense(TensorValue::Values(spindle_formats::io::read_npy_dense::<f64>(path)?)),
        });
    }
    Ok(Loaded::Sparse(spindle_formats::io::read_tensor(path)?))
}

/// `FILE.xyz:voxel=V[,kernel=K]`: the points of FILE voxelized at size V,
/// and the map `Map[x,y,z]` of a K×K×K submanifold convolution (K = 3
/// unless told): input voxel `y` sits at offset `z` from output voxel `x`.
/// Found by subsection iteration ([`spindle_conv::kernel_map`]), so
/// `spindle run "Out[x,m] += Map[x,y,z] * In[y,c] * W[z,c,m]"` runs a
/// point-cloud layer from the file alone.
pub fn kernel_map(spec: &str) -> Result<spindle_formats::Coo<f64, i64>> {
    const FORM: &str = "kernelmap:FILE.xyz:voxel=V[,kernel=K]";
    let bad = |why: String| Error::input(format!("kernelmap:{spec}: {why} (the form is {FORM})"));
    let (path, options) = spec.rsplit_once(':').ok_or_else(|| bad("no options after the file".into()))?;
    let (mut voxel, mut kernel) = (None, 3usize);
    for item in options.split(',') {
        match item.split_once('=') {
            Some(("voxel", v)) => {
                let size = v.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0);
                voxel = Some(size.ok_or_else(|| bad(format!("voxel={v} is not a positive number")))?);
            }
            Some(("kernel", k)) => {
                let size = k.parse::<usize>().ok().filter(|k| k % 2 == 1 && *k <= 9);
                kernel = size.ok_or_else(|| bad(format!("kernel={k} is not an odd number from 1 to 9")))?;
            }
            _ => return Err(bad(format!("`{item}` is not voxel=V or kernel=K"))),
        }
    }
    let voxel = voxel.ok_or_else(|| bad("the voxel size is missing".into()))?;
    let points = spindle_formats::io::read_xyz(Path::new(path))?;
    let voxels: spindle_formats::Coo<f64, i64> = spindle_formats::generate::voxelize(&points, voxel)?;
    Ok(spindle_conv::kernel_map(&voxels, kernel)?)
}

/// Values uniform in ±[0.1, 1) (never zero), or indices in `0..max`.
pub fn random(shape: &[usize], seed: u64, max: Option<i64>) -> Result<TensorValue> {
    let len = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    // Held as f64 (every input is, until its kernel's dtype rounds it).
    let len = spindle_formats::check_array::<f64>(
        "random data (held as f64 until the kernel's dtype rounds it)",
        len,
    )?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let shape = shape.to_vec();
    let shaped = |e: ndarray::ShapeError| Error::input(e.to_string());
    Ok(match max {
        None => {
            let data = (0..len)
                .map(|_| {
                    let magnitude = rng.random_range(0.1..1.0);
                    if rng.random::<bool>() { magnitude } else { -magnitude }
                })
                .collect();
            TensorValue::Values(ArrayD::from_shape_vec(shape, data).map_err(shaped)?)
        }
        Some(max) if max <= 0 => return Err(Error::input("the range of random indices must be positive")),
        Some(max) => {
            let data = (0..len).map(|_| rng.random_range(0..max)).collect();
            TensorValue::Indices(ArrayD::from_shape_vec(shape, data).map_err(shaped)?)
        }
    })
}

/// Writes `result` to a `.npy` file in `dtype` (f64 for index dtypes).
pub fn write_npy(path: &Path, result: &ArrayD<f64>, dtype: ElemType) -> Result<()> {
    use spindle_formats::io::write_npy_values;
    let data: Vec<f64> = result.iter().copied().collect();
    let shape = result.shape();
    match dtype {
        ElemType::Value(DType::F32) => {
            write_npy_values(path, shape, &data.iter().map(|&x| x as f32).collect::<Vec<_>>())
        }
        ElemType::Value(DType::F16) => {
            write_npy_values(path, shape, &data.iter().map(|&x| half::f16::from_f64(x)).collect::<Vec<_>>())
        }
        ElemType::Value(DType::Bf16) => {
            write_npy_values(path, shape, &data.iter().map(|&x| half::bf16::from_f64(x)).collect::<Vec<_>>())
        }
        _ => write_npy_values(path, shape, &data),
    }?;
    Ok(())
}
