"""Inputs for the in-place task on tinyops.rms_norm: the arguments of
rms_norm(x, weight, eps) for an input of ``shape`` in ``dtype``."""
import torch


def make_inputs(shape, dtype):
    x = torch.randn(*shape, dtype=dtype)
    weight = torch.rand(shape[-1], dtype=dtype) + 0.5
    return [x, weight, 1e-6]
