"""The trusted referee's client: the parent's side of the referee process.

One :class:`Referee` per device pool (pool and fresh mode alike) starts the
referee process (referee_process.py: ``python -m
kernelsmith.evaluator.referee_process``, in the sandbox the pool's
isolation names), restarts it where it died or went silent, and asks it
over JSON lines: prime a task (its footprint, its degenerate forms and
probe sets), load a task's reference ahead of time, re-check one trial's
outputs. What a result's verdict becomes from the answers is the parent's
trusted checks' (trusted/); the outputs files they hand over are
evidence.py's.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional

from .._process import kill_group
from .evidence import evidence_limit
from .memory import Footprint
from .probes import set_names as probe_sets
from .sandbox import sandbox_prefix, worker_environment


def prime_key(task: Any) -> str:
    """What a priming depends on: the reference, its input sets, the tolerance."""
    return json.dumps(
        [task.reference_source, list(task.config.extra_inputs), list(task.config.tolerances()), task.config.dtype]
    )


class Referee:
    """Parent side: the referee process of one device pool."""

    def __init__(
        self, backend: Any, device: Optional[str], isolation: str, cpu_threads: Optional[int], root: str, gate: Any
    ) -> None:
        import threading

        workdir = os.path.join(root, "referee")
        os.makedirs(workdir, exist_ok=True)
        # the parent copies each outputs file into workdir: the referee
        # reads nothing of the children's
        self.workdir = workdir
        self.root = root
        self.autotune_path = os.path.join(workdir, "autotune.jsonl")  # its Triton autotune results
        self.log_path = os.path.join(root, "referee.log")
        self.gate = gate
        self._spec = (backend, device, isolation, cpu_threads)
        self._lock = threading.Lock()
        self._prime_lock = threading.Lock()
        # per calling thread (one job's checks run in one thread): requests,
        # the wait for the lock (another job's request) and the time served
        self._spent = threading.local()
        self._primed: dict[str, dict[str, Any]] = {}
        self.restarts = 0
        self._spawn()

    def _spawn(self) -> None:
        import subprocess

        backend, device, isolation, cpu_threads = self._spec
        env = worker_environment(backend, self.workdir, device, cpu_threads)
        if backend.autotunes:
            from ..backends.triton.autotune import store_folder  # lazy: only for a backend that autotunes

            # its results go to the pool's store; it takes only trusted records (its own, kept)
            env["KERNELSMITH_AUTOTUNE_NEW"] = self.autotune_path
            env["KERNELSMITH_AUTOTUNE_KNOWN"] = os.path.join(store_folder(self.root), "trusted.json")
        prefix, _bwrap, _note = sandbox_prefix(isolation, self.workdir)
        command = [sys.executable, "-m", "kernelsmith.evaluator.referee_process", backend.name, str(cpu_threads or 0)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                prefix + command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                cwd=self.workdir,
                start_new_session=True,
            )
        self._ready = False
        proc = self.proc
        # it computes on the device: it stands still while a worker times
        self.ticket = self.gate.join(lambda sig: os.killpg(proc.pid, sig), pids={proc.pid}, timed_on_cpu=device is None)

    def _restart(self) -> None:
        """A request that got no answer in time leaves its answer in the pipe
        (the next request would read it): kill the process and start a new
        one, whose first request waits for its start. Called with the lock."""
        self.close()
        self.restarts += 1
        self._spawn()

    #: restarts of a referee found dead before a request, over its lifetime
    MAX_RESTARTS = 8

    def wait_ready(self, timeout_s: float = 300.0) -> bool:
        """Block until the referee has started (imports, device context), so
        that a warmed pool's first candidates do not wait for it."""
        with self._lock:
            return self._wait_ready_locked(timeout_s)

    def _wait_ready_locked(self, timeout_s: float) -> bool:
        import selectors

        if self._ready:
            return True
        if self.proc.poll() is not None:
            return False
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            if not sel.select(timeout=timeout_s):
                return False
            self._ready = bool(self.proc.stdout.readline())
            return self._ready
        finally:
            sel.close()

    def ask(self, request: dict[str, Any], timeout_s: float = 300.0) -> dict[str, Any]:
        """One request, answered as a dict; ``{"error": ...}`` when the
        referee could not answer (it is restarted where that helps: found
        dead, or silent past ``timeout_s``)."""
        import selectors
        import time

        asked = time.perf_counter()
        with self._lock:
            # the ticket of the process asked (a restart joins the gate with a new one)
            ticket = self.ticket
            served, stood = time.perf_counter(), ticket.stood_still()
            try:
                return self._ask_locked(request, timeout_s, selectors)
            finally:  # one request at a time: the referee's stops meanwhile are this one's
                kind = "audit" if request.get("audit") else "check" if "file" in request else "other"
                self._count(kind, served - asked, time.perf_counter() - served, ticket.stood_still() - stood)

    def _count(self, kind: str, waited: float, served: float, stopped: float) -> None:
        spent = self._spent.__dict__
        for key, value in (("requests", 1), ("waited_s", waited), (f"{kind}_s", served), ("stopped_s", stopped)):
            spent[key] = spent.get(key, 0) + value

    def take_spent(self) -> dict[str, float]:
        """This thread's requests since its last call: how many, the wait
        for another job's request to finish (``waited_s``), the time from
        sending to the answer per kind of request (``check_s``: a trial's
        re-check, ``audit_s``: an input set's audit rounds, ``other_s``),
        and of those the time the referee stood still while a worker held
        the timing slot (``stopped_s``). A record only."""
        spent = dict(self._spent.__dict__)
        self._spent.__dict__.clear()
        return spent

    def _ask_locked(self, request: dict[str, Any], timeout_s: float, selectors: Any) -> dict[str, Any]:
        """:meth:`ask` with the lock held."""
        if self.proc.poll() is not None and self._ready and self.restarts < self.MAX_RESTARTS:
            # it died since its last answer (killed, out of memory): a
            # new one, rather than every later result left unchecked
            self._restart()
        if not self._wait_ready_locked(timeout_s):
            if self.proc.poll() is None:  # still starting: the request would wait behind that
                return {"error": f"the referee did not start in {timeout_s:.0f} s"}
            return {"error": "the referee did not start: " + self._log_tail()}
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            if not sel.select(timeout=timeout_s):
                self._restart()
                return {"error": f"the referee gave no answer in {timeout_s:.0f} s (restarted)"}
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            return {"error": f"the referee failed: {exc}"}
        finally:
            sel.close()
        if not line:
            try:  # its pipe closes before it is reaped: callers test proc.poll() next
                self.proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - still running: the next request finds out
                pass
            return {"error": "the referee exited: " + self._log_tail()}
        try:
            return json.loads(line)
        except ValueError:
            return {"error": "the referee answered garbage"}

    def prime(self, task: Any, timeout_s: float = 300.0) -> dict[str, Any]:
        """Load ``task``'s reference and run it once in the referee (see
        :func:`kernelsmith.evaluator.referee_process.prime`), at most once
        per task and referee; an error is returned, not raised: the first
        real check pays the cost then."""
        key = prime_key(task)
        with self._prime_lock:  # the first candidates of a task arrive together
            if key in self._primed:
                return self._primed[key]
            answer = self.ask({"prime": True, "task": task.to_dict()}, timeout_s)
            if "out of memory" not in str(answer.get("error", "")).lower():
                # a reference that raises raises again; one that ran out of
                # memory next to others is measured again (alone) next time
                self._primed[key] = answer
            return answer

    def load(self, task: Any, timeout_s: float = 300.0) -> dict[str, Any]:
        """Load ``task``'s reference module here (no run: see
        :func:`kernelsmith.evaluator.referee_process.load`)."""
        return self.ask({"load": True, "task": task.to_dict()}, timeout_s)

    def primed(self, task: Any) -> bool:
        """Whether ``task`` is primed here (its footprint measured)."""
        return prime_key(task) in self._primed

    def footprint(self, task: Any, timeout_s: float = 300.0) -> Any:
        """``task``'s footprint (memory.Footprint) as this referee measured
        it when it primed the task (priming it now if not yet); None when
        priming failed."""
        answer = self.prime(task, timeout_s)
        return Footprint.from_dict(answer.get("footprint")) if isinstance(answer, dict) else None

    def degenerate(self, task: Any, timeout_s: float = 300.0) -> Optional[list[str]]:
        """The trivial outputs (zeros, a constant, an input passed through)
        that ``task``'s tolerance cannot tell from its reference's output, as
        this trusted process found them (priming the task on first use);
        None when it could not say (the worker then checks for itself)."""
        answer = self.prime(task, timeout_s)
        forms = answer.get("degenerate") if isinstance(answer, dict) and "error" not in answer else None
        return list(forms) if isinstance(forms, list) else None

    def probes(self, task: Any, timeout_s: float = 300.0) -> Optional[dict[str, Any]]:
        """For a degenerate task, the probe input sets that judge it and the
        forms they tell apart (:func:`kernelsmith.evaluator.probes.assess`);
        ``{}`` for a task that is not degenerate; None when the referee could
        not say."""
        answer = self.prime(task, timeout_s)
        if not isinstance(answer, dict) or "error" in answer or not isinstance(answer.get("degenerate"), list):
            return None
        probes = answer.get("probes", {})
        return dict(probes) if isinstance(probes, dict) else None

    def job_facts(self, task: Any, timeout_s: float = 300.0) -> dict[str, Any]:
        """What a job of ``task`` carries from this trusted process (pool and
        fresh mode alike): ``degenerate`` (:meth:`degenerate`) and ``probes``
        (:meth:`probes`), each None where the referee could not say (the
        worker then decides for itself)."""
        return {"degenerate": self.degenerate(task, timeout_s), "probes": self.probes(task, timeout_s)}

    def primed_probe_sets(self, task: Any) -> list[str]:
        """The probe input sets this referee found to judge ``task`` when it
        primed it (before the task's jobs, pool and fresh mode alike); [] for
        a task it has not primed, could not prime, or that is not
        degenerate. Never primes: a check must not start the reference anew."""
        answer = self._primed.get(prime_key(task))  # no lock: prime() holds it while a task primes
        probes = answer.get("probes") if isinstance(answer, dict) else None
        sets = probes.get("sets") if isinstance(probes, dict) else None
        return [str(s) for s in sets] if isinstance(sets, list) else []

    @staticmethod
    def most_trials(task: Any) -> int:
        """How many trials a worker may hand over: one per input set the
        referee judges (trusted/referee_check.py): the task's own
        (``TaskConfig.check_sets``; KernelBench-X harnesses have up to 18,
        ``kbx_case_<i>``) and the probes'."""
        return len(set(task.config.check_sets)) + len(probe_sets())

    def evidence_limit(self, task: Any) -> int:
        """The largest outputs file accepted for ``task``, from the footprint
        this referee measured (:func:`kernelsmith.evaluator.evidence.evidence_limit`)."""
        fp = self.footprint(task) if self.primed(task) else None
        return evidence_limit(fp.outputs_bytes if fp is not None else 0)

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        self.gate.leave(self.ticket)
        kill_group(self.proc.pid)
        self.proc.wait()
