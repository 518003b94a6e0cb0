//! `spindle bench spmm --target c`: C = A·B with N = 64 dense columns, f32,
//! our C kernels (COO, CSR as an indirect Einsum, GroupCOO over a sweep of
//! g) against sprs and faer, in one process.
//!
//! # What is timed
//!
//! Every variant is compiled once per matrix; its buffers (format arrays, B,
//! C) are prepared before timing. Each measurement is the median of
//! `--repeats` launches after one warm-up launch. The statements are `+=`,
//! so before every launch the output is restored to what the kernel
//! expects (zeros) by a copy *outside* the timed region; the baselines get
//! the same treatment (sprs accumulates into a zeroed output, faer runs with
//! `Accum::Add` on a zeroed output).
//!
//! # Bandwidth model
//!
//! Compulsory traffic: every array of A's format read once (padding
//! included), B read once (K·N·4 bytes), C read once and written once
//! (2·M·N·4 bytes). Achieved bandwidth = that / time, reported as a fraction
//! of a plain memory copy of a 256 MiB buffer measured in the same run
//! (counted as read + write, 2·256 MiB per copy), with one thread for the
//! one-thread rows and with all threads for the all-core rows. The model is
//! a lower bound on traffic: B's rows are gathered once per non-zero, from
//! cache when B fits and from memory when it does not (powerlaw-1M's B is
//! 25.6 MB), so a small fraction on a large matrix partly means re-reads the
//! model does not count, and a fraction above 100% means the data stayed in
//! cache (the small matrices).
//!
//! # Baselines
//!
//! sprs: `csr_mulacc_dense_rowmaj` (one thread). faer 0.24:
//! `sparse_dense_matmul` with a `SparseRowMat` and with a `SparseColMat`
//! times a column-major `Mat`, with `Par::Seq` and `Par::rayon(threads)`; the
//! all-thread ratio uses the faster of the two. faer 0.24's sparse × dense
//! product ignores its `Par` argument (`let _ = par;` in
//! `sparse/linalg/matmul.rs`), so its "all threads" time is a one-thread
//! time: the all-core goal is measured against the library as it is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use ndarray::Array2;
use serde_json::{Value as Json, json};
use spindle_c::exec::CKernel;
use spindle_c::{Buffer, cpu_threads};
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::stats::GroupAnalysis;
use spindle_formats::{Compressed, Coo, FormatSpec};
use spindle_ir::kernel::schedule::Schedule;
use spindle_ir::lang::{Declaration, Declarations, ElemType, check, parse};
use spindle_ir::tensor::{TensorValue, Tensors};

use super::machine;

/// The generated input: 1M non-zeros with power-law row lengths.
const POWER_LAW: &str = "powerlaw:rows=100000,cols=100000,nnz=1000000,seed=1";
const POWER_LAW_NAME: &str = "powerlaw-1M";

/// Dense columns of B and C.
const N: usize = 64;

/// The statement every variant starts from.
const STATEMENT: &str = "C[m,n] += A[m,k] * B[k,n]";

/// Bytes of the buffer the copy bandwidth is measured on.
const COPY_BYTES: usize = 256 << 20;

/// GroupCOO sizes whose padded arrays would exceed this multiple of the
/// non-zeros are skipped (their F(g) is still printed): memory, not speed,
/// is the limit there.
const MAX_STORED_OVER_NNZ: usize = 16;

/// The largest relative error a variant may show against sprs.
const TOLERANCE: f64 = 1e-3;

/// Default schedules. `tile.n=64` makes the dense column one tile.
///
/// A schedule that does not name `tile.p` gets the largest power of two up
/// to a cap ([`COO_P_CAP`], [`GROUPCOO_P_CAP`]) that divides p's extent (nnz
/// for COO and CSR, the number of groups for GroupCOO), so no tile is ragged:
/// the C printer turns a masked tile's gathered row of B into a masked
/// AVX-512 gather instead of a contiguous load, several times slower (see
/// `--sweep`, which reports each tile.p with whether it is ragged).
const COO_SCHEDULE: &str = "tile.n=64";
const CSR_SCHEDULE: &str = "tile.n=64";
/// GroupCOO: `tile.q` is set to g (up to [`MAX_Q_TILE`]) so a group is
/// accumulated in one tile before its single scatter.
const GROUPCOO_SCHEDULE: &str = "tile.n=64";
const MAX_Q_TILE: usize = 256;
pub(crate) const COO_P_CAP: usize = 64;
pub(crate) const GROUPCOO_P_CAP: usize = 16;

/// Tiles of p tried by `--sweep`.
const SWEEP_P: &[usize] = &[1, 2, 4, 8, 16, 32, 64];

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// C11 + OpenMP on the CPU.
    C,
    /// CUDA on an NVIDIA GPU: GroupCOO over g (N = 128) against cuSPARSE
    /// CSR, in f32 and f16.
    Cuda,
}

