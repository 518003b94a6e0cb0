//! `spindle check`, `eval`, `compile` and `run`: the Einsum language from
//! the command line. Each parses its options into a [`spindle::Problem`] and
//! prints what the driver returns.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use clap::builder::TypedValueParser as _;
use ndarray::ArrayD;
// `x` as the output's dtype stores it (the reference evaluates in f64).
use spindle::check::as_stored as stored;
use spindle::{Input, Prepared, Problem, Schedule, Target, TimingOptions, Tuner};
use spindle_ir::kernel::schedule::{KernelKind, Path as SchedulePath};
use spindle_ir::lang::{Einsum, ElemType, ExtentSource, Role};

/// A diagnostic already printed with its caret; the exit code is 1.
#[derive(Debug)]
pub struct Reported;

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the statement has errors")
    }
}

impl std::error::Error for Reported {}

/// `T=64x32` or `T=64x32:f16`; `T=scalar` for rank 0. The dtype is `None`
/// where the argument gives none.
fn parse_shape(arg: &str) -> Result<(String, Vec<usize>, Option<ElemType>)> {
    let (name, rest) =
        arg.split_once('=').ok_or_else(|| anyhow!("--shape {arg}: expected NAME=DIMS[:DTYPE]"))?;
    if rest.trim().is_empty() {
        bail!("--shape {arg}: no dims given (NAME=64x32, or NAME=scalar for rank 0)");
    }
    let (dims, dtype) = match rest.split_once(':') {
        Some((dims, dtype)) => (dims, Some(dtype)),
        None => (rest, None),
    };
    let dtype = dtype
        .map(|d| {
            ElemType::parse(d)
                .ok_or_else(|| anyhow!("--shape {arg}: unknown dtype `{d}` (f64, f32, f16, bf16, i32, i64)"))
        })
        .transpose()?;
    Ok((name.to_string(), parse_dims(dims).with_context(|| format!("--shape {arg}"))?, dtype))
}

fn parse_dims(dims: &str) -> Result<Vec<usize>> {
    if dims == "scalar" || dims.is_empty() {
        return Ok(Vec::new());
    }
    dims.split('x')
        .map(|d| {
            d.trim().parse::<usize>().map_err(|e| match e.kind() {
                std::num::IntErrorKind::PosOverflow => {
                    anyhow!("`{d}` is larger than any dimension ({})", usize::MAX)
                }
                _ => anyhow!("`{d}` is not a dimension"),
            })
        })
        .collect()
}

pub fn run_check(statement: &str, shapes: &[String]) -> Result<()> {
    let args = DataArgs {
        statement: statement.to_string(),
        tensors: Vec::new(),
        rand: Vec::new(),
        shapes: shapes.to_vec(),
        formats: Vec::new(),
    };
    let problem = problem(&args)?;
    if problem.is_program() {
        // Each statement of its three-address form, as `run` splits it.
        let program = problem.program().map_err(reported)?;
        for (n, einsum) in program.statements.iter().enumerate() {
            print!("{}S{}: {}", if n == 0 { "" } else { "\n" }, n + 1, describe(einsum));
        }
        return Ok(());
    }
    let einsum = problem.check().map_err(reported)?;
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

/// The statement and data options `eval`, `compile` and `run` share.
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// The statement, e.g. "C[m,n] += A[m,k] * B[k,n]". For `run`, several
    /// statements separated by `;` or newlines (or one compound product over
    /// an operand with a format) run as a program: split into one product
    /// per statement (temporaries T1, T2, ... and undeclared outputs get
    /// their shapes from their indices) and fused as the schedule's
    /// fusion=none|maximal|trie says (trie unless told).
    pub statement: String,
    /// Data for a tensor: NAME=file.npy (dense values in the file's float
    /// type, or integer indices), NAME=file.mtx or NAME=file.tns (sparse),
    /// NAME=gen:SPEC, a generated sparse matrix (as `spindle stats gen:...`,
    /// e.g. gen:uniform:rows=999,cols=999,nnz=9980,seed=1) or tensor of any
    /// rank (gen:uniform:shape=1x34x34x16,density=0.1,seed=1), or
    /// NAME=kernelmap:FILE.xyz:voxel=V[,kernel=K], a point cloud's
    /// submanifold kernel map Map[x,y,z] (output voxel x, input voxel y at
    /// offset z of K^3, K = 3 unless told), e.g. for
    /// "Out[x,m] += Map[x,y,z] * In[y,c] * W[z,c,m]" with
    /// --format Map=groupcoo:dim=2,g=auto.
    #[arg(long = "tensor", value_name = "NAME=PATH")]
    pub tensors: Vec<String>,
    /// Random data: NAME=DIMS:DTYPE:SEED (values in ±[0.1, 1)), or
    /// NAME=DIMS:i32:SEED:MAX for index tensors with values in 0..MAX.
    #[arg(long = "rand", value_name = "NAME=DIMS:DTYPE:SEED[:MAX]")]
    pub rand: Vec<String>,
    /// Shapes of tensors without data (usually the output); for a tensor
    /// with data, its dtype in the kernel (NAME=:DTYPE, or with DIMS, which
    /// must be the data's).
    #[arg(long = "shape", value_name = "NAME=DIMS[:DTYPE]")]
    pub shapes: Vec<String>,
    /// Store a tensor in a format (coo, csr, csc, dcsr, dcsc, csf, ell,
    /// groupcoo, blockgroupcoo, bcsr, or a d/c level list such as dddc), e.g.
    /// A=groupcoo:dim=0,g=8: the statement is rewritten over the format's
    /// arrays, or iterated over its levels where the rewrite cannot express
    /// it; read at affine subscripts (I[i+p,j+q], a convolution), its levels
    /// are walked by subsection loops. On the output (given no data) the
    /// kernel assembles it in that format, e.g. C=csr.
    #[arg(long = "format", value_name = "NAME=FORMAT")]
    pub formats: Vec<String>,
}

