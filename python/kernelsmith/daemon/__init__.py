"""The evaluation daemon's client: one warm evaluator shared by commands.

A single ``kernelsmith eval`` in a new process pays Python, the pool's
zygote (torch, the backend), its trusted referee and a device context
before the candidate's first line runs. The daemon (``server.py``) holds an
:class:`~kernelsmith.evaluator.Evaluator` with its warm pools between
commands, so a repeated evaluation costs the candidate's own work plus a
round trip on a local unix socket. Candidate code still runs only in the
pool's sandboxed children, never in the daemon (docs/evaluator.md,
"The evaluation daemon").

Where it lives: ``$XDG_RUNTIME_DIR/kernelsmith`` (when that is ours) or
``/tmp/kernelsmith-$UID``, a ``0700`` folder owned by the user; one daemon
per evaluation environment (the variables that change what a worker does:
``CUDA_VISIBLE_DEVICES``, ``TRITON_*``, ``PYTHONPATH``..., and the Python
executable), socket ``daemon-<key>.sock`` (``0600``), lock, log. Started on
first use, stopped after ``KERNELSMITH_DAEMON_IDLE`` seconds without a
request (default 600). ``KERNELSMITH_DAEMON=0`` (or ``--no-daemon``)
evaluates in the calling process instead.

This module imports nothing heavy (no torch, no evaluator): a client whose
daemon is warm pays only the socket round trip.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional
from .. import __version__
from .._process import package_python_path
from ..result import EvalResult

log = logging.getLogger(__name__)

#: seconds without a request after which a daemon stops (KERNELSMITH_DAEMON_IDLE)
DEFAULT_IDLE_S = 600.0
#: how long a client waits for a daemon it started to listen
START_TIMEOUT_S = 60.0
#: the largest request or answer line (a task plus a candidate; a result)
MAX_MESSAGE_BYTES = 64 << 20
#: Evaluator options a request may carry (the daemon keys its evaluators by them)
EVALUATOR_OPTIONS = (
    "backend",
    "workers",
    "devices",
    "timeout_s",
    "cpu_limit_s",
    "memory_limit_mb",
    "isolation",
    "timing",
    "spares",
    "cpu_threads",
)
#: variables that change what an evaluation does: a daemon serves one set of values
_ENV_NAMES = (
    "PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "CC",
    "CXX",
    "TMPDIR",
    "XDG_CACHE_HOME",
)
_ENV_PREFIXES = (
    "CUDA_",
    "NVIDIA_",
    "TRITON_",
    "POCL_",
    "PYOPENCL_",
    "OCL_",
    "TORCH",
    "PYTORCH_",
    "OMP_",
    "MKL_",
    "HIP_",
    "ROCR_",
    "KS_",
    "KERNELSMITH_",
)


class DaemonError(RuntimeError):
    """The daemon could not serve the request (not started, crashed, refused);
    the caller may evaluate in its own process instead."""


class RemoteError(RuntimeError):
    """The evaluation raised in the daemon (e.g. bad trials, a pool fault)."""


def enabled(flag: Optional[bool] = None) -> bool:
    """Whether to use the daemon: ``flag`` when given, else
    ``KERNELSMITH_DAEMON`` (0/false/no/off: no), else yes."""
    if flag is not None:
        return bool(flag)
    return os.environ.get("KERNELSMITH_DAEMON", "1").strip().lower() not in ("0", "false", "no", "off", "")


def idle_seconds() -> float:
    raw = os.environ.get("KERNELSMITH_DAEMON_IDLE")
    if raw is None:
        return DEFAULT_IDLE_S
    try:
        value = float(raw)
    except ValueError:
        raise DaemonError(f"KERNELSMITH_DAEMON_IDLE must be a number of seconds, got '{raw}'") from None
    if value <= 0:
        raise DaemonError(f"KERNELSMITH_DAEMON_IDLE must be positive, got '{raw}'")
    return value


# -- where ------------------------------------------------------------------
def _private_dir(path: str) -> Optional[str]:
    """``path`` as a 0700 folder of ours (created if missing); None when it
    exists but belongs to someone else or others may enter it: a folder
    another user made could hold their socket under our daemon's name."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def runtime_dir() -> str:
    """The daemon's folder: ``KERNELSMITH_DAEMON_DIR``, else
    ``$XDG_RUNTIME_DIR/kernelsmith``, else ``/tmp/kernelsmith-$UID``; always
    a 0700 folder owned by this user."""
    explicit = os.environ.get("KERNELSMITH_DAEMON_DIR")
    candidates = [explicit] if explicit else []
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if not explicit and xdg and os.path.isdir(xdg):
        candidates.append(os.path.join(xdg, "kernelsmith"))
    if not explicit:
        candidates.append(f"/tmp/kernelsmith-{os.getuid()}")
    for path in candidates:
        found = _private_dir(path)
        if found is not None:
            return found
    raise DaemonError(
        f"{candidates[-1]}: not a 0700 folder of uid {os.getuid()} (someone else's?); remove it or "
        "set KERNELSMITH_DAEMON_DIR"
    )


