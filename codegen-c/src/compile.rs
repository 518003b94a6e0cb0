//! Compiling C kernels with the system C compiler, caching the shared
//! objects on disk, and loading them.
//!
//! A kernel is a C11 function with the fixed signature
//!
//! ```c
//! void NAME(void *const *args, int64_t nthreads);
//! ```
//!
//! `args` holds one pointer per buffer, in the order the printer documents
//! for the kernel; `nthreads` is the number of OpenMP threads the kernel
//! should use (the kernel passes it to `num_threads(...)`).
//!
//! [`Compiler::compile`] hashes the source together with the compiler, its
//! flags, its `--version` text and the host CPU (the flags contain
//! `-march=native`), writes `<hash>.c` into the cache folder, compiles it to
//! `<hash>.so` and loads that. A later compile of the same source — in this
//! process or any other — finds `<hash>.so` and loads it without running
//! the compiler. Every file is written under a temporary name and renamed
//! into place, so concurrent processes never see a half-written file.
//!
//! The cache folder is `$SPINDLE_CACHE_DIR` when set, otherwise
//! `<workspace>/target/spindle-cache/c/` ([`default_cache_dir`]).

use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use libloading::Library;

/// The flags every kernel is compiled with (after any arguments that
/// `$CC` itself carries). Part of the cache key.
pub const C_FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-fopenmp",
    "-shared",
    "-fPIC",
    "-std=c11",
    // ISO C mode leaves a product and the sum it feeds as two instructions
    // (gcc's `-ffp-contract=off`); fused multiply-adds halve a kernel's
    // floating-point instructions (GNN kernel 1 on karate, NH 256: the
    // strip's register-blocked consumer 13.2 -> 12.6 us).
    "-ffp-contract=fast",
    "-Wall",
    "-Wno-unused-variable",
    "-Wno-unused-but-set-variable",
];

/// The environment variable that overrides the cache folder.
pub const CACHE_DIR_ENV: &str = "SPINDLE_CACHE_DIR";

/// Bumped whenever the layout of the cache or the key changes.
const CACHE_VERSION: &str = "spindle-c cache v1";

/// The C type of a kernel entry point:
/// `void NAME(void *const *args, int64_t nthreads)`.
pub type KernelFn = unsafe extern "C" fn(args: *const *mut c_void, nthreads: i64);

/// Why a kernel could not be compiled or loaded.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The C compiler could not be started (not installed, not executable)
    /// or does not answer `--version`.
    #[error(
        "C compiler `{compiler}` is not usable: {reason}\n\
         help: install gcc or clang with OpenMP support, or set $CC to a C compiler \
         (kernels are compiled with `{flags}`)",
        compiler = compiler.display(),
        flags = C_FLAGS.join(" ")
    )]
    CompilerMissing { compiler: PathBuf, reason: String },

    /// The compiler ran and rejected the source.
    #[error(
        "C compilation of `{source_path}` failed ({status})\ncommand: {command}\n{compiler_output}",
        source_path = source_path.display()
    )]
    Failed {
        /// Everything the compiler printed (stderr, then stdout).
        compiler_output: String,
        /// The `.c` file that failed; it stays in the cache folder to be read.
        source_path: PathBuf,
        /// The full command line.
        command: String,
        /// The exit status, as text.
        status: String,
    },

    /// The kernel name is not a C identifier.
    #[error("kernel symbol `{0}` is not a C identifier")]
    InvalidSymbol(String),

    /// The shared object exists but `dlopen` refused it.
    #[error("cannot load `{path}`: {error}", path = path.display())]
    Load {
        path: PathBuf,
        #[source]
        error: libloading::Error,
    },

    /// The shared object loaded but has no such function.
    #[error(
        "kernel symbol `{symbol}` not found in `{path}` (compiled from `{source_path}`): {error}",
        path = path.display(),
        source_path = source_path.display()
    )]
    MissingSymbol {
        symbol: String,
        path: PathBuf,
        source_path: PathBuf,
        #[source]
        error: libloading::Error,
    },

    /// Reading or writing the cache folder failed.
    #[error("C kernel cache: {action} `{path}`: {error}", path = path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        error: io::Error,
    },
}

/// `<workspace>/target/spindle-cache/c`, the cache folder used when
/// `$SPINDLE_CACHE_DIR` is not set.
pub fn default_cache_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = manifest.parent().unwrap_or(manifest);
    workspace.join("target").join("spindle-cache").join("c")
}

