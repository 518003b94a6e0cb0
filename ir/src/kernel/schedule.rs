//! Schedules: how a statement becomes a kernel, as data with one printed
//! and parsed syntax so the explorer can show, edit and sweep them:
//!
//! ```text
//! tile.p=16 tile.n=64 reduce=accumulate broadcast=lazy matmul=on parallel=p order=q+p
//! ```
//!
//! Items are separated by spaces or commas; every item is optional.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::Strategy;
pub use spindle_workspaces::runtime::{IsmOptions, Policy};

/// How values are shaped: minimal shapes (lazy) or every value over every
/// axis (eager, as TorchInductor does by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Broadcasting {
    Lazy,
    Eager,
}

/// Which lowering a statement with stored (sparse) operands takes
/// (DESIGN.md §2): the tile path rewrites the formats into arrays for dense
/// tiles; the level path iterates over the formats' levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Path {
    #[default]
    Tiles,
    Levels,
}

/// The workspace a sparse output's levels are gathered in on the level
/// path (`workspace=auto|dense|bucket|hash|coord|map|vector`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum WorkspacePolicy {
    /// Paper 001's rule of thumb: dense where a value per coordinate fits
    /// and coordinates repeat, a sparse policy otherwise.
    #[default]
    Auto,
    /// This policy of the insert-sort-merge runtime.
    Use(Policy),
}

/// How a program of several statements becomes kernels
/// (`fusion=none|maximal|trie`, paper 003).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Fusion {
    /// One loop nest per statement, each temporary whole in memory (in
    /// the pattern of the sparse operand that masks it, where one does).
    None,
    /// TACO's: the statements substituted into one statement, one loop
    /// nest.
    Maximal,
    /// ReACT's: loop nests share only common prefix loops, temporaries
    /// reduced to the dimensions those loops do not index.
    #[default]
    Trie,
}

impl Fusion {
    pub const ALL: [Fusion; 3] = [Fusion::None, Fusion::Maximal, Fusion::Trie];

    pub fn name(self) -> &'static str {
        match self {
            Fusion::None => "none",
            Fusion::Maximal => "maximal",
            Fusion::Trie => "trie",
        }
    }
}

/// How a fused program kernel's row loop runs (`strip=auto|N`, see
/// [`crate::level::strip_rows`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum StripRows {
    /// In strips where a fused consumer's loop-invariant reads would not
    /// stay in an L1 cache between rows, each row alone elsewhere.
    #[default]
    Auto,
    /// In strips of this many rows where the kernel has such a consumer
    /// (1: each row alone).
    Rows(usize),
}

impl StripRows {
    /// The most rows a strip may take: a strip's accumulators are a block
    /// of the consumer's output rows.
    pub const MAX: usize = 64;
}

