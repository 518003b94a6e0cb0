"""The SciPy baselines of `spindle bench react` (paper 003's library
column): each kernel as a user writes it with scipy.sparse and NumPy, one
library call per operation, every intermediate materialised.

- sddmm: `B.multiply(C @ D)`: the dense product C·D in full (dead values
         where B has no entry), then sampled by B.
- gnn1:  `(A @ X) @ W`: sparse times dense, then dense times dense.
- gnn2:  `A.multiply(X @ Y) @ V`: the dense product X·Y in full, sampled
         by A, then sparse times dense.

The inputs are .npy files in --dir, written by the Rust suite from the
same data its kernels read: A's CSR (a_indptr, a_indices, a_data, with
--a-shape) and the dense operands by name (c, d, x, w, y, v), f64.

Timing protocol, the same as Spindle's: one call for the check, --warmup
untimed calls, then --repeats calls each timed alone with
time.perf_counter; every call allocates its output and intermediates. The
check is the sum and the sum of squares of the output's values.

Prints one JSON object on stdout; an error is reported, not raised.
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


def summary(out):
    import numpy as np
    import scipy.sparse as sp

    data = np.asarray(out.tocsr().data if sp.issparse(out) else out, dtype=np.float64).ravel()
    return {"nnz": int(data.size), "sum": float(data.sum()), "sum_squares": float((data * data).sum())}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--kernel", required=True, choices=["sddmm", "gnn1", "gnn2"])
    p.add_argument("--a-shape", required=True, help="ROWSxCOLS")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    versions = {}
    for name in ["numpy", "scipy"]:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    report = {"python": sys.version.split()[0], "threads": args.threads, "versions": versions, "results": []}
    entry = {"library": "scipy"}
    try:
        import numpy as np
        import scipy.sparse as sp

        load = lambda name: np.load(os.path.join(args.dir, f"{name}.npy"))
        shape = tuple(int(x) for x in args.a_shape.split("x"))
        a = sp.csr_matrix((load("a_data"), load("a_indices"), load("a_indptr")), shape=shape)
        if args.kernel == "sddmm":
            c, d = load("c"), load("d")
            call, text = (lambda: a.multiply(c @ d).tocsr()), "B.multiply(C @ D)"
        elif args.kernel == "gnn1":
            x, w = load("x"), load("w")
            call, text = (lambda: (a @ x) @ w), "(A @ X) @ W"
        else:
            x, y, v = load("x"), load("y"), load("v")
            call, text = (lambda: a.multiply(x @ y).tocsr() @ v), "A.multiply(X @ Y) @ V"
        out = call()
        times = time_calls(call, args.warmup, args.repeats)
        entry.update({"call": text, "threads_reported": args.threads, "times_ms": times}, **summary(out))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        entry["error"] = f"{type(e).__name__}: {e}"
        entry["traceback"] = traceback.format_exc(limit=3)
    report["results"].append(entry)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
