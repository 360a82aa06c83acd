"""KernelBench level-2 style: Linear followed by a softmax over the features.

The full shapes are for a GPU (H200). KS_BENCH_SMALL=1 in the environment
shrinks them so the Triton interpreter can check the candidates' verdicts on
a CPU in minutes (bench_eval_throughput.py --small sets it).
"""

import os

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(x), dim=1)


SMALL = os.environ.get("KS_BENCH_SMALL", "") == "1"
batch_size, in_features, out_features = (32, 64, 160) if SMALL else (256, 1024, 2048)


def get_inputs():
    # logits of about one unit (std ~1.2), so the softmax is far from uniform
    return [torch.randn(batch_size, in_features) * 2]


def get_init_inputs():
    return [in_features, out_features]


def get_inputs_ragged():
    return [torch.randn(37 if SMALL else 333, in_features) * 2]
