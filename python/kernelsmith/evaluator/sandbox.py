"""Start one sandboxed worker for one candidate and talk to it.

Isolation, outermost first:

* a fresh process (``python -m kernelsmith.evaluator.worker``) in its own
  session/process group; a hard wall-clock timeout kills the whole group;
* ``bwrap`` when it is installed and works here: read-only view of the host
  filesystem except the worker's temporary directory, a minimal ``/dev`` (plus
  the NVIDIA device nodes), new PID/IPC/UTS/network namespaces, killed with
  its parent;
* rlimits set by the worker before any candidate code runs: no core dumps,
  CPU time (RLIMIT_CPU), address space (RLIMIT_AS, CPU backends only: CUDA
  reserves more virtual memory than any sane limit);
* an environment without keys, tokens and secrets, ``HOME`` and ``TMPDIR``
  pointing into the temporary directory, ``CUDA_VISIBLE_DEVICES`` set to the
  worker's device.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ..result import EvalResult
from .._process import kill_process, package_python_path
from .checks.base import hacked
from .protocol import converse, pass_credentials, read_with_sender
from ..llm.redact import SECRET_ENV_VARS

_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|CERT)", re.IGNORECASE)
_SECRET_PREFIX = (
    "AWS_",
    "AZURE_",
    "GOOGLE_",
    "GCP_",
    "GCLOUD_",
    "HF_",
    "HUGGING",
    "OPENAI",
    "ANTHROPIC",
    "WANDB",
    "GITHUB",
    "GH_",
    "GITLAB",
    "SSH_",
    "GPG_",
    "NETRC",
    "DOCKER",
    "KUBE",
    "NPM_",
    "PYPI",
    "TWINE",
    "MISTRAL",
    "GEMINI",
    "COHERE",
    "TOGETHER",
    "DEEPSEEK",
    "GROQ",
    "XAI_",
    "OPENROUTER",
)


def scrub_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of ``env`` without anything that looks like a credential: the
    one scrubber for every process that runs untrusted code (evaluation
    workers, curation's execution filter, in-place test runs) and the one
    the LLM package re-exports."""
    return {
        k: v
        for k, v in env.items()
        if not _SECRET.search(k)
        and not k.upper().startswith(_SECRET_PREFIX)
        and k not in SECRET_ENV_VARS
        and not k.endswith(("_API_KEY", "_AUTH_TOKEN"))
    }


@dataclass
class Limits:
    timeout_s: float = 300.0
    # None: 2 x timeout_s of CPU time after the worker's imports
    cpu_limit_s: Optional[float] = None
    # RLIMIT_AS in MiB for backends that support it; None or 0: no limit
    memory_limit_mb: Optional[int] = 8192


_BWRAP_PROBE: dict[str, tuple[bool, str]] = {}


