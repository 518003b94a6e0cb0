//! `spindle check` and `spindle eval`: the Einsum language from the command
//! line.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use ndarray::ArrayD;
use rand::{Rng, SeedableRng};
use spindle_formats::{Coo, DType, FormatSpec};
use spindle_ir::lang::{
    Declaration, Declarations, Diagnostic, Einsum, ElemType, ExtentSource, Role, Statement, check,
    declare_output, parse,
};
use spindle_ir::tensor::{TensorValue, Tensors};

/// A diagnostic already printed with its caret; the exit code is 1.
#[derive(Debug)]
pub struct Reported;

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the statement has errors")
    }
}

impl std::error::Error for Reported {}

fn report(d: &Diagnostic, src: &str) -> anyhow::Error {
    eprint!("{}", d.render(src, std::io::stderr().is_terminal()));
    anyhow!(Reported)
}

/// `T=64x32` or `T=64x32:f16`; `T=scalar` for rank 0.
fn parse_shape(arg: &str) -> Result<(String, Declaration)> {
    let (name, rest) =
        arg.split_once('=').ok_or_else(|| anyhow!("--shape {arg}: expected NAME=DIMS[:DTYPE]"))?;
    let (dims, dtype) = rest.split_once(':').unwrap_or((rest, "f32"));
    let dtype = ElemType::parse(dtype)
        .ok_or_else(|| anyhow!("--shape {arg}: unknown dtype `{dtype}` (f64, f32, f16, bf16, i32, i64)"))?;
    Ok((
        name.to_string(),
        Declaration { shape: parse_dims(dims).with_context(|| format!("--shape {arg}"))?, dtype },
    ))
}

fn parse_dims(dims: &str) -> Result<Vec<usize>> {
    if dims == "scalar" || dims.is_empty() {
        return Ok(Vec::new());
    }
    dims.split('x')
        .map(|d| d.trim().parse::<usize>().map_err(|_| anyhow!("`{d}` is not a dimension")))
        .collect()
}

pub fn run_check(statement: &str, shapes: &[String]) -> Result<()> {
    let mut declarations = Declarations::new();
    for s in shapes {
        let (name, decl) = parse_shape(s.as_str())?;
        declarations.insert(name, decl);
    }
    let parsed = parse(statement).map_err(|d| report(&d, statement))?;
    require_output(&parsed, &mut declarations)?;
    let einsum = check(&parsed, &declarations).map_err(|d| report(&d, statement))?;
    print!("{}", describe(&einsum));
    Ok(())
}

/// The typed statement: tensors with shapes and roles, indices with extents.
pub fn describe(e: &Einsum) -> String {
    use std::fmt::Write as _;
    let mut out = format!("{}\n\ntensors\n", e.statement);
    for t in e.tensors.values() {
        let role = match t.role {
            Role::Output => "output",
            Role::Operand => "operand",
            Role::Index => "index",
        };
        let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        let shape = if shape.is_empty() { "scalar".to_string() } else { shape.join("x") };
        let _ = writeln!(out, "  {:<10} {:<8} {:<14} {}", t.name, role, shape, t.dtype.name());
    }
    out.push_str("\nindices\n");
    for i in &e.indices {
        let source = match &i.source {
            ExtentSource::Tensor { tensor, dim } => format!("from {tensor} dim {dim}"),
            ExtentSource::Where => "from where".to_string(),
        };
        let kind = if i.reduced { "reduced" } else { "" };
        let _ = writeln!(out, "  {:<10} {:<8} {:<14} {}", i.name, i.extent, source, kind);
    }
    out
}

/// Declares the output from the right-hand side, or says how to give it.
fn require_output(statement: &Statement, declarations: &mut Declarations) -> Result<()> {
    if declare_output(statement, declarations) {
        return Ok(());
    }
    let name = &statement.lhs.tensor.name;
    bail!(
        "the shape of the output `{name}` cannot be worked out from the right-hand side: give it with --shape {name}=DIMS"
    )
}

