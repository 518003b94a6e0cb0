//! Compiles and runs hand-written C kernels with the fixed signature
//! `void NAME(void *const *args, int64_t nthreads)`.

use std::path::PathBuf;

use half::{bf16, f16};
use spindle_c::ir::formats::{DType, IType};
use spindle_c::{Buffer, BufferKind, CProgram, CompileError, Compiler, RunError, cpu_threads, time_median};

/// A fresh cache folder for one test, so that its first compile is a miss.
fn fresh_cache(name: &str) -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("spindle-c-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The environment's compiler, caching in a test-private folder.
fn compiler(name: &str) -> Compiler {
    Compiler::from_env().with_cache_dir(fresh_cache(name))
}

const SAXPY: &str = r#"
#include <stdint.h>
/* args: x (f32, n), y (f32, n, in/out), a (f32, 1), n (i64, 1) */
void saxpy(void *const *args, int64_t nthreads) {
    const float *restrict x = args[0];
    float *restrict y = args[1];
    const float a = ((const float *)args[2])[0];
    const int64_t n = ((const int64_t *)args[3])[0];
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
"#;

#[test]
fn saxpy_f32() {
    let k = CProgram::compile(SAXPY, "saxpy").unwrap();
    let n = 1000;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    for threads in [1, 2, 0] {
        let mut bufs = [
            Buffer::F32(x.clone()),
            Buffer::F32(y.clone()),
            Buffer::F32(vec![3.0]),
            Buffer::I64(vec![n as i64]),
        ];
        k.run(&mut bufs, threads).unwrap();
        let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| y + 3.0 * x).collect();
        assert_eq!(bufs[1].as_f32().unwrap(), &want[..], "nthreads {threads}");
        assert_eq!(bufs[0].as_f32().unwrap(), &x[..], "x is read-only");
    }
}

const GATHER: &str = r#"
#include <stdint.h>
/* out[i, j] = src[idx[i], j] for i < n, j < m.
   args: out (f64, n*m), src (f64, rows*m), idx (i32, n), dims (i64: n, m) */
void gather_rows(void *const *args, int64_t nthreads) {
    double *restrict out = args[0];
    const double *restrict src = args[1];
    const int32_t *restrict idx = args[2];
    const int64_t *dims = args[3];
    const int64_t n = dims[0], m = dims[1];
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const double *row = src + (int64_t)idx[i] * m;
        for (int64_t j = 0; j < m; j++) out[i * m + j] = row[j];
    }
}
"#;

