//! Level formats after TACO (Chou et al.): each concrete format is a stack
//! of levels, one per (possibly blocked) dimension. `Padded(g)` is the fixed
//! number of children per parent that GroupCOO, BlockGroupCOO and ELL use.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum LevelFormat {
    /// Every coordinate of the dimension, no arrays.
    Dense,
    /// `pos` and `crd` arrays; `unique: false` lets a coordinate repeat
    /// (the top level of COO and GroupCOO).
    Compressed { unique: bool },
    /// One coordinate per parent, a `crd` array only (COO's lower levels).
    Singleton,
    /// Exactly `g` children per parent with a `crd` array; padding repeats
    /// a real coordinate and holds value 0.
    Padded(usize),
}

/// Which part of a tensor dimension a level stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum DimPart {
    Whole,
    /// The block coordinate `i / b`.
    BlockOuter(usize),
    /// The offset inside a block, `i % b`.
    BlockInner(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Level {
    pub dim: usize,
    pub part: DimPart,
    pub format: LevelFormat,
}

impl Level {
    pub fn new(dim: usize, format: LevelFormat) -> Self {
        Level { dim, part: DimPart::Whole, format }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.format {
            LevelFormat::Dense => write!(f, "dense")?,
            LevelFormat::Compressed { unique: true } => write!(f, "compressed")?,
            LevelFormat::Compressed { unique: false } => write!(f, "compressed(nonunique)")?,
            LevelFormat::Singleton => write!(f, "singleton")?,
            LevelFormat::Padded(g) => write!(f, "padded({g})")?,
        }
        match self.part {
            DimPart::Whole => write!(f, "(d{})", self.dim),
            DimPart::BlockOuter(b) => write!(f, "(d{}/{b})", self.dim),
            DimPart::BlockInner(b) => write!(f, "(d{}%{b})", self.dim),
        }
    }
}
