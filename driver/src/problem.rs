//! A statement with its data and formats, checked and rewritten: what every
//! backend compiles.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ndarray::ArrayD;
use spindle_formats::{Coo, FormatSpec, IType, LevelFormat, SparseTensor};
use spindle_ir::kernel::lower::SkipMask;
use spindle_ir::kernel::schedule::{Path, Schedule};
use spindle_ir::kernel::{Kernel, OutputInit, Strategy};
use spindle_ir::lang::{
    Declaration, Declarations, Diagnostic, Einsum, ElemType, Role, Span, Statement, TensorInfo, WhereClause,
    check, declare_output, operand_mistake, output_shape_unknown, parse,
};
use spindle_ir::rewrite::Rewritten;
use spindle_ir::tensor::{TensorValue, Tensors};

use crate::advice::non_finite_factor;
use crate::error::{Error, Result};
use crate::input::{Input, InputData, Loaded, kernel_dtype, load, round_inputs};

/// A statement and its data, before checking: the builder every front end
/// fills.
///
/// ```
/// use spindle::{Input, Problem};
/// use spindle_formats::DType;
///
/// let prepared = Problem::new("y[i] = A[i,j] * x[j]")
///     .tensor("A", Input::random(&[6, 4], DType::F32, 1))
///     .tensor("x", Input::random(&[4], DType::F32, 2))
///     .prepare()?;
/// assert_eq!(prepared.einsum.output().shape, [6]);
/// # Ok::<(), spindle::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Problem {
    statement: String,
    pub(crate) inputs: Vec<(String, Input)>,
    pub(crate) formats: Vec<(String, String)>,
    /// Shapes declared for tensors with data ([`Problem::declare`]).
    declared: Vec<(String, Vec<usize>)>,
    /// Dtypes given from outside the statement ([`Problem::dtype`]): a
    /// `where` in the statement that gives another is refused.
    pub(crate) said: Vec<(String, ElemType)>,
}

impl Problem {
    pub fn new(statement: impl Into<String>) -> Problem {
        Problem {
            statement: statement.into(),
            inputs: Vec::new(),
            formats: Vec::new(),
            declared: Vec::new(),
            said: Vec::new(),
        }
    }

    /// Data (or a shape) for a tensor of the statement; a later call for
    /// the same name replaces it.
    pub fn tensor(mut self, name: impl Into<String>, input: impl Into<Input>) -> Problem {
        let name = name.into();
        self.inputs.retain(|(n, _)| *n != name);
        self.inputs.push((name, input.into()));
        self
    }

    /// A tensor read from a file when the problem is prepared.
    pub fn file(self, name: impl Into<String>, path: impl Into<PathBuf>) -> Problem {
        self.tensor(name, Input::file(path))
    }

    /// Stores a tensor in a format (`csr`, `groupcoo:dim=0,g=auto`, ...); the
    /// statement is rewritten over the format's arrays.
    pub fn format(mut self, name: impl Into<String>, spec: impl Into<String>) -> Problem {
        let name = name.into();
        self.formats.retain(|(n, _)| *n != name);
        self.formats.push((name, spec.into()));
        self
    }

    /// The dtype a tensor has in the kernel, whatever its data's own (the
    /// `where A: f16` of the statement, from outside it; a `where` giving
    /// the tensor another dtype is refused when the problem is checked).
    pub fn dtype(mut self, name: impl AsRef<str>, dtype: ElemType) -> Problem {
        let name = name.as_ref();
        if let Some((_, input)) = self.inputs.iter_mut().find(|(n, _)| n == name) {
            input.dtype = Some(dtype);
        }
        self.said.retain(|(n, _)| n != name);
        self.said.push((name.to_string(), dtype));
        self
    }

    /// Refuses a `where A: DTYPE` in `statement` that contradicts the dtype
    /// [`Problem::dtype`] gave `A`: neither could win without the user
    /// losing what they wrote.
    pub(crate) fn check_wheres(&self, statement: &Statement, src: &str) -> Result<()> {
        for clause in &statement.wheres {
            let WhereClause::Dtype { tensor, dtype, .. } = clause else { continue };
            let Some((_, given)) = self.said.iter().find(|(n, _)| *n == tensor.name) else { continue };
            if given != dtype {
                let diagnostic = Diagnostic::new(
                    format!(
                        "`where` gives `{}` the dtype {}, but it is given {} outside the statement",
                        tensor.name,
                        dtype.name(),
                        given.name()
                    ),
                    tensor.span,
                )
                .with_label(format!("{} here", dtype.name()))
                .with_note("give each tensor one dtype: drop one of the two");
                return Err(Error::statement(diagnostic, src));
            }
        }
        Ok(())
    }