/// The statement and data options `eval`, `compile` and `run` share.
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// The statement, e.g. "C[m,n] += A[m,k] * B[k,n]".
    pub statement: String,
    /// Data for a tensor: NAME=file.npy (dense values, or integer
    /// indices), NAME=file.mtx or NAME=file.tns (sparse).
    #[arg(long = "tensor", value_name = "NAME=PATH")]
    pub tensors: Vec<String>,
    /// Random data: NAME=DIMS:DTYPE:SEED (values in ±[0.1, 1)), or
    /// NAME=DIMS:i32:SEED:MAX for index tensors with values in 0..MAX.
    #[arg(long = "rand", value_name = "NAME=DIMS:DTYPE:SEED[:MAX]")]
    pub rand: Vec<String>,
    /// Shapes of tensors without data (usually the output).
    #[arg(long = "shape", value_name = "NAME=DIMS[:DTYPE]")]
    pub shapes: Vec<String>,
    /// Store a tensor in a format and rewrite the statement over the
    /// format's arrays first (coo, csr, ell, groupcoo, blockgroupcoo),
    /// e.g. A=groupcoo:dim=0,g=8.
    #[arg(long = "format", value_name = "NAME=FORMAT")]
    pub formats: Vec<String>,
}

/// A statement ready to evaluate or compile: checked (and rewritten when
/// formats were given), with its data.
#[derive(Debug)]
pub struct Prepared {
    pub einsum: Einsum,
    pub data: Tensors,
    /// The text the statement's spans point into.
    pub source: String,
}

impl Prepared {
    /// Renders a diagnostic against the statement's text.
    pub fn report(&self, d: &Diagnostic) -> anyhow::Error {
        report(d, &self.source)
    }
}

pub fn prepare(args: &DataArgs) -> Result<Prepared> {
    let src = args.statement.as_str();
    let parsed = parse(src).map_err(|d| report(&d, src))?;
    let mut formats = BTreeMap::new();
    for arg in &args.formats {
        let (name, spec) =
            arg.split_once('=').ok_or_else(|| anyhow!("--format {arg}: expected NAME=FORMAT"))?;
        formats
            .insert(name.to_string(), spec.parse::<FormatSpec>().with_context(|| format!("--format {arg}"))?);
    }
    let mut data = Tensors::new();
    let mut declarations = Declarations::new();
    let mut sparse: BTreeMap<String, Coo<f64, i64>> = BTreeMap::new();
    for arg in &args.tensors {
        let (name, path) =
            arg.split_once('=').ok_or_else(|| anyhow!("--tensor {arg}: expected NAME=PATH"))?;
        // A sparse file stays sparse when it gets a format: only its
        // entries are needed, never a dense copy.
        match load_tensor(Path::new(path), !formats.contains_key(name))
            .with_context(|| format!("--tensor {arg}"))?
        {
            Loaded::Dense(value) => {
                declarations.insert(name.to_string(), value.declaration());
                data.insert(name.to_string(), value);
            }
            Loaded::Sparse(coo, dense) => {
                let dtype = ElemType::Value(DType::F32);
                declarations.insert(name.to_string(), Declaration { shape: coo.shape.clone(), dtype });
                if let Some(dense) = dense {
                    data.insert(name.to_string(), TensorValue::Values(dense));
                }
                sparse.insert(name.to_string(), coo);
            }
        }
    }
    for arg in &args.rand {
        let (name, value, dtype) = random_tensor(arg.as_str())?;
        declarations.insert(name.clone(), Declaration { shape: value.shape().to_vec(), dtype });
        data.insert(name, value);
    }
    for s in &args.shapes {
        let (name, decl) = parse_shape(s.as_str())?;
        declarations.insert(name, decl);
    }
    require_output(&parsed, &mut declarations)?;
    let mut einsum = check(&parsed, &declarations).map_err(|d| report(&d, src))?;
    // Diagnostics from here on point into the text of the statement that
    // runs: the original, or the rewritten one printed below.
    let mut source = src.to_string();

    if !formats.is_empty() {
        for name in formats.keys() {
            if !sparse.contains_key(name) {
                let Some(TensorValue::Values(dense)) = data.get(name) else {
                    bail!("--format {name}=...: `{name}` needs value data (--tensor or --rand)");
                };
                sparse.insert(name.clone(), Coo::from_ndarray(dense)?);
            }
        }
        let rewritten =
            spindle_ir::rewrite::rewrite(&einsum, &formats, &sparse).map_err(|d| report(&d, src))?;
        source = rewritten.statement.to_string();
        println!("rewritten: {source}");
        let reparsed = parse(&source).map_err(|d| report(&d, &source))?;
        einsum = check(&reparsed, &rewritten.all_declarations(&einsum)).map_err(|d| report(&d, &source))?;
        for name in &rewritten.replaced {
            data.remove(name);
        }
        data.extend(rewritten.tensors);
    }

    Ok(Prepared { einsum, data, source })
}

