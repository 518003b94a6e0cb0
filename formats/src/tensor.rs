//! `SparseTensor`: a tensor in any concrete format, with conversion between
//! every pair (through canonical COO, or directly where that is cheaper),
//! its level formats, its arrays, and its statistics.

use crate::block::{Bcsr, BlockGroupCoo};
use crate::compressed::{Compressed, DoublyCompressed};
use crate::csf::Csf;
use crate::dense::Dense;
use crate::ell::Ell;
use crate::group::GroupCoo;
use crate::level::{DimPart, Level, LevelArrays, LevelCapabilities as _, LevelFormat};
use crate::levels::LevelTensor;
use crate::scalar::{Index, Value};
use crate::spec::FormatSpec;
use crate::stats::{ArrayInfo, GroupAnalysis, Occupancy, Stats};
use crate::{Coo, FormatError, Result, check_array};

impl FormatSpec {
    /// The level formats a tensor of `shape` stored in this format has,
    /// outermost first (as [`SparseTensor::levels`] gives them), without
    /// any data: what a compiler needs to know before the tensor is read.
    ///
    /// ```
    /// use spindle_formats::FormatSpec;
    /// let csf: FormatSpec = "csf:modes=2-0-1".parse().unwrap();
    /// let dims: Vec<usize> = csf.levels(&[4, 5, 6]).unwrap().iter().map(|l| l.dim).collect();
    /// assert_eq!(dims, [2, 0, 1]);
    /// ```
    pub fn levels(&self, shape: &[usize]) -> Result<Vec<Level>> {
        if let FormatSpec::Dense = self {
            // Not built: an empty dense tensor still holds every element.
            return Ok((0..shape.len()).map(|d| Level::new(d, LevelFormat::Dense)).collect());
        }
        Ok(SparseTensor::from_coo(&Coo::<f64, i64>::empty(shape.to_vec()), self)?.levels())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum SparseTensor<V, I = i32> {
    Dense(Dense<V>),
    Coo(Coo<V, I>),
    /// CSR (`major == 0`) or CSC (`major == 1`).
    Compressed(Compressed<V, I>),
    /// DCSR or DCSC.
    DoublyCompressed(DoublyCompressed<V, I>),
    Csf(Csf<V, I>),
    Ell(Ell<V, I>),
    Bcsr(Bcsr<V, I>),
    GroupCoo(GroupCoo<V, I>),
    BlockGroupCoo(BlockGroupCoo<V, I>),
    /// A d/c level list (`dddc`, `dccc`, …).
    Levels(LevelTensor<V, I>),
}

/// A borrowed format array, for writing out.
#[derive(Debug)]
pub enum ArrayData<'a, V, I> {
    Index(&'a [I]),
    Value(&'a [V]),
}

impl<V: Value, I: Index> SparseTensor<V, I> {
    /// Stores `coo` (any order, duplicates summed) in `spec`.
    pub fn from_coo(coo: &Coo<V, I>, spec: &FormatSpec) -> Result<Self> {
        if spec.matrix_only() {
            coo.expect_matrix(spec.name())?;
        }
        Ok(match spec {
            FormatSpec::Dense => SparseTensor::Dense(Dense::from_coo(coo)?),
            FormatSpec::Coo => SparseTensor::Coo(coo.clone().canonicalize()),
            FormatSpec::Csr => SparseTensor::Compressed(Compressed::from_coo(coo, 0)?),
            FormatSpec::Csc => SparseTensor::Compressed(Compressed::from_coo(coo, 1)?),
            FormatSpec::Dcsr => SparseTensor::DoublyCompressed(DoublyCompressed::from_coo(coo, 0)?),
            FormatSpec::Dcsc => SparseTensor::DoublyCompressed(DoublyCompressed::from_coo(coo, 1)?),
            FormatSpec::Csf { modes } => {
                if coo.order() == 0 {
                    return Err(FormatError::invalid("CSF", "a tensor of order 0 has no levels"));
                }
                SparseTensor::Csf(Csf::from_coo(coo, modes)?)
            }
            FormatSpec::Ell => SparseTensor::Ell(Ell::from_csr(&Compressed::from_coo(coo, 0)?)?),
            FormatSpec::Bcsr { bm, bk } => SparseTensor::Bcsr(Bcsr::from_coo(coo, *bm, *bk)?),
            FormatSpec::GroupCoo { dim, g } => SparseTensor::GroupCoo(GroupCoo::from_coo(coo, *dim, *g)?),
            FormatSpec::BlockGroupCoo { bm, bk, dim, g } => {
                SparseTensor::BlockGroupCoo(BlockGroupCoo::from_coo(coo, *bm, *bk, *dim, *g)?)
            }
            FormatSpec::Levels { dense, modes } => {
                SparseTensor::Levels(LevelTensor::from_coo(coo, modes, dense)?)
            }
        })
    }

    /// Canonical COO. Formats that store fill (dense, ELL, the block
    /// formats, level lists whose last level is dense) drop zero values;
    /// the others keep explicit zeros.
    pub fn to_coo(&self) -> Result<Coo<V, I>> {
        match self {
            SparseTensor::Dense(d) => d.to_coo(),
            SparseTensor::Coo(c) => Ok(c.clone().canonicalize()),
            SparseTensor::Compressed(c) => Ok(c.to_coo()),
            SparseTensor::DoublyCompressed(d) => d.to_coo(),
            SparseTensor::Csf(c) => Ok(c.to_coo()),
            SparseTensor::Ell(e) => e.to_coo(),
            SparseTensor::Bcsr(b) => b.to_coo(),
            SparseTensor::GroupCoo(g) => Ok(g.to_coo()),
            SparseTensor::BlockGroupCoo(b) => b.to_coo(),
            SparseTensor::Levels(t) => t.to_coo(),
        }
    }

    /// Converts to `spec`: directly between the compressed forms, from CSR
    /// to ELL, and from CSR (CSC) to GroupCOO grouped by rows (columns);
    /// through canonical COO otherwise.
    pub fn convert(&self, spec: &FormatSpec) -> Result<Self> {
        use FormatSpec as F;
        match (self, spec) {
            (SparseTensor::Compressed(c), F::Csr | F::Csc) => {
                let major = if *spec == F::Csr { 0 } else { 1 };
                let c = if c.major == major { c.clone() } else { c.transpose_storage()? };
                Ok(SparseTensor::Compressed(c))
            }
            (SparseTensor::Compressed(c), F::Dcsr | F::Dcsc) => {
                let major = if *spec == F::Dcsr { 0 } else { 1 };
                let c = if c.major == major { c.clone() } else { c.transpose_storage()? };
                Ok(SparseTensor::DoublyCompressed(DoublyCompressed::from_compressed(&c)))
            }
            (SparseTensor::DoublyCompressed(d), F::Csr | F::Csc) => {
                SparseTensor::Compressed(d.to_compressed()?).convert(spec)
            }
            (SparseTensor::Compressed(c), F::Ell) => Ok(SparseTensor::Ell(Ell::from_csr(c)?)),
            (SparseTensor::Compressed(c), F::GroupCoo { dim, g }) if c.major == *dim => {
                Ok(SparseTensor::GroupCoo(GroupCoo::from_compressed(c, *g)?))
            }
            _ => SparseTensor::from_coo(&self.to_coo()?, spec),
        }
    }

    pub fn shape(&self) -> Vec<usize> {
        match self {
            SparseTensor::Dense(d) => d.val.shape().to_vec(),
            SparseTensor::Coo(c) => c.shape.clone(),
            SparseTensor::Compressed(c) => c.shape.to_vec(),
            SparseTensor::DoublyCompressed(d) => d.shape.to_vec(),
            SparseTensor::Csf(c) => c.shape.clone(),
            SparseTensor::Ell(e) => e.shape.to_vec(),
            SparseTensor::Bcsr(b) => b.shape.to_vec(),
            SparseTensor::GroupCoo(g) => g.shape.clone(),
            SparseTensor::BlockGroupCoo(b) => b.shape.to_vec(),
            SparseTensor::Levels(t) => t.shape.clone(),
        }
    }

    /// The format this tensor is stored in, with resolved parameters (a
    /// level list in identity order leaves `modes` empty, so it reads
    /// `dddc`, not `dddc:modes=0-1-2-3`).
    pub fn spec(&self) -> FormatSpec {
        use crate::spec::GroupSize::Fixed;
        match self {
            SparseTensor::Dense(_) => FormatSpec::Dense,
            SparseTensor::Coo(_) => FormatSpec::Coo,
            SparseTensor::Compressed(c) => [FormatSpec::Csr, FormatSpec::Csc][c.major].clone(),
            SparseTensor::DoublyCompressed(d) => [FormatSpec::Dcsr, FormatSpec::Dcsc][d.major].clone(),
            SparseTensor::Csf(c) => FormatSpec::Csf { modes: c.modes.clone() },
            SparseTensor::Ell(_) => FormatSpec::Ell,
            SparseTensor::Bcsr(b) => FormatSpec::Bcsr { bm: b.bm, bk: b.bk },
            SparseTensor::GroupCoo(g) => FormatSpec::GroupCoo { dim: g.dim, g: Fixed(g.g) },
            SparseTensor::BlockGroupCoo(b) => {
                FormatSpec::BlockGroupCoo { bm: b.bm, bk: b.bk, dim: b.dim, g: Fixed(b.g) }
            }
            SparseTensor::Levels(t) => {
                let identity = t.modes.iter().enumerate().all(|(l, &d)| l == d);
                let modes = if identity { Vec::new() } else { t.modes.clone() };
                FormatSpec::Levels { dense: t.dense.clone(), modes }
            }
        }
    }

    /// The level formats, outermost first.
    pub fn levels(&self) -> Vec<Level> {
        use LevelFormat::*;
        let whole = Level::new;
        let block = |dim, part, format| Level { dim, part, format };
        match self {
            SparseTensor::Dense(d) => (0..d.val.ndim()).map(|d| whole(d, Dense)).collect(),
            // Canonical: the first level's coordinates repeat only where
            // a singleton level follows (a vector's are unique).
            SparseTensor::Coo(c) => (0..c.order())
                .map(|d| whole(d, if d == 0 { Compressed { unique: c.order() == 1 } } else { Singleton }))
                .collect(),
            SparseTensor::Compressed(c) => {
                vec![whole(c.major, Dense), whole(1 - c.major, Compressed { unique: true })]
            }
            SparseTensor::DoublyCompressed(d) => {
                vec![
                    whole(d.major, Compressed { unique: true }),
                    whole(1 - d.major, Compressed { unique: true }),
                ]
            }
            SparseTensor::Csf(c) => c.modes.iter().map(|&d| whole(d, Compressed { unique: true })).collect(),
            SparseTensor::Ell(e) => vec![whole(0, Dense), whole(1, Padded(e.width))],
            SparseTensor::Bcsr(b) => vec![
                block(0, DimPart::BlockOuter(b.bm), Dense),
                block(1, DimPart::BlockOuter(b.bk), Compressed { unique: true }),
                block(0, DimPart::BlockInner(b.bm), Dense),
                block(1, DimPart::BlockInner(b.bk), Dense),
            ],
            SparseTensor::GroupCoo(g) => {
                let mut levels = vec![whole(g.dim, Compressed { unique: false })];
                let mut others = (0..g.shape.len()).filter(|&d| d != g.dim);
                if let Some(first) = others.next() {
                    levels.push(whole(first, Padded(g.g)));
                }
                levels.extend(others.map(|d| whole(d, Singleton)));
                levels
            }
            SparseTensor::BlockGroupCoo(b) => {
                let size = [b.bm, b.bk];
                let (major, minor) = (b.dim, 1 - b.dim);
                vec![
                    block(major, DimPart::BlockOuter(size[major]), Compressed { unique: false }),
                    block(minor, DimPart::BlockOuter(size[minor]), Padded(b.g)),
                    block(0, DimPart::BlockInner(b.bm), Dense),
                    block(1, DimPart::BlockInner(b.bk), Dense),
                ]
            }
            SparseTensor::Levels(t) => t
                .modes
                .iter()
                .zip(&t.dense)
                .map(|(&d, &dense)| whole(d, if dense { Dense } else { Compressed { unique: true } }))
                .collect(),
        }
    }

    /// The arrays each level of [`SparseTensor::levels`] keeps, by their
    /// names in [`SparseTensor::arrays`].
    ///
    /// ```
    /// use spindle_formats::{Coo, FormatSpec, SparseTensor};
    ///
    /// let a = Coo::<f32, i32>::from_triplets(3, 3, &[(0, 1, 1.0), (2, 0, 2.0)])?;
    /// let dcsr = SparseTensor::from_coo(&a, &FormatSpec::Dcsr)?;
    /// let levels = dcsr.level_arrays();
    /// assert_eq!((levels[0].pos.as_deref(), levels[0].crd.as_deref()), (None, Some("crd0")));
    /// assert_eq!((levels[1].pos.as_deref(), levels[1].crd.as_deref()), (Some("pos"), Some("crd1")));
    /// # Ok::<(), spindle_formats::FormatError>(())
    /// ```
    pub fn level_arrays(&self) -> Vec<LevelArrays> {
        let none = LevelArrays::default;
        let crd = |c: String| LevelArrays { pos: None, crd: Some(c) };
        let both = |p: String, c: String| LevelArrays { pos: Some(p), crd: Some(c) };
        match self {
            SparseTensor::Dense(d) => (0..d.val.ndim()).map(|_| none()).collect(),
            SparseTensor::Coo(c) => (0..c.order()).map(|d| crd(format!("crd{d}"))).collect(),
            SparseTensor::Compressed(_) => vec![none(), both("pos".into(), "crd".into())],
            SparseTensor::DoublyCompressed(_) => vec![crd("crd0".into()), both("pos".into(), "crd1".into())],
            SparseTensor::Csf(c) => {
                (0..c.order()).map(|l| both(format!("pos{l}"), format!("crd{l}"))).collect()
            }
            SparseTensor::Ell(_) => vec![none(), crd("crd".into())],
            SparseTensor::Bcsr(_) => vec![none(), both("pos".into(), "crd".into()), none(), none()],
            SparseTensor::GroupCoo(g) => {
                let mut levels = vec![crd("grp".into())];
                let others: Vec<usize> = (0..g.shape.len()).filter(|&d| d != g.dim).collect();
                if g.crd.len() == 1 {
                    levels.push(crd("crd".into()));
                } else {
                    levels.extend(others.iter().map(|d| crd(format!("crd{d}"))));
                }
                levels
            }
            SparseTensor::BlockGroupCoo(_) => vec![crd("grp".into()), crd("crd".into()), none(), none()],
            SparseTensor::Levels(t) => (0..t.order())
                .map(|l| if t.dense[l] { none() } else { both(format!("pos{l}"), format!("crd{l}")) })
                .collect(),
        }
    }

    /// This tensor's structure (levels, positions, coordinates) with other
    /// values, one per stored entry: what a kernel that writes an output in
    /// this tensor's pattern (SDDMM's) produced.
    ///
    /// ```
    /// use spindle_formats::{Coo, FormatSpec, SparseTensor};
    ///
    /// let b = Coo::<f64, i64>::from_triplets(2, 3, &[(0, 2, 1.0), (1, 0, 2.0)])?;
    /// let csr = SparseTensor::from_coo(&b, &FormatSpec::Csr)?;
    /// let a = csr.with_values(vec![10.0, 20.0]).to_coo()?;
    /// assert_eq!((a.crd, a.val), (vec![vec![0, 1], vec![2, 0]], vec![10.0, 20.0]));
    /// # Ok::<(), spindle_formats::FormatError>(())
    /// ```
    pub fn with_values(&self, val: Vec<f64>) -> crate::Assembled {
        let arrays: Vec<(String, ArrayData<'_, V, I>)> = self.arrays();
        let ints = |name: &Option<String>| {
            let name = name.as_ref()?;
            arrays.iter().find(|(n, _)| n == name).and_then(|(_, a)| match a {
                ArrayData::Index(ix) => Some(ix.iter().map(|x| x.to_usize() as i64).collect()),
                ArrayData::Value(_) => None,
            })
        };
        let levels = self.levels();
        let arrays = self
            .level_arrays()
            .iter()
            .zip(&levels)
            .enumerate()
            .map(|(l, (arrays, level))| {
                let crd: Option<Vec<i64>> = ints(&arrays.crd);
                // A compressed first level (DCSR's, COO's) keeps no pos:
                // its one parent's range is all of crd, which an assembled
                // tensor states.
                let pos = ints(&arrays.pos).or_else(|| {
                    let whole = l == 0 && level.format.children() == crate::Children::Range;
                    whole.then(|| vec![0, crd.as_ref().map_or(0, |c| c.len() as i64)])
                });
                crate::AssembledLevel { pos, crd }
            })
            .collect();
        crate::Assembled { shape: self.shape().to_vec(), levels, arrays, val }
    }

    /// Every stored array by the name the design uses (`pos`, `crd`, `val`,
    /// `grp`, …), in order.
    pub fn arrays(&self) -> Vec<(String, ArrayData<'_, V, I>)> {
        use ArrayData::{Index as Ix, Value as Vx};
        let named = |name: &str, a| (name.to_string(), a);
        match self {
            SparseTensor::Dense(d) => vec![named("val", Vx(d.val.as_slice().unwrap_or(&[])))],
            SparseTensor::Coo(c) => {
                let mut arrays: Vec<_> =
                    c.crd.iter().enumerate().map(|(d, a)| (format!("crd{d}"), Ix(a))).collect();
                arrays.push(named("val", Vx(&c.val)));
                arrays
            }
            SparseTensor::Compressed(c) => {
                vec![named("pos", Ix(&c.pos)), named("crd", Ix(&c.crd)), named("val", Vx(&c.val))]
            }
            SparseTensor::DoublyCompressed(d) => vec![
                named("crd0", Ix(&d.crd0)),
                named("pos", Ix(&d.pos)),
                named("crd1", Ix(&d.crd1)),
                named("val", Vx(&d.val)),
            ],
            SparseTensor::Csf(c) => {
                let mut arrays = Vec::new();
                for l in 0..c.order() {
                    arrays.push((format!("pos{l}"), Ix(&c.pos[l][..])));
                    arrays.push((format!("crd{l}"), Ix(&c.crd[l][..])));
                }
                arrays.push(named("val", Vx(&c.val)));
                arrays
            }
            SparseTensor::Ell(e) => vec![named("crd", Ix(&e.crd)), named("val", Vx(&e.val))],
            SparseTensor::Bcsr(b) => {
                vec![named("pos", Ix(&b.pos)), named("crd", Ix(&b.crd)), named("val", Vx(&b.val))]
            }
            SparseTensor::GroupCoo(g) => {
                let mut arrays = vec![named("grp", Ix(&g.grp))];
                if g.crd.len() == 1 {
                    arrays.push(named("crd", Ix(&g.crd[0])));
                } else {
                    let dims = (0..g.shape.len()).filter(|&d| d != g.dim);
                    arrays.extend(dims.zip(&g.crd).map(|(d, a)| (format!("crd{d}"), Ix(&a[..]))));
                }
                arrays.push(named("val", Vx(&g.val)));
                arrays
            }
            SparseTensor::BlockGroupCoo(b) => {
                vec![named("grp", Ix(&b.grp)), named("crd", Ix(&b.crd)), named("val", Vx(&b.val))]
            }
            SparseTensor::Levels(t) => {
                let mut arrays = Vec::new();
                for l in (0..t.order()).filter(|&l| !t.dense[l]) {
                    arrays.push((format!("pos{l}"), Ix(&t.pos[l][..])));
                    arrays.push((format!("crd{l}"), Ix(&t.crd[l][..])));
                }
                arrays.push(named("val", Vx(&t.val)));
                arrays
            }
        }
    }

    /// The logical shape of each array (`[P, g]` for GroupCOO's `crd`, …),
    /// for `.npy` output.
    pub fn array_shape(&self, name: &str, len: usize) -> Vec<usize> {
        match (self, name) {
            (SparseTensor::Dense(d), _) => d.val.shape().to_vec(),
            (SparseTensor::Ell(e), _) => vec![e.shape[0], e.width],
            (SparseTensor::Bcsr(b), "val") => vec![b.blocks(), b.bm, b.bk],
            (SparseTensor::GroupCoo(g), n) if n != "grp" => vec![g.groups(), g.g],
            (SparseTensor::BlockGroupCoo(b), "crd") => vec![b.groups(), b.g],
            (SparseTensor::BlockGroupCoo(b), "val") => vec![b.groups(), b.g, b.bm, b.bk],
            (SparseTensor::Levels(t), "val") => t.val_shape(),
            _ => vec![len],
        }
    }

    /// Value slots stored, padding and fill included.
    pub fn stored(&self) -> usize {
        self.arrays()
            .iter()
            .filter_map(|(_, a)| if let ArrayData::Value(v) = a { Some(v.len()) } else { None })
            .sum()
    }

    /// Entries of the tensor: non-padding entries, or for formats that store
    /// fill, the non-zero values.
    pub fn nnz(&self) -> usize {
        match self {
            SparseTensor::Dense(d) => d.val.iter().filter(|v| !v.is_zero()).count(),
            SparseTensor::Coo(c) => c.nnz(),
            SparseTensor::Compressed(c) => c.nnz(),
            SparseTensor::DoublyCompressed(d) => d.nnz(),
            SparseTensor::Csf(c) => c.nnz(),
            SparseTensor::GroupCoo(g) => g.nnz(),
            SparseTensor::Levels(t) => t.nnz(),
            SparseTensor::Ell(Ell { val, .. })
            | SparseTensor::Bcsr(Bcsr { val, .. })
            | SparseTensor::BlockGroupCoo(BlockGroupCoo { val, .. }) => {
                val.iter().filter(|v| !v.is_zero()).count()
            }
        }
    }

    /// Entries per slice along the grouped dimension (rows for formats that
    /// do not group), in blocks for BlockGroupCOO: (dimension, unit, counts).
    pub fn occupancy(&self) -> Result<(usize, &'static str, Vec<usize>)> {
        let shape = self.shape();
        let dim = match self {
            SparseTensor::GroupCoo(g) => g.dim,
            _ => 0,
        };
        let Some(&extent) = shape.get(dim) else { return Ok((0, "entries", Vec::new())) };
        check_array::<usize>("occupancy", Some(extent)).map_err(|_| {
            FormatError::invalid(
                "statistics",
                format!(
                    "dimension {dim} has {extent} slices, and counting the entries of each takes more than the {} \
                     GiB one array may hold",
                    crate::error::MAX_ARRAY_BYTES >> 30
                ),
            )
        })?;
        Ok(match self {
            SparseTensor::BlockGroupCoo(b) => (b.dim, "blocks", b.block_occupancy()),
            SparseTensor::GroupCoo(g) => {
                let mut occ = vec![0usize; extent];
                for p in 0..g.groups() {
                    occ[g.grp[p].to_usize()] += (0..g.g).filter(|&q| !g.is_padding(p, q)).count();
                }
                (dim, "entries", occ)
            }
            SparseTensor::Compressed(c) if c.major == 0 => {
                (0, "entries", (0..extent).map(|i| c.slice(i).len()).collect())
            }
            // Non-zeros per row, counted in place (through COO, a dense
            // ca-CondMat took 30 s).
            SparseTensor::Dense(d) => {
                let rows = d.val.outer_iter().map(|row| row.iter().filter(|v| !v.is_zero()).count());
                (0, "entries", rows.collect())
            }
            SparseTensor::Ell(e) if e.width > 0 => {
                let rows = e.val.chunks(e.width).map(|row| row.iter().filter(|v| !v.is_zero()).count());
                (0, "entries", rows.collect())
            }
            _ => (dim, "entries", self.to_coo()?.occupancy(dim)),
        })
    }

    /// Statistics of this tensor in this format. Occupancy and F(g) are
    /// measured along the grouped dimension (rows for non-grouped formats),
    /// in blocks for BlockGroupCOO.
    pub fn stats(&self) -> Result<Stats> {
        let arrays: Vec<ArrayInfo> = self
            .arrays()
            .iter()
            .map(|(name, a)| match a {
                ArrayData::Index(x) => index_array::<I>(name, x.len()),
                ArrayData::Value(x) => value_array::<V>(name, x.len()),
            })
            .collect();
        let format =
            Counted { spec: self.spec(), shape: self.shape(), nnz: self.nnz(), stored: self.stored() };
        Ok(format.stats(arrays, self.occupancy()?))
    }

    /// [`SparseTensor::stats`] of `coo` stored as `spec`. Dense and ELL are
    /// counted from the entries, not built: their arrays can dwarf them
    /// (ELL of a power-law matrix of 1M entries holds 1.7 GB).
    pub fn stats_of(coo: &Coo<V, I>, spec: &FormatSpec) -> Result<Stats> {
        let nonzero_rows = |c: &Coo<V, I>| {
            let mut rows = vec![0; c.shape.first().copied().unwrap_or(1)];
            for (e, v) in c.val.iter().enumerate() {
                if !v.is_zero() {
                    rows[c.crd.first().map_or(0, |r| r[e].to_usize())] += 1;
                }
            }
            rows
        };
        match spec {
            FormatSpec::Dense => {
                let canonical = coo.clone().canonicalize();
                let rows = nonzero_rows(&canonical);
                let stored = coo.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
                let stored = check_array::<V>(&format!("dense storage of shape {:?}", coo.shape), stored)?;
                let format =
                    Counted { spec: spec.clone(), shape: coo.shape.clone(), nnz: rows.iter().sum(), stored };
                let arrays = vec![value_array::<V>("val", stored)];
                Ok(format.stats(arrays, (0, "entries", rows)))
            }
            FormatSpec::Ell => {
                let (rows, _) = coo.expect_matrix("ELL")?;
                let csr = Compressed::from_coo(coo, 0)?;
                let width = (0..rows).map(|i| csr.slice(i).len()).max().unwrap_or(0);
                let stored =
                    check_array::<V>(&format!("ELL val ({rows} rows of {width})"), rows.checked_mul(width))?;
                let occupancy: Vec<usize> = (0..rows)
                    .map(|i| csr.val[csr.slice(i)].iter().filter(|v| !v.is_zero()).count())
                    .collect();
                let format = Counted {
                    spec: spec.clone(),
                    shape: csr.shape.to_vec(),
                    nnz: occupancy.iter().sum(),
                    stored,
                };
                let arrays = vec![index_array::<I>("crd", stored), value_array::<V>("val", stored)];
                Ok(format.stats(arrays, (0, "entries", occupancy)))
            }
            _ => Self::from_coo(coo, spec)?.stats(),
        }
    }
}

fn index_array<I: Index>(name: &str, len: usize) -> ArrayInfo {
    ArrayInfo { name: name.into(), dtype: I::ITYPE.name().into(), len, bytes: len * I::ITYPE.size_bytes() }
}

fn value_array<V: Value>(name: &str, len: usize) -> ArrayInfo {
    ArrayInfo { name: name.into(), dtype: V::DTYPE.name().into(), len, bytes: len * V::DTYPE.size_bytes() }
}

/// What [`Stats`] says of a format beside its arrays and occupancy.
struct Counted {
    spec: FormatSpec,
    shape: Vec<usize>,
    nnz: usize,
    stored: usize,
}

impl Counted {
    fn stats(self, arrays: Vec<ArrayInfo>, (group_dim, unit, occupancy): (usize, &str, Vec<usize>)) -> Stats {
        let Counted { spec, shape, nnz, stored } = self;
        Stats {
            format: spec.to_string(),
            rows: shape.first().copied().unwrap_or(1),
            cols: shape.get(1).copied().unwrap_or(1),
            shape,
            nnz,
            stored,
            padding_ratio: if stored == 0 { 0.0 } else { (stored - nnz.min(stored)) as f64 / stored as f64 },
            bytes: arrays.iter().map(|a| a.bytes).sum(),
            arrays,
            group_dim,
            group_unit: unit.into(),
            occupancy: Occupancy::new(&occupancy),
            grouping: GroupAnalysis::new(&occupancy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dense and ELL count their rows' entries in place, as CSR does.
    #[test]
    fn occupancy_is_the_same_in_every_format() {
        let coo = Coo::<f32, i32>::from_triplets(4, 6, &[(0, 1, 1.0), (3, 5, 2.0), (3, 0, 3.0)]).unwrap();
        let of =
            |spec: &str| SparseTensor::from_coo(&coo, &spec.parse().unwrap()).unwrap().occupancy().unwrap();
        for spec in ["dense", "ell", "coo"] {
            assert_eq!(of(spec), of("csr"), "{spec}");
        }
        assert_eq!(of("csr").2, [1, 0, 0, 2]);
    }

    /// Dense and ELL statistics counted from the entries are those of the
    /// built arrays, duplicates and explicit zeros included.
    #[test]
    fn counted_stats_are_the_built_ones() {
        let coo = Coo::<f32, i32>::new(
            vec![5, 6],
            vec![vec![0, 3, 3, 3, 4, 0], vec![1, 5, 0, 5, 2, 4]],
            vec![1.0, 2.0, 3.0, 4.0, 0.0, 5.0],
        )
        .unwrap();
        for spec in ["dense", "ell"] {
            let spec: FormatSpec = spec.parse().unwrap();
            let built = SparseTensor::from_coo(&coo, &spec).unwrap().stats().unwrap();
            assert_eq!(SparseTensor::stats_of(&coo, &spec).unwrap(), built, "{spec}");
        }
        let tensor =
            Coo::<f32, i32>::new(vec![2, 2, 3], vec![vec![1, 0], vec![0, 1], vec![2, 2]], vec![1.0, 2.0])
                .unwrap();
        let dense = FormatSpec::Dense;
        let built = SparseTensor::from_coo(&tensor, &dense).unwrap().stats().unwrap();
        assert_eq!(SparseTensor::stats_of(&tensor, &dense).unwrap(), built);
    }

    #[test]
    fn level_formats_of_each_format() {
        let coo = Coo::<f32, i32>::from_triplets(4, 6, &[(0, 1, 1.0), (3, 5, 2.0), (3, 0, 3.0)]).unwrap();
        let levels = |spec: &str| {
            let t = SparseTensor::from_coo(&coo, &spec.parse().unwrap()).unwrap();
            t.levels().iter().map(|l| l.to_string()).collect::<Vec<_>>().join(" ")
        };
        assert_eq!(levels("dense"), "dense(d0) dense(d1)");
        assert_eq!(levels("coo"), "compressed(nonunique)(d0) singleton(d1)");
        assert_eq!(levels("csr"), "dense(d0) compressed(d1)");
        assert_eq!(levels("csc"), "dense(d1) compressed(d0)");
        assert_eq!(levels("dcsr"), "compressed(d0) compressed(d1)");
        assert_eq!(levels("csf:modes=1-0"), "compressed(d1) compressed(d0)");
        assert_eq!(levels("dc"), "dense(d0) compressed(d1)");
        assert_eq!(levels("cd:modes=1-0"), "compressed(d1) dense(d0)");
        assert_eq!(levels("ell"), "dense(d0) padded(2)(d1)");
        assert_eq!(levels("bcsr:bm=2,bk=3"), "dense(d0/2) compressed(d1/3) dense(d0%2) dense(d1%3)");
        assert_eq!(levels("groupcoo:dim=1,g=4"), "compressed(nonunique)(d1) padded(4)(d0)");
        assert_eq!(
            levels("blockgroupcoo:bm=2,bk=3,dim=0,g=2"),
            "compressed(nonunique)(d0/2) padded(2)(d1/3) dense(d0%2) dense(d1%3)"
        );
    }

    #[test]
    fn stats_count_padding_and_bytes() {
        let coo = Coo::<f32, i32>::from_triplets(4, 6, &[(0, 1, 1.0), (3, 5, 2.0), (3, 0, 3.0)]).unwrap();
        let t = SparseTensor::from_coo(&coo, &"groupcoo:dim=0,g=4".parse().unwrap()).unwrap();
        let s = t.stats().unwrap();
        assert_eq!((s.nnz, s.stored), (3, 8));
        assert_eq!(s.padding_ratio, 5.0 / 8.0);
        // grp: 2 × i32, crd: 8 × i32, val: 8 × f32.
        assert_eq!(s.bytes, 2 * 4 + 8 * 4 + 8 * 4);
        assert_eq!(s.grouping.f_of_g[&2], 3 * 2); // occupancy [1, 0, 0, 2]: up to g = 2
        let b = SparseTensor::from_coo(&coo, &"blockgroupcoo:bm=2,bk=2,dim=0,g=1".parse().unwrap()).unwrap();
        let s = b.stats().unwrap();
        assert_eq!((s.nnz, s.stored, s.group_unit.as_str()), (3, 12, "blocks"));
        assert_eq!(s.occupancy.max, 2);
    }
}