/// The cache folder: `$SPINDLE_CACHE_DIR` when set, else
/// [`default_cache_dir`].
pub fn cache_dir() -> PathBuf {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => default_cache_dir(),
    }
}

/// A C compiler, its flags and the cache folder it compiles into.
///
/// [`Compiler::from_env`] reads `$CC` and `$SPINDLE_CACHE_DIR`; tests and
/// tools that must not depend on the environment build one with
/// [`Compiler::new`] and the `with_*` methods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiler {
    program: PathBuf,
    pre_args: Vec<String>,
    flags: Vec<String>,
    cache_dir: PathBuf,
}

impl Compiler {
    /// The compiler in `$CC` (default `cc`) with [`C_FLAGS`], caching in
    /// `$SPINDLE_CACHE_DIR` (default [`default_cache_dir`]).
    ///
    /// As in make, `$CC` may carry arguments (`CC="ccache gcc"`): it is
    /// split at whitespace into the program and arguments placed before
    /// the flags.
    pub fn from_env() -> Self {
        let cc = std::env::var("CC").unwrap_or_default();
        let mut words = cc.split_whitespace().map(str::to_owned);
        let program = words.next().unwrap_or_else(|| "cc".to_owned());
        Compiler { pre_args: words.collect(), ..Compiler::new(program) }.with_cache_dir(cache_dir())
    }

    /// The given compiler program with [`C_FLAGS`], caching in
    /// [`default_cache_dir`]. Ignores the environment.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Compiler {
            program: program.into(),
            pre_args: Vec::new(),
            flags: C_FLAGS.iter().map(|&f| f.to_owned()).collect(),
            cache_dir: default_cache_dir(),
        }
    }

    /// Compiles into (and looks up in) `dir` instead.
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = dir.into();
        self
    }

    /// Replaces [`C_FLAGS`] (e.g. `-O0 -g` to debug a kernel). The flags
    /// must still produce a shared object; they are part of the cache key.
    pub fn with_flags<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        self.flags = flags.into_iter().map(Into::into).collect();
        self
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    pub fn flags(&self) -> &[String] {
        &self.flags
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The compiler's `--version` output (run once per process and
    /// compiler). Fails with [`CompileError::CompilerMissing`] when the
    /// compiler cannot be run.
    pub fn version(&self) -> Result<String, CompileError> {
        type Versions = Mutex<HashMap<(PathBuf, Vec<String>), String>>;
        static VERSIONS: OnceLock<Versions> = OnceLock::new();
        let key = (self.program.clone(), self.pre_args.clone());
        let versions = VERSIONS.get_or_init(Default::default);
        if let Some(v) = lock(versions).get(&key) {
            return Ok(v.clone());
        }
        let missing =
            |reason: String| CompileError::CompilerMissing { compiler: self.program.clone(), reason };
        let out = Command::new(&self.program)
            .args(&self.pre_args)
            .arg("--version")
            .output()
            .map_err(|e| missing(spawn_reason(&e)))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(missing(format!("`--version` exited with {}: {}", out.status, stderr.trim())));
        }
        let version = String::from_utf8_lossy(&out.stdout).into_owned();
        lock(versions).insert(key, version.clone());
        Ok(version)
    }

    /// The cache key of `source`: a 128-bit hash, as 32 hex digits, of the
    /// source, the compiler, its flags and version, and the host CPU.
    pub fn cache_key(&self, source: &str) -> Result<String, CompileError> {
        let version = self.version()?;
        let mut h = spindle_ir::hash::StableHash::new();
        for part in [CACHE_VERSION, &self.program.to_string_lossy(), &version, host_key()] {
            h.field(part.as_bytes());
        }
        for arg in self.pre_args.iter().chain(&self.flags) {
            h.field(arg.as_bytes());
        }
        h.field(source.as_bytes());
        Ok(h.hex())
    }

    /// The command line used for compiling `c_path` into `so_path`, as
    /// shown in errors.
    fn command_line(&self, c_path: &Path, so_path: &Path) -> String {
        let mut words = vec![self.program.display().to_string()];
        words.extend(self.pre_args.iter().chain(&self.flags).cloned());
        words.extend(["-o".to_owned(), so_path.display().to_string(), c_path.display().to_string()]);
        words.join(" ")
    }

    /// Compiles `source` (or finds it in the cache) and loads the function
    /// `symbol` from it.
    ///
    /// The source is trusted code: loading runs its initialisers, and
    /// [`CProgram::run`] trusts the kernel to stay inside its buffers.
    pub fn compile(&self, source: &str, symbol: &str) -> Result<CProgram, CompileError> {
        if !is_c_identifier(symbol) {
            return Err(CompileError::InvalidSymbol(symbol.to_owned()));
        }
        let key = self.cache_key(source)?;
        let dir = &self.cache_dir;
        std::fs::create_dir_all(dir).map_err(|error| CompileError::Io {
            action: "creating",
            path: dir.clone(),
            error,
        })?;
        let c_path = dir.join(format!("{key}.c"));
        let so_path = dir.join(format!("{key}.so"));

        // A hit needs the `.so` and a `.c` with exactly this source (the
        // comparison guards against hash collisions and stray files).
        let source_matches = std::fs::read(&c_path).is_ok_and(|s| s == source.as_bytes());
        if source_matches
            && so_path.is_file()
            && let Ok(library) = load_library(&so_path)
        {
            crate::cache::touch(&c_path);
            crate::cache::touch(&so_path);
            return CProgram::new(library, symbol, c_path, so_path, true, Duration::ZERO, String::new());
        }

        if !source_matches {
            write_atomically(&c_path, source.as_bytes())?;
        }
        let tmp_so = temp_sibling(&so_path);
        let command = self.command_line(&c_path, &so_path);
        let start = Instant::now();
        let output = Command::new(&self.program)
            .args(&self.pre_args)
            .args(&self.flags)
            .arg("-o")
            .arg(&tmp_so)
            .arg(&c_path)
            .output();
        let compile_time = start.elapsed();
        let output = match output {
            Ok(o) => o,
            Err(e) => {
                return Err(CompileError::CompilerMissing {
                    compiler: self.program.clone(),
                    reason: spawn_reason(&e),
                });
            }
        };
        let mut compiler_output = String::from_utf8_lossy(&output.stderr).into_owned();
        compiler_output.push_str(&String::from_utf8_lossy(&output.stdout));
        if !output.status.success() || !tmp_so.is_file() {
            let _ = std::fs::remove_file(&tmp_so);
            return Err(CompileError::Failed {
                compiler_output,
                source_path: c_path,
                command,
                status: output.status.to_string(),
            });
        }
        std::fs::rename(&tmp_so, &so_path).map_err(|error| {
            let _ = std::fs::remove_file(&tmp_so);
            CompileError::Io { action: "renaming into", path: so_path.clone(), error }
        })?;
        let library =
            load_library(&so_path).map_err(|error| CompileError::Load { path: so_path.clone(), error })?;
        crate::cache::after_new_entry(dir, crate::cache::max_bytes());
        CProgram::new(library, symbol, c_path, so_path, false, compile_time, compiler_output)
    }
}

