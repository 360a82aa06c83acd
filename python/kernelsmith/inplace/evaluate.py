"""Evaluating one candidate of an in-place task.

1. The candidate file must parse (else ``compile``).
2. A throwaway copy of the tree with the candidate written into the target
   file; the project's own test command runs there, in the evaluator's
   sandbox (``sandbox_prefix``: bwrap with only the copy writable, no
   network; a scrubbed environment; a hard timeout). Exit status 0 passes;
   a failure is ``incorrect``, a signal ``crash``, the time limit ``timeout``.
3. Our randomized comparison, through kernelsmith's :class:`Evaluator`: the
   candidate's target (``ModelNew``) against the original (``Model``) on
   fresh random inputs of every comparison shape, in every comparison dtype,
   with the evaluator's integrity checks (static and run-time guards) on the
   target's forward; then paired, interleaved timing against the original on
   the same inputs (the first benchmark shape).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from .._process import kill_group
from ..evaluator import phases
from ..evaluator.sandbox import sandbox_prefix, scrub_env
from ..result import EvalResult
from .task import InplaceSpec, InplaceTask
from .._astutil import parse as parse_source
from ..backends import get_backend
from ..backends.triton.autotune import (
    SITE_SEEDING_MANAGER,
    SITE_CACHE_MANAGER,
    persist_path,
    AutotuneStore,
    write_site_folder,
)
from ..evaluator import Evaluator
from .source import split_block

_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".pytest_cache", "*.egg-info", ".mypy_cache")
#: characters of the test command's output kept in a failing result
OUTPUT_TAIL = 3000


def copy_tree(tree: Path, dest: Path) -> Path:
    shutil.copytree(tree, dest, ignore=_IGNORE, symlinks=True)
    return dest


def with_interpreter(command: str) -> str:
    """A leading ``python``/``python3`` is this interpreter (the one with torch and the project's deps)."""
    words = command.split(" ", 1)
    if words and words[0] in ("python", "python3"):
        return " ".join([sys.executable] + words[1:])
    return command


def test_environment(spec: InplaceSpec, root: Path, home: Path) -> dict[str, str]:
    env = scrub_env(dict(os.environ))
    paths = [str((root / p).resolve()) for p in spec.config.python_path]
    rest = env.get("PYTHONPATH", "")
    env.update(
        PYTHONPATH=os.pathsep.join(paths + ([rest] if rest else [])),
        HOME=str(home),
        TMPDIR=str(home),
        PYTHONDONTWRITEBYTECODE="1",
    )
    # the kernel language's compile caches in the private home, as for a worker
    env.update(get_backend(spec.config.backend).worker_env(str(home)))
    return env


def run_tests(
    spec: InplaceSpec,
    root: Path,
    *,
    isolation: str = "auto",
    timeout_s: Optional[float] = None,
    autotune: Any = None,
    trusted: bool = False,
) -> dict[str, Any]:
    """Run the project's test command in ``root`` (a copy of the tree),
    sandboxed. Returns {passed, returncode, category, output, seconds, isolation}.
    ``autotune``: an AutotuneStore whose Triton autotune results the tests'
    processes take, and add to (backends/triton/autotune.py); ``trusted``:
    the tree is the project's own code, unchanged, so its results are as
    good as the referee's."""
    home = root / ".ks-home"
    home.mkdir(exist_ok=True)
    command = with_interpreter(spec.command(spec.config.tests))
    started = time.monotonic()
    timeout = timeout_s or spec.config.tests_timeout_s
    env = test_environment(spec, root, home)
    writable = []
    if autotune is not None:
        paths = autotune.job_paths(str(home))
        env.update(
            PYTHONPATH=os.pathsep.join([autotune.site_dir, env["PYTHONPATH"]]),
            KERNELSMITH_AUTOTUNE_KNOWN=paths["known"],
            KERNELSMITH_AUTOTUNE_NEW=paths["new"],
        )
    trusted_kernels = env.get("KERNELSMITH_TRITON_TRUSTED_KERNELS")
    if trusted_kernels and trusted:
        # the project's own code, unchanged: what it compiles is the trusted
        # kernel layer every later process reads (backends/triton/cache.py)
        env["TRITON_CACHE_DIR"] = trusted_kernels
        env.pop("TRITON_CACHE_MANAGER", None)
        writable.append(trusted_kernels)
        # lazy: backends.triton.cache pulls in triton, which inplace.evaluate does not load on its own
        from ..backends.triton import cache as _triton_cache

        user_cache = _triton_cache.user_triton_cache()
        if user_cache is not None and autotune is not None and autotune.site_dir:
            # what the user's own runs of these tests compiled is not
            # compiled again: copied into the layer (SeedingCacheManager,
            # through the site folder's copy of the module)
            env.update({_triton_cache.USER_ENV: user_cache, "TRITON_CACHE_MANAGER": SITE_SEEDING_MANAGER})
    elif trusted_kernels and autotune is not None:
        # a candidate's tests read the layer through the site folder's copy
        # of the reader (the test process need not import kernelsmith)
        env["TRITON_CACHE_MANAGER"] = SITE_CACHE_MANAGER
    else:
        env.pop("TRITON_CACHE_MANAGER", None)
        env.pop("KERNELSMITH_TRITON_TRUSTED_KERNELS", None)
    prefix, bwrap, _note = sandbox_prefix(isolation, str(root), writable=writable)
    proc = subprocess.Popen(
        prefix + ["/bin/sh", "-c", command],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc: Optional[int] = proc.returncode
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)  # the group's leader is ours and not reaped yet: this cannot fail
        out, _ = proc.communicate()
        rc, timed_out = None, True
    if bwrap and rc is not None and rc > 128:
        rc = -(rc - 128)  # bwrap's init reports a signal death as 128 + signal
    if autotune is not None:
        autotune.absorb(autotune.job_paths(str(home))["new"], trusted=trusted)
    text = out.decode(errors="replace")
    if timed_out:
        category = "timeout"
    elif rc == 0:
        category = "ok"
    elif rc is not None and (rc < 0 or rc in (134, 139)):
        category = "crash"  # killed by a signal (the shell reports 128 + signal)
    else:
        category = "incorrect"
    return {
        "passed": rc == 0,
        "returncode": rc,
        "category": category,
        "output": text[-OUTPUT_TAIL:],
        "seconds": round(time.monotonic() - started, 2),
        "command": spec.config.tests,
        "isolation": "bwrap" if bwrap else "process",
    }


class InplaceEvaluator:
    """The evaluator of in-place tasks, with the interface the evolve loop
    uses (``evaluate_async``, ``backend_for``, ``confirm_best``, ``workers``,
    ``close``). ``inner``: kernelsmith's :class:`Evaluator` (a pool of
    sandboxed workers) for the comparison and timing."""

    def __init__(self, inner: Any = None, *, isolation: str = "auto", workers: Optional[int] = None) -> None:
        if inner is None:
            inner = Evaluator(workers=workers, isolation=isolation)
        self.inner = inner
        self.isolation = isolation
        self.workers = getattr(inner, "workers", 1)
        self.tests_log: list[dict[str, Any]] = []
        self._autotune: Any = None  # the project tests' Triton autotune results (made on first use)
        self._autotune_dir: Optional[str] = None
        self._started: Optional[threading.Thread] = None

    def _start_pool(self, task: InplaceTask) -> None:
        """Start the pool's processes (the referee, the zygote) and load the
        reference's module in the referee beside the first run of the
        project's tests instead of after it; the comparison then waits for
        neither. The referee primes the task (its runs) only at the
        comparison, with the tests' autotune results (the pool's store
        refreshed from the kept file, ``AutotuneStore.refresh``)."""
        preload = getattr(self.inner, "preload", None)
        if (
            self._started is not None
            or preload is None
            or getattr(self.inner, "mode", "pool") != "pool"
            or (self.autotune_store(task) is not None and persist_path() is None)
        ):
            return  # (the records reach a pool made before them through the kept file only)

        def start() -> None:
            with contextlib.suppress(Exception):  # a pool that cannot start says so at the comparison
                preload(task)

        self._started = threading.Thread(target=start, name="ks-inplace-pool-start", daemon=True)
        self._started.start()

    def autotune_store(self, task: InplaceTask) -> Any:
        """The store of the Triton autotune results the project's tests
        hand on from one run to the next (None for other backends, or with
        KERNELSMITH_AUTOTUNE_HANDOVER=0)."""
        if (
            task.spec is None
            or not get_backend(task.spec.config.backend).autotunes
            or os.environ.get("KERNELSMITH_AUTOTUNE_HANDOVER", "1") == "0"
        ):
            return None
        if self._autotune is None:
            self._autotune_dir = tempfile.mkdtemp(prefix="ks-inplace-autotune-")
            os.chmod(self._autotune_dir, 0o755)
            self._autotune = AutotuneStore(os.path.join(self._autotune_dir, "records"))
            self._autotune.site_dir = write_site_folder(os.path.join(self._autotune_dir, "site"))
        return self._autotune

    def backend_for(self, task: Any) -> Any:
        return self.inner.backend_for(task)

    async def evaluate_async(self, task: InplaceTask, source: str, trials: Optional[int] = None) -> EvalResult:
        return await asyncio.to_thread(self.evaluate, task, source)

    def evaluate(self, task: InplaceTask, source: str) -> EvalResult:
        spec = task.spec
        assert spec is not None, "an InplaceTask carries its spec"
        started = time.monotonic()
        outside = _outside_block(source) != _outside_block(task.seed_source or "")
        if outside:
            # what the loop's edit step enforces, checked again here: the code
            # around the block is the project's (and outside the static checks)
            return EvalResult(
                category="edit",
                error="the program changes code outside the EVOLVE block; only the block may change",
                wall_s=0.0,
            )
        file_text = spec.file_text(source)
        try:
            parse_source(file_text, filename=spec.config.target.file)
        except SyntaxError as exc:
            return EvalResult(
                category="compile",
                error=f"{spec.config.target.file}: syntax error: {exc.msg} (line {exc.lineno})",
                wall_s=0.0,
            )
        with tempfile.TemporaryDirectory(prefix="ks-inplace-") as tmp:
            with phases.step("copy the tree"):
                root = copy_tree(spec.tree, Path(tmp) / "tree")
                (root / spec.config.target.file).write_text(file_text)
            self._start_pool(task)
            with phases.step("project tests"):
                # the unmodified file (task init's check) is the project's own
                # code: its tests' autotune results serve the reference too
                tests = run_tests(
                    spec,
                    root,
                    isolation=self.isolation,
                    autotune=self.autotune_store(task),
                    trusted=file_text == spec.original,
                )
        if not tests["passed"]:
            what = {
                "timeout": f"the project's tests ran past their limit of {spec.config.tests_timeout_s:g} s "
                "(tests_timeout_s) and were killed",
                "crash": "the project's tests crashed",
            }.get(tests["category"], "the project's tests failed")
            result = EvalResult(
                compiled=tests["category"] != "crash",
                category=tests["category"],
                error=f"{what} (`{tests['command']}`, exit status {tests['returncode']}):\n" + tests["output"][-1500:],
            )
            result.correctness = {"project_tests": _tests_record(tests)}
            result.wall_s = round(time.monotonic() - started, 3)
            return result
        program = spec.program(source)
        result = self._compare(task, spec, program)
        result.correctness = {
            **result.correctness,
            "project_tests": _tests_record(tests),
            "dtypes": list(spec.config.compare.dtypes),
            "shapes": spec.config.compare.shapes + spec.config.benchmark.shapes[:1],
        }
        result.wall_s = round(time.monotonic() - started, 3)
        return result

    def _compare(self, task: InplaceTask, spec: Any, program: str) -> EvalResult:
        """The comparison in every dtype, submitted at once (side by side
        where the pool has a worker for each; the first dtype's is the timed
        one, and the device's timing slot keeps the others still while it
        times). The first dtype that fails or is rejected, in the configured
        order, is the result."""
        dtypes = list(spec.config.compare.dtypes)
        futures = []
        for dtype in dtypes:
            # submit() runs the evaluation in a copy of this context: the
            # step's name goes with it
            with phases.step(f"comparison {dtype}"):
                shown = task if dtype == dtypes[0] else spec.comparison_task(dtype=dtype, timed=False)
                futures.append(self.inner.submit(shown, program))
        results = [f.result() for f in futures]
        result = results[0]
        if not result.correct or result.hacked:
            return result
        for dtype, other in zip(dtypes[1:], results[1:]):
            if not other.correct or other.hacked:
                other.error = f"[{dtype}] " + other.error
                other.correctness = {**other.correctness, "dtype": dtype}
                return other
        return result

    def confirm_best(self, task: InplaceTask, sources: Sequence[str], alone: bool = True) -> dict[str, Any]:
        """The finalists (each already through the tests) re-timed head to head."""
        assert task.spec is not None
        return self.inner.confirm_best(task, [task.spec.program(s) for s in sources], alone=alone)

    def close(self) -> None:
        if self._started is not None:
            self._started.join(timeout=300)  # no pool made after the close
        self.inner.close()
        if self._autotune_dir is not None:
            shutil.rmtree(self._autotune_dir, ignore_errors=True)

    def __enter__(self) -> "InplaceEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _outside_block(text: str) -> tuple[str, str]:
    prefix, _, suffix = split_block(text)
    return prefix, suffix


def _tests_record(tests: dict[str, Any]) -> dict[str, Any]:
    return {k: tests[k] for k in ("command", "passed", "returncode", "seconds", "isolation")}
