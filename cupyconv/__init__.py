"""cupyconv: transposed convolution on CuPy arrays with PyTorch's semantics.

``conv_transpose1d/2d`` and their ``*_backward`` take ``cupy.ndarray`` inputs
(run by the CUDA kernels on the arrays' device and CuPy's current stream) or
``numpy.ndarray`` inputs (run by the NumPy reference on the CPU).  Results
match ``torch.nn.functional.conv_transpose1d/2d``: weight layout
``(C_in, C_out // groups, *kernel)``, batched ``(N, C, *spatial)`` or
unbatched ``(C, *spatial)`` input, and along each axis an output of length::

    (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1

dtypes: float16, bfloat16, float32, float64 (input, weight and bias alike);
products accumulate in float32 (float64 for float64).  ``precision`` applies
to float32: ``"highest"`` (default, float32-accurate) or ``"tf32"`` (allows
TF32 tensor-core arithmetic; torch's name for it, ``"high"``, is accepted
too).  It is ignored for the other dtypes.
"""

from __future__ import annotations

from . import _api

__all__ = ["conv_transpose1d", "conv_transpose2d", "conv_transpose1d_backward", "conv_transpose2d_backward", "set_autotune"]
__version__ = "0.1.0"


def set_autotune(enabled):
    """Turn tile autotuning on (True) or off (False) for this process, or
    (None) leave it to the ``CUPYCONV_AUTOTUNE`` environment variable.

    With it on, the first GPU call on each new problem signature (device,
    dtype, shapes and arguments) times every candidate tile configuration of
    its kernels on the call's own arrays and keeps the fastest, remembered in
    ``$CUPYCONV_CACHE_DIR/autotune.json`` (default ``~/.cache/cupyconv``) for
    later calls and processes.  Off, a heuristic picks by channel counts."""
    from . import _autotune

    _autotune.set_enabled(enabled)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *, precision=None):
    """1D transposed convolution of ``input`` (N, C_in, L) or (C_in, L) with
    ``weight`` (C_in, C_out // groups, K); ``bias`` is (C_out,) or None."""
    return _api.conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation, precision)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *, precision=None):
    """2D transposed convolution of ``input`` (N, C_in, H, W) or (C_in, H, W)
    with ``weight`` (C_in, C_out // groups, KH, KW); ``bias`` is (C_out,) or
    None.  stride, padding, output_padding and dilation take an int or a pair."""
    return _api.conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation, precision)


def conv_transpose1d_backward(
    grad_output, input, weight, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
    output_mask=(True, True, True), precision=None,
):  # fmt: skip
    """Gradients of conv_transpose1d: ``(grad_input, grad_weight, grad_bias)``.

    ``grad_output`` has the forward output's shape; a False entry of
    ``output_mask`` skips that gradient and returns None in its place.
    grad_weight and grad_bias are reduced in a fixed order: the same inputs
    give bitwise-identical results on every run."""
    return _api.conv_transpose_backward(
        1, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision
    )


def conv_transpose2d_backward(
    grad_output, input, weight, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
    output_mask=(True, True, True), precision=None,
):  # fmt: skip
    """Gradients of conv_transpose2d: ``(grad_input, grad_weight, grad_bias)``;
    see conv_transpose1d_backward."""
    return _api.conv_transpose_backward(
        2, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision
    )