    /// The shape of a tensor given data elsewhere (the command line's
    /// `--shape A=DIMS` beside `--tensor A=...`; its dtype, where given, is
    /// [`Problem::dtype`]): the shape must be the data's, which loading
    /// checks (a contradiction is refused, not ignored).
    pub fn declare(mut self, name: impl AsRef<str>, shape: &[usize]) -> Problem {
        let name = name.as_ref();
        self.declared.retain(|(n, _)| n != name);
        self.declared.push((name.to_string(), shape.to_vec()));
        self
    }

    pub fn statement(&self) -> &str {
        &self.statement
    }

    /// The statement checked against the data's shapes and dtypes (the
    /// output's shape worked out from the right-hand side when not given),
    /// before any format rewrite: what `spindle check` describes.
    pub fn check(&self) -> Result<Einsum> {
        Ok(self.load()?.original)
    }

    /// Checks that each format names a tensor of the statement and can
    /// store it (its order, its modes, its data): what `spindle eval`
    /// checks, which takes no format that a run would refuse for the
    /// tensor alone.
    pub fn check_formats(&self) -> Result<()> {
        if self.is_program() {
            return self.check_program_formats(&self.program_data()?);
        }
        check_loaded_formats(&self.load()?)
    }

    /// The reference evaluator's output, from one read of the data: what
    /// `spindle eval` prints. A format that cannot store its tensor is
    /// refused ([`Problem::check_formats`]). Stored operands are walked by
    /// their entries, as `--check`'s reference walks them (a 23133 x 23133
    /// matrix in CSR has no dense copy); where the formats take no rewrite,
    /// the tensors are evaluated dense.
    pub fn evaluate(&self) -> Result<Evaluation> {
        if self.is_program() {
            return self.evaluate_program();
        }
        let checked = self.load()?;
        check_loaded_formats(&checked)?;
        let statement = checked.original.clone();
        if !checked.formats.is_empty() {
            if let Ok(prepared) = self.prepare_loaded(checked) {
                let rewritten = prepared.rewritten.then(|| prepared.text.clone());
                let result = prepared.reference()?;
                return Ok(Evaluation { statement, rewritten, result, statements: 1 });
            }
            // A format the rewrite cannot take evaluates densely. Loading
            // again (the data are seeded, so the same) spares every other
            // evaluation a copy of its data.
            let src = self.statement.as_str();
            let prepared = Prepared::rewrite(
                &statement,
                src,
                self.load()?.dense_copy()?,
                &BTreeMap::new(),
                &BTreeMap::new(),
            )?;
            return Ok(Evaluation {
                statement,
                rewritten: None,
                result: prepared.reference()?,
                statements: 1,
            });
        }
        let result = self.prepare_loaded(checked)?.reference()?;
        Ok(Evaluation { statement, rewritten: None, result, statements: 1 })
    }

    /// Loads the data, checks the statement, and rewrites it over the
    /// format arrays when formats were given.
    pub fn prepare(&self) -> Result<Prepared> {
        self.prepare_loaded(self.load()?)
    }

    fn prepare_loaded(&self, checked: Checked) -> Result<Prepared> {
        let Checked { original, data, mut sparse, mut formats } = checked;
        let src = self.statement.as_str();
        let output = &original.output().name;
        // An output given no data in dense levels, in its own order, is a
        // dense output: what the kernel writes without a format (it was
        // refused with "drop the format").
        if !data.contains_key(output)
            && let Some(spec) = formats.get(output)
            && spec.levels(&original.output().shape).is_ok_and(|levels| {
                levels
                    .iter()
                    .enumerate()
                    .all(|(l, level)| level.format == LevelFormat::Dense && level.dim == l)
            })
        {
            formats.remove(output);
        }
        if formats.is_empty() {
            return Prepared::rewrite(&original, src, data, &sparse, &formats);
        }
        if let Some(name) = formats.keys().find(|name| !original.tensors.contains_key(*name)) {
            return Err(format_of_no_tensor(&original, name));
        }
        for name in formats.keys() {
            if name == output && !data.contains_key(name) {
                // An output with a format and no data is assembled by the
                // kernel (the level path), from nothing.
                continue;
            }
            if !sparse.contains_key(name) {
                let Some(TensorValue::Values(dense)) = data.get(name) else {
                    return Err(Error::input(format!("format of {name}: `{name}` needs value data")));
                };
                sparse.insert(name.clone(), Coo::from_ndarray(dense)?);
            }
        }
        Prepared::rewrite(&original, src, data, &sparse, &formats)
    }