#[derive(Debug, clap::Args)]
pub struct SpmmArgs {
    /// The backend our kernels run on.
    #[arg(long, value_enum, default_value_t = Target::C)]
    pub target: Target,
    /// Timed repetitions per measurement (the median is reported).
    #[arg(long, default_value_t = 11)]
    pub repeats: usize,
    /// Threads for the all-core measurements (default: every CPU thread).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this folder as `spmm-c-<date>.json` (the
    /// repository keeps them in `bench/results/`).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Override a variant's schedule: `coo=SCHEDULE`, `csr=SCHEDULE`,
    /// `groupcoo=SCHEDULE`, or a bare SCHEDULE for all of them (e.g.
    /// "tile.p=8 tile.n=64"). GroupCOO's tile.q defaults to g.
    #[arg(long = "schedule", value_name = "[VARIANT=]SCHEDULE")]
    pub schedules: Vec<String>,
    /// Only these matrices (file stems such as `ca-CondMat`, or
    /// `powerlaw-1M`); all of them when absent.
    #[arg(long = "matrix", value_name = "NAME")]
    pub matrices: Vec<String>,
    /// Also time COO, CSR and GroupCOO (at g = auto's choice and at the
    /// g of smallest F) under tile.p = 1..64 and print that sweep, each
    /// tile.p marked when it is ragged (how the default tile.p was chosen).
    #[arg(long)]
    pub sweep: bool,
    /// Write the C source of every kernel compiled to this folder.
    #[arg(long, value_name = "DIR")]
    pub emit_c: Option<PathBuf>,
    /// Value types of the CUDA suite (default: f32 and f16).
    #[arg(long = "precision", value_enum)]
    pub precisions: Vec<super::gpu::PrecisionArg>,
    /// CUDA suite: use the default schedule instead of autotuning tiles.
    #[arg(long)]
    pub no_autotune: bool,
}

/// Inputs: name and matrix.
type Inputs = Vec<(String, Coo<f32, i32>)>;

pub fn run(args: SpmmArgs) -> Result<()> {
    if args.target == Target::Cuda {
        let precisions = if args.precisions.is_empty() {
            vec![super::gpu::PrecisionArg::F32, super::gpu::PrecisionArg::F16]
        } else {
            args.precisions.clone()
        };
        return super::gpu::spmm(&super::gpu::GpuOptions {
            repeats: args.repeats,
            json: args.json,
            record: args.record.clone(),
            matrices: args.matrices.clone(),
            precisions: precisions.into_iter().map(|p| p.precision()).collect(),
            autotune: !args.no_autotune,
        });
    }
    let mut inputs: Inputs = Vec::new();
    let files = spindle_formats::data::shared_matrices();
    if files.is_empty() {
        eprintln!("(shared data folder ../shared/data/matrices not found: skipping the real matrices)");
    }
    for path in files {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if wanted(&args.matrices, &name) {
            let coo = spindle_formats::io::read_mtx(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            inputs.push((name, coo));
        }
    }
    if wanted(&args.matrices, POWER_LAW_NAME) {
        let spec: GeneratorSpec = POWER_LAW.parse()?;
        inputs.push((POWER_LAW_NAME.into(), spec.generate()?));
    }
    if inputs.is_empty() {
        bail!("no matrix matches --matrix {}", args.matrices.join(", "));
    }
    let report = suite(&inputs, &Config::from_args(&args)?)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    if let Some(dir) = &args.record {
        std::fs::create_dir_all(dir)?;
        let date = jiff::Zoned::now().strftime("%Y-%m-%d").to_string();
        let path = dir.join(format!("spmm-c-{date}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("recorded {}", path.display());
    }
    Ok(())
}

fn wanted(filter: &[String], name: &str) -> bool {
    filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(name))
}

/// What one run of the suite does, apart from its inputs.
#[derive(Debug, Clone)]
struct Config {
    repeats: usize,
    threads: usize,
    coo: String,
    csr: String,
    groupcoo: String,
    sweep: bool,
    emit_c: Option<PathBuf>,
    copy_bytes: usize,
}

impl Config {
    fn from_args(args: &SpmmArgs) -> Result<Config> {
        let mut c = Config {
            repeats: args.repeats.max(1),
            threads: args.threads.unwrap_or_else(cpu_threads).max(1),
            coo: COO_SCHEDULE.into(),
            csr: CSR_SCHEDULE.into(),
            groupcoo: GROUPCOO_SCHEDULE.into(),
            sweep: args.sweep,
            emit_c: args.emit_c.clone(),
            copy_bytes: COPY_BYTES,
        };
        for s in &args.schedules {
            let (which, text) = match s.split_once('=') {
                Some((k, v)) if ["coo", "csr", "groupcoo"].contains(&k) => (Some(k), v),
                _ => (None, s.as_str()),
            };
            text.parse::<Schedule>().with_context(|| format!("--schedule {s}"))?;
            for (name, slot) in [("coo", &mut c.coo), ("csr", &mut c.csr), ("groupcoo", &mut c.groupcoo)] {
                if which.is_none_or(|w| w == name) {
                    *slot = text.to_string();
                }
            }
        }
        Ok(c)
    }
}

/// Runs every input and returns the report (the JSON that `--json` prints).
fn suite(inputs: &Inputs, config: &Config) -> Result<Json> {
    let load_before = loadavg();
    eprintln!("measuring copy bandwidth ({} MiB)...", config.copy_bytes >> 20);
    let copy_1 = copy_bandwidth(config.copy_bytes, 1, config.repeats);
    let copy_n = copy_bandwidth(config.copy_bytes, config.threads, config.repeats);
    let mut results = Vec::new();
    for (name, coo) in inputs {
        eprintln!(
            "{name}: {}x{}, {} entries, {} repeats...",
            coo.shape[0],
            coo.shape[1],
            coo.nnz(),
            config.repeats
        );
        results.push(measure(name, coo, config, [copy_1, copy_n])?);
    }
    Ok(json!({
        "suite": "spmm",
        "target": "c",
        "statement": STATEMENT,
        "n": N,
        "dtype": "f32",
        "machine": machine(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "repeats": config.repeats,
        "threads": config.threads,
        "schedules": { "coo": config.coo, "csr": config.csr, "groupcoo": config.groupcoo },
        "copy": {
            "bytes": config.copy_bytes,
            "one_thread_gbs": copy_1 / 1e9,
            "all_threads_gbs": copy_n / 1e9,
            "model": "a copy of a buffer of `bytes` counts 2*bytes (read + write)",
        },
        "bandwidth_model": "A's format arrays read once (padding included) + B read once (K*N*4) \
            + C read and written once (2*M*N*4), divided by the time, over the copy bandwidth \
            with the same thread count",
        "goal": "best Spindle variant >= 1.0x sprs on one thread and >= 1.0x faer on all threads",
        "faer_note": "faer 0.24's sparse x dense product ignores Par (`let _ = par;`): \
            its all-thread time is a one-thread time",
        "results": results,
    }))
}

/// `/proc/loadavg` (other work on the machine moves the all-thread times).
fn loadavg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.trim().to_string())
}

/// Bytes per second of `copy_from_slice` over `bytes`, split over `threads`
/// (read + write counted).
fn copy_bandwidth(bytes: usize, threads: usize, repeats: usize) -> f64 {
    let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let mut dst = vec![0u8; bytes];
    let chunk = bytes.div_ceil(threads);
    let t = time_reset(
        repeats,
        &mut dst,
        |_| {},
        |dst| {
            if threads == 1 {
                dst.copy_from_slice(&src);
            } else {
                std::thread::scope(|s| {
                    for (d, c) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
                        s.spawn(move || d.copy_from_slice(c));
                    }
                });
            }
        },
    );
    std::hint::black_box(&dst);
    drop(src);
    2.0 * bytes as f64 / t
}

