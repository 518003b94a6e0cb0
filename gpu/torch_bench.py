#!/usr/bin/env python3
"""PyTorch baselines for Spindle's GPU benchmarks.

Measures, with PyTorch, the computations that `spindle bench spmm --target cuda`
and `spindle bench bsr --target cuda` measure, so that `summary.py` can put them
side by side:

1. SpMM C = A·B (B dense K×128) in f32 and f16: torch.sparse CSR (cuSPARSE) and
   the indirect Einsum of Insum over GroupCOO (gather → einsum → scatter) under
   torch.compile.
2. Block-sparse SpMM, f16, 4096×4096 with 32×32 blocks: torch BSR, dense (cuBLAS)
   and the BlockGroupCOO indirect Einsum under torch.compile.
3. The device copy bandwidth, read + write counted.

The sparse arrays come from the spindle binary (`spindle convert`), so both sides
read the same matrices in the same formats. Every output is checked against an
f64 product of the same rounded inputs: max|got - want| / max|want| must stay
under 1e-3 (f32) or 1e-2 (f16). A failing check or method is recorded in the
JSON and printed; it never stops the other measurements, and the exit code stays
0 (2 for usage errors).

Usage: python3 torch_bench.py --spindle BIN --data DIR --work DIR --out FILE
       [--device cuda|cpu] [--repeats 20] [--quick] [--only NAME]...

Differences from Spindle's timing to keep in mind: C has the inputs' dtype in
every method, as in Spindle's kernels; the Insum pipeline indexes with int64;
inputs are not rotated through L2 between repeats (Spindle rotates those that
fit, so the smallest matrices can look faster here than there).

numpy and torch are imported inside the functions that need them, so the pure
helpers can be imported (and unit-tested) with only the standard library.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

# Dense columns of the SpMM suite (as in Spindle's suite).
SPMM_N = 128
# Generated matrices of the SpMM suite: (name, spindle input).
GENERATED = [
    ("powerlaw-1M", "gen:powerlaw:rows=100000,cols=100000,nnz=1000000,seed=1"),
    ("powerlaw-8M", "gen:powerlaw:rows=1000000,cols=1000000,nnz=8000000,seed=2"),
]
# Block-sparse suite: sparsities, block size; sizes per device kind.
BSR_SPARSITIES = [0.5, 0.7, 0.9, 0.95, 0.99]
BSR_BLOCK = 32
BSR_SIZE = {"cuda": (4096, 1024), "cpu": (512, 64)}  # (rows = cols of A, N)
# Bytes for the copy-bandwidth measurement; small on the CPU (smoke test only).
COPY_BYTES = {"cuda": 1 << 30, "cpu": 1 << 26}
TOLERANCE = {"f32": 1e-3, "f16": 1e-2}
# Seed of the dense operand B (values in ±[0.1, 1)).
B_SEED = 7
WARMUP = 3
# Nonzeros per step of the f64 SpMM reference (1 GiB of f64 products at N = 128).
REFERENCE_CHUNK = 1 << 20


@dataclass
class Context:
    """What every measurement needs: where things are and how to time."""

    spindle: Path
    work: Path
    device: str
    repeats: int


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parses the command line; argparse exits with code 2 on usage errors."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spindle", required=True, type=Path, help="the spindle binary")
    parser.add_argument("--data", required=True, type=Path, help="folder holding matrices/*.mtx")
    parser.add_argument("--work", required=True, type=Path, help="folder for converted arrays")
    parser.add_argument("--out", required=True, type=Path, help="JSON report to write")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="only the .mtx files and powerlaw-1M")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this SpMM matrix (repeatable; default: all)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not args.spindle.is_file():
        parser.error(f"--spindle {args.spindle}: no such file")
    if args.device == "cpu":
        # The CPU mode exists for the smoke test only: keep it small.
        args.quick = True
    return args


def matrix_inputs(data: Path, quick: bool, device: str) -> list[tuple[str, str]]:
    """The SpMM suite's matrices as (name, spindle input): the shared .mtx files,
    then the generated power-law ones (only the 1M one with --quick, none on the
    CPU, where the smoke test wants small sizes)."""
    inputs = [(p.stem, str(p)) for p in sorted((data / "matrices").glob("*.mtx"))]
    if device == "cpu":
        return inputs
    return inputs + (GENERATED[:1] if quick else GENERATED)


def blocks_input(sparsity: float, size: int) -> str:
    """The spindle generator string of the block-sparse matrix at `sparsity`."""
    density = f"{1 - sparsity:.6g}"
    return (
        f"gen:blocks:rows={size},cols={size},bm={BSR_BLOCK},bk={BSR_BLOCK},"
        f"density={density},seed=5"
    )


def g_of_format(meta: dict) -> int | None:
    """The group size stated in a format.json ("groupcoo:dim=0,g=4" → 4)."""
    found = re.search(r"(?:^|[:,])g=(\d+)", str(meta.get("format", "")))
    return int(found.group(1)) if found else None


def relative_error(max_abs_diff: float, max_abs_want: float) -> float:
    """max|got - want| / max|want|; the absolute difference when want is all
    zeros, so that an all-zero reference still catches a non-zero output."""
    if max_abs_want == 0:
        return max_abs_diff
    return max_abs_diff / max_abs_want


def finite_or_none(x: float | None) -> float | None:
    """JSON has no NaN or infinity: those become null."""
    return x if x is not None and math.isfinite(x) else None


def short_error(e: BaseException) -> str:
    """One line for an exception: its type and the start of its message."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:400]}"


