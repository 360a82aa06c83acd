import torch.nn as nn
import torch.nn.functional as F


class RectifiedLinearUnit(nn.Module):
    """Written differently from ReluA, computes the same operator graph."""

    def __init__(self):
        super().__init__()
        self.inplace_flag = False
        self.label = "rectifier"

    def forward(self, inp):
        if self.inplace_flag:
            return F.relu_(inp)
        out = F.relu(inp)
        return out
