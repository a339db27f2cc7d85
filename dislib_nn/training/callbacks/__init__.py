"""Callbacks of the epoch loop (see :mod:`._core`)."""
