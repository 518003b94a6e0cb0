//! Project chores, run as `cargo xtask <command>` (see the alias in `.cargo/config.toml`).
//!
//! - `setup-cuda`: install the CUDA compile toolchain (NVRTC, cudart, CUDA headers, cuobjdump
//!   and nvdisasm) from
//!   PyPI wheels into `target/cuda-toolchain`, which the project owns.
//! - `test [args]`: `setup-cuda`, then `cargo test --workspace [args]` with the toolchain
//!   on the environment. This is the README's test command and what CI runs.
//! - `gpu [DIR]`: build the GPU check bundle (release binaries, corpus, data, scripts) into
//!   DIR (default `target/gpu-bundle`), for a GPU machine with no Rust toolchain.

use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The wheels of the CUDA compile toolchain. 13.0.x matches the GPUs' 13.0 driver: NVRTC
/// output newer than the driver would not load. `cuobjdump` (and the `nvdisasm` it runs
/// for `-sass`) only read CUBINs, so their version need not match; PyPI has none older
/// than 13.2.
const WHEELS: [&str; 5] = [
    "nvidia-cuda-nvrtc==13.0.*",
    "nvidia-cuda-runtime==13.0.*",
    "nvidia-cuda-crt==13.0.*",
    "nvidia-cuda-cuobjdump==13.2.*",
    "nvidia-cuda-nvdisasm==13.2.*",
];

/// Bump when the layout of the install changes, so old installs are redone.
const STAMP_FORMAT: &str = "spindle cuda-toolchain v1";
const STAMP_FILE: &str = ".spindle-stamp";

/// Where the wheels put the toolkit, relative to the install folder.
const CUDA_SUBDIR: &str = "nvidia/cu13";

/// Files that must exist for the toolchain to be usable, relative to [`CUDA_SUBDIR`].
/// libnvrtc opens libnvrtc-builtins by name; `mma.h` comes from the crt wheel.
const KEY_FILES: [&str; 7] = [
    "bin/cuobjdump",
    "bin/nvdisasm",
    "lib/libnvrtc.so.13",
    "lib/libnvrtc-builtins.so.13.0",
    "include/cuda_fp16.h",
    "include/mma.h",
    "include/crt/mma.h",
];

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  setup-cuda          install the CUDA compile toolchain (NVRTC + headers, PyPI wheels
                      pinned to 13.0.*) into target/cuda-toolchain; quick when present
  test [ARGS...]      setup-cuda, then `cargo test --workspace [ARGS...]` with
                      SPINDLE_CUDA_ROOT and LD_LIBRARY_PATH pointing at the toolchain
                      (with -p/--package in ARGS, --workspace is left out), then the
                      Python tests of gpu/ (when no package was selected)
  gpu [DIR]           build the GPU check bundle into DIR (default target/gpu-bundle):
                      stripped release binaries (spindle, spindle-corpus), the corpus,
                      ../shared/data, and gpu/run.sh with its Python helpers. On the GPU
                      machine: `DIR/run.sh OUT` (see gpu/README.md)
";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let command = args.first().and_then(|a| a.to_str()).unwrap_or("");
    let result = match command {
        "setup-cuda" if args.len() == 1 => setup_cuda().map(|_| ExitCode::SUCCESS),
        "test" => test(&args[1..]),
        "gpu" if args.len() <= 2 => gpu_bundle(args.get(1).map(PathBuf::from)).map(|_| ExitCode::SUCCESS),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            if !command.is_empty() {
                eprintln!("error: unknown command or arguments: {args:?}\n");
            }
            eprint!("{USAGE}");
            Ok(ExitCode::from(2))
        }
    };
    result.unwrap_or_else(|error| {
        eprintln!("error: {error:#}");
        ExitCode::FAILURE
    })
}

fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().expect("xtask lives one level below the workspace root").to_path_buf()
}

/// The install folder. `spindle-cuda` looks here by default (see its `nvrtc` module), so
/// the two must agree.
fn toolchain_dir() -> PathBuf {
    workspace_root().join("target").join("cuda-toolchain")
}

fn stamp_contents() -> String {
    let mut stamp = format!("{STAMP_FORMAT}\n");
    for wheel in WHEELS {
        stamp.push_str(wheel);
        stamp.push('\n');
    }
    stamp
}

fn missing_key_files(install_dir: &Path) -> Vec<PathBuf> {
    let cuda = install_dir.join(CUDA_SUBDIR);
    KEY_FILES.iter().map(|file| cuda.join(file)).filter(|path| !path.is_file()).collect()
}

