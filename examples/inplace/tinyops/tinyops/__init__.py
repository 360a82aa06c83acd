"""tinyops: a row-wise RMSNorm written in Triton, with a module that uses it."""
from .layers import RMSNorm
from .rmsnorm import rms_norm

__all__ = ["RMSNorm", "rms_norm"]
