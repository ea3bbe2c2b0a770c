"""Delivering the series: export to upstream."""