def _bwrap_args(workdir: str, devices: bool = True) -> list[str]:
    args = [
        "bwrap",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--bind",
        workdir,
        workdir,
        "--chdir",
        workdir,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
    ]
    # GPU device nodes (the minimal /dev has none)
    for node in (sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri"))) if devices else []:
        args += ["--dev-bind", node, node]
    return args + ["--"]


def bwrap_status() -> tuple[bool, str]:
    """(usable, note). Probes once per process: bwrap can be installed but
    fail without user namespaces (some containers)."""
    if "result" in _BWRAP_PROBE:
        return _BWRAP_PROBE["result"]
    path = shutil.which("bwrap")
    if path is None:
        status = (False, "bwrap not installed")
    else:
        with tempfile.TemporaryDirectory(prefix="ks-probe-") as d:
            try:
                proc = subprocess.run(_bwrap_args(d) + ["/bin/true"], capture_output=True, timeout=20)
                ok = proc.returncode == 0
                status = (ok, "" if ok else f"bwrap failed: {proc.stderr.decode(errors='replace').strip()[:300]}")
            except (OSError, subprocess.TimeoutExpired) as exc:
                status = (False, f"bwrap failed: {exc}")
    _BWRAP_PROBE["result"] = status
    return status


def _describe_signal(returncode: int) -> tuple[str, str]:
    sig = -returncode
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    if sig == signal.SIGSEGV:
        return (
            "crash",
            f"the worker crashed with a segmentation fault ({name}): invalid memory access, e.g. an out-of-bounds pointer or unmasked load/store",
        )
    if sig == signal.SIGXCPU:
        return "timeout", f"CPU time limit exceeded ({name}): the program runs too long or loops forever"
    if sig == signal.SIGKILL:
        return "oom", f"the worker was killed ({name}), most likely for exhausting memory"
    if sig in (signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT):
        return "crash", f"the worker crashed ({name})"
    return "crash", f"the worker died from {name}"


def worker_environment(
    backend: Any, workdir: str, device: Optional[str], cpu_threads: Optional[int] = None
) -> dict[str, str]:
    """The environment of a worker (fresh process or pool zygote): no
    credentials, caches and home inside ``workdir``, pinned to ``device``."""
    env = scrub_env(dict(os.environ))
    env.update(backend.worker_env(workdir, cpu_threads))
    env.update(
        HOME=workdir,
        TMPDIR=workdir,
        PYTHONPATH=package_python_path(),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONFAULTHANDLER="1",
        # a pool child runs under a uid with no passwd entry: getpass
        # (torch.compile's cache folder, among others) reads these first
        USER="kernelsmith-worker",
        LOGNAME="kernelsmith-worker",
    )
    # glibc's allocator with fixed thresholds: by default it moves its mmap
    # threshold as blocks are freed and gives heap memory back to the
    # system, so an eager reference that allocates a few MB per op either
    # reuses the heap or page-faults fresh memory on every call, depending on
    # what ran before in the process. The example's reference (2048 x 2048,
    # five eager ops) had per-process medians 2.2x apart by default and 1.04x
    # apart with both thresholds fixed (benchmarks/bench_cpu_allocator.py,
    # docs/evaluator.md "A steady allocator"). Both sides of a timing run in the same
    # process, so this steadies the figures and favours neither.
    for key, value in (("MALLOC_MMAP_THRESHOLD_", str(32 << 20)), ("MALLOC_TRIM_THRESHOLD_", str(1 << 30))):
        env.setdefault(key, value)
    if cpu_threads:
        # OpenMP/MKL pools sized before torch starts; torch.set_num_threads
        # in the worker makes it exact
        env.update(OMP_NUM_THREADS=str(cpu_threads), MKL_NUM_THREADS=str(cpu_threads))
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device)
    return env


def sandbox_prefix(
    isolation: str, workdir: str, read_only: Sequence[str] = (), writable: Sequence[str] = (), devices: bool = True
) -> tuple[list[str], bool, str]:
    """(command prefix, bwrap used, note) for ``isolation``; under bwrap,
    ``read_only`` folders inside ``workdir`` stay read-only and ``writable``
    ones outside it become writable; ``devices=False`` leaves the GPU device
    nodes out (CPU-only work such as curation's execution filter). The one
    sandbox primitive: evaluation workers, the referee, curation and
    in-place test runs all start through it."""
    note = ""
    use_bwrap = False
    if isolation in ("auto", "bwrap"):
        use_bwrap, note = bwrap_status()
        if isolation == "bwrap" and not use_bwrap:
            raise RuntimeError(f"isolation='bwrap' requested but unavailable: {note}")
    if not use_bwrap:
        return [], False, note
    args = _bwrap_args(workdir, devices)[:-1]
    for path in writable:
        args += ["--bind", path, path]
    for path in read_only:
        args += ["--ro-bind", path, path]
    return args + ["--"], True, note


def make_job(
    task: Any,
    backend: Any,
    cand_path: str,
    ref_path: str,
    trials: Optional[int],
    timing: bool,
    limits: Limits,
    cpu_threads: Optional[int],
    finalists: Sequence[str] = (),
) -> dict[str, Any]:
    cpu_limit = limits.cpu_limit_s if limits.cpu_limit_s is not None else 2 * limits.timeout_s
    return {
        "task": task.to_dict(),
        "backend": backend.name,
        "candidate_path": cand_path,
        "reference_path": ref_path,
        "trials": trials,
        "timing": timing,
        "cpu_limit_s": cpu_limit,
        "cpu_threads": cpu_threads,
        "memory_limit_mb": limits.memory_limit_mb if backend.supports_address_space_limit else None,
        "finalists": list(finalists),
    }


def write_job_files(workdir: str, task: Any, source: str, finalists: Sequence[str] = ()) -> tuple[str, str, list[str]]:
    """candidate.py, reference.py and, for a finalists' job, candidate_<i>.py."""
    cand_path = os.path.join(workdir, "candidate.py")
    ref_path = os.path.join(workdir, "reference.py")
    Path(cand_path).write_text(source)
    Path(ref_path).write_text(task.reference_source)
    paths = []
    for i, text in enumerate(finalists):
        paths.append(os.path.join(workdir, f"candidate_{i}.py"))
        Path(paths[-1]).write_text(text)
    return cand_path, ref_path, paths


