//! A traffic and roofline model of the GPU suites' kernels: the bytes a
//! kernel must move from DRAM at least, the flops it must do, and the time
//! neither can beat on an H100 or an H200 (the larger of bytes over the
//! memory bandwidth and flops over the arithmetic rate). Each GPU row
//! carries it, so a measured time reads as a fraction of its bound; without
//! a GPU the suites print the bounds as the model's predictions.
//!
//! The traffic is compulsory: the sparse matrix in CSR (BSR for block
//! matrices) read once, B read once, C written once (the walks and block
//! rows write each element of an output that starts at zero once, unread,
//! as cuSPARSE does with beta = 0; a kernel that zeroes C first, or adds
//! into it, moves more). A gathered B whose rows do not stay in L2 (50 MB on an
//! H100) is read once per non-zero instead, so each row also carries that
//! traffic and its bound (`*_no_reuse`): a kernel on a large matrix lies
//! between the two. Rates are the datasheets' (SXM parts): H100 3.35 TB/s of
//! HBM3, H200 4.8 TB/s of HBM3e, both 67 TFLOP/s of plain f32 and about 990
//! TFLOP/s of dense f16 on Tensor Cores. A device-to-device copy measured
//! here moved about 3.0 and 4.3 TB/s (`../.library/device/KINDS.md`), so
//! memory-bound kernels reach at most about 90% of these bounds; and a
//! launch costs a few µs whatever it does, so bounds below that (the small
//! matrices) say only that launch latency dominates.

use serde::{Deserialize, Serialize};

/// One GPU's ceilings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceModel {
    pub name: &'static str,
    /// DRAM bytes per second.
    pub bandwidth: f64,
    /// f32 FMA flops per second on CUDA cores.
    pub f32_flops: f64,
    /// Dense f16 flops per second on Tensor Cores.
    pub tensor_f16_flops: f64,
}

pub const H100: DeviceModel =
    DeviceModel { name: "H100", bandwidth: 3.35e12, f32_flops: 67e12, tensor_f16_flops: 989e12 };
pub const H200: DeviceModel =
    DeviceModel { name: "H200", bandwidth: 4.8e12, f32_flops: 67e12, tensor_f16_flops: 989e12 };

/// The model of one kernel on one input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    pub bytes: f64,
    pub flops: f64,
    /// Whether the flops run on Tensor Cores.
    pub tensor_cores: bool,
    pub h100_bound_ms: f64,
    pub h200_bound_ms: f64,
    /// The traffic when every gathered row of B comes from DRAM.
    pub bytes_no_reuse: f64,
    pub h100_no_reuse_ms: f64,
    pub h200_no_reuse_ms: f64,
}

impl Roofline {
    fn new(bytes: f64, bytes_no_reuse: f64, flops: f64, tensor_cores: bool) -> Roofline {
        let bound = |bytes: f64, d: DeviceModel| {
            let rate = if tensor_cores { d.tensor_f16_flops } else { d.f32_flops };
            (bytes / d.bandwidth).max(flops / rate) * 1e3
        };
        Roofline {
            bytes,
            flops,
            tensor_cores,
            h100_bound_ms: bound(bytes, H100),
            h200_bound_ms: bound(bytes, H200),
            bytes_no_reuse,
            h100_no_reuse_ms: bound(bytes_no_reuse, H100),
            h200_no_reuse_ms: bound(bytes_no_reuse, H200),
        }
    }

    /// SpMM `C[m,n] += A[m,k] * B[k,n]` with A in CSR (`nnz` entries,
    /// 32-bit indices), dense B and C of `elem`-byte values: products on
    /// CUDA cores.
    pub fn spmm(m: usize, k: usize, n: usize, nnz: usize, elem: usize) -> Roofline {
        let a = 4 * (m + 1) + (4 + elem) * nnz;
        let bytes = a + elem * k * n + elem * m * n;
        let no_reuse = a + elem * nnz * n + elem * m * n;
        Roofline::new(bytes as f64, no_reuse.max(bytes) as f64, 2.0 * (nnz * n) as f64, false)
    }

