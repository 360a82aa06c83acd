"""Run the execution filter in a pool of warm, sandboxed worker processes.

From the evaluator's sandbox (:mod:`kernelsmith.evaluator.sandbox`) this uses
the credential-free environment (``scrub_env``) and the one sandbox
primitive (``sandbox_prefix``, without GPU device nodes); the process
handling is this module's own. ``jobs``
threads each own one worker (``python -m kernelsmith.curate.worker``, its own
session, bwrap when it works here) and feed it modules one at a time from a
shared queue: torch and the allowed packages are imported once per worker,
not once per module. A module that kills its worker or overruns its hard
limit (``2.5 x timeout + 7.5 s``, after the worker's own CPU budget and wall-clock backstop) is recorded (``crash`` / ``timeout``) and a
fresh worker takes the next module. Workers are recycled after
``modules_per_worker`` modules so that state leaked by module code stays
bounded. Every verdict is handed to ``on_result`` as it arrives (the pipeline
appends it to disk, so an interrupted run resumes where it stopped).
"""

from __future__ import annotations

import json
import os
import queue
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..evaluator.sandbox import sandbox_prefix, scrub_env
from .._process import kill_process, package_python_path
from .worker import WALL_FACTOR


@dataclass
class RunnerConfig:
    module_timeout_s: float = 10.0  # per module (all its input variants)
    startup_s: float = 120.0  # worker start-up allowance (importing torch and the allowed packages)
    modules_per_worker: int = 400  # a worker is replaced after this many modules
    jobs: int = 2  # worker processes at once
    memory_limit_mb: Optional[int] = 8192  # RLIMIT_AS; None or 0: no limit
    isolation: str = "auto"  # "auto" (bwrap when it works), "bwrap" (required), "process"
    threads: int = 1  # torch threads per worker
    preload: list[str] = field(default_factory=list)  # packages imported once per worker
    trivial_atol: float = 1e-3  # outputs all within this of zero are trivial


class _Worker:
    """One sandboxed worker process and the line protocol with it."""

    def __init__(self, cfg: RunnerConfig, seeds: tuple[int, int]) -> None:
        self.workdir = tempfile.mkdtemp(prefix="ks-curate-")
        self.log_path = os.path.join(self.workdir, "worker.log")
        env = scrub_env(dict(os.environ))
        env.update(
            HOME=self.workdir,
            TMPDIR=self.workdir,
            PYTHONPATH=package_python_path(),
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONUNBUFFERED="1",
            CUDA_VISIBLE_DEVICES="",
            OMP_NUM_THREADS=str(cfg.threads),
            TRANSFORMERS_OFFLINE="1",
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
        )
        # read-only host, private writable temp dir, no network, no device nodes (CPU only)
        prefix, use_bwrap, _note = sandbox_prefix(cfg.isolation, self.workdir, devices=False)
        self.isolation = "bwrap" if use_bwrap else "process"
        cmd = prefix + [sys.executable, "-m", "kernelsmith.curate.worker"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
            )
        self.sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buf = b""
        self.done = 0
        job = {
            "module_timeout_s": cfg.module_timeout_s,
            "seeds": list(seeds),
            "streaming": True,
            "memory_limit_mb": cfg.memory_limit_mb or None,
            "threads": cfg.threads,
            "preload": cfg.preload,
            "trivial_atol": cfg.trivial_atol,
            "cpu_limit_s": (cfg.startup_s + cfg.module_timeout_s * 2) * max(1, cfg.modules_per_worker),
        }
        self._send(job)
        self.ready = False
        self.startup_s = cfg.startup_s

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def _read(self, deadline: float, want: str) -> Optional[dict[str, Any]]:
        """The next message of type ``want``; None when the worker died or the deadline passed."""
        assert self.proc.stdout is not None
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("type") == want:
                    return msg
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not self.sel.select(timeout=min(remaining, 1.0)):
                continue
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            self.buf += chunk

    def check(self, item: dict[str, Any], hard_s: float) -> dict[str, Any]:
        if not self.ready:
            if self._read(time.monotonic() + self.startup_s, "ready") is None:
                return self._death("during start-up", started=False)
            self.ready = True
        try:
            self._send({"type": "module", **item})
        except (BrokenPipeError, OSError):
            return self._death("before the module was sent", started=False)
        msg = self._read(time.monotonic() + hard_s, "module")
        if msg is None:
            return self._death(f"(hard limit {hard_s:g} s)", started=True)
        self.done += 1
        return dict(msg.get("result") or {})

    def _death(self, when: str, started: bool) -> dict[str, Any]:
        alive = self.proc.poll() is None
        self.close()
        rc = self.proc.returncode
        if alive:
            status, detail = "timeout", f"the module ran past its hard limit {when}; its worker was killed"
        else:
            if rc is not None and rc > 128:
                rc = -(rc - 128)  # bwrap's init reports signal deaths as 128 + n
            why = (
                f"signal {signal.Signals(-rc).name}"
                if rc is not None and rc < 0 and -rc in signal.valid_signals()
                else f"exit status {rc}"
            )
            status, detail = "crash", f"the worker died ({why}) {when}"
        if not started:
            status = "worker_error"
            try:
                detail += ": " + open(self.log_path, errors="replace").read()[-600:]
            except OSError:
                pass
        return {"status": status, "detail": detail}

    def close(self) -> None:
        try:
            self.sel.close()
        except (OSError, ValueError):
            pass
        if self.proc.poll() is None:
            kill_process(self.proc, wait=False)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)


