//! `dot`s on Tensor Cores: WMMA fragments loaded straight from the operand
//! tiles, products over K, and the accumulator in fragments.

use std::collections::BTreeSet;

use spindle_ir::kernel::*;

use super::*;

impl Printer<'_> {
    pub(super) fn fragments_per_warp(&self, mm: &Matmul) -> usize {
        mm.items(self.k).div_ceil(self.threads() / 32)
    }

    /// Runs `body` once per output fragment of the accumulator this warp
    /// owns (`acc_f[j]`, item `it`), with `bt`, `mt`, `nt` bound.
    pub(super) fn for_fragments(
        &mut self,
        depth: usize,
        mm: &Matmul,
        body: impl Fn(&mut Self, usize, &Matmul),
    ) {
        let warps = self.threads() / 32;
        let items = mm.items(self.k);
        let per = self.fragments_per_warp(mm);
        self.line(depth, "#pragma unroll");
        self.line(depth, &format!("for (int j = 0; j < {per}; j++) {{"));
        self.line(depth + 1, &format!("const int it = warp + j * {warps};"));
        let d = if items.is_multiple_of(warps) {
            depth + 1
        } else {
            self.line(depth + 1, &format!("if (it < {items}) {{"));
            depth + 2
        };
        self.decode_item(d, mm);
        body(self, d, mm);
        self.close(d, depth);
    }

    /// Binds the batch element and the fragment's row and column tile of
    /// item `it`.
    pub(super) fn decode_item(&mut self, depth: usize, mm: &Matmul) {
        let (batch, m, n, _) = mm.dims(self.k);
        let (mt, nt) = (m / 16, n / 16);
        if batch > 1 {
            self.line(depth, &format!("const int bt = it / {};", mt * nt));
        }
        let (mt_text, nt_text) = match (mt, nt) {
            (1, 1) => ("0".to_string(), "0".to_string()),
            (1, _) => ("0".to_string(), format!("it % {nt}")),
            (_, 1) => (format!("it % {mt}"), "0".to_string()),
            _ => (format!("it / {nt} % {mt}"), format!("it % {nt}")),
        };
        self.line(depth, &format!("const int mt = {mt_text};"));
        self.line(depth, &format!("const int nt = {nt_text};"));
    }

    pub(super) fn base(&self, name: &str, layout: &[AxisId]) -> String {
        let zeros: String = if layout.is_empty() { "[0]".to_string() } else { "[0]".repeat(layout.len()) };
        format!("&{name}{zeros}")
    }

    /// The pointer to the current output fragment in a [batch, m, n] tile.
    pub(super) fn root_pointer(&self, name: &str, layout: &[AxisId], mm: &Matmul) -> String {
        let (batch, m, n, _) = mm.dims(self.k);
        let mut s = self.base(name, layout);
        if batch > 1 {
            let _ = write!(s, " + bt * {}", m * n);
        }
        let _ = write!(s, " + mt * {} + nt * 16", 16 * n);
        s
    }

    /// The multiply-accumulate of one output fragment `c` over K.
    pub(super) fn mma_k(&mut self, depth: usize, mm: &Matmul, c: &str) {
        let (batch, m, n, kk) = mm.dims(self.k);
        let f = mm.fragment;
        let ks = f.k_step();
        let (an, bn) = (self.names.values[mm.a].clone(), self.names.values[mm.b].clone());
        let a_base = self.base(&an, &self.p.layout[mm.a].clone());
        let b_base = self.base(&bn, &self.p.layout[mm.b].clone());
        // Row pitches of the operand tiles, padded rows included.
        let (a_pitch, b_pitch) = (kk + self.p.pad[mm.a], n + self.p.pad[mm.b]);
        let (a_batch, b_batch) = if batch > 1 {
            (format!(" + bt * {}", m * a_pitch), format!(" + bt * {}", kk * b_pitch))
        } else {
            Default::default()
        };
        let ty = f.wmma_type();
        if kk / ks > 1 {
            self.line(depth, "#pragma unroll");
        }
        self.line(depth, &format!("for (int kt = 0; kt < {}; kt++) {{", kk / ks));
        let d = depth + 1;
        self.line(d, &format!("wmma::fragment<wmma::matrix_a, 16, 16, {ks}, {ty}, wmma::row_major> fa;"));
        self.line(d, &format!("wmma::fragment<wmma::matrix_b, 16, 16, {ks}, {ty}, wmma::row_major> fb;"));
        self.line(
            d,
            &format!(
                "wmma::load_matrix_sync(fa, {a_base}{a_batch} + mt * {} + kt * {ks}, {a_pitch});",
                16 * a_pitch
            ),
        );
        self.line(
            d,
            &format!(
                "wmma::load_matrix_sync(fb, {b_base}{b_batch} + kt * {} + nt * 16, {b_pitch});",
                ks * b_pitch
            ),
        );
        if f == plan::Fragment::Tf32 {
            self.line(
                d,
                "for (int t = 0; t < fa.num_elements; t++) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);",
            );
            self.line(
                d,
                "for (int t = 0; t < fb.num_elements; t++) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);",
            );
        }
        self.line(d, &format!("wmma::mma_sync({c}, fa, fb, {c});"));
        self.line(depth, "}");
    }

    /// A product on Tensor Cores: into the accumulator fragments, or into
    /// the root's shared tile.
    pub(super) fn matmul(&mut self, depth: usize, mm: &Matmul) {
        let operands = BTreeSet::from([Arr::Value(mm.a), Arr::Value(mm.b)]);
        if mm.into_acc {
            self.step(depth, operands, BTreeSet::new());
            self.for_fragments(depth, mm, |p, d, mm| p.mma_k(d, mm, "acc_f[j]"));
            return;
        }
        self.step(depth, operands, BTreeSet::from([Arr::Value(mm.root)]));
        let warps = self.threads() / 32;
        let items = mm.items(self.k);
        let ks = mm.fragment.k_step();
        let (_, _, n, _) = mm.dims(self.k);
        let d = if items <= warps {
            self.line(depth, &format!("if (warp < {items}) {{"));
            self.line(depth + 1, "const int it = warp;");
            depth + 1
        } else {
            self.line(depth, &format!("for (int it = warp; it < {items}; it += {warps}) {{"));
            depth + 1
        };
        self.decode_item(d, mm);
        self.line(d, &format!("wmma::fragment<wmma::accumulator, 16, 16, {ks}, float> c;"));
        self.line(d, "wmma::fill_fragment(c, 0.0f);");
        self.mma_k(d, mm, "c");
        let name = self.names.values[mm.root].clone();
        let dst = self.root_pointer(&name, &self.p.layout[mm.root].clone(), mm);
        self.line(d, &format!("wmma::store_matrix_sync({dst}, c, {n}, wmma::mem_row_major);"));
        self.line(depth, "}");
    }
}
