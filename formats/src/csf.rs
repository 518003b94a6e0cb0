//! Compressed sparse fiber (CSF) of any order: every level compressed, in a
//! chosen mode order.

use crate::scalar::{Index, Value};
use crate::{Coo, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct Csf<V, I = i32> {
    pub shape: Vec<usize>,
    /// Level `l` stores dimension `modes[l]` of the tensor.
    pub modes: Vec<usize>,
    /// Per level: `pos[l][n]..pos[l][n+1]` are the children of node `n` of
    /// level `l - 1` (the root for level 0, so `pos[0] == [0, len]`).
    pub pos: Vec<Vec<I>>,
    /// Per level: the coordinate of each node.
    pub crd: Vec<Vec<I>>,
    pub val: Vec<V>,
}

impl<V: Value, I: Index> Csf<V, I> {
    /// Builds from COO in any order; `modes` empty means the identity.
    pub fn from_coo(coo: &Coo<V, I>, modes: &[usize]) -> Result<Self> {
        let modes: Vec<usize> = if modes.is_empty() { (0..coo.order()).collect() } else { modes.to_vec() };
        let sorted = coo.permute(&modes)?;
        let order = sorted.order();
        // starts[l][n]: index in crd[l] of the first child of node n of
        // level l-1. A node's children are pushed right after it, so the
        // start is the current length of the child level.
        let mut starts: Vec<Vec<usize>> = vec![Vec::new(); order];
        let mut crd: Vec<Vec<I>> = vec![Vec::new(); order];
        for k in 0..sorted.nnz() {
            // The first level where this entry leaves the previous entry's path.
            let split = match k {
                0 => 0,
                _ => (0..order).find(|&l| sorted.crd[l][k] != sorted.crd[l][k - 1]).unwrap_or(order),
            };
            for l in split..order {
                if l + 1 < order {
                    starts[l + 1].push(crd[l + 1].len());
                }
                crd[l].push(sorted.crd[l][k]);
            }
        }
        let pos: Vec<Vec<usize>> = (0..order)
            .map(|l| match l {
                0 => vec![0, crd[0].len()],
                _ => starts[l].iter().copied().chain([crd[l].len()]).collect(),
            })
            .collect();
        let pos = pos.iter().map(|p| crate::narrow(p)).collect::<Result<_>>()?;
        Ok(Csf { shape: coo.shape.clone(), modes, pos, crd, val: sorted.val })
    }

    pub fn order(&self) -> usize {
        self.shape.len()
    }

    pub fn nnz(&self) -> usize {
        self.val.len()
    }

    /// Canonical COO in the tensor's own dimension order.
    pub fn to_coo(&self) -> Coo<V, I> {
        let order = self.order();
        let mut out: Vec<Vec<I>> = vec![Vec::with_capacity(self.nnz()); order];
        let mut path = vec![I::default(); order];
        self.walk(0, 0, self.pos[0][1].to_usize(), &mut path, &mut out);
        let mut crd = vec![Vec::new(); order];
        for (l, c) in out.into_iter().enumerate() {
            crd[self.modes[l]] = c;
        }
        Coo { shape: self.shape.clone(), crd, val: self.val.clone() }.canonicalize()
    }

    fn walk(&self, level: usize, start: usize, end: usize, path: &mut [I], out: &mut [Vec<I>]) {
        for node in start..end {
            path[level] = self.crd[level][node];
            if level + 1 == self.order() {
                for (o, p) in out.iter_mut().zip(path.iter()) {
                    o.push(*p);
                }
            } else {
                let (s, e) = (self.pos[level + 1][node].to_usize(), self.pos[level + 1][node + 1].to_usize());
                self.walk(level + 1, s, e, path, out);
            }
        }
    }
}
