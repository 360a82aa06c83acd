"""Run the execution filter in sandboxed worker processes, in batches.

Reuses the evaluator's sandbox pieces (:mod:`kernelsmith.evaluator.sandbox`):
the scrubbed environment, the bwrap arguments and probe, the process-group
kill and the limits dataclass. Each worker gets a batch of modules and a hard
wall-clock limit of ``module_timeout_s * len(batch) + startup_s``; when a
worker dies (crash, memory, hard timeout) the module it was on is recorded with
the reason and the rest of its batch goes to a fresh worker.
"""
from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..evaluator.sandbox import _bwrap_args, _kill, _python_path, bwrap_status, close_worker, scrub_env


@dataclass
class RunnerConfig:
    module_timeout_s: float = 10.0  # per module (all its input variants)
    startup_s: float = 60.0  # worker start-up allowance (importing torch)
    batch_size: int = 32  # modules per worker process
    jobs: int = 2  # worker processes at once
    memory_limit_mb: Optional[int] = 8192  # RLIMIT_AS; None or 0: no limit
    isolation: str = "auto"  # "auto" (bwrap when it works), "bwrap" (required), "process"
    threads: int = 1  # torch threads per worker


def _run_batch(items: list[dict[str, Any]], cfg: RunnerConfig, seeds: tuple[int, int]) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    pending = list(items)
    while pending:
        got, current, cause = _one_worker(pending, cfg, seeds)
        results.update(got)
        done = set(got)
        if current is not None and current not in done:
            results[current] = cause
            done.add(current)
        rest = [it for it in pending if it["id"] not in done]
        if len(rest) == len(pending):  # no progress at all (start-up failure): report them all
            for it in rest:
                results[it["id"]] = cause
            break
        pending = rest
    return results


def _one_worker(items: list[dict[str, Any]], cfg: RunnerConfig, seeds: tuple[int, int]
                ) -> tuple[dict[str, dict[str, Any]], Optional[str], dict[str, Any]]:
    """(results received, module in progress when the worker stopped, its verdict)."""
    workdir = tempfile.mkdtemp(prefix="ks-curate-")
    log_path = os.path.join(workdir, "worker.log")
    try:
        env = scrub_env(dict(os.environ))
        env.update(HOME=workdir, TMPDIR=workdir, PYTHONPATH=_python_path(), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS=str(cfg.threads))
        use_bwrap = False
        if cfg.isolation in ("auto", "bwrap"):
            use_bwrap, note = bwrap_status()
            if cfg.isolation == "bwrap" and not use_bwrap:
                raise RuntimeError(f"isolation='bwrap' requested but unavailable: {note}")
        cmd = (_bwrap_args(workdir) if use_bwrap else []) + [sys.executable, "-m", "kernelsmith.curate.worker"]
        hard = cfg.startup_s + cfg.module_timeout_s * 1.5 * len(items)
        job = {"modules": items, "module_timeout_s": cfg.module_timeout_s, "seeds": list(seeds),
               "cpu_limit_s": 2 * hard, "memory_limit_mb": cfg.memory_limit_mb or None, "threads": cfg.threads}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=workdir,
                                    env=env, start_new_session=True)
        return _converse(proc, job, hard, log_path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _converse(proc: subprocess.Popen, job: dict[str, Any], hard_s: float, log_path: str
              ) -> tuple[dict[str, dict[str, Any]], Optional[str], dict[str, Any]]:
    assert proc.stdin is not None and proc.stdout is not None
    got: dict[str, dict[str, Any]] = {}
    current: Optional[str] = None
    deadline = time.monotonic() + hard_s
    buf = b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    cause: dict[str, Any] = {"status": "crash", "detail": "the worker exited before reporting"}
    try:
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.flush()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _kill(proc)
                cause = {"status": "timeout", "detail": f"worker hard limit of {hard_s:g} s exceeded"}
                break
            if not sel.select(timeout=min(remaining, 1.0)):
                continue
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    _kill(proc)
                rc = proc.returncode
                if rc is not None and rc > 128:
                    rc = -(rc - 128)  # bwrap's init reports signal deaths as 128 + n
                if rc is not None and rc < 0:
                    cause = {"status": "crash", "detail": f"the worker died from signal {-rc}"}
                else:
                    cause = {"status": "crash", "detail": f"the worker exited with status {rc}"}
                break
            buf += chunk
            done = False
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("type") == "stage":
                    st = str(msg.get("stage", ""))
                    current = st.split(":", 1)[1] if st.startswith("module:") else current
                elif msg.get("type") == "module":
                    got[str(msg.get("id"))] = dict(msg.get("result") or {})
                elif msg.get("type") == "result":
                    done = True
            if done:
                break
    except BrokenPipeError:
        pass
    finally:
        close_worker(proc, sel)
    if current is None and not got:
        try:
            tail = open(log_path, errors="replace").read()[-600:]
        except OSError:
            tail = ""
        cause = {**cause, "detail": cause["detail"] + " during start-up" + (f": {tail}" if tail else "")}
    return got, current, cause


def run_checks(items: list[dict[str, Any]], cfg: RunnerConfig, seed: Optional[int] = None,
               progress: Optional[Callable[[int, int], None]] = None) -> dict[str, dict[str, Any]]:
    """Check every item ``{"id", "source", "variants": [str]}``; id -> verdict."""
    if not items:
        return {}
    rng_seed = seed if seed is not None else secrets.randbits(31)
    seeds = (rng_seed, rng_seed + 7919)
    batches = [items[i:i + cfg.batch_size] for i in range(0, len(items), max(1, cfg.batch_size))]
    out: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=max(1, cfg.jobs)) as pool:
        for res in pool.map(lambda b: _run_batch(b, cfg, seeds), batches):
            out.update(res)
            if progress:
                progress(len(out), len(items))
    return out
