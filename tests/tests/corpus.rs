//! The Einsum corpus (`tests/corpus/*.toml`): every entry parses, checks,
//! is rewritten over its formats' arrays, and evaluates — rewritten and
//! original alike — to what an independent dense computation written here
//! gives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ndarray::{ArrayD, Dimension, IxDyn};
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::{Coo, FormatSpec};
use spindle_ir::lang::{Declarations, ElemType, check, declare_output, parse};
use spindle_ir::tensor::{TensorValue, Tensors};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    description: String,
    statement: String,
    #[serde(default)]
    formats: BTreeMap<String, String>,
    tensors: BTreeMap<String, Data>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelMap {
    points: usize,
    voxel: f64,
    kernel: usize,
    seed: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Data {
    rand: Option<String>,
    index: Option<String>,
    max: Option<i64>,
    #[serde(rename = "gen")]
    generator: Option<String>,
    file: Option<String>,
    fallback: Option<String>,
    sparse3: Option<String>,
    nnz: Option<usize>,
    kernel_map: Option<KernelMap>,
    clebsch_gordan: Option<u32>,
    shape: Option<String>,
    #[serde(default)]
    seed: u64,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

fn entries() -> Vec<(String, Entry)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
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

fn random_values(shape: Vec<usize>, seed: u64) -> ArrayD<f64> {
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

fn value(t: &Tensors, name: &str) -> ArrayD<f64> {
    match &t[name] {
        TensorValue::Values(a) => a.clone(),
        TensorValue::Indices(_) => panic!("{name} holds indices"),
    }
}

fn index(t: &Tensors, name: &str) -> ArrayD<i64> {
    match &t[name] {
        TensorValue::Indices(a) => a.clone(),
        TensorValue::Values(_) => panic!("{name} holds values"),
    }
}

/// Reads with the fill rule: outside the bounds is 0.
fn at(a: &ArrayD<f64>, idx: &[i64]) -> f64 {
    let inside = idx.iter().zip(a.shape()).all(|(&i, &e)| i >= 0 && (i as usize) < e);
    if inside { a[IxDyn(&idx.iter().map(|&i| i as usize).collect::<Vec<_>>())] } else { 0.0 }
}

/// The independent dense computation of each entry, loops written out.
fn expected(name: &str, t: &Tensors, out_shape: &[usize]) -> ArrayD<f64> {
    let mut out = ArrayD::<f64>::zeros(IxDyn(out_shape));
    let matmul = |a: &ArrayD<f64>, b: &ArrayD<f64>, out: &mut ArrayD<f64>| {
        let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
        for i in 0..m {
            for j in 0..n {
                out[[i, j]] = (0..k).map(|p| a[[i, p]] * b[[p, j]]).sum();
            }
        }
    };
    match name {
        "spmm-groupcoo" | "spmm-blockgroupcoo" | "spmm-ell" => {
            matmul(&value(t, "A"), &value(t, "B"), &mut out)
        }
        "spmv-csr" => {
            let (a, x) = (value(t, "A"), value(t, "x"));
            for i in 0..a.shape()[0] {
                out[[i]] = (0..a.shape()[1]).map(|j| a[[i, j]] * x[[j]]).sum();
            }
        }
        "sddmm" => {
            let (m, a, b) = (value(t, "M"), value(t, "A"), value(t, "B"));
            let mut ab = ArrayD::zeros(IxDyn(out_shape));
            matmul(&a, &b, &mut ab);
            out = &m * &ab;
        }
        "mttkrp" => {
            let (x, b, c) = (value(t, "X"), value(t, "B"), value(t, "C"));
            let s = x.shape();
            for i in 0..s[0] {
                for r in 0..out_shape[1] {
                    let mut sum = 0.0;
                    for j in 0..s[1] {
                        for k in 0..s[2] {
                            sum += x[[i, j, k]] * b[[j, r]] * c[[k, r]];
                        }
                    }
                    out[[i, r]] = sum;
                }
            }
        }
        "pointcloud-conv" => {
            let (map, input, w) = (value(t, "Map"), value(t, "In"), value(t, "W"));
            let s = map.shape();
            for x in 0..s[0] {
                for y in 0..s[1] {
                    for z in 0..s[2] {
                        if map[[x, y, z]] == 0.0 {
                            continue;
                        }
                        for c in 0..input.shape()[1] {
                            for m in 0..w.shape()[2] {
                                out[[x, m]] += map[[x, y, z]] * input[[y, c]] * w[[z, c, m]];
                            }
                        }
                    }
                }
            }
        }
        "tensor-product" => {
            let (cg, x, y, w) = (value(t, "CG"), value(t, "X"), value(t, "Y"), value(t, "W"));
            let s = cg.shape();
            for ((i, j, k, l), &c) in cg.view().into_dimensionality::<ndarray::Ix4>().unwrap().indexed_iter()
            {
                if c == 0.0 {
                    continue;
                }
                assert!(i < s[0]);
                for b in 0..x.shape()[0] {
                    for u in 0..x.shape()[2] {
                        for wi in 0..w.shape()[3] {
                            out[[b, i, wi]] += c * x[[b, j, u]] * y[[b, k]] * w[[b, l, u, wi]];
                        }
                    }
                }
            }
        }
        "segment-max" => {
            // A segment's max over its entries; an empty segment is 0.
            let (x, s) = (value(t, "x"), index(t, "S"));
            let mut best = vec![f64::NEG_INFINITY; out_shape[0]];
            for p in 0..x.len() {
                let seg = s[[p]] as usize;
                best[seg] = best[seg].max(x[[p]]);
            }
            for (seg, b) in best.into_iter().enumerate() {
                out[[seg]] = if b == f64::NEG_INFINITY { 0.0 } else { b };
            }
        }
        "conv1d" => {
            let (input, f) = (value(t, "I"), value(t, "F"));
            for i in 0..out_shape[0] {
                out[[i]] = (0..f.len()).map(|p| at(&input, &[i as i64 + p as i64 - 1]) * f[[p]]).sum();
            }
        }
        "conv2d-strided" => {
            let (input, f) = (value(t, "I"), value(t, "F"));
            for i in 0..out_shape[0] {
                for j in 0..out_shape[1] {
                    let mut sum = 0.0;
                    for p in 0..3 {
                        for q in 0..3 {
                            sum += at(&input, &[(2 * i + p) as i64, (2 * j + q) as i64]) * f[[p, q]];
                        }
                    }
                    out[[i, j]] = sum;
                }
            }
        }
        "gather-dot-scatter" => {
            let (a, b, e, d) = (value(t, "A"), value(t, "B"), index(t, "E"), index(t, "D"));
            for y in 0..a.shape()[0] {
                for x in 0..b.shape()[1] {
                    let sum: f64 = (0..b.shape()[0]).map(|r| a[[y, e[[r]] as usize]] * b[[r, x]]).sum();
                    out[[d[[y]] as usize, x]] += sum;
                }
            }
        }
        other => panic!("corpus entry {other} has no independent computation in this test"),
    }
    out
}

fn close(got: &ArrayD<f64>, want: &ArrayD<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    for ((idx, g), w) in got.indexed_iter().zip(want.iter()) {
        assert!((g - w).abs() <= 1e-9 * scale, "{what}: at {:?} got {g}, expected {w}", idx.slice());
    }
    assert!(want.iter().any(|x| *x != 0.0), "{what}: the expected result is all zeros, which tests nothing");
}

#[test]
fn every_corpus_entry_matches_its_dense_computation() {
    let entries = entries();
    assert!(entries.len() >= 12, "the corpus lost entries");
    let mut runs = Vec::new();
    for (name, entry) in entries {
        eprintln!("{name}: {}", entry.description);
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
        let statement = parse(&entry.statement)
            .unwrap_or_else(|d| panic!("{name}: {}", d.render(&entry.statement, false)));
        // The output's shape: declared, or the extents of its plain indices.
        assert!(declare_output(&statement, &mut declarations), "{name}: give the output a `shape`");
        let out_name = statement.lhs.tensor.name.clone();
        let einsum = check(&statement, &declarations)
            .unwrap_or_else(|d| panic!("{name}: {}", d.render(&entry.statement, false)));
        let out_shape = declarations[&out_name].shape.clone();
        let want = expected(&name, &data, &out_shape);

        let original = spindle_ir::eval::evaluate(&einsum, &data).unwrap_or_else(|d| panic!("{name}: {d}"));
        close(&original, &want, &format!("{name} (original statement)"));

        if entry.formats.is_empty() {
            runs.push((name.clone(), einsum.clone(), data.clone(), want.clone()));
            continue;
        }
        let formats: BTreeMap<String, FormatSpec> =
            entry.formats.iter().map(|(n, s)| (n.clone(), s.parse().unwrap())).collect();
        let rewritten = spindle_ir::rewrite::rewrite(&einsum, &formats, &sparse)
            .unwrap_or_else(|d| panic!("{name}: {d}"));
        eprintln!("  rewritten: {}", rewritten.statement);
        let mut data = data;
        for gone in &rewritten.replaced {
            data.remove(gone);
        }
        data.extend(rewritten.tensors.clone());
        let text = rewritten.statement.to_string();
        let einsum =
            rewritten.check(&einsum).unwrap_or_else(|d| panic!("{name}: {}", d.render(&text, false)));
        let got = spindle_ir::eval::evaluate(&einsum, &data).unwrap_or_else(|d| panic!("{name}: {d}"));
        close(&got, &want, &format!("{name} (rewritten: {text})"));
        runs.push((name.clone(), einsum, data, want));
    }
    c_backend(&runs);
}

/// Schedules every corpus entry runs under on the C backend.
const SCHEDULES: &[&str] = &["", "reduce=atomic", "matmul=off"];

/// Eager broadcasting gives every value every axis, so its tiles are small.
const EAGER: &[&str] = &["broadcast=eager matmul=off", "reduce=atomic broadcast=eager"];

/// Every entry, as it runs (rewritten when it has formats), compiled to C
/// under several schedules and tile sizes, on one and two threads, against
/// the entry's dense computation.
fn c_backend(runs: &[(String, spindle_ir::lang::Einsum, Tensors, ArrayD<f64>)]) {
    for (name, einsum, data, want) in runs {
        let mut schedules: Vec<String> = SCHEDULES.iter().map(|s| s.to_string()).collect();
        // Tiles that are ragged on every axis, and tiles of one.
        let ragged: Vec<String> = einsum.indices.iter().map(|i| format!("tile.{}=4", i.name)).collect();
        let ones: Vec<String> = einsum.indices.iter().map(|i| format!("tile.{}=1", i.name)).collect();
        schedules.push(ragged.join(" "));
        let small: Vec<String> = einsum.indices.iter().map(|i| format!("tile.{}=2", i.name)).collect();
        schedules.extend(EAGER.iter().map(|e| format!("{} {e}", small.join(" "))));
        schedules.push(ones.join(" ") + " reduce=atomic");
        for schedule in &schedules {
            let kernel = spindle_ir::kernel::lower::lower(einsum, &schedule.parse().unwrap(), "corpus")
                .unwrap_or_else(|d| panic!("{name} [{schedule}]: {d}"));
            let compiled = spindle_c::exec::CKernel::compile(&kernel)
                .unwrap_or_else(|e| panic!("{name} [{schedule}]: {e}"));
            for threads in [1, 2] {
                let got = compiled.run(data, threads).unwrap_or_else(|e| panic!("{name} [{schedule}]: {e}"));
                close_f32(&got, want, &format!("{name} on C [{schedule}] with {threads} threads"));
            }
        }
    }
}

/// Within f32 rounding of the largest magnitude.
fn close_f32(got: &ArrayD<f64>, want: &ArrayD<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    for ((idx, g), w) in got.indexed_iter().zip(want.iter()) {
        assert!((g - w).abs() <= 1e-4 * scale, "{what}: at {:?} got {g}, expected {w}", idx.slice());
    }
}