/// The median of `repeats` timed calls of `run` on `state`, after one
/// warm-up; `reset` runs before each call, outside the timed region.
pub(crate) fn time_reset<S: ?Sized>(
    repeats: usize,
    state: &mut S,
    mut reset: impl FnMut(&mut S),
    mut run: impl FnMut(&mut S),
) -> f64 {
    reset(state);
    run(state);
    let mut times: Vec<f64> = (0..repeats.max(1))
        .map(|_| {
            reset(state);
            let start = Instant::now();
            run(state);
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Max |got − want| / max |want|.
fn rel_error(got: &[f32], want: &[f32]) -> f64 {
    let scale = want.iter().fold(1e-30f64, |m, &x| m.max(f64::from(x).abs()));
    let diff = got.iter().zip(want).fold(0.0f64, |m, (&g, &w)| m.max((f64::from(g) - f64::from(w)).abs()));
    if got.len() != want.len() { f64::INFINITY } else { diff / scale }
}

/// B: K×N values in ±[0.1, 1), seeded.
fn dense_b(k: usize) -> Array2<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    Array2::from_shape_fn((k, N), |_| {
        let m: f32 = rng.random_range(0.1..1.0);
        if rng.random::<bool>() { m } else { -m }
    })
}

/// One of our kernels, ready to launch.
struct Variant {
    name: String,
    format: String,
    schedule: String,
    g: Option<usize>,
    ck: CKernel,
    buffers: Vec<Buffer>,
    out: usize,
    initial: Buffer,
    /// Bytes of A's format arrays.
    a_bytes: usize,
    compile_s: f64,
}

impl Variant {
    /// Times the kernel on `threads` threads, the output restored before
    /// every launch outside the timed region.
    fn time(&mut self, threads: usize, repeats: usize) -> Result<f64> {
        let mut failed = None;
        let Variant { ck, buffers, out, initial, .. } = self;
        let out = *out;
        let t = time_reset(
            repeats,
            buffers,
            |b| restore(&mut b[out], initial),
            |b| {
                if let Err(e) = ck.launch(b, threads) {
                    failed = Some(e);
                }
            },
        );
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(t),
        }
    }

    /// One launch from the initial output; the output as f32.
    fn result(&mut self, threads: usize) -> Result<Vec<f32>> {
        restore(&mut self.buffers[self.out], &self.initial);
        self.ck.launch(&mut self.buffers, threads)?;
        Ok(self.buffers[self.out].to_values::<f32>())
    }
}

fn restore(to: &mut Buffer, from: &Buffer) {
    match (to, from) {
        (Buffer::F32(t), Buffer::F32(f)) => t.copy_from_slice(f),
        (Buffer::F64(t), Buffer::F64(f)) => t.copy_from_slice(f),
        (t, f) => *t = f.clone(),
    }
}

fn buffer_bytes(b: &Buffer) -> usize {
    b.len()
        * match b {
            Buffer::F64(_) | Buffer::I64(_) => 8,
            Buffer::F32(_) | Buffer::I32(_) => 4,
        }
}

/// The shared pieces every variant is built from.
struct Problem<'a> {
    einsum: spindle_ir::lang::Einsum,
    sparse: BTreeMap<String, Coo<f64, i64>>,
    b: &'a Array2<f32>,
    emit_c: Option<&'a Path>,
    matrix: &'a str,
}

