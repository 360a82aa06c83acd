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


#: the audits of a task and input set at which the referee times the
#: reference (its 1st, 8th and 64th): the least measure is kept (one made
#: while another process loaded the device is only longer); one measure an
#: audit cost the pool's throughput about 0.1 s of the referee's time per
#: audited evaluation on the H100
TIMED_AT = (1, 8, 64)


class TimedReferences:
    """The parent's schedule of the referee's timed measures of a reference
    (referee_process._timed_reference), per (task id, input set): which
    audit asks for one (:data:`TIMED_AT`), and the least measure so far,
    over every process of the device's referee (its lanes)."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        #: (task id, set) -> [audits asked, the measures taken]
        self.seen: dict[tuple[str, str], tuple[list[int], list[float]]] = {}

    def plan(self, key: tuple[str, str]) -> bool:
        """One more audit of ``key``: whether it measures."""
        with self._lock:
            asked, _ = self.seen.setdefault(key, ([0], []))
            asked[0] += 1
            return asked[0] in TIMED_AT

    def record(self, key: tuple[str, str], measures: Any) -> float:
        """The audit's measures (seconds per call) kept; the least so far, 0
        where none was ever taken (the bound back to back alone)."""
        with self._lock:
            _, kept = self.seen.setdefault(key, ([0], []))
            if isinstance(measures, list):
                kept.extend(float(m) for m in measures if isinstance(m, (int, float)) and m > 0)
            return min(kept) if kept else 0.0


#: a task whose reference holds at most this much on the device (its
#: parameters, largest input set and outputs, and its forward's peak, as
#: the referee primed it) may be checked in any of the referee's lanes at
#: once with another check; a larger one (KernelBench at upstream sizes:
#: tens of GiB in one check) only in the first lane, one at a time, as
#: before there were lanes
LIGHT_TASK_BYTES = 256 << 20


def default_lanes(device: Optional[str]) -> int:
    """Referee processes per device: 2 on a GPU (four workers' checks
    queued on one process there: docs/evaluator.md "Throughput"), 1 on the
    host (a second process is a second torch import on a 2-core machine);
    ``KERNELSMITH_REFEREE_LANES`` overrides either."""
    raw = os.environ.get("KERNELSMITH_REFEREE_LANES", "")
    if raw:
        lanes = int(raw)
        if not 1 <= lanes <= 16:
            raise ValueError(f"KERNELSMITH_REFEREE_LANES must be 1..16, got {raw}")
        return lanes
    return 2 if device is not None else 1


class _Lane:
    """One referee process: its pipe, its gate ticket and restarts. It is
    used by one thread at a time: the one that took it (Referee._take)."""

    def __init__(self, index: int, referee: "Referee") -> None:
        self.index = index
        self.referee = referee
        suffix = "" if index == 0 else f"-{index}"
        self.autotune_path = os.path.join(referee.workdir, f"autotune{suffix}.jsonl")  # its Triton autotune results
        self.log_path = os.path.join(referee.root, f"referee{suffix}.log")
        self.busy = False  # taken by Referee._take, under the referee's condition
        self.restarts = 0
        self.answered = 0  # requests answered (a record: which lanes served)
        self._spawn()

    def _spawn(self) -> None:
        import subprocess

        ref = self.referee
        backend, device, isolation, cpu_threads = ref._spec
        env = worker_environment(backend, ref.workdir, device, cpu_threads)
        if backend.autotunes:
            from ..backends.triton.autotune import store_folder  # lazy: only for a backend that autotunes

            # its results go to the pool's store; it takes only trusted records (its own, kept)
            env["KERNELSMITH_AUTOTUNE_NEW"] = self.autotune_path
            env["KERNELSMITH_AUTOTUNE_KNOWN"] = os.path.join(store_folder(ref.root), "trusted.json")
        if ref.measure_lock:
            # the lanes take their measures one at a time (referee_process.measuring)
            env["KERNELSMITH_REFEREE_MEASURE_LOCK"] = ref.measure_lock
        prefix, _bwrap, _note = sandbox_prefix(isolation, ref.workdir)
        command = [sys.executable, "-m", "kernelsmith.evaluator.referee_process", backend.name, str(cpu_threads or 0)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                prefix + command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                cwd=ref.workdir,
                start_new_session=True,
            )
        self.ready = False
        proc = self.proc
        # it computes on the device: it stands still while a worker times
        self.ticket = ref.gate.join(lambda sig: os.killpg(proc.pid, sig), pids={proc.pid}, timed_on_cpu=device is None)

    def restart(self) -> None:
        """A request that got no answer in time leaves its answer in the pipe
        (the next request would read it): kill the process and start a new
        one, whose first request waits for its start. Called by the lane's taker."""
        self.close()
        self.restarts += 1
        self._spawn()

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether the process has started (its first line), waiting up to ``timeout_s``."""
        import selectors

        if self.ready:
            return True
        if self.proc.poll() is not None:
            return False
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            if not sel.select(timeout=timeout_s):
                return False
            self.ready = bool(self.proc.stdout.readline())
            return self.ready
        finally:
            sel.close()

    def ask(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """:meth:`Referee.ask` on this process, by the lane's taker."""
        import selectors

        if self.proc.poll() is not None and self.ready and self.restarts < Referee.MAX_RESTARTS:
            # it died since its last answer (killed, out of memory): a
            # new one, rather than every later result left unchecked
            self.restart()
        if not self.wait_ready(timeout_s):
            if self.proc.poll() is None:  # still starting: the request would wait behind that
                return {"error": f"the referee did not start in {timeout_s:.0f} s"}
            return {"error": "the referee did not start: " + self.log_tail()}
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            if not sel.select(timeout=timeout_s):
                self.restart()
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
            return {"error": "the referee exited: " + self.log_tail()}
        try:
            answer: dict[str, Any] = json.loads(line)
            self.answered += 1
            return answer
        except ValueError:
            return {"error": "the referee answered garbage"}

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        self.referee.gate.leave(self.ticket)
        kill_group(self.proc.pid)
        self.proc.wait()