    /// Reads the data and checks the statement against it.
    /// `d` with a note for each tensor it points at whose file says more
    /// than its declaration: a `.tns` file without a header has its largest
    /// indices as its extents and its order from its first line, so a
    /// mismatch may be a missing header or value column, not the data; a `.npy` file of bools is read as f32 values.
    pub(crate) fn with_file_notes(&self, mut d: Diagnostic, statements: &[Statement]) -> Diagnostic {
        let pointed: Vec<Span> = std::iter::once(d.span).chain(d.secondary.iter().map(|s| s.0)).collect();
        for (name, input) in &self.inputs {
            let InputData::File(path) = &input.data else { continue };
            let at = |s: &Span| {
                statements
                    .iter()
                    .flat_map(Statement::all_accesses)
                    .any(|a| &a.tensor.name == name && a.span.start <= s.start && s.end <= a.span.end)
            };
            if !pointed.iter().any(at) {
                continue;
            }
            let extension = |e: &str| path.extension().is_some_and(|x| x.eq_ignore_ascii_case(e));
            if extension("tns")
                && let Ok(Some(order)) = spindle_formats::io::tns::headerless_order(path)
            {
                d.notes.push(format!(
                    "{} has no header, so each line is read as {} and a value, and `{name}`'s \
                     extents are its largest indices; a header (a line with the order, then one with the dims) \
                     sets them",
                    path.display(),
                    if order == 1 { "1 coordinate".to_string() } else { format!("{order} coordinates") }
                ));
            }
            if extension("npy")
                && input.dtype.is_none()
                && spindle_formats::io::npy_holds_bool(path).is_ok_and(|b| b)
            {
                d.notes.push(format!(
                    "{} holds bools, read as the values 0 and 1 (f32); indices are an integer array \
                     (np.int32 or np.int64)",
                    path.display()
                ));
            }
            // Integers are indices unless one does not fit in i64 (a
            // uint64 above 2^63 - 1): then they were read as values.
            if extension("npy")
                && input.dtype.is_none()
                && spindle_formats::io::npy_holds_integers(path).is_ok_and(|i| i)
                && spindle_formats::io::read_npy_index(path).is_err()
            {
                d.notes.push(format!(
                    "{} holds an unsigned integer above 2^63 - 1, which no index type holds, so it was read as \
                     values (f32)",
                    path.display()
                ));
            }
        }
        d
    }

    /// Data of `shape` for `name` agree with the shape given for it, if
    /// one was (`--shape`).
    pub(crate) fn check_declared_shape(&self, name: &str, shape: &[usize]) -> Result<()> {
        match self.declared.iter().find(|(n, _)| n == name) {
            Some((_, declared)) if declared != shape => Err(Error::input(format!(
                "tensor {name}: its data is {}, but its shape is given as {}",
                dims_text(shape),
                dims_text(declared)
            ))),
            _ => Ok(()),
        }
    }

    fn load(&self) -> Result<Checked> {
        let src = self.statement.as_str();
        let parsed = parse(src).map_err(|d| Error::statement(d, src))?;
        self.check_wheres(&parsed, src)?;
        let mut formats = BTreeMap::new();
        for (name, spec) in &self.formats {
            let spec =
                spec.parse::<FormatSpec>().map_err(|e| Error::input(format!("format of {name}: {e}")))?;
            formats.insert(name.clone(), spec);
        }
        let mut data = Tensors::new();
        let mut declarations = Declarations::new();
        let mut sparse: BTreeMap<String, Coo<f64, i64>> = BTreeMap::new();
        for (name, input) in &self.inputs {
            let loaded = load(input).map_err(|e| e.context(&format!("tensor {name}")))?;
            let dtype = kernel_dtype(input, &loaded);
            let shape = loaded.shape().to_vec();
            self.check_declared_shape(name, &shape)?;
            declarations.insert(name.clone(), Declaration { shape, dtype });
            match loaded {
                Loaded::Dense(value) => {
                    data.insert(name.clone(), value);
                }
                // A sparse tensor stays sparse when it gets a format: only
                // its entries are needed, never a dense copy.
                Loaded::Sparse(coo) if formats.contains_key(name) => {
                    sparse.insert(name.clone(), coo);
                }
                Loaded::Sparse(coo) => {
                    if !fits_dense(&coo.shape) {
                        return Err(dense_copy_refused(&parsed, src, name, &coo.shape));
                    }
                    let dense = coo.to_ndarray().map_err(|e| Error::input(format!("tensor {name}: {e}")))?;
                    data.insert(name.clone(), TensorValue::Values(dense));
                }
                Loaded::Shape(_) => {}
            }
        }
        if !declare_output(&parsed, &mut declarations) {
            if let Some(unknown) = operand_mistake(&parsed, &declarations) {
                return Err(Error::statement(unknown, src));
            }
            return Err(Error::OutputShape {
                name: parsed.lhs.tensor.name.clone(),
                diagnostic: Box::new(output_shape_unknown(&parsed).with_note("give it a shape")),
                text: src.to_string(),
            });
        }
        let original = check(&parsed, &declarations)
            .map_err(|d| Error::statement(self.with_file_notes(d, std::slice::from_ref(&parsed)), src))?;
        round_inputs([&original], &mut data, &mut sparse)?;
        Ok(Checked { original, data, sparse, formats })
    }
}

