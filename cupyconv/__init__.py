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

from typing import Optional, Tuple, Union

from . import _api

__all__ = ["conv_transpose1d", "conv_transpose2d", "conv_transpose1d_backward", "conv_transpose2d_backward", "set_autotune"]
__version__ = "0.1.0"


def set_autotune(enabled: Optional[bool]) -> None:
    """Turn kernel autotuning on or off for this process.

    Parameters
    ----------
    enabled : bool or None
        True: the first GPU call on each new problem signature (device,
        dtype, shapes and arguments) times every candidate tile configuration
        of its kernels on the call's own arrays and keeps the fastest,
        remembered in ``$CUPYCONV_CACHE_DIR/autotune.json`` (default
        ``~/.cache/cupyconv``) for later calls and processes.  False: a
        heuristic picks by channel counts.  None: follow the
        ``CUPYCONV_AUTOTUNE`` environment variable again.

    Raises
    ------
    TypeError
        If `enabled` is not True, False or None.
    """
    from . import _autotune

    _autotune.set_enabled(enabled)


def conv_transpose1d(
    input, weight, bias=None, stride: Union[int, Tuple[int, ...]] = 1, padding: Union[int, Tuple[int, ...]] = 0, output_padding: Union[int, Tuple[int, ...]] = 0, groups: int = 1,
    dilation: Union[int, Tuple[int, ...]] = 1, *, precision: Optional[str] = None,
):  # fmt: skip
    """1D transposed convolution, with ``torch.nn.functional.conv_transpose1d``'s semantics.

    ``y[n, co, o] = bias[co] + sum over ci in co's group and k of
    weight[ci, co % (C_out // groups), k] * input[n, ci, l]`` where
    ``o = l * stride - padding + k * dilation``, and the output length is::

        L_out = (L - 1) * stride - 2 * padding + dilation * (K - 1) + output_padding + 1

    Parameters
    ----------
    input : cupy.ndarray or numpy.ndarray
        ``(N, C_in, L)``, or ``(C_in, L)`` unbatched.  CuPy arrays run the
        CUDA kernels on their device and CuPy's current stream; NumPy arrays
        run the NumPy reference on the CPU.  float16, bfloat16, float32 or
        float64; every array of the call from one library, of one dtype.
    weight : array
        ``(C_in, C_out // groups, K)``.
    bias : array or None
        ``(C_out,)``.
    stride, padding, output_padding, dilation : int or tuple of one int
        As torch's; ``output_padding`` must be smaller than ``stride`` or
        ``dilation``.
    groups : int
        Must divide ``C_in``.
    precision : {None, "highest", "high", "tf32"}
        float32 only (ignored for the other dtypes): ``"highest"`` (the
        default) is float32-accurate; ``"tf32"`` (torch's name: ``"high"``)
        allows TF32 tensor-core products.

    Returns
    -------
    array
        ``(N, C_out, L_out)`` (``(C_out, L_out)`` unbatched), of the input's
        library and dtype.  Products accumulate in float32 (float64 for
        float64).

    Raises
    ------
    TypeError
        An argument of the wrong kind (``None`` for an array, mixed
        libraries or dtypes, a float stride), named in the message.
    ValueError
        A bad shape or value (channel counts that do not match, a
        non-positive output length), named in the message.
    cupy.cuda.memory.OutOfMemoryError
        If the device runs out of memory; the next call works.

    Examples
    --------
    >>> import numpy, cupyconv
    >>> x = numpy.ones((2, 4, 7), dtype=numpy.float32)
    >>> w = numpy.ones((4, 3, 3), dtype=numpy.float32)
    >>> cupyconv.conv_transpose1d(x, w, stride=2).shape
    (2, 3, 15)
    """
    return _api.conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation, precision)


