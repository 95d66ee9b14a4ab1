"""Whether CuPy sees a usable GPU, for the GPU tests: they skip without one,
except with CUPYCONV_REQUIRE_GPU=1 (the device scripts set it), where a
missing GPU fails the run instead."""

from __future__ import annotations

import os

try:
    import cupy

    HAVE_GPU = cupy.is_available()
except Exception:  # CuPy missing, or no driver
    cupy, HAVE_GPU = None, False

if os.environ.get("CUPYCONV_REQUIRE_GPU") == "1" and not HAVE_GPU:
    raise RuntimeError("CUPYCONV_REQUIRE_GPU=1 but CuPy sees no usable GPU")
