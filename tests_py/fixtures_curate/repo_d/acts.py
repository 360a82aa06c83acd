"""Distinct operators written almost identically: text similarity proposes
them as near-duplicates, their outputs keep them apart."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SiLUAct(nn.Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return F.silu(x, inplace=self.inplace)


class MishAct(nn.Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return F.mish(x, inplace=self.inplace)


class SELUAct(nn.Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return F.selu(x, inplace=self.inplace)