pub fn run_eval(args: &DataArgs, out: Option<&str>) -> Result<()> {
    let Prepared { einsum, data, source } = prepare(args)?;
    let start = std::time::Instant::now();
    let result = spindle_ir::eval::evaluate(&einsum, &data).map_err(|d| report(&d, &source))?;
    let points: u128 = einsum.indices.iter().map(|i| i.extent as u128).product();
    eprintln!(
        "evaluated {} ({points} points) in {:.1} ms",
        einsum.output().name,
        start.elapsed().as_secs_f64() * 1e3
    );
    emit_output(&einsum, &result, out)
}

/// Writes the output to `NAME=PATH.npy`, or prints a preview.
pub(crate) fn emit_output(einsum: &Einsum, result: &ArrayD<f64>, out: Option<&str>) -> Result<()> {
    let output = einsum.output();
    match out {
        Some(out) => {
            let (name, path) =
                out.split_once('=').ok_or_else(|| anyhow!("--out {out}: expected NAME=PATH.npy"))?;
            if name != output.name {
                bail!("--out {out}: the statement's output is `{}`", output.name);
            }
            write_output(Path::new(path), result, output.dtype)?;
            println!("wrote {path} ({} {})", shape_text(result.shape()), output.dtype.name());
        }
        None => println!("{}", preview(result)),
    }
    Ok(())
}

/// Where kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// C11 + OpenMP, compiled with the system C compiler.
    C,
    /// CUDA C for NVIDIA GPUs, compiled by NVRTC (running needs an NVIDIA GPU
    /// and its driver).
    Cuda,
}

/// What `spindle compile` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// The kernel IR.
    Ir,
    /// The target's source: C for `--target c`, CUDA C for `--target cuda`.
    Source,
    /// The C source (whatever the target).
    C,
    /// The CUDA source (whatever the target).
    Cuda,
}

/// A GPU architecture to compile CUDA for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuArch {
    /// Ampere (A100).
    #[value(name = "sm_80", alias = "sm80")]
    Sm80,
    /// Hopper (H100, H200).
    #[value(name = "sm_90", alias = "sm90")]
    Sm90,
}

pub(crate) fn lower_prepared(prepared: &Prepared, schedule: &str) -> Result<spindle_ir::kernel::Kernel> {
    let schedule: spindle_ir::kernel::schedule::Schedule = schedule.parse()?;
    spindle_ir::kernel::lower::lower(&prepared.einsum, &schedule, "spindle").map_err(|d| prepared.report(&d))
}

/// Options of `spindle compile`.
#[derive(Debug)]
pub struct CompileArgs<'a> {
    pub schedule: &'a str,
    pub target: Target,
    pub emit: Emit,
    pub arch: GpuArch,
    pub resources: bool,
}

pub fn run_compile(args: &DataArgs, c: &CompileArgs<'_>) -> Result<()> {
    let prepared = prepare(args)?;
    let kernel = lower_prepared(&prepared, c.schedule)?;
    let cuda = || spindle_cuda::print::print_kernel(&kernel, "spindle_kernel", &Default::default());
    match (c.emit, c.target) {
        (Emit::Ir, _) => print!("{kernel}"),
        (Emit::C, _) | (Emit::Source, Target::C) => {
            print!("{}", spindle_c::print::print(&kernel, spindle_c::exec::SYMBOL)?)
        }
        (Emit::Cuda, _) | (Emit::Source, Target::Cuda) => print!("{}", cuda()?.source),
    }
    if c.resources {
        if c.target != Target::Cuda {
            bail!("--resources reports what NVRTC says of the CUDA kernel: use --target cuda");
        }
        let printed = cuda()?;
        let arch = match c.arch {
            GpuArch::Sm80 => spindle_cuda::nvrtc::Arch::Sm80,
            GpuArch::Sm90 => spindle_cuda::nvrtc::Arch::Sm90,
        };
        let compiled = spindle_cuda::nvrtc::compile(&printed.source, "spindle", arch, &Default::default())?;
        let launch = &printed.launch;
        eprintln!(
            "launch: grid {} x block {} threads, {} bytes of static shared memory (bound)",
            launch.grid, launch.block, launch.shared_bytes
        );
        for (name, r) in &compiled.resources {
            eprintln!(
                "{name} on {arch}: {} registers, {} bytes shared, {} bytes stack, spills {} stores / {} loads",
                r.registers, r.shared_mem_bytes, r.stack_bytes, r.spill_stores_bytes, r.spill_loads_bytes
            );
        }
        for dot in &printed.dots {
            eprintln!("dot %{}: {:?}", dot.dot.0, dot.path);
        }
    }
    Ok(())
}

