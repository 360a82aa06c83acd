import torch


def make_inputs(shape, dtype):
    return [torch.randn(*shape, dtype=dtype), torch.randn(*shape, dtype=dtype), 1.5]