    /// Block-sparse SpMM with `blocks` stored blocks of `bm`×`bk` in BSR:
    /// the block products on Tensor Cores.
    pub fn bsr(
        m: usize,
        k: usize,
        n: usize,
        blocks: usize,
        (bm, bk): (usize, usize),
        elem: usize,
    ) -> Roofline {
        let a = 4 * (m / bm + 1) + 4 * blocks + elem * blocks * bm * bk;
        let bytes = a + elem * k * n + elem * m * n;
        let no_reuse = a + elem * blocks * bk * n + elem * m * n;
        Roofline::new(bytes as f64, no_reuse.max(bytes) as f64, 2.0 * (blocks * bm * bk * n) as f64, true)
    }

    /// The bound on the device a run was measured on (by its name), if it
    /// is one of the two.
    pub fn bound_ms_on(&self, device: &str) -> Option<f64> {
        if device.contains("H200") {
            Some(self.h200_bound_ms)
        } else if device.contains("H100") {
            Some(self.h100_bound_ms)
        } else {
            None
        }
    }

    /// The bound over a measured time: 1 is the ceiling.
    pub fn fraction(&self, device: &str, median_ms: Option<f64>) -> Option<f64> {
        let (bound, ms) = (self.bound_ms_on(device)?, median_ms?);
        (ms > 0.0).then(|| bound / ms)
    }

    /// One line: bytes, flops and both bounds.
    pub fn describe(&self) -> String {
        format!(
            "{:.2} MB, {:.4} GFLOP{}: bound {:.2} µs on H100, {:.2} µs on H200; B gathered from DRAM every time: \
             {:.2} MB, {:.2} / {:.2} µs",
            self.bytes / 1e6,
            self.flops / 1e9,
            if self.tensor_cores { " (Tensor Cores)" } else { "" },
            self.h100_bound_ms * 1e3,
            self.h200_bound_ms * 1e3,
            self.bytes_no_reuse / 1e6,
            self.h100_no_reuse_ms * 1e3,
            self.h200_no_reuse_ms * 1e3
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spmm_is_memory_bound_and_counts_every_array() {
        // 1000x1000, 10000 nnz, N = 128, f32: A 4*1001 + 8*10000, B 512000,
        // C 512000 (written once).
        let r = Roofline::spmm(1000, 1000, 128, 10_000, 4);
        assert_eq!(r.bytes, (4004 + 80_000 + 512_000 + 512_000) as f64);
        assert_eq!(r.flops, 2.56e6);
        assert!((r.h100_bound_ms - r.bytes / 3.35e12 * 1e3).abs() < 1e-12);
        assert!(r.h200_bound_ms < r.h100_bound_ms);
        assert_eq!(r.fraction("NVIDIA H100 80GB HBM3", Some(2.0 * r.h100_bound_ms)), Some(0.5));
        assert_eq!(r.fraction("NVIDIA A100", Some(1.0)), None);
        // Every non-zero gathering a row of B: 10000 * 512 bytes for B.
        assert_eq!(r.bytes_no_reuse, (4004 + 80_000 + 5_120_000 + 512_000) as f64);
        assert!(r.h100_no_reuse_ms > r.h100_bound_ms);
    }

    #[test]
    fn dense_enough_blocks_are_compute_bound_on_tensor_cores() {
        // 4096², 32x32 blocks at 50%: 8192 blocks, N = 1024, f16.
        let r = Roofline::bsr(4096, 4096, 1024, 8192, (32, 32), 2);
        assert_eq!(r.flops, 2.0 * 8192.0 * 1024.0 * 1024.0);
        let compute = r.flops / 989e12 * 1e3;
        let memory = r.bytes / 3.35e12 * 1e3;
        assert_eq!(r.h100_bound_ms, compute.max(memory));
        assert!(r.tensor_cores);
    }
}
