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

/// How many children a parent position has at a level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Children {
    /// Every coordinate of the dimension (no arrays).
    All,
    /// A range `pos[p] .. pos[p + 1]` (the whole `crd` at a root level
    /// without `pos`).
    Range,
    /// Exactly one, at the parent's own position.
    One,
    /// Exactly `g`, at `p * g .. p * g + g`.
    Fixed(usize),
}

/// What a level can do: the questions the lowering asks instead of naming
/// formats (DESIGN.md §4; TACO's mode-format interface, MLIR's level
/// types). A new format is a new list of levels.
///
/// ```
/// use spindle_formats::{Children, LevelCapabilities, LevelFormat};
///
/// let csr_rows = LevelFormat::Dense;
/// let csr_cols = LevelFormat::Compressed { unique: true };
/// assert!(csr_rows.locate() && !csr_cols.locate());
/// assert_eq!(csr_cols.children(), Children::Range);
/// assert!(csr_cols.ordered() && csr_cols.unique() && csr_cols.append());
/// assert!(!LevelFormat::Padded(4).unique()); // padding repeats a coordinate
/// ```
pub trait LevelCapabilities {
    /// Coordinate-value iteration: every coordinate `0..n` is stored.
    fn iterates_coordinates(&self) -> bool;
    /// Position iteration: the stored children of a parent are walked in
    /// position order, each with its coordinate in `crd`.
    fn iterates_positions(&self) -> bool;
    /// Random access in O(1): the position of coordinate `i` under parent
    /// `p` is `p * n + i`.
    fn locate(&self) -> bool;
    /// How many children a parent has, and where.
    fn children(&self) -> Children;
    /// The children's coordinates ascend.
    fn ordered(&self) -> bool;
    /// No coordinate repeats among a parent's children.
    fn unique(&self) -> bool;
    /// Every coordinate is present (no implicit zeros at this level).
    fn full(&self) -> bool;
    /// An output level can be assembled by appending coordinates in order.
    fn append(&self) -> bool;
    /// An output level takes writes at any coordinate, in any order.
    fn insert(&self) -> bool;
}

impl LevelCapabilities for LevelFormat {
    fn iterates_coordinates(&self) -> bool {
        matches!(self, LevelFormat::Dense)
    }

    fn iterates_positions(&self) -> bool {
        !self.iterates_coordinates()
    }

    fn locate(&self) -> bool {
        matches!(self, LevelFormat::Dense)
    }

    fn children(&self) -> Children {
        match self {
            LevelFormat::Dense => Children::All,
            LevelFormat::Compressed { .. } => Children::Range,
            LevelFormat::Singleton => Children::One,
            LevelFormat::Padded(g) => Children::Fixed(*g),
        }
    }

    fn ordered(&self) -> bool {
        // Padded groups keep their entries' order but pad with a repeat.
        !matches!(self, LevelFormat::Padded(_))
    }

    fn unique(&self) -> bool {
        match self {
            LevelFormat::Dense => true,
            LevelFormat::Compressed { unique } => *unique,
            // A singleton level's coordinates are unique under their parent
            // (there is one), but a singleton below a non-unique level
            // repeats: the lowering asks the parent too.
            LevelFormat::Singleton => true,
            LevelFormat::Padded(_) => false,
        }
    }

    fn full(&self) -> bool {
        matches!(self, LevelFormat::Dense)
    }

    fn append(&self) -> bool {
        matches!(self, LevelFormat::Compressed { .. } | LevelFormat::Singleton)
    }

    fn insert(&self) -> bool {
        matches!(self, LevelFormat::Dense)
    }
}

/// The arrays one level of a stored tensor keeps, by their names in
/// [`SparseTensor::arrays`](crate::SparseTensor::arrays): `pos` for the
/// children ranges (absent at a dense level, a singleton or padded level,
/// and a compressed root whose one range is all of `crd`), `crd` for the
/// coordinates (absent at a dense level).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LevelArrays {
    pub pos: Option<String>,
    pub crd: Option<String>,
}