fn is_installed(install_dir: &Path) -> bool {
    let stamp = fs::read_to_string(install_dir.join(STAMP_FILE)).unwrap_or_default();
    stamp == stamp_contents() && missing_key_files(install_dir).is_empty()
}

/// Installs the toolchain unless it is already there; returns the CUDA root
/// (`.../nvidia/cu13`, absolute).
fn setup_cuda() -> Result<PathBuf> {
    let install_dir = toolchain_dir();
    let cuda_root = install_dir.join(CUDA_SUBDIR);
    if is_installed(&install_dir) {
        println!("CUDA toolchain: {} (already installed)", cuda_root.display());
        return Ok(cuda_root);
    }

    check_python_and_pip()?;
    let parent = install_dir.parent().context("toolchain folder has no parent")?;
    fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    remove_stale_partials(parent);

    // Install next to the final folder and rename into place, so an interrupted install
    // never leaves a half toolchain where the tests look for one.
    let partial = parent.join(format!("cuda-toolchain.partial-{}", std::process::id()));
    remove_dir_if_exists(&partial)?;
    let started = Instant::now();
    eprintln!("installing the CUDA toolchain ({}) ...", WHEELS.join(", "));
    let status = Command::new("python3")
        .args(["-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--quiet", "--target"])
        .arg(&partial)
        .args(WHEELS)
        // The wheels go into a folder we own, so pip's warning about running as root is noise.
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .status()
        .context("running python3 -m pip")?;
    if !status.success() {
        let _ = fs::remove_dir_all(&partial);
        bail!(
            "`python3 -m pip install --target {} {}` failed ({status})",
            partial.display(),
            WHEELS.join(" ")
        );
    }
    let missing = missing_key_files(&partial);
    if !missing.is_empty() {
        let _ = fs::remove_dir_all(&partial);
        bail!("the installed wheels lack expected files: {missing:?}");
    }
    fs::write(partial.join(STAMP_FILE), stamp_contents()).context("writing the toolchain stamp")?;

    // Move the old install (if any) aside first: rename cannot replace a non-empty folder.
    let old = parent.join(format!("cuda-toolchain.old-{}", std::process::id()));
    let had_old = match fs::rename(&install_dir, &old) {
        Ok(()) => true,
        Err(e) if e.kind() == ErrorKind::NotFound => false,
        Err(e) => return Err(e).with_context(|| format!("moving aside {}", install_dir.display())),
    };
    if let Err(e) = fs::rename(&partial, &install_dir) {
        // Another `setup-cuda` running at the same time may have won the race.
        let _ = fs::remove_dir_all(&partial);
        if !is_installed(&install_dir) {
            return Err(e).with_context(|| format!("moving the toolchain into {}", install_dir.display()));
        }
    }
    if had_old {
        let _ = fs::remove_dir_all(&old);
    }
    println!(
        "CUDA toolchain: {} (installed in {:.1} s)",
        cuda_root.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(cuda_root)
}

fn check_python_and_pip() -> Result<()> {
    let python =
        Command::new("python3").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    match python {
        Ok(status) if status.success() => {}
        Ok(status) => bail!(
            "`python3 --version` failed ({status}); a working Python 3 is needed to install the CUDA toolchain"
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => bail!(
            "python3 was not found on PATH; it is needed to install the CUDA toolchain from PyPI.\n\
             Install Python 3 with pip (e.g. `apt-get install python3 python3-pip`), then rerun `cargo xtask setup-cuda`."
        ),
        Err(e) => return Err(e).context("running python3"),
    }
    let pip = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running python3 -m pip --version")?;
    if !pip.success() {
        bail!(
            "pip is not available for python3 (`python3 -m pip --version` failed); it is needed to install the CUDA toolchain.\n\
             Install it with `python3 -m ensurepip --upgrade` or your package manager (e.g. `apt-get install python3-pip`), \
             then rerun `cargo xtask setup-cuda`."
        );
    }
    Ok(())
}

/// Removes `cuda-toolchain.partial-<pid>` / `.old-<pid>` folders left by interrupted runs
/// whose process is gone.
fn remove_stale_partials(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let pid =
            name.strip_prefix("cuda-toolchain.partial-").or_else(|| name.strip_prefix("cuda-toolchain.old-"));
        let Some(pid) = pid.and_then(|pid| pid.parse::<u32>().ok()) else { continue };
        // Without /proc (not Linux) nothing looks alive, which only costs a reinstall.
        let alive = pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists();
        if !alive {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

fn remove_dir_if_exists(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", dir.display()))
        }
        _ => Ok(()),
    }
}

fn test(extra: &[OsString]) -> Result<ExitCode> {
    let cuda_root = setup_cuda()?;
    let lib = cuda_root.join("lib");
    let mut library_path = vec![lib];
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        library_path.extend(std::env::split_paths(&old));
    }
    let library_path = std::env::join_paths(library_path).context("building LD_LIBRARY_PATH")?;

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.arg("test");
    // Only the flags before a `--` are cargo's; after it they go to the test binaries.
    let cargo_flags = extra.iter().take_while(|a| *a != "--");
    let selects_packages = cargo_flags.filter_map(|a| a.to_str()).any(|a| {
        a == "-p" || a.starts_with("-p") || a.starts_with("--package") || a == "--workspace" || a == "--all"
    });
    if !selects_packages {
        command.arg("--workspace");
    }
    command
        .args(extra)
        .current_dir(workspace_root())
        .env("SPINDLE_CUDA_ROOT", &cuda_root)
        .env("LD_LIBRARY_PATH", library_path);
    let status = command.status().context("running cargo test")?;
    if !status.success() {
        return Ok(match status.code() {
            Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            None => ExitCode::FAILURE,
        });
    }
    // The GPU check's Python helpers (standard library only; python3 is
    // already required by setup-cuda). Skipped when only some packages ran.
    if !selects_packages {
        let python = Command::new("python3")
            .args(["-m", "unittest", "discover", "-s", "gpu", "-p", "test_*.py"])
            .current_dir(workspace_root())
            .status()
            .context("running the gpu/ Python tests")?;
        if !python.success() {
            eprintln!("error: the gpu/ Python tests failed ({python})");
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Files of `gpu/` copied into the bundle.
const GPU_SCRIPTS: [&str; 4] = ["run.sh", "torch_bench.py", "summary.py", "README.md"];

/// Builds the GPU check bundle: everything a GPU machine without Rust needs.
fn gpu_bundle(dir: Option<PathBuf>) -> Result<()> {
    let root = workspace_root();
    let dir = dir.unwrap_or_else(|| root.join("target").join("gpu-bundle"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building release binaries (spindle, spindle-corpus) ...");
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "spindle-explorer", "-p", "spindle-tests", "--bins"])
        .current_dir(&root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --release failed ({status})");
    }
    remove_dir_if_exists(&dir)?;
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    for name in ["spindle", "spindle-corpus"] {
        let to = bin.join(name);
        fs::copy(target.join("release").join(name), &to).with_context(|| format!("copying {name}"))?;
        // Debug line tables double the size; the bundle travels with a size limit.
        let stripped = Command::new("strip").arg(&to).status();
        if !stripped.is_ok_and(|s| s.success()) {
            eprintln!("note: `strip {}` failed; the bundle keeps the symbols", to.display());
        }
    }
    copy_tree(&root.join("tests").join("corpus"), &dir.join("corpus"))?;
    for script in GPU_SCRIPTS {
        fs::copy(root.join("gpu").join(script), dir.join(script))
            .with_context(|| format!("copying gpu/{script}"))?;
    }
    let data =
        std::env::var_os("SPINDLE_DATA").map(PathBuf::from).unwrap_or_else(|| root.join("../shared/data"));
    if data.is_dir() {
        for sub in ["matrices", "pointclouds", "tensors"] {
            if data.join(sub).is_dir() {
                copy_tree(&data.join(sub), &dir.join("data").join(sub))?;
            }
        }
    } else {
        eprintln!(
            "note: {} not found: the bundle has no data; the suites use generated inputs",
            data.display()
        );
    }
    let commit = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    fs::write(dir.join("COMMIT"), format!("{commit}\n"))?;
    let bytes = tree_bytes(&dir);
    println!(
        "GPU bundle: {} ({:.1} MiB); on the GPU machine run `{}/run.sh OUT_DIR`",
        dir.display(),
        bytes as f64 / (1 << 20) as f64,
        dir.display()
    );
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(entry.file_name()))?;
        } else {
            fs::copy(&path, to.join(entry.file_name()))
                .with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() { tree_bytes(&p) } else { e.metadata().map(|m| m.len()).unwrap_or(0) }
        })
        .sum()
}
