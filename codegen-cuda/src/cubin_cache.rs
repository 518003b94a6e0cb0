//! The CUBIN cache: NVRTC's output for a source and an arch, kept on disk
//! under a stable hash of both ([`cache_dir`]), and filled ahead of time by
//! many compiles at once ([`precompile`]).
//!
//! NVRTC takes about 60 ms for a walk or tile kernel and about a second
//! for block rows (this project's 2-core build machine), and a search
//! compiles dozens: the GPU SpMM suite 20–30 a matrix and precision, one
//! after another until 2026-11-29, while the machines that lend a GPU have
//! 16 cores and 10-minute commands. NVRTC needs no GPU, so a search
//! compiles every candidate in parallel first and then finds each in the
//! cache.

use std::path::{Path, PathBuf};

use spindle_ir::hash::hash_fields;

use crate::nvrtc::{self, Arch, CompileError, CompileOptions};

/// The environment variable naming the CUBIN cache folder.
pub const CACHE_DIR_ENV: &str = "SPINDLE_CUDA_CACHE_DIR";

/// Bumped whenever the layout of the cache, the key or the way a source
/// compiles changes (v2: [`nvrtc::compile_spill_free`]).
const CACHE_VERSION: &str = "spindle-cuda cache v2";

/// `$SPINDLE_CUDA_CACHE_DIR`, else `<workspace>/target/spindle-cache/cuda`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os(CACHE_DIR_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/spindle-cache/cuda"),
    }
}

/// One source compiled for one arch: its key and its three files.
#[derive(Clone, Debug)]
pub struct CacheEntry {
    /// The stable hash of arch, symbol and source.
    pub key: String,
    cubin: PathBuf,
    log: PathBuf,
    source: PathBuf,
}

/// A CUBIN and the ptxas report NVRTC wrote with it.
pub type Cubin = (Vec<u8>, String);

impl CacheEntry {
    /// The entry of `source` (holding the `extern "C"` kernel `symbol`)
    /// compiled for `arch`, in [`cache_dir`].
    pub fn of(arch: Arch, symbol: &str, source: &str) -> CacheEntry {
        CacheEntry::in_dir(&cache_dir(), arch, symbol, source)
    }

    /// The entry in the cache folder `dir`.
    pub fn in_dir(dir: &Path, arch: Arch, symbol: &str, source: &str) -> CacheEntry {
        let key = hash_fields([
            CACHE_VERSION.as_bytes(),
            compiler().as_bytes(),
            arch.as_str().as_bytes(),
            symbol.as_bytes(),
            source.as_bytes(),
        ]);
        CacheEntry {
            cubin: dir.join(format!("{key}.cubin")),
            log: dir.join(format!("{key}.log")),
            source: dir.join(format!("{key}.cu")),
            key,
        }
    }

    /// The cached CUBIN and log, when the stored source is `source` (a
    /// hash collision or a damaged entry reads as a miss).
    pub fn read(&self, source: &str) -> Option<Cubin> {
        let stored = std::fs::read_to_string(&self.source).ok()?;
        if stored != source {
            return None;
        }
        let cubin = (std::fs::read(&self.cubin).ok()?, std::fs::read_to_string(&self.log).ok()?);
        for file in [&self.source, &self.cubin, &self.log] {
            spindle_c::cache::touch(file);
        }
        Some(cubin)
    }

    /// The ptxas report alone, when the entry has one.
    pub fn log(&self) -> Option<String> {
        std::fs::read_to_string(&self.log).ok()
    }

    /// Compiles `source` with NVRTC and stores the result. The cache is an
    /// optimisation: a read-only folder only costs recompiles. The source
    /// goes last, so a write cut short never leaves an entry that reads as
    /// complete.
    pub fn compile(&self, arch: Arch, symbol: &str, source: &str) -> Result<Cubin, CompileError> {
        let compiled = nvrtc::compile_spill_free(source, symbol, arch, &CompileOptions::default())?;
        if self.source.parent().is_none_or(|dir| std::fs::create_dir_all(dir).is_ok()) {
            let _ = write_atomically(&self.cubin, &compiled.cubin);
            let _ = write_atomically(&self.log, compiled.log.as_bytes());
            let _ = write_atomically(&self.source, source.as_bytes());
            if let Some(dir) = self.source.parent() {
                spindle_c::cache::after_new_entry(dir, spindle_c::cache::max_bytes());
            }
        }
        Ok((compiled.cubin, compiled.log))
    }
}

