//! NVRTC compilation against the toolchain that `cargo xtask setup-cuda` installs.
//!
//! Without the toolchain these tests skip visibly, except under CI (`CI=true`), where a
//! missing toolchain is a failure: CI runs `cargo xtask test`, which installs it.

use spindle_cuda::nvrtc::{self, Arch, CompileError, CompileOptions};

/// A 16x16x16 WMMA tile product, half inputs and float accumulator, plus an fp16
/// epilogue so `cuda_fp16.h` is really used.
const WMMA_KERNEL: &str = r#"
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

extern "C" __global__ void wmma_16x16x16(const __half* a, const __half* b, float* c, __half* c_half) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a_frag;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b_frag;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c_frag;
    wmma::fill_fragment(c_frag, 0.0f);
    wmma::load_matrix_sync(a_frag, a, 16);
    wmma::load_matrix_sync(b_frag, b, 16);
    wmma::mma_sync(c_frag, a_frag, b_frag, c_frag);
    wmma::store_matrix_sync(c, c_frag, 16, wmma::mem_row_major);
    __syncwarp();
    int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) {
        c_half[i] = __float2half(c[i]);
    }
}
"#;

/// True when the test should go on (see `nvrtc::toolchain_or_skip`).
fn toolchain_available(test: &str) -> bool {
    spindle_cuda::nvrtc::toolchain_or_skip(test)
}

fn compiles_wmma_for(arch: Arch) {
    let test = format!("compiles_wmma_for_{arch}");
    if !toolchain_available(&test) {
        return;
    }
    let kernel = nvrtc::compile(WMMA_KERNEL, "wmma", arch, &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    eprintln!("{test}: NVRTC log:\n{}", kernel.log);
    assert_eq!(kernel.arch, arch);
    // An ELF file.
    assert_eq!(&kernel.cubin[..4], b"\x7fELF", "{test}: not a CUBIN");
    let resources = kernel
        .resources_of("wmma_16x16x16")
        .unwrap_or_else(|| panic!("{test}: no resources in {:?}", kernel.log));
    eprintln!("{test}: {resources:?}");
    assert!(resources.registers > 0 && resources.registers < 256, "{test}: implausible {resources:?}");
    assert!(!resources.spills(), "{test}: spills: {resources:?}");
    assert_eq!(kernel.resources.len(), 1, "{test}: {:?}", kernel.resources);
}

#[test]
fn compiles_wmma_for_sm80() {
    compiles_wmma_for(Arch::Sm80);
}

#[test]
fn compiles_wmma_for_sm90() {
    compiles_wmma_for(Arch::Sm90);
}

#[test]
fn syntax_error_reports_log_and_source() {
    let test = "syntax_error_reports_log_and_source";
    if !toolchain_available(test) {
        return;
    }
    const BROKEN: &str = "extern \"C\" __global__ void broken(float* out) {\n    out[0] = 1.0f +;\n}\n";
    let error = nvrtc::compile(BROKEN, "broken", Arch::Sm90, &CompileOptions::default())
        .expect_err("a syntax error must not compile");
    let CompileError::Compilation { name, arch, log, source_text, .. } = &error else {
        panic!("{test}: expected a compilation error, got {error}");
    };
    assert_eq!((name.as_str(), *arch), ("broken", Arch::Sm90));
    assert_eq!(source_text, BROKEN);
    assert!(log.contains("broken.cu(2)") && log.contains("error"), "{test}: log without the error: {log}");
    let message = error.to_string();
    assert!(message.contains(log.trim()), "{test}: message without the log: {message}");
    for line in BROKEN.lines() {
        assert!(message.contains(line), "{test}: message without source line {line:?}: {message}");
    }
}

#[test]
fn reports_spills_and_shared_memory() {
    let test = "reports_spills_and_shared_memory";
    if !toolchain_available(test) {
        return;
    }
    // A dynamically indexed local array forces a stack frame; 32 registers at most
    // with lots of live values forces spills; the shared array shows up as smem.
    const SOURCE: &str = r#"
extern "C" __global__ void pressure(const float* in, float* out, int k) {
    __shared__ float tile[256];
    float acc[64];
    for (int i = 0; i < 64; ++i) acc[i] = in[i * blockDim.x + threadIdx.x];
    tile[threadIdx.x] = acc[k & 63];
    __syncthreads();
    float s = tile[(threadIdx.x + 1) & 255];
    for (int i = 0; i < 64; ++i) s += acc[i] * acc[(i * 7 + k) & 63];
    out[threadIdx.x] = s;
}
"#;
    let options = CompileOptions { max_registers: Some(32), ..CompileOptions::default() };
    let kernel =
        nvrtc::compile(SOURCE, "pressure", Arch::Sm80, &options).unwrap_or_else(|e| panic!("{test}: {e}"));
    eprintln!("{test}: NVRTC log:\n{}", kernel.log);
    let resources = kernel.resources_of("pressure").unwrap_or_else(|| panic!("{test}: no resources"));
    assert!(resources.registers <= 32, "{test}: {resources:?}");
    assert_eq!(resources.shared_mem_bytes, 1024, "{test}: {resources:?}");
    assert!(resources.stack_bytes >= 256, "{test}: {resources:?}");
    assert!(resources.spills(), "{test}: no spills at 32 registers: {resources:?}");
}

#[test]
fn reports_nvrtc_version() {
    if !toolchain_available("reports_nvrtc_version") {
        return;
    }
    let (major, minor) = nvrtc::version().unwrap();
    assert_eq!((major, minor), (13, 0));
}
