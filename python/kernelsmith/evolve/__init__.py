"""The evolution loop and its run directory (``kernelsmith evolve``)."""

from .config import EvolveConfig, load_evolve_config
from .loop import Evolution, RunSummary
from .rundir import RunDir, iter_trajectory
from .session import evolve, evolve_sync, read_trajectory
from ..trajectory import StepRecord, read_step_records

__all__ = [
    "EvolveConfig",
    "load_evolve_config",
    "Evolution",
    "RunSummary",
    "RunDir",
    "iter_trajectory",
    "evolve",
    "evolve_sync",
    "read_trajectory",
    "StepRecord",
    "read_step_records",
]