impl Problem<'_> {
    /// Rewrites, lowers, compiles and prepares one variant.
    fn variant(&self, name: &str, format: &str, schedule: &str, g: Option<usize>) -> Result<Variant> {
        let what = format!("{}: {name} [{schedule}]", self.matrix);
        let spec: FormatSpec = format.parse().with_context(|| what.clone())?;
        let formats = BTreeMap::from([("A".to_string(), spec)]);
        let rewritten = spindle_ir::rewrite::rewrite(&self.einsum, &formats, &self.sparse)
            .map_err(|d| anyhow::anyhow!("{what}: {d}"))?;
        let einsum = rewritten.check(&self.einsum).map_err(|d| anyhow::anyhow!("{what}: {d}"))?;
        let schedule = &auto_tile_p(schedule, &einsum, if g.is_some() { GROUPCOO_P_CAP } else { COO_P_CAP });
        let parsed: Schedule = schedule.parse().with_context(|| what.clone())?;
        let kernel = spindle_ir::kernel::lower::lower(&einsum, &parsed, "spmm")
            .map_err(|d| anyhow::anyhow!("{what}: {d}"))?;
        let start = Instant::now();
        let ck = CKernel::compile(&kernel).with_context(|| what.clone())?;
        let compile_s = start.elapsed().as_secs_f64();
        if let Some(dir) = self.emit_c {
            std::fs::create_dir_all(dir)?;
            let file = dir.join(format!("{}-{}.c", self.matrix, name.replace([' ', '='], "")));
            std::fs::write(&file, &ck.source).with_context(|| format!("writing {}", file.display()))?;
        }
        let mut tensors: Tensors = rewritten.tensors;
        tensors.insert("B".into(), TensorValue::Values(self.b.mapv(f64::from).into_dyn()));
        let buffers = ck.buffers(&tensors).with_context(|| what.clone())?;
        drop(tensors);
        let out = ck.kernel.tensors.values().position(|t| t.output).context("a kernel has an output")?;
        let a_bytes = ck
            .kernel
            .tensors
            .values()
            .zip(&buffers)
            .filter(|(t, _)| t.name.starts_with("A_"))
            .map(|(_, b)| buffer_bytes(b))
            .sum();
        let initial = buffers[out].clone();
        Ok(Variant {
            name: name.into(),
            format: format.into(),
            schedule: schedule.into(),
            g,
            ck,
            buffers,
            out,
            initial,
            a_bytes,
            compile_s,
        })
    }
}

/// `schedule` with `tile.p=T` added, unless it names tile.p: T is the largest
/// power of two up to `cap` that divides p's extent.
pub(crate) fn auto_tile_p(schedule: &str, einsum: &spindle_ir::lang::Einsum, cap: usize) -> String {
    let Some(p) = einsum.indices.iter().find(|i| i.name == "p") else { return schedule.to_string() };
    if schedule.contains("tile.p=") {
        return schedule.to_string();
    }
    let tile = (0..=cap.trailing_zeros()).rev().map(|s| 1usize << s).find(|t| p.extent % t == 0).unwrap_or(1);
    format!("{schedule} tile.p={tile}")
}

/// GroupCOO's schedule at g: the configured one, with tile.q = g (capped)
/// unless it names tile.q itself.
fn groupcoo_schedule(base: &str, g: usize) -> String {
    if base.contains("tile.q=") { base.to_string() } else { format!("{base} tile.q={}", g.min(MAX_Q_TILE)) }
}