/// What else decides a CUBIN: the NVRTC release and the register budgets
/// [`nvrtc::compile_spill_free`] tries.
fn compiler() -> &'static str {
    static COMPILER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    COMPILER.get_or_init(|| {
        let version =
            nvrtc::version().map_or("unknown".to_string(), |(major, minor)| format!("{major}.{minor}"));
        format!("nvrtc {version}, register budgets {:?}", nvrtc::REGISTER_BUDGETS)
    })
}

/// Compiles every `(symbol, source)` not yet in the cache for `arch`, on as
/// many threads as the machine has cores, and returns how many it
/// compiled. Failures are not reported here: loading the kernel compiles
/// it again and says why.
pub fn precompile(arch: Arch, kernels: &[(&str, &str)]) -> usize {
    precompile_in(&cache_dir(), arch, kernels)
}

/// [`precompile`] into the cache folder `dir`.
pub fn precompile_in(dir: &Path, arch: Arch, kernels: &[(&str, &str)]) -> usize {
    let mut todo: Vec<(CacheEntry, &str, &str)> = Vec::new();
    for &(symbol, source) in kernels {
        let entry = CacheEntry::in_dir(dir, arch, symbol, source);
        if todo.iter().all(|(e, _, _)| e.key != entry.key) && entry.read(source).is_none() {
            todo.push((entry, symbol, source));
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(todo.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((entry, symbol, source)) = todo.get(i) else { break };
                    let _ = entry.compile(arch, symbol, source);
                }
            });
        }
    });
    todo.len()
}

/// Writes through a file of its own (process, and a count within it), then
/// renames it into place, so a reader never sees half a file; a failed
/// write leaves no temporary behind.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp-{}-{n}", std::process::id()));
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(i: usize) -> String {
        format!("extern \"C\" __global__ void k(float* x) {{ x[threadIdx.x] += {i}.0f; }}\n")
    }

    #[test]
    fn precompiled_kernels_are_found_in_the_cache() {
        if !nvrtc::toolchain_or_skip("precompiled_kernels_are_found_in_the_cache") {
            return;
        }
        let dir = std::env::temp_dir().join(format!("spindle-cubin-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sources: Vec<String> = (0..5).map(kernel).collect();
        // A repeated source compiles once.
        let mut kernels: Vec<(&str, &str)> = sources.iter().map(|s| ("k", s.as_str())).collect();
        kernels.push(("k", &sources[0]));
        assert_eq!(precompile_in(&dir, Arch::Sm90, &kernels), 5);
        for source in &sources {
            let entry = CacheEntry::in_dir(&dir, Arch::Sm90, "k", source);
            let (cubin, log) = entry.read(source).expect("compiled ahead");
            assert!(!cubin.is_empty());
            assert!(log.contains("sm_90"), "the ptxas report: {log}");
            assert!(
                CacheEntry::in_dir(&dir, Arch::Sm80, "k", source).read(source).is_none(),
                "another arch is another entry"
            );
        }
        assert_eq!(precompile_in(&dir, Arch::Sm90, &kernels), 0, "all cached");
        // A kernel that does not compile is left for the load to report.
        let broken = "extern \"C\" __global__ void k() { undeclared(); }";
        assert_eq!(precompile_in(&dir, Arch::Sm90, &[("k", broken)]), 1);
        assert!(CacheEntry::in_dir(&dir, Arch::Sm90, "k", broken).read(broken).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_different_source_under_the_same_key_is_a_miss() {
        let dir = std::env::temp_dir().join(format!("spindle-cubin-miss-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let entry = CacheEntry::in_dir(&dir, Arch::Sm80, "k", "a");
        std::fs::write(&entry.cubin, b"cubin").unwrap();
        std::fs::write(&entry.log, "log").unwrap();
        std::fs::write(&entry.source, "b").unwrap();
        assert!(entry.read("a").is_none());
        std::fs::write(&entry.source, "a").unwrap();
        assert_eq!(entry.read("a"), Some((b"cubin".to_vec(), "log".to_string())));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