# an import that an earlier module's timeout cut short leaves the worker's
# interpreter half-initialised (a native extension registered, its Python
# module not), and every later module importing it fails the same way: not
# the module's fault
POISONED_IMPORT = re.compile(r"is already registered|partially initialized module|initialization failed")


def _poisoned(res: dict[str, Any]) -> bool:
    return res.get("status") in ("import_error", "missing_import", "init_error", "forward_error") and bool(
        POISONED_IMPORT.search(str(res.get("detail", "")))
    )


def run_checks(
    items: list[dict[str, Any]],
    cfg: RunnerConfig,
    seed: Optional[int] = None,
    on_result: Optional[Callable[[str, dict[str, Any]], None]] = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> dict[str, dict[str, Any]]:
    """Check every item ``{"id", "variants": [task file text, ...]}``; id -> verdict.

    Items not started when ``should_stop()`` turns true get no verdict."""
    if not items:
        return {}
    rng_seed = seed if seed is not None else secrets.randbits(31)
    seeds = (rng_seed, rng_seed + 7919)
    todo: "queue.Queue[dict[str, Any]]" = queue.Queue()
    for it in items:
        todo.put(it)
    out: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()
    # after the worker's own alarms (CPU budget, then the wall-clock backstop
    # at WALL_FACTOR times it) had their chance
    hard = cfg.module_timeout_s * WALL_FACTOR + 7.5
    startup_failures = [0]
    retried = [0]

    errors: list[BaseException] = []

    def lane() -> None:
        try:
            _lane()
        except BaseException as exc:  # surfaced in the calling thread
            errors.append(exc)

    def _lane() -> None:
        worker: Optional[_Worker] = None
        try:
            while not should_stop():
                try:
                    it = todo.get_nowait()
                except queue.Empty:
                    return
                if worker is None:
                    worker = _Worker(cfg, seeds)
                res = worker.check(it, hard)
                if res.get("status") == "worker_error":
                    with lock:
                        startup_failures[0] += 1
                        fatal = startup_failures[0] >= 3
                    if fatal:  # a worker that cannot start will not start for the next module either
                        with lock:
                            out[it["id"]] = res
                        if on_result:
                            on_result(it["id"], res)
                        raise RuntimeError(f"curation workers fail to start: {res.get('detail')}")
                    todo.put(it)  # not the module's fault: try it again in a fresh worker
                    worker = None
                    continue
                if _poisoned(res) and worker.done > 1 and not it.get("_retried"):
                    # checked again in a fresh worker; a fresh worker's verdict stands
                    worker.close()
                    worker = None
                    todo.put({**it, "_retried": True})
                    with lock:
                        retried[0] += 1
                    continue
                with lock:
                    out[it["id"]] = res
                if on_result:
                    on_result(it["id"], res)
                # a timeout the worker reported itself (its alarm) leaves it usable
                if worker.proc.poll() is not None or worker.done >= cfg.modules_per_worker:
                    worker.close()
                    worker = None
        finally:
            if worker is not None:
                worker.close()

    threads = [threading.Thread(target=lane, daemon=True) for _ in range(max(1, cfg.jobs))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)
    except KeyboardInterrupt:
        # let the lanes stop after their current module; what is done is on disk already
        while not todo.empty():
            try:
                todo.get_nowait()
            except queue.Empty:
                break
        raise
    if errors:
        raise errors[0]
    return out
