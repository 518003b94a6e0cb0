//! The Python baselines: SciPy, Intel MKL (`sparse_dot_mkl` + the `mkl`
//! wheel) and SuiteSparse:GraphBLAS (`python-graphblas`), run by `python3`
//! in a subprocess per thread setting.
//!
//! # The environment
//!
//! The project owns its Python packages, as it owns the CUDA toolchain
//! (`target/cuda-toolchain`): a virtual environment in
//! `target/python-baselines` (`$SPINDLE_PYTHON_BASELINES` overrides),
//! created on first use with `python3 -m venv` and filled with
//! `python -m pip install` of the pinned [`REQUIREMENTS`]. A venv rather
//! than `pip install --target` because `--target` drops the files a wheel
//! installs beside `site-packages`, which is where the `mkl` wheel puts
//! `libmkl_rt.so.2` and its OpenMP runtime (`<env>/lib`). The install runs
//! in a folder beside the final one and is renamed into place, so an
//! interrupted install never leaves a half environment. When `python3`,
//! `venv`, pip or a wheel is unavailable, the baselines are skipped with the
//! reason, never failed.
//!
//! # The protocol
//!
//! `python/spmm_baselines.py` (its docstring is the reference) reads A's CSR
//! arrays and B from `.npy` files the suite writes, times each library
//! exactly as the suite times our kernels (warm-up, then timed calls, the
//! output reset to zeros outside the clock before each, `C += A @ B`), and
//! saves each output for the check against Spindle's reference.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// The packages, pinned with everything they pull in (a `pip freeze` of the
/// environment), so every machine times the same library versions.
pub const REQUIREMENTS: &[&str] = &[
    "numpy==2.3.5",
    "scipy==1.16.3",
    "sparse-dot-mkl==0.9.10",
    "mkl==2025.3.1",
    "python-graphblas==2025.2.0",
    "suitesparse-graphblas==9.4.5.0",
    // Their dependencies.
    "intel-openmp==2025.3.3",
    "intel-cmplr-lib-ur==2025.3.3",
    "onemkl-license==2025.3.1",
    "tbb==2022.3.1",
    "tcmlib==1.6.0",
    "umf==1.0.3",
    "cffi==2.1.1",
    "pycparser==3.12",
    "donfig==0.8.1.post1",
    "pyyaml==6.0.3",
    "numba==0.68.1",
    "llvmlite==0.50.0",
];

/// The environment variable naming the environment's folder.
pub const ENV_VAR: &str = "SPINDLE_PYTHON_BASELINES";

/// Bump when the layout of the install changes, so old installs are redone.
const STAMP_FORMAT: &str = "spindle python-baselines v1";
const STAMP_FILE: &str = ".spindle-stamp";

/// The script, shipped inside the binary (the GPU bundle has no sources).
const SCRIPT: &str = include_str!("../python/spmm_baselines.py");

/// The libraries the script runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Library {
    /// `scipy.sparse` CSR times dense.
    Scipy,
    /// Intel MKL's `mkl_sparse_s_mm` through `sparse_dot_mkl`.
    Mkl,
    /// SuiteSparse:GraphBLAS through `python-graphblas`.
    Graphblas,
}

impl Library {
    pub const ALL: [Library; 3] = [Library::Scipy, Library::Mkl, Library::Graphblas];

    /// The name in reports and on the script's command line.
    pub fn name(self) -> &'static str {
        match self {
            Library::Scipy => "scipy",
            Library::Mkl => "mkl",
            Library::Graphblas => "graphblas",
        }
    }

    /// The name in tables.
    pub fn title(self) -> &'static str {
        match self {
            Library::Scipy => "SciPy",
            Library::Mkl => "MKL",
            Library::Graphblas => "GraphBLAS",
        }
    }
}

/// The environment's folder: `$SPINDLE_PYTHON_BASELINES`, else
/// `target/python-baselines` at the workspace root.
pub fn env_dir() -> PathBuf {
    match std::env::var_os(ENV_VAR) {
        Some(dir) => PathBuf::from(dir),
        // The workspace root is this crate's parent folder.
        None => {
            let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
            bench.parent().unwrap_or(bench).join("target").join("python-baselines")
        }
    }
}

