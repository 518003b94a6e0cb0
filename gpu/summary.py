#!/usr/bin/env python3
"""Summary of one GPU check run.

Usage: python3 summary.py OUT_DIR [--gpu-name NAME]

Reads whichever of these OUT_DIR holds: corpus.json (spindle-corpus --json),
sanitizer.json (list of {"kernel", "ok", "log_tail"}), spmm-cuda-*.json and
bsr-cuda-*.json (Spindle's GPU benchmarks; the newest by name when several) and
torch.json (torch_bench.py). Writes OUT_DIR/<gpu-slug>-<YYYY-MM-DD>.json with
every input and the summary rows, and prints the summary: corpus and sanitizer
results, SpMM and BSR tables with Spindle beside cuSPARSE, cuBLAS and PyTorch,
and geometric-mean speedups. Ratios are baseline time / ours (> 1: Spindle is
faster); "ours" in the SpMM ratios is GroupCOO at g = auto, the configuration a
user gets without a sweep. Anything missing prints "n/a"; nothing here raises
on a missing file or field. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from pathlib import Path

TOLERANCE = {"f32": 1e-3, "f16": 1e-2}
NA = "n/a"


def dig(obj, *keys):
    """obj[k0][k1]..., or None when any step is missing or of the wrong type."""
    for key in keys:
        if isinstance(obj, dict) and isinstance(key, str):
            obj = obj.get(key)
        elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


def num(x) -> float | None:
    """A finite number as float, else None (bools are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def ratio(baseline_ms, ours_ms) -> float | None:
    """baseline / ours, when both are positive numbers."""
    b, o = num(baseline_ms), num(ours_ms)
    return b / o if b is not None and o is not None and b > 0 and o > 0 else None


def geomean(values) -> dict:
    """Geometric mean of the available (positive) values, with their count."""
    vals = [v for v in values if v is not None and v > 0]
    value = math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
    return {"value": value, "n": len(vals)}


def slug(name: str) -> str:
    """File-name form of a device name: "NVIDIA H100 80GB HBM3" → "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def load(path: Path) -> tuple[object, str | None]:
    """(parsed JSON, None), or (None, why) when unreadable."""
    try:
        return json.loads(path.read_text()), None
    except (OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"


def newest(out_dir: Path, pattern: str) -> Path | None:
    """The last file matching `pattern` by name (names end in a date)."""
    found = sorted(out_dir.glob(pattern))
    return found[-1] if found else None


def device_name(report) -> str | None:
    """Spindle's reports hold {"device": {"name"}}, torch.json a string."""
    device = dig(report, "device")
    name = dig(device, "name") if isinstance(device, dict) else device
    return name if isinstance(name, str) and name and name != "cpu" else None


def corpus_summary(corpus) -> dict | None:
    """Run, pass and fail counts of spindle-corpus, with the failing runs."""
    runs = dig(corpus, "runs")
    if not isinstance(runs, list):
        return None
    failing = [r for r in runs if isinstance(r, dict) and r.get("pass") is not True]
    return {
        "runs": len(runs),
        "passed": len(runs) - len(failing),
        "failed": len(failing),
        "reported_failures": dig(corpus, "failures"),
        "failing": [
            f"{r.get('entry', '?')} {r.get('dtype', '?')} [{r.get('schedule', '')}]: "
            f"{r.get('error') or 'error ' + fmt(num(r.get('max_rel_error')), '.2e')}"
            for r in failing
        ],
    }


def sanitizer_summary(results) -> dict | None:
    """Kernels that passed compute-sanitizer, and the failing ones' last log line."""
    if not isinstance(results, list):
        return None
    failed = [r for r in results if not (isinstance(r, dict) and r.get("ok") is True)]
    return {
        "kernels": len(results),
        "ok": len(results) - len(failed),
        "failed": [
            {
                "kernel": dig(r, "kernel") or "?",
                "last_line": (str(dig(r, "log_tail") or "").strip().splitlines() or [""])[-1],
            }
            for r in failed
        ],
    }


def within(err, precision) -> bool | None:
    """Whether a baseline's error meets the tolerance of its precision."""
    e, tol = num(err), TOLERANCE.get(precision)
    return None if e is None or tol is None else e <= tol


def failed_checks(checks: dict) -> list[str]:
    """Names of the methods whose check is known to have failed."""
    return [name for name, ok in checks.items() if ok is False]


def spmm_rows(spindle, torch_report) -> list[dict]:
    """One row per (matrix, precision): Spindle's rows in their order, then
    matrices only torch.json has."""
    torch_rows = {
        (r.get("matrix"), r.get("precision")): r
        for r in dig(torch_report, "spmm") or []
        if isinstance(r, dict)
    }
    ours_rows = [r for r in dig(spindle, "results") or [] if isinstance(r, dict)]
    keys = [(r.get("matrix"), r.get("precision")) for r in ours_rows]
    keys += [k for k in torch_rows if k not in keys]
    by_key = {(r.get("matrix"), r.get("precision")): r for r in ours_rows}
    rows = []
    for key in keys:
        ours, tr = by_key.get(key, {}), torch_rows.get(key, {})
        variants = [v for v in ours.get("variants") or [] if isinstance(v, dict)]
        auto = next((v for v in variants if v.get("auto") is True), {})
        precision = key[1]
        row = {
            "matrix": key[0],
            "precision": precision,
            "nnz": ours.get("nnz", tr.get("nnz")),
            "g_auto": ours.get("g_auto", tr.get("g")),
            "best_g": dig(ours, "best", "g"),
            "ours_best_ms": num(dig(ours, "best", "median_ms")),
            "ours_auto_ms": num(auto.get("median_ms")),
            "cusparse_csr_ms": num(dig(ours, "cusparse_csr", "median_ms")),
            "torch_csr_ms": num(tr.get("torch_sparse_csr_ms")),
            "insum_ms": num(tr.get("insum_compiled_ms")),
            "insum_mode": tr.get("insum_mode"),
            "gbs": num(auto.get("gbs")),
            "fraction_of_copy": num(auto.get("fraction_of_copy")),
            # The roofline model's bound over the time (bench/src/roofline.rs).
            "fraction_of_bound": num(auto.get("fraction_of_bound")),
            "cusparse_fraction_of_bound": num(dig(ours, "cusparse_csr", "fraction_of_bound")),
        }
        row["cusparse_over_ours"] = ratio(row["cusparse_csr_ms"], row["ours_auto_ms"])
        row["cusparse_over_ours_best"] = ratio(row["cusparse_csr_ms"], row["ours_best_ms"])
        row["torch_csr_over_ours"] = ratio(row["torch_csr_ms"], row["ours_auto_ms"])
        row["insum_over_ours"] = ratio(row["insum_ms"], row["ours_auto_ms"])
        row["failed_checks"] = failed_checks({
            "ours": auto.get("pass") if auto else None,
            "cuSPARSE": within(dig(ours, "cusparse_csr", "max_rel_error"), precision),
            "torch CSR": tr.get("torch_sparse_csr_pass"),
            "torch.compile": tr.get("insum_compiled_pass"),
        })
        row["errors"] = {
            **{f"ours g={v.get('g')}": v["error"] for v in variants if v.get("error")},
            **{f"torch {k}": m for k, m in (tr.get("errors") or {}).items()},
        }
        rows.append(row)
    return rows


def sparsity_key(x) -> float | None:
    """Sparsities compared after rounding (0.95 from Rust and Python agree)."""
    v = num(x)
    return None if v is None else round(v, 6)


def bsr_rows(spindle, torch_report) -> list[dict]:
    """One row per sparsity, Spindle's order first."""
    torch_rows = {
        sparsity_key(r.get("sparsity")): r for r in dig(torch_report, "bsr") or [] if isinstance(r, dict)
    }
    ours_rows = [r for r in dig(spindle, "results") or [] if isinstance(r, dict)]
    by_key = {sparsity_key(r.get("sparsity")): r for r in ours_rows}
    keys = list(by_key) + [k for k in torch_rows if k not in by_key]
    rows = []
    for key in keys:
        ours, tr = by_key.get(key, {}), torch_rows.get(key, {})
        row = {
            "sparsity": key,
            "nnz": ours.get("nnz", tr.get("nnz")),
            "ours_ms": num(dig(ours, "ours", "median_ms")),
            "tflops": num(dig(ours, "ours", "tflops")),
            "gbs": num(dig(ours, "ours", "gbs")),
            "fraction_of_copy": num(dig(ours, "ours", "fraction_of_copy")),
            "fraction_of_bound": num(ours.get("fraction_of_bound")),
            "cusparse_bsr_ms": num(dig(ours, "cusparse_bsr", "median_ms")),
            "cublas_ms": num(dig(ours, "cublas_dense", "median_ms")),
            "torch_bsr_ms": num(tr.get("torch_bsr_ms")),
            "torch_dense_ms": num(tr.get("torch_dense_ms")),
            "insum_ms": num(tr.get("insum_compiled_ms")),
            "insum_mode": tr.get("insum_mode"),
        }
        for base in ("cusparse_bsr", "cublas", "torch_bsr", "insum"):
            row[f"{base}_over_ours"] = ratio(row[f"{base}_ms"], row["ours_ms"])
        row["failed_checks"] = failed_checks({
            "ours": within(dig(ours, "ours", "max_rel_error"), "f16"),
            "cuSPARSE BSR": within(dig(ours, "cusparse_bsr", "max_rel_error"), "f16"),
            "cuBLAS": within(dig(ours, "cublas_dense", "max_rel_error"), "f16"),
            "torch BSR": tr.get("torch_bsr_pass"),
            "torch.compile": tr.get("insum_compiled_pass"),
        })
        row["errors"] = {
            k: v for k, v in {
                "ours": ours.get("error"),
                "cuSPARSE BSR": dig(ours, "cusparse_bsr", "error"),
                **{f"torch {k}": m for k, m in (tr.get("errors") or {}).items()},
            }.items() if v
        }
        rows.append(row)
    return rows


def geomeans(spmm: list[dict], bsr: list[dict]) -> dict:
    """Geometric-mean speedups of Spindle over each baseline."""
    spmm_keys = ["cusparse_over_ours", "cusparse_over_ours_best", "torch_csr_over_ours", "insum_over_ours"]
    bsr_keys = ["cusparse_bsr_over_ours", "cublas_over_ours", "torch_bsr_over_ours", "insum_over_ours"]
    return {
        "spmm": {k: geomean(r[k] for r in spmm) for k in spmm_keys},
        "bsr": {k: geomean(r[k] for r in bsr) for k in bsr_keys},
    }


def build(out_dir: Path, gpu_name: str | None) -> dict:
    """Reads the inputs present in out_dir and returns the merged report."""
    files = {
        "corpus": out_dir / "corpus.json",
        "sanitizer": out_dir / "sanitizer.json",
        "spmm_cuda": newest(out_dir, "spmm-cuda-*.json"),
        "bsr_cuda": newest(out_dir, "bsr-cuda-*.json"),
        "torch": out_dir / "torch.json",
    }
    inputs, unreadable, names = {}, {}, {}
    for key, path in files.items():
        if path is None or not path.is_file():
            inputs[key] = None
            continue
        names[key] = path.name
        inputs[key], why = load(path)
        if why:
            unreadable[path.name] = why
    name = gpu_name or next(
        (n for n in map(device_name, (inputs["spmm_cuda"], inputs["bsr_cuda"], inputs["torch"])) if n), "gpu"
    )
    spmm = spmm_rows(inputs["spmm_cuda"], inputs["torch"])
    bsr = bsr_rows(inputs["bsr_cuda"], inputs["torch"])
    return {
        "gpu": name,
        "date": datetime.date.today().isoformat(),
        "files": names,
        "unreadable": unreadable,
        "inputs": inputs,
        "summary": {
            "copy_gbs": {
                "spindle_spmm": num(dig(inputs["spmm_cuda"], "copy_gbs")),
                "spindle_bsr": num(dig(inputs["bsr_cuda"], "copy_gbs")),
                "torch": num(dig(inputs["torch"], "copy_gbs")),
            },
            "torch_native_matmul": dig(inputs["torch"], "native_matmul"),
            "corpus": corpus_summary(inputs["corpus"]),
            "sanitizer": sanitizer_summary(inputs["sanitizer"]),
            "spmm": spmm,
            "bsr": bsr,
            "geomean": geomeans(spmm, bsr),
            "failures": {
                key: dig(inputs[key], "failures")
                for key in ("spmm_cuda", "bsr_cuda", "torch")
                if isinstance(dig(inputs[key], "failures"), list)
            },
        },
    }


def fmt(x, spec: str) -> str:
    return NA if x is None else format(x, spec)


def ms(x) -> str:
    return fmt(x, ".4f")


def times(x) -> str:
    return NA if x is None else f"{x:.2f}x"


def percent(x) -> str:
    return NA if x is None else f"{100 * x:.0f}%"


def checks(row: dict) -> str:
    """Failed checks and methods that errored, or "ok"."""
    parts = []
    if row["failed_checks"]:
        parts.append("FAIL " + ",".join(row["failed_checks"]))
    if row["errors"]:
        parts.append("ERROR " + ",".join(row["errors"]))
    return "; ".join(parts) or "ok"


def render(merged: dict) -> str:
    """The printed summary."""
    s = merged["summary"]
    out = [f"GPU check summary: {merged['gpu']}, {merged['date']}"]
    for name, why in merged["unreadable"].items():
        out.append(f"unreadable {name}: {why}")
    copy = s["copy_gbs"]
    out.append(
        f"device copy (read + write): Spindle {fmt(copy['spindle_spmm'], '.0f')} GB/s, "
        f"torch {fmt(copy['torch'], '.0f')} GB/s; torch.compile native_matmul: "
        f"{NA if s['torch_native_matmul'] is None else s['torch_native_matmul']}"
    )

    corpus = s["corpus"]
    if corpus is None:
        out.append(f"corpus: {NA}")
    else:
        out.append(f"corpus: {corpus['runs']} runs, {corpus['passed']} passed, {corpus['failed']} failed")
        out += [f"  FAILED {line}" for line in corpus["failing"][:20]]
        if len(corpus["failing"]) > 20:
            out.append(f"  ... and {len(corpus['failing']) - 20} more")

    san = s["sanitizer"]
    if san is None:
        out.append(f"sanitizer: {NA}")
    else:
        out.append(f"sanitizer: {san['ok']} of {san['kernels']} kernels clean")
        out += [f"  FAILED {f['kernel']}: {f['last_line']}" for f in san["failed"]]

    out.append("")
    out.append("SpMM (N = 128), ms; ratios baseline / ours at g = auto (> 1: Spindle faster)")
    head = (f"{'matrix':<22} {'type':<4} {'nnz':>9} {'g':>3} {'best g':>6} {'ours best':>10} {'ours auto':>10} "
            f"{'cuSPARSE':>10} {'torch CSR':>10} {'torch.comp':>10} {'cuSP/ours':>9} {'tc/ours':>8} "
            f"{'GB/s':>6} {'%copy':>6} {'%bound':>6} {'cuSP%b':>6}  checks")
    out.append(head)
    if not s["spmm"]:
        out.append(f"  {NA}")
    for r in s["spmm"]:
        insum = ms(r["insum_ms"]) + ("e" if r["insum_mode"] == "eager" else "")
        out.append(
            f"{str(r['matrix']):<22.22} {str(r['precision']):<4} {str(r['nnz'] if r['nnz'] is not None else NA):>9} "
            f"{str(r['g_auto'] if r['g_auto'] is not None else NA):>3} "
            f"{str(r['best_g'] if r['best_g'] is not None else NA):>6} "
            f"{ms(r['ours_best_ms']):>10} {ms(r['ours_auto_ms']):>10} {ms(r['cusparse_csr_ms']):>10} "
            f"{ms(r['torch_csr_ms']):>10} {insum:>10} {times(r['cusparse_over_ours']):>9} "
            f"{times(r['insum_over_ours']):>8} {fmt(r['gbs'], '.0f'):>6} {percent(r['fraction_of_copy']):>6} "
            f"{percent(r.get('fraction_of_bound')):>6} {percent(r.get('cusparse_fraction_of_bound')):>6}  "
            f"{checks(r)}"
        )

    out.append("")
    bsr_report = merged["inputs"]["bsr_cuda"]
    size, block, n = (dig(bsr_report, k) for k in ("size", "block", "n"))
    shape = f"{size}x{size}, {block}x{block} blocks, N = {n}" if size and block and n else f"sizes {NA}"
    out.append(f"Block-sparse SpMM ({shape}), f16, ms; ratios baseline / ours")
    out.append(
        f"{'sparsity':>8} {'ours':>9} {'cuSP BSR':>9} {'cuBLAS':>9} {'torch BSR':>9} {'torch.comp':>10} "
        f"{'cuSP/ours':>9} {'cuBLAS/ours':>11} {'tBSR/ours':>9} {'tc/ours':>8} {'TFLOP/s':>7} {'%bound':>6}  checks"
    )
    if not s["bsr"]:
        out.append(f"  {NA}")
    for r in s["bsr"]:
        insum = ms(r["insum_ms"]) + ("e" if r["insum_mode"] == "eager" else "")
        out.append(
            f"{percent(r['sparsity']):>8} {ms(r['ours_ms']):>9} {ms(r['cusparse_bsr_ms']):>9} {ms(r['cublas_ms']):>9} "
            f"{ms(r['torch_bsr_ms']):>9} {insum:>10} {times(r['cusparse_bsr_over_ours']):>9} "
            f"{times(r['cublas_over_ours']):>11} {times(r['torch_bsr_over_ours']):>9} "
            f"{times(r['insum_over_ours']):>8} {fmt(r['tflops'], '.1f'):>7} {percent(r.get('fraction_of_bound')):>6}  "
            f"{checks(r)}"
        )
    out.append("(a torch.compile time ending in 'e' is eager: compilation failed)")
    skewed = dig(bsr_report, "skewed")
    if isinstance(skewed, dict):
        split, whole = num(skewed.get("split_ms")), num(skewed.get("whole_ms"))
        cusparse = num(dig(skewed, "cusparse_bsr", "median_ms"))
        gain = times(whole / split) if split and whole else NA
        out.append(
            f"skewed ({skewed.get('description', NA)}): split {ms(split)} ms, whole rows {ms(whole)} ms "
            f"(split {gain} faster), cuSPARSE BSR {ms(cusparse)} ms"
            + (f"; error: {skewed['error']}" if skewed.get("error") else "")
        )

    out.append("")
    out.append("Geometric-mean speedup of Spindle (baseline / ours):")
    labels = {
        "spmm": {
            "cusparse_over_ours": "SpMM vs cuSPARSE CSR (g = auto)",
            "cusparse_over_ours_best": "SpMM vs cuSPARSE CSR (best g)",
            "torch_csr_over_ours": "SpMM vs torch.sparse CSR",
            "insum_over_ours": "SpMM vs torch.compile Insum",
        },
        "bsr": {
            "cusparse_bsr_over_ours": "BSR vs cuSPARSE BSR",
            "cublas_over_ours": "BSR vs cuBLAS dense",
            "torch_bsr_over_ours": "BSR vs torch BSR",
            "insum_over_ours": "BSR vs torch.compile Insum",
        },
    }
    for suite, names in labels.items():
        for key, label in names.items():
            g = s["geomean"][suite][key]
            out.append(f"  {label:<34} {times(g['value']):>8}  (n = {g['n']})")

    for key, failures in s["failures"].items():
        out.append(f"{merged['files'].get(key, key)}: {len(failures)} failures")
        out += [f"  {f}" for f in failures[:20]]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Summarize a GPU check run's reports.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--gpu-name", help="device name for the file name (default: from the reports)")
    args = parser.parse_args(argv)
    if not args.out_dir.is_dir():
        parser.error(f"{args.out_dir}: not a folder")
    merged = build(args.out_dir, args.gpu_name)
    path = args.out_dir / f"{slug(merged['gpu'])}-{merged['date']}.json"
    path.write_text(json.dumps(merged, indent=2) + "\n")
    print(render(merged))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
