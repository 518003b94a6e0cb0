//! `spindle convert`: store a tensor in another format and write it out.

use std::path::Path;

use anyhow::{Context, Result, bail};
use spindle_formats::io::{write_mtx, write_npy_indices, write_npy_values, write_tns};
use spindle_formats::tensor::ArrayData;
use spindle_formats::{FormatSpec, Index, SparseTensor, Value};

use crate::input::load;
use crate::{Types, with_types};

/// The file types `--out` writes; any other path is a folder.
const FILE_TYPES: [&str; 3] = ["mtx", "tns", "npy"];

/// What to do when `--out` names a path that cannot be a folder.
const FOLDER_HINT: &str = "a path not ending in .mtx, .tns or .npy is a folder that receives one .npy per \
                           array; give a new or existing folder, or a file name with one of those endings";

fn extension(out: &Path) -> Option<String> {
    out.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase)
}

pub fn run(input: &str, to: &str, out: &Path, types: &Types) -> Result<()> {
    let spec: FormatSpec = to.parse()?;
    // A folder that cannot be made is refused before the conversion.
    if !extension(out).is_some_and(|e| FILE_TYPES.contains(&e.as_str())) {
        crate::check_folder(out, FOLDER_HINT).context("--out")?;
    }
    with_types!(types, convert(input, &spec, out))
}

fn convert<V: Value, I: Index>(input: &str, spec: &FormatSpec, out: &Path) -> Result<()> {
    let loaded = load::<V, I>(input)?;
    let tensor = SparseTensor::from_coo(&loaded.coo, spec)?;
    match extension(out).as_deref() {
        Some("mtx") => write_mtx(&tensor.to_coo()?, out)?,
        Some("tns") => write_tns(&tensor.to_coo()?, out)?,
        Some("npy") => {
            let SparseTensor::Dense(d) = &tensor else {
                bail!(
                    "{}: a .npy file holds one dense array; use --to dense, or give a folder to get one .npy per {} array",
                    out.display(),
                    tensor.spec()
                );
            };
            let standard = d.val.as_standard_layout();
            write_npy_values(out, d.val.shape(), standard.as_slice().unwrap_or_default())?;
        }
        _ => write_folder(&tensor, out)?,
    }
    let stats = tensor.stats()?;
    println!(
        "{} -> {} ({}): nnz {}, stored {}, {} bytes",
        loaded.name,
        out.display(),
        tensor.spec(),
        stats.nnz,
        stats.stored,
        stats.bytes
    );
    Ok(())
}

/// One `.npy` per array and a `format.json` describing them.
fn write_folder<V: Value, I: Index>(tensor: &SparseTensor<V, I>, dir: &Path) -> Result<()> {
    crate::create_folder(dir, FOLDER_HINT).context("--out")?;
    let mut arrays = Vec::new();
    for (name, data) in tensor.arrays() {
        let path = dir.join(format!("{name}.npy"));
        let (len, dtype) = match data {
            ArrayData::Index(x) => (x.len(), I::ITYPE.name()),
            ArrayData::Value(x) => (x.len(), V::DTYPE.name()),
        };
        let shape = tensor.array_shape(&name, len);
        match data {
            ArrayData::Index(x) => write_npy_indices(&path, &shape, x)?,
            ArrayData::Value(x) => write_npy_values(&path, &shape, x)?,
        }
        arrays.push(serde_json::json!({ "name": name, "file": format!("{name}.npy"), "shape": shape, "dtype": dtype }));
    }
    let meta = serde_json::json!({
        "format": tensor.spec().to_string(),
        "shape": tensor.shape(),
        "levels": tensor.levels().iter().map(|l| l.to_string()).collect::<Vec<_>>(),
        "nnz": tensor.nnz(),
        "arrays": arrays,
    });
    let path = dir.join("format.json");
    let earlier = earlier_arrays(&path);
    std::fs::write(&path, serde_json::to_string_pretty(&meta)?)
        .with_context(|| format!("writing {}", path.display()))?;
    // A conversion written here before in another format leaves arrays this
    // one does not (a GroupCOO's over a CSR's pos.npy): they go, so the
    // folder holds one tensor as its format.json says. Only files that
    // format.json listed are touched.
    let written: Vec<String> = tensor.arrays().into_iter().map(|(name, _)| format!("{name}.npy")).collect();
    for stale in earlier.iter().filter(|f| !written.contains(f)) {
        let file = dir.join(stale);
        std::fs::remove_file(&file).with_context(|| format!("removing {}", file.display()))?;
        println!("removed {} (an array of the conversion written there before)", file.display());
    }
    Ok(())
}

/// The array files a `format.json` lists, where it is one this command
/// wrote: plain `.npy` names inside the folder, each of which exists.
fn earlier_arrays(meta: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(meta) else { return Vec::new() };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else { return Vec::new() };
    let files = json["arrays"].as_array().into_iter().flatten().filter_map(|a| a["file"].as_str());
    let dir = meta.parent().unwrap_or(Path::new("."));
    files
        .filter(|f| f.ends_with(".npy") && Path::new(f).file_name() == Some(std::ffi::OsStr::new(f)))
        .filter(|f| dir.join(f).is_file())
        .map(str::to_string)
        .collect()
}
