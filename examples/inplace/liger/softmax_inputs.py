"""Inputs of LigerSoftmaxFunction.apply(x): one tensor of ``shape`` in ``dtype``
(on the GPU when there is one), scaled so rows are far from uniform."""
import torch


def make_inputs(shape, dtype):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return [torch.randn(*shape, dtype=dtype, device=device) * 3]
