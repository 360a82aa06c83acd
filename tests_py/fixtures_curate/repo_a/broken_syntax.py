import torch.nn as nn

class Oops(nn.Module)
    def forward(self, x): return x
