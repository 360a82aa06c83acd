"""Where one autotuned key's time goes, and which way of compiling its
configs side by side uses the machine best (issue 27: fla's ``task init``).

In one process with torch, Triton and a CUDA context (as a project's test
process is), fla-core's ``l2norm_fwd_kernel`` (25 configs a key) is
compiled for a new feature size D per mode, each in a fresh Triton cache:

* ``sequential``: one config after the other in this process;
* ``fork1``: one forked child per config, P at once (what
  ``triton/autotune.py: precompile`` does today);
* ``forkP``: P forked children, each compiling every P-th config;
* ``threads``: P threads of this process.

Then, for the last D: Triton's benchmark of the 25 configs
(``triton.testing.do_bench`` with its defaults, as the autotuner calls it). Also the
machine's CPUs (logical and physical) and a cold ``triton_key()``.

    python3 benchmarks/prof_autotune_parallel.py --wheel .whl/fla_core-0.6.0-py3-none-any.whl \\
        --wheel .whl/einops-0.8.2-py3-none-any.whl [--procs 16]

A GPU only (compiles for the device's target).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
import zipfile


def unpack(wheels: list[str]) -> str:
    tree = tempfile.mkdtemp(prefix="prof-autotune-")
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tree)
    return tree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", action="append", default=[])
    ap.add_argument("--procs", type=int, default=min(16, len(os.sched_getaffinity(0))))
    ap.add_argument("--modes", default="sequential,fork1,forkP,threads")
    args = ap.parse_args()
    sys.path.insert(0, unpack(args.wheel))
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in lscpu.splitlines():
        if line.split(":")[0].strip() in (
            "CPU(s)",
            "Thread(s) per core",
            "Core(s) per socket",
            "Socket(s)",
            "Model name",
        ):
            print("lscpu", line.strip(), flush=True)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tc-warm-")
    t = time.monotonic()
    import torch
    import triton

    print(
        f"import torch, triton: {time.monotonic() - t:.2f} s; triton {triton.__version__}, torch {torch.__version__}",
        flush=True,
    )
    t = time.monotonic()
    import importlib

    key_fn = None
    for where in ("triton.runtime.cache", "triton.compiler.compiler", "triton._utils", "triton.runtime.jit"):
        key_fn = getattr(importlib.import_module(where), "triton_key", None)
        if key_fn is not None:
            break
    if key_fn is not None:
        key_fn()
    print(f"triton_key() cold: {time.monotonic() - t:.2f} s ({key_fn is not None})", flush=True)
    from fla.modules.norm.l2norm import l2norm_fwd_kernel

    torch.empty(1, device="cuda")
    configs = list(l2norm_fwd_kernel.configs)
    jit = l2norm_fwd_kernel
    while not hasattr(jit, "device_caches"):
        jit = jit.fn
    from triton.runtime import driver

    active = driver.active
    device = active.get_current_device()
    jit.device_caches[device]
    print(f"configs per key: {len(configs)}; P = {args.procs}", flush=True)

    def inputs(D: int, dtype=torch.float32):
        T = 64
        x = torch.randn(T, D, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        rstd = torch.empty(T, device="cuda", dtype=torch.float32)
        BD = triton.next_power_of_2(D)
        return dict(x=x, y=y, rstd=rstd, eps=1e-6, T=T, D=D, BD=BD, NB=1)

    def compile_one(kw: dict, config) -> None:
        jit.run(**kw, **config.all_kwargs(), grid=(1,), warmup=True)

    def fork_children(kw: dict, groups: list[list]) -> int:
        pids = []
        for group in groups:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    active.get_current_device = lambda: device
                    active.get_current_stream = lambda *a, **k: 0
                    for config in group:
                        compile_one(kw, config)
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        ok = 0
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            ok += int(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
        return ok

    P = args.procs
    D = 40
    results = {}
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        D += 8
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"tc-{mode}-")
        kw = inputs(D)
        started = time.monotonic()
        note = ""
        if mode == "sequential":
            for config in configs:
                compile_one(kw, config)
        elif mode == "fork1":
            done = 0
            for i in range(0, len(configs), P):  # P at once, as precompile keeps P running
                done += fork_children(kw, [[c] for c in configs[i : i + P]])
            note = f"children ok {done}/{len(configs)}"
        elif mode == "forkP":
            done = fork_children(kw, [configs[i::P] for i in range(P)])
            note = f"children ok {done}/{P}"
        elif mode == "threads":
            errors = []
            with concurrent.futures.ThreadPoolExecutor(P) as pool:
                for f in [pool.submit(compile_one, kw, c) for c in configs]:
                    if f.exception() is not None:
                        errors.append(repr(f.exception())[:120])
            note = f"errors {len(errors)} {errors[:1]}"
        wall = time.monotonic() - started
        results[mode] = wall
        print(
            f"{mode:10s} D={D:4d}: {len(configs)} configs compiled in {wall:6.2f} s "
            f"({wall / len(configs):.3f} s per config) {note}",
            flush=True,
        )
    # the last D: Triton's benchmark of its configs, now compiled
    kw = inputs(D)
    from triton.testing import do_bench

    t = time.monotonic()
    for config in configs:
        bt = config.all_kwargs().get("BT", 8)
        grid = (triton.cdiv(kw["T"], bt),)
        do_bench(lambda: jit.run(**kw, **config.all_kwargs(), grid=grid, warmup=False), quantiles=(0.5, 0.2, 0.8))
    print(f"do_bench of {len(configs)} configs (warm): {time.monotonic() - t:.2f} s", flush=True)
    if "sequential" in results:
        for mode, wall in results.items():
            print(f"  {mode:10s} {results['sequential'] / wall:5.2f}x sequential", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
