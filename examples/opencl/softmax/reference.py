import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 128
dim = 1000


def get_inputs():
    return [torch.randn(batch_size, dim) * 4]


def get_init_inputs():
    return []


def get_inputs_odd():
    # Other shapes: rows and columns that are not multiples of any work-group size.
    return [torch.randn(3, 7, 333) * 4]
