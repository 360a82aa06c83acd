"""The evaluation daemon (kernelsmith/daemon): started on first use, reused,
stopped when idle, owner-only, survives its own crash, replaced by another
build, and a changed task is a new task. Real daemons, real pools, the
OpenCL softmax example on PoCL (correctness only, to keep it short)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

import kernelsmith

ROOT = Path(__file__).resolve().parent.parent
# the package as installed (with its built _core), not the source tree, which a
# clean clone has without the extension
PACKAGE = Path(kernelsmith.__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "opencl" / "softmax"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by whoever started it) is gone too
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s")


class Env:
    """A private daemon folder (short: a unix socket path has 108 bytes) and
    the environment the CLI runs in."""

    def __init__(self, package: Path = PACKAGE) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ksd-", dir="/tmp")) / "rt"
        # the container may be entered: what keeps others out must be the daemon's own folder
        os.chmod(self.dir.parent, 0o755)
        self.package = package
        self.env = {**os.environ, "PYTHONPATH": str(package), "KERNELSMITH_DAEMON_DIR": str(self.dir)}
        self.env.pop("KERNELSMITH_DAEMON", None)
        self.env.pop("KERNELSMITH_DAEMON_IDLE", None)

    def cli(
        self, *args: str, env: Optional[dict[str, str]] = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, "-m", "kernelsmith", *args],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(ROOT),
        )
        if check:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def eval(self, task: Path = SOFTMAX, candidate: str = "seed", *extra: str, **kw: Any) -> tuple[dict, float]:
        started = time.monotonic()
        proc = self.cli("eval", str(task), candidate, "--no-timing", "--json", *extra, **kw)
        return json.loads(proc.stdout), time.monotonic() - started

    def status(self) -> list[dict]:
        return json.loads(self.cli("daemon", "status", "--json").stdout)["daemons"]

    def sockets(self) -> list[Path]:
        return sorted(self.dir.glob("daemon-*.sock")) if self.dir.exists() else []

    def close(self) -> None:
        if self.dir.exists():
            self.cli("daemon", "stop", check=False)
        shutil.rmtree(self.dir.parent, ignore_errors=True)


@pytest.fixture
def env() -> Iterator[Env]:
    e = Env()
    try:
        yield e
    finally:
        e.close()


def test_started_on_first_use_reused_and_owner_only(env: Env) -> None:
    assert env.sockets() == []
    first, cold_s = env.eval()
    assert first["correct"] and not first["hacked"], first
    [st] = env.status()
    pid, zygote = st["pid"], st["evaluators"][0]["pools"][0]["zygote_pid"]
    assert st["served"] == 1 and _alive(zygote)
    second, warm_s = env.eval()
    assert second["correct"] and second["task_id"] == first["task_id"]
    [st] = env.status()
    # the same daemon and the same warm pool served it, without the warm-up
    assert st["pid"] == pid and st["served"] == 2
    assert st["evaluators"][0]["pools"][0]["zygote_pid"] == zygote
    assert warm_s < cold_s, (cold_s, warm_s)
    # only the owner can reach it: 0700 folder, 0600 socket
    [sock] = env.sockets()
    assert stat.S_IMODE(os.stat(env.dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    assert os.stat(sock).st_uid == os.getuid()


def test_no_daemon_flag_and_env_evaluate_in_process(env: Env) -> None:
    result, _ = env.eval(SOFTMAX, "seed", "--no-daemon")
    assert result["correct"]
    result, _ = env.eval(env={"KERNELSMITH_DAEMON": "0"})
    assert result["correct"]
    assert env.sockets() == [] and env.status() == []


def _connect_as(uid: int, path: str) -> str:
    """From a forked child that became ``uid``: what connecting to the
    daemon's socket gives ('EACCES' or the daemon's answer)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(10)
                s.connect(path)
                s.sendall(json.dumps({"op": "status"}).encode() + b"\n")
                out = s.recv(1 << 16).decode()
            except PermissionError:
                out = "EACCES"
            except Exception as exc:  # noqa: BLE001 - reported to the test
                out = f"{type(exc).__name__}: {exc}"
            os.write(w, out.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another uid")
def test_another_uid_is_refused(env: Env) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    env.cli("daemon", "start")
    [sock] = env.sockets()
    # the filesystem keeps it out: the folder is 0700
    assert _connect_as(nobody, str(sock)) == "EACCES"
    # and were the folder and socket opened up, the daemon itself refuses
    # (SO_PEERCRED: the kernel's word for the peer's uid)
    os.chmod(env.dir, 0o711)
    os.chmod(sock, 0o666)
    try:
        out = _connect_as(nobody, str(sock))
    finally:
        os.chmod(env.dir, 0o700)
        os.chmod(sock, 0o600)
    answer = json.loads(out.splitlines()[0]) if out.startswith("{") else {"unexpected": out}
    assert answer["ok"] is False and answer["code"] == "refused"
    assert f"uid {nobody}" in answer["error"]
    assert "pid" not in answer and "build" not in answer  # told nothing about the daemon
    log = next(env.dir.glob("daemon-*.log")).read_text()
    assert f"refused a connection from uid {nobody}" in log


def test_folder_of_someone_else_or_open_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelsmith import daemon

    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    monkeypatch.setenv("KERNELSMITH_DAEMON_DIR", str(open_dir))
    with pytest.raises(daemon.DaemonError, match="not a 0700 folder"):
        daemon.runtime_dir()
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("KERNELSMITH_DAEMON_DIR", str(fresh))
    assert daemon.runtime_dir() == str(fresh)
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700


def test_idle_stop_closes_the_pools(env: Env) -> None:
    result, _ = env.eval(env={"KERNELSMITH_DAEMON_IDLE": "3"})
    assert result["correct"]
    [st] = env.status()
    pid, zygote = st["pid"], st["evaluators"][0]["pools"][0]["zygote_pid"]
    assert st["idle_s"] == 3
    _wait(lambda: not _alive(pid), 30, "the idle daemon stopped")
    _wait(lambda: not _alive(zygote), 10, "its zygote stopped with it")
    assert env.sockets() == []
    assert "idle for 3 s: stopping" in next(env.dir.glob("daemon-*.log")).read_text()


def test_killed_daemon_is_replaced_and_leaves_nothing(env: Env) -> None:
    env.eval()
    [st] = env.status()
    pid, zygote = st["pid"], st["evaluators"][0]["pools"][0]["zygote_pid"]
    os.kill(pid, signal.SIGKILL)
    _wait(lambda: not _alive(pid), 10, "the daemon died")
    # its zygote sees its control socket close and leaves (its children die with it)
    _wait(lambda: not _alive(zygote), 10, "the dead daemon's zygote exited")
    result, _ = env.eval()  # a stale socket: a new daemon
    assert result["correct"]
    [st] = env.status()
    assert st["pid"] != pid and st["served"] == 1


def test_daemon_dying_mid_request_falls_back_in_process(env: Env) -> None:
    env.cli("daemon", "start")
    [st] = env.status()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelsmith", "eval", str(SOFTMAX), "seed", "--no-timing", "--json"],
        env=env.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
    )
    _wait(lambda: env.status()[0]["in_flight"] == 1, 60, "the request reached the daemon")
    os.kill(st["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert json.loads(out)["correct"]
    assert "evaluation daemon failed" in err and "evaluating in this process instead" in err


def test_changed_task_file_is_a_new_task(env: Env, tmp_path: Path) -> None:
    task = tmp_path / "softmax"
    shutil.copytree(SOFTMAX, task)
    first, _ = env.eval(task)
    assert first["correct"]
    ref = task / "reference.py"
    text = ref.read_text()
    assert "softmax(x, dim=-1)" in text
    ref.write_text(text.replace("softmax(x, dim=-1)", "softmax(x, dim=-1) * 2"))
    second, _ = env.eval(task, check=False)  # exit status 1: not correct
    # the same daemon, the new reference: the old seed is now wrong
    assert second["task_id"] != first["task_id"]
    assert not second["correct"] and second["category"] == "incorrect", second
    [st] = env.status()
    assert st["served"] == 2


def test_another_build_replaces_the_daemon(tmp_path: Path) -> None:
    # a copy of the package, so the test can change a module's mtime
    pkg = tmp_path / "pkg"
    shutil.copytree(PACKAGE / "kernelsmith", pkg / "kernelsmith", ignore=shutil.ignore_patterns("__pycache__"))
    e = Env(package=pkg)
    try:
        e.eval()
        [old] = e.status()
        later = time.time() + 5
        os.utime(pkg / "kernelsmith" / "task.py", (later, later))
        result, _ = e.eval()
        assert result["correct"]
        [new] = e.status()
        assert new["pid"] != old["pid"] and new["build"] != old["build"] and new["served"] == 1
        assert not _alive(old["pid"])
    finally:
        e.close()


def test_python_api_uses_the_daemon(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelsmith import daemon
    from kernelsmith.result import EvalResult
    from kernelsmith.task import Task

    monkeypatch.setenv("KERNELSMITH_DAEMON_DIR", str(env.dir))
    monkeypatch.delenv("KERNELSMITH_DAEMON", raising=False)  # the suite's default is off (conftest.py)
    from kernelsmith.evaluator import phases

    task = Task.load(SOFTMAX)
    heard: list[str] = []
    with phases.listening(heard.append):
        result = daemon.evaluate(task, task.seed_source, timing=False)
    assert isinstance(result, EvalResult) and result.correct
    [st] = env.status()
    assert st["served"] == 1
    # the worker's stages, streamed back by the daemon, reach this process's
    # listeners (kernelsmith eval's phase line) in the order they happened
    assert "load reference" in heard, heard
    trial = [h for h in heard if h.startswith("input set 'get_inputs', trial 0")]
    assert trial and heard.index("load reference") < heard.index(trial[0]), heard
    # a bad argument is the daemon's error, raised here, not a fallback
    with pytest.raises(RuntimeError, match="trials must be in"):
        daemon.evaluate(task, task.seed_source, trials=1000, timing=False)
    assert env.status()[0]["pid"] == st["pid"]


def test_one_daemon_keeps_a_pool_per_backend_and_an_evaluator_per_options(env: Env) -> None:
    interp = {"TRITON_INTERPRET": "1"}  # one environment (so one daemon) for both backends
    opencl, _ = env.eval(env=interp)
    triton, _ = env.eval(ROOT / "examples" / "triton" / "softmax", env=interp)
    assert opencl["correct"] and opencl["backend"] == "opencl"
    assert triton["correct"] and triton["backend"] == "triton"
    # other evaluator options that matter: another evaluator, same daemon
    other, _ = env.eval(SOFTMAX, "seed", "--isolation", "process", env=interp)
    assert other["correct"] and other["isolation"].startswith("process")
    [st] = env.status()
    assert st["served"] == 3
    pools = sorted((p["backend"], e["options"]["isolation"]) for e in st["evaluators"] for p in e["pools"])
    assert pools == [("opencl", "auto"), ("opencl", "process"), ("triton", "auto")]
    # a shell without TRITON_INTERPRET is another environment: its own daemon
    # (the suite itself may run with TRITON_INTERPRET=1: scripts/test.sh)
    env.env = {k: v for k, v in env.env.items() if k != "TRITON_INTERPRET"}
    env.eval()
    assert len(env.status()) == 2
