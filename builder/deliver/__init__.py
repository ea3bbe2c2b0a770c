"""Delivering the patched tree: release wheels (and exports upstream)."""