/// Each format of `checked` names a tensor of its statement and can store
/// it: the tensor's entries (dense data as its nonzeros, an output without
/// data as its shape) built into the format.
fn check_loaded_formats(checked: &Checked) -> Result<()> {
    let Checked { original, data, sparse, formats } = checked;
    for (name, spec) in formats {
        let Some(declared) = original.tensors.get(name) else {
            return Err(format_of_no_tensor(original, name));
        };
        let coo = match (sparse.get(name), data.get(name)) {
            (Some(coo), _) => coo.clone(),
            (None, Some(TensorValue::Values(dense))) => Coo::from_ndarray(dense)?,
            (None, Some(TensorValue::Indices(_))) => {
                return Err(Error::input(format!("format of {name}: `{name}` needs value data")));
            }
            // An output without data: its shape alone.
            (None, None) => Coo::empty(declared.shape.clone()),
        };
        stores(name, spec, &coo)?;
    }
    Ok(())
}

/// Whether `spec` can store `name`'s entries `coo`, as an error that says
/// why not.
pub(crate) fn stores(name: &str, spec: &FormatSpec, coo: &Coo<f64, i64>) -> Result<()> {
    SparseTensor::<f64, i64>::from_coo(coo, spec)
        .map(|_| ())
        .map_err(|e| Error::input(format!("format of {name} ({spec}): {e}")))
}

/// What [`Problem::evaluate`] gives: the statement evaluated (a program's
/// last), the statement the tile path would run where the formats rewrote
/// it, and the output's values.
#[derive(Clone, Debug)]
pub struct Evaluation {
    pub statement: Einsum,
    pub rewritten: Option<String>,
    pub result: ArrayD<f64>,
    /// How many statements were evaluated (a program's, after its split).
    pub statements: usize,
}

/// A format given for `name`, which `statement` does not have.
fn format_of_no_tensor(statement: &Einsum, name: &str) -> Error {
    let known: Vec<&str> = statement.tensors.keys().map(String::as_str).collect();
    Error::input(format!(
        "format of {name}: the statement has no tensor `{name}` (its tensors: {})",
        known.join(", ")
    ))
}

/// A sparse tensor read without a format is copied to a dense array; beyond
/// this many elements the copy is refused (a 10^5 x 10^5 matrix would take
/// 80 GB) and the user is asked for a format instead.
pub const MAX_DENSE_ELEMENTS: usize = 1 << 24;

/// Whether a tensor of `shape` has at most [`MAX_DENSE_ELEMENTS`] elements.
pub(crate) fn fits_dense(shape: &[usize]) -> bool {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_some_and(|n| n <= MAX_DENSE_ELEMENTS)
}

/// Why a sparse tensor without a format is not made dense, pointing at
/// where the statement reads it.
fn dense_copy_refused(parsed: &Statement, src: &str, name: &str, shape: &[usize]) -> Error {
    let span = parsed.rhs.accesses().iter().find(|a| a.tensor.name == name).map_or(parsed.span, |a| a.span);
    let diagnostic = Diagnostic::new(
        format!(
            "`{name}` is sparse ({}) and has no format; its dense copy would have more than {MAX_DENSE_ELEMENTS} elements",
            dims_text(shape)
        ),
        span,
    )
    .with_label("read without a format")
    .with_note(format!(
        "store it in a format so the kernel reads only its entries: {name} in {}, for one",
        match shape.len() {
            1 => "c",
            2 => "csr",
            _ => "csf",
        }
    ));
    Error::statement(diagnostic, src)
}

/// `34x34`: a shape as the command line writes it.
fn dims_text(shape: &[usize]) -> String {
    shape.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}

/// A problem's data read and its statement checked, before the rewrite.
#[derive(Clone)]
struct Checked {
    original: Einsum,
    data: Tensors,
    /// The entries of sparse tensors that get a format.
    sparse: BTreeMap<String, Coo<f64, i64>>,
    formats: BTreeMap<String, FormatSpec>,
}

impl Checked {
    /// The data with every stored operand dense, where each fits: the
    /// dense evaluation of a statement whose formats take no rewrite.
    fn dense_copy(&self) -> Result<Tensors> {
        let mut data = self.data.clone();
        for (name, coo) in &self.sparse {
            if !fits_dense(&coo.shape) {
                return Err(Error::input(format!(
                    "the reference evaluator would need `{name}` dense ({}, more than {MAX_DENSE_ELEMENTS} \
                     elements), since its formats take no rewrite",
                    dims_text(&coo.shape)
                )));
            }
            data.insert(name.clone(), TensorValue::Values(coo.to_ndarray()?));
        }
        Ok(data)
    }
}

/// The statement as written and its operands in their formats, for the
/// level path.
#[derive(Clone, Debug)]
pub struct Stored {
    pub original: Einsum,
    /// The text `original`'s spans point into.
    pub text: String,
    pub entries: BTreeMap<String, Coo<f64, i64>>,
    pub formats: BTreeMap<String, FormatSpec>,
}

