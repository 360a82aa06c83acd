from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...activations import gelu_new
from ...base import Block
from ...configuration_tiny import TinyConfig


@dataclass
class TinyOutput:
    hidden: torch.Tensor


class TinyMLP(Block):
    def __init__(self, config: TinyConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return TinyOutput(self.norm(self.down(gelu_new(self.up(hidden_states))))).hidden
