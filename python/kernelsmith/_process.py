"""Small helpers for the processes kernelsmith starts (workers, the curation
runner's workers, the evaluation daemon): the PYTHONPATH they import this
package from, and how they are ended."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Mapping, Optional

#: the folder that holds the ``kernelsmith`` package this process runs
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def package_python_path(env: Optional[Mapping[str, str]] = None) -> str:
    """A PYTHONPATH for a child process that imports this very package first
    (whatever the child's working directory), then what ``env``'s
    PYTHONPATH (default: this process's) already had."""
    rest = (os.environ if env is None else env).get("PYTHONPATH", "")
    return PACKAGE_ROOT + (os.pathsep + rest if rest else "")


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group led by ``pid`` (a child started with
    ``start_new_session=True``: the group holds whatever it forked). A group
    that is already gone, or whose members are no longer ours to signal
    (a worker that changed uid), is not an error: there is nothing left to end."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_process(proc: subprocess.Popen, wait: bool = True) -> None:
    """End a child and everything it forked: SIGKILL to its process group,
    then to the child itself (in case it left the group), then reap it
    unless ``wait`` is False (the caller waits with a timeout of its own)."""
    kill_group(proc.pid)
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    if wait:
        proc.wait()
