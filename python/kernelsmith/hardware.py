"""HardwareInfo: what a backend reports about the device it runs on.

The typed seam between the backends (``Backend.hardware_info()`` writes it),
the evaluator (stores ``to_dict()`` in ``EvalResult.hardware``), the prompt
builder (device name and tips family), the backends' prompt tips, and the
reports and exports (device name). One set of names for every backend;
facts only one backend has go to ``properties``.

Records written before this class existed used per-backend keys (Triton:
``device``, OpenCL: ``name`` and ``type``, versions at the top level);
:meth:`HardwareInfo.from_dict` reads those too, so old run directories resume
and report with the right device name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

__all__ = ["HARDWARE_SCHEMA_VERSION", "HardwareInfo"]

HARDWARE_SCHEMA_VERSION = 1

#: device kinds
KINDS = ("", "gpu", "cpu", "accelerator", "interpreter")

# Top-level keys of the old per-backend dicts that are library versions.
_LEGACY_VERSIONS = ("torch", "triton", "python", "cuda")


@dataclass
class HardwareInfo:
    # the backend that reported it ("triton", "opencl", ...)
    backend: str = ""
    # the device's name as its driver reports it, e.g. "NVIDIA H200" or
    # "pthread-Intel(R) Xeon(R)"; "" when unknown
    name: str = ""
    # "gpu", "cpu", "accelerator", or "interpreter" (no device: an emulator
    # such as the Triton interpreter runs the kernels on the host)
    kind: str = ""
    vendor: str = ""
    # NVIDIA compute capability "major.minor" ("" elsewhere)
    compute_capability: str = ""
    # a vendor architecture name (e.g. AMD "gfx942"), when known
    arch: str = ""
    # SMs (NVIDIA) or compute units (OpenCL)
    compute_units: Optional[int] = None
    memory_gb: Optional[float] = None
    driver: str = ""
    # library versions: torch, triton, python, cuda, ...
    versions: dict = field(default_factory=dict)
    # backend-specific device facts (e.g. OpenCL's local_mem_size,
    # preferred_vector_width_float, platform_name)
    properties: dict = field(default_factory=dict)
    schema_version: int = HARDWARE_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"HardwareInfo.kind '{self.kind}' is not one of {', '.join(repr(k) for k in KINDS)}")

    @property
    def interpreter(self) -> bool:
        """True when no device runs the kernels (an interpreter on the host)."""
        return self.kind == "interpreter"

    def label(self, default: str = "the target device") -> str:
        """The device's name for people and prompts."""
        return self.name or default

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "HardwareInfo":
        """From ``to_dict()`` (unknown keys rejected with their names), or
        from a record of the old per-backend shapes (no schema_version)."""
        data = dict(data or {})
        if "schema_version" not in data:
            return cls._from_legacy(data)
        if data["schema_version"] > HARDWARE_SCHEMA_VERSION:
            raise ValueError(
                f"HardwareInfo schema_version {data['schema_version']} is newer than this "
                f"kernelsmith ({HARDWARE_SCHEMA_VERSION})"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown HardwareInfo keys: {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def of(cls, value: Any) -> "HardwareInfo":
        """A HardwareInfo from a HardwareInfo, a dict (either shape) or None."""
        if isinstance(value, HardwareInfo):
            return value
        return cls.from_dict(value)

    @classmethod
    def _from_legacy(cls, data: dict[str, Any]) -> "HardwareInfo":
        kind = str(data.get("type", data.get("device_type", "")) or "").lower()
        if data.get("interpreter"):
            kind = "interpreter"
        elif kind not in KINDS:
            kind = "accelerator" if kind else ""
        cc = data.get("compute_capability", data.get("capability", ""))
        if isinstance(cc, (tuple, list)):
            cc = ".".join(str(x) for x in cc)
        units = data.get("sm_count", data.get("max_compute_units"))
        taken = {
            "backend",
            "name",
            "device",
            "type",
            "device_type",
            "interpreter",
            "vendor",
            "compute_capability",
            "capability",
            "arch",
            "gcn_arch",
            "sm_count",
            "max_compute_units",
            "memory_gb",
            "driver",
            *_LEGACY_VERSIONS,
        }
        return cls(
            backend=str(data.get("backend", "") or ""),
            name=str(data.get("name") or data.get("device") or ""),
            kind=kind,
            vendor=str(data.get("vendor", "") or ""),
            compute_capability=str(cc or ""),
            arch=str(data.get("arch", data.get("gcn_arch", "")) or ""),
            compute_units=int(units) if isinstance(units, (int, float)) else None,
            memory_gb=float(data["memory_gb"]) if isinstance(data.get("memory_gb"), (int, float)) else None,
            driver=str(data.get("driver", "") or ""),
            versions={k: data[k] for k in _LEGACY_VERSIONS if data.get(k)},
            properties={k: v for k, v in data.items() if k not in taken},
        )
