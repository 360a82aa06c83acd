import torch
import torch.nn as nn


class TokenEncoder(nn.Module):
    def __init__(self, vocab_size, embed_dim):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, embed_dim)
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, tokens):
        return self.norm(self.emb(tokens)).mean(1)
