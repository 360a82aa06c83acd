"""The conversation between a worker and its parent, both sides.

A worker runs one candidate (:mod:`kernelsmith.evaluator.worker`); its
parent (:mod:`kernelsmith.evaluator.sandbox` for a fresh process,
:mod:`kernelsmith.evaluator.pool` for a pool's forked child) answers it.
JSON lines, one message per line, each ``{"type": <name>, ...}``:

worker -> parent
    ``STAGE`` ``{"stage": text}``: progress, for timeout reports;
    ``SEED_REQUEST``: answered ``{SEED: n}``; random seeds come one at a
    time, when needed, so the candidate can never see a future seed;
    ``TIMING_REQUEST``: wait for the device's timing slot, answered
    ``{GO: true}``;
    ``TIMING_DONE`` ``{"report": {...}}``: one timing attempt, answered
    ``{RETIME: bool}`` (time again, or the slot is freed);
    ``EVIDENCE`` ``{"trials": [...]}``: the trial outputs for the trusted
    referee, answered ``{TAKEN: true}`` once the parent copied them;
    ``EVIDENCE_KEY`` ``{"set"}``: the last trial of an input set has an
    output too large to hand over whole, answered ``{NONCE: n}``;
    ``EVIDENCE_COMMIT`` ``{"set", "outputs": [i, ...], "digests": [[...],
    ...]}``: those outputs' chunk hashes under that nonce, answered
    ``{CHUNKS: [[output, chunk], ...]}``, the chunks the parent picked
    after the hashes, handed over whole with the trial's evidence;
    ``AUDIT_PLAN`` ``{"call_bytes": n}``: the audit rounds' size, answered
    ``{CALLS: k}``, the program's calls per round the parent's rule gives
    for the time the worker reported (audit.calls_per_round);
    ``AUDIT_REQUEST`` ``{"set", "input_seed_index", "init_seed_index",
    "calls"}``: an audit round starts (audit.py), answered ``{NONCE: n}`` when the
    parent's clock starts (in a finalists' re-timing both also say
    ``"comparison": "finalist <i>"``, whose rounds they are); ``AUDIT_DONE`` ``{"digests": [[...], ...]}``
    (or ``{"error": text}``): its outputs' chunk hashes, the clock stops,
    answered ``{CHUNKS: [[output, chunk], ...]}``; ``AUDIT_EVIDENCE``
    ``{"file": name}``: those chunks' values, copied before the answer
    ``{TAKEN: true}``;
    ``RESULT`` ``{"result": {...}}``: the EvalResult dict, the last message.

The pool and its zygote (zygote.py, the forked worker's first line) speak
the same way with the names below ``READY``.

The worker's side is :class:`Channel`, the parent's :func:`converse`. The
worker writes on its original stdout, which it moves to a private
descriptor at start (:meth:`Channel.stdio`) so that anything the candidate
prints goes to stderr (the log) and cannot corrupt the protocol.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import struct
import sys
import time
from typing import Any, Optional
from .. import _core
from . import phases
from .checks.base import hacked
from .contention import HostLoadWindow
from .audit import CHUNKS as AUDIT_CHUNKS
from .audit import PICKS as AUDIT_PICKS
from .audit import ROUNDS as AUDIT_ROUNDS
from .audit import calls_per_round, reported_times
from .evidence import copy_regular, take_evidence

# -- worker -> parent: message types ------------------------------------------
STAGE = "stage"
SEED_REQUEST = "seed?"
TIMING_REQUEST = "timing?"
TIMING_DONE = "timing-done"
EVIDENCE = "evidence"
EVIDENCE_KEY = "evidence-key?"
EVIDENCE_COMMIT = "evidence-commit"
AUDIT_PLAN = "audit-plan?"
AUDIT_REQUEST = "audit?"
AUDIT_DONE = "audited"
AUDIT_EVIDENCE = "audit-evidence"
RESULT = "result"
# -- parent -> worker: the answers' keys --------------------------------------
SEED = "seed"
GO = "go"
RETIME = "retime"
TAKEN = "taken"
NONCE = "nonce"
CALLS = "calls"
CHUNKS = "chunks"
# -- pool <-> zygote, and a pool worker's first line -------------------------
INIT = "init"
HELLO = "hello"
SPAWN = "spawn"
SPAWNED = "spawned"
SIGNAL = "signal"
EXIT = "exit"
READY = "ready"


class Channel:
    """The JSON-lines protocol with the parent. ``inp``/``out`` are text
    files: the worker's original stdin/stdout (a fresh worker) or the two
    directions of the job's socket (a pool worker)."""

    def __init__(self, inp: Any, out: Any) -> None:
        self.inp = inp
        self.out = out
        #: the seeds received, in the parent's order (it names them by index;
        #: an input set's seed also picks the positions of a large output
        #: handed to the referee)
        self.seeds: list[int] = []
        #: (fd, st_dev, st_ino) of the channel's descriptors and the filter's
        #: own two (its report line's, its listener), taken before the
        #: program was loaded (guard())
        self._identity: list[tuple[int, int, int]] = []

    @classmethod
    def stdio(cls) -> "Channel":
        """Move the protocol off fd 1 so the candidate's prints go to stderr,
        and off fd 0 too: descriptors of their own (close-on-exec, so no
        subprocess inherits them) that the system-call filter can protect
        while a subprocess's child still sets up its own stdin on fd 0."""
        out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        inp = os.fdopen(os.dup(0), "r", encoding="utf-8")
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        return cls(inp, out)

    def fds(self) -> list[int]:
        return sorted({self.inp.fileno(), self.out.fileno()})

    def guard(self) -> str:
        """Before the program is loaded: the system-call filter (C++,
        kernelsmith._core) protects the channel's descriptors, and what they
        are is recorded, to be checked before every message. Returns "" or
        why the filter is not there (the check still is)."""
        problem = ""
        # the filter's lines go to a descriptor of its own on the log (the
        # program may move fd 2), protected as the channel is
        report = os.dup(2)
        try:
            _core.syscall_filter_install(self.fds() + [report], report)
            own = [report, _core.syscall_filter_listener()]
        except Exception as exc:  # noqa: BLE001 - an old kernel, another platform: the fstat check stays
            os.close(report)
            problem, own = f"system-call filter unavailable: {exc}", []
        for fd in self.fds() + own:
            st = os.fstat(fd)
            self._identity.append((fd, st.st_dev, st.st_ino))
        return problem

    def check(self) -> None:
        """The channel is still ours: no attempt the filter recorded (in a
        process the program started), the same descriptors as before the
        program was loaded. Otherwise the worker ends with a line that says
        why; the parent reads it as a "hacked" verdict."""
        if not self._identity:
            return
        reason = ""

        if _core.syscall_filter_attempts():
            reason = _core.syscall_filter_reason() or "the system-call filter refused a call of the program"
        for fd, dev, ino in self._identity:
            if reason:
                break
            try:
                st = os.fstat(fd)
                same = (st.st_dev, st.st_ino) == (dev, ino)
            except OSError:
                same = False
            if not same:
                what = "the evaluator's channel" if fd in self.fds() else "the system-call filter's descriptors"
                reason = f"the program replaced or closed {what} (fd {fd} is no longer the descriptor it was)"
        if reason:
            sys.stderr.flush()
            _core.syscall_filter_fail(reason)

    def send(self, **msg: Any) -> None:
        self.check()
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    def receive(self) -> dict[str, Any]:
        line = self.inp.readline()
        if not line:
            raise SystemExit("parent closed the channel")
        msg: dict[str, Any] = json.loads(line)
        return msg

    #: the last stage sent (where a fault outside the program's calls happened)
    last_stage = "start"

    def stage(self, stage: str) -> None:
        self.last_stage = stage
        self.send(type=STAGE, stage=stage)

    @property
    def seeds_received(self) -> int:
        return len(self.seeds)

    def seed(self) -> int:
        self.send(type=SEED_REQUEST)
        value = int(self.receive()[SEED])
        self.seeds.append(value)
        return value

    def timing_slot(self) -> float:
        """Wait for the device's timing slot (the parent holds it for us and
        pauses the device's other workers); returns the seconds waited."""
        started = time.monotonic()
        self.send(type=TIMING_REQUEST)
        self.receive()
        return time.monotonic() - started

    def hand_over(self, trials: list[dict[str, Any]]) -> None:
        """The trial outputs for the trusted referee (files in the working
        directory, named by ``trials``): the parent copies them before it
        answers."""
        self.send(type=EVIDENCE, trials=trials)
        self.receive()

    def evidence_key(self, set_name: str) -> int:
        """The nonce a trial's large outputs are hashed under, drawn by the
        parent once the outputs exist (:meth:`evidence_commit`)."""
        self.send(type=EVIDENCE_KEY, set=set_name)
        return int(self.receive()[NONCE])

    def evidence_commit(self, set_name: str, outputs: list[int], digests: list[list[int]]) -> list[tuple[int, int]]:
        """The chunk hashes of a trial's large outputs (``outputs``: their
        indices); the parent answers with the (output, chunk) pairs it
        picked after them, which go to the referee whole."""
        self.send(type=EVIDENCE_COMMIT, set=set_name, outputs=[int(o) for o in outputs], digests=digests)
        return [(int(o), int(c)) for o, c in self.receive().get(CHUNKS) or []]

    def audit_plan(self, call_bytes: int, comparison: Optional[str] = None, shape: Optional[str] = None) -> int:
        """The program's calls in each audit round, from the parent: sized by
        the time the worker reported, which the parent holds (``call_bytes``:
        one call's inputs and outputs, which bound the copies; ``comparison``:
        the finalist whose rounds these are, named as its timing reports
        name it, None for a step's own timing; ``shape``: the timed shape
        the rounds are on, whose report sizes them)."""
        self.send(
            type=AUDIT_PLAN,
            call_bytes=int(call_bytes),
            **_named(comparison),
            **({} if shape is None else {"shape": shape}),
        )
        return max(1, int(self.receive().get(CALLS) or 1))

    def audit_start(
        self,
        set_name: str,
        input_seed_index: int,
        init_seed_index: int,
        calls: int = 1,
        comparison: Optional[str] = None,
    ) -> int:
        """An audit round (audit.py): the nonce, sent as the parent's clock
        starts. ``calls``: the program's calls in the round (on as many
        copies of the set); ``comparison``: as for :meth:`audit_plan`."""
        self.send(
            type=AUDIT_REQUEST,
            set=set_name,
            input_seed_index=int(input_seed_index),
            init_seed_index=int(init_seed_index),
            calls=int(calls),
            **_named(comparison),
        )
        return int(self.receive()[NONCE])

    def audit_done(
        self, digests: Optional[list[list[int]]], error: str = "", seen: Optional[dict[str, float]] = None
    ) -> list[tuple[int, int]]:
        """The round's output hashes (or why the program's call failed): the
        parent's clock stops; the (output, chunk) pairs it wants to see.
        ``seen``: the worker's own times of the round's parts, for the
        record only."""
        self.send(
            type=AUDIT_DONE,
            **({"error": error[:2000]} if error else {"digests": digests}),
            **({"seen": seen} if seen else {}),
        )
        return [(int(o), int(c)) for o, c in self.receive().get(CHUNKS) or []]

    def audit_hand_over(self, file: str) -> None:
        """The asked chunks' values, in a file the parent copies before it answers."""
        self.send(type=AUDIT_EVIDENCE, file=file)
        self.receive()

    def timing_done(self, report: dict[str, Any]) -> bool:
        """Report one timing attempt; the parent answers whether to time
        again (contention or a drifting reference seen) and frees the slot
        when it does not."""
        self.send(type=TIMING_DONE, report=report)
        return bool(self.receive().get(RETIME))


