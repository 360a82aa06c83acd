"""The warm worker pool: one zygote per device, one forked child per
candidate, spare children ready ahead of demand.

A fresh ``python -m ...worker`` per candidate pays Python, torch, Triton and
the backend's imports (2-9 s) before the candidate's first line runs. Here a
zygote per device pays them once (zygote.py) and forks a child per
candidate; the pool keeps ``spares`` children per device already forked,
isolated and holding their device context, so a candidate starts in
milliseconds. Each child serves exactly one candidate and is killed with
everything it started, so isolation is the fresh process's (see
docs/evaluator.md, "Isolation").

Isolation of a child, outermost first:

* bwrap around the zygote when it works (read-only host filesystem but the
  pool's folder, no network, own PID namespace);
* when the pool runs as root: every child drops to its own unprivileged uid
  (a pool of uids, one per child in flight) keeping only
  CAP_DAC_READ_SEARCH (it can read what root can, e.g. a Python under
  /root, but write nothing but its own 0700 working folder), and gets its
  own network namespace when bwrap did not give one; so concurrent children
  cannot touch each other's files or processes, and none can write the
  package, the compile caches of others or the run directory;
* its own session (the pool signals the group), killed when the zygote dies,
  rlimits, a scrubbed environment (no keys), private HOME/TMPDIR/caches.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from .._process import kill_group, kill_process
from ..result import EvalResult
from . import phases
from .audit import HASH_KERNELS
from .contention import DeviceGate
from .referee import Referee
from .protocol import EXIT, HELLO, INIT, READY, SIGNAL, SPAWN, SPAWNED, converse, pass_credentials, read_with_sender
from .sandbox import Limits, _merge_ticket, finish_result, make_job, sandbox_prefix, worker_environment, write_job_files
from .trusted import finalist_checks, trusted_checks

#: first uid handed to children when the pool runs as root
UID_BASE = 61000
#: build requests taken from one child, and their size cap (untrusted input)
_MAX_REQUESTS = 16
_MAX_REQUEST_BYTES = 1 << 20


class PoolError(RuntimeError):
    """The pool itself failed (zygote died, could not start): a harness fault,
    never the candidate's."""


#: where pools on this machine claim their uids (one lock file per uid)
UID_LOCK_DIR = "/tmp/kernelsmith-uids"
#: how far above UID_BASE a pool looks for free uids
UID_SPAN = 4096


