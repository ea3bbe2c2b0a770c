"""Loaded by every Python process the test suite starts (this folder is on their PYTHONPATH): it
records that process's writes into the real home directory (see tests/homeguard.py), then loads the
sitecustomize it shadows, if there is one."""

import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("PATCHSET_TEST_REAL_HOME") and os.environ.get("PATCHSET_TEST_HOME_WRITES"):
    import homeguard_hook

    homeguard_hook.install(os.environ["PATCHSET_TEST_REAL_HOME"], os.environ["PATCHSET_TEST_HOME_WRITES"])

for _entry in sys.path:
    _next = os.path.join(_entry or ".", "sitecustomize.py")
    if os.path.abspath(_entry or ".") != _here and os.path.isfile(_next):
        _spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", _next)
        if _spec is not None and _spec.loader is not None:
            _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
