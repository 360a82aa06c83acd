"""Where the wall of one cold ``kernelsmith eval`` goes, process by process.

Runs ``kernelsmith eval TASK CANDIDATE --json`` with a private, empty daemon
folder (so the daemon, its zygote, referee and children all start cold) and
samples /proc every 20 ms meanwhile: each process of this user whose command
line names kernelsmith (or is a child of one) gets its first and last sight,
its role and the CPU seconds it used. The table shows the critical path: what
runs one after the other and what overlaps. Run it twice on a GPU machine
(the second run finds the user's host-module and compile caches filled):

    PYTHONPATH=python python3 benchmarks/prof_cold_eval.py examples/triton/softmax seed
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, cpu seconds) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _ours(pid: int, marker: bytes) -> bool:
    """Whether the process carries our private daemon folder in its
    environment (the daemon and everything it starts inherit it)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read()
    except OSError:
        return False


def _role(cmd: str, pid: int, seen: dict[int, dict], ppid: int) -> str:
    if "kernelsmith.daemon.server" in cmd:
        return "daemon"
    if "kernelsmith.evaluator.zygote" in cmd:
        return "zygote"
    if "referee" in cmd:
        return "referee"
    if " eval " in f" {cmd} ":
        return "client (kernelsmith eval)"
    parent = seen.get(ppid)
    if parent is not None and parent["role"] == "zygote" and "zygote" in cmd:
        return "worker (forked by the zygote)"
    if parent is not None:
        return f"{parent['role'].split(' ')[0]}'s child: {cmd.split(' -m ')[-1][:60]}"
    return cmd.split(" -m ")[-1][:70]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", nargs="?", default="examples/triton/softmax")
    ap.add_argument("candidate", nargs="?", default="seed")
    ap.add_argument("--no-daemon", action="store_true", help="evaluate in the client's own process")
    args = ap.parse_args()
    rundir = Path(tempfile.mkdtemp(prefix="ks-cold-", dir="/tmp"))
    env = {
        **os.environ,
        "KERNELSMITH_DAEMON_DIR": str(rundir / "d"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "python"), os.environ.get("PYTHONPATH")) if p),
    }
    env.pop("KERNELSMITH_DAEMON", None)
    cmd = [sys.executable, "-m", "kernelsmith", "eval", args.task, args.candidate, "--json"]
    if args.no_daemon:
        cmd.append("--no-daemon")
    seen: dict[int, dict] = {}
    marker = str(rundir).encode()
    uid = os.getuid()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen[proc.pid] = {"role": "client (kernelsmith eval)", "first": 0.0, "last": 0.0, "cpu": 0.0}
    try:
        while proc.poll() is None:
            now = time.monotonic() - t0
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                pid = int(entry)
                st = _stat(pid)
                if st is None:
                    continue
                ppid, cpu = st
                if pid not in seen and ppid not in seen:  # a sandboxed worker runs under another uid
                    try:
                        if os.stat(f"/proc/{pid}").st_uid != uid:
                            continue
                    except OSError:
                        continue
                if pid not in seen:
                    cmdline = _cmdline(pid)
                    if ppid not in seen and not _ours(pid, marker):
                        continue
                    seen[pid] = {"role": _role(cmdline, pid, seen, ppid), "first": now, "last": now, "cpu": cpu}
                item = seen[pid]
                item["last"], item["cpu"] = now, cpu
            time.sleep(0.02)
        wall = time.monotonic() - t0
        out, err = proc.communicate()
    finally:
        subprocess.run(
            [sys.executable, "-m", "kernelsmith", "daemon", "stop"], env=env, cwd=str(ROOT), capture_output=True
        )
        shutil.rmtree(rundir, ignore_errors=True)
    try:
        result = json.loads(out)
    except ValueError:
        print(err[-2000:])
        return 1
    print(f"{' '.join(cmd[2:])}: wall {wall:.2f} s, verdict {result.get('category')}")
    print(f"{'process':<50} {'first seen':>10} {'last seen':>10} {'cpu s':>7}")
    for pid, item in sorted(seen.items(), key=lambda kv: kv[1]["first"]):
        print(f"{item['role'][:50]:<50} {item['first']:10.2f} {item['last']:10.2f} {item['cpu']:7.2f}")
    phases = result.get("phases") or {}
    print("the evaluation's phases: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