/// A checked statement (rewritten over format arrays when formats were
/// given) with its data: the input of lowering and of the reference
/// evaluator.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub einsum: Einsum,
    /// The operands stored in formats, as given: what the level path
    /// (`path=levels`) iterates over. `None` without formats.
    pub stored: Option<Stored>,
    /// Why the tile path cannot take the statement (the rewrite refused its
    /// formats), when only the level path can: `einsum` is then the
    /// statement as written and `data` lacks the stored operands.
    pub tile_refusal: Option<String>,
    pub data: Tensors,
    /// The statement that runs, as text: diagnostics point into it.
    pub text: String,
    /// Whether `text` is a rewrite of the user's statement.
    pub rewritten: bool,
    /// The terms the tile path's kernels skip: the padding of the formats
    /// that pad, where a factor holds non-finite values (its masks are in
    /// `einsum` and `data`, though the statement does not read them).
    pub skip: Vec<SkipMask>,
}

impl Prepared {
    /// `original` (checked; `text` is what its spans point into) over the
    /// arrays of `formats`: the sparse tensors' entries in `sparse` are
    /// stored in their formats, and the statement is rewritten to read the
    /// format arrays, then checked again.
    pub fn rewrite(
        original: &Einsum,
        text: &str,
        mut data: Tensors,
        sparse: &BTreeMap<String, Coo<f64, i64>>,
        formats: &BTreeMap<String, FormatSpec>,
    ) -> Result<Prepared> {
        // What would fail in a kernel, refused before one is built (every
        // front end prepares through here; `check` only types).
        check_dense_output(original, formats)?;
        spindle_ir::lang::check_subscript_reach(original, &|x| largest_index(&data, x))
            .map_err(|d| Error::statement(d, text))?;
        spindle_ir::eval::check_index_data(original, &data).map_err(|d| Error::statement(d, text))?;
        spindle_ir::eval::check_index_ranges(original, &data).map_err(|d| Error::statement(d, text))?;
        if formats.is_empty() {
            return Ok(Prepared {
                einsum: original.clone(),
                stored: None,
                tile_refusal: None,
                data,
                text: text.to_string(),
                rewritten: false,
                skip: Vec::new(),
            });
        }
        let stored = Stored {
            original: original.clone(),
            text: text.to_string(),
            entries: sparse.clone(),
            formats: formats.clone(),
        };
        let rewritten = match spindle_ir::rewrite::rewrite(original, formats, sparse) {
            Ok(rewritten) => rewritten,
            Err(refusal) => {
                // What the rewrite cannot express (co-iteration, CSC,
                // DCSR, CSF, affine subscripts) the level path may still
                // take; for affine subscripts its reason is the one to give.
                let levels = Schedule { path: Path::Levels, ..Schedule::default() };
                if spindle_conv::reads_affine(original, formats) {
                    spindle_conv::lower(original, formats, sparse, &levels, "spindle")
                        .map_err(|d| Error::statement(d, text))?;
                } else if let Err(level) =
                    spindle_ir::level::lower(original, formats, sparse, &levels, "spindle")
                {
                    // Neither path takes it: the level path's reason (it
                    // takes more), and the rewrite's beside it.
                    let why = format!("the tile path's rewrite cannot either: {}", refusal.message);
                    return Err(Error::statement(level.with_note(why), text));
                }
                return Ok(Prepared {
                    einsum: original.clone(),
                    stored: Some(stored),
                    tile_refusal: Some(refusal.message),
                    data,
                    text: text.to_string(),
                    rewritten: false,
                    skip: Vec::new(),
                });
            }
        };
        // Diagnostics from here on point into the rewritten statement.
        let text = rewritten.statement.to_string();
        let reparsed = parse(&text).map_err(|d| Error::statement(d, &text))?;
        let mut einsum = check(&reparsed, &rewritten.all_declarations(original))
            .map_err(|d| Error::statement(d, &text))?;
        // Padding multiplies its zero by the other factors: where one holds
        // inf or NaN, the kernel skips the padding by a mask of it (a test
        // per slot, which kernels over finite data need not pay).
        let mut skip = Vec::new();
        if non_finite_factor(original, &data, formats).is_some() {
            for padded in &rewritten.padded {
                let live = padded.live(&rewritten.tensors);
                let shape = live.shape().to_vec();
                einsum.tensors.insert(
                    padded.mask.clone(),
                    TensorInfo {
                        name: padded.mask.clone(),
                        shape,
                        dtype: ElemType::Index(IType::I32),
                        role: Role::Index,
                    },
                );
                data.insert(padded.mask.clone(), live);
                skip.push(SkipMask { tensor: padded.mask.clone(), at: padded.at.clone() });
            }
        }
        for name in &rewritten.replaced {
            data.remove(name);
        }
        data.extend(rewritten.tensors);
        Ok(Prepared { einsum, stored: Some(stored), tile_refusal: None, data, text, rewritten: true, skip })
    }

