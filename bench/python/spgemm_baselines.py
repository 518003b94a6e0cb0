"""The Python baselines of `spindle bench spgemm`.

C = A @ B with A and B in CSR (f64 values, i64 indices) and C sparse,
through the libraries a user would pick instead of Spindle:

- scipy: `A @ B` (scipy.sparse's two-pass csr_matmat: a count pass, then
         the product); single-threaded. Its rows' column indices are left
         unsorted, where Spindle's CSR output is sorted.
- mkl:   Intel MKL's `mkl_sparse_spmm` through sparse_dot_mkl
         (`dot_product_mkl(A, B)`, sparse output).

The inputs are .npy files in --dir (written by the Rust suite from the same
CSR arrays its kernels read): a_indptr, a_indices, a_data, b_indptr,
b_indices, b_data, and the second addend of C = A + D: d_indptr, d_indices,
d_data (A with its columns shifted by one). `scipy-add` times `A + D`.

Timing protocol, the same as Spindle's kernels: one call for the check,
--warmup untimed calls, then --repeats calls each timed alone with
time.perf_counter. Every call allocates its output, as Spindle's sparse
outputs are counted, sized and filled in each launch. The check is the
number of stored entries and the sum and sum of squares of the values.

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


def time_calls(call, warmup, repeats):
    for _ in range(warmup):
        call()
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def summary(c):
    import numpy as np

    c = c.tocsr()
    data = np.asarray(c.data, dtype=np.float64)
    return {"nnz": int(c.nnz), "sum": float(data.sum()), "sum_squares": float((data * data).sum())}


def run_scipy(a, b, args):
    out = a @ b
    times = time_calls(lambda: a @ b, args.warmup, args.repeats)
    info = {"call": "A @ B (scipy.sparse csr_matmat; unsorted column indices)", "threads_reported": 1}
    return info, summary(out), times


def run_mkl(a, b, args):
    import sparse_dot_mkl

    sparse_dot_mkl.mkl_set_num_threads(args.threads)
    out = sparse_dot_mkl.dot_product_mkl(a, b)
    times = time_calls(lambda: sparse_dot_mkl.dot_product_mkl(a, b), args.warmup, args.repeats)
    info = {
        "call": "sparse_dot_mkl.dot_product_mkl(A, B): mkl_sparse_d_create_csr x2 + mkl_sparse_spmm + export",
        "threads_reported": int(sparse_dot_mkl.mkl_get_max_threads()),
    }
    return info, summary(out), times


def run_scipy_add(a, d, args):
    out = a + d
    times = time_calls(lambda: a + d, args.warmup, args.repeats)
    info = {"call": "A + D (scipy.sparse csr_plus_csr)", "threads_reported": 1}
    return info, summary(out), times


RUNNERS = {"scipy": run_scipy, "mkl": run_mkl}
PACKAGES = ["numpy", "scipy", "sparse-dot-mkl", "mkl"]


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
    p.add_argument("--dir", required=True)
    p.add_argument("--a-shape", required=True, help="ROWSxCOLS")
    p.add_argument("--b-shape", required=True, help="ROWSxCOLS")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--libraries", default="scipy,mkl,scipy-add")
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
    shape = lambda s: tuple(int(x) for x in s.split("x"))
    csr = lambda p, s: sp.csr_matrix(
        (load(f"{p}_data.npy").astype(np.float64), load(f"{p}_indices.npy"), load(f"{p}_indptr.npy")),
        shape=shape(s),
    )
    a, b = csr("a", args.a_shape), csr("b", args.b_shape)
    d = csr("d", args.a_shape)
    for name in [s for s in args.libraries.split(",") if s]:
        entry = {"library": name}
        try:
            if name == "scipy-add":
                info, check, times = run_scipy_add(a, d, args)
            else:
                info, check, times = RUNNERS[name](a, b, args)
            entry.update(info, times_ms=times, **check)
        except Exception as e:  # noqa: BLE001 - one library failing must not stop the others
            entry["error"] = f"{type(e).__name__}: {e}"
            entry["traceback"] = traceback.format_exc(limit=3)
        report["results"].append(entry)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