def environment_key(env: Optional[dict[str, str]] = None) -> str:
    """A short hash of what makes evaluations differ between callers: the
    Python executable and the variables above (without the daemon's own)."""
    env = dict(os.environ if env is None else env)
    picked = sorted(
        (k, v)
        for k, v in env.items()
        if (k in _ENV_NAMES or k.startswith(_ENV_PREFIXES)) and not k.startswith("KERNELSMITH_DAEMON")
    )
    blob = json.dumps([sys.executable, picked])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def build_id() -> str:
    """This kernelsmith's build: its version and the size and modification
    time of every module and extension of the package, so a daemon started
    before an upgrade or an edit is told apart (and replaced)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(f"{__version__}|{root}".encode())
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".so")):
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except OSError:
                    continue
                h.update(
                    f"{os.path.relpath(os.path.join(dirpath, name), root)}:{st.st_size}:{st.st_mtime_ns};".encode()
                )
    return f"{__version__}+{h.hexdigest()[:12]}"


class Paths:
    """The files of the daemon for one environment key."""

    def __init__(self, key: Optional[str] = None, directory: Optional[str] = None) -> None:
        self.key = key or environment_key()
        self.dir = directory or runtime_dir()
        base = os.path.join(self.dir, f"daemon-{self.key}")
        self.socket, self.lock, self.log = base + ".sock", base + ".lock", base + ".log"

    @classmethod
    def all(cls) -> list["Paths"]:
        """Every daemon's files in the folder (any environment)."""
        directory = runtime_dir()
        keys = sorted(
            n[len("daemon-") : -len(".sock")]
            for n in os.listdir(directory)
            if n.startswith("daemon-") and n.endswith(".sock")
        )
        return [cls(k, directory) for k in keys]


# -- talking ----------------------------------------------------------------
def _connect(path: str, timeout_s: Optional[float]) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def read_message(sock: socket.socket) -> Optional[dict[str, Any]]:
    """One JSON line; None at end of stream before a whole line."""
    chunks: list[bytes] = []
    size = 0
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return None
        nl = data.find(b"\n")
        if nl >= 0:
            chunks.append(data[:nl])
            break
        chunks.append(data)
        size += len(data)
        if size > MAX_MESSAGE_BYTES:
            raise ValueError(f"message over {MAX_MESSAGE_BYTES} bytes")
    return json.loads(b"".join(chunks))


def _read_line(reader: Any) -> Optional[dict[str, Any]]:
    """One JSON line from a buffered reader (several may arrive in one read);
    None at end of stream before a whole line."""
    line = reader.readline(MAX_MESSAGE_BYTES + 1)
    if not line.endswith(b"\n"):
        if len(line) > MAX_MESSAGE_BYTES:
            raise ValueError(f"message over {MAX_MESSAGE_BYTES} bytes")
        return None
    return json.loads(line)