def _named(comparison: Optional[str]) -> dict[str, str]:
    """An audit message's ``comparison`` field: absent for a step's own
    rounds (their messages are as they were before finalists had rounds)."""
    return {} if comparison is None else {"comparison": str(comparison)}


# -- who wrote it: the sender's pid on a unix socket ----------------------------
_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def pass_credentials(sock: socket.socket) -> bool:
    """Ask the kernel to hand over, with every read of ``sock`` (the parent's
    end of a unix socket), the pid of the process that wrote it
    (``SO_PASSCRED``: ``SCM_CREDENTIALS`` with each ``recvmsg``; a reader never
    gets the bytes of two writers in one read). False where the platform has
    no such thing (the parent then cannot tell who wrote a message)."""
    if not hasattr(socket, "SO_PASSCRED") or not hasattr(socket, "SCM_CREDENTIALS"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    except OSError:
        return False
    return True


def read_with_sender(sock: socket.socket, size: int = 1 << 16) -> tuple[bytes, Optional[int]]:
    """One read of ``sock`` (set up by :func:`pass_credentials`) and the pid,
    in this process's pid namespace, of the process that wrote those bytes
    (None where the kernel attached none). A process cannot name another pid
    than its own here without CAP_SYS_ADMIN, which no worker holds."""
    data, ancillary, _flags, _addr = sock.recvmsg(size, socket.CMSG_SPACE(_CREDS.size))
    sender = None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= _CREDS.size:
            sender = _CREDS.unpack(payload[: _CREDS.size])[0]
    return data, sender


def foreign_sender(sender: Optional[int], worker: Optional[int]) -> str:
    """Why a message the parent read on a worker's channel is not the
    worker's: written by another process than the worker (its pid ``worker``,
    proven by the worker's first line, before any of the program ran), or
    carrying no sender where the kernel attaches one to every write; "" when
    it is the worker's or the link cannot tell."""
    if worker is None:
        return ""
    if sender is None:
        return "a message on the evaluator's channel came without its sender's credentials"
    if sender == worker:
        return ""
    return (
        f"a process other than the worker wrote on the evaluator's channel (pid {sender}; the worker is pid "
        f"{worker}): a process the program started forged protocol messages"
    )


def converse(
    link: Any,
    job: dict[str, Any],
    timeout_s: float,
    ticket: Any = None,
    seeds: Optional[list[Any]] = None,
    evidence: Optional[dict[str, Any]] = None,
) -> tuple[Optional[dict[str, Any]], str, bool]:
    """Send the job, answer seed and timing-slot requests, take the trial
    outputs the worker hands over for the referee (into ``evidence``:
    evidence.take_evidence), return (result, last stage, timed_out). The
    wall-clock limit does not count the time the worker stood still
    (stopped while another worker on its device timed, or waiting for the
    timing slot)."""
    deadline = time.monotonic() + timeout_s
    stage = "start"
    phases.report(stage)
    buf = b""
    fd = link.fileno()
    stood = (lambda: ticket.stood_still()) if ticket is not None else (lambda: 0.0)
    if evidence is not None:
        _job_facts(job, link, ticket, evidence)
    try:
        link.write((json.dumps(job) + "\n").encode())
        while True:
            remaining = deadline + stood() - time.monotonic()
            if remaining <= 0:
                link.kill()
                return None, stage, True
            # the moment the bytes were there, read in C++ before this thread
            # takes the interpreter's lock again (a record of the parent's
            # own latency in the audit rounds' wall time: _answer_done)
            arrived = _core.timing.wait_readable(fd, min(remaining, 1.0))
            if arrived < 0:
                continue
            receive = getattr(link, "receive", None)
            chunk, sender = receive() if receive is not None else (os.read(link.fileno(), 1 << 16), None)
            refused = foreign_sender(sender, getattr(link, "worker_pid", None)) if chunk else ""
            if refused:
                # nothing of it is read: the worker is ended, and the verdict
                # is the parent's own (the messages before it were the
                # worker's; whatever came after it is not looked at)
                link.kill()
                link.wait_exit(5)
                return (
                    hacked(
                        [refused], correct=False, error=f"{refused}. Only the worker itself may speak to the evaluator."
                    ).fields,
                    stage,
                    False,
                )
            if not chunk:  # worker gone
                link.wait_exit(max(0.1, min(5.0, deadline + stood() - time.monotonic())))
                return None, stage, False
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                stage, result = _answer(msg, link, stage, ticket, seeds, evidence, arrived)
                if result is not None:
                    link.wait_exit(10)
                    return result, stage, False
    except (BrokenPipeError, ConnectionResetError):
        link.wait_exit(5)
        return None, stage, False
    finally:
        if ticket is not None:
            ticket.release()
        link.close()


def _job_facts(job: dict[str, Any], link: Any, ticket: Any, evidence: dict[str, Any]) -> None:
    """What the parent's checks of this job's messages need from the
    parent's own side (the job it sent, its gate ticket, the worker's pid
    as it names it), kept in ``evidence`` before the job is sent."""
    # whether this job times at all: a speedup from a job that does not
    # was measured by nobody (trusted/timing_reports.py)
    evidence["timing_asked"] = bool(job.get("timing", True))
    # whose audit rounds this job may run: a step's own (untagged), or
    # one set per finalist of a finalists' re-timing, named as the
    # finalist's timing reports are (answer_audit)
    count = len(job.get("finalists") or [])
    evidence["audit_comparisons"] = [f"finalist {i}" for i in range(count)] if count else [None]
    # ... and on which input sets: each timed shape of the job's task
    # (TaskConfig.timed_shapes), each comparison's rounds per shape
    config = (job.get("task") or {}).get("config") or {}
    evidence["audit_shapes"] = [str(n) for n in config.get("timing_shapes") or []] or ["get_inputs"]
    # which clock times this job (the gate's ticket): the audit rounds'
    # copies are sized for it (audit.calls_per_round)
    evidence["host_clock"] = bool(ticket.timed_on_cpu) if ticket is not None else True
    # the worker's process as this side names it (proven by the kernel's
    # credentials on its first line, else the pid the gate knows): each
    # round's host load less the worker's own use, measured here (a busy
    # host lengthens a round, which then cannot prove a report forged)
    pid = getattr(link, "worker_pid", None)
    evidence["worker_pids"] = [pid] if pid else sorted(ticket.pids) if ticket is not None else []


def _answer(
    msg: dict[str, Any],
    link: Any,
    stage: str,
    ticket: Any,
    seeds: Optional[list[Any]],
    evidence: Optional[dict[str, Any]],
    arrived: Optional[float] = None,
) -> tuple[str, Optional[dict[str, Any]]]:
    """One message of the worker answered (:func:`converse`'s loop): the
    stage the worker is in now, and its result once it sends one.
    ``arrived``: when the bytes it came in were there (time.monotonic()'s
    clock, read before this thread took the interpreter's lock)."""
    kind = msg.get("type")
    if kind == STAGE:
        stage = str(msg.get("stage"))[:200]
        phases.report(stage)
    elif kind == SEED_REQUEST:
        # drawn here, in the parent, when the worker needs it; kept
        # (``seeds``) so the trusted referee can rebuild a trial
        seed = secrets.randbits(62)
        if seeds is not None:
            seeds.append(seed)
        link.write((json.dumps({SEED: seed}) + "\n").encode())
    elif kind == TIMING_REQUEST:
        if ticket is not None:
            phases.report(f"{stage} (waiting for the device's timing slot)")
            ticket.acquire()
            phases.report(stage)
        link.write((json.dumps({GO: True}) + "\n").encode())
    elif kind == TIMING_DONE:
        report = msg.get("report") if isinstance(msg.get("report"), dict) else {}
        if evidence is not None:  # what the result's figures must be (trusted/timing_reports.py)
            evidence.setdefault("timing_reports", []).append(report)
        retime = ticket.report(report) if ticket is not None else False
        link.write((json.dumps({RETIME: retime}) + "\n").encode())
    elif kind == EVIDENCE:
        # copied before the answer: the worker waits for it, and no more of
        # the program runs until then
        if evidence is not None:
            take_evidence(evidence, msg.get("trials"))
        link.write((json.dumps({TAKEN: True}) + "\n").encode())
    elif kind in (EVIDENCE_KEY, EVIDENCE_COMMIT):
        link.write((json.dumps(answer_commit(msg, evidence)) + "\n").encode())
    elif kind in (AUDIT_PLAN, AUDIT_REQUEST, AUDIT_DONE, AUDIT_EVIDENCE):
        answer = answer_audit(msg, evidence, arrived)
        link.write((json.dumps(answer) + "\n").encode())
        audits = (evidence or {}).get("audits") or [{}]
        if kind == AUDIT_REQUEST and audits[-1].get("nonce") == answer[NONCE]:
            # the clock starts once the nonce is written: the worker cannot
            # have begun before (a late start only shortens the round)
            audits[-1]["started"] = time.monotonic()
    elif kind == RESULT:
        return stage, msg.get(RESULT) or {}
    return stage, None


#: the most audit rounds a job may ask for per comparison it audits and
#: timed shape: a step's job audits one comparison, a finalists' job one per
#: finalist it was sent (``audit_comparisons``), each on every timed shape
#: of the task (``audit_shapes``; both set by converse from the parent's own
#: job), so a job's rounds stay within this times what the parent sent
_MOST_AUDITS = 4 * AUDIT_ROUNDS


def answer_audit(
    msg: dict[str, Any], evidence: Optional[dict[str, Any]], arrived: Optional[float] = None
) -> dict[str, Any]:
    """The parent's side of an audit round's messages (audit.py): the nonce,
    the round's wall time on the parent's clock and the chunks it asks for,
    the asked chunks' values copied out of the worker's reach; all kept in
    ``evidence["audits"]`` for the trusted check (trusted/audit_check.py)."""
    kind = msg.get("type")
    audits: list[dict[str, Any]] = evidence.setdefault("audits", []) if evidence is not None else []
    store = evidence if evidence is not None else {}
    # whose rounds: a step's own (None) or a finalist's, by the name its
    # timing reports carry ("finalist 3")
    comparison = msg.get("comparison")
    comparison = str(comparison)[:200] if comparison is not None else None
    if kind == AUDIT_PLAN:
        return _answer_plan(msg, store, comparison)
    if kind == AUDIT_REQUEST:
        nonce = secrets.randbits(62)
        allowed = store.get("audit_comparisons", [None])
        shapes = store.get("audit_shapes")
        name = str(msg.get("set"))[:200]
        mine = sum(1 for a in audits if a.get("comparison") == comparison and a.get("set") == name)
        if comparison in allowed and (shapes is None or name in shapes) and mine < _MOST_AUDITS:
            plans = store.get("audit_plans") or {}
            # a plan that named no shape where the parent knows none (a test's
            # store without the job's shapes) is for whichever set comes
            planned = plans.get((comparison, name)) or plans.get((comparison, None)) or {}
            audits.append(
                {
                    "set": name,
                    "input_seed_index": msg.get("input_seed_index"),
                    "init_seed_index": msg.get("init_seed_index"),
                    "calls": msg.get("calls", 1),
                    # what the parent told the worker to make, and the
                    # bytes per call it was told (checked by the referee's)
                    "planned": planned.get("calls", 1),
                    "declared_bytes": planned.get("call_bytes"),
                    "host_clock": planned.get("host_clock", True),
                    "nonce": nonce,
                    **({} if comparison is None else {"comparison": comparison}),
                }
            )
            # started before the nonce is written, stopped after the clock
            # stops: its own reads are never inside the round's wall time
            window = HostLoadWindow()
            window.start(store.get("worker_pids") or ())
            audits[-1]["window"] = window
        elif evidence is not None:
            # more rounds than the harness runs, or rounds of a comparison
            # this job has none of: what they were for is kept, the rounds not
            evidence["audits_refused"] = True
            refused = evidence.setdefault("audits_refused_for", [])
            if comparison not in refused and len(refused) < 64:
                refused.append(comparison)
        return {NONCE: nonce}
    current = audits[-1] if audits else {}
    if kind == AUDIT_DONE:
        return _answer_done(msg, current, arrived)
    # AUDIT_EVIDENCE: copied now, before any more of the program runs
    if "picks" in current and "file" not in current and evidence is not None and "src" in evidence:
        try:
            current["file"] = copy_regular(
                os.path.join(evidence["src"], os.path.basename(str(msg.get("file")))),
                evidence["dir"],
                int(evidence.get("max_bytes") or (1 << 31)),
            )
        except (OSError, ValueError) as exc:
            current["not_handed_over"] = f"{type(exc).__name__}: {exc}"[:300]
    return {TAKEN: True}


def _answer_plan(msg: dict[str, Any], store: dict[str, Any], comparison: Optional[str]) -> dict[str, Any]:
    """An audit plan (``AUDIT_PLAN``): the calls per round of the named
    shape's rounds, from that comparison's own last report of it."""
    declared = msg.get("call_bytes")
    declared = declared if isinstance(declared, int) and 0 <= declared < 1 << 62 else 0
    shapes = store.get("audit_shapes") or [None]
    shape = msg.get("shape")
    shape = str(shape)[:200] if shape is not None else shapes[0]
    # sized by that comparison's own last report of the shape
    reported = reported_times(store.get("timing_reports"), shape, comparison=comparison)
    # the parent's own word on the clock (the gate's ticket), not the worker's
    host = bool(store.get("host_clock", True))
    calls = calls_per_round(reported[0] / 1e3 if reported else 0.0, declared, host)
    plan = {"calls": calls, "call_bytes": declared, "host_clock": host}
    store.setdefault("audit_plans", {})[(comparison, shape)] = plan
    if comparison is None and shape == shapes[0]:
        store["audit_plan"] = plan
    return {CALLS: calls}


def _answer_done(msg: dict[str, Any], current: dict[str, Any], arrived: Optional[float] = None) -> dict[str, Any]:
    """A round's hashes (``AUDIT_DONE``): the parent's clock stops, the
    hashes are kept, the chunks to hand over picked with ``secrets``.
    ``arrived`` (when the bytes were there, before this thread had the
    interpreter's lock again) is kept beside as ``wall_arrival_s``, a
    record of the parent's own latency in ``wall_s``, never judged."""
    ended = time.monotonic()
    if "started" not in current or "wall_s" in current:
        return {CHUNKS: []}
    current["wall_s"] = ended - current["started"]
    if arrived is not None and current["started"] <= arrived <= ended:
        current["wall_arrival_s"] = arrived - current["started"]
    window = current.pop("window", None)
    if window is not None:
        current["load"] = window.stop()
    digests: list[list[int]] = msg.get("digests") or []
    if msg.get("error") or not _digest_lists(digests):
        current["error"] = str(msg.get("error") or "malformed hashes")[:2000]
        return {CHUNKS: []}
    current["digests"] = digests
    seen = msg.get("seen")
    if isinstance(seen, dict):  # the worker's word, kept for the record (census), never judged
        current["seen"] = {str(k)[:20]: float(v) for k, v in list(seen.items())[:10] if isinstance(v, (int, float))}
    picks = _draw([[o, c] for o, d in enumerate(digests) for c in range(len(d))], AUDIT_PICKS)
    current["picks"] = picks
    return {CHUNKS: picks}


def _draw(pool: list[list[int]], count: int) -> list[list[int]]:
    """``count`` distinct (output, chunk) pairs of ``pool`` (all where fewer),
    drawn with ``secrets`` after the worker sent their hashes."""
    picks: list[list[int]] = []
    while pool and len(picks) < count:
        picks.append(pool.pop(secrets.randbelow(len(pool))))
    return picks


#: chunks of each committed output the parent picks (protocol.answer_commit)
COMMIT_PICKS = 4


def answer_commit(msg: dict[str, Any], evidence: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The parent's side of a trial's commitment to its large outputs
    (``EVIDENCE_KEY`` then ``EVIDENCE_COMMIT``, once per input set): a nonce
    drawn once the outputs exist, then, after their chunk hashes under it,
    ``COMMIT_PICKS`` chunks of each picked with ``secrets``. The sample the
    referee otherwise sees sits at positions the worker derives from its
    input seed (evidence.evidence_positions); these chunks are chosen after
    the hashes, so an output right only where the sample looks is caught
    (trusted/referee_check.py). Kept in ``evidence["commits"]`` by set; a
    second key or commitment for a set is noted (``commit_repeated``)."""
    store = evidence if evidence is not None else {}
    commits: dict[str, Any] = store.setdefault("commits", {})
    name = str(msg.get("set"))[:200]
    if msg.get("type") == EVIDENCE_KEY:
        nonce = secrets.randbits(62)
        if name in commits or len(commits) >= 64:
            store["commit_repeated"] = True
        else:
            commits[name] = {"nonce": nonce}
        return {NONCE: nonce}
    entry = commits.get(name)
    if entry is None or "digests" in entry:
        store["commit_repeated"] = True
        return {CHUNKS: []}
    outputs: Any = msg.get("outputs")
    digests: Any = msg.get("digests")
    if not (
        isinstance(outputs, list)
        and all(isinstance(o, int) and 0 <= o < 64 for o in outputs)
        and _digest_lists(digests)
        and len(digests) == len(outputs)
    ):
        entry["malformed"] = True
        return {CHUNKS: []}
    picks = [pick for o, d in zip(outputs, digests) for pick in _draw([[o, c] for c in range(len(d))], COMMIT_PICKS)]
    entry.update(outputs=outputs, digests=digests, picks=picks)
    return {CHUNKS: picks}


def _digest_lists(digests: Any) -> bool:
    """Hashes as the worker must send them: per output a list of at most
    AUDIT_CHUNKS int64 values."""
    return (
        isinstance(digests, list)
        and 0 < len(digests) <= 64
        and all(
            isinstance(d, list)
            and len(d) <= AUDIT_CHUNKS
            and all(isinstance(x, int) and -(1 << 63) <= x < 1 << 63 for x in d)
            for d in digests
        )
    )


__all__ = [
    "Channel",
    "answer_audit",
    "answer_commit",
    "EVIDENCE_KEY",
    "EVIDENCE_COMMIT",
    "AUDIT_PLAN",
    "CALLS",
    "AUDIT_REQUEST",
    "AUDIT_DONE",
    "AUDIT_EVIDENCE",
    "NONCE",
    "CHUNKS",
    "converse",
    "pass_credentials",
    "read_with_sender",
    "foreign_sender",
    "STAGE",
    "SEED_REQUEST",
    "TIMING_REQUEST",
    "TIMING_DONE",
    "EVIDENCE",
    "RESULT",
    "SEED",
    "GO",
    "RETIME",
    "TAKEN",
    "INIT",
    "HELLO",
    "SPAWN",
    "SPAWNED",
    "SIGNAL",
    "EXIT",
    "READY",
]
