//! The Einsum corpus (`tests/corpus/*.toml`): loading the entries and
//! making their data, shared by the corpus and snapshot tests.
//!
//! [`entries`] reads every entry in file order; [`build`] makes an entry's
//! data (resolving `NAME.d` references as tensors appear), parses and
//! checks its statement, and rewrites it over its formats' arrays when it
//! has any, giving the Einsum as it runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn};
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::{Coo, DType, FormatSpec};
use spindle_ir::lang::{Declarations, Einsum, ElemType, check, declare_output, parse};
use spindle_ir::tensor::{TensorValue, Tensors};

/// One corpus file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub description: String,
    pub statement: String,
    /// Format specs of the sparse operands, by tensor name.
    #[serde(default)]
    pub formats: BTreeMap<String, String>,
    pub tensors: BTreeMap<String, Data>,
}

/// The parameters of a point-cloud kernel map.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelMap {
    pub points: usize,
    pub voxel: f64,
    pub kernel: usize,
    pub seed: u64,
}

/// How to make one tensor (see `corpus/README.md`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Data {
    pub rand: Option<String>,
    pub index: Option<String>,
    pub max: Option<i64>,
    #[serde(rename = "gen")]
    pub generator: Option<String>,
    pub file: Option<String>,
    pub fallback: Option<String>,
    pub sparse3: Option<String>,
    pub nnz: Option<usize>,
    pub kernel_map: Option<KernelMap>,
    pub clebsch_gordan: Option<u32>,
    pub shape: Option<String>,
    #[serde(default)]
    pub seed: u64,
}

/// The folder of the corpus files.
/// `$SPINDLE_CORPUS_DIR` when set (a GPU machine runs the corpus from a
/// copied folder), else `tests/corpus` in the source tree.
pub fn corpus_dir() -> PathBuf {
    match std::env::var_os("SPINDLE_CORPUS_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"),
    }
}

/// Every corpus entry, named by its file stem, in file-name order.
pub fn entries() -> Vec<(String, Entry)> {
    entries_in(&corpus_dir())
}

/// The level path's corpus (`tests/corpus-levels/*.toml`): statements the
/// tile rewrite does not take (co-iteration, sparse outputs, CSF), run as
/// written over their operands' levels.
pub fn level_entries() -> Vec<(String, Entry)> {
    entries_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus-levels"))
}

fn entries_in(dir: &Path) -> Vec<(String, Entry)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            let entry: Entry = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, entry)
        })
        .collect()
}

/// Dimensions like `64x32`, where `NAME.d` is dimension d of a tensor
/// already made. `None` while a referenced tensor is missing.
fn dims(text: &str, made: &Tensors) -> Option<Vec<usize>> {
    text.split('x')
        .map(|d| match d.trim().split_once('.') {
            Some((name, dim)) => made.get(name).map(|t| t.shape()[dim.parse::<usize>().unwrap()]),
            None => Some(d.trim().parse().unwrap()),
        })
        .collect()
}

/// Values in ±[0.1, 1), never zero, from a seed.
pub fn random_values(shape: Vec<usize>, seed: u64) -> ArrayD<f64> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n = shape.iter().product();
    let data = (0..n)
        .map(|_| {
            let x: f64 = rng.random_range(0.1..1.0);
            if rng.random::<bool>() { x } else { -x }
        })
        .collect();
    ArrayD::from_shape_vec(IxDyn(&shape), data).unwrap()
}

/// Makes one tensor: its dense data, and its entries when it is sparse.
fn make(data: &Data, made: &Tensors) -> Option<(TensorValue, Option<Coo<f64, i64>>)> {
    let sparse = |coo: Coo<f64, i64>| Some((TensorValue::Values(coo.to_ndarray().unwrap()), Some(coo)));
    if let Some(d) = &data.rand {
        return Some((TensorValue::Values(random_values(dims(d, made)?, data.seed)), None));
    }
    if let Some(d) = &data.index {
        let shape = dims(d, made)?;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(data.seed);
        let max = data.max.expect("index tensors need `max`");
        let values = (0..shape.iter().product()).map(|_| rng.random_range(0..max)).collect();
        return Some((TensorValue::Indices(ArrayD::from_shape_vec(IxDyn(&shape), values).unwrap()), None));
    }
    if let Some(spec) = &data.generator {
        return sparse(spec.parse::<GeneratorSpec>().unwrap().generate().unwrap());
    }
    if let Some(file) = &data.file {
        return match spindle_formats::data::shared_file(file) {
            Some(path) => sparse(spindle_formats::io::read_tensor(&path).unwrap()),
            None => {
                eprintln!("(shared data absent: {file} replaced by its fallback generator)");
                let spec = data.fallback.as_ref().expect("a `file` needs a `fallback`");
                sparse(spec.parse::<GeneratorSpec>().unwrap().generate().unwrap())
            }
        };
    }
    if let Some(d) = &data.sparse3 {
        let shape = dims(d, made)?;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(data.seed);
        let n = data.nnz.expect("sparse3 needs nnz");
        let crd: Vec<Vec<i64>> =
            shape.iter().map(|&e| (0..n).map(|_| rng.random_range(0..e as i64)).collect()).collect();
        let val = random_values(vec![n], data.seed + 1).into_raw_vec_and_offset().0;
        return sparse(Coo::new(shape, crd, val).unwrap().canonicalize());
    }
    if let Some(k) = &data.kernel_map {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(k.seed);
        let points: Vec<[f64; 3]> = (0..k.points)
            .map(|_| [rng.random::<f64>(), rng.random::<f64>(), rng.random::<f64>() * 0.5])
            .collect();
        let voxels: Coo<f64, i64> = spindle_formats::generate::voxelize(&points, k.voxel).unwrap();
        return sparse(spindle_formats::generate::kernel_map(&voxels, k.kernel).unwrap());
    }
    if let Some(lmax) = data.clebsch_gordan {
        return sparse(spindle_formats::generate::cg_tensor(lmax).unwrap());
    }
    panic!("no data for {data:?}")
}