    /// The output by the reference evaluator (f64, no cleverness): the
    /// oracle every kernel is checked against.
    pub fn reference(&self) -> Result<ArrayD<f64>> {
        let Some(stored) = &self.stored else {
            return spindle_ir::eval::evaluate(&self.einsum, &self.data)
                .map_err(|d| Error::statement(d, &self.text));
        };
        // Over the stored operands' entries, not the arrays of the format
        // the kernel reads: a check that walked GroupCOO's or ELL's
        // padding as the kernel does agreed with it where the padding's
        // zero times an infinite factor made NaN. An operand read at
        // several subscripts is read as a copy per further read, as the
        // kernel does, so that one read is walked by its entries and the
        // others read dense (`A[i,j] * A[j,k] * x[k]` was walked dense,
        // refused past 2^32 points: on cora, 2e10).
        let aliased = spindle_ir::level::alias_rereads(&stored.original, &stored.formats, &stored.entries)
            .map(|(original, formats, entries, _)| Stored {
                original,
                text: stored.text.clone(),
                entries,
                formats,
            });
        let stored = aliased.as_ref().unwrap_or(stored);
        if let Some(over_entries) = self.reference_over_entries(stored) {
            return over_entries;
        }
        if self.tile_refusal.is_none() {
            return spindle_ir::eval::evaluate(&self.einsum, &self.data)
                .map_err(|d| Error::statement(d, &self.text));
        }
        // No rewrite to evaluate over arrays: the stored operands are
        // evaluated dense, where that fits.
        let mut data = self.data.clone();
        for (name, coo) in &stored.entries {
            if !fits_dense(&coo.shape) {
                return Err(Error::input(format!(
                    "the reference evaluator would need `{name}` dense (more than {MAX_DENSE_ELEMENTS} elements); \
                     check on a smaller problem"
                )));
            }
            data.insert(name.clone(), TensorValue::Values(coo.to_ndarray()?));
        }
        spindle_ir::eval::evaluate(&self.einsum, &data).map_err(|d| Error::statement(d, &self.text))
    }

    /// The statement over its stored inputs' entries in COO, which the
    /// evaluator walks entry by entry, as it does any rewrite's arrays;
    /// the formats only order the same entries. A sparse output is
    /// evaluated dense (the check compares it so). Where the COO rewrite
    /// does not take every stored input at once (two that share an index,
    /// an outer-product SpGEMM's), one of them walked by its entries and
    /// the others read dense, the one that walks the fewest points (the
    /// dense walk of 4000^3 points was refused). `None` where none of that
    /// applies (output data in a format, affine subscripts): the dense
    /// walk then.
    fn reference_over_entries(&self, stored: &Stored) -> Option<Result<ArrayD<f64>>> {
        let output = &stored.original.output().name;
        if stored.entries.contains_key(output) {
            return None;
        }
        // An operand whose levels are all dense (`dd:modes=1-0`) holds every
        // element: read dense, not walked entry by entry beside another
        // operand's entries (SDDMM's reference walked B's entries times
        // D's, 20 s on cora against 0.2).
        let all_dense = |name: &String| {
            let shape = &stored.entries[name].shape;
            stored.formats[name].levels(shape).is_ok_and(|l| l.iter().all(|l| l.format == LevelFormat::Dense))
        };
        let walked: Vec<&String> = stored.entries.keys().filter(|n| *n != output && !all_dense(n)).collect();
        // Walking one operand, the others are read dense: only where they
        // fit (an operand in dense levels holds every element already).
        let fits = |name: &String| all_dense(name) || fits_dense(&stored.entries[name].shape);
        let all = self.over_entries(stored, &walked);
        let one_each = || {
            walked
                .iter()
                .filter(|one| walked.iter().all(|n| n == *one || fits(n)))
                .filter_map(|name| self.over_entries(stored, &[*name]))
                .min_by_key(|(einsum, _, _)| {
                    einsum.indices.iter().map(|i| i.extent as u128).product::<u128>()
                })
        };
        let (einsum, text, rewritten) = all.or_else(one_each)?;
        Some(self.data_beside(stored, rewritten).and_then(|data| {
            spindle_ir::eval::evaluate(&einsum, &data).map_err(|d| Error::statement(d, &text))
        }))
    }

    /// The reference evaluator's data for a statement `rewritten` over
    /// some stored operands' entries: the problem's data, the stored
    /// operands it did not replace read dense, and its arrays in place of
    /// those it did.
    fn data_beside(&self, stored: &Stored, rewritten: Rewritten) -> Result<Tensors> {
        let mut data = self.data.clone();
        for (name, coo) in stored.entries.iter().filter(|(n, _)| !rewritten.replaced.contains(n)) {
            data.insert(name.clone(), TensorValue::Values(coo.to_ndarray()?));
        }
        for name in &rewritten.replaced {
            data.remove(name);
        }
        data.extend(rewritten.tensors);
        Ok(data)
    }