class _UidPool:
    """Uids no other pool on this machine uses: each is claimed with an
    exclusive flock on its own lock file, held for this pool's lifetime
    (released by the kernel if the process dies). Two pools sharing a uid
    would kill each other's children (a zygote kills every process of a
    child's uid when the child ends)."""

    def __init__(self, base: int, count: int) -> None:
        import fcntl

        self._free: "queue.Queue[int]" = queue.Queue()
        self._locks: list[Any] = []
        os.makedirs(UID_LOCK_DIR, mode=0o700, exist_ok=True)
        uid = base
        while len(self._locks) < count and uid < base + UID_SPAN:
            handle = open(os.path.join(UID_LOCK_DIR, str(uid)), "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
            else:
                self._locks.append(handle)
                self._free.put(uid)
            uid += 1
        if len(self._locks) < count:
            raise PoolError(f"no {count} free uids in {base}..{base + UID_SPAN - 1} (other pools hold them)")

    def take(self) -> int:
        return self._free.get()

    def give(self, uid: int) -> None:
        self._free.put(uid)


class Zygote:
    """The zygote process of one device and its control channel."""

    def __init__(
        self,
        backend: Any,
        device: Optional[str],
        isolation: str,
        cpu_threads: Optional[int],
        root: str,
        start_timeout_s: float = 180.0,
    ) -> None:
        self.root = root
        self.device = device
        ours, theirs = socket.socketpair()
        env = worker_environment(backend, os.path.join(root, "zygote"), device, cpu_threads)
        os.makedirs(os.path.join(root, "zygote"), exist_ok=True)
        env["KS_ZYGOTE_FD"] = str(theirs.fileno())
        prefix, self.bwrap, self.note = sandbox_prefix(isolation, root, read_only=[os.path.join(root, "cache")])
        self.log_path = os.path.join(root, "zygote.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                prefix + [sys.executable, "-m", "kernelsmith.evaluator.zygote"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                cwd=root,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        theirs.close()
        self.sock = ours
        self._send_lock = threading.Lock()
        self._spawned: dict[str, "queue.Queue[int]"] = {}
        self._exits: dict[str, "queue.Queue[int]"] = {}
        self._lock = threading.Lock()
        self.dead = threading.Event()
        self._send(type=INIT, backend=backend.name, cpu_threads=cpu_threads)
        self.sock.settimeout(start_timeout_s)
        reader = self.sock.makefile("rb")
        try:
            hello = json.loads(reader.readline() or b"{}")
        except (socket.timeout, ValueError):
            hello = {}
        if hello.get("type") != HELLO:
            self.close()
            raise PoolError("the evaluation pool's zygote did not start:\n" + self.log_tail())
        self.warm_s = float(hello.get("warm_s", 0.0))
        self.sock.settimeout(None)
        self._reader = threading.Thread(target=self._read, args=(reader,), daemon=True, name="ks-zygote")
        self._reader.start()

    def log_tail(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def _send(self, fds: Optional[list[int]] = None, **msg: Any) -> None:
        data = (json.dumps(msg) + "\n").encode()
        with self._send_lock:
            try:
                if fds:
                    socket.send_fds(self.sock, [data], fds)
                else:
                    self.sock.sendall(data)
            except OSError as exc:
                self.dead.set()
                raise PoolError(f"the evaluation pool's zygote is gone ({exc}):\n{self.log_tail()}") from exc

    def _box(self, table: dict, job: str) -> "queue.Queue[int]":
        with self._lock:
            return table.setdefault(job, queue.Queue())

    def _read(self, reader: Any) -> None:
        try:
            self._read_lines(reader)
        except OSError:  # the zygote died: same as end of stream
            pass
        self.dead.set()
        with self._lock:  # wake everyone waiting on a child of a dead zygote
            for box in list(self._spawned.values()) + list(self._exits.values()):
                box.put(-9)

    def _read_lines(self, reader: Any) -> None:
        for line in reader:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("type") == SPAWNED:
                self._box(self._spawned, str(msg["job"])).put(int(msg["pid"]))
            elif msg.get("type") == EXIT:
                self._box(self._exits, str(msg["job"])).put(int(msg["status"]))

    def spawn(self, job: str, workdir: str, uid: Optional[int], netns: bool) -> tuple[socket.socket, int]:
        ours, theirs = socket.socketpair()
        # before the child exists: the kernel names the writer of every byte
        # it writes only once our end asks for it (bytes written earlier
        # carry no pid)
        pass_credentials(ours)
        try:
            self._send(
                fds=[theirs.fileno()],
                type=SPAWN,
                job=job,
                workdir=workdir,
                uid=uid,
                netns=netns,
                cache_dir=os.path.join(self.root, "cache"),
            )
        finally:
            theirs.close()
        pid = self._box(self._spawned, job).get()
        with self._lock:
            self._spawned.pop(job, None)
        if pid < 0:
            ours.close()
            raise PoolError("the evaluation pool's zygote died:\n" + self.log_tail())
        return ours, pid

    def signal(self, job: str, sig: int) -> None:
        """Signal a child's group; a no-op once the zygote is gone (its
        children died with it: PR_SET_PDEATHSIG)."""
        if self.dead.is_set():
            return
        try:
            self._send(type=SIGNAL, job=job, sig=int(sig))
        except PoolError:
            pass

    def exit_status(self, job: str, timeout: float) -> Optional[int]:
        box = self._box(self._exits, job)
        try:
            # a dead zygote's children died with it (PR_SET_PDEATHSIG); a box
            # made after its death gets no -9 from the reader: no waiting then
            # (closing a pool whose zygote had died took 5 s per spare)
            status = box.get(timeout=timeout) if not self.dead.is_set() else box.get_nowait()
        except queue.Empty:
            return -9 if self.dead.is_set() else None
        with self._lock:
            self._exits.pop(job, None)
        return status

    def alive(self) -> bool:
        return not self.dead.is_set() and self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        kill_process(self.proc)


class Child:
    """One forked child: a spare until it gets its job."""

    def __init__(self, zygote: Zygote, jobs_dir: str, uid: Optional[int], netns: bool, gate: DeviceGate) -> None:
        self.zygote = zygote
        self.uid = uid
        self.id = secrets.token_hex(16)
        # an unguessable name; as root, owned by the child's own uid (0700)
        self.workdir = os.path.join(jobs_dir, self.id)
        os.mkdir(self.workdir, 0o700)
        if uid is not None:
            os.chown(self.workdir, uid, uid)
        self.requests_dir = os.path.join(self.workdir, "cache-requests")
        os.mkdir(self.requests_dir, 0o700)
        if uid is not None:
            os.chown(self.requests_dir, uid, uid)
        started = time.monotonic()
        self.sock, self.pid = zygote.spawn(self.id, self.workdir, uid, netns)
        # A member of the device's gate from birth: a spare creating its
        # context stands still during a timing like any other worker, and
        # its pid (with a device context) is ours, not a foreign process.
        self.gate = gate
        self.ticket = gate.join(
            self.signal, pids={self.pid} if not zygote.bwrap else set(), timed_on_cpu=zygote.device is None
        )
        self.sock.settimeout(None)
        self.reader = self.sock.makefile("rb")
        #: the worker's pid as the kernel names its writes (this process's pid
        #: namespace: under bwrap not the zygote's ``self.pid``), proven by its
        #: first line, written before any of the program is loaded; None where
        #: the socket carries no credentials (then converse cannot tell who wrote)
        self.worker_pid: Optional[int] = None
        self._pending = b""
        if pass_credentials(self.sock):
            line, sender = self._first_line()
            self.worker_pid = sender or None  # 0: written before our end asked (not the case: spawn asks first)
            if self.worker_pid:
                # the worker as this side's /proc and NVML name it (under
                # bwrap the zygote's pid is of its own namespace): the gate
                # measures its CPU use and knows its device context as ours
                self.ticket.pids.add(self.worker_pid)
        else:
            line = self.reader.readline()
        try:
            ready = json.loads(line) if line else {}
        except ValueError:
            ready = {}
        if ready.get("type") != READY:
            log = self.log_text()
            self.discard()
            raise PoolError("an evaluation worker failed to start:\n" + log[-3000:])
        self.startup_s = time.monotonic() - started

    def _first_line(self) -> tuple[bytes, Optional[int]]:
        """The worker's READY line and its writer's pid (the bytes of one
        read come from one writer)."""
        got, sender = b"", None
        while b"\n" not in got:
            chunk, who = read_with_sender(self.sock)
            if not chunk:
                break
            if sender is None:
                sender = who
            elif who != sender:  # nothing but the worker runs before READY
                return b"", None
            got += chunk
        line, _, self._pending = got.partition(b"\n")
        return line, sender

    # -- the link converse() talks through -----------------------------------
    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self) -> tuple[bytes, Optional[int]]:
        """One read of the job socket and who wrote it (protocol.read_with_sender)."""
        if self._pending:
            chunk, self._pending = self._pending, b""
            return chunk, self.worker_pid
        if self.worker_pid is None:
            return os.read(self.sock.fileno(), 1 << 16), None
        return read_with_sender(self.sock)

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def signal(self, sig: int) -> None:
        self.zygote.signal(self.id, sig)

    def kill(self) -> None:
        self.signal(9)

    def wait_exit(self, timeout: float) -> None:
        self._status = self.zygote.exit_status(self.id, timeout)
        if self._status is None:
            self.kill()
            self._status = self.zygote.exit_status(self.id, 5.0)

    _status: Optional[int] = None

    def returncode(self) -> Optional[int]:
        return self._status

    def close(self) -> None:
        if self._status is None:
            self.kill()
            self._status = self.zygote.exit_status(self.id, 5.0)
        for f in (self.reader, self.sock):
            try:
                f.close()
            except OSError:
                pass

    # -------------------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return Path(self.workdir, "worker.log").read_text(errors="replace")
        except OSError:
            return ""

    def discard(self) -> None:
        self.gate.leave(self.ticket)
        self.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


class DevicePool:
    """A zygote and its spare children for one device."""

    def __init__(
        self,
        backend: Any,
        device: Optional[str],
        *,
        isolation: str,
        cpu_threads: Optional[int],
        spares: int,
        gate: DeviceGate,
        uids: Optional[_UidPool],
        referee_lanes: Optional[int] = None,
    ) -> None:
        self.backend = backend
        self.device = device
        self.isolation = isolation
        self.cpu_threads = cpu_threads
        self.gate = gate
        self.uids = uids
        self.root = tempfile.mkdtemp(prefix="ks-pool-")
        os.chmod(self.root, 0o755)
        self.jobs_dir = os.path.join(self.root, "jobs")
        os.mkdir(self.jobs_dir)
        # children may enter their own folder; siblings belong to other uids
        os.chmod(self.jobs_dir, 0o711 if uids is not None else 0o755)
        # the compile cache every child reads and none can write (root-owned,
        # read-only under bwrap); filled by the trusted builder below
        self.cache_dir = os.path.join(self.root, "cache")
        self.requests_dir = os.path.join(self.root, "requests")
        os.mkdir(self.cache_dir, 0o755)
        os.mkdir(self.requests_dir, 0o700)
        # Triton autotune results, kept here and handed to the next children
        self.autotune = None
        if backend.autotunes and os.environ.get("KERNELSMITH_AUTOTUNE_HANDOVER", "1") != "0":
            # lazy: cycle evaluator.pool -> backends.triton -> backends.triton.backend -> evaluator -> evaluator.service -> evaluator.pool
            from ..backends.triton.autotune import AutotuneStore, store_folder

            self.autotune = AutotuneStore(store_folder(self.root))
        # the trusted comparison, out of the candidates' reach (referee.py, referee_process.py);
        # started first so that its imports and device context overlap the
        # zygote's warm-up (Zygote() waits for it) instead of following it
        self.referee = Referee(backend, device, isolation, cpu_threads, self.root, gate, lanes=referee_lanes)
        self._primed_published: set[str] = set()  # tasks whose priming's kernels were published
        try:
            self.zygote = Zygote(backend, device, isolation, cpu_threads, self.root)
        except BaseException:
            self.referee.close()
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self._builder: Optional[subprocess.Popen] = None
        self._builder_ticket: Any = None
        self.netns = uids is not None and not self.zygote.bwrap
        self.label = "+".join(
            x
            for x in (
                "bwrap" if self.zygote.bwrap else "process",
                "uid" if uids is not None else "",
                "netns" if self.netns else "",
            )
            if x
        )
        self._spares: "queue.Queue[Any]" = queue.Queue()
        self._want = max(0, int(spares))
        self._closed = False
        self._lock = threading.Lock()
        self._need = threading.Semaphore(self._want)
        # one filler per spare: a spare's start (fork, device context) takes
        # about as long as a fast candidate, so one filler falls behind
        for i in range(self._want):
            threading.Thread(target=self._fill, daemon=True, name=f"ks-spares-{i}").start()

    def _new_child(self) -> Child:
        uid = self.uids.take() if self.uids is not None else None
        try:
            child = Child(self.zygote, self.jobs_dir, uid, self.netns, self.gate)
        except BaseException:
            if uid is not None:
                self.uids.give(uid)  # type: ignore[union-attr]
            raise
        return child

    def wait_spares(self, timeout_s: float = 300.0) -> None:
        """Block until the spares are ready (start-up off the clock)."""
        deadline = time.monotonic() + timeout_s
        while self._spares.qsize() < self._want and time.monotonic() < deadline and self.zygote.alive():
            time.sleep(0.05)
        # the referee's start (torch, a device context) is start-up too
        self.referee.wait_ready(max(1.0, deadline - time.monotonic()))

    def _fill(self) -> None:
        while True:
            self._need.acquire()
            if self._closed:
                self._need.release()  # wake the next filler so it sees the close too
                return
            try:
                self._spares.put(self._new_child())
            except BaseException as exc:  # noqa: BLE001 - handed to whoever takes the spare
                self._spares.put(exc)
                if self._closed or not self.zygote.alive():
                    return
                time.sleep(1.0)

    def take(self) -> tuple[Child, float]:
        """A ready child and the seconds waited for it."""
        if not self.zygote.alive():
            raise PoolError("the evaluation pool's zygote died:\n" + self.zygote.log_tail())
        started = time.monotonic()
        if self._want == 0:
            return self._new_child(), time.monotonic() - started
        item = self._spares.get()
        self._need.release()  # start the next spare now, while this one works
        if isinstance(item, BaseException):
            raise item
        return item, time.monotonic() - started

    def _collect_requests(self, child: Child) -> None:
        """Move a finished child's build requests (untrusted hints) to the
        trusted builder, starting it on the first."""
        try:
            names = [n for n in os.listdir(child.requests_dir) if n.endswith(".key")][:_MAX_REQUESTS]
        except OSError:
            return
        moved = 0
        for name in names:
            src = os.path.join(child.requests_dir, name)
            if os.path.islink(src) or os.path.getsize(src) > _MAX_REQUEST_BYTES:
                continue
            try:
                data = Path(src).read_bytes()
            except OSError:
                continue
            Path(self.requests_dir, secrets.token_hex(8) + ".key").write_bytes(data)
            moved += 1
        if moved and (self._builder is None or self._builder.poll() is not None):
            self._start_builder()

    def _start_builder(self) -> None:
        workdir = os.path.join(self.root, "builder")
        os.makedirs(workdir, exist_ok=True)
        env = worker_environment(self.backend, workdir, self.device, self.cpu_threads)
        prefix, _bwrap, _note = sandbox_prefix(self.isolation, workdir, writable=[self.cache_dir, self.requests_dir])
        with open(os.path.join(self.root, "builder.log"), "ab") as log:
            self._builder = subprocess.Popen(
                prefix
                + [
                    sys.executable,
                    "-m",
                    "kernelsmith.evaluator.cache_builder",
                    self.backend.name,
                    self.requests_dir,
                    self.cache_dir,
                ],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                env=env,
                cwd=workdir,
                start_new_session=True,
            )
        builder = self._builder
        if self._builder_ticket is not None:
            self.gate.leave(self._builder_ticket)
        # it compiles on the host: it stands still while the device times
        self._builder_ticket = self.gate.join(
            lambda sig: os.killpg(builder.pid, sig), pids={builder.pid}, timed_on_cpu=True
        )

    def run(
        self,
        task: Any,
        source: str,
        trials: Optional[int],
        timing: bool,
        limits: Limits,
        finalists: Sequence[str] = (),
        worker_done: Optional[Callable[[], None]] = None,
    ) -> EvalResult:
        """One job on a spare child. Once the child has answered, it is
        discarded and ``worker_done()`` is called (the caller's worker slot
        goes to the next job), then the parent's checks run on what it took
        from the child: they overlap the next job's work."""
        phases.report("waiting for a worker")
        child, waited = self.take()
        evidence: dict[str, Any] = {}
        done = False
        try:
            cand_path, ref_path, finalist_paths = write_job_files(child.workdir, task, source, finalists)
            if child.uid is not None:
                for path in [cand_path, ref_path, *finalist_paths]:
                    os.chown(path, child.uid, child.uid)
            job = make_job(
                task, self.backend, cand_path, ref_path, trials, timing, limits, self.cpu_threads, finalist_paths
            )
            if not finalists:
                job.update(self.referee.job_facts(task, limits.timeout_s))  # degenerate forms, probes
            if task.id not in self._primed_published:
                # the priming compiled the audit rounds' kernels for the
                # task's types (referee_process._compile_audit_kernels): the
                # first jobs load them instead of compiling their own
                self._primed_published.add(task.id)
                self._publish_kernels()
            if self.autotune is not None:  # autotuning done once per kernel and key (triton/autotune.py)
                for path in self.referee.autotune_paths:  # it primed the task first, in each lane
                    self.autotune.absorb(path, trusted=True)
                job["autotune"] = self.autotune.job_paths(child.workdir)
            ticket = child.ticket
            ticket.key = task.id  # the reference baseline this timing is judged against
            ticket.reset_clock()  # standing still as a spare is not this job's time
            seeds: list[int] = []
            # the trial outputs the worker hands over, copied where it cannot write
            evidence["src"], evidence["dir"] = (
                child.workdir,
                tempfile.mkdtemp(prefix="evidence-", dir=self.referee.workdir),
            )
            evidence["max_bytes"] = self.referee.evidence_limit(task)  # sized by the task's outputs
            evidence["max_trials"] = self.referee.most_trials(task)
            raw, stage, timed_out = converse(child, job, limits.timeout_s, ticket, seeds, evidence)
            if "autotune" in job:
                self.autotune.absorb(job["autotune"]["new"])  # type: ignore[union-attr]
            if isinstance(raw, dict):
                raw.pop("referee", None)  # the referee takes only what was handed over
            result = finish_result(
                raw,
                stage=stage,
                timed_out=timed_out,
                returncode=child.returncode(),
                log_text=child.log_text(),
                cand_path=cand_path,
                timeout_s=limits.timeout_s,
                isolation=self.label,
                note=self.zygote.note,
            )
            _merge_ticket(result, ticket)  # first: the referee may mark the timing unreliable
            # the child's part is over (its evidence was copied as it came):
            # the next job may start while the parent checks this one
            done = True
            self._release(child)
            if worker_done is not None:
                worker_done()
            return self._checked(result, evidence, seeds, task, finalists, ticket.slots, waited)
        finally:
            if "dir" in evidence:
                shutil.rmtree(evidence["dir"], ignore_errors=True)
            if not done:
                self._release(child)

    def _checked(
        self,
        result: EvalResult,
        evidence: dict[str, Any],
        seeds: list[int],
        task: Any,
        finalists: Sequence[str],
        slots: Any,
        waited: float,
    ) -> EvalResult:
        """The parent's checks on a job's result (the child already gone):
        the trusted checks, or each finalist's row against its own audit
        rounds; the referee's share of the time in ``result.phases``."""
        refereed = time.monotonic()
        self.referee.take_spent()  # this thread's requests from here on
        if not finalists:
            trusted_checks(result, evidence, seeds, task, evidence["dir"], self.referee, slots)
        else:  # each finalist's row against its own audit rounds
            finalist_checks(result, evidence, seeds, task, evidence["dir"], self.referee)
        if evidence.get("audits"):  # the referee hashed this job's rounds: it may have compiled the kernel
            self._publish_kernels()
        refereed = time.monotonic() - refereed
        result.phases = {"startup": round(waited, 4), **{k: v for k, v in result.phases.items() if k != "startup"}}
        result.phases["referee"] = round(refereed, 4)  # a finalists' re-timing: its audit rounds' checks
        # of which: waiting for another job's request, and the referee's answers
        result.phases.update({f"referee_{k}": round(v, 4) for k, v in self.referee.take_spent().items()})
        return result

    def _release(self, child: Child) -> None:
        """A child whose job is over: stopped, its build requests taken, gone."""
        child.close()
        self._collect_requests(child)
        child.discard()
        if child.uid is not None:
            self.uids.give(child.uid)  # type: ignore[union-attr]

    def _publish_kernels(self) -> None:
        """The audit hashes' kernels the referee has compiled (at its first
        check of a job's rounds, one per element width), copied where the
        next workers load them rather than compile them again
        (Backend.publish_kernels). Only after a job whose rounds the
        referee checked: a listing of its cache, and a look for the kernel's
        group in each key folder not yet published."""
        try:
            self.backend.publish_kernels(self.referee.workdir, self.cache_dir, HASH_KERNELS)
        except OSError:  # an optimisation only: the workers compile for themselves
            pass

    def close(self) -> None:
        self._closed = True
        self._need.release()
        while True:
            try:
                item = self._spares.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Child):
                item.discard()
                if item.uid is not None:
                    self.uids.give(item.uid)  # type: ignore[union-attr]
        self.zygote.close()
        self.referee.close()
        if self._builder is not None:
            if self._builder_ticket is not None:
                self.gate.leave(self._builder_ticket)
            kill_group(self._builder.pid)
            self._builder.wait()
        shutil.rmtree(self.root, ignore_errors=True)


__all__ = ["Child", "DevicePool", "PoolError", "UID_BASE", "Zygote"]