impl Default for Compiler {
    fn default() -> Self {
        Compiler::from_env()
    }
}

/// A loaded C kernel.
///
/// Holds the shared object open for as long as it lives. (Shared objects
/// are never unloaded from the process: an OpenMP runtime pulled in by a
/// kernel must outlive its idle worker threads. A kernel is a few KiB.)
pub struct CProgram {
    library: Arc<Library>,
    func: KernelFn,
    symbol: String,
    source_path: PathBuf,
    so_path: PathBuf,
    cache_hit: bool,
    compile_time: Duration,
    compiler_output: String,
    pub(crate) signature: Option<Vec<crate::runtime::BufferKind>>,
}

impl CProgram {
    /// Compiles with [`Compiler::from_env`]: `$CC` (default `cc`), cached
    /// in `$SPINDLE_CACHE_DIR` (default [`default_cache_dir`]).
    pub fn compile(source: &str, symbol: &str) -> Result<CProgram, CompileError> {
        Compiler::from_env().compile(source, symbol)
    }

    fn new(
        library: Arc<Library>,
        symbol: &str,
        source_path: PathBuf,
        so_path: PathBuf,
        cache_hit: bool,
        compile_time: Duration,
        compiler_output: String,
    ) -> Result<CProgram, CompileError> {
        // SAFETY: the symbol is declared with the fixed kernel signature
        // (the contract of `compile`); the pointer stays valid because
        // `library` is kept alive with it (and never unloaded).
        let func = unsafe { library.get::<KernelFn>(symbol) }.map(|s| *s).map_err(|error| {
            CompileError::MissingSymbol {
                symbol: symbol.to_owned(),
                path: so_path.clone(),
                source_path: source_path.clone(),
                error,
            }
        })?;
        Ok(CProgram {
            library,
            func,
            symbol: symbol.to_owned(),
            source_path,
            so_path,
            cache_hit,
            compile_time,
            compiler_output,
            signature: None,
        })
    }

