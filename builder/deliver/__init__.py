"""Delivering the series: pull-request packages for upstream (export) and release wheels (wheel)."""

WHEEL_BACKENDS = ("cpu", "cuda", "metal")
"""The backends `patchset wheel` builds (here, not in wheel.py, so that the CLI's parser needs no
more than this package to offer them)."""