def convert(ctx: Context, source: str, fmt: str, name: str) -> tuple[Path, dict]:
    """Converts `source` (a path or a gen: string) to `fmt` under WORK/name with
    the spindle binary, reusing a complete earlier conversion; returns the
    folder and its format.json."""
    out = ctx.work / name
    meta_path = out / "format.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if all((out / a["file"]).is_file() for a in meta.get("arrays", [])):
            return out, meta
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(ctx.spindle), "convert", source, "--to", fmt, "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return out, json.loads(meta_path.read_text())


def load_arrays(folder: Path, meta: dict, device: str) -> dict:
    """The format's arrays as torch tensors on `device`, by name."""
    import numpy as np
    import torch

    return {
        a["name"]: torch.from_numpy(np.load(folder / a["file"])).to(device)
        for a in meta["arrays"]
    }


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def median_ms(ctx: Context, fn) -> float:
    """Median time of `fn()` in ms after warm-up: CUDA events around each call
    on the GPU, perf_counter on the CPU."""
    import torch

    for _ in range(WARMUP):
        fn()
    synchronize(ctx.device)
    times = []
    for _ in range(ctx.repeats):
        if ctx.device == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def check(got, want) -> float | None:
    """Relative error of `got` against the f64 reference `want` (None if it is
    not finite, which fails the check)."""
    diff = (got.double() - want).abs().max().item()
    return finite_or_none(relative_error(diff, want.abs().max().item()))


def dense_operand(rows: int, cols: int, dtype, device: str):
    """B: values in ±[0.1, 1), seeded, in `dtype`."""
    import torch

    gen = torch.Generator(device=device).manual_seed(B_SEED)
    mag = torch.rand(rows, cols, generator=gen, device=device) * 0.9 + 0.1
    sign = torch.randint(0, 2, (rows, cols), generator=gen, device=device) * 2 - 1
    return (mag * sign).to(dtype)


