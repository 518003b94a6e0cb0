//! Vendor baselines measured in the same process as our kernels: cuSPARSE
//! SpMM on CSR and BSR (the generic API, through cudarc's sys layer) and
//! cuBLAS GEMM on the dense matrix. Each returns its output, so benchmarks
//! check the baseline too, and its timing from [`Gpu::time_with_events`].
//!
//! Dense matrices are row-major; values are f32 or f16 (f16 accumulates in
//! f32, as our Tensor Core kernels do). Before each timed call L2 is
//! overwritten, since a library call's inputs cannot be rotated the way
//! [`Gpu::time`] rotates ours: both start from DRAM.

use std::ffi::c_void;

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys as cublas_sys};
use cudarc::cusparse::sys as sp;
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, ValidAsZeroBits};
use half::f16;

use crate::runtime::{Gpu, Result, RuntimeError, Timing, TimingOptions};

/// The value type of a baseline run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    F16,
}

/// A CSR matrix on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct CsrHost {
    pub rows: usize,
    pub cols: usize,
    pub indptr: Vec<i32>,
    pub indices: Vec<i32>,
    pub values: Vec<f64>,
}

/// A BSR matrix on the host: `bm x bk` blocks stored row-major, block rows
/// compressed.
#[derive(Clone, Debug, PartialEq)]
pub struct BsrHost {
    pub block_rows: usize,
    pub block_cols: usize,
    pub bm: usize,
    pub bk: usize,
    pub indptr: Vec<i32>,
    pub indices: Vec<i32>,
    /// `indices.len() * bm * bk` values.
    pub values: Vec<f64>,
}

/// A baseline's output (row-major, f64) and timing.
#[derive(Clone, Debug)]
pub struct BaselineRun {
    pub output: Vec<f64>,
    pub timing: Timing,
}

/// Whether cuSPARSE and cuBLAS can be loaded (never panics).
pub fn libraries_present() -> (bool, bool) {
    // SAFETY: only tries `dlopen`s.
    unsafe { (sp::is_culib_present(), cublas_sys::is_culib_present()) }
}

fn cusparse_check(call: &str, status: sp::cusparseStatus_t) -> Result<()> {
    if status == sp::cusparseStatus_t::CUSPARSE_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(RuntimeError::Library(format!("cuSPARSE {call}: {status:?}")))
    }
}

/// A device array of `values` in `precision`.
enum DeviceValues {
    F32(CudaSlice<f32>),
    F16(CudaSlice<f16>),
}

impl DeviceValues {
    fn upload(gpu: &Gpu, values: &[f64], precision: Precision) -> Result<Self> {
        let s = gpu.stream();
        let padded = if values.is_empty() { vec![0.0] } else { values.to_vec() };
        Ok(match precision {
            Precision::F32 => {
                DeviceValues::F32(s.clone_htod(&padded.iter().map(|&x| x as f32).collect::<Vec<_>>())?)
            }
            Precision::F16 => DeviceValues::F16(
                s.clone_htod(&padded.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>())?,
            ),
        })
    }

    fn zeros(gpu: &Gpu, len: usize, precision: Precision) -> Result<Self> {
        let s = gpu.stream();
        Ok(match precision {
            Precision::F32 => DeviceValues::F32(s.alloc_zeros(len.max(1))?),
            Precision::F16 => DeviceValues::F16(s.alloc_zeros(len.max(1))?),
        })
    }

    fn download(&self, gpu: &Gpu, len: usize) -> Result<Vec<f64>> {
        let s = gpu.stream();
        let mut out: Vec<f64> = match self {
            DeviceValues::F32(d) => s.clone_dtoh(d)?.into_iter().map(f64::from).collect(),
            DeviceValues::F16(d) => s.clone_dtoh(d)?.into_iter().map(f64::from).collect(),
        };
        out.truncate(len);
        Ok(out)
    }