def finish_result(
    raw: Optional[dict],
    *,
    stage: str,
    timed_out: bool,
    returncode: Optional[int],
    log_text: str,
    cand_path: str,
    timeout_s: float,
    isolation: str,
    note: str,
) -> EvalResult:
    """The EvalResult of one conversation: the worker's own report, or what
    its death says (signal, exit status, timeout, the stage it was in)."""
    refused = _filter_reason(log_text, returncode)
    if refused:
        # the worker ended itself over its channel (protocol.Channel.check, the
        # C++ filter's supervisor): whatever it sent before does not count
        raw = hacked(
            [refused],
            correct=False,
            error=f"{refused}. The evaluator's channel and other processes are not the program's to touch.",
        ).fields
    if raw is None:
        if timed_out:
            category, error = "timeout", f"wall-clock limit of {timeout_s:g} s exceeded (worker killed) during: {stage}"
        elif returncode is not None and returncode < 0:
            category, error = _describe_signal(returncode)
            error += f" (during: {stage})"
        else:
            category = "crash"
            error = (
                f"the worker exited with status {returncode} before reporting a result (during: {stage}); "
                "the program must not call os._exit, sys.exit or kill its process"
            )
        fault = _candidate_fault_lines(log_text, cand_path)
        if fault:
            error += "\n" + fault
        result = EvalResult(category=category, error=error, compiled=stage not in ("import", "load candidate", "start"))
    else:
        try:
            result = EvalResult.from_dict(raw)
        except (TypeError, ValueError) as exc:  # the worker's process is the candidate's too
            result = EvalResult(category="crash", error=f"the worker sent an invalid result ({exc})")
    result.isolation = isolation
    result.isolation_note = note
    result.log_tail = log_text[-2000:].replace(cand_path, "candidate.py")
    result.error = result.error.replace(cand_path, "candidate.py")
    return result


#: the line the worker's system-call filter (and Channel.check) writes on
#: fd 2 before it ends the worker (kernelsmith._core.SYSCALL_FILTER_LOG_PREFIX)
FILTER_PREFIX = "kernelsmith-syscall-filter: "


def _filter_reason(log_text: str, returncode: Optional[int]) -> str:
    """Why the worker's filter ended it (its last line on the log), or ""."""
    at = log_text.rfind("\n" + FILTER_PREFIX)
    if at >= 0:
        return log_text[at + 1 + len(FILTER_PREFIX) :].split("\n", 1)[0].strip()[:500]
    if returncode == -signal.SIGSYS:  # SECCOMP_RET_KILL_PROCESS: the only other way the filter ends a process
        return (
            "the program was killed by the evaluator's system-call filter (SIGSYS): a system call of another "
            "ABI (int 0x80, x32)"
        )
    return ""


def run_worker(
    *,
    task: Any,
    source: str,
    backend: Any,
    trials: Optional[int],
    timing: bool,
    limits: Limits,
    device: Optional[str],
    isolation: str = "auto",
    gate: Any = None,
    cpu_threads: Optional[int] = None,
    finalists: Sequence[str] = (),
    referee: Any = None,
) -> EvalResult:
    """Evaluate ``source`` on ``task`` in a fresh sandboxed worker (the
    ``mode="fresh"`` evaluator: one Python start-up per candidate). With a
    ``referee`` (evaluator/referee.py) a correct result is re-checked by the
    trusted process and the timing cross-checked against the slot, as in the
    pool; a finalists' re-timing has each finalist's audit rounds checked."""
    started = time.monotonic()
    private = tempfile.mkdtemp(prefix="ks-eval-")  # parent-only: the log
    workdir = tempfile.mkdtemp(prefix="ks-work-")  # the worker's only writable place
    try:
        cand_path, ref_path, finalist_paths = write_job_files(workdir, task, source, finalists)
        env = worker_environment(backend, workdir, device, cpu_threads)
        prefix, use_bwrap, note = sandbox_prefix(isolation, workdir)
        cmd = prefix + [sys.executable, "-m", "kernelsmith.evaluator.worker"]
        job = make_job(task, backend, cand_path, ref_path, trials, timing, limits, cpu_threads, finalist_paths)
        if referee is not None and not finalists:
            # the trusted referee decides a degenerate task's forms and probes
            # once per task, as in the pool (probes.py); None: the worker does
            job.update(referee.job_facts(task, limits.timeout_s))
        log_path = os.path.join(private, "worker.log")
        link = _start_worker(cmd, workdir, env, log_path, use_bwrap)
        ticket = (
            gate.join(link.signal, key=task.id, pids={link.proc.pid}, timed_on_cpu=device is None) if gate else None
        )
        seeds: list[int] = []
        # the trial outputs the worker hands over, copied where it cannot write
        evidence: dict[str, Any] = {"src": workdir, "dir": private}
        if referee is not None:
            evidence["max_bytes"] = referee.evidence_limit(task)  # sized by the task's outputs
            evidence["max_trials"] = referee.most_trials(task)
        try:
            raw, stage, timed_out = converse(link, job, limits.timeout_s, ticket, seeds, evidence)
        finally:
            if ticket is not None:
                gate.leave(ticket)
        if isinstance(raw, dict):
            raw.pop("referee", None)  # the referee takes only what was handed over
        result = finish_result(
            raw,
            stage=stage,
            timed_out=timed_out,
            returncode=link.returncode(),
            log_text=Path(log_path).read_text(errors="replace"),
            cand_path=cand_path,
            timeout_s=limits.timeout_s,
            isolation="bwrap" if use_bwrap else "process",
            note=note,
        )
        if ticket is not None:
            _merge_ticket(result, ticket)  # first: the referee may mark the timing unreliable
        if referee is not None:
            # curation and in-place runs import this module too, without a referee
            # lazy: the parent's checks, loaded only where a referee judges
            from .trusted import finalist_checks, trusted_checks

            if finalists:  # each finalist's row against its own audit rounds
                finalist_checks(result, evidence, seeds, task, private, referee)
            else:
                trusted_checks(
                    result, evidence, seeds, task, private, referee, ticket.slots if ticket is not None else None
                )
        result.wall_s = round(time.monotonic() - started, 3)
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


