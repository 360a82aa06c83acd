"""KernelBench level-2 style: Linear (GEMM + bias) followed by ReLU.

The full shapes are for a GPU (H200). KS_BENCH_SMALL=1 in the environment
shrinks them so the Triton interpreter can check the candidates' verdicts on
a CPU in minutes (bench_eval_throughput.py --small sets it); task.yaml cannot
change shapes, so the reference reads it.
"""

import os

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


SMALL = os.environ.get("KS_BENCH_SMALL", "") == "1"
batch_size, in_features, out_features = (32, 64, 96) if SMALL else (1024, 4096, 4096)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


def get_inputs_ragged():
    # a batch that is not a multiple of any tile size: catches grids and masks cut to whole tiles
    return [torch.randn(37 if SMALL else 333, in_features)]