impl fmt::Display for Fusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the CUDA printer maps a tile kernel onto threads (`map=tiles|walk|rows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mapping {
    /// One block per program; values are shared tiles filled by all its
    /// threads.
    #[default]
    Tiles,
    /// A warp walks a run of `p` (the p tile) in order and its lanes own
    /// 16-byte vectors of `n`: a row's sum stays in registers while the
    /// run stays in the row (Sgap's segment reduction with a group of one
    /// thread per column, paper 004's ⟨g nnz, c col⟩), so only the run's
    /// first and last row are written atomically (where a row of `n` takes
    /// at most half the lanes, sub-warps take alternate entries of a group
    /// and add their sums before a row is written). For gather-scale-scatter
    /// kernels `C[R[p],n] += V[p,q] * B[K[p,q],n]` (GroupCOO, COO SpMM)
    /// whose rows `R` are in order.
    Walk,
    /// A block owns a block row of the output and a `tile.n` slab of its
    /// columns, sums every group of the row on Tensor Cores with the
    /// operand tiles streamed through a ring of shared buffers, and writes
    /// each output element once: no atomics, and no zeroing of an output
    /// that starts at zero. For block-sparse SpMM
    /// `C[bm*R[p]+bi,n] += V[p,q,bi,bj] * B[bk*K[p,q]+bj,n]`
    /// (BlockGroupCOO over rows) whose rows `R` are in order. For
    /// `C[R[p],n] += V[p,q] * B[K[p,q],n]` (GroupCOO, COO SpMM) the row
    /// walk: a warp walks the rows whose first group lies in its run of
    /// `p` (the p tile), whole, and writes each of them (and the empty rows
    /// after them) once, in its output type.
    Rows,
}

impl Mapping {
    pub fn name(self) -> &'static str {
        match self {
            Mapping::Tiles => "tiles",
            Mapping::Walk => "walk",
            Mapping::Rows => "rows",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// `path=tiles|levels`.
    pub path: Path,
    /// `workspace=auto|dense|bucket|hash|coord|map|vector` (the level
    /// path's sparse outputs).
    pub workspace: WorkspacePolicy,
    /// `ws.indexing|realloc|double_buffer|pipeline=on|off`: the ISM's
    /// optimizations.
    pub ws: IsmOptions,
    /// `fusion=none|maximal|trie`: how a program's statements share loops.
    pub fusion: Fusion,
    /// `strip=auto|N`: a fused program kernel's rows in strips of N.
    pub strip: StripRows,
    /// `subsect=on|off`: a loop that reduces an affine subscript of a stored
    /// operand visits only its non-empty subsections (on), or every value,
    /// the inner loop searching its window (off: TACO-UCF's dense outer
    /// loop, paper 002 §6.2, kept to compare against).
    pub subsections: bool,
    /// Tile size per index name; others get [`Schedule::DEFAULT_TILE`]
    /// (or the extent's next power of two when smaller).
    pub tiles: BTreeMap<String, usize>,
    pub strategy: Strategy,
    pub broadcasting: Broadcasting,
    /// Whether the native matmul pass turns multiply-then-sum into `dot`.
    pub native_matmul: bool,
    /// The output indices programs are spread over; the others stay whole
    /// inside each program (one tile). `None`: all of them.
    pub parallel: Option<Vec<String>>,
    /// Loop order: listed indices first, in this order, among the parallel
    /// (program grid) and among the reduced (the loop inside a program).
    pub order: Vec<String>,
    /// CPU threads the C backend runs on (`threads=N`); `None`: chosen by
    /// the driver (the autotuner, or one thread for small work). Other
    /// backends take their parallelism from the tiles.
    pub threads: Option<usize>,
    /// CUDA: run eligible `dot`s on Tensor Cores (`tensorcores=on|off`).
    pub tensor_cores: bool,
    /// CUDA: allow f32 products on Tensor Cores as tf32, with a 10-bit
    /// mantissa (`tf32=on|off`).
    pub tf32: bool,
    /// CUDA: threads per block (`block=N`, a multiple of 32 up to 1024);
    /// `None`: the largest tile's element count, 32 to 256.
    pub block: Option<u32>,
    /// CUDA: `map=tiles|walk|rows`.
    pub map: Mapping,
    /// CUDA, the warp and row walks (`l2hints=on|off`): B's rows are read
    /// with an L2 `evict_last` policy and C's 16-byte stores with
    /// `evict_first`, so the gathered rows outlast the streamed output.
    pub l2_hints: bool,
    /// CUDA, block rows (`split=on|off`): a block row far above the
    /// average is split across blocks (on by default).
    pub split_rows: bool,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            path: Path::Tiles,
            workspace: WorkspacePolicy::Auto,
            ws: IsmOptions::default(),
            fusion: Fusion::Trie,
            strip: StripRows::Auto,
            subsections: true,
            tiles: BTreeMap::new(),
            strategy: Strategy::AccumulateThenAtomic,
            broadcasting: Broadcasting::Lazy,
            native_matmul: true,
            parallel: None,
            order: Vec::new(),
            threads: None,
            tensor_cores: true,
            tf32: false,
            block: None,
            map: Mapping::Tiles,
            l2_hints: false,
            split_rows: true,
        }
    }
}

impl Schedule {
    pub const DEFAULT_TILE: usize = 16;
    /// Tiles larger than this are refused: a tile is a block of registers
    /// (or a stack array in C).
    pub const MAX_TILE: usize = 1024;
    /// The most CPU threads a schedule asks for (as the command line's
    /// `--threads` and a notebook cell's `threads`).
    pub const MAX_THREADS: usize = 4096;

    /// The tile of an axis of this extent.
    pub fn tile(&self, index: &str, extent: usize) -> usize {
        self.tiles
            .get(index)
            .copied()
            .unwrap_or_else(|| extent.max(1).next_power_of_two().min(Self::DEFAULT_TILE))
    }
}

/// A schedule that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid schedule item `{item}`: {reason}")]
pub struct ScheduleError {
    pub item: String,
    pub reason: String,
}

pub const SCHEDULE_SYNTAX: &str = "path=tiles|levels, workspace=auto|dense|bucket|hash|coord|map|vector, \
ws.indexing|realloc|double_buffer|pipeline=on|off, ws.cap=N, ws.pipeline_min=N, fusion=none|maximal|trie, strip=auto|N, subsect=on|off, tile.INDEX=N (a power of two), reduce=atomic|accumulate|segment(R)|parallel[(R)], broadcast=lazy|eager, \
matmul=on|off, parallel=INDEX+INDEX..., order=INDEX+INDEX..., threads=N (C), tensorcores=on|off, tf32=on|off, \
block=N, map=tiles|walk|rows, l2hints=on|off, split=on|off (CUDA)";

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Self, ScheduleError> {
        let mut s = Schedule::default();
        // Each key once: a second `threads=` silently won before.
        let mut given: Vec<&str> = Vec::new();
        for item in items(text) {
            let bad = |reason: &str| ScheduleError { item: item.to_string(), reason: reason.to_string() };
            let Some((key, value)) = item.split_once('=') else {
                return Err(bad(&format!("expected key=value ({SCHEDULE_SYNTAX})")));
            };
            if let Some(first) = given.iter().find(|g| g.split_once('=').is_some_and(|(k, _)| k == key)) {
                return Err(bad(&format!(
                    "`{key}` is given twice (first as `{first}`); a schedule names each item once"
                )));
            }
            given.push(item);
            match (key, value) {
                (k, v) if k.starts_with("tile.") => {
                    let index = &k["tile.".len()..];
                    let n: usize = v.parse().map_err(|_| {
                        bad(&format!("tile sizes are powers of two up to {}", Self::MAX_TILE))
                    })?;
                    if !n.is_power_of_two() || n > Self::MAX_TILE {
                        return Err(bad(&format!("tile sizes are powers of two up to {}", Self::MAX_TILE)));
                    }
                    if index.is_empty() {
                        return Err(bad("name the index: tile.n=64"));
                    }
                    s.tiles.insert(index.to_string(), n);
                }
                ("path", "tiles") => s.path = Path::Tiles,
                ("path", "levels") => s.path = Path::Levels,
                ("path", _) => return Err(bad("path is tiles or levels")),
                ("workspace", "auto") => s.workspace = WorkspacePolicy::Auto,
                ("workspace", v) => {
                    s.workspace = WorkspacePolicy::Use(v.parse().map_err(|_: String| {
                        let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
                        bad(&format!("workspace is auto or a policy: {}", names.join(", ")))
                    })?)
                }
                ("fusion", v) => {
                    s.fusion = Fusion::ALL
                        .into_iter()
                        .find(|f| f.name() == v)
                        .ok_or_else(|| bad("fusion is none, maximal or trie"))?
                }
                ("strip", "auto") => s.strip = StripRows::Auto,
                ("strip", v) => match v.parse::<usize>() {
                    Ok(n) if (1..=StripRows::MAX).contains(&n) => s.strip = StripRows::Rows(n),
                    _ => {
                        return Err(bad(&format!(
                            "strip is auto or a number of rows from 1 (each row alone) to {}",
                            StripRows::MAX
                        )));
                    }
                },
                ("subsect", "on") => s.subsections = true,
                ("subsect", "off") => s.subsections = false,
                ("subsect", _) => return Err(bad("subsect is on or off")),
                (k, v) if k.starts_with("ws.") => s.ws.set(&k["ws.".len()..], v).map_err(|e| bad(&e))?,
                ("map", "tiles") => s.map = Mapping::Tiles,
                ("map", "walk") => s.map = Mapping::Walk,
                ("map", "rows") => s.map = Mapping::Rows,
                ("map", _) => return Err(bad("map is tiles, walk or rows")),
                ("reduce", v) => s.strategy = v.parse().map_err(|e: String| bad(&e))?,
                ("broadcast", "lazy") => s.broadcasting = Broadcasting::Lazy,
                ("broadcast", "eager") => s.broadcasting = Broadcasting::Eager,
                ("matmul", "on") => s.native_matmul = true,
                ("matmul", "off") => s.native_matmul = false,
                ("parallel", v) => s.parallel = Some(index_list(v).map_err(|r| bad(&r))?),
                ("order", v) => s.order = index_list(v).map_err(|r| bad(&r))?,
                ("threads", v) => match v.parse::<usize>() {
                    Ok(n) if (1..=Self::MAX_THREADS).contains(&n) => s.threads = Some(n),
                    _ => return Err(bad(&format!("threads is a number from 1 to {}", Self::MAX_THREADS))),
                },
                ("tensorcores", v) => {
                    s.tensor_cores = on_off(v).ok_or_else(|| bad("tensorcores is on or off"))?
                }
                ("tf32", v) => s.tf32 = on_off(v).ok_or_else(|| bad("tf32 is on or off"))?,
                ("l2hints", v) => s.l2_hints = on_off(v).ok_or_else(|| bad("l2hints is on or off"))?,
                ("split", v) => s.split_rows = on_off(v).ok_or_else(|| bad("split is on or off"))?,
                ("block", v) => match v.parse::<u32>() {
                    Ok(n) if n > 0 && n <= 1024 && n % 32 == 0 => s.block = Some(n),
                    _ => return Err(bad("block is a multiple of 32 up to 1024 (threads per CUDA block)")),
                },
                ("broadcast", _) => return Err(bad("broadcast is lazy or eager")),
                ("matmul", _) => return Err(bad("matmul is on or off")),
                _ => return Err(bad(&format!("unknown key ({SCHEDULE_SYNTAX})"))),
            }
        }
        Ok(s)
    }
}

/// A schedule text's items (`key=value`), in order.
fn items(text: &str) -> impl Iterator<Item = &str> {
    text.split([' ', ',', ';']).map(str::trim).filter(|i| !i.is_empty())
}

/// Where in schedule `text` the item with key `key` stands.
pub fn item_span(text: &str, key: &str) -> Option<crate::lang::Span> {
    let item = items(text).find(|i| i.split_once('=').map_or(*i, |(k, _)| k) == key)?;
    // (`items` yields slices of `text`.)
    let start = item.as_ptr() as usize - text.as_ptr() as usize;
    Some(crate::lang::Span { start, end: start + item.len() })
}

/// The kernel one statement compiled to, as far as the schedule items it
/// reads go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelKind {
    pub path: Path,
    /// CUDA C (on a GPU or emulated); otherwise C.
    pub cuda: bool,
    /// The workspace a level-path kernel gathers its sparse output in
    /// (`None`: a dense output, one its loops append directly, and every
    /// tile kernel).
    pub workspace: Option<crate::level::WorkspaceKind>,
    /// Whether a level-path kernel walks an operand read at affine
    /// subscripts (a convolution's subsection loops).
    pub affine: bool,
}

impl KernelKind {
    /// A tile-path kernel.
    pub fn tiles(cuda: bool) -> KernelKind {
        KernelKind { path: Path::Tiles, cuda, workspace: None, affine: false }
    }

    /// The level-path kernel `kernel`.
    pub fn levels(kernel: &crate::level::LevelKernel, cuda: bool) -> KernelKind {
        let gathers =
            crate::level::Node::any(&kernel.body, &|n| matches!(n, crate::level::Node::Workspace { .. }));
        KernelKind {
            path: Path::Levels,
            cuda,
            workspace: kernel.assembly.as_ref().filter(|_| gathers).map(|a| a.workspace),
            affine: !kernel.affine.is_empty(),
        }
    }

    fn describe(self) -> String {
        let path = match self.path {
            Path::Tiles => "tile",
            Path::Levels => "level",
        };
        format!("this is a {} kernel on the {path} path", if self.cuda { "CUDA" } else { "C" })
    }
}

impl Schedule {
    /// Whether schedule `text` sets an item only programs read (`fusion=`,
    /// `strip=`): a notebook cell with one runs its statements as a program.
    pub fn sets_program_items(text: &str) -> bool {
        items(text).any(|item| matches!(item.split_once('=').map_or(item, |(k, _)| k), "fusion" | "strip"))
    }

    /// The items of the schedule `text` that a single statement's kernel of
    /// `kind` does not read, each with what reads it. They parse, since one
    /// schedule serves sweeps over paths and targets, but change nothing
    /// in this kernel, which a user who wrote them should hear.
    pub fn unread(text: &str, kind: KernelKind) -> Vec<String> {
        let tiles = kind.path == Path::Tiles;
        let levels = kind.path == Path::Levels;
        // Checked where the schedule was parsed.
        let parsed: Schedule = text.parse().unwrap_or_default();
        let cuda_tiles = kind.cuda && tiles;
        let (walk, rows) = (parsed.map == Mapping::Walk, parsed.map == Mapping::Rows);
        items(text)
            .filter_map(|item| {
                let key = item.split_once('=').map_or(item, |(k, _)| k);
                let (reads, by) = match key {
                    "path" | "order" => return None,
                    // The walks reduce as they walk (a run's interior rows
                    // in registers; the row walk and block rows own their
                    // rows); the level path's rows are their own, but a
                    // CUDA warp may split one (`parallel`).
                    "reduce" if tiles => (!(kind.cuda && (walk || rows)), "map=tiles kernels (a walk reduces as it walks)"),
                    "reduce" => (
                        kind.cuda && matches!(parsed.strategy, Strategy::Parallel(_)),
                        "tile-path kernels (on the level path, reduce=parallel splits a row over a CUDA warp)",
                    ),
                    "tensorcores" => (cuda_tiles && !walk && !rows, "CUDA kernels with map=tiles (block rows always use them)"),
                    "tf32" => (cuda_tiles && !walk, "CUDA kernels with map=tiles or map=rows"),
                    "l2hints" => (cuda_tiles && (walk || rows), "CUDA walks (map=walk or map=rows)"),
                    "split" => (cuda_tiles && rows, "CUDA block rows (map=rows)"),
                    // A walk's lanes own whole rows of `n`; its run is
                    // the p tile.
                    k if k.starts_with("tile.") && kind.cuda && walk && k != "tile.p" => {
                        (false, "tile-path kernels but a CUDA walk (map=walk), which reads tile.p only")
                    }
                    k if k.starts_with("tile.") => (tiles, "tile-path kernels"),
                    "broadcast" | "matmul" | "parallel" => (tiles, "tile-path kernels"),
                    k if k.starts_with("ws.") => (
                        levels && matches!(kind.workspace, Some(crate::level::WorkspaceKind::Ism(_))),
                        "level-path kernels that gather a sparse output in a sparse workspace (bucket, hash, \
                         coord, map or vector)",
                    ),
                    "workspace" => (
                        levels && kind.workspace.is_some(),
                        "level-path kernels that gather a sparse output in a workspace (a product's rows, as \
                         SpGEMM's; not a union or intersection, which appends as it walks, or a dense output)",
                    ),
                    "subsect" => (levels && kind.affine, "level-path kernels over affine subscripts (convolutions)"),
                    "fusion" | "strip" => (false, "programs (several statements)"),
                    "threads" => (!kind.cuda, "C kernels (CUDA takes its parallelism from the tiles)"),
                    "block" | "map" => {
                        (kind.cuda && tiles, "CUDA kernels on the tile path")
                    }
                    _ => return None,
                };
                (!reads).then(|| {
                    format!("`{item}` changes nothing here: it is read by {by}, and {}", kind.describe())
                })
            })
            .collect()
    }
}

impl Schedule {
    /// [`Schedule::unread`] for a program whose kernels are of `kinds`:
    /// the items none of them reads (`fusion=` and `strip=` are the
    /// program's own).
    pub fn unread_by_program(text: &str, kinds: &[KernelKind]) -> Vec<String> {
        let key = |note: &str| note.split('`').nth(1).unwrap_or_default().to_string();
        let each: Vec<Vec<String>> = kinds.iter().map(|&k| Schedule::unread(text, k)).collect();
        let Some((first, others)) = each.split_first() else { return Vec::new() };
        first
            .iter()
            .filter(|note| {
                let item = key(note);
                let name = item.split_once('=').map_or(item.as_str(), |(k, _)| k);
                !matches!(name, "fusion" | "strip") && others.iter().all(|o| o.iter().any(|n| key(n) == item))
            })
            .map(|note| match (kinds.len(), note.split_once(", and this is ")) {
                (2.., Some((head, _))) => {
                    format!("{head}, and none of this program's {} kernels is", kinds.len())
                }
                _ => note.clone(),
            })
            .collect()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, n) in &self.tiles {
            write!(f, "tile.{index}={n} ")?;
        }
        let reduce = self.strategy;
        let broadcast = match self.broadcasting {
            Broadcasting::Lazy => "lazy",
            Broadcasting::Eager => "eager",
        };
        let matmul = if self.native_matmul { "on" } else { "off" };
        write!(f, "reduce={reduce} broadcast={broadcast} matmul={matmul}")?;
        if let Some(parallel) = &self.parallel {
            write!(f, " parallel={}", parallel.join("+"))?;
        }
        if !self.order.is_empty() {
            write!(f, " order={}", self.order.join("+"))?;
        }
        if let Some(threads) = self.threads {
            write!(f, " threads={threads}")?;
        }
        // The CUDA items only where they differ from the default, so
        // schedules that never name them print as before.
        if !self.tensor_cores {
            write!(f, " tensorcores=off")?;
        }
        if self.tf32 {
            write!(f, " tf32=on")?;
        }
        if let Some(block) = self.block {
            write!(f, " block={block}")?;
        }
        if self.map != Mapping::Tiles {
            write!(f, " map={}", self.map.name())?;
        }
        if self.l2_hints {
            write!(f, " l2hints=on")?;
        }
        if !self.split_rows {
            write!(f, " split=off")?;
        }
        if self.path == Path::Levels {
            write!(f, " path=levels")?;
        }
        if let WorkspacePolicy::Use(p) = self.workspace {
            write!(f, " workspace={p}")?;
        }
        if self.fusion != Fusion::Trie {
            write!(f, " fusion={}", self.fusion)?;
        }
        if let StripRows::Rows(n) = self.strip {
            write!(f, " strip={n}")?;
        }
        if !self.subsections {
            write!(f, " subsect=off")?;
        }
        let default = IsmOptions::default().items();
        for ((name, on), (_, was)) in self.ws.items().into_iter().zip(default) {
            if on != was {
                write!(f, " ws.{name}={}", if on { "on" } else { "off" })?;
            }
        }
        let default = IsmOptions::default();
        if self.ws.capacity != default.capacity {
            write!(f, " ws.cap={}", self.ws.capacity)?;
        }
        if self.ws.pipeline_min != default.pipeline_min {
            write!(f, " ws.pipeline_min={}", self.ws.pipeline_min)?;
        }
        Ok(())
    }
}

