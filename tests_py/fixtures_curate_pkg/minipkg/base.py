from torch import nn


class Block(nn.Module):
    """A package's own base class: subclasses are modules."""

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())
