//! A cell's data: its bindings made into tensors (files, generators,
//! random data, kernel maps), and each statement checked against them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use spindle_formats::{Coo, DType};
use spindle_ir::lang::{
    Declaration, Diagnostic, ElemType, Span, check, declare_output, operand_mistake, output_shape_unknown,
    parse,
};
use spindle_ir::tensor::TensorValue;

use crate::notebook::cell::{Binding, CellProgram, Cloud, Dim, Source, Spanned, SweepParam};

use super::*;

impl Run<'_> {
    pub(super) fn make_data(&mut self, program: &CellProgram) -> Step<Data> {
        let mut data = Data::default();
        for b in &program.bindings {
            self.bind(b, &mut data)?;
        }
        Ok(data)
    }

    pub(super) fn dims(&self, dims: &[Dim], data: &Data) -> Step<Vec<usize>> {
        dims.iter()
            .map(|d| match d {
                Dim::Fixed(n) => Ok(*n),
                Dim::Of { tensor, dim, span } => {
                    let shape = &data.declarations[tensor].shape;
                    shape.get(*dim).copied().ok_or_else(|| {
                        self.cell_error(
                            &Diagnostic::new(
                                format!("`{tensor}` has {}", crate::counted(shape.len(), "dimension")),
                                *span,
                            )
                            .with_label(format!("no dimension {dim}"))
                            .with_note("dimensions count from 0"),
                        )
                    })
                }
            })
            .collect()
    }

    /// A load naming a folder (or another thing that is not a file) is an
    /// error with its caret, whether or not the binding has a fallback.
    fn refuse_non_file(&self, path: &Spanned<String>) -> Step<()> {
        match not_a_file(&path.value, self.options.base_dir.as_deref()) {
            Some(found) => Err(self.cell_error(
                &Diagnostic::new(
                    format!(
                        "`{}` is not a file: {} is {}",
                        path.value,
                        found.display(),
                        if found.is_dir() { "a folder" } else { "not a regular file" }
                    ),
                    path.span,
                )
                .with_label("a data file is expected here")
                .with_note("load reads one .mtx, .tns or .npy file (or a .xyz point cloud for a kernel map)"),
            )),
            None => Ok(()),
        }
    }

    pub(super) fn bind(&mut self, b: &Binding, data: &mut Data) -> Step<()> {
        let name = b.name.value.clone();
        let fail = |run: &Self, msg: String, span: Span| {
            run.cell_error(&Diagnostic::new(msg, span).with_label("while making this tensor"))
        };
        let sparse = |data: &mut Data, coo: Coo<f64, i64>, dtype: Option<ElemType>| {
            let dtype = dtype.unwrap_or(ElemType::Value(DType::F32));
            data.declarations.insert(name.clone(), Declaration { shape: coo.shape.clone(), dtype });
            data.sparse.insert(name.clone(), coo);
        };
        match &b.source {
            Source::Load { path, dtype, fallback } => {
                match resolve(&path.value, self.options.base_dir.as_deref()) {
                    Some(file) => {
                        let loaded = spindle::input::read_file(&file).map_err(|e| {
                            fail(self, format!("reading {}: {e:#}", file.display()), path.span)
                        })?;
                        match loaded {
                            spindle::input::Loaded::Dense(value) => {
                                let mut decl = value.declaration();
                                if let Some(t) = dtype {
                                    decl.dtype = *t;
                                }
                                data.declarations.insert(name.clone(), decl);
                                data.dense.insert(name.clone(), value);
                            }
                            spindle::input::Loaded::Sparse(coo) => sparse(data, coo, *dtype),
                            spindle::input::Loaded::Shape(_) => unreachable!("files hold data"),
                        }
                    }
                    None => {
                        self.refuse_non_file(path)?;
                        let Some(spec) = fallback else {
                            return Err(self.cell_error(
                                &Diagnostic::new(format!("`{}` was not found", path.value), path.span)
                                    .with_label("no such file")
                                    .with_note(format!(
                                        "relative paths are looked up in the shared data folder ({}) and beside the notebook; \
                                         add `else gen:...` to stand in a generated tensor",
                                        shared_dir_text()
                                    )),
                            ));
                        };
                        let coo = spec
                            .value
                            .generate::<f64, i64>()
                            .map_err(|e| fail(self, e.to_string(), spec.span))?;
                        self.out.notes.push(format!(
                            "{} not found: {name} is the generated gen:{} instead",
                            path.value, spec.value
                        ));
                        sparse(data, coo, *dtype);
                    }
                }
            }
            Source::Gen { spec, dtype } => {
                let coo =
                    spec.value.generate::<f64, i64>().map_err(|e| fail(self, e.to_string(), spec.span))?;
                sparse(data, coo, *dtype);
            }
            Source::Rand { dims, dtype, seed, max } => {
                let shape = self.dims(dims, data)?;
                let max = match (dtype, max) {
                    (ElemType::Index(_), None) => {
                        return Err(fail(self, "index tensors need a range: max=M".to_string(), b.span));
                    }
                    (ElemType::Index(_), Some(m)) => Some(*m),
                    (ElemType::Value(_), _) => None,
                };
                let value = spindle::input::random(&shape, *seed, max)
                    .map_err(|e| fail(self, e.to_string(), b.span))?;
                data.declarations.insert(name.clone(), Declaration { shape: shape.clone(), dtype: *dtype });
                data.dense.insert(name.clone(), value);
            }
            Source::Shape { dims, dtype } => {
                let shape = self.dims(dims, data)?;
                data.declarations.insert(name.clone(), Declaration { shape, dtype: *dtype });
            }
            Source::KernelMap { cloud, voxel, kernel } => {
                let points = match cloud {
                    Cloud::File { path, fallback } => {
                        match resolve(&path.value, self.options.base_dir.as_deref()) {
                            Some(file) => spindle_formats::io::read_xyz(&file).map_err(|e| {
                                fail(self, format!("reading {}: {e}", file.display()), path.span)
                            })?,
                            None => {
                                self.refuse_non_file(path)?;
                                match fallback {
                                    Some((n, seed)) => {
                                        self.out.notes.push(format!(
                                    "{} not found: {name} is built from {n} random points (seed {seed}) instead",
                                    path.value
                                ));
                                        random_points(*n, *seed)
                                    }
                                    None => {
                                        return Err(self.cell_error(
                                    &Diagnostic::new(format!("`{}` was not found", path.value), path.span)
                                        .with_label("no such file")
                                        .with_note("add `else points=N` to build the map from random points instead"),
                                ));
                                    }
                                }
                            }
                        }
                    }
                    Cloud::Random { points, seed } => random_points(*points, *seed),
                };
                let voxels: Coo<f64, i64> = spindle_formats::generate::voxelize(&points, *voxel)
                    .map_err(|e| fail(self, e.to_string(), b.span))?;
                // Subsection iteration over the sorted grid finds the
                // neighbours; its time is what a map costs beside the
                // convolution that uses it.
                let started = std::time::Instant::now();
                let map = spindle_conv::kernel_map(&voxels, *kernel)
                    .map_err(|e| fail(self, e.to_string(), b.span))?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                self.out.notes.push(format!(
                    "{name}: {} points in {} voxels, kernel map {} with {} entries, found by subsection \
                     iteration in {ms:.3} ms",
                    points.len(),
                    voxels.nnz(),
                    shape_text(&map.shape),
                    map.nnz()
                ));
                sparse(data, map, None);
            }
            Source::ClebschGordan { lmax } => {
                let cg = spindle_formats::generate::cg_tensor::<f64, i64>(*lmax)
                    .map_err(|e| fail(self, e.to_string(), b.span))?;
                sparse(data, cg, None);
            }
        }
        // The values as the kernel holds them, so that the reference
        // computes from what a 16-bit kernel reads (as the driver's data).
        let Some(Declaration { dtype: ElemType::Value(dtype), .. }) = data.declarations.get(&name) else {
            return Ok(());
        };
        let dtype = *dtype;
        let values: Box<dyn Iterator<Item = &mut f64>> =
            match (data.dense.get_mut(&name), data.sparse.get_mut(&name)) {
                (Some(TensorValue::Values(v)), _) => Box::new(v.iter_mut()),
                (_, Some(coo)) => Box::new(coo.val.iter_mut()),
                _ => return Ok(()),
            };
        for x in values {
            let stored = dtype.round(*x);
            if x.is_finite() && !stored.is_finite() {
                let why = format!(
                    "the value {x} does not fit in {} (it would be infinite in the kernel)",
                    dtype.name()
                );
                return Err(fail(self, why, b.span));
            }
            *x = stored;
        }
        Ok(())
    }

    /// Parses and checks a statement against the cell's data; makes dense
    /// copies of sparse tensors it reads without a format.
    pub(super) fn prepare(
        &mut self,
        program: &CellProgram,
        data: &mut Data,
        text: &str,
        at: usize,
    ) -> Step<Prepared> {
        let shifted = |d: Diagnostic| shift(d, at);
        let statement = parse(text).map_err(|d| self.cell_error(&shifted(d)))?;
        let mut declarations = data.declarations.clone();
        if !declare_output(&statement, &mut declarations) {
            // An operand never bound is the mistake, not the output's shape.
            if let Some(unknown) = operand_mistake(&statement, &declarations) {
                return Err(self.cell_error(&shifted(unknown)));
            }
            let name = &statement.lhs.tensor.name;
            return Err(self.cell_error(&shifted(
                output_shape_unknown(&statement)
                    .with_note(format!("declare it on a line above: {name} = shape 64x32")),
            )));
        }
        let original = check(&statement, &declarations).map_err(|d| self.cell_error(&shifted(d)))?;
        let swept_formats: BTreeSet<&str> = program
            .sweeps
            .iter()
            .filter_map(|s| match &s.param.value {
                SweepParam::Format(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        let formatted: BTreeSet<String> = original
            .tensors
            .keys()
            .filter(|t| {
                program.formats.iter().any(|f| &f.tensor.value == *t) || swept_formats.contains(t.as_str())
            })
            .cloned()
            .collect();
        // Sparse tensors read as they are need their dense form; dense
        // tensors with a format need their entries.
        for (name, info) in &original.tensors {
            if info.role == spindle_ir::lang::Role::Output {
                continue;
            }
            if formatted.contains(name) {
                if !data.sparse.contains_key(name)
                    && let Some(TensorValue::Values(dense)) = data.dense.get(name)
                {
                    let coo = Coo::from_ndarray(dense).map_err(|e| Stop::Error(e.to_string()))?;
                    data.sparse.insert(name.clone(), coo);
                }
            } else if !data.dense.contains_key(name)
                && let Some(coo) = data.sparse.get(name)
            {
                let elements: usize = coo.shape.iter().product();
                if elements > MAX_DENSE_ELEMENTS {
                    let span =
                        statement.rhs.accesses().iter().find(|a| &a.tensor.name == name).map(|a| a.span);
                    return Err(self.cell_error(&shifted(
                        Diagnostic::new(
                            format!(
                                "`{name}` is sparse ({}) and has no format; its dense copy would have {elements} elements",
                                shape_text(&coo.shape)
                            ),
                            span.unwrap_or(statement.span),
                        )
                        .with_label("read without a format")
                        .with_note(format!("give it one: format {name} = csr")),
                    )));
                }
                let dense = coo.to_ndarray().map_err(|e| Stop::Error(e.to_string()))?;
                data.dense.insert(name.clone(), TensorValue::Values(dense));
            }
        }
        let spmm = spmm_shape(&original, data, &formatted);
        Ok(Prepared { text: text.to_string(), at, original, formatted, spmm })
    }
}

/// Seeded points in [0,1)² × [0,0.5): a thin slab, so the kernel map has
/// the many-neighbour sites of a surface (as the corpus builds them).
pub(super) fn random_points(n: usize, seed: u64) -> Vec<[f64; 3]> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| [rng.random::<f64>(), rng.random::<f64>(), rng.random::<f64>() * 0.5]).collect()
}

/// A path as the cell names it: absolute; else in the shared data folder;
/// else beside the notebook; else from the working folder.
pub(super) fn resolve(path: &str, base: Option<&Path>) -> Option<PathBuf> {
    let p = Path::new(path);
    if p.is_absolute() {
        return p.is_file().then(|| p.to_path_buf());
    }
    if let Some(f) = spindle_formats::data::shared_file(path) {
        return Some(f);
    }
    if let Some(b) = base {
        let f = b.join(p);
        if f.is_file() {
            return Some(f);
        }
    }
    p.is_file().then(|| p.to_path_buf())
}

/// Where `path` names something that exists but is no file (a folder), as
/// `resolve` looks it up: an error of its own, not "not found".
fn not_a_file(path: &str, base: Option<&Path>) -> Option<PathBuf> {
    let p = Path::new(path);
    let beside = base.filter(|_| p.is_relative()).map(|b| b.join(p));
    beside.into_iter().chain([p.to_path_buf()]).find(|f| f.exists() && !f.is_file())
}

pub(super) fn shared_dir_text() -> String {
    match spindle_formats::data::shared_data_dir() {
        Some(d) => d.display().to_string(),
        None => "../shared/data or $SPINDLE_DATA, absent here".into(),
    }
}