/// An entry made ready to run.
#[derive(Debug, Clone)]
pub struct Built {
    /// The checked Einsum as it runs: rewritten over the formats' arrays
    /// when the entry has formats, else the original.
    pub einsum: Einsum,
    /// The data `einsum` reads: the formats' arrays in place of the
    /// tensors they replace.
    pub data: Tensors,
    /// The checked statement as written.
    pub original: Einsum,
    /// The dense data of every tensor the original statement reads.
    pub original_data: Tensors,
    /// The text of the rewritten statement, when there is one.
    pub rewritten: Option<String>,
    /// The output's shape.
    pub out_shape: Vec<usize>,
}

/// A level-path entry made ready to lower: the statement as written, the
/// dense data of every operand (for the reference evaluator), the entries
/// of the sparse ones and the formats (the output's among them when it is
/// assembled).
#[derive(Debug, Clone)]
pub struct LevelBuilt {
    pub original: Einsum,
    pub data: Tensors,
    pub sparse: BTreeMap<String, Coo<f64, i64>>,
    pub formats: BTreeMap<String, FormatSpec>,
}

/// Makes a level entry's data and checks its statement.
pub fn build_levels(name: &str, entry: &Entry) -> LevelBuilt {
    let (original, data, sparse, _) = make_checked(name, entry);
    let formats = entry.formats.iter().map(|(n, s)| (n.clone(), s.parse().unwrap())).collect();
    LevelBuilt { original, data, sparse, formats }
}

/// Makes an entry's data, checks its statement and, when it has formats,
/// rewrites it over their arrays. Panics with the entry's name on any
/// failure: a corpus entry must build.
pub fn build(name: &str, entry: &Entry) -> Built {
    let (original, data, sparse, out_shape) = make_checked(name, entry);
    if entry.formats.is_empty() {
        return Built {
            einsum: original.clone(),
            data: data.clone(),
            original,
            original_data: data,
            rewritten: None,
            out_shape,
        };
    }
    let formats: BTreeMap<String, FormatSpec> =
        entry.formats.iter().map(|(n, s)| (n.clone(), s.parse().unwrap())).collect();
    let rewritten =
        spindle_ir::rewrite::rewrite(&original, &formats, &sparse).unwrap_or_else(|d| panic!("{name}: {d}"));
    let mut run_data = data.clone();
    for gone in &rewritten.replaced {
        run_data.remove(gone);
    }
    run_data.extend(rewritten.tensors.clone());
    eprintln!("  rewritten: {}", rewritten.statement);
    let text = rewritten.statement.to_string();
    let einsum = rewritten.check(&original).unwrap_or_else(|d| panic!("{name}: {}", d.render(&text, false)));
    Built { einsum, data: run_data, original, original_data: data, rewritten: Some(text), out_shape }
}

/// The checked statement, the dense data, the sparse operands' entries and
/// the output's shape of an entry.
type Checked = (Einsum, Tensors, BTreeMap<String, Coo<f64, i64>>, Vec<usize>);

