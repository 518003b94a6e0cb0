//! Generator specs as users write them on the command line.

use std::fmt;
use std::str::FromStr;

use super::random::{DEFAULT_ALPHA, check_power_law, check_tensor_fits, check_uniform};
use super::structured::{DEFAULT_BLOCK, check_block_sparse};
use crate::scalar::{Index, Value};
use crate::{Coo, FormatError, Result};

/// The seed of a spec that names none.
pub const DEFAULT_SEED: u64 = 0;

/// A generator and its parameters, parsed from `kind:key=value,...`:
///
/// | spec | keys (defaults) |
/// | --- | --- |
/// | `uniform` | `rows`, `cols`, `nnz`, `seed` (0) |
/// | `uniform` | `shape` (`AxBxC`), `nnz` or `density` (the fraction of cells), `seed` (0) |
/// | `powerlaw` | `rows`, `cols`, `nnz`, `alpha` ([`DEFAULT_ALPHA`]), `seed` (0) |
/// | `blocks` | `rows`, `cols`, `bm` (32), `bk` (= `bm`), `density`, `seed` (0) |
/// | `banded` | `n`, `lower`, `upper`, `seed` (0) |
///
/// Kinds also answer to `power_law` / `power-law`, `block_sparse` /
/// `block-sparse` and `band`. Counts may be written `100_000` or `1e5`.
/// Parsing checks the parameters, so a spec that parses generates (memory
/// permitting); [`Display`](fmt::Display) writes a spec back in full.
///
/// ```
/// use spindle_formats::generate::GeneratorSpec;
///
/// let spec: GeneratorSpec = "blocks:rows=4096,cols=4096,bm=32,bk=32,density=0.2,seed=1".parse()?;
/// assert_eq!(spec.shape(), vec![4096, 4096]);
/// let a = spec.generate::<f32, i32>()?;
/// assert_eq!(a.nnz(), 3277 * 32 * 32); // round(0.2 * 128 * 128) blocks
///
/// let err = "uniform:rows=10,cols=10,nzz=5".parse::<GeneratorSpec>().unwrap_err();
/// assert!(err.to_string().contains("unknown key \"nzz\""));
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum GeneratorSpec {
    /// [`uniform`](super::uniform).
    Uniform { rows: usize, cols: usize, nnz: usize, seed: u64 },
    /// [`uniform_tensor`](super::uniform_tensor): `uniform` given a `shape`.
    UniformTensor { shape: Vec<usize>, nnz: usize, seed: u64 },
    /// [`power_law`](super::power_law).
    PowerLaw { rows: usize, cols: usize, nnz: usize, alpha: f64, seed: u64 },
    /// [`block_sparse`](super::block_sparse) with `density` the fraction of
    /// blocks kept.
    Blocks { rows: usize, cols: usize, bm: usize, bk: usize, density: f64, seed: u64 },
    /// [`banded`](super::banded), `n x n`.
    Banded { n: usize, lower: usize, upper: usize, seed: u64 },
}

const KINDS: &str = "uniform, powerlaw, blocks, banded";

impl GeneratorSpec {
    /// Runs the generator.
    pub fn generate<V: Value, I: Index>(&self) -> Result<Coo<V, I>> {
        match self {
            &GeneratorSpec::Uniform { rows, cols, nnz, seed } => super::uniform(rows, cols, nnz, seed),
            GeneratorSpec::UniformTensor { shape, nnz, seed } => super::uniform_tensor(shape, *nnz, *seed),
            &GeneratorSpec::PowerLaw { rows, cols, nnz, alpha, seed } => {
                super::power_law(rows, cols, nnz, alpha, seed)
            }
            &GeneratorSpec::Blocks { rows, cols, bm, bk, density, seed } => {
                super::block_sparse(rows, cols, bm, bk, density, seed)
            }
            &GeneratorSpec::Banded { n, lower, upper, seed } => super::banded(n, lower, upper, seed),
        }
    }