    /// The reference's entries of a sparse output that a stored operand
    /// masks: a product with a factor `M` read at the output's indices
    /// (SDDMM's `S[i,j] = A[i,j] * ...`) is zero off M's entries, so the
    /// statement is evaluated at those alone, one output entry a point
    /// (`S[p] = A_val[p] * U[A_crd0[p],k] * ...`): the check of an output
    /// too big to compare dense (535M elements on ca-CondMat). `None` where
    /// no operand masks the output, or another stored operand does not fit
    /// dense.
    pub fn reference_entries(&self) -> Option<Result<Coo<f64, i64>>> {
        use spindle_ir::lang::{AssignOp, Atom, Expr};
        let stored = self.stored.as_ref()?;
        let statement = &stored.original.statement;
        let lhs = &statement.lhs;
        let output = &lhs.tensor.name;
        fn product(e: &Expr) -> bool {
            match e {
                Expr::Binary { op: spindle_ir::lang::BinOp::Mul, lhs, rhs, .. } => {
                    product(lhs) && product(rhs)
                }
                Expr::Neg { expr, .. } => product(expr),
                Expr::Access(_) | Expr::Literal { .. } => true,
                _ => false,
            }
        }
        let summed = matches!(statement.op, AssignOp::Assign | AssignOp::AddAssign);
        if !summed
            || self.output_has_data()
            || stored.entries.contains_key(output)
            || !product(&statement.rhs)
        {
            return None;
        }
        let plain = |a: &spindle_ir::lang::Access| -> Option<Vec<String>> {
            a.subscripts.iter().map(|x| x.as_index().map(|i| i.name.clone())).collect()
        };
        let mut out_indices = plain(lhs)?;
        out_indices.sort();
        let accesses = statement.rhs.accesses();
        let mask = accesses.iter().find(|a| {
            let name = &a.tensor.name;
            stored.entries.contains_key(name)
                && accesses.iter().filter(|b| b.tensor.name == *name).count() == 1
                && plain(a).is_some_and(|mut ix| {
                    ix.sort();
                    ix == out_indices
                })
        })?;
        let (_, _, rewritten) = self.over_entries(stored, &[&mask.tensor.name])?;
        // Each output subscript is now a coordinate array read at the
        // entry's position `X[p]`: the output is written at `[p]`.
        let mut at: Option<spindle_ir::lang::Subscript> = None;
        let mut coordinates = Vec::new();
        for x in &rewritten.statement.lhs.subscripts {
            let [term] = &x.terms[..] else { return None };
            let Atom::Indirect(read) = &term.atom else { return None };
            let ([position], 1, 0) = (&read.subscripts[..], term.coeff, x.offset) else { return None };
            let name = |x: &spindle_ir::lang::Subscript| x.as_index().map(|i| i.name.clone());
            if name(position).is_none() || at.as_ref().is_some_and(|a| name(a) != name(position)) {
                return None;
            }
            at = Some(position.clone());
            let Some(TensorValue::Indices(crd)) = rewritten.tensors.get(&read.tensor.name) else {
                return None;
            };
            coordinates.push(crd.iter().copied().collect::<Vec<i64>>());
        }
        let entries = coordinates.first()?.len();
        let mut rewrite = rewritten.statement.clone();
        rewrite.lhs.subscripts = vec![at?];
        let mut declarations = rewritten.all_declarations(&stored.original);
        declarations.get_mut(output)?.shape = vec![entries];
        let text = rewrite.to_string();
        let einsum = check(&parse(&text).ok()?, &declarations).ok()?;
        let read_dense = stored.entries.iter().filter(|(n, _)| !rewritten.replaced.contains(n));
        if read_dense.map(|(_, coo)| &coo.shape).any(|shape| !fits_dense(shape)) {
            return None;
        }
        let shape = stored.original.output().shape.clone();
        Some(self.data_beside(stored, rewritten).and_then(|mut data| {
            data.remove(output);
            let values =
                spindle_ir::eval::evaluate(&einsum, &data).map_err(|d| Error::statement(d, &text))?;
            Ok(Coo::new(shape, coordinates, values.iter().copied().collect())?)
        }))
    }

    /// The statement with `names` rewritten over their entries in COO:
    /// checked, as text, and the rewrite; `None` where the rewrite does not
    /// take them.
    fn over_entries(&self, stored: &Stored, names: &[&String]) -> Option<(Einsum, String, Rewritten)> {
        if names.is_empty() {
            return None;
        }
        let formats: BTreeMap<String, FormatSpec> =
            names.iter().map(|n| ((*n).clone(), FormatSpec::Coo)).collect();
        let rewritten = spindle_ir::rewrite::rewrite(&stored.original, &formats, &stored.entries).ok()?;
        let text = rewritten.statement.to_string();
        let einsum = check(&parse(&text).ok()?, &rewritten.all_declarations(&stored.original)).ok()?;
        Some((einsum, text, rewritten))
    }

