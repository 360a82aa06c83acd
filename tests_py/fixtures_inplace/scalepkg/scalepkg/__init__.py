from .ops import scale_add

__all__ = ["scale_add"]