fn on_off(v: &str) -> Option<bool> {
    match v {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// `i+j`: index names joined by `+`.
fn index_list(v: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = v.split('+').map(|n| n.trim().to_string()).collect();
    if names.iter().any(|n| n.is_empty() || !n.chars().all(|c| c.is_alphanumeric() || c == '_')) {
        return Err("list index names joined by `+`, e.g. i+j".to_string());
    }
    if let Some((_, twice)) = names.iter().enumerate().find(|(at, n)| names[..*at].contains(n)) {
        return Err(format!("`{twice}` is listed twice: name each index once"));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_name_each_index_once_and_threads_are_bounded() {
        for (items, why) in [
            ("order=i+i+j", "`i` is listed twice"),
            ("parallel=p+n+p", "`p` is listed twice"),
            ("threads=100000", "threads is a number from 1 to 4096"),
            ("threads=0", "threads is a number from 1 to 4096"),
            ("tile.n=-1", "tile sizes are powers of two up to 1024"),
        ] {
            let e = items.parse::<Schedule>().unwrap_err().to_string();
            assert!(e.contains(why), "{items}: {e}");
        }
        assert_eq!("threads=4096".parse::<Schedule>().unwrap().threads, Some(4096));
    }

    #[test]
    fn items_a_kernel_does_not_read_are_named() {
        let text = "path=levels reduce=atomic order=m tile.m=4 parallel=m matmul=off ws.cap=8 workspace=hash \
                    subsect=off fusion=none strip=4 threads=2 map=walk tf32=on";
        // A level kernel with a sparse workspace, over affine subscripts.
        let unread = |path, cuda| {
            let kind = match path {
                Path::Tiles => KernelKind::tiles(cuda),
                Path::Levels => KernelKind {
                    path,
                    cuda,
                    workspace: Some(crate::level::WorkspaceKind::Ism(Policy::Hash)),
                    affine: true,
                },
            };
            Schedule::unread(text, kind)
                .iter()
                .map(|n| n.split('`').nth(1).unwrap().split('=').next().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            unread(Path::Levels, false),
            ["reduce", "tile.m", "parallel", "matmul", "fusion", "strip", "map", "tf32"]
        );
        // A walk reduces as it walks, reads the p tile only, and runs no
        // Tensor Cores.
        assert_eq!(
            unread(Path::Tiles, true),
            ["reduce", "tile.m", "ws.cap", "workspace", "subsect", "fusion", "strip", "threads", "tf32"]
        );
        assert_eq!(
            unread(Path::Levels, true),
            ["reduce", "tile.m", "parallel", "matmul", "fusion", "strip", "threads", "map", "tf32"]
        );
        let cuda_tiles = KernelKind::tiles(true);
        assert!(Schedule::unread("tile.p=8 map=walk block=64 l2hints=on", cuda_tiles).is_empty());
        let names = |text: &str, kind| {
            Schedule::unread(text, kind)
                .iter()
                .map(|n| n.split('`').nth(1).unwrap().split('=').next().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names("reduce=segment(4) l2hints=on split=off tensorcores=off", cuda_tiles),
            ["l2hints", "split"]
        );
        assert_eq!(
            names("map=rows reduce=atomic tensorcores=off split=off", cuda_tiles),
            ["reduce", "tensorcores"]
        );
        // The level path reads reduce=parallel on CUDA (a warp splits a row).
        let levels = KernelKind { path: Path::Levels, cuda: true, workspace: None, affine: false };
        assert!(names("reduce=parallel", levels).is_empty());
        // A level kernel without a workspace (a dense output, a union
        // appended as it walks) or affine subscripts reads none of theirs;
        // one with a dense workspace reads `workspace` only.
        assert_eq!(names("workspace=hash ws.cap=4 subsect=off", levels), ["workspace", "ws.cap", "subsect"]);
        let dense = KernelKind { workspace: Some(crate::level::WorkspaceKind::Dense), ..levels };
        assert_eq!(names("workspace=dense ws.pipeline=on", dense), ["ws.pipeline"]);
        // A CUDA walk reads the p tile only.
        assert_eq!(names("map=walk tile.p=16 tile.n=8", cuda_tiles), ["tile.n"]);
        // A program: what none of its kernels reads; fusion= is its own.
        let program = [KernelKind::tiles(false), KernelKind { cuda: false, ..levels }];
        assert_eq!(
            Schedule::unread_by_program("tile.p=4 map=walk fusion=none subsect=on", &program),
            [
                "`map=walk` changes nothing here: it is read by CUDA kernels on the tile path, and none of this \
                 program's 2 kernels is",
                "`subsect=on` changes nothing here: it is read by level-path kernels over affine subscripts \
                 (convolutions), and none of this program's 2 kernels is"
            ]
        );
        let note = &Schedule::unread("map=walk", KernelKind::tiles(false))[0];
        assert_eq!(
            note,
            "`map=walk` changes nothing here: it is read by CUDA kernels on the tile path, and this is a C kernel \
             on the tile path"
        );
    }

    #[test]
    fn schedules_print_and_parse() {
        let walk: Schedule = "map=walk tile.p=32".parse().unwrap();
        assert_eq!(walk.to_string(), "tile.p=32 reduce=accumulate broadcast=lazy matmul=on map=walk");
        let rows: Schedule = "map=rows tile.n=128".parse().unwrap();
        assert_eq!(rows.map, Mapping::Rows);
        assert_eq!(rows.to_string(), "tile.n=128 reduce=accumulate broadcast=lazy matmul=on map=rows");
        let bad = "map=warps".parse::<Schedule>().unwrap_err().to_string();
        assert!(bad.contains("map is tiles, walk or rows"), "{bad}");
        for reduce in ["atomic", "accumulate", "segment(1)", "segment(8)", "parallel", "parallel(32)"] {
            let s: Schedule = format!("reduce={reduce}").parse().unwrap();
            assert_eq!(s.to_string(), format!("reduce={reduce} broadcast=lazy matmul=on"));
        }
        let s: Schedule = "tile.p=16, tile.n=64 reduce=atomic broadcast=eager matmul=off".parse().unwrap();
        assert_eq!(s.tiles["n"], 64);
        assert_eq!(s.strategy, Strategy::AtomicPerElement);
        assert_eq!(s.to_string(), "tile.n=64 tile.p=16 reduce=atomic broadcast=eager matmul=off");
        assert_eq!(s.to_string().parse::<Schedule>().unwrap(), s);
        let s: Schedule = "parallel=p order=q+p".parse().unwrap();
        assert_eq!(s.parallel, Some(vec!["p".to_string()]));
        assert_eq!(s.order, ["q", "p"]);
        assert_eq!(s.to_string(), "reduce=accumulate broadcast=lazy matmul=on parallel=p order=q+p");
        assert_eq!(s.to_string().parse::<Schedule>().unwrap(), s);
        let s: Schedule = "threads=2 tile.p=1".parse().unwrap();
        assert_eq!(s.threads, Some(2));
        assert_eq!(s.to_string(), "tile.p=1 reduce=accumulate broadcast=lazy matmul=on threads=2");
        assert_eq!(s.to_string().parse::<Schedule>().unwrap(), s);
        let s: Schedule = "tf32=on block=128 tensorcores=off".parse().unwrap();
        assert!(s.tf32 && !s.tensor_cores);
        assert_eq!(s.block, Some(128));
        assert_eq!(
            s.to_string(),
            "reduce=accumulate broadcast=lazy matmul=on tensorcores=off tf32=on block=128"
        );
        assert_eq!(s.to_string().parse::<Schedule>().unwrap(), s);
        let s: Schedule = "map=walk l2hints=on".parse().unwrap();
        assert!(s.l2_hints);
        assert_eq!(s.to_string(), "reduce=accumulate broadcast=lazy matmul=on map=walk l2hints=on");
        let s: Schedule = "map=rows split=off".parse().unwrap();
        assert!(!s.split_rows);
        assert_eq!(s.to_string(), "reduce=accumulate broadcast=lazy matmul=on map=rows split=off");
        assert_eq!(s.to_string().parse::<Schedule>().unwrap(), s);
        let s: Schedule = "path=levels order=k+m".parse().unwrap();
        assert_eq!(s.path, Path::Levels);
        assert_eq!(s.to_string(), "reduce=accumulate broadcast=lazy matmul=on order=k+m path=levels");
        assert_eq!(s.to_string().parse::<Schedule>().unwrap(), s);
        assert_eq!("".parse::<Schedule>().unwrap(), Schedule::default());
        assert_eq!(Schedule::default().tile("k", 5), 8);
        assert_eq!(Schedule::default().tile("k", 500), 16);
    }

    #[test]
    fn bad_items_are_named() {
        let err = |s: &str| s.parse::<Schedule>().unwrap_err().to_string();
        assert_eq!(
            err("tile.n=48"),
            "invalid schedule item `tile.n=48`: tile sizes are powers of two up to 1024"
        );
        assert_eq!(
            err("reduce=segment"),
            "invalid schedule item `reduce=segment`: reduce is atomic, accumulate, segment(R), parallel(R) or parallel (the tile of the reduced index, at most 32), R in 1, 2, 4, 8, 16, 32"
        );
        assert!(err("reduce=segment(3)").contains("`3` is not a group size"));
        assert!(err("reduce=parallel(64)").contains("`64` is not a group size"));
        assert!(err("warps=4").starts_with("invalid schedule item `warps=4`: unknown key"));
        assert!(err("tile.n").contains("expected key=value"));
        assert_eq!(
            err("order=p+"),
            "invalid schedule item `order=p+`: list index names joined by `+`, e.g. i+j"
        );
        assert_eq!(err("threads=0"), "invalid schedule item `threads=0`: threads is a number from 1 to 4096");
        assert!(err("block=48").contains("multiple of 32 up to 1024"));
        assert!(err("block=2048").contains("multiple of 32 up to 1024"));
        assert_eq!(err("path=both"), "invalid schedule item `path=both`: path is tiles or levels");
        assert_eq!(err("tf32=yes"), "invalid schedule item `tf32=yes`: tf32 is on or off");
        assert_eq!(err("l2hints=1"), "invalid schedule item `l2hints=1`: l2hints is on or off");
        // A first workspace of 2^31 entries was asked of malloc and crashed
        // the kernel; the bound is refused here.
        assert!(err("ws.cap=2147483648").contains("ws.cap is an integer from 1 to 67108864"));
        assert!(err("ws.pipeline_min=0").contains("ws.pipeline_min is an integer from 1"));
        assert!("ws.cap=67108864".parse::<Schedule>().is_ok());
        assert_eq!(
            err("strip=0"),
            "invalid schedule item `strip=0`: strip is auto or a number of rows from 1 (each row alone) to 64"
        );
        assert!(err("strip=65").contains("from 1 (each row alone) to 64"));
        let strip: Schedule = "strip=4".parse().unwrap();
        assert_eq!(strip.strip, StripRows::Rows(4));
        assert_eq!(strip.to_string().parse::<Schedule>().unwrap(), strip, "strip= prints back");
        // A second item of a key silently replaced the first.
        assert_eq!(
            err("threads=1 tile.n=64 threads=2"),
            "invalid schedule item `threads=2`: `threads` is given twice (first as `threads=1`); a schedule names each item once"
        );
        assert!(err("tile.n=64 tile.n=32").contains("`tile.n` is given twice"));
        assert!(err("ws.cap=8,ws.cap=16").contains("`ws.cap` is given twice"));
        assert!("tile.n=64 tile.p=32 ws.cap=8 ws.pipeline_min=2".parse::<Schedule>().is_ok());
    }
}