/// An installed environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonEnv {
    pub dir: PathBuf,
}

impl PythonEnv {
    /// The environment's interpreter.
    pub fn python(&self) -> PathBuf {
        self.dir.join("bin").join("python")
    }

    /// Where the wheels' shared libraries are (`libmkl_rt.so.2`, `libiomp5.so`).
    pub fn lib(&self) -> PathBuf {
        self.dir.join("lib")
    }
}

fn stamp_contents() -> String {
    let mut stamp = format!("{STAMP_FORMAT}\n");
    for r in REQUIREMENTS {
        stamp.push_str(r);
        stamp.push('\n');
    }
    stamp
}

fn is_installed(dir: &Path) -> bool {
    let stamp = std::fs::read_to_string(dir.join(STAMP_FILE)).unwrap_or_default();
    stamp == stamp_contents() && dir.join("bin").join("python").exists()
}

/// The environment when it is installed with today's pins; the reason
/// otherwise (for a `SKIPPED:` line).
pub fn find() -> Result<PythonEnv, String> {
    let dir = env_dir();
    if is_installed(&dir) {
        Ok(PythonEnv { dir })
    } else {
        Err(format!(
            "the Python baselines are not installed in {} (`spindle bench setup-python` installs them)",
            dir.display()
        ))
    }
}

/// The environment, installed first when missing (about 1.4 GB and a
/// minute, once). `Err` is the reason it cannot be had: the caller skips
/// the Python baselines and says why.
pub fn ensure(mut progress: impl FnMut(&str)) -> Result<PythonEnv, String> {
    if let Ok(env) = find() {
        return Ok(env);
    }
    let dir = env_dir();
    progress(&format!(
        "installing the Python baselines into {} (python3 -m venv + pip: {}) ...",
        dir.display(),
        REQUIREMENTS[..6].join(", ")
    ));
    let started = std::time::Instant::now();
    install(&dir).map_err(|e| format!("installing them into {} failed: {e:#}", dir.display()))?;
    progress(&format!("Python baselines installed in {:.0} s", started.elapsed().as_secs_f64()));
    Ok(PythonEnv { dir })
}

fn install(dir: &Path) -> Result<()> {
    match Command::new("python3").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(s) if s.success() => {}
        Ok(s) => bail!("`python3 --version` failed ({s})"),
        Err(e) if e.kind() == ErrorKind::NotFound => bail!("python3 was not found on PATH"),
        Err(e) => return Err(e).context("running python3"),
    }
    let parent = dir.parent().context("the Python baselines folder has no parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("python-baselines");
    let partial = parent.join(format!("{name}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    let cleanup = |e: anyhow::Error| {
        let _ = std::fs::remove_dir_all(&partial);
        e
    };
    let venv = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&partial)
        .output()
        .context("running python3 -m venv")?;
    if !venv.status.success() {
        return Err(cleanup(anyhow::anyhow!(
            "`python3 -m venv` failed ({}): {} (on Debian: apt-get install python3-venv)",
            venv.status,
            String::from_utf8_lossy(&venv.stderr).trim()
        )));
    }
    let pip = Command::new(partial.join("bin").join("python"))
        .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--quiet"])
        .args(REQUIREMENTS)
        // The packages go into a folder we own: pip's warning about root is noise.
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .stdout(Stdio::null())
        .output()
        .context("running pip")?;
    if !pip.status.success() {
        let stderr = String::from_utf8_lossy(&pip.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(4).collect();
        return Err(cleanup(anyhow::anyhow!(
            "`pip install {}` failed ({}): {}",
            REQUIREMENTS[..6].join(" "),
            pip.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )));
    }
    std::fs::write(partial.join(STAMP_FILE), stamp_contents()).map_err(|e| cleanup(e.into()))?;
    // A venv's interpreter finds its packages through `pyvenv.cfg` beside
    // it, so the folder can move; only its `bin/pip` scripts name the old
    // path, and we always run `python -m pip`.
    let _ = std::fs::remove_dir_all(dir);
    if let Err(e) = std::fs::rename(&partial, dir) {
        let _ = std::fs::remove_dir_all(&partial);
        // Another install at the same time may have won the race.
        if !is_installed(dir) {
            return Err(e).with_context(|| format!("moving the environment into {}", dir.display()));
        }
    }
    Ok(())
}

/// What the script prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScriptOutput {
    /// The Python version.
    pub python: String,
    pub threads: usize,
    /// Package versions as installed.
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    #[serde(default)]
    pub results: Vec<ScriptResult>,
    /// Why nothing ran (NumPy or SciPy missing).
    #[serde(default)]
    pub error: Option<String>,
}