#[test]
fn openmp_gather_with_i32_indices() {
    let k = CProgram::compile(GATHER, "gather_rows").unwrap().with_signature(vec![
        BufferKind::F64,
        BufferKind::F64,
        BufferKind::I32,
        BufferKind::I64,
    ]);
    let (rows, m, n) = (37usize, 5usize, 211usize);
    let src: Vec<f64> = (0..rows * m).map(|v| (v as f64).sin()).collect();
    let idx: Vec<i64> = (0..n).map(|i| ((i * 7919) % rows) as i64).collect();
    let want: Vec<f64> =
        idx.iter().flat_map(|&r| src[r as usize * m..(r as usize + 1) * m].to_vec()).collect();
    for threads in [1, 2] {
        let mut bufs = [
            Buffer::zeros(BufferKind::F64, n * m),
            Buffer::from_f64(&src, DType::F64),
            Buffer::from_i64(&idx, IType::I32).unwrap(),
            Buffer::I64(vec![n as i64, m as i64]),
        ];
        k.run(&mut bufs, threads).unwrap();
        assert_eq!(bufs[0].to_f64(), want, "nthreads {threads}");
    }

    // The declared signature is checked before the launch.
    let mut short = [Buffer::F64(vec![])];
    let e = k.run(&mut short, 1).unwrap_err();
    assert!(matches!(e, RunError::ArgCount { expected: 4, got: 1, .. }), "{e}");
    let mut wrong = [Buffer::F64(vec![]), Buffer::F64(vec![]), Buffer::I64(vec![]), Buffer::I64(vec![0, 0])];
    let e = k.run(&mut wrong, 1).unwrap_err();
    assert!(
        matches!(e, RunError::ArgKind { index: 2, expected: BufferKind::I32, got: BufferKind::I64, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("argument 2"), "{e}");
}

const HISTOGRAM: &str = r#"
#include <stdint.h>
/* counts[keys[i]] += weights[i] with atomics.
   args: counts (f32, bins), keys (i32, n), weights (f32, n), n (i64, 1) */
void histogram(void *const *args, int64_t nthreads) {
    float *counts = args[0];
    const int32_t *keys = args[1];
    const float *weights = args[2];
    const int64_t n = ((const int64_t *)args[3])[0];
    #pragma omp parallel for num_threads(nthreads)
    for (int64_t i = 0; i < n; i++) {
        #pragma omp atomic
        counts[keys[i]] += weights[i];
    }
}
"#;

#[test]
fn openmp_atomic_scatter() {
    let k = CProgram::compile(HISTOGRAM, "histogram").unwrap();
    let (bins, n) = (7usize, 100_000usize);
    let keys: Vec<i64> = (0..n).map(|i| ((i * 31) % bins) as i64).collect();
    // Small integers: every partial sum is exact in f32, in any order.
    let weights: Vec<f64> = (0..n).map(|i| (i % 4) as f64).collect();
    let mut want = vec![0.0; bins];
    for (&k, &w) in keys.iter().zip(&weights) {
        want[k as usize] += w;
    }
    for threads in [1, 2] {
        let mut bufs = [
            Buffer::zeros(BufferKind::F32, bins),
            Buffer::from_i64(&keys, IType::I32).unwrap(),
            Buffer::from_f64(&weights, DType::F32),
            Buffer::I64(vec![n as i64]),
        ];
        k.run(&mut bufs, threads).unwrap();
        assert_eq!(bufs[0].to_f64(), want, "nthreads {threads}");
    }
}

const THREADS: &str = r#"
#include <stdint.h>
#include <omp.h>
/* out[0] = the size of the team the kernel ran with. */
void team_size(void *const *args, int64_t nthreads) {
    int64_t *out = args[0];
    #pragma omp parallel num_threads(nthreads)
    {
        #pragma omp single
        out[0] = omp_get_num_threads();
    }
}
"#;

#[test]
fn nthreads_reaches_openmp() {
    let k = CProgram::compile(THREADS, "team_size").unwrap();
    for (threads, want) in [(1, 1), (2, 2), (0, cpu_threads())] {
        let mut bufs = [Buffer::I64(vec![0])];
        k.run(&mut bufs, threads).unwrap();
        assert_eq!(bufs[0].as_i64().unwrap(), [want as i64], "nthreads {threads}");
    }
}

#[test]
fn second_compile_is_a_cache_hit() {
    let c = compiler("cache-hit");
    let src = format!("{SAXPY}\n/* cache test */\n");
    let first = c.compile(&src, "saxpy").unwrap();
    assert!(!first.cache_hit());
    assert!(first.compile_time() > std::time::Duration::ZERO);
    assert!(first.source_path().starts_with(c.cache_dir()));
    assert_eq!(first.source_path().extension().unwrap(), "c");
    assert_eq!(first.so_path().extension().unwrap(), "so");
    assert_eq!(std::fs::read_to_string(first.source_path()).unwrap(), src);
    // Both files are written by a rename onto them, so a rewrite is a new
    // inode; a hit keeps them, and marks them used (their modification
    // time, which the cache's bound evicts by).
    use std::os::unix::fs::MetadataExt;
    let meta = |p: &std::path::Path| std::fs::metadata(p).unwrap();
    let (so_before, c_before) = (meta(first.so_path()), meta(first.source_path()));

    let second = c.compile(&src, "saxpy").unwrap();
    assert!(second.cache_hit());
    assert_eq!(second.compile_time(), std::time::Duration::ZERO);
    assert_eq!(second.so_path(), first.so_path());
    let (so_after, c_after) = (meta(second.so_path()), meta(second.source_path()));
    assert_eq!(so_after.ino(), so_before.ino(), "the .so was not rewritten");
    assert_eq!(c_after.ino(), c_before.ino(), "the .c was not rewritten");
    assert!(so_after.modified().unwrap() >= so_before.modified().unwrap(), "the hit marks the .so used");

    // A fresh compiler value (as in another process) hits the disk cache too.
    let third = Compiler::from_env().with_cache_dir(c.cache_dir()).compile(&src, "saxpy").unwrap();
    assert!(third.cache_hit());

    // Only the two final files are left, no temporaries.
    let mut names: Vec<String> = std::fs::read_dir(c.cache_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");

    // Different source, or different flags, is a different entry.
    let other = c.compile(&format!("{src} "), "saxpy").unwrap();
    assert!(!other.cache_hit());
    assert_ne!(other.so_path(), first.so_path());
    let flags = c.clone().with_flags(["-O1", "-fopenmp", "-shared", "-fPIC", "-std=c11"]);
    let o1 = flags.compile(&src, "saxpy").unwrap();
    assert!(!o1.cache_hit());
    assert_ne!(o1.so_path(), first.so_path());

    // Both entries compute the same thing.
    for k in [&first, &o1] {
        let mut bufs = [
            Buffer::F32(vec![1.0, 2.0]),
            Buffer::F32(vec![1.0; 2]),
            Buffer::F32(vec![2.0]),
            Buffer::I64(vec![2]),
        ];
        k.run(&mut bufs, 1).unwrap();
        assert_eq!(bufs[1].to_f64(), [3.0, 5.0]);
    }
}

#[test]
fn concurrent_compiles_of_one_source_agree() {
    let c = compiler("concurrent");
    let src = format!("{GATHER}\n/* concurrent */\n");
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| c.compile(&src, "gather_rows").unwrap())).collect();
        for h in handles {
            let k = h.join().unwrap();
            let mut bufs = [
                Buffer::F64(vec![0.0; 2]),
                Buffer::F64(vec![5.0, 6.0]),
                Buffer::I32(vec![1, 0]),
                Buffer::I64(vec![2, 1]),
            ];
            k.run(&mut bufs, 2).unwrap();
            assert_eq!(bufs[0].to_f64(), [6.0, 5.0]);
        }
    });
}

