"""Argument errors that need CuPy arrays on a GPU (the checks without one:
tests/test_validation.py)."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy

import cupyconv

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


def test_gpu_argument_errors():
    x = cupy.ones((2, 4, 7), dtype=numpy.float32)
    w = cupy.ones((4, 3, 3), dtype=numpy.float32)
    with pytest.raises(TypeError, match="weight is a numpy.ndarray but input is a cupy.ndarray"):
        cupyconv.conv_transpose1d(x, cupy.asnumpy(w))
    with pytest.raises(TypeError, match="bias is a numpy.ndarray"):
        cupyconv.conv_transpose1d(x, w, numpy.ones(3, numpy.float32))
    with pytest.raises(ValueError, match="output_padding"):
        cupyconv.conv_transpose1d(x, w, stride=2, output_padding=2)
    assert cupyconv.conv_transpose1d(x, w, stride=2).shape == (2, 3, 15)


@pytest.mark.skipif(not HAVE_GPU or cupy.cuda.runtime.getDeviceCount() < 2, reason="needs two GPUs")
def test_arrays_on_different_gpus_are_refused():
    x = cupy.ones((2, 4, 7), dtype=numpy.float32)
    with cupy.cuda.Device(1):
        w = cupy.ones((4, 3, 3), dtype=numpy.float32)
        y = cupyconv.conv_transpose1d(cupy.asarray(x), w)  # both on GPU 1 works there
        assert y.device.id == 1
    with pytest.raises(ValueError, match="weight is on GPU 1 but input is on GPU 0"):
        cupyconv.conv_transpose1d(x, w)