fn make_checked(name: &str, entry: &Entry) -> Checked {
    // Make the data, resolving `NAME.d` references as tensors appear.
    let mut data = Tensors::new();
    let mut sparse: BTreeMap<String, Coo<f64, i64>> = BTreeMap::new();
    let mut shapes: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    while data.len() + shapes.len() < entry.tensors.len() {
        let before = data.len() + shapes.len();
        for (tensor, spec) in &entry.tensors {
            if data.contains_key(tensor) || shapes.contains_key(tensor) {
                continue;
            }
            if let Some(s) = &spec.shape {
                shapes.insert(tensor.clone(), dims(s, &data).unwrap());
            } else if let Some((value, coo)) = make(spec, &data) {
                data.insert(tensor.clone(), value);
                if let Some(coo) = coo {
                    sparse.insert(tensor.clone(), coo);
                }
            }
        }
        assert!(data.len() + shapes.len() > before, "{name}: unresolved tensor references");
    }
    let mut declarations: Declarations = data.iter().map(|(n, v)| (n.clone(), v.declaration())).collect();
    for (n, s) in &shapes {
        declarations.insert(
            n.clone(),
            spindle_ir::lang::Declaration { shape: s.clone(), dtype: ElemType::parse("f32").unwrap() },
        );
    }
    let statement =
        parse(&entry.statement).unwrap_or_else(|d| panic!("{name}: {}", d.render(&entry.statement, false)));
    // The output's shape: declared, or the extents of its plain indices.
    assert!(declare_output(&statement, &mut declarations), "{name}: give the output a `shape`");
    let out_name = statement.lhs.tensor.name.clone();
    let original = check(&statement, &declarations)
        .unwrap_or_else(|d| panic!("{name}: {}", d.render(&entry.statement, false)));
    let out_shape = declarations[&out_name].shape.clone();
    (original, data, sparse, out_shape)
}

/// The entry with every value tensor in `dtype`, and its data rounded to it.
pub fn typed(einsum: &Einsum, data: &Tensors, dtype: DType) -> (Einsum, Tensors) {
    let mut typed = einsum.clone();
    for t in typed.tensors.values_mut() {
        if let ElemType::Value(_) = t.dtype {
            t.dtype = ElemType::Value(dtype);
        }
    }
    let rounded = data
        .iter()
        .map(|(n, v)| match v {
            TensorValue::Values(a) => (n.clone(), TensorValue::Values(a.mapv(|x| dtype.round(x)))),
            other => (n.clone(), other.clone()),
        })
        .collect();
    (typed, rounded)
}

/// One way to run an entry when checking a backend against the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckRun {
    pub dtype: DType,
    /// Allowed error relative to the largest magnitude of the reference.
    pub tolerance: f64,
    pub schedule: String,
}

/// The runs every backend is checked under: the default schedule in f32
/// and in f16 (Tensor Cores where the tiles allow), ragged tiles (4 on
/// every index), and small tiles with atomic updates per element and eager
/// broadcasting.
pub fn check_runs(built: &Built) -> Vec<CheckRun> {
    let tiles = |t: usize| -> String {
        built.einsum.indices.iter().map(|i| format!("tile.{}={t}", i.name)).collect::<Vec<_>>().join(" ")
    };
    vec![
        CheckRun { dtype: DType::F32, tolerance: 1e-4, schedule: String::new() },
        CheckRun { dtype: DType::F16, tolerance: 1e-2, schedule: String::new() },
        CheckRun { dtype: DType::F32, tolerance: 1e-4, schedule: tiles(4) },
        CheckRun {
            dtype: DType::F32,
            tolerance: 1e-4,
            schedule: format!("{} reduce=atomic broadcast=eager", tiles(2)),
        },
    ]
    .into_iter()
    // Each Sgap strategy the statement admits, on ragged tiles of 4 (a
    // group of 4 is a whole tile, of 2 half of one); the segment groups
    // also in f16, whose sums go through the f32 copy of the output.
    .chain(sgap_strategies(&built.einsum).into_iter().flat_map(|reduce| {
        let f16 = reduce.starts_with("reduce=segment(2)").then_some(DType::F16);
        [Some(DType::F32), f16].into_iter().flatten().map(move |dtype| CheckRun {
            dtype,
            tolerance: if dtype == DType::F16 { 1e-2 } else { 1e-4 },
            schedule: format!("{} {reduce}", tiles(4)),
        })
    }))
    .collect()
}

/// Sgap's reduction strategies an entry's statement admits, each a
/// schedule item (`reduce=segment(R)` where an output subscript is not a
/// lone index, so neighbours may share a target; `reduce=parallel(R)`
/// where an index is reduced). The rule is the statement's, not the
/// lowering's answer, so a wrong refusal fails the runs that use these.
pub fn sgap_strategies(einsum: &Einsum) -> Vec<&'static str> {
    let mut out = Vec::new();
    if einsum.statement.lhs.subscripts.iter().any(|s| s.as_index().is_none()) {
        out.extend(["reduce=segment(4)", "reduce=segment(2)"]);
    }
    if einsum.indices.iter().any(|i| i.reduced) {
        out.extend(["reduce=parallel", "reduce=parallel(2)"]);
    }
    out
}

/// Max |got − want| over the largest |want| (infinite when the shapes differ).
pub fn max_rel_error(got: &ArrayD<f64>, want: &ArrayD<f64>) -> f64 {
    if got.shape() != want.shape() {
        return f64::INFINITY;
    }
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    // A NaN or infinity where the reference is finite is an infinite
    // error (`f64::max` alone would skip a NaN).
    let diff = |g: f64, w: f64| if g.is_finite() || !w.is_finite() { (g - w).abs() } else { f64::INFINITY };
    got.iter().zip(want.iter()).fold(0.0f64, |m, (g, w)| m.max(diff(*g, *w))) / scale
}
