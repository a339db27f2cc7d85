"""Epoch-averaging estimators."""

__all__ = []