fn measure(name: &str, coo: &Coo<f32, i32>, config: &Config, copy: [f64; 2]) -> Result<Json> {
    let coo = coo.clone().canonicalize();
    let (m, k) = coo.expect_matrix("spmm")?;
    let nnz = coo.nnz();
    let b = dense_b(k);
    let threads = config.threads;
    let repeats = config.repeats;

    // Baselines: sprs on one thread, faer on one and all threads.
    let csr = Compressed::from_coo(&coo, 0)?;
    let a_sprs = csr.to_sprs()?;
    let mut want = Array2::<f32>::zeros((m, N));
    sprs::prod::csr_mulacc_dense_rowmaj(a_sprs.view(), b.view(), want.view_mut());
    let want_flat: Vec<f32> = want.iter().copied().collect();
    let mut c = Array2::<f32>::zeros((m, N));
    let t_sprs = time_reset(
        repeats,
        &mut c,
        |c| c.fill(0.0),
        |c| sprs::prod::csr_mulacc_dense_rowmaj(a_sprs.view(), b.view(), c.view_mut()),
    );
    let csr_bytes = 4 * (csr.pos.len() + csr.crd.len() + csr.val.len());
    let dense_bytes = 4 * (k * N + 2 * m * N);

    let faer = faer_baselines(&coo, &b, &want_flat, threads, repeats)?;

    // Our kernels.
    let problem = Problem {
        einsum: spmm_einsum(m, k)?,
        sparse: BTreeMap::from([("A".to_string(), coo.cast::<f64, i64>()?)]),
        b: &b,
        emit_c: config.emit_c.as_deref(),
        matrix: name,
    };
    let occupancy = coo.occupancy(0);
    let analysis = GroupAnalysis::new(&occupancy);
    let mut plans: Vec<(String, String, String, Option<usize>)> = vec![
        ("coo".into(), "coo".into(), config.coo.clone(), None),
        ("csr".into(), "csr".into(), config.csr.clone(), None),
    ];
    let mut skipped = Vec::new();
    for (&g, &f) in &analysis.f_of_g {
        let stored = f / (g as u64 + 1) * g as u64;
        if stored as usize > MAX_STORED_OVER_NNZ * nnz.max(1) {
            skipped.push(json!({ "g": g, "f_of_g": f, "stored": stored,
                "reason": format!("stored entries > {MAX_STORED_OVER_NNZ} x nnz") }));
            continue;
        }
        plans.push((
            format!("groupcoo g={g}"),
            format!("groupcoo:dim=0,g={g}"),
            groupcoo_schedule(&config.groupcoo, g),
            Some(g),
        ));
    }

    let mut variants = Vec::new();
    for (vname, format, schedule, g) in plans {
        let mut v = problem.variant(&vname, &format, &schedule, g)?;
        let got = v.result(threads)?;
        let err_n = rel_error(&got, &want_flat);
        let got = v.result(1)?;
        let err_1 = rel_error(&got, &want_flat);
        let err = err_1.max(err_n);
        ensure!(
            err <= TOLERANCE,
            "{name}: {vname} [{schedule}] differs from sprs: max relative error {err:.3e} > {TOLERANCE:e}"
        );
        let t1 = v.time(1, repeats)?;
        let tn = v.time(threads, repeats)?;
        let bytes = (v.a_bytes + dense_bytes) as f64;
        eprintln!("  {vname:<14} 1 thread {:>9.3} ms   {threads} threads {:>9.3} ms", t1 * 1e3, tn * 1e3);
        variants.push(json!({
            "variant": v.name,
            "format": v.format,
            "schedule": v.schedule,
            "g": v.g,
            "f_of_g": v.g.map(|g| analysis.f_of_g[&g]),
            "padding": v.g.map(|g| analysis.padding_of_g[&g]),
            "a_bytes": v.a_bytes,
            "model_bytes": bytes,
            "compile_s": v.compile_s,
            "cache_hit": v.ck.program.cache_hit(),
            "max_rel_error": err,
            "one_thread_s": t1,
            "all_threads_s": tn,
            "one_thread_bw_fraction": bytes / t1 / copy[0],
            "all_threads_bw_fraction": bytes / tn / copy[1],
            "vs_sprs_one_thread": t_sprs / t1,
            "vs_faer_all_threads": faer.best_all / tn,
        }));
    }

    let sweep = if config.sweep { sweep(&problem, config, &analysis, &want_flat)? } else { Json::Null };
    let user = as_a_user_gets_it(&coo, &b, &want_flat, threads, repeats)?;
    eprintln!(
        "  {:<14} 1 thread {:>9.3} ms   default {:>9.3} ms",
        "user (csr)",
        user["one_thread_s"].as_f64().unwrap_or(f64::NAN) * 1e3,
        user["default_s"].as_f64().unwrap_or(f64::NAN) * 1e3
    );

    // The GroupCOO sweep against F(g).
    let groups: Vec<&Json> = variants.iter().filter(|v| !v["g"].is_null()).collect();
    let fastest = |key: &str| {
        groups
            .iter()
            .min_by(|a, b| {
                a[key].as_f64().unwrap_or(f64::INFINITY).total_cmp(&b[key].as_f64().unwrap_or(f64::INFINITY))
            })
            .and_then(|v| v["g"].as_u64())
            .map(|g| g as usize)
    };
    let [lo, hi] = analysis.g_star_pow2;
    let near = |g: Option<usize>| {
        g.map(|g| {
            [lo, hi].iter().any(|&s| {
                let (a, b) = (s.max(g) as f64, s.min(g) as f64);
                a / b <= 2.0
            })
        })
    };
    let (fast_1, fast_n) = (fastest("one_thread_s"), fastest("all_threads_s"));

    let best = |key: &str| {
        variants
            .iter()
            .min_by(|a, b| {
                a[key].as_f64().unwrap_or(f64::INFINITY).total_cmp(&b[key].as_f64().unwrap_or(f64::INFINITY))
            })
            .map(|v| (v["variant"].as_str().unwrap_or("?").to_string(), v[key].as_f64().unwrap_or(f64::NAN)))
            .unwrap_or_default()
    };
    let (best_1, t_best_1) = best("one_thread_s");
    let (best_n, t_best_n) = best("all_threads_s");
    Ok(json!({
        "matrix": name,
        "rows": m,
        "cols": k,
        "nnz": nnz,
        "max_occupancy": analysis.max_occupancy,
        "g_star": analysis.g_star,
        "g_star_pow2": analysis.g_star_pow2,
        "g_best_f": analysis.g_best,
        "baselines": {
            "sprs_one_thread_s": t_sprs,
            "sprs_one_thread_bw_fraction": (csr_bytes + dense_bytes) as f64 / t_sprs / copy[0],
            "faer_csr_one_thread_s": faer.csr_1,
            "faer_csr_all_threads_s": faer.csr_n,
            "faer_csc_one_thread_s": faer.csc_1,
            "faer_csc_all_threads_s": faer.csc_n,
            "faer_best_all_threads_s": faer.best_all,
            "faer_all_threads_bw_fraction": (csr_bytes + dense_bytes) as f64 / faer.best_all / copy[1],
        },
        "variants": variants,
        "groupcoo": {
            "f_of_g": analysis.f_of_g,
            "skipped": skipped,
            "fastest_g_one_thread": fast_1,
            "fastest_g_all_threads": fast_n,
            "g_star_within_one_pow2_one_thread": near(fast_1),
            "g_star_within_one_pow2_all_threads": near(fast_n),
        },
        "best": {
            "one_thread_variant": best_1,
            "one_thread_s": t_best_1,
            "vs_sprs_one_thread": t_sprs / t_best_1,
            "all_threads_variant": best_n,
            "all_threads_s": t_best_n,
            "vs_faer_all_threads": faer.best_all / t_best_n,
            "goal_one_thread": t_sprs / t_best_1 >= 1.0,
            "goal_all_threads": faer.best_all / t_best_n >= 1.0,
        },
        "sweep": sweep,
        "user": user,
    }))
}

/// What `spindle run "C[m,n] += A[m,k] * B[k,n]" --format A=csr` gives with
/// no schedule: the driver's autotuned default (tiles and threads), and the
/// same with `--threads 1`. Timed like the variants (median, the output
/// reset before each launch outside the clock).
fn as_a_user_gets_it(
    coo: &Coo<f32, i32>,
    b: &Array2<f32>,
    want: &[f32],
    threads: usize,
    repeats: usize,
) -> Result<Json> {
    let prepared = spindle::Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", coo.clone())
        .tensor("B", b.clone())
        .format("A", "csr")
        .prepare()?;
    let backend = spindle::CBackend::new();
    let timing = spindle::TimingOptions { warmup: 1, repeats };
    let mut row = serde_json::Map::new();
    for (key, fixed) in [("one_thread", Some(1)), ("default", None)] {
        let mut tuner = spindle::Tuner::for_target(spindle::Target::C);
        tuner.threads = fixed;
        let compiled = prepared.autotune(&backend, &mut tuner)?;
        let (out, t) = compiled.run_and_time(timing)?;
        let got: Vec<f32> = out.iter().map(|&x| x as f32).collect();
        let err = rel_error(&got, want);
        ensure!(err <= TOLERANCE, "user csr [{}] differs from sprs: {err:.3e}", compiled.schedule);
        row.insert(format!("{key}_s"), json!(t.median_ms / 1e3));
        row.insert(format!("{key}_schedule"), json!(compiled.schedule.to_string()));
    }
    row.insert("threads".into(), json!(threads));
    Ok(Json::Object(row))
}

