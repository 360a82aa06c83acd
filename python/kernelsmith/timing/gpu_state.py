"""GPU clocks and temperature, recorded with every measurement so a slow
result can be traced to a throttled or cold GPU.

Order of sources: pynvml (package nvidia-ml-py), then
``nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu``, else an
empty dict. CUDA_VISIBLE_DEVICES is honoured: device 0 of this process is the
first visible GPU, not physical GPU 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Optional


def _physical_id(index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if index < len(ids):
            return ids[index]
    return str(index)


def _from_pynvml(physical: str) -> Optional[dict[str, Any]]:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            if physical.isdigit():
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(physical))
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(physical)
            return {
                "sm_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                "mem_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
                "temperature_c": int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
                "source": "pynvml",
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML missing or no permission: try the next source
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


def gpu_state(index: int = 0) -> dict[str, Any]:
    """{sm_clock_mhz, mem_clock_mhz, temperature_c, source} or {}."""
    physical = _physical_id(index)
    return _from_pynvml(physical) or _from_nvidia_smi(physical) or {}
