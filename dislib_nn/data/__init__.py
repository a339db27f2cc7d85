"""ds-tensor: blocked N-d tensors whose blocks tasks own."""

__all__ = []