/// Where kernels run: `c`, `cuda` or `emulate`.
pub fn target_arg() -> impl clap::builder::TypedValueParser<Value = Target> {
    clap::builder::PossibleValuesParser::new(Target::ALL.map(Target::name))
        .map(|s| s.parse::<Target>().unwrap_or(Target::C))
}

/// The problem the options describe, for the driver.
pub fn problem(args: &DataArgs) -> Result<Problem> {
    let mut problem = Problem::new(args.statement.as_str());
    // Each tensor's data, shape and format come from one flag each: a
    // second would silently replace the first.
    let mut given: Vec<(String, String)> = Vec::new();
    let mut once = |flag: &str, arg: &str, name: &str| -> Result<()> {
        if name.is_empty() {
            bail!("{flag} {arg}: the tensor's name is missing before `=`");
        }
        let kind = match flag {
            "--format" => "format",
            "--shape" => "shape",
            _ => "data",
        };
        let key = format!("{kind} {name}");
        if let Some((_, first)) = given.iter().find(|(k, _)| *k == key) {
            bail!("{flag} {arg}: `{name}` already has its {kind} from `{first}`");
        }
        given.push((key, format!("{flag} {arg}")));
        Ok(())
    };
    // A flag for a tensor the statement never names would be ignored (a
    // function's name, a keyword or a dtype is not a tensor). A statement
    // that does not parse is refused later, with its caret.
    let names = tensor_names(&args.statement);
    let mut once = |flag: &str, arg: &str, name: &str| -> Result<()> {
        once(flag, arg, name)?;
        if !name.is_empty() && names.as_ref().is_some_and(|names| !names.contains(name)) {
            bail!("{flag} {arg}: the statement has no tensor `{name}`");
        }
        Ok(())
    };
    let mut with_data = Vec::new();
    for arg in &args.tensors {
        let (name, path) =
            arg.split_once('=').ok_or_else(|| anyhow!("--tensor {arg}: expected NAME=PATH"))?;
        once("--tensor", arg, name)?;
        problem = problem.file(name, path);
        with_data.push(name.to_string());
    }
    for arg in &args.rand {
        let (name, input) = random_arg(arg)?;
        once("--rand", arg, &name)?;
        problem = problem.tensor(name.as_str(), input);
        with_data.push(name);
    }
    for arg in &args.shapes {
        let (name, shape, dtype) = parse_shape(arg)?;
        once("--shape", arg, &name)?;
        // `A=:f64` beside A's data gives only its dtype.
        let dtype_only = arg.split_once('=').is_some_and(|(_, rest)| rest.starts_with(':'));
        if let Some(dt) = dtype.filter(|_| dtype_only && !with_data.contains(&name)) {
            bail!(
                "--shape {arg}: a dtype alone is for a tensor with data; give `{name}`'s dims too \
                 ({name}=DIMS:{dt}), or write `where {name}: {dt}` in the statement",
                dt = dt.name()
            );
        }
        if with_data.contains(&name) && !dtype_only {
            problem = problem.declare(name.as_str(), &shape);
        } else if !with_data.contains(&name) {
            let default = ElemType::Value(spindle_formats::DType::F32);
            problem = problem.tensor(name.as_str(), Input::shape(&shape, dtype.unwrap_or(default)));
        }
        // A dtype given here is the kernel's; a `where` giving another is refused.
        if let Some(dtype) = dtype {
            problem = problem.dtype(name.as_str(), dtype);
        }
    }
    for arg in &args.formats {
        let (name, spec) =
            arg.split_once('=').ok_or_else(|| anyhow!("--format {arg}: expected NAME=FORMAT"))?;
        once("--format", arg, name)?;
        problem = problem.format(name, spec);
    }
    Ok(problem)
}

/// The driver's error for the terminal: a statement error is printed here
/// with its caret (exit code 1 without another line).
pub fn reported(e: spindle::Error) -> anyhow::Error {
    match e {
        spindle::Error::Statement { ref diagnostic, .. } => {
            let color = std::io::stderr().is_terminal();
            // A mistake in the schedule is shown in the schedule.
            let in_schedule = SCHEDULE.get().and_then(|text| diagnostic.render_in_schedule(text, color));
            eprint!("{}", in_schedule.unwrap_or_else(|| e.render(color)));
            anyhow!(Reported)
        }
        spindle::Error::OutputShape { name, diagnostic, text } => {
            let mut diagnostic = *diagnostic;
            diagnostic.notes = vec![format!("give it with --shape {name}=DIMS")];
            eprint!("{}", diagnostic.render(&text, std::io::stderr().is_terminal()));
            anyhow!(Reported)
        }
        other => anyhow!(other),
    }
}

