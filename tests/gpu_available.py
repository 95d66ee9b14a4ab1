"""Whether CuPy sees a usable GPU, for the GPU tests: they skip without one,
except with CUPYCONV_REQUIRE_GPU=1 (the device scripts set it), where a
missing GPU fails the run instead.  And the settings_override fixture
(tests/conftest.py makes it available to every test module)."""

from __future__ import annotations

import contextlib
import os

import pytest

import cupyconv.settings

try:
    import cupy

    HAVE_GPU = cupy.is_available()
except Exception:  # CuPy missing, or no driver
    cupy, HAVE_GPU = None, False

if os.environ.get("CUPYCONV_REQUIRE_GPU") == "1" and not HAVE_GPU:
    raise RuntimeError("CUPYCONV_REQUIRE_GPU=1 but CuPy sees no usable GPU")


class SettingsOverride:
    """What the settings_override fixture gives a test.  Called as
    override(**changes), it puts cupyconv.settings.override(**changes) in
    force until the test ends, each call on top of the ones before (as
    successive monkeypatch.setattr calls were); observe_launches() starts
    cupyconv._cuda.observe_launches() until then and returns its list of
    kernel names; undo() ends them all at once (as monkeypatch.undo()).
    Not for use inside a ``with cupyconv.settings.override(...)`` block that
    ends before the test does (that block would restore what it found)."""

    def __init__(self):
        self._stack = contextlib.ExitStack()

    def __call__(self, **changes) -> cupyconv.settings.Settings:
        return self._stack.enter_context(cupyconv.settings.override(**changes))

    def observe_launches(self) -> list:
        from cupyconv import _cuda

        return self._stack.enter_context(_cuda.observe_launches())

    def observe_plans(self) -> list:
        """cupyconv._launch.observe_plans() until the test ends: the list of
        (problem, plan) of every pass run from here on."""
        from cupyconv import _launch

        return self._stack.enter_context(_launch.observe_plans())

    def undo(self) -> None:
        stack, self._stack = self._stack, contextlib.ExitStack()
        stack.close()


@pytest.fixture
def settings_override():
    """override(**changes): routing settings changed for the rest of the test
    (see SettingsOverride), restored at its end."""
    override = SettingsOverride()
    try:
        yield override
    finally:
        override.undo()