/// Options of `spindle run`.
#[derive(Debug)]
pub struct RunArgs<'a> {
    pub schedule: &'a str,
    pub target: Target,
    pub check: bool,
    pub threads: usize,
    pub repeats: usize,
    pub out: Option<&'a str>,
}

pub fn run_kernel(args: &DataArgs, run: &RunArgs<'_>) -> Result<()> {
    // Without a GPU, say so before any work.
    let gpu = if run.target == Target::Cuda { Some(crate::run_cuda::open_gpu()?) } else { None };
    let prepared = prepare(args)?;
    let kernel = lower_prepared(&prepared, run.schedule)?;
    if let Some(gpu) = gpu {
        return crate::run_cuda::run(&gpu, &prepared, &kernel, run);
    }
    let compiled = spindle_c::exec::CKernel::compile(&kernel)?;
    let threads = if run.threads == 0 { spindle_c::cpu_threads() } else { run.threads };
    let out_name = prepared.einsum.output().name.clone();
    let had_data = prepared.data.contains_key(&out_name);
    // Time on prepared buffers; every repeat starts from the same output.
    let fresh = compiled.buffers(&prepared.data)?;
    let mut buffers = fresh.clone();
    let mut times = Vec::with_capacity(run.repeats);
    for _ in 0..run.repeats.max(1) {
        buffers.clone_from(&fresh);
        let start = std::time::Instant::now();
        compiled.launch(&mut buffers, threads)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let result = compiled.output(&buffers, had_data)?;
    let cache = if compiled.program.cache_hit() { "cached" } else { "compiled" };
    eprintln!(
        "ran {} on C with {threads} thread{}: median {:.3} ms over {} runs ({cache} {})",
        out_name,
        if threads == 1 { "" } else { "s" },
        median * 1e3,
        times.len(),
        compiled.program.source_path().display()
    );
    if run.check {
        let want =
            spindle_ir::eval::evaluate(&prepared.einsum, &prepared.data).map_err(|d| prepared.report(&d))?;
        let err = max_rel_error(&result, &want);
        println!("check: max relative error {err:.2e} against the reference evaluator");
        let tolerance = tolerance(&prepared.einsum);
        if err > tolerance {
            bail!(
                "the kernel's result differs from the reference evaluator (max relative error {err:.2e} > {tolerance:.0e})"
            );
        }
    }
    emit_output(&prepared.einsum, &result, run.out)
}

/// Max |got − want| over max |want|: the error `--check` reports.
pub(crate) fn max_rel_error(got: &ArrayD<f64>, want: &ArrayD<f64>) -> f64 {
    if got.shape() != want.shape() {
        return f64::INFINITY;
    }
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(f64::MIN_POSITIVE);
    // A NaN or infinity where the reference is finite is an infinite
    // error (`f64::max` alone would skip a NaN).
    let diff = |g: f64, w: f64| if g.is_finite() || !w.is_finite() { (g - w).abs() } else { f64::INFINITY };
    got.iter().zip(want.iter()).fold(0.0f64, |m, (g, w)| m.max(diff(*g, *w))) / scale
}

/// The error `--check` accepts: 1e-3, or 1e-2 when a value tensor is
/// f16 or bf16 (their 11 or 8 significant bits round every input).
pub(crate) fn tolerance(einsum: &Einsum) -> f64 {
    let half = einsum
        .tensors
        .values()
        .any(|t| matches!(t.dtype, ElemType::Value(DType::F16) | ElemType::Value(DType::Bf16)));
    if half { 1e-2 } else { 1e-3 }
}

/// A tensor read from a file.
pub(crate) enum Loaded {
    Dense(TensorValue),
    /// Entries, and the dense form when asked for.
    Sparse(Coo<f64, i64>, Option<ArrayD<f64>>),
}

/// `.npy` as dense values or integer indices; `.mtx` / `.tns` as sparse
/// entries, with a dense copy when `dense` is set.
pub(crate) fn load_tensor(path: &Path, dense: bool) -> Result<Loaded> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    if ext == "npy" {
        return match spindle_formats::io::read_npy_index(path) {
            Ok(indices) => Ok(Loaded::Dense(TensorValue::Indices(indices))),
            Err(_) => {
                Ok(Loaded::Dense(TensorValue::Values(spindle_formats::io::read_npy_dense::<f64>(path)?)))
            }
        };
    }
    let coo: Coo<f64, i64> = spindle_formats::io::read_tensor(path)?;
    let dense = if dense { Some(coo.to_ndarray()?) } else { None };
    Ok(Loaded::Sparse(coo, dense))
}

