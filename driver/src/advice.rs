//! Advice on the formats a user chose, for a note: the format is theirs to
//! choose, so nothing here changes what runs.

use std::collections::{BTreeMap, HashSet};

use spindle_formats::{Coo, DType, FormatSpec};
use spindle_ir::lang::{Einsum, ElemType};
use spindle_ir::tensor::{TensorValue, Tensors};

use crate::problem::Prepared;

/// The block side BlockGroupCOO's Tensor Core kernels are built for.
const BLOCK: usize = 32;

/// The least share of a touched block's elements that must be stored for
/// the advice: at half, a block format moves no more than twice the values
/// CSR does and multiplies them on Tensor Cores.
const MIN_FILL: f64 = 0.5;

/// ELL padding worth a note: more than this many times the entries...
const PADDING_FACTOR: usize = 8;
/// ...and at least this many values stored (small matrices run fast
/// whatever their padding).
const MIN_PADDED_ADVICE: usize = 1 << 20;

impl Prepared {
    /// On a GPU, where a matrix stored entry by entry (CSR, COO, GroupCOO)
    /// is made of dense blocks, that BlockGroupCOO would multiply them on
    /// Tensor Cores. A sparse times dense product `C[m,n] += A[m,k] *
    /// B[k,n]` (A a factor of the product, its indices plain, one in the output, the other summed, the
    /// output with an index of its own) of 16-bit values, or f32 under
    /// `tf32=on`. The H100 run of 2026-11-26: a 4096² matrix of 32×32
    /// blocks, f16, ran 20–30× slower in CSR than in BlockGroupCOO.
    pub fn block_format_advice(&self) -> Option<String> {
        let stored = self.stored.as_ref()?;
        let statement = &stored.original.statement;
        let output: Vec<&str> =
            statement.lhs.subscripts.iter().filter_map(|s| s.as_index().map(|i| i.name.as_str())).collect();
        for access in statement.rhs.accesses() {
            let name = access.tensor.name.as_str();
            let (Some(spec), Some(coo)) = (stored.formats.get(name), stored.entries.get(name)) else {
                continue;
            };
            // (A block format's padding is read too: it must multiply.)
            if matches!(spec, FormatSpec::Bcsr { .. } | FormatSpec::BlockGroupCoo { .. })
                || coo.order() != 2
                || !spindle_ir::rewrite::is_top_level_factor(&statement.rhs, name)
            {
                continue;
            }
            let indices: Option<Vec<&str>> =
                access.subscripts.iter().map(|s| s.as_index().map(|i| i.name.as_str())).collect();
            let Some([row, col]) = indices.as_deref().map(|i| [i[0], i[1]]) else { continue };
            let spmm = output.contains(&row) && !output.contains(&col) && output.iter().any(|o| *o != row);
            if !spmm {
                continue;
            }
            let dtype = stored.original.tensors.get(name).map(|t| t.dtype);
            let how = match dtype {
                Some(ElemType::Value(DType::F16 | DType::Bf16)) => "",
                Some(ElemType::Value(DType::F32)) => " (f32 as tf32 under tf32=on)",
                _ => continue,
            };
            // Distinct coordinates: a non-canonical input's duplicates fill nothing.
            let entries = distinct_coordinates(coo).count();
            let blocks: HashSet<(i64, i64)> =
                distinct_coordinates(coo).map(|(i, j)| (i / BLOCK as i64, j / BLOCK as i64)).collect();
            let fill = entries as f64 / (blocks.len().max(1) * BLOCK * BLOCK) as f64;
            if fill >= MIN_FILL {
                return Some(format!(
                    "`{name}`'s entries fill {:.0}% of the {}×{} blocks they touch: `--format \
                     {name}=blockgroupcoo:bm={BLOCK},bk={BLOCK}` stores the blocks whole and multiplies them on \
                     Tensor Cores{how}",
                    fill * 100.0,
                    BLOCK,
                    BLOCK
                ));
            }
        }
        None
    }

