"""Which local GPUs the evaluator's workers are pinned to.

``Evaluator(devices=None)`` uses every local CUDA device, one worker per
device. Detection must not initialise CUDA in the caller (a CUDA context in
the parent is memory on GPU 0 and breaks fork-based tools), so it reads:

1. ``CUDA_VISIBLE_DEVICES`` when set: its entries (indices, ``GPU-...`` or
   ``MIG-...`` UUIDs) are the devices, as CUDA would see them; an empty value
   or one starting with ``-1`` / ``none`` means no GPU;
2. otherwise ``nvidia-smi -L``: one device per ``GPU n:`` line, or the
   ``MIG-...`` UUIDs when a GPU is split into MIG instances;
3. otherwise none: a CPU-only host gets one worker.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Mapping, Optional

_GPU_LINE = re.compile(r"^GPU\s+(\d+)\s*:")
_MIG_LINE = re.compile(r"^\s+MIG\b.*\(UUID:\s*(MIG-[^)\s]+)\)")


def parse_cuda_visible_devices(value: str) -> list[str]:
    """The devices a CUDA_VISIBLE_DEVICES value exposes, in order. CUDA stops
    at the first invalid entry; ``-1`` (or anything negative) hides all."""
    devices: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            break
        if entry.lower() in ("none", "nodevfiles", "void") or entry.startswith("-"):
            break
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
            break
        devices.append(entry)
    return devices


def parse_nvidia_smi_list(text: str) -> list[str]:
    """Device ids from ``nvidia-smi -L`` output: GPU indices, except that a
    GPU split into MIG instances contributes its instances' UUIDs (what
    CUDA_VISIBLE_DEVICES accepts for them)."""
    devices: list[str] = []
    current: Optional[str] = None
    migs: list[str] = []

    def flush() -> None:
        if current is not None:
            devices.extend(migs if migs else [current])

    for line in text.splitlines():
        gpu = _GPU_LINE.match(line)
        if gpu:
            flush()
            current, migs = gpu.group(1), []
            continue
        mig = _MIG_LINE.match(line)
        if mig and current is not None:
            migs.append(mig.group(1))
    flush()
    return devices


def _nvidia_smi_list(timeout_s: float = 10.0) -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        return subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=timeout_s, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def detect_gpus(env: Optional[Mapping[str, str]] = None, nvidia_smi_output: Optional[str] = None) -> list[str]:
    """Local CUDA devices as CUDA_VISIBLE_DEVICES entries (``[]`` on a
    CPU-only host), without initialising CUDA. ``env`` and
    ``nvidia_smi_output`` replace the real environment and command (tests)."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return parse_cuda_visible_devices(visible)
    text = _nvidia_smi_list() if nvidia_smi_output is None else nvidia_smi_output
    return parse_nvidia_smi_list(text)


__all__ = ["detect_gpus", "parse_cuda_visible_devices", "parse_nvidia_smi_list"]