def _start_worker(cmd: list[str], workdir: str, env: dict, log_path: str, use_bwrap: bool) -> ProcessLink:
    """A fresh worker started on its channel: one socket (the worker's stdin
    and stdout), as in the pool. The kernel names the writer of every read
    (SO_PASSCRED), so a process the program forks cannot write the worker's
    messages."""
    ours, theirs = socket.socketpair()
    try:
        credentials = pass_credentials(ours)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, stdin=theirs, stdout=theirs, stderr=log, cwd=workdir, env=env, start_new_session=True
            )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return ProcessLink(proc, ours, bwrap=use_bwrap, credentials=credentials)


def _merge_ticket(result: EvalResult, ticket: Any) -> None:
    """What the trusted side saw: the load per timing attempt, the verdict on
    it, and how long the worker stood still (its phases include that)."""
    result.phases = {**result.phases, "stopped": ticket.stopped_s()}
    if not ticket.attempts:
        return
    for key, value in ticket.result_fields().items():
        setattr(result, key, value)


def _candidate_fault_lines(log_text: str, cand_path: str) -> str:
    """faulthandler's lines that point into the candidate (for crashes)."""
    lines = [ln.strip().replace(cand_path, "candidate.py") for ln in log_text.splitlines() if cand_path in ln]
    if not lines:
        return ""
    return "Crash location (most recent call first):\n" + "\n".join(f"  {ln}" for ln in lines[:8])


class ProcessLink:
    """The conversation with a fresh worker process over its channel, one
    socket (the worker's stdin and stdout). With ``credentials`` (SO_PASSCRED
    asked before the worker started) every read names its writer: the first
    message's writer is the worker (it writes a stage before any of the
    program is loaded), and a later message from another process is refused
    by converse (protocol.foreign_sender), as in the pool."""

    def __init__(
        self, proc: subprocess.Popen, sock: socket.socket, bwrap: bool = False, credentials: bool = False
    ) -> None:
        self.proc = proc
        self.sock = sock
        self.bwrap = bwrap
        self.credentials = credentials
        #: the worker's pid as the kernel names its writes (under bwrap not
        #: ``proc.pid``, bwrap's own), from its first message; None until
        #: then, or without credentials (then converse cannot tell who wrote)
        self.worker_pid: Optional[int] = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self) -> tuple[bytes, Optional[int]]:
        """One read of the channel and who wrote it."""
        if not self.credentials:
            return os.read(self.sock.fileno(), 1 << 16), None
        chunk, sender = read_with_sender(self.sock)
        if chunk and self.worker_pid is None:
            self.worker_pid = sender or None
        return chunk, sender

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        kill_process(self.proc)

    def wait_exit(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_process(self.proc)

    def returncode(self) -> Optional[int]:
        rc = self.proc.returncode
        if self.bwrap and rc is not None and rc > 128:
            # bwrap's PID-namespace init reports a signal death as 128 + signal
            rc = -(rc - 128)
        return rc

    def close(self) -> None:
        if self.proc.poll() is None:
            kill_process(self.proc)
        try:
            self.sock.close()
        except OSError:
            pass