def send_message(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.sendall(json.dumps(msg).encode() + b"\n")


def request(paths: Paths, msg: dict[str, Any], timeout_s: Optional[float] = 10.0) -> dict[str, Any]:
    """One request to a running daemon; its answer. ConnectionError /
    FileNotFoundError when none listens; DaemonError when it hung up without
    answering (it died)."""
    try:
        sock = _connect(paths.socket, timeout_s)
    except (FileNotFoundError, ConnectionRefusedError):
        raise  # none listens: the caller may start one
    except OSError as exc:
        raise DaemonError(f"cannot connect to the evaluation daemon at {paths.socket}: {exc}") from exc
    with sock:
        try:
            send_message(sock, msg)
            reader = sock.makefile("rb")
            answer = _read_line(reader)
            while answer is not None and set(answer) == {"stage"}:
                # a streamed stage of this evaluation: shown as an in-process
                # evaluation's would be (evaluator.phases, kernelsmith eval's line)
                from ..evaluator import phases  # lazy: evaluator pulls in yaml, which daemon does not load on its own

                phases.report(str(answer["stage"]))
                answer = _read_line(reader)
        except (OSError, ValueError) as exc:  # reset, broken pipe, timeout, garbage
            raise DaemonError(
                f"the evaluation daemon gave no answer ({type(exc).__name__}: {exc})" + _log_hint(paths)
            ) from exc
    if answer is None:
        raise DaemonError("the evaluation daemon hung up without an answer (it died?)" + _log_hint(paths))
    return answer


def _log_hint(paths: Paths) -> str:
    try:
        tail = Path(paths.log).read_text(errors="replace")[-1500:].strip()
    except OSError:
        return ""
    return f"; the end of its log {paths.log}:\n{tail}" if tail else ""


def status(paths: Optional[Paths] = None) -> Optional[dict[str, Any]]:
    """The running daemon's status, None when none answers."""
    paths = paths or Paths()
    try:
        return request(paths, {"op": "status"}, timeout_s=5.0)
    except (OSError, DaemonError, ValueError):
        return None


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie (its parent, maybe a container's
    init that reaps nothing, has not collected it; its files and lock are
    closed already)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] == "Z"
    except (OSError, IndexError):
        return False


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.02)
    return False


def stop(paths: Optional[Paths] = None, timeout_s: float = 30.0) -> Optional[int]:
    """Stop the daemon of ``paths`` (waits until it is gone); its pid, or
    None when none ran."""
    paths = paths or Paths()
    try:
        answer = request(paths, {"op": "stop"}, timeout_s=5.0)
    except (OSError, DaemonError, ValueError):
        return None
    pid = int(answer.get("pid", 0))
    if pid and not _wait_gone(pid, timeout_s):
        os.kill(pid, 9)  # ours (same uid, checked by the daemon): it did not stop in time
        _wait_gone(pid, 5.0)
    return pid or None


def start(
    paths: Optional[Paths] = None, idle_s: Optional[float] = None, timeout_s: float = START_TIMEOUT_S
) -> dict[str, Any]:
    """Start a daemon for ``paths`` unless one answers; its status. Two
    clients starting at once are fine: the second daemon finds the lock
    taken and leaves, both clients talk to the first."""
    paths = paths or Paths()
    current = status(paths)
    if current is not None:
        return current
    from ..evaluator.sandbox import scrub_env  # lazy: evaluator pulls in yaml, which daemon does not load on its own

    idle = idle_s if idle_s is not None else idle_seconds()
    # the daemon needs no credentials; the workers scrub their own anyway
    env = scrub_env(dict(os.environ))
    env.pop("KERNELSMITH_DAEMON", None)
    # the package this client runs, whatever the daemon's cwd
    env["PYTHONPATH"] = package_python_path(env)
    fd = os.open(paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kernelsmith.daemon.server",
                "--key",
                paths.key,
                "--dir",
                paths.dir,
                "--idle",
                str(idle),
            ],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            env=env,
            cwd=paths.dir,
            start_new_session=True,
        )
    finally:
        os.close(fd)
    # reap it when it ends while this (long-lived) caller still runs
    threading.Thread(target=proc.wait, daemon=True, name="ks-daemon-reaper").start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = status(paths)
        if current is not None:
            return current
        code = proc.poll()
        if code not in (None, 0):  # 0: another daemon took the lock first; it is starting
            raise DaemonError(f"the evaluation daemon exited with status {code} at start" + _log_hint(paths))
        time.sleep(0.02)
    raise DaemonError(f"the evaluation daemon did not listen within {timeout_s:.0f} s" + _log_hint(paths))


