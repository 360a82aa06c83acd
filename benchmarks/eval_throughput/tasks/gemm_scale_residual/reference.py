"""KernelBench level-2 style: Linear, scaled, plus the input as a residual.

The full shapes are for a GPU (H200). KS_BENCH_SMALL=1 in the environment
shrinks them so the Triton interpreter can check the candidates' verdicts on
a CPU in minutes (bench_eval_throughput.py --small sets it).
"""

import os

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale + x


SMALL = os.environ.get("KS_BENCH_SMALL", "") == "1"
# features not a multiple of 64 in the small set: the N and K masks matter
batch_size, features = (32, 96) if SMALL else (512, 2048)
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, scale]


def get_inputs_ragged():
    return [torch.randn(37 if SMALL else 333, features)]