    /// Calls the kernel with raw buffer pointers.
    ///
    /// # Safety
    ///
    /// `args` must hold exactly the pointers the kernel reads, in its
    /// documented order, each pointing to a live allocation of the element
    /// type and length the kernel expects, not aliased by any Rust
    /// reference for the duration of the call; `nthreads` must be ≥ 1.
    pub unsafe fn call(&self, args: &[*mut c_void], nthreads: i64) {
        // SAFETY: forwarded to the caller.
        unsafe { (self.func)(args.as_ptr(), nthreads) }
    }

    /// The kernel's function name.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The cached `.c` file this kernel was compiled from.
    pub fn source_path(&self) -> &Path {
        &self.source_path
    }

    /// The cached shared object.
    pub fn so_path(&self) -> &Path {
        &self.so_path
    }

    /// Whether the shared object came from the cache (no compiler ran).
    pub fn cache_hit(&self) -> bool {
        self.cache_hit
    }

    /// Time spent in the C compiler; zero on a cache hit.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// What the compiler printed on success (warnings); empty on a hit.
    pub fn compiler_output(&self) -> &str {
        &self.compiler_output
    }

    /// The loaded shared object, for looking up further symbols.
    pub fn library(&self) -> &Library {
        &self.library
    }
}

impl fmt::Debug for CProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CProgram")
            .field("symbol", &self.symbol)
            .field("source_path", &self.source_path)
            .field("so_path", &self.so_path)
            .field("cache_hit", &self.cache_hit)
            .field("compile_time", &self.compile_time)
            .finish_non_exhaustive()
    }
}

/// Loads a shared object once per process and keeps it loaded.
fn load_library(path: &Path) -> Result<Arc<Library>, libloading::Error> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Arc<Library>>>> = OnceLock::new();
    let loaded = LOADED.get_or_init(Default::default);
    let mut map = lock(loaded);
    if let Some(lib) = map.get(path) {
        return Ok(Arc::clone(lib));
    }
    // Before libgomp is loaded with the first kernel: it reads its wait
    // policy then.
    crate::runtime::wait_passively();
    // SAFETY: the library is a kernel compiled by `Compiler::compile` from
    // source its caller vouches for; it is never unloaded, so no
    // termination routine runs while its code may still be in use.
    let lib = Arc::new(unsafe { Library::new(path) }?);
    map.insert(path.to_owned(), Arc::clone(&lib));
    Ok(lib)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn spawn_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => format!("not found ({e})"),
        io::ErrorKind::PermissionDenied => format!("not executable ({e})"),
        _ => e.to_string(),
    }
}

fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `path` with a process- and call-unique temporary suffix.
fn temp_sibling(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}-{n}", std::process::id()));
    path.with_file_name(name)
}

/// Writes to a temporary sibling and renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CompileError> {
    let tmp = temp_sibling(path);
    let io_err = |action, error| CompileError::Io { action, path: path.to_owned(), error };
    std::fs::write(&tmp, bytes).map_err(|e| io_err("writing", e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_err("renaming into", e)
    })
}

/// What makes `-march=native` code from one machine unfit for another:
/// the architecture, the CPU model and its feature flags.
fn host_key() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS);
        if let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") {
            for field in ["model name", "flags", "Features", "CPU part"] {
                let line = cpuinfo.lines().find(|l| l.split(':').next().is_some_and(|k| k.trim() == field));
                if let Some(line) = line {
                    key.push('\n');
                    key.push_str(line);
                }
            }
        }
        key
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert!(is_c_identifier("spmm_kernel0"));
        assert!(is_c_identifier("_k"));
        assert!(!is_c_identifier(""));
        assert!(!is_c_identifier("0k"));
        assert!(!is_c_identifier("k-1"));
        assert!(!is_c_identifier("k\0"));
    }

    #[test]
    fn key_depends_on_flags_and_source() {
        let Ok(_) = Compiler::new("cc").version() else { return };
        let a = Compiler::new("cc");
        let b = Compiler::new("cc").with_flags(["-O0", "-shared", "-fPIC"]);
        let k = a.cache_key("int x;").unwrap();
        assert_eq!(k.len(), 32);
        assert_eq!(k, a.cache_key("int x;").unwrap());
        assert_ne!(k, a.cache_key("int y;").unwrap());
        assert_ne!(k, b.cache_key("int x;").unwrap());
    }
}
