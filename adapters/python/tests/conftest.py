"""Shared helpers: where the fixtures and adapters are, and `requires_torch`."""

from __future__ import annotations

import importlib.util
import json
import pathlib
from typing import Any

import pytest

ADAPTERS = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ADAPTERS / "fixtures"
HAS_TORCH = importlib.util.find_spec("torch") is not None

requires_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch: run scripts/adapters-env.sh")


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture(autouse=True, scope="session")
def _deterministic_torch():
    """The torch tests run in the mode the adapters run in (one thread, deterministic kernels only)."""
    if HAS_TORCH:
        from accumcheck_adapter import deterministic_torch

        deterministic_torch()