#[test]
fn syntax_error_reports_compiler_output_and_source_path() {
    let c = compiler("syntax-error");
    let src = "#include <stdint.h>\nvoid broken(void *const *args, int64_t nthreads) {\n    int x = ;\n}\n";
    let e = c.compile(src, "broken").unwrap_err();
    let CompileError::Failed { compiler_output, source_path, command, .. } = &e else {
        panic!("expected Failed, got {e:?}")
    };
    assert!(compiler_output.contains("error"), "{compiler_output}");
    assert!(compiler_output.contains("expected expression"), "{compiler_output}");
    assert!(source_path.starts_with(c.cache_dir()));
    assert_eq!(std::fs::read_to_string(source_path).unwrap(), src, "the failing source stays to be read");
    assert!(command.contains("-fopenmp") && command.contains("-march=native"), "{command}");
    let message = e.to_string();
    assert!(message.contains(&source_path.display().to_string()), "{message}");
    assert!(message.contains("expected expression"), "{message}");
    // No shared object or temporary is left behind.
    let entries = std::fs::read_dir(c.cache_dir()).unwrap().count();
    assert_eq!(entries, 1);
}

#[test]
fn missing_compiler_is_an_error() {
    let c = Compiler::new("/nonexistent/cc").with_cache_dir(fresh_cache("missing"));
    let e = c.compile(SAXPY, "saxpy").unwrap_err();
    assert!(
        matches!(&e, CompileError::CompilerMissing { compiler, .. } if compiler.ends_with("nonexistent/cc")),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(message.contains("/nonexistent/cc") && message.contains("not found"), "{message}");
    assert!(message.contains("$CC") && message.contains("-fopenmp"), "{message}");
}

#[test]
fn missing_or_invalid_symbol_is_an_error() {
    let c = compiler("symbol");
    let e = c.compile(SAXPY, "sapxy").unwrap_err();
    assert!(matches!(&e, CompileError::MissingSymbol { symbol, .. } if symbol == "sapxy"), "{e:?}");
    assert!(e.to_string().contains(".c`"), "{e}");
    let e = c.compile(SAXPY, "not a name").unwrap_err();
    assert!(matches!(e, CompileError::InvalidSymbol(_)), "{e:?}");
}

#[test]
fn warnings_are_kept_on_success() {
    let c = compiler("warnings");
    let src = "#include <stdint.h>\nint f(int x) { if (x = 1) return 2; return 3; }\n\
               void k(void *const *args, int64_t nthreads) { (void)args; (void)nthreads; }\n";
    let k = c.compile(src, "k").unwrap();
    assert!(k.compiler_output().contains("warning"), "{}", k.compiler_output());
}

const SCALE_HALF: &str = r#"
#include <stdint.h>
/* y[i] = x[i] * s: f16/bf16 tensors arrive as f32. */
void scale(void *const *args, int64_t nthreads) {
    const float *x = args[0];
    float *y = args[1];
    const float s = ((const float *)args[2])[0];
    const int64_t n = ((const int64_t *)args[3])[0];
    #pragma omp parallel for num_threads(nthreads)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}
"#;

#[test]
fn f16_and_bf16_round_trip_through_f32() {
    let k = CProgram::compile(SCALE_HALF, "scale").unwrap();
    let xs = [0.1, -1.5, 3.140625, 65504.0 / 4.0, 1e-3, 0.0, 1.0 / 3.0];
    for dtype in [DType::F16, DType::Bf16] {
        let x = Buffer::from_f64(&xs, dtype);
        assert_eq!(x.kind(), BufferKind::F32);
        // The kernel sees exactly the half values.
        let rounded: Vec<f64> = match dtype {
            DType::F16 => xs.iter().map(|&v| f16::from_f64(v).to_f64()).collect(),
            _ => xs.iter().map(|&v| bf16::from_f64(v).to_f64()).collect(),
        };
        assert_eq!(x.to_f64(), rounded, "{dtype:?}");
        assert_eq!(x.to_f64_as(dtype), rounded, "{dtype:?}: exact round-trip");

        let mut bufs = [
            x,
            Buffer::zeros(BufferKind::F32, xs.len()),
            Buffer::F32(vec![4.0]),
            Buffer::I64(vec![xs.len() as i64]),
        ];
        k.run(&mut bufs, 2).unwrap();
        // Scaling by 4 is exact in every format, so the round-trip back
        // gives exactly 4× the half values.
        let want: Vec<f64> = rounded.iter().map(|v| v * 4.0).collect();
        assert_eq!(bufs[1].to_f64_as(dtype), want, "{dtype:?}");
        match dtype {
            DType::F16 => {
                assert_eq!(bufs[1].to_f16(), want.iter().map(|&v| f16::from_f64(v)).collect::<Vec<_>>())
            }
            _ => assert_eq!(bufs[1].to_bf16(), want.iter().map(|&v| bf16::from_f64(v)).collect::<Vec<_>>()),
        }
    }

    // From a format's arrays: half values widen exactly.
    let h = [f16::from_f32(0.5), f16::from_f32(-2.25)];
    assert_eq!(Buffer::from_values(&h), Buffer::F32(vec![0.5, -2.25]));
    assert_eq!(Buffer::from_values(&h).to_f16(), h);
    let b = [bf16::from_f32(1.5), bf16::from_f32(-3.0e20)];
    assert_eq!(Buffer::from_values(&b).to_bf16(), b);
    assert_eq!(Buffer::from_indices(&[3i32, 4]), Buffer::I32(vec![3, 4]));
    assert_eq!(Buffer::from_indices(&[3i64, 4]), Buffer::I64(vec![3, 4]));

    // The f32 result rounds once to the half type (0.1 * 3 is not exact).
    let y = Buffer::F32(vec![0.3f32]);
    assert_eq!(y.to_f16(), [f16::from_f32(0.3f32)]);
    assert_eq!(y.to_f64_as(DType::F32), [f64::from(0.3f32)]);
}

#[test]
fn timing_helpers() {
    let k = CProgram::compile(SAXPY, "saxpy").unwrap();
    let n = 1 << 16;
    let mut bufs = [
        Buffer::F32(vec![1.0; n]),
        Buffer::F32(vec![0.0; n]),
        Buffer::F32(vec![1.0]),
        Buffer::I64(vec![n as i64]),
    ];
    let mut calls = 0;
    let t = time_median(5, 1, || {
        k.run(&mut bufs, 1).unwrap();
        calls += 1;
    });
    assert_eq!(calls, 6);
    assert!(t > std::time::Duration::ZERO);
    assert_eq!(bufs[1].as_f32().unwrap()[0], 6.0);
    assert!(cpu_threads() >= 1);
}

/// Set in the child processes of [`environment_variables_are_read`].
const CHILD_MARK: &str = "SPINDLE_C_TEST_CHILD";

/// Runs one test of this binary in a child process with extra variables,
/// so that no test mutates this process's environment.
fn run_child(test: &str, vars: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"]).env(CHILD_MARK, "1");
    // This process has loaded kernels, so it has a wait policy by now.
    cmd.env_remove("OMP_WAIT_POLICY").env_remove("GOMP_SPINCOUNT");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("1 passed"), "the child ran `{test}`: {stdout}");
    out
}

#[test]
fn environment_variables_are_read() {
    if std::env::var_os(CHILD_MARK).is_some() {
        return;
    }
    let out = run_child("child_missing_compiler_from_env", &[("CC", "/nonexistent/cc")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));

    // `$CC` may carry arguments; `$SPINDLE_CACHE_DIR` moves the cache.
    let dir = fresh_cache("env");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = run_child(
        "child_cc_with_arguments",
        &[("CC", &format!("{cc} -DSPINDLE_MARK=7")), ("SPINDLE_CACHE_DIR", dir.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "a .c and a .so in $SPINDLE_CACHE_DIR");
}

#[test]
fn openmp_waits_passively_unless_told_otherwise() {
    if std::env::var_os(CHILD_MARK).is_some() {
        return;
    }
    for (vars, want) in [
        (&[][..], "passive"),
        (&[("OMP_WAIT_POLICY", "active")][..], "active"),
        (&[("GOMP_SPINCOUNT", "1000")][..], "unset"),
    ] {
        let mut vars = vars.to_vec();
        vars.push(("SPINDLE_C_TEST_WANT", want));
        let out = run_child("child_wait_policy", &vars);
        assert!(out.status.success(), "{vars:?}: {}", String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn child_wait_policy() {
    if std::env::var_os(CHILD_MARK).is_none() {
        return;
    }
    let k = CProgram::compile(THREADS, "team_size").unwrap();
    let mut bufs = [Buffer::I64(vec![0])];
    k.run(&mut bufs, 2).unwrap();
    let policy = std::env::var("OMP_WAIT_POLICY").unwrap_or_else(|_| "unset".into());
    assert_eq!(policy, std::env::var("SPINDLE_C_TEST_WANT").unwrap());
}

#[test]
fn child_missing_compiler_from_env() {
    if std::env::var_os(CHILD_MARK).is_none() {
        return;
    }
    let e = CProgram::compile(SAXPY, "saxpy").unwrap_err();
    assert!(matches!(&e, CompileError::CompilerMissing { .. }), "{e:?}");
    assert!(e.to_string().contains("/nonexistent/cc"), "{e}");
}

#[test]
fn child_cc_with_arguments() {
    if std::env::var_os(CHILD_MARK).is_none() {
        return;
    }
    let src = "#include <stdint.h>\nvoid mark(void *const *args, int64_t nthreads) { ((int64_t *)args[0])[0] = SPINDLE_MARK; }\n";
    let k = CProgram::compile(src, "mark").unwrap();
    assert!(k.so_path().starts_with(std::env::var("SPINDLE_CACHE_DIR").unwrap()));
    let mut bufs = [Buffer::I64(vec![0])];
    k.run(&mut bufs, 1).unwrap();
    assert_eq!(bufs[0].as_i64().unwrap(), [7]);
}

#[test]
fn programs_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CProgram>();
    assert_send_sync::<Compiler>();
    assert_send_sync::<CompileError>();
}
