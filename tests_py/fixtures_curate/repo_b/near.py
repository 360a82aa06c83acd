import math
import torch.nn as nn
import torch.nn.functional as F

HIDDEN_MULT = 2


class FeedForward(nn.Module):
    def __init__(self, dim, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, dim * HIDDEN_MULT)
        self.fc2 = nn.Linear(dim * HIDDEN_MULT, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        h = self.drop(h)
        return self.fc2(h) * math.sqrt(0.25)
