"""Fixtures shared by the test modules (defined in tests/gpu_available.py)."""

from gpu_available import settings_override  # noqa: F401  (a fixture: pytest finds it here)