/// `C[m,n] += A[m,k] * B[k,n]` checked for an M×K matrix A, f32.
fn spmm_einsum(m: usize, k: usize) -> Result<spindle_ir::lang::Einsum> {
    let f32t = ElemType::parse("f32").context("f32 is a dtype")?;
    let declarations: Declarations = [("A", vec![m, k]), ("B", vec![k, N]), ("C", vec![m, N])]
        .into_iter()
        .map(|(n, shape)| (n.to_string(), Declaration { shape, dtype: f32t }))
        .collect();
    let statement = parse(STATEMENT).map_err(|d| anyhow::anyhow!("{}", d.render(STATEMENT, false)))?;
    check(&statement, &declarations).map_err(|d| anyhow::anyhow!("{}", d.render(STATEMENT, false)))
}

/// faer's times: CSR (`SparseRowMat`) and CSC (`SparseColMat`) times a dense
/// column-major `Mat`, with `Par::Seq` and `Par::rayon(threads)`.
#[derive(Debug)]
pub(crate) struct FaerTimes {
    pub(crate) csr_1: f64,
    pub(crate) csr_n: f64,
    pub(crate) csc_1: f64,
    pub(crate) csc_n: f64,
    pub(crate) best_all: f64,
}

pub(crate) fn faer_baselines(
    coo: &Coo<f32, i32>,
    b: &Array2<f32>,
    want: &[f32],
    threads: usize,
    repeats: usize,
) -> Result<FaerTimes> {
    use faer::sparse::linalg::matmul::sparse_dense_matmul;
    use faer::sparse::{SparseColMat, SparseRowMat, SymbolicSparseColMat, SymbolicSparseRowMat};
    use faer::{Accum, Mat, Par};

    let (m, k) = coo.expect_matrix("spmm")?;
    let idx = |v: &[i32]| v.iter().map(|&x| x as usize).collect::<Vec<usize>>();
    let csr = Compressed::from_coo(coo, 0)?;
    let a_row = SparseRowMat::new(
        SymbolicSparseRowMat::new_checked(m, k, idx(&csr.pos), None, idx(&csr.crd)),
        csr.val.clone(),
    );
    let csc = Compressed::from_coo(coo, 1)?;
    let a_col = SparseColMat::new(
        SymbolicSparseColMat::new_checked(m, k, idx(&csc.pos), None, idx(&csc.crd)),
        csc.val.clone(),
    );
    // B's columns (N in the suite; any count from a notebook cell).
    let n = b.ncols();
    let fb = Mat::<f32>::from_fn(k, n, |i, j| b[[i, j]]);
    let mut c = Mat::<f32>::zeros(m, n);
    let rayon = Par::rayon(threads);
    let mut times = [0.0; 4];
    for (slot, (row, par)) in
        [(true, Par::Seq), (true, rayon), (false, Par::Seq), (false, rayon)].into_iter().enumerate()
    {
        let go = |c: &mut Mat<f32>| {
            if row {
                sparse_dense_matmul(c.as_mut(), Accum::Add, a_row.as_ref(), fb.as_ref(), 1.0, par);
            } else {
                sparse_dense_matmul(c.as_mut(), Accum::Add, a_col.as_ref(), fb.as_ref(), 1.0, par);
            }
        };
        c.fill(0.0);
        go(&mut c);
        let got: Vec<f32> =
            (0..m).flat_map(|i| (0..n).map(move |j| (i, j))).map(|(i, j)| c[(i, j)]).collect();
        let err = rel_error(&got, want);
        ensure!(
            err <= TOLERANCE,
            "faer ({}) differs from sprs: max relative error {err:.3e}",
            if row { "csr" } else { "csc" }
        );
        times[slot] = time_reset(repeats, &mut c, |c| c.fill(0.0), go);
    }
    Ok(FaerTimes {
        csr_1: times[0],
        csr_n: times[1],
        csc_1: times[2],
        csc_n: times[3],
        best_all: times[1].min(times[3]),
    })
}

/// COO, CSR and GroupCOO (g = auto's choice and the F-best g) under each tile.p of
/// [`SWEEP_P`], on one and all threads.
fn sweep(problem: &Problem<'_>, config: &Config, analysis: &GroupAnalysis, want: &[f32]) -> Result<Json> {
    let [lo, hi] = analysis.g_star_pow2;
    let g_auto = if analysis.f_of_g.get(&hi) < analysis.f_of_g.get(&lo) { hi } else { lo };
    let mut plans = vec![
        ("coo".to_string(), "coo".to_string(), "tile.n=64".to_string(), None),
        ("csr".to_string(), "csr".to_string(), "tile.n=64".to_string(), None),
    ];
    for g in [g_auto, analysis.g_best].into_iter().collect::<std::collections::BTreeSet<_>>() {
        plans.push((
            format!("groupcoo g={g}"),
            format!("groupcoo:dim=0,g={g}"),
            groupcoo_schedule("tile.n=64", g),
            Some(g),
        ));
    }
    let mut rows = Vec::new();
    for &p in SWEEP_P {
        for (vname, format, base, g) in &plans {
            let schedule = format!("{base} tile.p={p}");
            let mut v = problem.variant(vname, format, &schedule, *g)?;
            let extent = v.ck.kernel.axes.values().find(|a| a.name == "p").map_or(0, |a| a.extent);
            let err = rel_error(&v.result(config.threads)?, want);
            ensure!(err <= TOLERANCE, "sweep {vname} [{schedule}]: max relative error {err:.3e}");
            let t1 = v.time(1, config.repeats)?;
            let tn = v.time(config.threads, config.repeats)?;
            let ragged = if extent % p != 0 { " (ragged)" } else { "" };
            eprintln!("  sweep {vname:<14} tile.p={p:<3} {:>9.3} ms {:>9.3} ms{ragged}", t1 * 1e3, tn * 1e3);
            rows.push(json!({ "variant": vname, "tile_p": p, "schedule": schedule, "p_extent": extent,
                "ragged": extent % p != 0, "one_thread_s": t1, "all_threads_s": tn }));
        }
    }
    Ok(Json::Array(rows))
}

