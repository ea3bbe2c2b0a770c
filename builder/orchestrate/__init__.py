"""Orchestrators: verbs that chain the layers below them (series, build, prove), above all of them.

`bump` rebases, builds, sweeps and proves in a scratch project before it moves the real one.
"""