class Referee:
    """Parent side: the referee processes of one device pool (its lanes).

    A request goes to a lane that is free: a check of a light task
    (:data:`LIGHT_TASK_BYTES`) to any, anything else (a priming, a heavy
    task's check, a task not primed yet) to the first, so a heavy task's
    checks run one at a time as with one process. Each lane answers one
    request at a time; the lanes' measures are taken one at a time
    (referee_process.measuring), and the timed measures of a reference are
    scheduled and kept here, over all lanes (:class:`TimedReferences`)."""

    def __init__(
        self,
        backend: Any,
        device: Optional[str],
        isolation: str,
        cpu_threads: Optional[int],
        root: str,
        gate: Any,
        lanes: Optional[int] = None,
    ) -> None:
        import threading

        workdir = os.path.join(root, "referee")
        os.makedirs(workdir, exist_ok=True)
        # the parent copies each outputs file into workdir: the referee
        # reads nothing of the children's
        self.workdir = workdir
        self.root = root
        self.gate = gate
        self._spec = (backend, device, isolation, cpu_threads)
        self._free = threading.Condition()
        self._prime_lock = threading.Lock()
        # per calling thread (one job's checks run in one thread): requests,
        # the wait for a lane (another job's request) and the time served
        self._spent = threading.local()
        self._primed: dict[str, dict[str, Any]] = {}
        #: task id -> whether its checks may go to any lane (set when it is primed)
        self._light_ids: dict[str, bool] = {}
        self.timed = TimedReferences()
        count = default_lanes(device) if lanes is None else int(lanes)
        if not 1 <= count <= 16:
            raise ValueError(f"a referee has 1 to 16 lanes, got {count}")
        # the lock file the lanes take their measures under, where there are several
        self.measure_lock = os.path.join(workdir, "measure.lock") if count > 1 else ""
        self.lanes: list[_Lane] = []
        for index in range(count):
            self.lanes.append(_Lane(index, self))

    # the first lane's, as a one-process referee had them (tests, tools)
    @property
    def proc(self) -> Any:
        return self.lanes[0].proc

    @property
    def autotune_path(self) -> str:
        return self.lanes[0].autotune_path

    @property
    def autotune_paths(self) -> list[str]:
        """Every lane's autotune results (the pool absorbs them all)."""
        return [lane.autotune_path for lane in self.lanes]

    @property
    def log_path(self) -> str:
        return self.lanes[0].log_path

    @property
    def restarts(self) -> int:
        return sum(lane.restarts for lane in self.lanes)

    #: restarts of a referee found dead before a request, over its lifetime
    MAX_RESTARTS = 8

    def wait_ready(self, timeout_s: float = 300.0) -> bool:
        """Block until every lane has started (imports, device context), so
        that a warmed pool's first candidates do not wait for it."""
        import time

        deadline = time.monotonic() + timeout_s
        ready = True
        for lane in self.lanes:
            self._take([lane])
            try:
                ready = lane.wait_ready(max(0.0, deadline - time.monotonic())) and ready
            finally:
                self._give(lane)
        return ready

    def _light(self, request: dict[str, Any]) -> bool:
        """Whether ``request`` (a trial's or an audit's check) may go to any
        lane: its task was primed as light."""
        task = request.get("task")
        return isinstance(task, dict) and self._light_ids.get(str(task.get("id"))) is True

    @staticmethod
    def _light_footprint(answer: Any) -> bool:
        """Whether a priming's footprint is a light task's (:data:`LIGHT_TASK_BYTES`)."""
        fp = Footprint.from_dict(answer.get("footprint")) if isinstance(answer, dict) else None
        if fp is None:
            return False
        return fp.params_bytes + fp.inputs_bytes + fp.outputs_bytes + fp.peak_bytes <= LIGHT_TASK_BYTES

    def _take(self, lanes: list[_Lane]) -> _Lane:
        """The first free lane of ``lanes``, waiting for one."""
        with self._free:
            while True:
                for lane in lanes:
                    if not lane.busy:
                        lane.busy = True
                        return lane
                self._free.wait()

    def _give(self, lane: _Lane) -> None:
        with self._free:
            lane.busy = False
            self._free.notify_all()

    def ask(self, request: dict[str, Any], timeout_s: float = 300.0, lane: Optional[int] = None) -> dict[str, Any]:
        """One request, answered as a dict; ``{"error": ...}`` when the
        referee could not answer (its lane is restarted where that helps:
        found dead, or silent past ``timeout_s``). ``lane``: that lane's
        process only (a priming of every lane). An audit request is
        told whether to time the reference (:class:`TimedReferences`) and
        its rounds get the least measure so far."""
        import time

        timed_key = None
        if request.get("audit") and isinstance(request.get("task"), dict):
            timed_key = (str(request["task"].get("id")), str(request.get("set", "get_inputs")))
            request = {**request, "time_reference": self.timed.plan(timed_key)}
        asked = time.perf_counter()
        chosen = self._take(
            [self.lanes[lane]] if lane is not None else self.lanes if self._light(request) else self.lanes[:1]
        )
        try:
            # the ticket of the process asked (a restart joins the gate with a new one)
            ticket = chosen.ticket
            served, stood = time.perf_counter(), ticket.stood_still()
            try:
                answer = chosen.ask(request, timeout_s)
            finally:  # one request at a time per lane: its stops meanwhile are this one's
                kind = "audit" if request.get("audit") else "check" if "file" in request else "other"
                self._count(kind, served - asked, time.perf_counter() - served, ticket.stood_still() - stood)
            self._spent.last_died = "error" in answer and chosen.proc.poll() is not None
        finally:
            self._give(chosen)
        if timed_key is not None and "error" not in answer:
            least = self.timed.record(timed_key, answer.pop("reference_timed_measured", None))
            for got in answer.get("rounds") or []:
                if isinstance(got, dict):
                    got["reference_timed_s"] = least
        return answer

    def died_answering(self) -> bool:
        """Whether this thread's last request got an error because its lane's
        process died answering it (the next request starts a new one)."""
        return bool(getattr(self._spent, "last_died", False))

    def _count(self, kind: str, waited: float, served: float, stopped: float) -> None:
        spent = self._spent.__dict__
        for key, value in (("requests", 1), ("waited_s", waited), (f"{kind}_s", served), ("stopped_s", stopped)):
            spent[key] = spent.get(key, 0) + value

    def take_spent(self) -> dict[str, float]:
        """This thread's requests since its last call: how many, the wait
        for a free lane (another job's request, ``waited_s``), the time from
        sending to the answer per kind of request (``check_s``: a trial's
        re-check, ``audit_s``: an input set's audit rounds, ``other_s``),
        and of those the time the lane stood still while a worker held
        the timing slot (``stopped_s``). A record only."""
        spent = {k: v for k, v in self._spent.__dict__.items() if k != "last_died"}
        self._spent.__dict__.clear()
        return spent

    def prime(self, task: Any, timeout_s: float = 300.0) -> dict[str, Any]:
        """Load ``task``'s reference and run it once in the referee (see
        :func:`kernelsmith.evaluator.referee_process.prime`), at most once
        per task and referee; an error is returned, not raised: the first
        real check pays the cost then."""
        key = prime_key(task)
        with self._prime_lock:  # the first candidates of a task arrive together
            if key in self._primed:
                return self._primed[key]
            request = {"prime": True, "task": task.to_dict()}
            answer = self.ask(request, timeout_s, lane=0)
            if "out of memory" not in str(answer.get("error", "")).lower():
                # a reference that raises raises again; one that ran out of
                # memory next to others is measured again (alone) next time
                self._primed[key] = answer
            self._light_ids[task.id] = "error" not in answer and self._light_footprint(answer)
            if self._light_ids[task.id] and len(self.lanes) > 1:
                # the other lanes warm the reference too (its module, the
                # libraries' first use), side by side; their answers are
                # the first lane's again
                self._on_lanes(request, timeout_s, self.lanes[1:])
            return answer

    def _on_lanes(self, request: dict[str, Any], timeout_s: float, lanes: list["_Lane"]) -> None:
        """``request`` asked of each of ``lanes`` at once; the answers dropped."""
        import threading

        threads = [
            threading.Thread(target=self.ask, args=(request, timeout_s, lane.index), daemon=True) for lane in lanes
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def load(self, task: Any, timeout_s: float = 300.0) -> dict[str, Any]:
        """Load ``task``'s reference module here (no run: see
        :func:`kernelsmith.evaluator.referee_process.load`)."""
        request = {"load": True, "task": task.to_dict()}
        self._on_lanes(request, timeout_s, self.lanes[1:])
        return self.ask(request, timeout_s, lane=0)

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
        return self.lanes[0].log_tail()

    def close(self) -> None:
        for lane in self.lanes:
            lane.close()
