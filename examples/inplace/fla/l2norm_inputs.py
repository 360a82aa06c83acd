"""Inputs of fla-core's l2norm_fwd(x): one tensor of ``shape`` in ``dtype`` (on
the GPU when there is one); the last dimension is the one normalized."""
import torch


def make_inputs(shape, dtype):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return [torch.randn(*shape, dtype=dtype, device=device)]
