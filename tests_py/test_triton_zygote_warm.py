"""The Triton backend's zygote warm-up (``warm_compiler``): Triton's
per-process compile set-up is done once before the fork, so children do not
pay it, and it must not leave a thread or a device context behind (neither
survives fork)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    os.environ.pop("TRITON_INTERPRET", None)
    import torch, triton
    from triton.runtime.cache import triton_key
    from kernelsmith.backends.triton import warm_compiler
    tasks_before = len(os.listdir("/proc/self/task"))
    before = triton_key.cache_info().currsize
    done = warm_compiler(None)
    after = triton_key.cache_info().currsize
    tasks_after = len(os.listdir("/proc/self/task"))
    # a forked child finds the key computed: a cache hit, no recomputation
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        t = time.perf_counter(); triton_key(); dt = time.perf_counter() - t
        os.write(w, json.dumps({"hits": triton_key.cache_info().hits, "dt": dt}).encode()); os._exit(0)
    os.close(w)
    child = json.loads(os.read(r, 4096).decode()); os.waitpid(pid, 0)
    print(json.dumps({"done": done, "before": before, "after": after, "tasks_before": tasks_before,
                      "tasks_after": tasks_after, "cuda": torch.cuda.is_initialized(),
                      "gluon": "triton.experimental.gluon" in sys.modules, "child": child}))
""")


def test_warm_compiler_fills_triton_key_without_threads_or_cuda():
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "triton_key" in out["done"]
    assert out["before"] == 0 and out["after"] == 1
    # no thread started (a thread does not survive fork) and no CUDA context
    assert out["tasks_after"] == out["tasks_before"]
    assert out["cuda"] is False
    # the child inherits the computed key: a hit, not a second hash of libtriton
    assert out["child"]["hits"] >= 1
    if "gluon" in out["done"]:
        assert out["gluon"]
