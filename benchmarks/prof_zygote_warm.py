"""Where a cold ``kernelsmith eval`` spends the zygote's warm-up, step by
step, in a fresh Python (run it twice: the second run finds the user's
host-module cache filled). On a GPU machine:

    PYTHONPATH=python python3 benchmarks/prof_zygote_warm.py [--backend triton]

Prints the seconds of each step of ``zygote.warm`` (the same calls, in the
same order), then a forked child's CUDA context (what each worker pays).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

STEPS: list[tuple[str, float]] = []


def step(name: str, t0: float) -> float:
    now = time.perf_counter()
    STEPS.append((name, now - t0))
    return now


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="triton")
    args = ap.parse_args()
    t = time.perf_counter()
    import torch

    t = step("import torch", t)
    from kernelsmith.backends.base import get_backend
    from kernelsmith.evaluator import correctness, timing, tracebacks, worker  # noqa: F401
    from kernelsmith.evaluator.guards import TorchOpGuard

    t = step("import kernelsmith's evaluator", t)
    backend = get_backend(args.backend)
    t = step("get_backend", t)
    if args.backend == "triton" and os.environ.get("TRITON_INTERPRET") != "1":
        import triton  # noqa: F401
        import triton.language  # noqa: F401

        t = step("import triton", t)
        from kernelsmith.backends.triton import backend as ktriton

        ktriton._LaunchHooks.install()
        t = step("launch hooks", t)
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        from triton.runtime import driver

        with ktriton._host_module_cache():
            driver.active.utils  # noqa: B018
            t = step("driver helpers (host modules)", t)
            ktriton.install_generic_launcher()
            t = step("generic launcher", t)
        from triton.runtime.cache import triton_key

        triton_key()
        t = step("warm_compiler: triton_key", t)
        import triton.experimental.gluon  # noqa: F401

        t = step("warm_compiler: gluon import", t)
        arch = ktriton._nvml_arch()
        t = step("nvml arch", t)
        if arch:
            from triton.backends.compiler import GPUTarget
            from triton.compiler.compiler import make_backend

            make_backend(GPUTarget("cuda", arch, 32)).hash()
            t = step("warm_compiler: backend hash", t)
    else:
        backend.prepare_zygote()
        t = step("prepare_zygote", t)
    with TorchOpGuard(()):
        (torch.ones(4) + 1).sum()
    t = step("TorchOpGuard first use", t)
    # the guard's plain method and the census's autograd profiler keep torch._dynamo out (3.6 s on the H100 machine)
    print(f"torch._dynamo imported by the warm-up: {'torch._dynamo' in sys.modules}")
    total = sum(s for _, s in STEPS)
    for name, s in STEPS:
        print(f"{name:<36} {s:7.3f} s")
    print(f"{'zygote warm-up, total':<36} {total:7.3f} s")
    if torch.cuda.is_available.__module__ and os.path.exists("/dev/nvidiactl"):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            t0 = time.perf_counter()
            torch.cuda.init()
            torch.empty(1, device="cuda")
            t1 = time.perf_counter()
            from kernelsmith.evaluator.census import warm_up

            warm_up()  # what a worker's prepare does next: Kineto and CUPTI's first start
            os.write(w, f"{t1 - t0:.3f} {time.perf_counter() - t1:.3f} {'torch._dynamo' in sys.modules}".encode())
            os._exit(0)
        os.waitpid(pid, 0)
        ctx, kineto, dynamo = os.read(r, 64).decode().split()
        print(f"{'forked child: CUDA context':<36} {float(ctx):7.3f} s")
        print(
            f"{'forked child: census warm-up (Kineto)':<36} {float(kineto):7.3f} s  (torch._dynamo imported: {dynamo})"
        )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