def evaluate_remote(
    task_dict: dict[str, Any],
    source: str,
    trials: Optional[int] = None,
    options: Optional[dict[str, Any]] = None,
    paths: Optional[Paths] = None,
) -> dict[str, Any]:
    """Evaluate through the daemon, starting it (or replacing one of another
    build) as needed. The answer: ``{"result": EvalResult dict, "pid": n,
    "wall_s": s}``. RemoteError when the evaluation itself raised; DaemonError
    when no daemon could serve it."""
    paths = paths or Paths()
    options = {k: v for k, v in (options or {}).items() if v is not None}
    unknown = sorted(set(options) - set(EVALUATOR_OPTIONS))
    if unknown:
        raise ValueError(f"not evaluator options: {', '.join(unknown)}")
    build = build_id()
    msg = {
        "op": "eval",
        "build": build,
        "task": task_dict,
        "source": source,
        "trials": trials,
        "options": options,
        "stream": True,
    }
    for attempt in range(3):
        try:
            answer = request(paths, msg, timeout_s=None)
        except (FileNotFoundError, ConnectionRefusedError):
            start(paths)  # none listens (never started, or a stale socket of one that died)
            continue
        if answer.get("ok"):
            return answer
        if answer.get("code") == "build":
            # a daemon of another kernelsmith build: it leaves on this answer
            _wait_gone(int(answer.get("pid", 0)), 30.0)
            start(paths)
            continue
        if answer.get("code") == "remote":
            raise RemoteError(str(answer.get("error")))
        raise DaemonError(str(answer.get("error", "the evaluation daemon refused the request")))
    raise DaemonError("could not reach an evaluation daemon of this build after 3 tries" + _log_hint(paths))


def evaluate(
    task: Any, source: str, trials: Optional[int] = None, *, daemon: Optional[bool] = None, **options: Any
) -> Any:
    """Evaluate ``source`` against ``task`` (a Task or a task path), through
    the warm daemon when enabled (see :func:`enabled`), else, or when the
    daemon cannot be reached or died, in this process with a one-off
    :class:`~kernelsmith.evaluator.Evaluator`. ``options`` are Evaluator
    arguments (:data:`EVALUATOR_OPTIONS`). Returns an EvalResult."""
    from ..task import Task  # lazy: task pulls in yaml, which daemon does not load on its own

    if not isinstance(task, Task):
        task = Task.load(task)
    # one spare: an interactive caller evaluates one candidate at a time, and
    # on a small host a second spare's start competes with the first's work
    options.setdefault("spares", 1)
    if enabled(daemon):
        try:
            answer = evaluate_remote(task.to_dict(), source, trials, options)
        except (DaemonError, OSError) as exc:  # OSError: e.g. the log or socket folder not writable
            log.warning(
                "the evaluation daemon failed (%s); evaluating in this process instead "
                "(KERNELSMITH_DAEMON=0 or --no-daemon skips the daemon)",
                exc,
            )
        except RemoteError as exc:
            raise RuntimeError(f"evaluation failed in the daemon: {exc}") from None
        else:
            return EvalResult.from_dict(answer["result"])
    return evaluate_local(task, source, trials, **options)


def evaluate_local(task: Any, source: str, trials: Optional[int] = None, **options: Any) -> Any:
    """A one-off evaluation in this process (a pool whose zygote and
    referee start together; ``spares=1`` keeps it to the one child needed)."""
    from ..evaluator import Evaluator  # lazy: evaluator pulls in yaml, which daemon does not load on its own

    backend = options.pop("backend", None)
    with Evaluator(backend=backend, **options) as ev:
        return ev.evaluate(task, source, trials)


__all__ = [
    "DEFAULT_IDLE_S",
    "DaemonError",
    "EVALUATOR_OPTIONS",
    "Paths",
    "RemoteError",
    "build_id",
    "enabled",
    "environment_key",
    "evaluate",
    "evaluate_local",
    "evaluate_remote",
    "idle_seconds",
    "runtime_dir",
    "start",
    "status",
    "stop",
]