def conv_transpose2d(
    input, weight, bias=None, stride: Union[int, Tuple[int, ...]] = 1, padding: Union[int, Tuple[int, ...]] = 0, output_padding: Union[int, Tuple[int, ...]] = 0, groups: int = 1,
    dilation: Union[int, Tuple[int, ...]] = 1, *, precision: Optional[str] = None,
):  # fmt: skip
    """2D transposed convolution, with ``torch.nn.functional.conv_transpose2d``'s semantics.

    Each spatial axis follows :func:`conv_transpose1d`'s formula::

        H_out = (H - 1) * stride[0] - 2 * padding[0] + dilation[0] * (KH - 1) + output_padding[0] + 1

    and the same for W with the second entries.

    Parameters
    ----------
    input : cupy.ndarray or numpy.ndarray
        ``(N, C_in, H, W)``, or ``(C_in, H, W)`` unbatched.
    weight : array
        ``(C_in, C_out // groups, KH, KW)``.
    bias : array or None
        ``(C_out,)``.
    stride, padding, output_padding, dilation : int or pair of ints
        One value for both axes, or a value per axis.
    groups : int
        Must divide ``C_in``.
    precision : {None, "highest", "high", "tf32"}
        As for :func:`conv_transpose1d`.

    Returns
    -------
    array
        ``(N, C_out, H_out, W_out)`` (``(C_out, H_out, W_out)`` unbatched).

    Raises
    ------
    TypeError, ValueError, cupy.cuda.memory.OutOfMemoryError
        As for :func:`conv_transpose1d`.

    Examples
    --------
    >>> import numpy, cupyconv
    >>> x = numpy.ones((1, 2, 5, 6))
    >>> w = numpy.ones((2, 3, 3, 3))
    >>> cupyconv.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1).shape
    (1, 3, 10, 12)
    """
    return _api.conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation, precision)


def conv_transpose1d_backward(
    grad_output, input, weight, stride: Union[int, Tuple[int, ...]] = 1, padding: Union[int, Tuple[int, ...]] = 0, output_padding: Union[int, Tuple[int, ...]] = 0, groups: int = 1,
    dilation: Union[int, Tuple[int, ...]] = 1, *, output_mask: Tuple[bool, bool, bool] = (True, True, True), precision: Optional[str] = None,
):  # fmt: skip
    """Gradients of :func:`conv_transpose1d`: ``(grad_input, grad_weight, grad_bias)``.

    ``grad_input`` is the ordinary convolution of ``grad_output`` with
    ``weight`` (stride, padding, dilation and groups as given);
    ``grad_weight[ci, j, k]`` sums ``input[n, ci, l] * grad_output[n, co, l *
    stride - padding + k * dilation]`` over ``n`` and ``l``; ``grad_bias``
    sums ``grad_output`` over all but its channel axis.  grad_weight and
    grad_bias are reduced in a fixed order: the same inputs give
    bitwise-identical results on every run.

    Parameters
    ----------
    grad_output : array
        The forward output's shape.
    input, weight : array
        As for :func:`conv_transpose1d`.
    stride, padding, output_padding, groups, dilation
        The forward call's.
    output_mask : tuple of three bools
        Which of (grad_input, grad_weight, grad_bias) to compute.
    precision : {None, "highest", "high", "tf32"}
        As for :func:`conv_transpose1d`.

    Returns
    -------
    tuple
        ``(grad_input, grad_weight, grad_bias)`` shaped like ``input``,
        ``weight`` and ``(C_out,)``; None where `output_mask` is False.

    Raises
    ------
    TypeError, ValueError, cupy.cuda.memory.OutOfMemoryError
        As for :func:`conv_transpose1d`; also a `grad_output` whose shape is
        not the forward output's.

    Examples
    --------
    >>> import numpy, cupyconv
    >>> x, w = numpy.ones((2, 4, 7)), numpy.ones((4, 3, 3))
    >>> grad_output = numpy.ones((2, 3, 15))
    >>> [g.shape for g in cupyconv.conv_transpose1d_backward(grad_output, x, w, stride=2)]
    [(2, 4, 7), (4, 3, 3), (3,)]
    """
    return _api.conv_transpose_backward(
        1, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision
    )


def conv_transpose2d_backward(
    grad_output, input, weight, stride: Union[int, Tuple[int, ...]] = 1, padding: Union[int, Tuple[int, ...]] = 0, output_padding: Union[int, Tuple[int, ...]] = 0, groups: int = 1,
    dilation: Union[int, Tuple[int, ...]] = 1, *, output_mask: Tuple[bool, bool, bool] = (True, True, True), precision: Optional[str] = None,
):  # fmt: skip
    """Gradients of :func:`conv_transpose2d`: ``(grad_input, grad_weight, grad_bias)``.

    Parameters, returns and errors as for :func:`conv_transpose1d_backward`,
    with :func:`conv_transpose2d`'s shapes.

    Examples
    --------
    >>> import numpy, cupyconv
    >>> x, w = numpy.ones((1, 2, 5, 6)), numpy.ones((2, 3, 3, 3))
    >>> grad_output = numpy.ones((1, 3, 11, 13))
    >>> [g.shape for g in cupyconv.conv_transpose2d_backward(grad_output, x, w, stride=2)]
    [(1, 2, 5, 6), (2, 3, 3, 3), (3,)]
    """
    return _api.conv_transpose_backward(
        2, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision
    )
