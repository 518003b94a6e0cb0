"""The Python baselines of `spindle bench spmm --target c`.

C += A @ B with A in CSR (f32 values, i32 indices) and B dense, row-major,
f32, through the libraries a user would pick instead of Spindle:

- scipy:     scipy.sparse's CSR kernel (`_sparsetools.csr_matvecs`, what
             `A @ B` calls after allocating a zero output); single-threaded.
- mkl:       Intel MKL's `mkl_sparse_s_mm` through sparse_dot_mkl
             (`dot_product_mkl(A, B, out=C, out_scalar=1)`).
- graphblas: SuiteSparse:GraphBLAS through python-graphblas
             (`C(plus) << A.mxm(B)`, blocking mode).

The inputs are .npy files in --dir (written by the Rust suite from the same
CSR arrays its kernels read): a_indptr.npy, a_indices.npy, a_data.npy, b.npy.

Timing protocol, the same as Spindle's kernels in the Rust suite: one call
whose output is saved for the check, --warmup untimed calls, then --repeats
calls each timed alone with time.perf_counter. Before every call, the output
is reset to zeros outside the timed region, and the call accumulates into it
(C += A @ B), as Spindle's `+=` kernels do. No cache is flushed on either
side: every call sees what the previous one left in cache.

Threads are fixed by the environment the caller sets before any library
loads (OMP_NUM_THREADS, MKL_NUM_THREADS, ...) and again through each
library's own setter; what each library reports is returned.

Prints one JSON object on stdout; a library that fails to import or run is
reported with its error, and the others still run.
"""

import argparse
import importlib.metadata
import json
import os
import sys
import time
import traceback


def time_calls(call, reset, warmup, repeats):
    """Milliseconds of each timed call; `reset` runs before every call, untimed."""
    for _ in range(warmup):
        reset()
        call()
    times = []
    for _ in range(max(1, repeats)):
        reset()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def run_scipy(a, b, c, args):
    import numpy as np
    from scipy.sparse import _sparsetools

    m, k = a.shape
    n = b.shape[1]
    b_flat, c_flat = b.ravel(), c.ravel()
    if hasattr(_sparsetools, "csr_matvecs"):

        def call():
            _sparsetools.csr_matvecs(m, k, n, a.indptr, a.indices, a.data, b_flat, c_flat)

        def reset():
            c.fill(0)

        call_name = "scipy.sparse._sparsetools.csr_matvecs (the kernel of A @ B), accumulating into C"
        init = "outside"
        get = lambda: c
    else:
        # An older or newer SciPy without the private kernel: time what a
        # user writes; the zero output is then allocated inside the clock.
        holder = {}

        def call():
            holder["c"] = a @ b

        def reset():
            holder.pop("c", None)

        call_name = "A @ B (allocates its zero output inside the clock)"
        init = "inside"
        get = lambda: holder["c"]
    reset()
    call()
    out = np.array(get(), dtype=np.float32, copy=True)
    times = time_calls(call, reset, args.warmup, args.repeats)
    return {"call": call_name, "output_init": init, "threads_reported": 1}, out, times


def run_mkl(a, b, c, args):
    import numpy as np
    import sparse_dot_mkl

    sparse_dot_mkl.mkl_set_num_threads(args.threads)

    def call():
        sparse_dot_mkl.dot_product_mkl(a, b, out=c, out_scalar=1.0)

    def reset():
        c.fill(0)

    reset()
    call()
    out = np.array(c, dtype=np.float32, copy=True)
    times = time_calls(call, reset, args.warmup, args.repeats)
    info = {
        # sparse_dot_mkl wraps A in an MKL handle on every call (no
        # mkl_sparse_optimize): what its users get, and part of the time.
        "call": "sparse_dot_mkl.dot_product_mkl(A, B, out=C, out_scalar=1.0): mkl_sparse_s_create_csr + "
        "mkl_sparse_s_mm (row-major, beta = 1) per call",
        "output_init": "outside",
        "threads_reported": int(sparse_dot_mkl.mkl_get_max_threads()),
    }
    return info, out, times


def run_graphblas(a, b, c, args):
    import numpy as np
    import graphblas as gb

    gb.init("suitesparse", blocking=True)
    gb.ss.config["nthreads"] = args.threads
    ga = gb.io.from_scipy_sparse(a)
    gbm = gb.Matrix.from_dense(b)
    gc = gb.Matrix(gb.dtypes.FP32, *c.shape)

    def call():
        gc(gb.binary.plus) << ga.mxm(gbm, gb.semiring.plus_times)

    def reset():
        gc[:, :] << 0

    reset()
    call()
    out = np.asarray(gc.to_dense(fill_value=0), dtype=np.float32)
    times = time_calls(call, reset, args.warmup, args.repeats)
    info = {
        "call": "C(plus) << A.mxm(B, plus_times) with B and C full (python-graphblas, blocking)",
        "output_init": "outside",
        "threads_reported": int(gb.ss.config["nthreads"]),
    }
    return info, out, times


RUNNERS = {"scipy": run_scipy, "mkl": run_mkl, "graphblas": run_graphblas}
PACKAGES = ["numpy", "scipy", "sparse-dot-mkl", "mkl", "python-graphblas", "suitesparse-graphblas"]


def versions():
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="folder with a_indptr/a_indices/a_data/b .npy")
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--cols", type=int, required=True)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tag", default="run", help="distinguishes this run's output files")
    p.add_argument("--libraries", default="scipy,mkl,graphblas")
    args = p.parse_args()

    report = {"python": sys.version.split()[0], "threads": args.threads, "versions": versions(), "results": []}
    try:
        import numpy as np
        import scipy.sparse as sp
    except Exception as e:  # noqa: BLE001 - reported, not raised
        report["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(report))
        return
    load = lambda name: np.load(os.path.join(args.dir, name))
    a = sp.csr_matrix(
        (load("a_data.npy").astype(np.float32), load("a_indices.npy"), load("a_indptr.npy")),
        shape=(args.rows, args.cols),
    )
    b = np.ascontiguousarray(load("b.npy"), dtype=np.float32)
    c = np.zeros((args.rows, b.shape[1]), dtype=np.float32)
    for name in [s for s in args.libraries.split(",") if s]:
        entry = {"library": name}
        try:
            runner = RUNNERS[name]
            info, out, times = runner(a, b, c, args)
            path = os.path.join(args.dir, f"c-{name}-{args.tag}.npy")
            np.save(path, out)
            entry.update(info, times_ms=times, output=path)
        except Exception as e:  # noqa: BLE001 - one library failing must not stop the others
            entry["error"] = f"{type(e).__name__}: {e}"
            entry["traceback"] = traceback.format_exc(limit=3)
        report["results"].append(entry)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
