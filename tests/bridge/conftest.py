"""The Bridge contract tests run only where Megatron Bridge is installed (scripts/bridge_env.sh's venv).

Elsewhere (the main venv, where ``python -m pytest`` collects them too) every test in this folder is skipped
with the reason and the command that runs them. The test modules import Bridge inside their tests, never at
the top, so collecting them needs no Bridge.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP_REASON = (
    "megatron.bridge is not installed in this interpreter; run scripts/bridge_env.sh and "
    "`.bridge-venv/bin/python -m pytest tests/bridge`"
)


def bridge_available() -> bool:
    try:
        return importlib.util.find_spec("megatron.bridge") is not None
    except (ImportError, ValueError):
        return False


def pytest_collection_modifyitems(config, items):
    if bridge_available():
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if str(item.path).startswith(HERE + os.sep):
            item.add_marker(skip)
