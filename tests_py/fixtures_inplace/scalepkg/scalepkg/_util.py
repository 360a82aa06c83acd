def block_for(n):
    """The block size the kernel uses for n elements."""
    return 64 if n <= 4096 else 256
