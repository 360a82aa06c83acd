"""The evaluation daemon: ``python -m kernelsmith.daemon.server``.

Started by a client (kernelsmith/daemon/__init__.py) on first use. It
holds warm Evaluators (pool mode: a zygote, a trusted referee and spare
children per backend and device) and serves evaluation requests on a unix
socket until it has been idle for ``--idle`` seconds.

Trust: the daemon runs only kernelsmith's own code. A request carries a
task (reference source and config) and a candidate's source as data; the
daemon statically checks the source and hands both to a sandboxed pool
child exactly as an in-process Evaluator does, so candidate code never runs
here. Only the daemon's own uid is served: the socket is 0600 in a 0700
folder, and each connection's peer credentials (SO_PEERCRED) are checked
before a byte of the request is read.

Protocol: one JSON line each way per connection.

  {"op": "eval", "build": id, "task": Task dict, "source": str, "trials": n|null, "options": {...},
   "stream": true|false}
      -> with "stream": {"stage": str} for each stage the evaluation enters (the worker's stages,
         as an in-process evaluation reports them to evaluator.phases), then the answer:
      -> {"ok": true, "result": EvalResult dict, "pid": n, "wall_s": s}
       | {"ok": false, "code": "build", "pid": n, ...}   (another build: this daemon then leaves)
       | {"ok": false, "code": "remote", "error": str}   (the evaluation raised)
  {"op": "status"} -> {"ok": true, "pid": n, "build": id, "served": n, "evaluators": [...], ...}
  {"op": "stop"}   -> {"ok": true, "pid": n}, then the daemon closes its pools and exits
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections import OrderedDict
from typing import Any, Optional

from . import EVALUATOR_OPTIONS, Paths, build_id, read_message, send_message

#: evaluators kept at once (each holds a pool per backend and device)
MAX_EVALUATORS = 4


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end (the kernel's word, not the
    peer's)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


def evaluator_key(options: dict[str, Any]) -> str:
    return json.dumps({k: options.get(k) for k in EVALUATOR_OPTIONS}, sort_keys=True)


class Daemon:
    def __init__(self, paths: Paths, idle_s: float) -> None:
        self.paths = paths
        self.idle_s = float(idle_s)
        self.build = build_id()
        self.pid = os.getpid()
        self.started = time.time()
        self.served = 0
        self.failed = 0
        self._evaluators: "OrderedDict[str, Any]" = OrderedDict()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._last = time.monotonic()
        self._stop = threading.Event()
        self.listener: Optional[socket.socket] = None
        self._inode: Optional[int] = None

    # -- life ---------------------------------------------------------------
    def bind(self) -> bool:
        """Take the lock and listen; False when another daemon holds the lock."""
        self._lock_file = open(self.paths.lock, "a")  # noqa: SIM115 - held for the daemon's life
        os.chmod(self.paths.lock, 0o600)
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        try:
            os.unlink(self.paths.socket)  # a dead daemon's: the lock says none is alive
        except FileNotFoundError:
            pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # created 0600: no moment in which others may connect
        try:
            listener.bind(self.paths.socket)
        finally:
            os.umask(old)
        os.chmod(self.paths.socket, 0o600)
        listener.listen(64)
        listener.settimeout(0.5)
        self.listener = listener
        self._inode = os.stat(self.paths.socket).st_ino
        return True

    def _socket_is_ours(self) -> bool:
        try:
            return os.stat(self.paths.socket).st_ino == self._inode
        except OSError:
            return False

    def serve(self) -> None:
        assert self.listener is not None
        print(
            f"kernelsmith daemon {self.pid} (build {self.build}) listening on {self.paths.socket}, "
            f"idle stop after {self.idle_s:g} s",
            flush=True,
        )
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                with self._lock:
                    idle = self._in_flight == 0 and time.monotonic() - self._last > self.idle_s
                if idle:
                    print(f"idle for {self.idle_s:g} s: stopping", flush=True)
                    break
                if not self._socket_is_ours():  # removed or replaced: nobody can reach us any more
                    print("socket removed or replaced: stopping", flush=True)
                    break
                continue
            except OSError:
                break
            threading.Thread(target=self._handle, args=(conn,), daemon=True, name="ks-daemon-conn").start()
        self.shutdown()

    def shutdown(self) -> None:
        self._stop.set()
        if self.listener is not None:
            try:
                self.listener.close()
            except OSError:
                pass
            if self._socket_is_ours():
                try:
                    os.unlink(self.paths.socket)
                except OSError:
                    pass
        with self._lock:
            evaluators = list(self._evaluators.values())
            self._evaluators.clear()
        for ev in evaluators:
            try:
                ev.close()
            except Exception:  # noqa: BLE001 - closing the rest matters more
                traceback.print_exc()
        print(f"stopped after {self.served} evaluations", flush=True)

    # -- requests -----------------------------------------------------------
    def _handle(self, conn: socket.socket) -> None:
        with conn:
            uid = peer_uid(conn)
            if uid != os.getuid():
                print(f"refused a connection from uid {uid}", flush=True)
                send_message(
                    conn,
                    {
                        "ok": False,
                        "code": "refused",
                        "error": f"uid {uid} may not use the evaluation daemon of uid {os.getuid()}",
                    },
                )
                return
            with self._lock:
                self._in_flight += 1
                self._last = time.monotonic()
            try:
                conn.settimeout(60.0)  # a request is sent whole, at once
                msg = read_message(conn)
                conn.settimeout(None)
                if msg is None:
                    return
                send_message(conn, self._answer(msg, conn))
            except (OSError, ValueError) as exc:
                print(f"request failed: {type(exc).__name__}: {exc}", flush=True)
            finally:
                with self._lock:
                    self._in_flight -= 1
                    self._last = time.monotonic()

    def _answer(self, msg: dict[str, Any], conn: Optional[socket.socket] = None) -> dict[str, Any]:
        op = msg.get("op")
        if op == "status":
            return self.status()
        if op == "stop":
            self._stop.set()
            return {"ok": True, "pid": self.pid}
        if op != "eval":
            return {"ok": False, "code": "usage", "error": f"unknown op {op!r}"}
        if msg.get("build") != self.build:
            # an upgrade or an edit of the package: serve none of that build's
            # clients with this code; leave so the client starts its own
            self._stop.set()
            return {
                "ok": False,
                "code": "build",
                "pid": self.pid,
                "build": self.build,
                "error": f"daemon of build {self.build}, request of build {msg.get('build')}",
            }
        return self._evaluate(msg, conn if msg.get("stream") else None)

    def _evaluate(self, msg: dict[str, Any], stream: Optional[socket.socket] = None) -> dict[str, Any]:
        started = time.monotonic()
        try:
            # lazy: evaluator pulls in yaml, which daemon.server does not load on its own
            from ..evaluator import phases
            from ..task import Task  # lazy: task pulls in yaml, which daemon.server does not load on its own

            options = {k: v for k, v in dict(msg.get("options") or {}).items() if k in EVALUATOR_OPTIONS}
            task = Task.from_dict(msg["task"])
            ev = self._evaluator(options)
            told = threading.Lock()

            def tell(stage: str) -> None:  # this request's stages, to its client
                if stream is None:
                    return
                try:
                    with told:
                        send_message(stream, {"stage": stage})
                except OSError:
                    pass  # the client left; the evaluation still ends and is logged

            with phases.routed(tell):
                result = ev.evaluate(task, str(msg["source"]), msg.get("trials"))
        except Exception as exc:  # noqa: BLE001 - the client raises it
            self.failed += 1
            traceback.print_exc()
            return {"ok": False, "code": "remote", "error": f"{type(exc).__name__}: {exc}"}
        self.served += 1
        print(
            f"served task {task.id}: {result.category} in {time.monotonic() - started:.2f} s "
            f"(daemon up {time.time() - self.started:.1f} s)",
            flush=True,
        )
        return {"ok": True, "pid": self.pid, "result": result.to_dict(), "wall_s": round(time.monotonic() - started, 4)}

    def _evaluator(self, options: dict[str, Any]) -> Any:
        from ..evaluator import Evaluator  # lazy: evaluator pulls in yaml, which daemon.server does not load on its own

        key = evaluator_key(options)
        with self._lock:
            ev = self._evaluators.get(key)
            if ev is not None:
                self._evaluators.move_to_end(key)
                return ev
            ev = Evaluator(**options)
            self._evaluators[key] = ev
            old = None
            if len(self._evaluators) > MAX_EVALUATORS:
                _k, old = self._evaluators.popitem(last=False)
        if old is not None:
            # the least recently used; a request still on it finishes first
            threading.Thread(target=old.close, daemon=True).start()
        return ev

    def status(self) -> dict[str, Any]:
        with self._lock:
            evaluators = []
            for key, ev in self._evaluators.items():
                pools = [
                    {
                        "backend": b,
                        "device": d,
                        "zygote_pid": p.zygote.proc.pid,
                        "alive": p.zygote.alive(),
                        "zygote_warm_s": p.zygote.warm_s,
                    }
                    for (b, d), p in ev._device_pools.items()
                ]
                evaluators.append({"options": json.loads(key), "pools": pools})
            idle_for = time.monotonic() - self._last
        return {
            "ok": True,
            "pid": self.pid,
            "build": self.build,
            "key": self.paths.key,
            "socket": self.paths.socket,
            "started": self.started,
            "idle_s": self.idle_s,
            "idle_for_s": round(idle_for, 3),
            "in_flight": self._in_flight - 1,  # not counting this status request
            "served": self.served,
            "failed": self.failed,
            "evaluators": evaluators,
        }


def _preload() -> None:
    import importlib

    for name in ("kernelsmith.evaluator", "kernelsmith.task"):
        importlib.import_module(name)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelsmith.daemon.server")
    parser.add_argument("--key", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--idle", type=float, required=True)
    args = parser.parse_args(argv)
    paths = Paths(args.key, args.dir)
    daemon = Daemon(paths, args.idle)
    if not daemon.bind():
        print(f"another daemon holds {paths.lock}: leaving", flush=True)
        return 0
    # the evaluator's modules load while the first client connects and sends
    # its request, not after (about 0.3 s of a cold evaluation's path)
    threading.Thread(target=_preload, daemon=True, name="ks-daemon-preload").start()
    # SIGTERM (e.g. a system shutdown): close the pools like an idle stop
    signal.signal(signal.SIGTERM, lambda *_: daemon._stop.set())
    daemon.serve()
    sys.stdout.flush()
    # worker threads of the evaluators are daemonic; nothing left to wait for
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