    /// Where ELL stores far more than the entries (every row padded to the
    /// longest: a power-law row of 13k entries in a 23k-row graph stored
    /// 309M values for 87k, and ran for minutes), that it does and that
    /// CSR stores the entries alone. Given before any kernel runs.
    pub fn padding_advice(&self) -> Option<String> {
        let stored = self.stored.as_ref()?;
        for (name, spec) in &stored.formats {
            let Some(coo) = stored.entries.get(name).filter(|c| *spec == FormatSpec::Ell && c.order() == 2)
            else {
                continue;
            };
            let rows = coo.shape[0];
            let mut occupancy = vec![0usize; rows];
            distinct_coordinates(coo).for_each(|(i, _)| occupancy[i as usize] += 1);
            let entries: usize = occupancy.iter().sum();
            let longest = occupancy.iter().copied().max().unwrap_or(0);
            let padded = longest.saturating_mul(rows);
            if padded >= MIN_PADDED_ADVICE && padded > PADDING_FACTOR * entries {
                return Some(format!(
                    "`{name}` in ell pads each of its {rows} rows to the longest ({longest} entries): {padded} \
                     values stored for {entries} entries ({:.0}x); `--format {name}=csr` stores the entries alone",
                    padded as f64 / entries.max(1) as f64
                ));
            }
        }
        None
    }
}

impl Prepared {
    /// Where a stored operand's format stores zeros besides its entries
    /// and a dense operand of the product holds non-finite values: for
    /// ELL's and GroupCOO's padding, that the kernel skips it (a test per
    /// slot); for the zeros inside BCSR's and BlockGroupCOO's blocks, that
    /// 0 x inf is NaN there (the reference walks the entries alone, as
    /// CSR's and COO's kernels do, so the check sees it).
    pub fn stored_zeros_note(&self) -> Option<String> {
        let stored = self.stored.as_ref()?;
        let (name, spec) = stored.formats.iter().find(|(_, spec)| {
            matches!(
                spec,
                FormatSpec::Ell
                    | FormatSpec::GroupCoo { .. }
                    | FormatSpec::Bcsr { .. }
                    | FormatSpec::BlockGroupCoo { .. }
            )
        })?;
        let (dense, count) = non_finite_factor(&stored.original, &self.data, &stored.formats)?;
        if matches!(spec, FormatSpec::Ell | FormatSpec::GroupCoo { .. }) {
            // The tile path's kernels then read a mask of the padding
            // (`Prepared::rewrite`); the level path's always test it.
            return Some(format!(
                "`{dense}` holds {count} non-finite value(s): the kernel skips the padding of `{name}` ({}), \
                 whose zeros would make 0 x inf = NaN, at the cost of a test per stored slot",
                spec.name()
            ));
        }
        Some(format!(
            "`{dense}` holds {count} non-finite value(s) and `{name}` is stored in {}, whose kernels multiply \
             the zeros its blocks store too: 0 x inf is NaN, so an output element that reads one there is NaN \
             where the product over `{name}`'s entries is not; `--format {name}=csr` (or coo) multiplies the \
             entries alone",
            spec.name()
        ))
    }
}

/// The first dense factor of `original` (not stored in one of `formats`)
/// that holds non-finite values in `data`, with their count.
pub(crate) fn non_finite_factor(
    original: &Einsum,
    data: &Tensors,
    formats: &BTreeMap<String, FormatSpec>,
) -> Option<(String, usize)> {
    original.statement.rhs.accesses().into_iter().find_map(|a| {
        let dense = &a.tensor.name;
        let Some(TensorValue::Values(v)) = data.get(dense).filter(|_| !formats.contains_key(dense)) else {
            return None;
        };
        let count = v.iter().filter(|x| !x.is_finite()).count();
        (count > 0).then(|| (dense.clone(), count))
    })
}

/// A matrix's coordinates, each once: a non-canonical COO's repeats are
/// one stored entry (summed), so they count once, without a sorted copy.
fn distinct_coordinates(coo: &Coo<f64, i64>) -> Box<dyn Iterator<Item = (i64, i64)> + '_> {
    let all = (0..coo.nnz()).map(|k| (coo.crd[0][k], coo.crd[1][k]));
    if coo.is_canonical() { Box::new(all) } else { Box::new(all.collect::<HashSet<_>>().into_iter()) }
}