    /// The raw pointer, for the C APIs. The stream is the one every call
    /// here runs on, so no cross-stream synchronisation is needed.
    fn ptr(&self, gpu: &Gpu) -> *mut c_void {
        fn raw<T: DeviceRepr + ValidAsZeroBits>(d: &CudaSlice<T>, gpu: &Gpu) -> *mut c_void {
            let (p, _sync) = d.device_ptr(gpu.stream());
            p as *mut c_void
        }
        match self {
            DeviceValues::F32(d) => raw(d, gpu),
            DeviceValues::F16(d) => raw(d, gpu),
        }
    }
}

fn index_ptr(d: &CudaSlice<i32>, gpu: &Gpu) -> *mut c_void {
    let (p, _sync) = d.device_ptr(gpu.stream());
    p as *mut c_void
}

fn value_type(p: Precision) -> sp::cudaDataType {
    match p {
        Precision::F32 => sp::cudaDataType::CUDA_R_32F,
        Precision::F16 => sp::cudaDataType::CUDA_R_16F,
    }
}

/// A sparse matrix description cuSPARSE's SpMM takes.
enum SparseDesc<'a> {
    Csr(&'a CsrHost),
    Bsr(&'a BsrHost),
}

/// cuSPARSE SpMM, C = A·B with A in CSR, B dense `a.cols x n`.
pub fn cusparse_spmm_csr(
    gpu: &Gpu,
    a: &CsrHost,
    b: &[f64],
    n: usize,
    precision: Precision,
    opts: TimingOptions,
) -> Result<BaselineRun> {
    spmm(gpu, SparseDesc::Csr(a), b, n, precision, opts)
}

/// cuSPARSE SpMM with A in BSR (row-major blocks).
pub fn cusparse_spmm_bsr(
    gpu: &Gpu,
    a: &BsrHost,
    b: &[f64],
    n: usize,
    precision: Precision,
    opts: TimingOptions,
) -> Result<BaselineRun> {
    spmm(gpu, SparseDesc::Bsr(a), b, n, precision, opts)
}

fn spmm(
    gpu: &Gpu,
    a: SparseDesc<'_>,
    b: &[f64],
    n: usize,
    precision: Precision,
    opts: TimingOptions,
) -> Result<BaselineRun> {
    let (rows, cols, indptr, indices, values) = match a {
        SparseDesc::Csr(c) => (c.rows, c.cols, &c.indptr, &c.indices, &c.values),
        SparseDesc::Bsr(m) => (m.block_rows * m.bm, m.block_cols * m.bk, &m.indptr, &m.indices, &m.values),
    };
    if b.len() != cols * n {
        return Err(RuntimeError::Data(format!("B has {} values, not {cols} x {n}", b.len())));
    }
    // cudarc panics on a library it cannot open; say so instead.
    if !libraries_present().0 {
        return Err(RuntimeError::Library(
            "libcusparse could not be loaded (is it on LD_LIBRARY_PATH?)".into(),
        ));
    }
    let s = gpu.stream();
    let d_indptr = s.clone_htod(indptr)?;
    let d_indices = s.clone_htod(&if indices.is_empty() { vec![0] } else { indices.clone() })?;
    let d_values = DeviceValues::upload(gpu, values, precision)?;
    let d_b = DeviceValues::upload(gpu, b, precision)?;
    let d_c = DeviceValues::zeros(gpu, rows * n, precision)?;
    let vt = value_type(precision);
    let compute = sp::cudaDataType::CUDA_R_32F;
    let alpha: f32 = 1.0;
    let beta: f32 = 0.0;
    let op = sp::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
    let (mut alg, name) = match a {
        SparseDesc::Csr(_) => (sp::cusparseSpMMAlg_t::CUSPARSE_SPMM_CSR_ALG2, "CSR"),
        SparseDesc::Bsr(_) => (sp::cusparseSpMMAlg_t::CUSPARSE_SPMM_ALG_DEFAULT, "BSR"),
    };

    // SAFETY: every pointer is a live device allocation of the size the
    // descriptor states (indptr rows+1, indices nnz, values nnz or
    // nnz·bm·bk, B cols·n, C rows·n), all on the stream the handle uses.
    unsafe {
        let mut handle: sp::cusparseHandle_t = std::ptr::null_mut();
        cusparse_check("create", sp::cusparseCreate(&mut handle))?;
        let _handle = Defer(move || {
            sp::cusparseDestroy(handle);
        });
        cusparse_check("set stream", sp::cusparseSetStream(handle, s.cu_stream() as sp::cudaStream_t))?;
        let mut mat_a: sp::cusparseSpMatDescr_t = std::ptr::null_mut();
        let status = match a {
            SparseDesc::Csr(c) => sp::cusparseCreateCsr(
                &mut mat_a,
                c.rows as i64,
                c.cols as i64,
                c.indices.len() as i64,
                index_ptr(&d_indptr, gpu),
                index_ptr(&d_indices, gpu),
                d_values.ptr(gpu),
                sp::cusparseIndexType_t::CUSPARSE_INDEX_32I,
                sp::cusparseIndexType_t::CUSPARSE_INDEX_32I,
                sp::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO,
                vt,
            ),
            SparseDesc::Bsr(m) => sp::cusparseCreateBsr(
                &mut mat_a,
                m.block_rows as i64,
                m.block_cols as i64,
                m.indices.len() as i64,
                m.bm as i64,
                m.bk as i64,
                index_ptr(&d_indptr, gpu),
                index_ptr(&d_indices, gpu),
                d_values.ptr(gpu),
                sp::cusparseIndexType_t::CUSPARSE_INDEX_32I,
                sp::cusparseIndexType_t::CUSPARSE_INDEX_32I,
                sp::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO,
                vt,
                sp::cusparseOrder_t::CUSPARSE_ORDER_ROW,
            ),
        };
        cusparse_check(&format!("create {name}"), status)?;
        let _mat_a = Defer(move || {
            sp::cusparseDestroySpMat(mat_a);
        });
        let mut mat_b: sp::cusparseDnMatDescr_t = std::ptr::null_mut();
        cusparse_check(
            "create dense B",
            sp::cusparseCreateDnMat(
                &mut mat_b,
                cols as i64,
                n as i64,
                n as i64,
                d_b.ptr(gpu),
                vt,
                sp::cusparseOrder_t::CUSPARSE_ORDER_ROW,
            ),
        )?;
        let _mat_b = Defer(move || {
            sp::cusparseDestroyDnMat(mat_b);
        });
        let mut mat_c: sp::cusparseDnMatDescr_t = std::ptr::null_mut();
        cusparse_check(
            "create dense C",
            sp::cusparseCreateDnMat(
                &mut mat_c,
                rows as i64,
                n as i64,
                n as i64,
                d_c.ptr(gpu),
                vt,
                sp::cusparseOrder_t::CUSPARSE_ORDER_ROW,
            ),
        )?;
        let _mat_c = Defer(move || {
            sp::cusparseDestroyDnMat(mat_c);
        });
        let alpha_ptr = &alpha as *const f32 as *const c_void;
        let beta_ptr = &beta as *const f32 as *const c_void;
        let mut buffer_size = 0usize;
        let mut size_of = |alg| {
            sp::cusparseSpMM_bufferSize(
                handle,
                op,
                op,
                alpha_ptr,
                mat_a,
                mat_b,
                beta_ptr,
                mat_c,
                compute,
                alg,
                &mut buffer_size,
            )
        };
        let mut size_status = size_of(alg);
        // Not every algorithm takes every dtype and layout: fall back to
        // the library's default choice.
        let default = sp::cusparseSpMMAlg_t::CUSPARSE_SPMM_ALG_DEFAULT;
        if size_status == sp::cusparseStatus_t::CUSPARSE_STATUS_NOT_SUPPORTED && alg != default {
            alg = default;
            size_status = size_of(alg);
        }
        cusparse_check(&format!("SpMM buffer size ({name})"), size_status)?;
        let workspace = s.alloc_zeros::<u8>(buffer_size.max(1))?;
        let (workspace_ptr, _sync) = workspace.device_ptr(s);
        let workspace_ptr = workspace_ptr as *mut c_void;
        let mut flusher = gpu.l2_flusher()?;
        let timing = gpu.time_with_events(
            opts,
            |_, gpu| flusher.flush(gpu),
            |_, _| {
                cusparse_check(
                    &format!("SpMM ({name})"),
                    sp::cusparseSpMM(
                        handle,
                        op,
                        op,
                        alpha_ptr,
                        mat_a,
                        mat_b,
                        beta_ptr,
                        mat_c,
                        compute,
                        alg,
                        workspace_ptr,
                    ),
                )
            },
        )?;
        s.synchronize()?;
        let output = d_c.download(gpu, rows * n)?;
        Ok(BaselineRun { output, timing })
    }
}

/// cuBLAS GEMM, C = A·B with A `m x k` and B `k x n`, all row-major.
pub fn cublas_gemm(
    gpu: &Gpu,
    a: &[f64],
    b: &[f64],
    (m, k, n): (usize, usize, usize),
    precision: Precision,
    opts: TimingOptions,
) -> Result<BaselineRun> {
    if a.len() != m * k || b.len() != k * n {
        return Err(RuntimeError::Data(format!("GEMM operands are not {m} x {k} and {k} x {n}")));
    }
    if !libraries_present().1 {
        return Err(RuntimeError::Library(
            "libcublas could not be loaded (is it on LD_LIBRARY_PATH?)".into(),
        ));
    }
    let blas =
        CudaBlas::new(gpu.stream().clone()).map_err(|e| RuntimeError::Library(format!("cuBLAS: {e}")))?;
    let d_a = DeviceValues::upload(gpu, a, precision)?;
    let d_b = DeviceValues::upload(gpu, b, precision)?;
    let mut d_c = DeviceValues::zeros(gpu, m * n, precision)?;
    // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: swap the operands.
    let op = cublas_sys::cublasOperation_t::CUBLAS_OP_N;
    let (mi, ki, ni) = (m as i32, k as i32, n as i32);
    let mut flusher = gpu.l2_flusher()?;
    let timing = gpu.time_with_events(
        opts,
        |_, gpu| flusher.flush(gpu),
        |_, _| {
            // SAFETY: the sizes match the allocations checked above.
            let r = unsafe {
                match (&d_a, &d_b, &mut d_c) {
                    (DeviceValues::F32(a), DeviceValues::F32(b), DeviceValues::F32(c)) => blas.gemm(
                        GemmConfig {
                            transa: op,
                            transb: op,
                            m: ni,
                            n: mi,
                            k: ki,
                            alpha: 1.0f32,
                            lda: ni,
                            ldb: ki,
                            beta: 0.0f32,
                            ldc: ni,
                        },
                        b,
                        a,
                        c,
                    ),
                    (DeviceValues::F16(a), DeviceValues::F16(b), DeviceValues::F16(c)) => blas.gemm(
                        GemmConfig {
                            transa: op,
                            transb: op,
                            m: ni,
                            n: mi,
                            k: ki,
                            alpha: f16::ONE,
                            lda: ni,
                            ldb: ki,
                            beta: f16::ZERO,
                            ldc: ni,
                        },
                        b,
                        a,
                        c,
                    ),
                    _ => unreachable!("one precision for all three"),
                }
            };
            r.map_err(|e| RuntimeError::Library(format!("cuBLAS GEMM: {e}")))
        },
    )?;
    gpu.stream().synchronize()?;
    let output = d_c.download(gpu, m * n)?;
    Ok(BaselineRun { output, timing })
}

/// Runs a closure when dropped: frees C handles on every path.
struct Defer<F: FnMut()>(F);

impl<F: FnMut()> Drop for Defer<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

impl<F: FnMut()> std::fmt::Debug for Defer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Defer")
    }
}