/// One library's run in the script.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScriptResult {
    pub library: String,
    /// What was called.
    #[serde(default)]
    pub call: Option<String>,
    /// `outside`: the output is reset to zeros outside the clock, before each
    /// call; `inside`: the call allocates it.
    #[serde(default)]
    pub output_init: Option<String>,
    /// The thread count the library says it uses.
    #[serde(default)]
    pub threads_reported: Option<usize>,
    #[serde(default)]
    pub times_ms: Vec<f64>,
    /// The output of the first call (`.npy`).
    #[serde(default)]
    pub output: Option<PathBuf>,
    #[serde(default)]
    pub error: Option<String>,
    /// A sparse output's stored entries (SpGEMM).
    #[serde(default)]
    pub nnz: Option<usize>,
    /// The sum of a sparse output's values (SpGEMM).
    #[serde(default)]
    pub sum: Option<f64>,
    /// The sum of their squares (SpGEMM).
    #[serde(default)]
    pub sum_squares: Option<f64>,
}

/// A work folder holding the inputs of one matrix, removed when dropped.
#[derive(Debug)]
pub struct SpmmInputs {
    pub dir: PathBuf,
    pub rows: usize,
    pub cols: usize,
}

impl SpmmInputs {
    /// Writes A's CSR arrays and B (row-major `k x n`) as `.npy` into a
    /// fresh folder under the system's temporary folder.
    pub fn write(
        tag: &str,
        shape: (usize, usize),
        csr: &spindle_formats::Compressed<f32, i32>,
        b: &ndarray::Array2<f32>,
    ) -> Result<SpmmInputs> {
        use spindle_formats::io::{write_npy_indices, write_npy_values};
        let safe: String =
            tag.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let dir = std::env::temp_dir().join(format!("spindle-bench-{}-{safe}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let inputs = SpmmInputs { dir, rows: shape.0, cols: shape.1 };
        write_npy_indices(&inputs.dir.join("a_indptr.npy"), &[csr.pos.len()], &csr.pos)?;
        write_npy_indices(&inputs.dir.join("a_indices.npy"), &[csr.crd.len()], &csr.crd)?;
        write_npy_values(&inputs.dir.join("a_data.npy"), &[csr.val.len()], &csr.val)?;
        let b_flat: Vec<f32> = b.iter().copied().collect();
        write_npy_values(&inputs.dir.join("b.npy"), &[b.nrows(), b.ncols()], &b_flat)?;
        Ok(inputs)
    }
}

impl Drop for SpmmInputs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the script on `inputs` with `threads` threads: the thread
/// environment variables are set before any library loads.
pub fn run_spmm(
    env: &PythonEnv,
    inputs: &SpmmInputs,
    threads: usize,
    timing: spindle::TimingOptions,
    libraries: &[Library],
) -> Result<ScriptOutput> {
    let script = inputs.dir.join("spmm_baselines.py");
    std::fs::write(&script, SCRIPT).with_context(|| format!("writing {}", script.display()))?;
    let names: Vec<&str> = libraries.iter().map(|l| l.name()).collect();
    let mut command = script_command(env, &script, threads)?;
    command
        .arg("--dir")
        .arg(&inputs.dir)
        .args(["--rows", &inputs.rows.to_string(), "--cols", &inputs.cols.to_string()])
        .args(["--warmup", &timing.warmup.to_string(), "--repeats", &timing.repeats.max(1).to_string()])
        .args(["--tag", &format!("t{}", threads.max(1)), "--libraries", &names.join(",")]);
    run_script(env, command)
}

/// `python script --threads N` in the environment, with every thread pool a
/// library may start set to `threads` before it loads.
fn script_command(env: &PythonEnv, script: &Path, threads: usize) -> Result<Command> {
    let threads = threads.max(1).to_string();
    let mut library_path = vec![env.lib()];
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        library_path.extend(std::env::split_paths(&old));
    }
    let mut command = Command::new(env.python());
    command
        .arg(script)
        .args(["--threads", &threads])
        // Every pool a library may start: OpenMP (GraphBLAS, MKL's
        // OpenMP layer), MKL's own, BLAS, numba.
        .env("OMP_NUM_THREADS", &threads)
        .env("MKL_NUM_THREADS", &threads)
        .env("OPENBLAS_NUM_THREADS", &threads)
        .env("NUMBA_NUM_THREADS", &threads)
        // sparse_dot_mkl looks for libmkl_rt through ctypes, which does not
        // search the venv's lib/.
        .env("MKL_RT", env.lib().join("libmkl_rt.so.2"))
        .env("LD_LIBRARY_PATH", std::env::join_paths(library_path)?)
        .env("PYTHONNOUSERSITE", "1");
    Ok(command)
}

/// Runs a baseline script and reads the JSON object it prints last.
fn run_script(env: &PythonEnv, mut command: Command) -> Result<ScriptOutput> {
    let out = command.output().with_context(|| format!("running {}", env.python().display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!("the Python baselines failed ({}): {}", out.status, stderr.trim());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or("");
    serde_json::from_str(line).with_context(|| {
        format!(
            "reading the Python baselines' output: {}",
            stdout.trim().chars().take(500).collect::<String>()
        )
    })
}

/// The SpGEMM baselines' script (`spindle bench spgemm`).
const SPGEMM_SCRIPT: &str = include_str!("../python/spgemm_baselines.py");

/// The CSR arrays of A and B of one SpGEMM, as `.npy` in a fresh folder
/// (removed when dropped).
#[derive(Debug)]
pub struct SpgemmInputs {
    dir: PathBuf,
    shapes: [(usize, usize); 2],
}

impl SpgemmInputs {
    /// A and B of the product, D (A's shape) of the sum `A + D`.
    pub fn write(
        tag: &str,
        a: &spindle_formats::Compressed<f64, i64>,
        b: &spindle_formats::Compressed<f64, i64>,
        d: &spindle_formats::Compressed<f64, i64>,
    ) -> Result<SpgemmInputs> {
        let dir = work_dir("spgemm", tag)?;
        for (name, m) in [("a", a), ("b", b), ("d", d)] {
            write_csr(&dir, name, m)?;
        }
        Ok(SpgemmInputs { dir, shapes: [(a.shape[0], a.shape[1]), (b.shape[0], b.shape[1])] })
    }
}

impl Drop for SpgemmInputs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the SpGEMM script (SciPy's and MKL's products, SciPy's sum) on
/// `inputs` with `threads`.
pub fn run_spgemm(
    env: &PythonEnv,
    inputs: &SpgemmInputs,
    threads: usize,
    timing: spindle::TimingOptions,
) -> Result<ScriptOutput> {
    let script = inputs.dir.join("spgemm_baselines.py");
    std::fs::write(&script, SPGEMM_SCRIPT).with_context(|| format!("writing {}", script.display()))?;
    let shape = |(r, c): (usize, usize)| format!("{r}x{c}");
    let mut command = script_command(env, &script, threads)?;
    command
        .arg("--dir")
        .arg(&inputs.dir)
        .args(["--a-shape", &shape(inputs.shapes[0]), "--b-shape", &shape(inputs.shapes[1])])
        .args(["--warmup", &timing.warmup.to_string(), "--repeats", &timing.repeats.max(1).to_string()]);
    run_script(env, command)
}

/// A fresh folder for one suite's inputs, named after `tag`.
fn work_dir(suite: &str, tag: &str) -> Result<PathBuf> {
    let safe: String =
        tag.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    let dir = std::env::temp_dir().join(format!("spindle-{suite}-{}-{safe}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A CSR matrix as `{name}_indptr.npy`, `_indices.npy`, `_data.npy`.
fn write_csr(dir: &Path, name: &str, m: &spindle_formats::Compressed<f64, i64>) -> Result<()> {
    use spindle_formats::io::{write_npy_indices, write_npy_values};
    write_npy_indices(&dir.join(format!("{name}_indptr.npy")), &[m.pos.len()], &m.pos)?;
    write_npy_indices(&dir.join(format!("{name}_indices.npy")), &[m.crd.len()], &m.crd)?;
    write_npy_values(&dir.join(format!("{name}_data.npy")), &[m.val.len()], &m.val)?;
    Ok(())
}

/// The ReACT baselines' script (`spindle bench react`).
const REACT_SCRIPT: &str = include_str!("../python/react_baselines.py");

/// The operands of one ReACT kernel as `.npy` in a fresh folder (removed
/// when dropped): A's CSR and the dense operands by name.
#[derive(Debug)]
pub struct ReactInputs {
    dir: PathBuf,
    shape: (usize, usize),
}

impl ReactInputs {
    pub fn write(
        tag: &str,
        a: &spindle_formats::Compressed<f64, i64>,
        dense: &[(&str, &ndarray::ArrayD<f64>)],
    ) -> Result<ReactInputs> {
        let dir = work_dir("react", tag)?;
        write_csr(&dir, "a", a)?;
        for (name, values) in dense {
            let data: Vec<f64> = values.iter().copied().collect();
            spindle_formats::io::write_npy_values(&dir.join(format!("{name}.npy")), values.shape(), &data)?;
        }
        Ok(ReactInputs { dir, shape: (a.shape[0], a.shape[1]) })
    }
}

impl Drop for ReactInputs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs SciPy's version of `kernel` (`sddmm`, `gnn1`, `gnn2`) on `inputs`
/// on one thread.
pub fn run_react(
    env: &PythonEnv,
    inputs: &ReactInputs,
    kernel: &str,
    timing: spindle::TimingOptions,
) -> Result<ScriptOutput> {
    let script = inputs.dir.join("react_baselines.py");
    std::fs::write(&script, REACT_SCRIPT).with_context(|| format!("writing {}", script.display()))?;
    let mut command = script_command(env, &script, 1)?;
    command
        .arg("--dir")
        .arg(&inputs.dir)
        .args(["--kernel", kernel, "--a-shape", &format!("{}x{}", inputs.shape.0, inputs.shape.1)])
        .args(["--warmup", &timing.warmup.to_string(), "--repeats", &timing.repeats.max(1).to_string()]);
    run_script(env, command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_pinned_and_the_stamp_names_them() {
        for r in REQUIREMENTS {
            assert!(r.contains("=="), "{r} is not pinned");
        }
        assert!(stamp_contents().contains("sparse-dot-mkl==0.9.10"));
        assert!(!is_installed(Path::new("/nonexistent/python-baselines")));
    }

    #[test]
    fn script_output_reads_with_errors_and_missing_fields() {
        let text = r#"{"python": "3.11.7", "threads": 2, "versions": {"numpy": "2.3.5"},
            "results": [{"library": "mkl", "error": "ImportError: mkl_rt not found."},
                        {"library": "scipy", "call": "x", "output_init": "outside", "threads_reported": 1,
                         "times_ms": [1.0, 2.0], "output": "/tmp/c.npy"}]}"#;
        let out: ScriptOutput = serde_json::from_str(text).unwrap();
        assert_eq!(out.results[0].error.as_deref(), Some("ImportError: mkl_rt not found."));
        assert_eq!(out.results[1].times_ms, [1.0, 2.0]);
        let back: ScriptOutput = serde_json::from_str(&serde_json::to_string(&out).unwrap()).unwrap();
        assert_eq!(back, out);
    }
}
