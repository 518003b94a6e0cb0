//! The CUDA printer on the shapes the issue names: what the emitted code
//! must show (string inspection), and that NVRTC compiles it for sm_80 and
//! sm_90 without spills.
//!
//! Without the toolchain the NVRTC half of each test skips visibly, except
//! under CI (`CI=true`), where a missing toolchain is a failure.

use spindle_cuda::nvrtc::{self, Arch, CompileOptions};
use spindle_cuda::print::{CudaKernel, DotPath, Fragment, PrintError, PrintOptions, print_kernel};
use spindle_ir::kernel::Kernel;
use spindle_ir::kernel::lower::lower;
use spindle_ir::lang::einsum::declarations;
use spindle_ir::lang::{check, parse};

const SYMBOL: &str = "spindle_kernel";

fn kernel(statement: &str, decls: &[(&str, &[usize], &str)], schedule: &str) -> Kernel {
    let einsum = check(&parse(statement).unwrap(), &declarations(decls)).unwrap();
    lower(&einsum, &schedule.parse().unwrap(), "k").unwrap()
}

fn printed(kernel: &Kernel) -> CudaKernel {
    printed_with(kernel, &PrintOptions::default())
}

fn printed_with(kernel: &Kernel, opts: &PrintOptions) -> CudaKernel {
    let out = print_kernel(kernel, SYMBOL, opts).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", out.source);
    out
}

/// The source without its header comment (the IR it prints mentions names).
fn code(k: &CudaKernel) -> &str {
    let start = k.source.find("#include").or_else(|| k.source.find("extern \"C\"")).unwrap();
    &k.source[start..]
}

/// The lines that contain `needle`.
fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(needle)).collect()
}

/// The byte range of the loop over reduced tiles of `axis`.
fn loop_span(text: &str, axis: &str) -> std::ops::Range<usize> {
    let start =
        text.find(&format!("for (int t_{axis} = 0;")).unwrap_or_else(|| panic!("no loop over {axis}"));
    let end =
        text.find(&format!("}} // loop {axis}")).unwrap_or_else(|| panic!("no end of the loop over {axis}"));
    start..end
}

/// True when the test should go on (see `nvrtc::toolchain_or_skip`).
fn toolchain_available(test: &str) -> bool {
    spindle_cuda::nvrtc::toolchain_or_skip(test)
}