    /// The spec's kind as written: `uniform`, `powerlaw`, `blocks` or
    /// `banded`.
    pub fn kind(&self) -> &'static str {
        match self {
            GeneratorSpec::Uniform { .. } | GeneratorSpec::UniformTensor { .. } => "uniform",
            GeneratorSpec::PowerLaw { .. } => "powerlaw",
            GeneratorSpec::Blocks { .. } => "blocks",
            GeneratorSpec::Banded { .. } => "banded",
        }
    }

    /// The shape of the tensor it generates.
    pub fn shape(&self) -> Vec<usize> {
        match self {
            &GeneratorSpec::Uniform { rows, cols, .. }
            | &GeneratorSpec::PowerLaw { rows, cols, .. }
            | &GeneratorSpec::Blocks { rows, cols, .. } => vec![rows, cols],
            &GeneratorSpec::Banded { n, .. } => vec![n, n],
            GeneratorSpec::UniformTensor { shape, .. } => shape.clone(),
        }
    }

    pub fn seed(&self) -> u64 {
        match *self {
            GeneratorSpec::Uniform { seed, .. }
            | GeneratorSpec::UniformTensor { seed, .. }
            | GeneratorSpec::PowerLaw { seed, .. }
            | GeneratorSpec::Blocks { seed, .. }
            | GeneratorSpec::Banded { seed, .. } => seed,
        }
    }

    /// The same spec with another seed.
    pub fn with_seed(mut self, new: u64) -> Self {
        match &mut self {
            GeneratorSpec::Uniform { seed, .. }
            | GeneratorSpec::UniformTensor { seed, .. }
            | GeneratorSpec::PowerLaw { seed, .. }
            | GeneratorSpec::Blocks { seed, .. }
            | GeneratorSpec::Banded { seed, .. } => *seed = new,
        }
        self
    }

    /// The same checks the generators make, done before any work.
    fn validate(&self) -> Result<()> {
        match self {
            &GeneratorSpec::Uniform { rows, cols, nnz, .. } => check_uniform(rows, cols, nnz),
            GeneratorSpec::UniformTensor { shape, nnz, .. } => check_tensor_fits(shape, *nnz).map(|_| ()),
            &GeneratorSpec::PowerLaw { rows, cols, nnz, alpha, .. } => {
                check_power_law(rows, cols, nnz, alpha)
            }
            &GeneratorSpec::Blocks { bm, bk, density, .. } => check_block_sparse(bm, bk, density),
            GeneratorSpec::Banded { .. } => Ok(()),
        }
    }
}

impl fmt::Display for GeneratorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GeneratorSpec::Uniform { rows, cols, nnz, seed } => {
                write!(f, "uniform:rows={rows},cols={cols},nnz={nnz},seed={seed}")
            }
            GeneratorSpec::PowerLaw { rows, cols, nnz, alpha, seed } => {
                write!(f, "powerlaw:rows={rows},cols={cols},nnz={nnz},alpha={alpha},seed={seed}")
            }
            GeneratorSpec::Blocks { rows, cols, bm, bk, density, seed } => {
                write!(f, "blocks:rows={rows},cols={cols},bm={bm},bk={bk},density={density},seed={seed}")
            }
            GeneratorSpec::Banded { n, lower, upper, seed } => {
                write!(f, "banded:n={n},lower={lower},upper={upper},seed={seed}")
            }
            GeneratorSpec::UniformTensor { ref shape, nnz, seed } => {
                let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
                write!(f, "uniform:shape={},nnz={nnz},seed={seed}", shape.join("x"))
            }
        }
    }
}

impl FromStr for GeneratorSpec {
    type Err = FormatError;