def insum_functions():
    """The two indirect Einsums of Insum, as plain functions for torch.compile.
    Built here so that torch is imported only when benchmarking. C has the
    inputs' dtype, as in Spindle's kernels."""
    import torch

    def groupcoo(grp, crd, val, b, rows: int):
        """C[grp[p], n] += val[p, q] * B[crd[p, q], n]: gather, einsum, scatter."""
        c = torch.zeros(rows, b.shape[1], dtype=b.dtype, device=b.device)
        return c.index_add_(0, grp, torch.einsum("pq,pqn->pn", val, b[crd]))

    def blockgroupcoo(grp, crd, val, b, rows: int):
        """The same over 32×32 blocks: val [P, g, bm, bk], B viewed as block rows."""
        bm, bk = val.shape[2], val.shape[3]
        n = b.shape[1]
        c = torch.zeros(rows // bm, bm, n, dtype=b.dtype, device=b.device)
        c.index_add_(0, grp, torch.einsum("pqij,pqjn->pin", val, b.view(-1, bk, n)[crd]))
        return c.view(rows, n)

    return groupcoo, blockgroupcoo


def enable_native_matmul() -> bool:
    """Sets torch._inductor.config.triton.native_matmul (Inductor emits tl.dot
    for the einsum inside the fused kernel) when this torch has it; returns
    whether it was set."""
    try:
        import torch._inductor.config as inductor_config
    except Exception:
        return False
    if not hasattr(inductor_config.triton, "native_matmul"):
        return False
    inductor_config.triton.native_matmul = True
    return True


def compile_or_eager(fn, args: tuple, device: str) -> tuple:
    """torch.compile(fn), full graph first, then with graph breaks allowed; the
    first call (which compiles) runs here so compile time stays out of the
    timing. Dynamo is reset first so that each shape gets its own static graph
    instead of hitting the recompile limit. Returns (callable, mode,
    fullgraph, error) with mode "compiled" or "eager"."""
    import torch
    import torch._dynamo

    errors = []
    for fullgraph in (True, False):
        torch._dynamo.reset()
        try:
            compiled = torch.compile(fn, fullgraph=fullgraph, dynamic=False)
            compiled(*args)
            synchronize(device)
            return compiled, "compiled", fullgraph, None
        except Exception as e:
            errors.append(f"fullgraph={fullgraph}: {short_error(e)}")
    torch._dynamo.reset()
    return fn, "eager", False, "; ".join(errors)


class Recorder:
    """Runs one method of one row: times it, checks it, and records the
    outcome (or the exception) in the row and the report's failures."""

    def __init__(self, ctx: Context, row: dict, label: str, tolerance: float, failures: list):
        self.ctx, self.row, self.label, self.tol, self.failures = ctx, row, label, tolerance, failures

    def measure(self, key: str, fn, want) -> None:
        """Runs `fn()` once for the check, then times it; fills KEY_err,
        KEY_pass and KEY_ms of the row. The check is never skipped: a failing
        one is recorded and the method is still timed."""
        try:
            err = check(fn(), want)
            ok = err is not None and err <= self.tol
            self.row[f"{key}_err"], self.row[f"{key}_pass"] = err, ok
            shown = "non-finite" if err is None else f"{err:.2e}"
            if not ok:
                self.fail(key, f"error {shown} > {self.tol:g}")
            ms = self.row[f"{key}_ms"] = median_ms(self.ctx, fn)
            eprint(f"  {key}: {ms:.4f} ms, error {shown}")
        except Exception as e:
            self.fail(key, short_error(e))
            traceback.print_exc(file=sys.stderr)
            free_memory(self.ctx.device)

    def fail(self, key: str, message: str) -> None:
        self.row["errors"][key] = message
        self.failures.append(f"{self.label} {key}: {message}")
        eprint(f"  FAILED {self.label} {key}: {message}")


def free_memory(device: str) -> None:
    """Returns cached blocks after a failure (an out-of-memory one above all)."""
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()


def largest_magnitude(val) -> float:
    """max |val|, or 1 when that is 0 or not finite (the divisor that scales
    a matrix to a largest magnitude of 1)."""
    m = float(val.double().abs().max()) if val.numel() else 0.0
    return m if m > 0.0 and math.isfinite(m) else 1.0


def csr_reference(pos, crd, val, b):
    """A·B in f64 from the same rounded inputs, one chunk of nonzeros at a
    time (bounded memory), without cuSPARSE, so it is independent of the
    baseline it checks."""
    import torch

    rows = pos.numel() - 1
    row_of = torch.repeat_interleave(torch.arange(rows, device=pos.device), pos.diff().long())
    crd, val, b = crd.long(), val.double(), b.double()
    want = torch.zeros(rows, b.shape[1], dtype=torch.float64, device=b.device)
    for start in range(0, crd.numel(), REFERENCE_CHUNK):
        part = slice(start, start + REFERENCE_CHUNK)
        want.index_add_(0, row_of[part], val[part, None] * b[crd[part]])
    return want


def bench_spmm(ctx: Context, name: str, source: str, precision: str, failures: list) -> dict:
    """One SpMM row: torch.sparse CSR and the GroupCOO indirect Einsum."""
    import torch

    dtype = {"f32": torch.float32, "f16": torch.float16}[precision]
    row: dict = {"matrix": name, "precision": precision, "errors": {}}
    label = f"{name} {precision}"
    rec = Recorder(ctx, row, label, TOLERANCE[precision], failures)
    try:
        csr_dir, csr_meta = convert(ctx, source, "csr", f"{name}-csr")
        gc_dir, gc_meta = convert(ctx, source, "groupcoo:dim=0,g=auto", f"{name}-gc")
        rows, cols = csr_meta["shape"]
        row.update(rows=rows, cols=cols, nnz=csr_meta.get("nnz"), g=g_of_format(gc_meta))
        csr = load_arrays(csr_dir, csr_meta, ctx.device)
        gc = load_arrays(gc_dir, gc_meta, ctx.device)
    except Exception as e:
        rec.fail("convert", short_error(e))
        return row

    b = dense_operand(cols, SPMM_N, dtype, ctx.device)
    # As in Spindle's suite: the matrix scaled to a largest magnitude of 1
    # (bcsstk13's values near 1e12 overflow f16).
    scale = largest_magnitude(csr["val"])
    val = (csr["val"].double() / scale).to(dtype)
    want = csr_reference(csr["pos"], csr["crd"], val, b)
    a = torch.sparse_csr_tensor(csr["pos"], csr["crd"], val, size=(rows, cols))
    rec.measure("torch_sparse_csr", lambda: a @ b, want)

    groupcoo, _ = insum_functions()
    args = (gc["grp"].long(), gc["crd"].long(), (gc["val"].double() / scale).to(dtype), b, rows)
    fn, row["insum_mode"], row["insum_fullgraph"], error = compile_or_eager(groupcoo, args, ctx.device)
    if error:
        row["errors"]["insum_compile"] = error
        eprint(f"  {label}: torch.compile failed, timing eager: {error}")
    rec.measure("insum_compiled", lambda: fn(*args), want)
    return row


def dense_from_blocks(grp, crd, val, rows: int, cols: int):
    """The dense matrix of BlockGroupCOO arrays: block (grp[p], crd[p, q]) holds
    val[p, q]. Padding entries repeat a coordinate with zero values, so
    accumulating leaves the real block unchanged."""
    import torch

    p, g, bm, bk = val.shape
    blocks = torch.zeros(rows // bm, cols // bk, bm, bk, dtype=val.dtype, device=val.device)
    blocks.index_put_((grp.long()[:, None].expand(p, g), crd.long()), val, accumulate=True)
    return blocks.permute(0, 2, 1, 3).reshape(rows, cols)


def bench_bsr(ctx: Context, sparsity: float, failures: list) -> dict:
    """One block-sparse row (f16): torch BSR, dense cuBLAS, BlockGroupCOO Insum."""
    import torch

    size, n = BSR_SIZE[ctx.device]
    row: dict = {"sparsity": sparsity, "rows": size, "cols": size, "n": n, "errors": {}}
    label = f"bsr sparsity={sparsity}"
    rec = Recorder(ctx, row, label, TOLERANCE["f16"], failures)
    fmt = f"blockgroupcoo:bm={BSR_BLOCK},bk={BSR_BLOCK},dim=0,g=auto"
    try:
        folder, meta = convert(ctx, blocks_input(sparsity, size), fmt, f"blocks-{size}-s{sparsity}")
        arrays = load_arrays(folder, meta, ctx.device)
        row.update(nnz=meta.get("nnz"), g=g_of_format(meta))
    except Exception as e:
        rec.fail("convert", short_error(e))
        return row

    val = arrays["val"].half()
    a64 = dense_from_blocks(arrays["grp"], arrays["crd"], val.double(), size, size)
    a = a64.half()  # exact: the values are f16 already and padding adds zeros
    b = dense_operand(size, n, torch.float16, ctx.device)
    want = a64 @ b.double()
    del a64

    try:
        a_bsr = a.to_sparse_bsr((BSR_BLOCK, BSR_BLOCK))
        row["blocks"] = a_bsr.values().shape[0]
        rec.measure("torch_bsr", lambda: a_bsr @ b, want)
    except Exception as e:
        rec.fail("torch_bsr", short_error(e))
    rec.measure("torch_dense", lambda: a @ b, want)

    _, blockgroupcoo = insum_functions()
    args = (arrays["grp"].long(), arrays["crd"].long(), val, b, size)
    fn, row["insum_mode"], row["insum_fullgraph"], error = compile_or_eager(blockgroupcoo, args, ctx.device)
    if error:
        row["errors"]["insum_compile"] = error
        eprint(f"  {label}: torch.compile failed, timing eager: {error}")
    rec.measure("insum_compiled", lambda: fn(*args), want)
    return row


def copy_bandwidth(ctx: Context) -> float:
    """Device copy bandwidth in GB/s, read + write counted."""
    import torch

    nbytes = COPY_BYTES[ctx.device]
    src = torch.empty(nbytes, dtype=torch.uint8, device=ctx.device).fill_(1)
    dst = torch.empty_like(src)
    ms = median_ms(ctx, lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def eprint(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def fmt(x, spec: str = ".4f") -> str:
    return "n/a" if x is None else format(x, spec)


def print_table(report: dict) -> None:
    """The short table at the end: times in ms, check errors in brackets."""
    print(f"PyTorch {report['torch']} on {report['device']}, copy {fmt(report['copy_gbs'], '.0f')} GB/s, "
          f"native_matmul={report['native_matmul']}")
    print(f"{'matrix':<24} {'type':<4} {'nnz':>9} {'g':>3} {'torch CSR ms':>13} {'Insum ms':>10} {'mode':<8}")
    for r in report["spmm"]:
        print(f"{r['matrix']:<24} {r['precision']:<4} {str(r.get('nnz', 'n/a')):>9} {str(r.get('g', 'n/a')):>3} "
              f"{fmt(r.get('torch_sparse_csr_ms')):>13} {fmt(r.get('insum_compiled_ms')):>10} "
              f"{r.get('insum_mode', 'n/a'):<8}")
    print(f"{'sparsity':>8} {'torch BSR ms':>13} {'dense ms':>10} {'Insum ms':>10} {'mode':<8}")
    for r in report["bsr"]:
        print(f"{r['sparsity']:>8} {fmt(r.get('torch_bsr_ms')):>13} {fmt(r.get('torch_dense_ms')):>10} "
              f"{fmt(r.get('insum_compiled_ms')):>10} {r.get('insum_mode', 'n/a'):<8}")
    print(f"{len(report['failures'])} failures")
    for f in report["failures"]:
        print(f"  FAILED {f}")


def save(report: dict, out: Path) -> None:
    """Writes the report (after every row, so a run cut short keeps its rows)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


def guarded(failures: list, fallback: dict, bench, *args) -> dict:
    """Runs one row; an unexpected exception becomes a failed row (`fallback`
    plus the error) instead of stopping the suite."""
    try:
        return bench(*args)
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        message = short_error(e)
        failures.append(f"{' '.join(str(v) for v in fallback.values())}: {message}")
        return {**fallback, "errors": {"row": message}}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_bench: --device cuda but torch sees no GPU", file=sys.stderr)
        return 2
    ctx = Context(args.spindle.resolve(), args.work, args.device, args.repeats)
    ctx.work.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "suite": "torch",
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "native_matmul": enable_native_matmul(),
        "n": SPMM_N,
        "repeats": args.repeats,
        "timing": f"{'CUDA events' if args.device == 'cuda' else 'perf_counter'}, "
                  f"median of {args.repeats} after {WARMUP} warm-ups",
        "insum_index_dtype": "int64",
        "reference": "f64 product of the same rounded inputs",
        "copy_gbs": None,
        "spmm": [],
        "bsr": [],
        "failures": [],
    }
    failures = report["failures"]
    try:
        report["copy_gbs"] = copy_bandwidth(ctx)
        eprint(f"device copy: {report['copy_gbs']:.0f} GB/s")
    except Exception as e:
        failures.append(f"copy bandwidth: {short_error(e)}")
        eprint(f"  FAILED copy bandwidth: {short_error(e)}")
    save(report, args.out)

    for name, source in matrix_inputs(args.data, args.quick, args.device):
        if args.only and name not in args.only:
            continue
        for precision in ("f32", "f16"):
            eprint(f"spmm {name} {precision}")
            fallback = {"matrix": name, "precision": precision}
            report["spmm"].append(guarded(failures, fallback, bench_spmm, ctx, name, source, precision, failures))
            free_memory(ctx.device)
            save(report, args.out)

    for sparsity in BSR_SPARSITIES:
        eprint(f"bsr sparsity {sparsity}")
        report["bsr"].append(guarded(failures, {"sparsity": sparsity}, bench_bsr, ctx, sparsity, failures))
        free_memory(ctx.device)
        save(report, args.out)

    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
