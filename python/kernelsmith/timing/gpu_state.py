"""GPU clocks and temperature, recorded with every measurement so a slow
result can be traced to a throttled or cold GPU.

Order of sources: pynvml (package nvidia-ml-py), then
``nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu``, else an
empty dict. CUDA_VISIBLE_DEVICES is honoured: device 0 of this process is the
first visible GPU, not physical GPU 0.

NVML is initialised once per process and device (:func:`nvml`) and kept: a
reading is then a few microseconds, where an ``nvmlInit``/``nvmlShutdown``
per reading cost milliseconds and an ``nvidia-smi`` tens of them. The
evaluator's worker takes its handle before the program loads (and before the
system-call filter), so the readings inside its timing slot never start a
process (``gpu_state(start_process=False)``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from typing import Any, Optional

#: physical id -> (pid, pynvml, handle), or (pid, None, None) where NVML cannot say
_NVML: dict[str, tuple[int, Any, Any]] = {}
_NVML_LOCK = threading.Lock()


def _physical_id(index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if index < len(ids):
            return ids[index]
    return str(index)


def nvml_handle(pynvml: Any, physical: str) -> Any:
    """NVML's handle of a physical GPU named by index or UUID (NVML
    initialised by the caller)."""
    if physical.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(physical))
    return pynvml.nvmlDeviceGetHandleByUUID(physical)


def nvml(physical: str) -> Optional[tuple[Any, Any]]:
    """(pynvml, handle) of a physical GPU (an index or a UUID), NVML
    initialised once in this process and kept; None without pynvml, a
    driver or such a device. A forked child makes its own (the entry of the
    process it was forked from is not used)."""
    pid = os.getpid()
    with _NVML_LOCK:
        got = _NVML.get(physical)
        if got is None or got[0] != pid:
            got = (pid, None, None)
            try:
                import pynvml  # type: ignore[import-not-found]

                pynvml.nvmlInit()
                got = (pid, pynvml, nvml_handle(pynvml, physical))
            except Exception:  # noqa: BLE001 - no pynvml, no driver, no such device
                pass
            _NVML[physical] = got
    return None if got[1] is None else (got[1], got[2])


def open_nvml(index: int = 0) -> bool:
    """NVML's handle for this process's device ``index`` taken now (kept for
    every later reading); whether NVML can say."""
    return nvml(_physical_id(index)) is not None


def _from_pynvml(physical: str) -> Optional[dict[str, Any]]:
    got = nvml(physical)
    if got is None:
        return None
    pynvml, handle = got
    try:
        return {
            "sm_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            "mem_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
            "temperature_c": int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
            "source": "pynvml",
        }
    except Exception:  # noqa: BLE001 - no permission, a lost GPU: try the next source
        return None


def parse_nvidia_smi(line: str) -> dict[str, Any]:
    """Parse one 'sm, mem, temp' line of nvidia-smi's csv,noheader,nounits."""
    parts = [p.strip() for p in line.strip().split(",")]
    if len(parts) != 3:
        return {}
    try:
        sm, mem, temp = (int(float(p)) for p in parts)
    except ValueError:
        return {}
    return {"sm_clock_mhz": sm, "mem_clock_mhz": mem, "temperature_c": temp, "source": "nvidia-smi"}


def _from_nvidia_smi(physical: str) -> Optional[dict[str, Any]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "-i", physical, "--query-gpu=clocks.sm,clocks.mem,temperature.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.strip().splitlines()
    return parse_nvidia_smi(lines[0]) if lines else None


def gpu_state(index: int = 0, *, start_process: bool = True) -> dict[str, Any]:
    """{sm_clock_mhz, mem_clock_mhz, temperature_c, source} or {}.
    ``start_process=False``: NVML only, never an ``nvidia-smi`` (a reading
    inside a timing slot, where a process started would cost the slot tens
    of milliseconds)."""
    physical = _physical_id(index)
    return _from_pynvml(physical) or (_from_nvidia_smi(physical) if start_process else None) or {}