/// Compiles for sm_80 and sm_90; no spills.
fn compiles(test: &str, k: &CudaKernel) {
    if !toolchain_available(test) {
        return;
    }
    for arch in [Arch::Sm80, Arch::Sm90] {
        let c = nvrtc::compile(&k.source, test, arch, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        let r = c.resources_of(SYMBOL).unwrap_or_else(|| panic!("{test}: no resources: {}", c.log));
        eprintln!("{test} {arch}: {r:?}");
        assert!(!r.spills(), "{test} {arch}: spills: {r:?}");
        assert!(r.shared_mem_bytes as usize <= k.launch.shared_bytes, "{test} {arch}: {r:?}");
    }
}

/// The Insum paper's running example (Figure 9) in f16 with a Tensor Core
/// schedule: gather through `E`, the product on Tensor Cores, scatter
/// through `D`, in one kernel.
#[test]
fn gather_dot_scatter_on_tensor_cores() {
    let k = kernel(
        "C[D[y],x] += A[y,E[r]] * B[r,x]",
        &[
            ("A", &[64, 96], "f16"),
            ("B", &[48, 80], "f16"),
            ("C", &[40, 80], "f16"),
            ("D", &[64], "i32"),
            ("E", &[48], "i32"),
        ],
        "tile.y=16 tile.x=16 tile.r=16",
    );
    let out = printed(&k);
    let src = code(&out);
    // One fused kernel, and the rounding of its f32 accumulator into C.
    assert_eq!(src.matches("__global__").count(), 2, "one kernel and the rounding");
    assert_eq!(out.round.as_ref().map(|r| r.len), Some(40 * 80));
    assert_eq!(src.matches("wmma::mma_sync(").count(), 1, "a matrix instruction");
    assert!(matches!(
        out.dots[..],
        [spindle_cuda::print::DotReport {
            path: DotPath::TensorCores {
                fragment: Fragment::Half,
                m: 16,
                n: 16,
                k: 16,
                into_accumulator: true,
                ..
            },
            ..
        }]
    ));

    // E: a 1-D shared tile of 16 indices, loaded once per r-tile (one load
    // site, inside the loop over r, filling the 1-D tile by r alone).
    let e_tiles = lines_with(src, "__shared__ int v");
    let e_tile: Vec<&str> = e_tiles.iter().copied().filter(|l| l.contains("_E[")).collect();
    assert_eq!(e_tile.len(), 1, "{e_tiles:?}");
    let e_name =
        e_tile[0].trim().trim_start_matches("__shared__ int ").split('[').next().unwrap().to_string();
    assert_eq!(e_tile[0].trim(), format!("__shared__ int {e_name}[16];"), "E is a 1-D tile");
    let loads_of_e: Vec<usize> = src.match_indices("g_E[").map(|(i, _)| i).collect();
    assert_eq!(loads_of_e.len(), 1, "E is read from memory at one place");
    let r_loop = loop_span(src, "r");
    assert!(r_loop.contains(&loads_of_e[0]), "E is loaded inside the loop over r");
    assert_eq!(lines_with(src, "g_E[")[0].trim(), format!("{e_name}[i_r] = g_E[(t_r * 16 + i_r)];"));
    // The gather of A reads E from its tile, once per element of A's tile.
    let a_fill = lines_with(src, "= g_A[");
    assert_eq!(a_fill.len(), 1);
    assert!(a_fill[0].contains(&format!("{e_name}[i_r]")), "{a_fill:?}");

    // The operand tiles are row-major (Y,R) and (R,X), filled straight from
    // memory in f16, and the fragments load straight from them: no
    // transposes, reshapes or conversions in between. Their rows are padded
    // by 8 halves (a pitch of 48 bytes instead of 32: fragment rows spread
    // over the banks).
    let a_tile = lines_with(src, "__half v").into_iter().find(|l| l.contains("_A[")).unwrap().trim();
    let b_tile = lines_with(src, "__half v").into_iter().find(|l| l.contains("_B[")).unwrap().trim();
    let a_name = a_tile.split_whitespace().nth(3).unwrap().split('[').next().unwrap();
    let b_name = b_tile.split_whitespace().nth(3).unwrap().split('[').next().unwrap();
    assert!(a_tile.ends_with(&format!("{a_name}[16][24];")), "{a_tile}");
    assert!(b_tile.ends_with(&format!("{b_name}[16][24];")), "{b_tile}");
    assert!(a_fill[0].trim().starts_with(&format!("{a_name}[i_y][i_r] = g_A[")), "{a_fill:?}");
    // B's rows are contiguous in memory and in the tile: 16-byte copies of
    // 8 halves (A is gathered through E: element by element).
    let b_fill = lines_with(src, "&g_B[");
    assert_eq!(b_fill.len(), 1);
    assert!(b_fill[0].contains("chunk = *reinterpret_cast<const uint4 *>(&g_B["), "{b_fill:?}");
    let b_store = format!("*reinterpret_cast<uint4 *>(&{b_name}[i_r][i_x]) = chunk;");
    assert_eq!(lines_with(src, &b_store).len(), 1, "{src}");
    assert_eq!(
        src.matches(&format!("{a_name}[i_")).count(),
        1,
        "A's tile is written once and never rearranged"
    );
    assert_eq!(
        src.matches(&format!("{b_name}[i_")).count(),
        1,
        "B's tile is written once and never rearranged"
    );
    assert!(src.contains(&format!("wmma::load_matrix_sync(fa, &{a_name}[0][0] + mt * 384 + kt * 16, 24);")));
    assert!(src.contains(&format!("wmma::load_matrix_sync(fb, &{b_name}[0][0] + kt * 384 + nt * 16, 24);")));
    assert!(src.contains("wmma::matrix_b, 16, 16, 16, __half, wmma::row_major"));
    for word in ["col_major", "trans", "reshape", "view"] {
        assert!(!src.contains(word), "{word}");
    }

    // The scatter through D: atomic, once per output element, after the
    // loop, into C's f32 accumulator (no 16-bit atomics).
    let atomics: Vec<usize> = src.match_indices("atomicAdd(").map(|(i, _)| i).collect();
    assert_eq!(atomics.len(), 1);
    assert!(atomics[0] > r_loop.end);
    let target = lines_with(src, "atomicAdd(&g_C[")[0];
    assert!(target.contains("_D[i_y] * 80 + (t_x * 16 + i_x)]"), "{target}");
    assert!(src.contains("float *__restrict__ g_C") && !src.contains("__half2"), "{src}");
    assert_eq!(src.matches("= g_D[").count(), 1, "D is read once per program");
    assert!(src.find("= g_D[").unwrap() < r_loop.start, "D is read before the loop");
    compiles("gather_dot_scatter_on_tensor_cores", &out);
}

/// GroupCOO SpMM: each program accumulates its (group, column) outputs over
/// the whole group in registers and writes each once, after the loop.
#[test]
fn groupcoo_spmm_writes_once_per_group_and_column() {
    let k = kernel(
        "C[A_grp[p],n] += A_val[p,q] * B[A_crd[p,q],n]",
        &[
            ("A_grp", &[100], "i32"),
            ("A_val", &[100, 24], "f32"),
            ("A_crd", &[100, 24], "i32"),
            ("B", &[70, 40], "f32"),
            ("C", &[50, 40], "f32"),
        ],
        "tile.p=16 tile.n=16 tile.q=8",
    );
    let out = printed(&k);
    let src = code(&out);
    assert_eq!(src.matches("__global__").count(), 1);
    let q_loop = loop_span(src, "q");
    assert!(src.contains("for (int t_q = 0; t_q < 3; t_q++)"), "the loop really loops");
    let atomics: Vec<usize> = src.match_indices("atomicAdd(").map(|(i, _)| i).collect();
    assert_eq!(atomics.len(), 1, "one atomic update site");
    assert!(atomics[0] > q_loop.end, "the atomic update is after the loop over q");
    // It adds the register accumulator: one update per (group, column).
    let scatter = lines_with(src, "atomicAdd(")[0];
    assert!(scatter.contains("_A_grp[i_p] * 40 + (t_n * 16 + i_n)], acc[k]);"), "{scatter}");
    // Inside the loop, the products only fold into `acc`.
    let body = &src[q_loop.clone()];
    assert!(body.contains("acc[k] += "), "{body}");
    assert!(!body.contains("atomic"), "{body}");
    compiles("groupcoo_spmm_writes_once_per_group_and_column", &out);
}

/// BlockGroupCOO SpMM with 32x32 f16 blocks: the gather of B through A_crd,
/// the block product on Tensor Cores and the scatter of the block row, in
/// one kernel; the in-group axis q joins the blocks' bj in K.
#[test]
fn blockgroupcoo_spmm_fuses_gather_block_product_and_scatter() {
    let decls: &[(&str, &[usize], &str)] = &[
        ("A_grp", &[6], "i32"),
        ("A_crd", &[6, 4], "i32"),
        ("A_val", &[6, 4, 32, 32], "f16"),
        ("B", &[128, 64], "f16"),
        ("C", &[96, 64], "f16"),
    ];
    let statement = "C[32*A_grp[p]+bi,n] += A_val[p,q,bi,bj] * B[32*A_crd[p,q]+bj,n]";
    for (schedule, k_extent) in [
        ("tile.p=1 tile.q=1 tile.bi=32 tile.bj=32 tile.n=32", 32),
        ("tile.p=1 tile.q=2 tile.bi=32 tile.bj=32 tile.n=64", 64),
    ] {
        let k = kernel(statement, decls, schedule);
        let out = printed(&k);
        let src = code(&out);
        assert_eq!(src.matches("__global__").count(), 2, "{schedule}: one kernel and the rounding");
        assert!(out.round.is_some(), "{schedule}: C is summed in f32");
        match &out.dots[..] {
            [
                spindle_cuda::print::DotReport {
                    path: DotPath::TensorCores { fragment, m, k, into_accumulator, .. },
                    ..
                },
            ] => {
                assert_eq!(
                    (*fragment, *m, *k, *into_accumulator),
                    (Fragment::Half, 32, k_extent, true),
                    "{schedule}"
                )
            }
            other => panic!("{schedule}: {other:?}"),
        }
        let q_loop = loop_span(src, "q");
        let body = &src[q_loop.clone()];
        // The gather of B through A_crd: the row index comes from A_crd's
        // tile, in the loop.
        let crd_fill = lines_with(body, "= (32 * g_A_crd[");
        assert_eq!(crd_fill.len(), 1, "{schedule}: {body}");
        let crd = crd_fill[0].trim().split('[').next().unwrap();
        let gather = lines_with(body, "g_B[");
        assert_eq!(gather.len(), 1, "{schedule}");
        assert!(
            gather[0].contains(&format!(
                "chunk = *reinterpret_cast<const uint4 *>(&g_B[({crd}[i_q][i_p] + (t_bj * 32 + i_bj)) * 64 + (t_n * "
            )),
            "{schedule}: {}",
            gather[0]
        );
        // The block product on Tensor Cores, in the loop.
        assert!(body.contains("wmma::mma_sync(acc_f[j], fa, fb, acc_f[j]);"), "{schedule}");
        // The scatter of the block row, after the loop (the block row can
        // fall off the output's end: scalar atomics at the edge).
        let atomics: Vec<usize> = src.match_indices("atomicAdd(").map(|(i, _)| i).collect();
        assert!(!atomics.is_empty() && atomics.iter().all(|&a| a > q_loop.end), "{schedule}");
        let target = lines_with(src, "atomicAdd(&g_C[")[0];
        assert!(target.contains("[i_p] + (t_bi * 32 + i_bi)) * 64 + (t_n * "), "{schedule}: {target}");
        let grp = lines_with(src, "= (32 * g_A_grp[");
        assert_eq!(grp.len(), 1, "A_grp is read once per program");
        assert!(src.find("= (32 * g_A_grp[").unwrap() < q_loop.start);
        compiles("blockgroupcoo_spmm_fuses_gather_block_product_and_scatter", &out);
    }
}

/// Tensor and index names are user names: keywords, CUDA built-ins,
/// reserved shapes and the printer's own names all become legal, distinct
/// identifiers.
#[test]
fn user_names_become_legal_identifiers() {
    let k = kernel(
        "int[e,k] += float[e,warp] * threadIdx[warp,k] * _x[k]",
        &[
            ("float", &[20, 24], "f32"),
            ("threadIdx", &[24, 12], "f32"),
            ("_x", &[12], "f32"),
            ("int", &[20, 12], "f32"),
        ],
        "",
    );
    let out = printed(&k);
    let src = code(&out);
    for name in ["g_int", "g_float", "g_threadIdx", "g_x", "i_e", "t_e", "i_k", "i_warp"] {
        assert!(src.contains(name), "{name}");
    }
    assert!(!src.contains("__x") && !src.contains("g__"), "no reserved identifiers");
    compiles("user_names_become_legal_identifiers", &out);
    let err = print_kernel(&k, "float", &PrintOptions::default()).unwrap_err();
    assert!(matches!(err, PrintError::Symbol { .. }), "{err}");
    assert!(print_kernel(&k, "__k", &PrintOptions::default()).is_err());
}

/// Tiles over 48 KB live in dynamic shared memory (the launch asks for
/// it); tiles that do not fit the 163 KB a block may opt into on every
/// target arch are a typed error naming the sizes, not a panic.
#[test]
fn large_tiles_use_dynamic_shared_memory_and_oversized_ones_are_an_error() {
    let shapes: &[(&str, &[usize], &str)] =
        &[("A", &[256, 256], "f32"), ("B", &[256, 256], "f32"), ("C", &[256, 256], "f32")];
    let k = kernel("C[y,x] += A[y,r] * B[r,x]", shapes, "tile.y=128 tile.x=128 tile.r=64");
    let printed = print_kernel(&k, SYMBOL, &PrintOptions::default()).unwrap();
    assert!(printed.launch.dynamic && printed.launch.shared_bytes > 48 * 1024, "{:?}", printed.launch);
    assert!(
        printed
            .source
            .contains(&format!("SPINDLE_DYNAMIC_SHARED(spindle_smem, {});", printed.launch.shared_bytes))
    );
    assert!(!printed.source.contains("__shared__ float"), "no static arrays beside the dynamic ones");

    let k = kernel("C[y,x] += A[y,r] * B[r,x]", shapes, "tile.y=256 tile.x=256 tile.r=128");
    let err = print_kernel(&k, SYMBOL, &PrintOptions::default()).unwrap_err();
    let PrintError::SharedMemory { bytes, limit, arrays, .. } = &err else { panic!("{err}") };
    assert!(*bytes > *limit && *limit == 163 * 1024, "{err}");
    assert!(arrays.iter().any(|(name, b)| name.ends_with("_A") && *b >= 256 * 128 * 4), "{arrays:?}");
    let message = err.to_string();
    assert!(message.contains("166912") && message.contains("_A: "), "{message}");
}

/// f32 products run on Tensor Cores only where tf32 is allowed.
#[test]
fn f32_products_use_tf32_when_allowed() {
    let k = kernel(
        "C[D[y],x] += A[y,E[r]] * B[r,x]",
        &[
            ("A", &[64, 96], "f32"),
            ("B", &[48, 80], "f32"),
            ("C", &[40, 80], "f32"),
            ("D", &[64], "i32"),
            ("E", &[48], "i32"),
        ],
        "tile.y=32 tile.x=32 tile.r=16",
    );
    let fma = printed(&k);
    assert!(
        matches!(&fma.dots[0].path, DotPath::Fma { reason } if reason.contains("tf32")),
        "{:?}",
        fma.dots
    );
    assert!(!fma.source.contains("wmma::"));
    compiles("f32_products_fma", &fma);
    let tf32 = printed_with(&k, &PrintOptions { tf32: true, ..PrintOptions::default() });
    assert!(matches!(tf32.dots[0].path, DotPath::TensorCores { fragment: Fragment::Tf32, k: 16, .. }));
    assert!(tf32.source.contains("wmma::precision::tf32") && tf32.source.contains("wmma::__float_to_tf32"));
    compiles("f32_products_use_tf32_when_allowed", &tf32);
    let off = printed_with(&k, &PrintOptions { tf32: true, tensor_cores: false, ..PrintOptions::default() });
    assert!(!off.source.contains("wmma::"));
}

/// Ragged edges, bf16, a batch axis, several fragments per warp.
#[test]
fn batched_ragged_bf16_products() {
    let k = kernel(
        "C[b,y,x] += A[b,y,r] * B[b,r,x]",
        &[("A", &[3, 40, 50], "bf16"), ("B", &[3, 50, 70], "bf16"), ("C", &[3, 40, 70], "bf16")],
        "tile.b=2 tile.y=32 tile.x=64 tile.r=32",
    );
    let out = printed(&k);
    assert!(
        matches!(
            out.dots[0].path,
            DotPath::TensorCores { fragment: Fragment::Bf16, batch: 2, m: 32, n: 64, k: 32, .. }
        ),
        "{:?}",
        out.dots
    );
    // The programs own their outputs: a plain read-modify-write.
    assert!(!out.source.contains("atomic"));
    assert!(out.source.contains("= __float2bfloat16(__bfloat162float(g_C["));
    compiles("batched_ragged_bf16_products", &out);
}

/// Eager broadcasting keeps every value over every axis: the product is no
/// plain 2-D one any more and falls back to FMA (the difference lazy
/// broadcasting makes); it still compiles.
#[test]
fn eager_broadcasting_falls_back_to_fma() {
    let decls: &[(&str, &[usize], &str)] = &[
        ("A", &[64, 96], "f16"),
        ("B", &[48, 80], "f16"),
        ("C", &[40, 80], "f16"),
        ("D", &[64], "i32"),
        ("E", &[48], "i32"),
    ];
    let k = kernel("C[D[y],x] += A[y,E[r]] * B[r,x]", decls, "tile.y=16 tile.x=16 tile.r=16 broadcast=eager");
    let out = printed(&k);
    assert!(matches!(out.dots[0].path, DotPath::Fma { .. }), "{:?}", out.dots);
    compiles("eager_broadcasting_falls_back_to_fma", &out);
    let atomic =
        kernel("C[D[y],x] += A[y,E[r]] * B[r,x]", decls, "tile.y=16 tile.x=16 tile.r=16 reduce=atomic");
    let out = printed(&atomic);
    let src = code(&out);
    assert!(
        loop_span(src, "r").contains(&src.find("atomicAdd(").unwrap()),
        "atomic per element: in the loop"
    );
    compiles("atomic_per_element", &out);
}

/// Max and min scatters are compare-and-swap loops for every value type;
/// f64 kernels compute in double.
#[test]
fn max_min_and_f64_scatters_compile() {
    for (op, dtype) in
        [("max=", "f32"), ("min=", "f16"), ("max=", "bf16"), ("min=", "f64"), ("+=", "f64"), ("+=", "bf16")]
    {
        let k = kernel(
            &format!("y[S[p]] {op} x[p] * w[p]"),
            &[("S", &[100], "i64"), ("x", &[100], dtype), ("w", &[100], "f32"), ("y", &[7], dtype)],
            "",
        );
        let out = printed(&k);
        if op != "+=" {
            assert!(out.source.contains("atomicCAS("), "{op} {dtype}");
        }
        if dtype == "f64" {
            assert!(out.source.contains("double"), "{op} {dtype}");
        }
        assert!(out.source.contains("long long"), "i64 indices");
        compiles(&format!("scatter_{}_{dtype}", if op == "+=" { "sum" } else { &op[..3] }), &out);
    }
}
