"""Compile cost of CUDA C++ candidates: the CUDA backend's build
(backends/cuda/) against plain ``torch.utils.cpp_extension.load_inline``.

    python benchmarks/bench_cuda_compile.py [--n 6] [--jobs 1] [--no-plain] [--json out.json]

It makes ``--n`` distinct tiny elementwise programs in KernelBench's format
and builds each through the backend into a fresh cache (cold), then again
(cache hit), printing seconds per source, the build mode (split: the
device code compiled without torch's headers; narrowed / full: one nvcc
unit) and whether the precompiled torch header was used. The precompiled
header is made first, once per machine, and its time reported apart.
``--jobs J`` builds J sources at a time (the evaluation pool compiles in
parallel workers). Then it times plain ``load_inline`` of one more distinct
source in the same run, for comparison. On a GPU each built extension is
also loaded and checked on a tensor.

Without a CUDA build of PyTorch (this needs the CUDA libraries to link) it
times what it can: nvcc on the device part of each source (``--arch``,
default 90), and says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CUDA_TEMPLATE = """
#include <torch/extension.h>

__global__ void scale_shift_{i}(const float* __restrict__ x, float* __restrict__ y, long n) {{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * {scale}f + {shift}f;
}}

torch::Tensor scale_shift(torch::Tensor x) {{
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    scale_shift_{i}<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
"""
CPP = "torch::Tensor scale_shift(torch::Tensor x);"


def source(i: int, salt: int) -> tuple[str, float, float]:
    scale, shift = 1.0 + 0.5 * i, float(salt % 997) + i
    return CUDA_TEMPLATE.format(i=i, scale=scale, shift=shift), scale, shift


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=6, help="distinct sources built through the backend")
    parser.add_argument("--jobs", type=int, default=1, help="sources built at a time")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain load_inline comparison")
    parser.add_argument("--arch", default=None, help="architecture without a GPU (default 90)")
    parser.add_argument("--cache", default=None, help="cache folder (default: a fresh temporary one)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if (
        importlib.util.find_spec("kernelsmith") is None
        or not (
            Path(importlib.util.find_spec("kernelsmith").origin).parent / "backends" / "cuda" / "__init__.py"
        ).exists()
    ):
        sys.path.insert(0, str(ROOT / "python"))  # the source tree (an installed copy may predate this backend)
    import torch

    from kernelsmith.backends import cuda as C

    salt = int(time.time())  # distinct from any earlier run's sources, whatever cache is reused
    root = Path(args.cache or tempfile.mkdtemp(prefix="ks-cuda-bench-"))
    gpu = torch.cuda.is_available()
    report: dict = {"gpu": gpu, "n": args.n, "jobs": args.jobs, "cores": os.cpu_count(), "torch": torch.__version__}
    if not gpu:
        return device_part_only(C, args, salt, root, report)

    tc = C.Toolchain.detect()
    report.update(arch=tc.arch, nvcc=tc.nvcc_version, cxx=tc.cxx_version)
    print(
        f"# {torch.cuda.get_device_name(0)}  sm_{tc.arch}  torch {torch.__version__}  {tc.nvcc_version}  "
        f"{tc.cxx_version}  {os.cpu_count()} cores  cache {root}"
    )
    pch_root = root / "pch"
    t0 = time.monotonic()
    header, spent = C.build_pch(tc, str(pch_root))
    report["pch_s"] = round(time.monotonic() - t0, 2)
    size = os.path.getsize(header + ".gch") / 2**20
    print(f"precompiled torch/extension.h: {report['pch_s']:.1f} s (once per machine and toolchain), {size:.0f} MiB")

    specs = []
    for i in range(args.n):
        text, scale, shift = source(i, salt)
        specs.append(
            (C.BuildSpec.from_load_inline(cpp_sources=CPP, cuda_sources=text, functions=["scale_shift"]), scale, shift)
        )

    def build(item):
        spec, scale, shift = item
        t = time.monotonic()
        r = C.compile_extension(spec, tc, str(root / "builds"), pch_roots=[str(pch_root)])
        return r, time.monotonic() - t, scale, shift

    rows = []
    t_all = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        cold = list(pool.map(build, specs))
    cold_wall = time.monotonic() - t_all
    x = torch.randn(4099, device="cuda")
    for r, secs, scale, shift in cold:
        ext = C._import_extension(r)
        ok = torch.allclose(ext.scale_shift(x), x * scale + shift)
        rows.append({"key": r.key[:12], "cold_s": round(secs, 2), "mode": r.mode, "pch": r.pch, "correct": bool(ok)})
    hits = []
    for item in specs:
        t = time.monotonic()
        r = C.compile_extension(item[0], tc, str(root / "builds"), pch_roots=[str(pch_root)])
        hits.append(time.monotonic() - t)
        assert r.cached == "local"
    for row, h in zip(rows, hits):
        row["hit_s"] = round(h, 4)
    print(f"{'source':<14} {'cold s':>8} {'hit s':>8}  mode      pch   correct")
    for row in rows:
        print(
            f"{row['key']:<14} {row['cold_s']:8.2f} {row['hit_s']:8.4f}  {row['mode']:<9} {str(row['pch']):<5} {row['correct']}"
        )
    colds = [r["cold_s"] for r in rows]
    report.update(
        rows=rows,
        cold_median_s=round(statistics.median(colds), 2),
        cold_wall_s=round(cold_wall, 2),
        per_source_s=round(cold_wall / len(rows), 2),
        hit_median_s=round(statistics.median(hits), 4),
    )
    print(
        f"backend build: median {report['cold_median_s']:.2f} s per distinct source (cold, {args.jobs} at a time; "
        f"{report['per_source_s']:.2f} s of wall per source), cache hit median {report['hit_median_s'] * 1e3:.1f} ms; "
        f"all correct: {all(r['correct'] for r in rows)}"
    )

    if not args.no_plain:
        from torch.utils.cpp_extension import load_inline

        text, scale, shift = source(args.n + 1, salt)
        build_dir = tempfile.mkdtemp(prefix="ks-plain-", dir=root)
        t = time.monotonic()
        ext = load_inline(
            name=f"ks_plain_{salt}",
            cpp_sources=CPP,
            cuda_sources=text,
            functions=["scale_shift"],
            build_directory=build_dir,
            verbose=False,
        )
        plain = time.monotonic() - t
        ok = torch.allclose(ext.scale_shift(x), x * scale + shift)
        report.update(plain_load_inline_s=round(plain, 2), plain_correct=bool(ok))
        print(
            f"plain torch load_inline (one distinct source, TORCH_CUDA_ARCH_LIST="
            f"{os.environ.get('TORCH_CUDA_ARCH_LIST', 'unset')}): {plain:.2f} s, correct: {ok}"
        )
        print(f"speed-up of the backend's cold build over plain load_inline: {plain / report['cold_median_s']:.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


def device_part_only(C, args, salt: int, root: Path, report: dict) -> int:
    """No CUDA device: time nvcc on the split device part (no torch headers)."""
    print(
        "# no CUDA device here: the full build (host bindings, link, load) needs a CUDA build of PyTorch; "
        "timing nvcc on the device part of each source only"
    )
    tc = C.Toolchain.detect(arch=args.arch or "90")
    root.mkdir(parents=True, exist_ok=True)
    times = []
    for i in range(args.n):
        text, _, _ = source(i, salt)
        device, _host = C.split_sources(text)
        cu = root / f"dev{i}.cu"
        cu.write_text(C._CU_PRELUDE + f'#line 1 "{C.CUDA_FILE}"\n' + device)
        t = time.monotonic()
        proc = subprocess.run(
            [
                tc.nvcc,
                "-c",
                f"-gencode=arch=compute_{tc.arch},code=sm_{tc.arch}",
                "-O3",
                str(cu),
                "-o",
                str(cu.with_suffix(".o")),
            ],
            capture_output=True,
            text=True,
        )
        times.append(time.monotonic() - t)
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr)
            return 1
    report.update(device_part_nvcc_s=[round(t, 2) for t in times], arch=tc.arch)
    print(f"nvcc, device part only (sm_{tc.arch}): median {statistics.median(times):.2f} s per source over {args.n}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