/// `NAME=DIMS:DTYPE:SEED[:MAX]`: values uniform in ±[0.1, 1), never zero;
/// index dtypes draw from `0..MAX`.
pub(crate) fn random_tensor(arg: &str) -> Result<(String, TensorValue, ElemType)> {
    let usage =
        || anyhow!("--rand {arg}: expected NAME=DIMS:DTYPE:SEED, or NAME=DIMS:i32:SEED:MAX for indices");
    let (name, rest) = arg.split_once('=').ok_or_else(usage)?;
    let parts: Vec<&str> = rest.split(':').collect();
    let (dims, dtype, seed) = match parts[..] {
        [d, t, s] | [d, t, s, _] => (d, t, s),
        _ => return Err(usage()),
    };
    let shape = parse_dims(dims).with_context(|| format!("--rand {arg}"))?;
    let dtype = ElemType::parse(dtype).ok_or_else(|| anyhow!("--rand {arg}: unknown dtype `{dtype}`"))?;
    let seed: u64 = seed.parse().map_err(|_| anyhow!("--rand {arg}: seed `{seed}` is not an integer"))?;
    let len = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    let len = spindle_formats::check_array::<f64>(&format!("--rand {name}"), len)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let value = match dtype {
        ElemType::Value(_) => {
            let data = (0..len)
                .map(|_| {
                    let magnitude = rng.random_range(0.1..1.0);
                    if rng.random::<bool>() { magnitude } else { -magnitude }
                })
                .collect();
            TensorValue::Values(ArrayD::from_shape_vec(shape, data)?)
        }
        ElemType::Index(_) => {
            let max: i64 = parts
                .get(3)
                .ok_or_else(|| {
                    anyhow!("--rand {arg}: index tensors need a range, e.g. {name}={dims}:i32:{seed}:64")
                })?
                .parse()
                .map_err(|_| anyhow!("--rand {arg}: the range must be a positive integer"))?;
            if max <= 0 {
                bail!("--rand {arg}: the range must be a positive integer");
            }
            let data = (0..len).map(|_| rng.random_range(0..max)).collect();
            TensorValue::Indices(ArrayD::from_shape_vec(shape, data)?)
        }
    };
    Ok((name.to_string(), value, dtype))
}

fn write_output(path: &Path, result: &ArrayD<f64>, dtype: ElemType) -> Result<()> {
    use spindle_formats::io::write_npy_values;
    let data: Vec<f64> = result.iter().copied().collect();
    let shape = result.shape();
    match dtype {
        ElemType::Value(DType::F32) => {
            write_npy_values(path, shape, &data.iter().map(|&x| x as f32).collect::<Vec<_>>())
        }
        ElemType::Value(DType::F16) => {
            write_npy_values(path, shape, &data.iter().map(|&x| half::f16::from_f64(x)).collect::<Vec<_>>())
        }
        ElemType::Value(DType::Bf16) => {
            write_npy_values(path, shape, &data.iter().map(|&x| half::bf16::from_f64(x)).collect::<Vec<_>>())
        }
        _ => write_npy_values(path, shape, &data),
    }?;
    Ok(())
}

fn shape_text(shape: &[usize]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
}

/// The shape and the first values, for a terminal.
fn preview(a: &ArrayD<f64>) -> String {
    let first: Vec<String> = a.iter().take(8).map(|x| format!("{x:.6}")).collect();
    let more = if a.len() > 8 { ", ..." } else { "" };
    format!("{} = [{}{more}]", shape_text(a.shape()), first.join(", "))
}
