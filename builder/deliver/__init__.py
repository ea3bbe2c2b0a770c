"""Delivering the series: pull-request packages for upstream (export) and release wheels (wheel)."""
