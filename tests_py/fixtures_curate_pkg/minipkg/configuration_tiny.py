class TinyConfig:
    """Fields with defaults, as the configs of model packages have."""

    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_attention_heads: int = 32
    layer_norm_eps: float = 1e-5

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)
