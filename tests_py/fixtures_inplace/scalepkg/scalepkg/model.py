from .ops import scale_add


def residual(x, y):
    return scale_add(x, y, 0.5)
