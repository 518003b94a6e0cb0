//! A tensor as a kernel assembled it: a level list and, per level, the
//! `pos` and `crd` arrays it appended, with the values. Reading it back
//! checks every promise the levels make (positions ascend and cover their
//! coordinates, coordinates are in range, ordered and unique where the level
//! says so), so a kernel that assembles a wrong structure is caught, not
//! read through.

use crate::{Children, Coo, DimPart, FormatError, Level, LevelCapabilities, Result};

/// One level's arrays: `pos` where children are ranges (a compressed level,
/// `[0, n]` at the root), `crd` where coordinates are stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AssembledLevel {
    pub pos: Option<Vec<i64>>,
    pub crd: Option<Vec<i64>>,
}

/// The storage a kernel wrote, before it is read as entries.
///
/// ```
/// use spindle_formats::{AssembledLevel, Assembled, Level, LevelFormat};
///
/// // CSR of [[0, 5], [0, 0], [7, 8]].
/// let csr = Assembled {
///     shape: vec![3, 2],
///     levels: vec![Level::new(0, LevelFormat::Dense), Level::new(1, LevelFormat::Compressed { unique: true })],
///     arrays: vec![
///         AssembledLevel::default(),
///         AssembledLevel { pos: Some(vec![0, 1, 1, 3]), crd: Some(vec![1, 0, 1]) },
///     ],
///     val: vec![5.0, 7.0, 8.0],
/// };
/// let coo = csr.to_coo()?;
/// assert_eq!(coo.crd, [vec![0, 2, 2], vec![1, 0, 1]]);
///
/// // Columns out of order break the compressed level's promise.
/// let mut bad = csr.clone();
/// bad.arrays[1].crd = Some(vec![1, 1, 0]);
/// assert!(bad.to_coo().unwrap_err().to_string().contains("ascend"));
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Assembled {
    pub shape: Vec<usize>,
    pub levels: Vec<Level>,
    pub arrays: Vec<AssembledLevel>,
    pub val: Vec<f64>,
}

impl Assembled {
    /// Stored entries (explicit zeros included).
    pub fn nnz(&self) -> usize {
        self.val.len()
    }

    /// The entries in storage order, after checking the structure.
    pub fn to_coo(&self) -> Result<Coo<f64, i64>> {
        let bad = |reason: String| FormatError::invalid("assembled output", reason);
        if self.levels.len() != self.arrays.len() || self.levels.len() != self.shape.len() {
            return Err(bad(format!(
                "{} levels, {} level arrays, order {}",
                self.levels.len(),
                self.arrays.len(),
                self.shape.len()
            )));
        }
        // Positions per level: how many entries each level holds.
        let mut parents = 1usize;
        for (l, (level, arrays)) in self.levels.iter().zip(&self.arrays).enumerate() {
            if level.part != DimPart::Whole {
                return Err(bad(format!("level {l} is blocked")));
            }
            let n = self.shape[level.dim];
            let crd = |what: &str| {
                arrays.crd.as_ref().ok_or_else(|| bad(format!("level {l} ({what}) has no crd array")))
            };
            parents = match level.format.children() {
                Children::All => parents * n,
                Children::Range => {
                    let pos =
                        arrays.pos.as_ref().ok_or_else(|| bad(format!("level {l} has no pos array")))?;
                    let crd = crd("compressed")?;
                    if pos.len() != parents + 1 || pos[0] != 0 || pos[parents] as usize != crd.len() {
                        return Err(bad(format!(
                            "level {l}: pos has {} entries from {:?} to {:?} for {parents} parents and {} coordinates",
                            pos.len(),
                            pos.first(),
                            pos.last(),
                            crd.len()
                        )));
                    }
                    if let Some(w) = pos.windows(2).position(|w| w[1] < w[0]) {
                        return Err(bad(format!("level {l}: pos[{}] > pos[{}]", w, w + 1)));
                    }
                    for p in 0..parents {
                        let children = &crd[pos[p] as usize..pos[p + 1] as usize];
                        let strict = level.format.unique();
                        if let Some(w) =
                            children.windows(2).position(|w| w[1] < w[0] || (strict && w[1] == w[0]))
                        {
                            return Err(bad(format!(
                                "level {l}: the coordinates under parent {p} do not ascend{} ({} then {})",
                                if strict { " strictly" } else { "" },
                                children[w],
                                children[w + 1]
                            )));
                        }
                    }
                    crd.len()
                }
                Children::One => {
                    let crd = crd("singleton")?;
                    if crd.len() != parents {
                        return Err(bad(format!(
                            "level {l}: {} coordinates for {parents} parents",
                            crd.len()
                        )));
                    }
                    parents
                }
                Children::Fixed(g) => parents * g,
            };
            if let Some(c) = arrays.crd.as_ref().and_then(|c| c.iter().find(|&&c| c < 0 || c as usize >= n)) {
                return Err(bad(format!("level {l}: coordinate {c} outside 0..{n}")));
            }
        }
        if parents != self.val.len() {
            return Err(bad(format!("{} values for {parents} entries", self.val.len())));
        }
        let mut crd = vec![Vec::with_capacity(parents); self.shape.len()];
        let mut coords = vec![0i64; self.shape.len()];
        self.walk(0, 0, &mut coords, &mut crd);
        Coo::new(self.shape.clone(), crd, self.val.clone())
    }

    /// Visits the children of position `p` at `level`, depth first.
    fn walk(&self, level: usize, p: usize, coords: &mut [i64], out: &mut [Vec<i64>]) {
        if level == self.levels.len() {
            for (d, c) in coords.iter().enumerate() {
                out[d].push(*c);
            }
            return;
        }
        let l = &self.levels[level];
        let arrays = &self.arrays[level];
        let n = self.shape[l.dim];
        let children: std::ops::Range<usize> = match l.format.children() {
            Children::All => p * n..p * n + n,
            Children::Range => {
                let pos = arrays.pos.as_ref().expect("checked");
                pos[p] as usize..pos[p + 1] as usize
            }
            Children::One => p..p + 1,
            Children::Fixed(g) => p * g..p * g + g,
        };
        for q in children {
            coords[l.dim] = match &arrays.crd {
                Some(crd) => crd[q],
                None => (q - p * n) as i64,
            };
            self.walk(level + 1, q, coords, out);
        }
    }
}