    /// The kernel IR of the statement under `schedule`.
    /// An index the schedule names (tiles, parallel, order) that the
    /// statement as written has and the rewrite over the formats' arrays
    /// replaced.
    fn scheduled_index_rewritten_away<'s>(&self, schedule: &'s Schedule) -> Option<&'s str> {
        let stored = self.stored.as_ref().filter(|_| self.rewritten)?;
        let named = schedule.tiles.keys().chain(schedule.parallel.iter().flatten()).chain(&schedule.order);
        named
            .filter(|i| self.einsum.index(i).is_none() && stored.original.index(i).is_some())
            .map(String::as_str)
            .next()
    }

    pub fn lower(&self, schedule: &Schedule) -> Result<Kernel> {
        if let Some(refusal) = &self.tile_refusal {
            return Err(Error::input(format!(
                "the tile path cannot take this statement ({refusal}); use path=levels"
            )));
        }
        let mut kernel =
            spindle_ir::kernel::lower::lower_skipping(&self.einsum, schedule, "spindle", &self.skip).map_err(|d| {
                // The tile path reduces over the rewritten statement's indices;
                // the level path's rows split as `reduce=parallel` says.
                let d = match (&self.stored, schedule.strategy) {
                (Some(stored), Strategy::Parallel(lanes)) if self.rewritten => d.with_note(format!(
                    "the tile path runs the statement rewritten over the formats' arrays, `{}`, whose entries \
                     of a row meet through the scattered subscript (reduce=segment(R) groups them); on the level \
                     path (path=levels) reduce={} splits each row of `{}` over {} lanes of a GPU warp, where the \
                     summed index runs innermost",
                    self.text,
                    schedule.strategy,
                    stored.formats.keys().map(String::as_str).collect::<Vec<_>>().join("`, `"),
                    lanes.unwrap_or(32)
                )),
                _ => d,
            };
                let d = match self.scheduled_index_rewritten_away(schedule) {
                    Some(index) => d.with_note(format!(
                        "`{index}` is an index of the statement as written; the tile path runs it rewritten over \
                         the formats' arrays, `{}`, while the level path (path=levels) loops over the statement's \
                         own indices",
                        self.text
                    )),
                    None => d,
                };
                Error::statement(d, &self.text)
            })?;
        // `+=` into an output given no data sums into zeros: as `=`, so a
        // kernel that writes each element once need not read it first.
        if kernel.init == OutputInit::Keep && !self.output_has_data() {
            kernel.init = OutputInit::Zero;
        }
        Ok(kernel)
    }

    /// The level path's loop tree of the statement as written, over its
    /// stored operands' levels (`path=levels`), with their arrays; stored
    /// operands read at affine subscripts are walked by subsection loops
    /// (`spindle_conv`).
    pub fn lower_levels(&self, schedule: &Schedule) -> Result<spindle_ir::level::Lowered> {
        let Some(stored) = &self.stored else {
            return Err(Error::input(
                "path=levels iterates over stored operands: give an operand a format (--format A=csr)",
            ));
        };
        let lower = match spindle_conv::reads_affine(&stored.original, &stored.formats) {
            true => spindle_conv::lower,
            false => spindle_ir::level::lower,
        };
        let mut lowered = lower(&stored.original, &stored.formats, &stored.entries, schedule, "spindle")
            .map_err(|d| Error::statement(d, &stored.text))?;
        // As on the tile path: `+=` into an output given no data sums into
        // zeros, so a kernel that stores each element once need not read it.
        if lowered.kernel.init == OutputInit::Keep && !self.output_has_data() {
            lowered.kernel.init = OutputInit::Zero;
        }
        Ok(lowered)
    }

    /// Whether the output has data that `+=` accumulates into.
    pub fn output_has_data(&self) -> bool {
        self.data.contains_key(&self.einsum.output().name)
    }

    /// The shapes and dtypes of every tensor, as text: part of what a tuned
    /// schedule is cached under.
    pub fn shapes(&self) -> String {
        self.einsum
            .tensors
            .values()
            .map(|t| {
                let dims: Vec<String> = t.shape.iter().map(usize::to_string).collect();
                format!("{}={}:{}", t.name, dims.join("x"), t.dtype.name())
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The largest magnitude among index tensor `name`'s values in `data` (0
/// without them).
pub(crate) fn largest_index(data: &Tensors, name: &str) -> i128 {
    match data.get(name) {
        Some(TensorValue::Indices(x)) => x.iter().map(|v| i128::from(*v).abs()).max().unwrap_or(0),
        _ => 0,
    }
}

/// Refuses a dense output beyond the limit on one array before anything
/// is compiled (a 10^10-element output aborted the process when its
/// buffer was allocated).
pub(crate) fn check_dense_output(einsum: &Einsum, formats: &BTreeMap<String, FormatSpec>) -> Result<()> {
    let out = einsum.output();
    if formats.contains_key(&out.name) {
        return Ok(());
    }
    let elements = out.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    spindle_formats::check_array::<f64>(
        &format!("dense output `{}` ({})", out.name, dims_text(&out.shape)),
        elements,
    )
    .map_err(|e| Error::input(format!("{e}; a sparse format keeps only its entries")))?;
    Ok(())
}