    fn from_str(text: &str) -> Result<Self> {
        let text = text.trim();
        let (kind, params) = text.split_once(':').unwrap_or((text, ""));
        let (kind, keys): (&'static str, &'static [&'static str]) =
            match kind.trim().to_ascii_lowercase().as_str() {
                "uniform" => ("uniform", &["rows", "cols", "shape", "nnz", "density", "seed"]),
                "powerlaw" | "power_law" | "power-law" => {
                    ("powerlaw", &["rows", "cols", "nnz", "alpha", "seed"])
                }
                "blocks" | "block_sparse" | "block-sparse" => {
                    ("blocks", &["rows", "cols", "bm", "bk", "density", "seed"])
                }
                "banded" | "band" => ("banded", &["n", "lower", "upper", "seed"]),
                _ => {
                    return Err(spec_error(format!(
                        "unknown generator {kind:?} in {text:?}; expected one of {KINDS}, \
                         written kind:key=value,..."
                    )));
                }
            };
        let p = Params::parse(kind, keys, params)?;
        let seed = p.int("seed", Some(DEFAULT_SEED))?;
        let spec = match kind {
            "uniform" if p.has("shape") => {
                let shape = p.shape("shape")?;
                let cells: f64 = shape.iter().map(|&d| d as f64).product();
                let nnz = match (p.has("nnz"), p.has("density")) {
                    (true, false) => p.count("nnz", None)?,
                    (false, true) => match p.real("density", None)? {
                        d if (0.0..=1.0).contains(&d) => (d * cells).round() as usize,
                        d => return Err(p.value_error("density", &d.to_string(), "a fraction in [0, 1]")),
                    },
                    _ => return Err(p.key_error("give one of nnz and density".to_string())),
                };
                if p.has("rows") || p.has("cols") {
                    return Err(p.key_error("shape replaces rows and cols".to_string()));
                }
                GeneratorSpec::UniformTensor { shape, nnz, seed }
            }
            "uniform" => {
                if p.has("density") {
                    return Err(p.key_error("density needs a shape".to_string()));
                }
                GeneratorSpec::Uniform {
                    rows: p.count("rows", None)?,
                    cols: p.count("cols", None)?,
                    nnz: p.count("nnz", None)?,
                    seed,
                }
            }
            "powerlaw" => GeneratorSpec::PowerLaw {
                rows: p.count("rows", None)?,
                cols: p.count("cols", None)?,
                nnz: p.count("nnz", None)?,
                alpha: p.real("alpha", Some(DEFAULT_ALPHA))?,
                seed,
            },
            "blocks" => {
                let bm = p.count("bm", Some(DEFAULT_BLOCK))?;
                GeneratorSpec::Blocks {
                    rows: p.count("rows", None)?,
                    cols: p.count("cols", None)?,
                    bm,
                    bk: p.count("bk", Some(bm))?,
                    density: p.real("density", None)?,
                    seed,
                }
            }
            _ => GeneratorSpec::Banded {
                n: p.count("n", None)?,
                lower: p.count("lower", None)?,
                upper: p.count("upper", None)?,
                seed,
            },
        };
        spec.validate()?;
        Ok(spec)
    }
}

fn spec_error(reason: String) -> FormatError {
    FormatError::invalid("generator spec", reason)
}

/// The `key=value` pairs of one spec, checked against its kind's keys.
struct Params<'a> {
    kind: &'static str,
    keys: &'static [&'static str],
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Params<'a> {
    fn parse(kind: &'static str, keys: &'static [&'static str], text: &'a str) -> Result<Self> {
        let mut params = Params { kind, keys, pairs: Vec::new() };
        for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(params.key_error(format!("{item:?} has no value (write key=value)")));
            };
            let (key, value) = (key.trim(), value.trim());
            if !keys.contains(&key) {
                return Err(params.key_error(format!("unknown key {key:?}")));
            }
            if params.pairs.iter().any(|&(k, _)| k == key) {
                return Err(params.key_error(format!("key {key:?} given twice")));
            }
            params.pairs.push((key, value));
        }
        Ok(params)
    }

    fn key_error(&self, what: String) -> FormatError {
        spec_error(format!("{what} for {}; expected keys: {}", self.kind, self.keys.join(", ")))
    }

    fn value_error(&self, key: &str, value: &str, expected: &str) -> FormatError {
        spec_error(format!("bad value {value:?} for key {key:?} of {}: expected {expected}", self.kind))
    }

    /// The raw value of `key`, or `None` when it is absent and has a
    /// default.
    fn raw<T>(&self, key: &str, default: &Option<T>) -> Result<Option<&'a str>> {
        match self.pairs.iter().find(|&&(k, _)| k == key) {
            Some(&(_, value)) => Ok(Some(value)),
            None if default.is_some() => Ok(None),
            None => Err(self.key_error(format!("missing key {key:?}"))),
        }
    }

    /// A non-negative integer: `1000`, `100_000` or `1e6`.
    fn int(&self, key: &str, default: Option<u64>) -> Result<u64> {
        let Some(value) = self.raw(key, &default)? else { return Ok(default.unwrap_or_default()) };
        let digits = value.replace('_', "");
        if let Ok(x) = digits.parse::<u64>() {
            return Ok(x);
        }
        match digits.parse::<f64>() {
            Ok(x) if x >= 0.0 && x.fract() == 0.0 && x < u64::MAX as f64 => Ok(x as u64),
            _ => Err(self.value_error(key, value, "a non-negative integer")),
        }
    }

    /// A count or size.
    fn count(&self, key: &str, default: Option<usize>) -> Result<usize> {
        let x = self.int(key, default.map(|d| d as u64))?;
        usize::try_from(x).map_err(|_| self.value_error(key, &x.to_string(), "a value that fits in usize"))
    }

    fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|&(k, _)| k == key)
    }

    /// Extents written `AxBxC`.
    fn shape(&self, key: &str) -> Result<Vec<usize>> {
        let Some(value) = self.raw::<()>(key, &None)? else { unreachable!("a key without a default") };
        value
            .split(['x', 'X'])
            .map(|d| d.trim().replace('_', "").parse::<usize>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| self.value_error(key, value, "extents written AxBxC"))
    }

    /// A finite real number.
    fn real(&self, key: &str, default: Option<f64>) -> Result<f64> {
        let Some(value) = self.raw(key, &default)? else { return Ok(default.unwrap_or_default()) };
        match value.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(x),
            _ => Err(self.value_error(key, value, "a finite number")),
        }
    }
}