fn ms(v: &Json) -> String {
    match v.as_f64() {
        Some(x) => format!("{:.3}", x * 1e3),
        None => "-".into(),
    }
}

fn ratio(v: &Json) -> String {
    match v.as_f64() {
        Some(x) => format!("{x:.2}x"),
        None => "-".into(),
    }
}

fn frac(v: &Json) -> String {
    match v.as_f64() {
        Some(x) => format!("{:.0}%", x * 100.0),
        None => "-".into(),
    }
}

fn print_report(r: &Json) {
    let threads = r["threads"].as_u64().unwrap_or(1);
    println!(
        "spmm C[m,n] += A[m,k] * B[k,n], N = {N}, f32; median of {} repeats; 1 thread and {threads} threads",
        r["repeats"]
    );
    println!(
        "copy bandwidth ({} MiB, read+write): 1 thread {:.1} GB/s, {threads} threads {:.1} GB/s",
        r["copy"]["bytes"].as_u64().unwrap_or(0) >> 20,
        r["copy"]["one_thread_gbs"].as_f64().unwrap_or(f64::NAN),
        r["copy"]["all_threads_gbs"].as_f64().unwrap_or(f64::NAN),
    );
    println!("bandwidth model: {}", r["bandwidth_model"].as_str().unwrap_or(""));
    println!(
        "load average before/after: {} / {}",
        r["loadavg_before"].as_str().unwrap_or("?"),
        r["loadavg_after"].as_str().unwrap_or("?")
    );
    for m in r["results"].as_array().into_iter().flatten() {
        println!();
        println!(
            "{}  {}x{}  nnz {}  max row {}  g* {:.2} (between {}), F-best g {}",
            m["matrix"].as_str().unwrap_or("?"),
            m["rows"],
            m["cols"],
            m["nnz"],
            m["max_occupancy"],
            m["g_star"].as_f64().unwrap_or(f64::NAN),
            m["g_star_pow2"]
                .as_array()
                .map(|a| a.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" and "))
                .unwrap_or_default(),
            m["g_best_f"],
        );
        println!(
            "  {:<16} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>12} {:>8}",
            "variant", "1t ms", "all ms", "vs sprs", "vs faer", "bw 1t", "bw all", "F(g)/min", "padding"
        );
        let f_min = m["groupcoo"]["f_of_g"]
            .as_object()
            .and_then(|f| f.values().filter_map(Json::as_f64).min_by(f64::total_cmp))
            .unwrap_or(f64::NAN);
        let base = &m["baselines"];
        println!(
            "  {:<16} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}",
            "sprs csr",
            ms(&base["sprs_one_thread_s"]),
            "-",
            "1.00x",
            "-",
            frac(&base["sprs_one_thread_bw_fraction"]),
            "-"
        );
        for (label, one, all) in [
            ("faer csr", "faer_csr_one_thread_s", "faer_csr_all_threads_s"),
            ("faer csc", "faer_csc_one_thread_s", "faer_csc_all_threads_s"),
        ] {
            let vs_sprs = base["sprs_one_thread_s"].as_f64().zip(base[one].as_f64()).map(|(s, t)| s / t);
            let vs_faer =
                base["faer_best_all_threads_s"].as_f64().zip(base[all].as_f64()).map(|(f, t)| f / t);
            println!(
                "  {:<16} {:>10} {:>10} {:>9} {:>9}",
                label,
                ms(&base[one]),
                ms(&base[all]),
                ratio(&json!(vs_sprs)),
                ratio(&json!(vs_faer)),
            );
        }
        for v in m["variants"].as_array().into_iter().flatten() {
            println!(
                "  {:<16} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>12} {:>8}",
                v["variant"].as_str().unwrap_or("?"),
                ms(&v["one_thread_s"]),
                ms(&v["all_threads_s"]),
                ratio(&v["vs_sprs_one_thread"]),
                ratio(&v["vs_faer_all_threads"]),
                frac(&v["one_thread_bw_fraction"]),
                frac(&v["all_threads_bw_fraction"]),
                v["f_of_g"].as_f64().map(|f| format!("{:.2}", f / f_min)).unwrap_or_else(|| "-".into()),
                frac(&v["padding"]),
            );
        }
        let gc = &m["groupcoo"];
        for s in gc["skipped"].as_array().into_iter().flatten() {
            println!(
                "  groupcoo g={:<6} skipped ({}), F(g) = {}",
                s["g"],
                s["reason"].as_str().unwrap_or(""),
                s["f_of_g"]
            );
        }
        let yes_no = |v: &Json| match v.as_bool() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        println!(
            "  F(g): fastest g {} (1 thread), {} ({threads} threads); g* within one power of two: {}, {}",
            gc["fastest_g_one_thread"],
            gc["fastest_g_all_threads"],
            yes_no(&gc["g_star_within_one_pow2_one_thread"]),
            yes_no(&gc["g_star_within_one_pow2_all_threads"]),
        );
        let user = &m["user"];
        println!(
            "  {:<16} {:>10} {:>10}   (`spindle run` with no schedule: {})",
            "as a user gets it",
            ms(&user["one_thread_s"]),
            ms(&user["default_s"]),
            user["default_schedule"].as_str().unwrap_or("?"),
        );
        let best = &m["best"];
        println!(
            "  best: {} {} ms = {} sprs (1 thread); {} {} ms = {} faer ({threads} threads)",
            best["one_thread_variant"].as_str().unwrap_or("?"),
            ms(&best["one_thread_s"]),
            ratio(&best["vs_sprs_one_thread"]),
            best["all_threads_variant"].as_str().unwrap_or("?"),
            ms(&best["all_threads_s"]),
            ratio(&best["vs_faer_all_threads"]),
        );
        if let Some(rows) = m["sweep"].as_array() {
            println!("  tile.p sweep (ms, 1 thread / {threads} threads):");
            for row in rows {
                println!(
                    "    {:<16} tile.p={:<3} {:>10} {:>10}{}",
                    row["variant"].as_str().unwrap_or("?"),
                    row["tile_p"],
                    ms(&row["one_thread_s"]),
                    ms(&row["all_threads_s"]),
                    if row["ragged"].as_bool() == Some(true) { "  (ragged)" } else { "" },
                );
            }
        }
    }
    println!();
    println!("goal: {}", r["goal"].as_str().unwrap_or(""));
    println!("note: {}", r["faer_note"].as_str().unwrap_or(""));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_runs_on_a_tiny_matrix() {
        let spec: GeneratorSpec = "powerlaw:rows=200,cols=150,nnz=1500,seed=3".parse().unwrap();
        let inputs: Inputs = vec![("tiny".into(), spec.generate().unwrap())];
        let config = Config {
            repeats: 1,
            threads: 2,
            coo: COO_SCHEDULE.into(),
            csr: CSR_SCHEDULE.into(),
            groupcoo: GROUPCOO_SCHEDULE.into(),
            sweep: false,
            emit_c: None,
            copy_bytes: 1 << 20,
        };
        let report = suite(&inputs, &config).unwrap();
        assert_eq!(report["suite"], "spmm");
        assert_eq!(report["repeats"], 1);
        assert!(report["copy"]["one_thread_gbs"].as_f64().unwrap() > 0.0);
        let m = &report["results"][0];
        assert_eq!(m["matrix"], "tiny");
        assert_eq!(m["nnz"], 1500);
        let variants = m["variants"].as_array().unwrap();
        let names: Vec<&str> = variants.iter().map(|v| v["variant"].as_str().unwrap()).collect();
        assert!(names.starts_with(&["coo", "csr", "groupcoo g=1"]), "{names:?}");
        // g runs over the powers of two up to the maximum occupancy, each
        // timed or skipped for its padding.
        let top = m["max_occupancy"].as_u64().unwrap().next_power_of_two();
        let skipped: Vec<u64> =
            m["groupcoo"]["skipped"].as_array().unwrap().iter().map(|s| s["g"].as_u64().unwrap()).collect();
        for g in std::iter::successors(Some(1u64), |g| Some(g * 2)).take_while(|&g| g <= top) {
            assert!(
                names.contains(&format!("groupcoo g={g}").as_str()) != skipped.contains(&g),
                "g={g}: {names:?}, skipped {skipped:?}"
            );
        }
        for v in variants {
            assert!(v["max_rel_error"].as_f64().unwrap() <= TOLERANCE);
            for key in ["one_thread_s", "all_threads_s", "one_thread_bw_fraction", "vs_sprs_one_thread"] {
                assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {v}");
            }
        }
        for key in ["sprs_one_thread_s", "faer_csr_one_thread_s", "faer_best_all_threads_s"] {
            assert!(m["baselines"][key].as_f64().unwrap() > 0.0, "{key}");
        }
        assert!(m["groupcoo"]["fastest_g_one_thread"].is_u64());
        assert!(m["groupcoo"]["g_star_within_one_pow2_one_thread"].is_boolean());
        assert!(m["best"]["vs_sprs_one_thread"].as_f64().unwrap() > 0.0);
        assert!(m["best"]["goal_one_thread"].is_boolean() && m["best"]["goal_all_threads"].is_boolean());
        // The table prints without panicking.
        print_report(&report);
    }

    #[test]
    fn schedules_override_per_variant() {
        let args = SpmmArgs {
            target: Target::C,
            repeats: 3,
            threads: Some(1),
            json: false,
            record: None,
            schedules: vec!["tile.p=8 tile.n=64".into(), "groupcoo=tile.p=2 tile.n=32".into()],
            matrices: vec![],
            sweep: false,
            emit_c: None,
            precisions: vec![],
            no_autotune: false,
        };
        let c = Config::from_args(&args).unwrap();
        assert_eq!(c.coo, "tile.p=8 tile.n=64");
        assert_eq!(c.groupcoo, "tile.p=2 tile.n=32");
        assert_eq!(groupcoo_schedule(&c.groupcoo, 2048), "tile.p=2 tile.n=32 tile.q=256");
        assert!(Config::from_args(&SpmmArgs { schedules: vec!["tile.p=3".into()], ..args }).is_err());
    }

    #[test]
    fn relative_error() {
        assert_eq!(rel_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_error(&[1.0, 2.1], &[1.0, 2.0]) - 0.05).abs() < 1e-6);
        assert!(rel_error(&[1.0], &[1.0, 2.0]).is_infinite());
    }
}
