"""Tests of gpu/summary.py and gpu/torch_bench.py (stdlib unittest, CPU only).

Run: python3 -m unittest discover -s gpu -p 'test_*.py' (or python3 gpu/test_scripts.py).
The smoke run of torch_bench.py needs torch and numpy here, plus the debug
spindle binary and ../shared/data; it is skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import io
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SPINDLE = REPO / "target" / "debug" / "spindle"
DATA = REPO.parent / "shared" / "data"

sys.path.insert(0, str(HERE))
import summary  # noqa: E402
import torch_bench  # noqa: E402


def write(folder: Path, name: str, data) -> None:
    (folder / name).write_text(json.dumps(data))


def run_script(script: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HERE / script), *args], capture_output=True, text=True, timeout=timeout
    )


SPMM_CUDA = {
    "suite": "spmm",
    "device": {"name": "NVIDIA H100 80GB HBM3"},
    "copy_gbs": 3000.0,
    "results": [
        {
            "matrix": "cora", "precision": "f32", "nnz": 10556, "g_auto": 4,
            "cusparse_csr": {"median_ms": 2.0, "max_rel_error": 1e-7, "gbs": 100.0, "fraction_of_copy": 0.03},
            "best": {"g": 8, "median_ms": 0.5, "speedup_vs_cusparse_csr": 4.0},
            "variants": [
                {"g": 4, "auto": True, "median_ms": 1.0, "max_rel_error": 1e-7, "pass": True,
                 "gbs": 1500.0, "fraction_of_copy": 0.5, "speedup_vs_cusparse_csr": 2.0},
                {"g": 8, "auto": False, "median_ms": 0.5, "max_rel_error": 1e-7, "pass": True,
                 "gbs": 3000.0, "fraction_of_copy": 1.0, "speedup_vs_cusparse_csr": 4.0},
                {"g": 16, "skipped": "too wide"},
            ],
        },
        {
            "matrix": "cora", "precision": "f16", "nnz": 10556, "g_auto": 4,
            "cusparse_csr": {"median_ms": 1.0, "max_rel_error": 0.5},
            "best": None,
            "variants": [{"g": 4, "error": "launch failed"}],
        },
    ],
    "failures": ["cora f16 g=4: launch failed"],
}

BSR_CUDA = {
    "suite": "bsr", "size": 4096, "block": 32, "n": 1024,
    "device": {"name": "NVIDIA H100 80GB HBM3"},
    "copy_gbs": 3000.0,
    "results": [
        {"sparsity": 0.9, "nnz": 1677722,
         "ours": {"median_ms": 0.1, "max_rel_error": 1e-4, "gbs": 900.0, "fraction_of_copy": 0.3, "tflops": 34.0},
         "cusparse_bsr": {"median_ms": None, "max_rel_error": None, "error": "not supported for f16"},
         "cublas_dense": {"median_ms": 0.3, "max_rel_error": 1e-4},
         "speedup_vs_cusparse_bsr": None, "speedup_vs_cublas": 3.0},
        {"sparsity": 0.99, "error": "autotuning failed"},
    ],
    "skewed": {"description": "4 dense block rows", "blocks": 2099, "schedule": "map=rows tile.n=128",
               "split_ms": 0.05, "whole_ms": 0.1, "cusparse_bsr": {"median_ms": 0.2}},
    "failures": ["sparsity 0.99: autotuning failed"],
}

TORCH = {
    "suite": "torch", "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "native_matmul": True,
    "copy_gbs": 2900.0,
    "spmm": [
        {"matrix": "cora", "precision": "f32", "nnz": 10556, "g": 4,
         "torch_sparse_csr_ms": 3.0, "torch_sparse_csr_err": 1e-7, "torch_sparse_csr_pass": True,
         "insum_compiled_ms": 4.0, "insum_compiled_err": 1e-7, "insum_compiled_pass": True,
         "insum_mode": "compiled", "errors": {}},
        {"matrix": "only-in-torch", "precision": "f16", "torch_sparse_csr_ms": 1.0,
         "torch_sparse_csr_pass": False, "insum_compiled_ms": 2.0, "insum_mode": "eager",
         "errors": {"insum_compile": "BackendCompilerFailed"}},
    ],
    "bsr": [
        {"sparsity": 0.9, "torch_bsr_ms": 0.2, "torch_bsr_pass": True, "torch_dense_ms": 0.3,
         "insum_compiled_ms": 0.5, "insum_compiled_pass": True, "insum_mode": "compiled", "errors": {}},
    ],
    "failures": ["only-in-torch f16 torch_sparse_csr: error 5e-2 > 0.01"],
}

CORPUS = {"runs": [
    {"entry": "spmv", "dtype": "f32", "schedule": "", "pass": True, "max_rel_error": 0.0},
    {"entry": "spmm", "dtype": "f16", "schedule": "tile.n=64", "pass": False, "max_rel_error": 0.5},
    {"entry": "conv", "dtype": "f32", "schedule": "", "pass": True, "max_rel_error": 1e-9},
], "failures": 1}

SANITIZER = [
    {"kernel": "spmm_groupcoo", "ok": True, "log_tail": "ERROR SUMMARY: 0 errors"},
    {"kernel": "bsr_dot", "ok": False, "log_tail": "Invalid __global__ read\nERROR SUMMARY: 3 errors\n"},
]


class SummaryTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def write_all(self):
        write(self.dir, "spmm-cuda-2026-01-01.json", {"results": [], "copy_gbs": 1.0})  # older, ignored
        write(self.dir, "spmm-cuda-2026-01-02.json", SPMM_CUDA)
        write(self.dir, "bsr-cuda-2026-01-02.json", BSR_CUDA)
        write(self.dir, "torch.json", TORCH)
        write(self.dir, "corpus.json", CORPUS)
        write(self.dir, "sanitizer.json", SANITIZER)

    def test_merged_json_and_table_hold_the_ratios(self):
        self.write_all()
        done = run_script("summary.py", str(self.dir))
        self.assertEqual(done.returncode, 0, done.stderr)
        today = datetime.date.today().isoformat()
        merged = json.loads((self.dir / f"nvidia-h100-80gb-hbm3-{today}.json").read_text())
        s = merged["summary"]

        cora32, cora16, torch_only = s["spmm"]
        self.assertEqual((cora32["matrix"], cora32["precision"]), ("cora", "f32"))
        self.assertAlmostEqual(cora32["cusparse_over_ours"], 2.0)
        self.assertAlmostEqual(cora32["cusparse_over_ours_best"], 4.0)
        self.assertAlmostEqual(cora32["torch_csr_over_ours"], 3.0)
        self.assertAlmostEqual(cora32["insum_over_ours"], 4.0)
        self.assertEqual(cora32["best_g"], 8)
        self.assertAlmostEqual(cora32["fraction_of_copy"], 0.5)
        self.assertEqual(cora32["failed_checks"], [])
        self.assertIsNone(cora16["ours_auto_ms"])
        self.assertIsNone(cora16["cusparse_over_ours"])
        self.assertEqual(cora16["failed_checks"], ["cuSPARSE"])
        self.assertEqual(cora16["errors"], {"ours g=4": "launch failed"})
        self.assertEqual(torch_only["matrix"], "only-in-torch")
        self.assertEqual(torch_only["failed_checks"], ["torch CSR"])

        b90, b99 = s["bsr"]
        self.assertAlmostEqual(b90["cublas_over_ours"], 3.0)
        self.assertAlmostEqual(b90["torch_bsr_over_ours"], 2.0)
        self.assertAlmostEqual(b90["insum_over_ours"], 5.0)
        self.assertIsNone(b90["cusparse_bsr_over_ours"])
        self.assertIn("cuSPARSE BSR", b90["errors"])
        self.assertIsNone(b99["ours_ms"])
        self.assertEqual(b99["errors"], {"ours": "autotuning failed"})

        self.assertAlmostEqual(s["geomean"]["spmm"]["cusparse_over_ours"]["value"], 2.0)
        self.assertEqual(s["geomean"]["spmm"]["cusparse_over_ours"]["n"], 1)
        self.assertAlmostEqual(s["geomean"]["bsr"]["cublas_over_ours"]["value"], 3.0)
        self.assertEqual(s["corpus"]["runs"], 3)
        self.assertEqual(s["corpus"]["failed"], 1)
        self.assertEqual(s["sanitizer"]["ok"], 1)
        self.assertEqual(s["sanitizer"]["failed"][0]["last_line"], "ERROR SUMMARY: 3 errors")
        self.assertEqual(merged["files"]["spmm_cuda"], "spmm-cuda-2026-01-02.json")
        self.assertEqual(merged["inputs"]["torch"], TORCH)

        out = done.stdout
        for text in ("2.00x", "4.00x", "3.00x", "5.00x", "corpus: 3 runs, 2 passed, 1 failed",
                     "sanitizer: 1 of 2 kernels clean", "FAILED bsr_dot: ERROR SUMMARY: 3 errors",
                     "FAILED spmm f16", "FAIL cuSPARSE; ERROR ours g=4", "ERROR ours\n", "2.0000e", "4096x4096", "50%", "3000 GB/s",
                     "skewed (4 dense block rows): split 0.0500 ms, whole rows 0.1000 ms (split 2.00x faster)"):
            self.assertIn(text, out)

    def test_missing_files_print_na(self):
        done = run_script("summary.py", str(self.dir), "--gpu-name", "Test GPU 1")
        self.assertEqual(done.returncode, 0, done.stderr)
        for text in ("corpus: n/a", "sanitizer: n/a", "Spindle n/a GB/s", "n/a  (n = 0)"):
            self.assertIn(text, done.stdout)
        today = datetime.date.today().isoformat()
        merged = json.loads((self.dir / f"test-gpu-1-{today}.json").read_text())
        self.assertEqual(merged["gpu"], "Test GPU 1")
        self.assertEqual(merged["summary"]["spmm"], [])

    def test_unreadable_and_partial_files_do_not_crash(self):
        (self.dir / "torch.json").write_text("{not json")
        write(self.dir, "corpus.json", {"runs": "oops"})
        write(self.dir, "sanitizer.json", {"not": "a list"})
        write(self.dir, "spmm-cuda-2026-01-02.json", {"results": [{"matrix": "x"}, 7, {"variants": [None]}]})
        write(self.dir, "bsr-cuda-2026-01-02.json", {"results": [{"sparsity": "half"}], "device": "weird"})
        done = run_script("summary.py", str(self.dir))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("unreadable torch.json", done.stdout)
        self.assertIn("corpus: n/a", done.stdout)
        self.assertIn("sanitizer: n/a", done.stdout)
        self.assertIn("x", done.stdout)

    def test_not_a_folder_is_a_usage_error(self):
        done = run_script("summary.py", str(self.dir / "missing"))
        self.assertEqual(done.returncode, 2)

    def test_helpers(self):
        self.assertEqual(summary.slug("NVIDIA H200 (SXM)"), "nvidia-h200-sxm")
        self.assertIsNone(summary.ratio(1.0, 0.0))
        self.assertIsNone(summary.ratio(None, 1.0))
        self.assertIsNone(summary.num(True))
        self.assertIsNone(summary.num(float("nan")))
        self.assertAlmostEqual(summary.geomean([2.0, 8.0, None])["value"], 4.0)
        self.assertEqual(summary.dig({"a": [1, {"b": 2}]}, "a", 1, "b"), 2)
        self.assertIsNone(summary.dig({"a": [1]}, "a", 3))


class TorchBenchHelpersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def args(self, *extra: str) -> list[str]:
        return ["--spindle", sys.executable, "--data", str(self.dir), "--work", str(self.dir / "w"),
                "--out", str(self.dir / "o.json"), *extra]

    def test_importing_needs_only_the_standard_library(self):
        code = "import sys, torch_bench; print('numpy' in sys.modules, 'torch' in sys.modules)"
        done = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True)
        self.assertEqual(done.stdout.split(), ["False", "False"], done.stderr)

    def test_parse_args(self):
        a = torch_bench.parse_args(self.args())
        self.assertEqual((a.device, a.repeats, a.quick, a.only), ("cuda", 20, False, []))
        a = torch_bench.parse_args(self.args("--device", "cpu", "--repeats", "3", "--only", "cora"))
        self.assertEqual((a.device, a.repeats, a.quick, a.only), ("cpu", 3, True, ["cora"]))

    def test_usage_errors_exit_2(self):
        bad = [
            [],
            self.args("--device", "tpu"),
            self.args("--repeats", "0"),
            ["--spindle", str(self.dir / "nope"), "--data", "d", "--work", "w", "--out", "o"],
        ]
        for argv in bad:
            with self.subTest(argv=argv), self.assertRaises(SystemExit) as cm:
                with contextlib.redirect_stderr(io.StringIO()):
                    torch_bench.parse_args(argv)
            self.assertEqual(cm.exception.code, 2)
        self.assertEqual(run_script("torch_bench.py").returncode, 2)

    def test_relative_error(self):
        self.assertAlmostEqual(torch_bench.relative_error(0.5, 2.0), 0.25)
        self.assertEqual(torch_bench.relative_error(0.5, 0.0), 0.5)
        self.assertIsNone(torch_bench.finite_or_none(float("nan")))
        self.assertIsNone(torch_bench.finite_or_none(torch_bench.relative_error(float("inf"), 1.0)))
        self.assertEqual(torch_bench.finite_or_none(1e-3), 1e-3)

    def test_matrix_inputs(self):
        (self.dir / "matrices").mkdir()
        for name in ("b.mtx", "a.mtx", "notes.txt"):
            (self.dir / "matrices" / name).write_text("")
        names = lambda quick, device: [n for n, _ in torch_bench.matrix_inputs(self.dir, quick, device)]
        self.assertEqual(names(False, "cuda"), ["a", "b", "powerlaw-1M", "powerlaw-8M"])
        self.assertEqual(names(True, "cuda"), ["a", "b", "powerlaw-1M"])
        self.assertEqual(names(True, "cpu"), ["a", "b"])
        gens = dict(torch_bench.GENERATED)
        self.assertEqual(gens["powerlaw-1M"], "gen:powerlaw:rows=100000,cols=100000,nnz=1000000,seed=1")
        self.assertEqual(gens["powerlaw-8M"], "gen:powerlaw:rows=1000000,cols=1000000,nnz=8000000,seed=2")

    def test_blocks_input_and_g_of_format(self):
        self.assertEqual(torch_bench.blocks_input(0.95, 4096),
                         "gen:blocks:rows=4096,cols=4096,bm=32,bk=32,density=0.05,seed=5")
        self.assertIn("density=0.3,", torch_bench.blocks_input(0.7, 512))
        self.assertEqual(torch_bench.g_of_format({"format": "groupcoo:dim=0,g=4"}), 4)
        self.assertEqual(torch_bench.g_of_format({"format": "blockgroupcoo:bm=32,bk=32,dim=0,g=16"}), 16)
        self.assertIsNone(torch_bench.g_of_format({"format": "csr"}))
        self.assertIsNone(torch_bench.g_of_format({}))

    @unittest.skipUnless(SPINDLE.is_file() and (DATA / "matrices" / "karate.mtx").is_file(),
                         "SKIPPED: needs target/debug/spindle and ../shared/data")
    def test_convert_calls_spindle_and_reuses_folders(self):
        ctx = torch_bench.Context(SPINDLE, self.dir, "cpu", 1)
        folder, meta = torch_bench.convert(ctx, str(DATA / "matrices" / "karate.mtx"),
                                           "groupcoo:dim=0,g=auto", "karate-gc")
        self.assertEqual(meta["shape"], [34, 34])
        self.assertIsNotNone(torch_bench.g_of_format(meta))
        self.assertTrue((folder / "crd.npy").is_file())
        # A complete folder is reused: a missing binary is not even called.
        ctx.spindle = self.dir / "no-such-binary"
        self.assertEqual(torch_bench.convert(ctx, "ignored", "csr", "karate-gc")[1], meta)
        with self.assertRaises(Exception):
            torch_bench.convert(torch_bench.Context(SPINDLE, self.dir, "cpu", 1), "gen:nonsense", "csr", "bad")


def missing_for_smoke() -> str | None:
    """Why the smoke run cannot happen here, or None."""
    for module in ("torch", "numpy"):
        if importlib.util.find_spec(module) is None:
            return f"SKIPPED: {module} is not installed"
    if not SPINDLE.is_file():
        return f"SKIPPED: {SPINDLE} is missing (cargo build)"
    if not (DATA / "matrices").is_dir():
        return f"SKIPPED: {DATA} is missing"
    return None


@unittest.skipIf(missing_for_smoke(), missing_for_smoke() or "")
class TorchBenchSmokeTest(unittest.TestCase):
    def test_cpu_quick_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "torch.json"
            done = run_script(
                "torch_bench.py", "--spindle", str(SPINDLE), "--data", str(DATA), "--work", str(Path(tmp) / "w"),
                "--out", str(out), "--device", "cpu", "--repeats", "2", "--only", "karate", timeout=1200,
            )
            self.assertEqual(done.returncode, 0, done.stderr[-4000:])
            report = json.loads(out.read_text())
            self.assertEqual(report["suite"], "torch")
            self.assertEqual([(r["matrix"], r["precision"]) for r in report["spmm"]],
                             [("karate", "f32"), ("karate", "f16")])
            f32 = report["spmm"][0]
            self.assertTrue(f32["torch_sparse_csr_pass"], f32)
            self.assertTrue(f32["insum_compiled_pass"], f32)
            self.assertIn(f32["insum_mode"], ("compiled", "eager"))
            self.assertEqual([r["sparsity"] for r in report["bsr"]], torch_bench.BSR_SPARSITIES)
            for row in report["bsr"]:
                self.assertTrue(row["torch_dense_pass"], row)
                self.assertTrue(row["insum_compiled_pass"], row)
            self.assertIn("torch CSR ms", done.stdout)
            merged = run_script("summary.py", tmp, "--gpu-name", "cpu-smoke")
            self.assertEqual(merged.returncode, 0, merged.stderr)


if __name__ == "__main__":
    unittest.main()