/// Checks, rewrites and loads the data.
pub fn prepare(args: &DataArgs) -> Result<Prepared> {
    problem(args)?.prepare().map_err(reported)
}

/// Prints the statement the tile path runs, where it rewrote the user's
/// (over the formats' arrays): only where a tile kernel is what is shown
/// or run, since the level path walks the statement as written.
fn print_rewritten(prepared: &Prepared) {
    if prepared.rewritten {
        println!("rewritten: {}", prepared.text);
    }
}

pub fn run_eval(args: &DataArgs, out: Option<&str>) -> Result<()> {
    check_out(out, args)?;
    let start = std::time::Instant::now();
    let evaluation = problem(args)?.evaluate().map_err(reported)?;
    // Where a kernel would take the formats, the statement it would run.
    if let Some(rewritten) = &evaluation.rewritten {
        println!("rewritten: {rewritten}");
    }
    let output = &evaluation.statement.output().name;
    let statements = match evaluation.statements {
        1 => String::new(),
        n => format!(" ({n} statements)"),
    };
    eprintln!("evaluated {output}{statements} in {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
    emit_evaluated(args, &evaluation.statement, &evaluation.result, out)
}

/// The reference's output of `einsum` (a statement, or a program's last):
/// an output given a format is sparse, its nonzero entries as a run would
/// assemble them; others dense.
fn emit_evaluated(args: &DataArgs, einsum: &Einsum, result: &ArrayD<f64>, out: Option<&str>) -> Result<()> {
    let output = &einsum.output().name;
    if args.formats.iter().any(|f| f.split_once('=').is_some_and(|(name, _)| name == output)) {
        let coo =
            spindle::formats::Coo::from_ndarray(result).map_err(|e| anyhow!("the output `{output}`: {e}"))?;
        return emit_entries(einsum, &coo, out);
    }
    emit_output(einsum, result, out)
}

/// `--out NAME=PATH` before any work: its form, a file type the tool
/// writes, and a folder that exists (whether the file type suits the
/// output, dense or sparse, is known once it is made).
fn check_out(out: Option<&str>, args: &DataArgs) -> Result<()> {
    let Some(out) = out else { return Ok(()) };
    let (name, path) = out.split_once('=').ok_or_else(|| anyhow!("--out {out}: expected NAME=PATH.npy"))?;
    let path = Path::new(path);
    let extension = path.extension().and_then(|e| e.to_str());
    if !matches!(extension, Some("npy" | "mtx" | "tns")) {
        bail!(
            "--out {out}: the output is written as .npy (dense), .mtx (a sparse matrix) or .tns (a sparse tensor)"
        );
    }
    // What writing will refuse, said before any work: another tensor than
    // the output, or a dense output's data in a sparse file (and back).
    // (A statement that does not parse is reported where it is read.)
    if let Ok(statements) = spindle_ir::program::parse_program(&args.statement)
        && let Some(last) = statements.last()
    {
        let output = &last.lhs.tensor.name;
        if name != output && statements.len() > 1 {
            bail!(
                "--out {out}: the program's output is `{output}`, its last statement's (the others' are not kept: \
                 run a statement alone to write its output)"
            );
        }
        if name != output {
            bail!("--out {out}: the statement's output is `{output}`");
        }
        let with_data = |a: &String| a.split_once('=').is_some_and(|(n, _)| n == output);
        // A format in dense levels alone keeps the output dense (the run
        // then says to drop it).
        let rank = vec![1; last.lhs.subscripts.len()];
        let sparse_format = |a: &&String| {
            a.split_once('=').and_then(|(_, f)| f.parse::<spindle::formats::FormatSpec>().ok()).is_none_or(
                |f| {
                    f.levels(&rank)
                        .map_or(true, |l| l.iter().any(|l| l.format != spindle::formats::LevelFormat::Dense))
                },
            )
        };
        let formatted = args.formats.iter().filter(|a| with_data(a)).any(|a| sparse_format(&a));
        let has_data = args.tensors.iter().chain(&args.rand).any(with_data);
        // (An output with data and a sparse format: `run` refuses it with
        // its reason, `eval` prints its entries.)
        let sparse = formatted && !has_data;
        match (sparse, extension) {
            _ if formatted && has_data => {}
            (false, Some("mtx" | "tns")) => bail!(
                "--out {out}: `{name}` is dense, written as .npy (.mtx and .tns are for an output given a sparse \
                 format, --format {name}=csr)"
            ),
            (true, Some("npy")) => {
                bail!("--out {out}: `{name}` is sparse (it has a format), written as .mtx (a matrix) or .tns")
            }
            (true, Some("mtx")) => mtx_holds_a_matrix(out, name, rank.len())?,
            _ => {}
        }
    }
    let folder = path.parent().filter(|f| !f.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !folder.is_dir() {
        bail!("--out {out}: the folder {} does not exist", folder.display());
    }
    Ok(())
}

/// Refuses `--out NAME=PATH.mtx` for an output that is not a matrix.
fn mtx_holds_a_matrix(out: &str, name: &str, order: usize) -> Result<()> {
    if order != 2 {
        bail!("--out {out}: a Matrix Market file holds a matrix; `{name}` has order {order}: use .tns");
    }
    Ok(())
}

/// Writes the output to `NAME=PATH.npy`, or prints a preview.
pub(crate) fn emit_output(einsum: &Einsum, result: &ArrayD<f64>, out: Option<&str>) -> Result<()> {
    let output = einsum.output();
    let stored = result.mapv(|x| stored(output.dtype, x));
    note_overflow(&output.name, output.dtype, result.iter().copied());
    match out {
        Some(out) => {
            let (name, path) =
                out.split_once('=').ok_or_else(|| anyhow!("--out {out}: expected NAME=PATH.npy"))?;
            if name != output.name {
                bail!("--out {out}: the statement's output is `{}`", output.name);
            }
            if Path::new(path).extension().and_then(|e| e.to_str()) != Some("npy") {
                bail!(
                    "--out {out}: `{name}` is dense, written as .npy (.mtx and .tns are for an output given a \
                     sparse format, --format {name}=csr)"
                );
            }
            spindle::input::write_npy(Path::new(path), result, output.dtype).map_err(reported)?;
            // (NumPy has no bf16: its values go out as f32, exactly.)
            let as_f32 = if output.dtype == ElemType::Value(spindle_formats::DType::Bf16) {
                ", written as f32: NumPy has no bf16"
            } else {
                ""
            };
            println!("wrote {path} ({} {}{as_f32})", shape_text(result.shape()), output.dtype.name());
        }
        None => println!("{}", preview(&output.name, &stored)),
    }
    Ok(())
}

/// Says on stderr how many values of an output narrower than f64 are
/// infinite as it stores them: the reference's beyond the dtype's range,
/// and a kernel's that overflowed it or carried an input's infinity (a
/// user reading `inf` should hear why, and how to keep them).
fn note_overflow(name: &str, dtype: ElemType, values: impl Iterator<Item = f64>) {
    if matches!(dtype, ElemType::Value(spindle_formats::DType::F64) | ElemType::Index(_)) {
        return;
    }
    // Finite in f64 (the reference's): beyond the dtype's range for sure.
    // Infinite already (a kernel's, a division by zero, an input's
    // infinity carried through): any of them.
    let (mut beyond, mut infinite) = (0, 0);
    for x in values.filter(|&x| !x.is_nan() && !stored(dtype, x).is_finite()) {
        if x.is_finite() { beyond += 1 } else { infinite += 1 }
    }
    let dtype = dtype.name();
    if beyond > 0 {
        eprintln!(
            "note: {beyond} value(s) of `{name}` are infinite: they lie beyond {dtype}'s range (`where {name}: f64` \
             keeps them)"
        );
    }
    if infinite > 0 {
        eprintln!(
            "note: {infinite} value(s) of `{name}` are infinite: past {dtype}'s range (`where {name}: f64` keeps \
             those), a division by zero or an infinite input"
        );
    }
}

/// A value for a terminal: six decimals, or an exponent where those would
/// show nothing or too many digits.
fn value_text(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e9).contains(&x.abs()) {
        format!("{x:.6}")
    } else {
        format!("{x:.6e}")
    }
}

/// What `spindle compile` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// The kernel IR.
    Ir,
    /// The target's source: C for `--target c`, CUDA C for `--target cuda` and
    /// `--target emulate`.
    Source,
    /// The C source (whatever the target).
    C,
    /// The CUDA source (whatever the target).
    Cuda,
    /// The CUDA printer's plan: block size, inlined values and shared
    /// tiles, Tensor Core products, where the accumulator lives.
    Plan,
    /// The CUDA kernel's machine code (SASS) for `--arch`, compiled by NVRTC
    /// and read by cuobjdump (no GPU needed).
    Sass,
    /// ReACT's view of the statements (one or several): three-address form,
    /// index trees after sparse iteration-space propagation, the trie-fused
    /// loop forest and the dimensions each temporary keeps.
    Fusion,
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

/// The command's `--schedule` text, which errors about one of its items
/// show ([`reported`]).
static SCHEDULE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn schedule(text: &str) -> Result<Schedule> {
    let _ = SCHEDULE.set(text.to_string());
    text.parse::<Schedule>().map_err(|e| anyhow!("--schedule: {e}"))
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

impl CompileArgs<'_> {
    /// Whether what is printed is (or is compiled from) the CUDA kernel.
    fn emits_cuda(&self) -> bool {
        match self.emit {
            Emit::Cuda | Emit::Plan | Emit::Sass => true,
            Emit::C => false,
            Emit::Ir | Emit::Source | Emit::Fusion => self.target != Target::C,
        }
    }
}

/// A note per item of a single statement's schedule that its kernel does
/// not read (`map=walk` on a C kernel, `parallel=` on the level path).
fn note_unread(schedule: &str, kind: KernelKind) {
    for note in Schedule::unread(schedule, kind) {
        eprintln!("note: {note}");
    }
}

pub fn run_compile(args: &DataArgs, c: &CompileArgs<'_>) -> Result<()> {
    // Refused before anything is printed.
    if c.resources && c.target != Target::Cuda {
        bail!(
            "--resources reports what NVRTC says of the CUDA kernel, and the target is {}: add --target cuda",
            c.target.name()
        );
    }
    if c.emit == Emit::Fusion {
        if c.resources {
            bail!("--emit fusion prints ReACT's passes, not a kernel for --resources: drop one of them");
        }
        return emit_fusion(args);
    }
    let schedule = schedule(c.schedule)?;
    let problem = problem(args)?;
    // A program's kernel is the one `run` runs: its fusion's loop tree.
    let program = match problem.is_program_on(c.target) {
        true => {
            let (lowered, notes) = problem.program_kernel(&schedule, c.target).map_err(reported)?;
            notes.iter().for_each(|n| eprintln!("note: {n}"));
            if c.target != Target::C
                && let Err(e) = spindle::print_levels_cuda(&lowered.kernel)
            {
                eprintln!(
                    "note: this is the C backend's program kernel, which does not print for {} ({e}); there \
                     `spindle run` runs the statements substituted into one where that does fewer products, else \
                     each statement as its own kernel",
                    c.target.name()
                );
            }
            Some(lowered)
        }
        false => None,
    };
    let prepared = match program {
        Some(_) => None,
        None => Some(prepare(args)?),
    };
    let levels = |p: &spindle::Prepared| schedule.path == SchedulePath::Levels || p.tile_refusal.is_some();
    if program.is_some() || prepared.as_ref().is_some_and(levels) {
        let lowered = match (program, &prepared) {
            (Some(lowered), _) => lowered,
            (None, Some(p)) => p.lower_levels(&schedule).map_err(reported)?,
            (None, None) => unreachable!("a statement or a program"),
        };
        // What shows this kernel instead of a tile kernel's plan or report:
        // its CUDA source, where the level path prints one.
        let instead = || match spindle::print_levels_cuda(&lowered.kernel) {
            Ok(_) => "--emit cuda shows its warp per row".to_string(),
            Err(e) => format!("--emit c shows its source (it has no CUDA source: {e})"),
        };
        if c.resources {
            bail!(
                "--resources reports tile kernels; this kernel takes the level path, which has no NVRTC \
                 report yet: drop --resources ({})",
                instead()
            );
        }
        if prepared.is_some() {
            note_unread(c.schedule, KernelKind::levels(&lowered.kernel, c.emits_cuda()));
        }
        match (c.emit, c.target) {
            (Emit::Ir, _) => print!("{}", lowered.kernel),
            (Emit::C, _) | (Emit::Source, Target::C) => print!("{}", spindle::print_levels(&lowered.kernel)?),
            (Emit::Cuda, _) | (Emit::Source, _) => {
                print!("{}", spindle::print_levels_cuda(&lowered.kernel).map_err(reported)?)
            }
            (Emit::Plan, _) => bail!("the level path has no CUDA plan: {}", instead()),
            (Emit::Sass, _) => {
                bail!("--emit sass shows tile kernels' machine code; the level path has none yet")
            }
            (Emit::Fusion, _) => unreachable!("--emit fusion returns before lowering"),
        }
        return Ok(());
    }
    let prepared = prepared.expect("a statement");
    print_rewritten(&prepared);
    let kernel = prepared.lower(&schedule).map_err(reported)?;
    note_unread(c.schedule, KernelKind::tiles(c.emits_cuda()));
    if let Some(note) = kernel.order_note(&schedule.order) {
        eprintln!("note: {note}");
    }
    let source = |target| spindle::print(&kernel, &schedule, target).map_err(reported);
    match (c.emit, c.target) {
        (Emit::Ir, _) => print!("{kernel}"),
        (Emit::C, _) => print!("{}", source(Target::C)?),
        (Emit::Cuda, _) => print!("{}", source(Target::Cuda)?),
        (Emit::Source, target) => print!("{}", source(target)?),
        (Emit::Plan, _) => print!("{}", spindle::cuda_plan(&kernel, &schedule)),
        (Emit::Sass, _) => {
            print!("{}", spindle::cuda_sass(&kernel, &schedule, nvrtc_arch(c.arch)).map_err(reported)?)
        }
        (Emit::Fusion, _) => unreachable!("--emit fusion returns before lowering"),
    }
    if c.resources {
        let arch = nvrtc_arch(c.arch);
        let report = spindle::cuda_report(&kernel, &schedule, arch).map_err(reported)?;
        let launch = &report.launch;
        let memory = if launch.dynamic { "dynamic shared memory" } else { "static shared memory (bound)" };
        eprintln!(
            "launch: grid {} x block {} threads, {} bytes of {memory}",
            launch.grid, launch.block, launch.shared_bytes
        );
        for (name, r) in &report.resources {
            eprintln!(
                "{name} on {arch}: {} registers, {} bytes shared, {} bytes stack, spills {} stores / {} loads",
                r.registers, r.shared_mem_bytes, r.stack_bytes, r.spill_stores_bytes, r.spill_loads_bytes
            );
        }
        for dot in &report.dots {
            eprintln!("dot {}: {}", dot.dot, dot.path);
        }
    }
    Ok(())
}

fn nvrtc_arch(arch: GpuArch) -> spindle_cuda::nvrtc::Arch {
    match arch {
        GpuArch::Sm80 => spindle_cuda::nvrtc::Arch::Sm80,
        GpuArch::Sm90 => spindle_cuda::nvrtc::Arch::Sm90,
    }
}

/// `--emit fusion`: the program ReACT's passes see and make.
fn emit_fusion(args: &DataArgs) -> Result<()> {
    use spindle_ir::react::{
        forest_text, index_trees, order_loops, propagate, reduce_dimensions, trie_fuse, unfused,
    };
    let problem = problem(args)?;
    let program = problem.program().map_err(reported)?;
    let formats = problem.formats().map_err(reported)?;
    println!("three-address form:");
    for (n, e) in program.statements.iter().enumerate() {
        println!("  S{}: {}", n + 1, e.statement);
    }
    let trees = order_loops(
        &program,
        &propagate(&program, &index_trees(&program, &formats), &formats),
        &formats,
        &[],
    );
    println!("index trees (sparse iteration spaces propagated, loops ordered):");
    for (n, t) in trees.iter().enumerate() {
        println!("  S{}: {t}", n + 1);
    }
    let forest = trie_fuse(&program, unfused(&program, &trees), &formats);
    println!("trie-like fusion:");
    for line in forest_text(&forest).lines() {
        println!("  {line}");
    }
    let reduced = reduce_dimensions(&program, &forest);
    if !reduced.is_empty() {
        println!("temporaries:");
        for (name, kept) in &reduced {
            let shape = &program.temporaries[name].shape;
            let kept = if kept.is_empty() { "a scalar".to_string() } else { format!("[{}]", kept.join(",")) };
            println!("  {name} {shape:?} -> {kept}");
        }
    }
    Ok(())
}

/// `--threads N` (0: not given) into the schedule, unless it says
/// otherwise.
fn with_threads(schedule: &mut Schedule, threads: usize) -> Result<()> {
    match schedule.threads {
        _ if threads == 0 => {}
        Some(t) if t != threads => {
            bail!("--threads {threads} and the schedule's threads={t} disagree: give one")
        }
        _ => schedule.threads = Some(threads),
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
    check_out(run.out, args)?;
    if run.threads != 0 && run.target != Target::C {
        bail!("--threads applies to --target c; a CUDA kernel's threads come from its schedule");
    }
    // Without a GPU, say so before any work.
    let backend = spindle::backend(run.target).map_err(|e| match run.target {
        Target::Cuda => anyhow!("`--target cuda` needs an NVIDIA GPU: {e}"),
        _ => anyhow!(e),
    })?;
    let problem = problem(args)?;
    if problem.is_program_on(run.target) {
        return run_program(&problem, backend.as_ref(), run);
    }
    let prepared = prepare(args)?;
    for note in [prepared.padding_advice(), prepared.stored_zeros_note()].into_iter().flatten() {
        eprintln!("note: {note}");
    }
    let compiled = if run.schedule.trim().is_empty() {
        let mut tuner = Tuner::for_target(run.target).on_progress(|line| eprintln!("{line}"));
        tuner.threads = (run.threads != 0).then_some(run.threads);
        prepared.autotune(backend.as_ref(), &mut tuner)
    } else {
        let mut schedule = schedule(run.schedule)?;
        with_threads(&mut schedule, run.threads)?;
        prepared.compile(backend.as_ref(), &schedule)
    }
    .map_err(reported)?;
    if compiled.kernel.tiles().is_some() {
        print_rewritten(&prepared);
    }
    let opts = timing_options(run);
    let (result, timing) = match compiled.assembles() {
        true => compiled.assemble_and_time(opts).map(|(a, t)| (Produced::Sparse(a), t)),
        false => compiled.run_and_time(opts).map(|(r, t)| (Produced::Dense(r), t)),
    }
    .map_err(reported)?;
    let report = compiled.report();
    let out_name = &prepared.einsum.output().name;
    let on = match report.threads {
        Some(1) => format!("{} with 1 thread", run.target.title()),
        Some(t) => format!("{} with {t} threads", run.target.title()),
        None => format!("{} ({})", run.target.title(), backend.device()),
    };
    let mut notes = Vec::new();
    notes.push(if report.cached { "cached" } else { "compiled" }.to_string());
    if let Some(path) = &report.source_path {
        notes.push(path.display().to_string());
    }
    if let Some(launch) = &report.launch {
        notes.push(launch.clone());
    }
    if let Some(r) = report.resources {
        notes.push(format!("{} registers, {} spilled bytes", r.registers, r.spill_stores_bytes));
    }
    if timing.input_sets > 1 {
        notes.push(format!("{} input sets rotated", timing.input_sets));
    }
    eprintln!(
        "ran {out_name} on {on}: median {} ms (min {}, max {}) over {} ({})",
        crate::bench::ms(Some(timing.median_ms)),
        crate::bench::ms(Some(timing.min_ms)),
        crate::bench::ms(Some(timing.max_ms)),
        crate::counted(timing.runs, "run"),
        notes.join(", ")
    );
    let how = match &compiled.tuned {
        Some(t) => {
            format!("autotuned over {} candidates, cached per statement, shapes and device", t.tried.len())
        }
        None if compiled.prepared.tile_refusal.is_some() && run.schedule.trim().is_empty() => match &compiled
            .kernel
        {
            spindle::Lowering::Levels(k) if !k.affine.is_empty() => {
                "the level path: subsection loops walk the affine subscripts of stored operands".to_string()
            }
            _ => format!(
                "the level path: the tile path cannot take it, {}",
                compiled.prepared.tile_refusal.as_deref().unwrap_or("")
            ),
        },
        None if run.target == Target::Emulate && run.schedule.trim().is_empty() => {
            "the default: emulated times say nothing of a GPU's, so nothing is tuned".to_string()
        }
        None => match run.schedule.parse::<Schedule>() {
            // Block rows given no column tile take one they print.
            Ok(given) if given.tiles != compiled.schedule.tiles => {
                "as given, with a column tile block rows print".to_string()
            }
            _ => "as given".to_string(),
        },
    };
    eprintln!("schedule: {} ({how})", compiled.schedule);
    // Only threads the user asked for (the autotuner's pick is its own).
    let asked = run.threads != 0 || (!run.schedule.trim().is_empty() && compiled.schedule.threads.is_some());
    if let (true, Some(asked @ 2..), Some(why)) = (asked, compiled.schedule.threads, &report.one_thread) {
        eprintln!("note: threads={asked} changes nothing here; the kernel runs on one thread: {why}");
    }
    if let Some(advice) = compiled.level_order_advice() {
        eprintln!("note: {advice}");
    }
    let cuda = run.target != Target::C;
    if let Some(advice) = compiled.prepared.block_format_advice().filter(|_| cuda) {
        eprintln!("note: {advice}");
    }
    let kind = match &compiled.kernel {
        spindle::Lowering::Tiles(_) => KernelKind::tiles(cuda),
        spindle::Lowering::Levels(kernel) => KernelKind::levels(kernel, cuda),
    };
    note_unread(run.schedule, kind);
    if let Some(note) = compiled.kernel.tiles().and_then(|k| k.order_note(&compiled.schedule.order)) {
        eprintln!("note: {note}");
    }
    if run.check {
        let check = match &result {
            Produced::Dense(r) => compiled.compare(r),
            Produced::Sparse(a) => compiled.compare_assembled(a),
        }
        .map_err(reported)?;
        let structure = match check.stored {
            Some(n) => format!(" ({n} entries stored, structure checked level by level)"),
            None => String::new(),
        };
        println!(
            "check: max relative error {:.2e} against the reference evaluator{structure}",
            check.max_rel_error
        );
        if !check.passed() {
            bail!(
                "the kernel's result differs from the reference evaluator (max relative error {:.2e} > {:.0e})",
                check.max_rel_error,
                check.tolerance
            );
        }
    }
    match result {
        Produced::Dense(r) => emit_output(&prepared.einsum, &r, run.out),
        Produced::Sparse(a) => emit_assembled(&prepared.einsum, &a, run.out),
    }
}

/// The launches `run` times: two warm-ups, then `--repeats`; on the
/// emulated GPU no warm-up (a launch takes seconds under its sanitizer and
/// warms nothing a GPU would).
fn timing_options(run: &RunArgs<'_>) -> TimingOptions {
    let warmup = if run.target == Target::Emulate { 0 } else { 2 };
    TimingOptions { warmup, repeats: run.repeats.max(1) }
}

/// A program (several statements, or one compound statement over sparse
/// operands): split into three-address form and run as the schedule's
/// `fusion=` says (trie unless told), timed and, with `--check`, compared
/// with the reference evaluator's run of the program.
fn run_program(problem: &Problem, backend: &dyn spindle::Backend, run: &RunArgs<'_>) -> Result<()> {
    let mut schedule = schedule(run.schedule)?;
    with_threads(&mut schedule, run.threads)?;
    let ran = problem.run_program(backend, &schedule, timing_options(run), run.check).map_err(reported)?;
    for (n, statement) in ran.statements.iter().enumerate() {
        eprintln!("S{}: {statement}", n + 1);
    }
    if !ran.forest.is_empty() {
        eprintln!("loops (fusion={}):", ran.fusion);
        for line in ran.forest.lines() {
            eprintln!("  {line}");
        }
    }
    let kernels = match ran.timings.len() {
        1 => "one kernel".to_string(),
        n => format!("{n} kernels, one per statement"),
    };
    let ms = |x: f64| crate::bench::ms(Some(x));
    let spread = match &ran.timings[..] {
        [t] => {
            format!(" (min {}, max {}) over {}", ms(t.min_ms), ms(t.max_ms), crate::counted(t.runs, "run"))
        }
        many => {
            let fewest = many.iter().map(|t| t.runs).min().unwrap_or(0);
            let each = if many.iter().all(|t| t.runs == fewest) { "each over" } else { "each over at least" };
            format!(" in all (sum of medians, {each} {})", crate::counted(fewest, "run"))
        }
    };
    eprintln!(
        "ran the program on {} (fusion={}: {kernels}): median {} ms{spread}",
        run.target.title(),
        ran.fusion,
        ms(ran.median_ms()),
    );
    for note in &ran.notes {
        eprintln!("note: {note}");
    }
    for note in Schedule::unread_by_program(run.schedule, &ran.kinds) {
        eprintln!("note: {note}");
    }
    if run.check {
        let worst = ran.checks.iter().map(|c| c.max_rel_error).fold(0.0f64, f64::max);
        println!("check: max relative error {worst:.2e} against the reference evaluator");
        if let Some(c) = ran.checks.iter().find(|c| !c.passed()) {
            bail!(
                "a kernel's result differs from the reference evaluator (max relative error {:.2e} > {:.0e})",
                c.max_rel_error,
                c.tolerance
            );
        }
    }
    let last = ran.last.as_ref().ok_or_else(|| anyhow!("the program ran no statement"))?;
    match &ran.assembled {
        Some(a) => emit_assembled(last, a, run.out),
        None => emit_output(last, &ran.result, run.out),
    }
}

/// What a run produced: a dense output, or a sparse one as the kernel
/// assembled it.
enum Produced {
    Dense(ArrayD<f64>),
    Sparse(spindle::formats::Assembled),
}

/// Writes a sparse output to `NAME=PATH.mtx` (order 2) or `.tns`, or
/// prints its first entries.
fn emit_assembled(einsum: &Einsum, assembled: &spindle::formats::Assembled, out: Option<&str>) -> Result<()> {
    emit_entries(einsum, &spindle::check::entries(assembled).map_err(reported)?, out)
}

/// Writes a sparse output's entries to `NAME=PATH.mtx` (order 2) or
/// `.tns`, or prints the first ones.
fn emit_entries(einsum: &Einsum, coo: &spindle::formats::Coo<f64, i64>, out: Option<&str>) -> Result<()> {
    let output = einsum.output();
    let shape = shape_text(&coo.shape);
    note_overflow(&output.name, output.dtype, coo.val.iter().copied());
    let mut coo = coo.clone();
    coo.val.iter_mut().for_each(|v| *v = stored(output.dtype, *v));
    match out {
        Some(out) => {
            let (name, path) =
                out.split_once('=').ok_or_else(|| anyhow!("--out {out}: expected NAME=PATH.mtx or .tns"))?;
            if name != output.name {
                bail!("--out {out}: the statement's output is `{}`", output.name);
            }
            let path = Path::new(path);
            match path.extension().and_then(|e| e.to_str()) {
                Some("mtx") => {
                    mtx_holds_a_matrix(out, name, coo.order())?;
                    spindle::formats::io::mtx::write_mtx(&coo, path)
                }
                Some("tns") => spindle::formats::io::tns::write_tns(&coo, path),
                _ => bail!("--out {out}: a sparse output is written as .mtx (a matrix) or .tns"),
            }
            .map_err(|e| anyhow!("--out {out}: {e}"))?;
            println!("wrote {} ({shape}, {} entries)", path.display(), coo.nnz());
        }
        None => {
            let first: Vec<String> = (0..coo.nnz().min(6))
                .map(|k| {
                    let at: Vec<String> = coo.coord(k).iter().map(usize::to_string).collect();
                    format!("({}) {}", at.join(","), value_text(coo.val[k]))
                })
                .collect();
            let more = if coo.nnz() > 6 { ", ..." } else { "" };
            println!("{}: {shape} sparse, {} entries = [{}{more}]", output.name, coo.nnz(), first.join(", "));
        }
    }
    Ok(())
}

/// `NAME=DIMS:DTYPE:SEED[:MAX]`: values uniform in ±[0.1, 1), never zero;
/// index dtypes draw from `0..MAX`.
pub(crate) fn random_arg(arg: &str) -> Result<(String, Input)> {
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
    let seed: u64 = seed
        .parse()
        .map_err(|_| anyhow!("--rand {arg}: seed `{seed}` is not an integer from 0 to 2^64 - 1"))?;
    let input = match dtype {
        ElemType::Value(_) if parts.len() == 4 => {
            return Err(anyhow!(
                "--rand {arg}: a range (the fourth field) is for index tensors; values are random in \
                 ±[0.1, 1) (sparse random data: --tensor {name}=gen:uniform:shape={dims},density=D)"
            ));
        }
        ElemType::Value(d) => Input::random(&shape, d, seed),
        ElemType::Index(i) => {
            let max: i64 = parts
                .get(3)
                .ok_or_else(|| {
                    anyhow!("--rand {arg}: index tensors need a range, e.g. {name}={dims}:i32:{seed}:64")
                })?
                .parse()
                .ok()
                .filter(|&m: &i64| m > 0)
                .ok_or_else(|| anyhow!("--rand {arg}: the range must be a positive integer"))?;
            // Values run to max - 1, which the index type must hold.
            if i == spindle::formats::IType::I32 && max - 1 > i64::from(i32::MAX) {
                bail!(
                    "--rand {arg}: i32 indices run to {}, so the range is at most {}",
                    i32::MAX,
                    1i64 << 31
                );
            }
            Input::random_indices(&shape, i, seed, max)
        }
    };
    Ok((name.to_string(), input))
}

fn shape_text(shape: &[usize]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
}

/// The output's name, its shape and the first values, for a terminal.
fn preview(name: &str, a: &ArrayD<f64>) -> String {
    let first: Vec<String> = a.iter().take(8).map(|&x| value_text(x)).collect();
    let more = if a.len() > 8 { ", ..." } else { "" };
    format!("{name}: {} = [{}{more}]", shape_text(a.shape()), first.join(", "))
}

/// The tensors `text` names (outputs, operands, index tensors inside
/// subscripts, and those a `where` gives a dtype), or `None` when it does
/// not parse.
fn tensor_names(text: &str) -> Option<std::collections::BTreeSet<String>> {
    use spindle_ir::lang::WhereClause;
    let statements = spindle_ir::program::parse_program(text).ok()?;
    let mut names = std::collections::BTreeSet::new();
    for statement in &statements {
        names.extend(statement.all_accesses().into_iter().map(|a| a.tensor.name.clone()));
        for clause in &statement.wheres {
            if let WhereClause::Dtype { tensor, .. } = clause {
                names.insert(tensor.name.clone());
            }
        }
    }
    Some(names)
}
