"""Argument checking and the shape arithmetic of a transposed convolution.

Every path (the NumPy reference, the CUDA kernels, the benchmark) gets its
sizes from here; nothing else re-derives the output-size formula::

    out = (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1

A 1D problem is carried as a 2D one with a height of 1 (kernel height 1,
stride 1, padding 0, dilation 1), so one geometry object and one kernel family
serve both.  Everything here is pure Python and raises ``TypeError`` or
``ValueError`` naming the argument before any work starts.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from typing import Optional, Sequence, Tuple

import numpy

# The dtypes cupyconv computes in, by NumPy name (bfloat16 is ml_dtypes').
SUPPORTED_DTYPES = ("float16", "bfloat16", "float32", "float64")
PRECISIONS = ("highest", "tf32")
# torch.set_float32_matmul_precision's names: "high" is TF32; "medium"
# (bfloat16 products) has no kernels here.
PRECISION_NAMES = {"highest": "highest", "high": "tf32", "tf32": "tf32"}


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Sizes of one transposed convolution, always in 2D form (H, W).

    ``in_size``/``out_size``/``kernel``... are (height, width) pairs; for a 1D
    problem the height entries are 1 (and stride/dilation 1, padding 0).
    The derived shapes are computed once per object (cached_property writes
    the instance's __dict__, which a frozen dataclass allows and its
    equality and hash ignore).
    """

    spatial_dims: int  # 1 or 2: what the user called
    batched: bool  # False when the user passed (C, *spatial)
    batch: int
    in_channels: int
    out_channels: int
    groups: int
    in_size: Tuple[int, int]
    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[int, int]
    output_padding: Tuple[int, int]
    dilation: Tuple[int, int]
    out_size: Tuple[int, int]

    def __hash__(self) -> int:
        # Kernel plans are looked up by geometry on every call: hash the
        # (immutable) fields once.  An explicit __hash__ is kept by dataclass.
        value = self.__dict__.get("_hash")
        if value is None:
            value = hash(tuple(getattr(self, field.name) for field in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", value)
        return value

    @property
    def in_channels_per_group(self) -> int:
        return self.in_channels // self.groups

    @property
    def out_channels_per_group(self) -> int:
        return self.out_channels // self.groups

    # Shapes in the 2D working form (N, C, H, W) and the user's form.
    @functools.cached_property
    def input_shape4(self) -> Tuple[int, int, int, int]:
        return (self.batch, self.in_channels) + self.in_size

    @functools.cached_property
    def output_shape4(self) -> Tuple[int, int, int, int]:
        return (self.batch, self.out_channels) + self.out_size

    @functools.cached_property
    def weight_shape4(self) -> Tuple[int, int, int, int]:
        return (self.in_channels, self.out_channels_per_group) + self.kernel

    def user_shape(self, shape4: Sequence[int], is_weight: bool = False) -> Tuple[int, ...]:
        """Turn a (N, C, H, W) or weight shape back into the user's layout."""
        shape = tuple(shape4)
        if self.spatial_dims == 1:
            shape = shape[:2] + shape[3:]
        if not is_weight and not self.batched:
            shape = shape[1:]
        return shape

    @functools.cached_property
    def output_shape(self) -> Tuple[int, ...]:
        return self.user_shape(self.output_shape4)

    @property
    def flops(self) -> int:
        """Multiply-adds times two: every tap meets every input element once."""
        kh, kw = self.kernel
        h, w = self.in_size
        return 2 * self.batch * self.in_channels * self.out_channels_per_group * kh * kw * h * w


def output_size(in_size: int, kernel: int, stride: int, padding: int, output_padding: int, dilation: int) -> int:
    """Length of a transposed convolution's output along one axis."""
    return (in_size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


_KINDS = {}  # array type -> "numpy" or "cupy", for the types seen


def _array_kind(name: str, array) -> str:
    """'numpy' or 'cupy' for an array argument; TypeError for anything else."""
    kind = _KINDS.get(type(array))
    if kind is not None:
        return kind
    module = type(array).__module__ or ""
    if isinstance(array, numpy.ndarray):
        kind = "numpy"
    elif module.startswith("cupy") and type(array).__name__ == "ndarray":
        kind = "cupy"
    else:
        got = "None" if array is None else f"{module}.{type(array).__name__}"
        raise TypeError(f"{name} must be a numpy.ndarray or cupy.ndarray, got {got}")
    _KINDS[type(array)] = kind
    return kind


_DTYPE_NAMES = {}  # dtype -> its NumPy name, for the dtypes seen


def dtype_name(dtype) -> str:
    """numpy.dtype(dtype).name, remembered (NumPy derives the name anew on
    every access, about a microsecond: a tiny call's budget)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = numpy.dtype(dtype).name
    return name


def check_arrays(named_arrays: Sequence[Tuple[str, object]], optional: Sequence[str] = ("bias",)) -> str:
    """Check that the given (name, array) pairs are all NumPy or all CuPy,
    share one supported floating dtype and (for CuPy) one device.  An array
    named in `optional` may be None (it is then skipped); any other None is a
    TypeError naming it.  Returns 'numpy' or 'cupy'."""
    present = [(name, a) for name, a in named_arrays if a is not None or name not in optional]
    first_name, first = present[0]
    kind = _array_kind(first_name, first)
    for name, a in present[1:]:
        other = _array_kind(name, a)
        if other != kind:
            raise TypeError(
                f"{name} is a {other}.ndarray but {first_name} is a {kind}.ndarray: "
                "pass all arrays from one library (NumPy runs on the CPU, CuPy on the GPU)"
            )
    dtype = first.dtype
    if dtype_name(dtype) not in SUPPORTED_DTYPES:
        raise TypeError(f"{first_name} must have a floating dtype among {SUPPORTED_DTYPES}, got {dtype_name(dtype)}")
    for name, a in present[1:]:
        if a.dtype != dtype:
            raise TypeError(f"{name} has dtype {dtype_name(a.dtype)} but {first_name} has dtype {dtype_name(dtype)}: they must match")
    if kind == "cupy":
        device = first.device.id
        for name, a in present[1:]:
            if a.device.id != device:
                raise ValueError(f"{name} is on GPU {a.device.id} but {first_name} is on GPU {device}: put all arrays on one device")
    return kind


def _tuple(name: str, value, n: int, minimum: int) -> Tuple[int, ...]:
    """An int or a length-n tuple/list of ints, each >= minimum."""
    if isinstance(value, (tuple, list)):
        values = tuple(value)
        if len(values) != n:
            raise ValueError(f"{name} must be an int or a sequence of {n} ints, got {value!r}")
    else:
        values = (value,) * n
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must be an int or a sequence of {n} ints, got {value!r}")
        if v < minimum:
            what = "positive" if minimum == 1 else "non-negative"
            raise ValueError(f"{name} must be {what}, got {value!r}")
    return tuple(int(v) for v in values)


def check_precision(precision: Optional[str]) -> str:
    """The precision as one of PRECISIONS: 'highest' for None, 'tf32' for
    torch's 'high'; TypeError for a precision that is not a str, ValueError
    for another str.  It applies to float32 and is ignored for the other
    dtypes (float16 and bfloat16 always multiply in their own precision,
    float64 in float64)."""
    if precision is None:
        return "highest"
    names = tuple(PRECISION_NAMES)
    if not isinstance(precision, str):
        raise TypeError(f"precision must be None or one of {names}, got {type(precision).__name__} {precision!r}")
    name = PRECISION_NAMES.get(precision)
    if name is None:
        hint = ": bfloat16 products for float32 are not supported" if precision == "medium" else ""
        raise ValueError(f"precision must be None or one of {names}, got {precision!r}{hint}")
    return name


def _is_flag(value) -> bool:
    """A bool, a NumPy bool or an integer 0 or 1."""
    if type(value) is bool or isinstance(value, numpy.bool_):
        return True
    return isinstance(value, numbers.Integral) and value in (0, 1)


def check_output_mask(output_mask) -> Tuple[bool, bool, bool]:
    """A tuple or list of three flags (bools, NumPy bools, 0 or 1) as a tuple of
    bools: TypeError for another kind of value or entry (None, strings, floats),
    ValueError for another length."""
    if isinstance(output_mask, (tuple, list)) and len(output_mask) == 3:
        grad_input, grad_weight, grad_bias = output_mask
        if _is_flag(grad_input) and _is_flag(grad_weight) and _is_flag(grad_bias):
            return bool(grad_input), bool(grad_weight), bool(grad_bias)
    error = ValueError if isinstance(output_mask, (tuple, list)) and len(output_mask) != 3 else TypeError
    raise error(f"output_mask must be a sequence of 3 bools (grad_input, grad_weight, grad_bias), got {output_mask!r}")


def make_geometry(
    spatial_dims: int,
    input_shape: Sequence[int],
    weight_shape: Sequence[int],
    bias_shape: Optional[Sequence[int]],
    stride,
    padding,
    output_padding,
    groups,
    dilation,
    input_name: str = "input",
) -> Geometry:
    """Validate the shapes and hyper-parameters of conv_transpose{1,2}d and
    return the problem's Geometry.  Mirrors torch.nn.functional's rules."""
    input_shape = tuple(int(s) for s in input_shape)
    weight_shape = tuple(int(s) for s in weight_shape)
    d = spatial_dims
    if len(input_shape) not in (d + 1, d + 2):
        raise ValueError(
            f"{input_name} must have {d + 1} (unbatched) or {d + 2} (batched) dimensions "
            f"for conv_transpose{d}d, got shape {input_shape}"
        )
    if len(weight_shape) != d + 2:
        raise ValueError(
            f"weight must have {d + 2} dimensions (in_channels, out_channels // groups, *kernel_size) "
            f"for conv_transpose{d}d, got shape {weight_shape}"
        )
    batched = len(input_shape) == d + 2
    if not batched:
        input_shape = (1,) + input_shape
    stride_t = _tuple("stride", stride, d, 1)
    dilation_t = _tuple("dilation", dilation, d, 1)
    padding_t = _tuple("padding", padding, d, 0)
    output_padding_t = _tuple("output_padding", output_padding, d, 0)
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral):
        raise TypeError(f"groups must be an int, got {groups!r}")
    groups = int(groups)
    if groups < 1:
        raise ValueError(f"groups must be positive, got {groups}")

    batch, in_channels = input_shape[:2]
    in_spatial = input_shape[2:]
    kernel = weight_shape[2:]
    if any(s < 1 for s in in_spatial):
        raise ValueError(f"{input_name} spatial size must be positive, got shape {tuple(input_shape)}")
    if any(k < 1 for k in kernel) or weight_shape[1] < 1:
        raise ValueError(f"weight must have positive out_channels // groups and kernel size, got shape {weight_shape}")
    if in_channels < 1:
        raise ValueError(f"{input_name} must have at least one channel, got shape {tuple(input_shape)}")
    if weight_shape[0] != in_channels:
        raise ValueError(
            f"weight.shape[0] (in_channels) must equal {input_name}'s channel count {in_channels}, got weight shape {weight_shape}"
        )
    if in_channels % groups != 0:
        raise ValueError(f"groups={groups} must divide in_channels={in_channels}")
    out_channels = weight_shape[1] * groups
    if bias_shape is not None and tuple(bias_shape) != (out_channels,):
        raise ValueError(f"bias must have shape ({out_channels},) (out_channels), got {tuple(bias_shape)}")

    out_spatial = []
    for axis in range(d):
        op, s, dl = output_padding_t[axis], stride_t[axis], dilation_t[axis]
        if op >= s and op >= dl:
            raise ValueError(
                f"output_padding must be smaller than either stride or dilation on each axis, "
                f"got output_padding={output_padding!r}, stride={stride!r}, dilation={dilation!r}"
            )
        size = output_size(in_spatial[axis], kernel[axis], s, padding_t[axis], op, dl)
        if size <= 0:
            raise ValueError(
                f"computed output size {size} is not positive along spatial axis {axis} "
                f"(input {in_spatial[axis]}, kernel {kernel[axis]}, stride {s}, padding {padding_t[axis]}, "
                f"output_padding {op}, dilation {dl}): reduce padding"
            )
        out_spatial.append(size)

    if d == 1:
        # Carry 1D as 2D with a unit height.
        pad = lambda t, fill: (fill,) + tuple(t)  # noqa: E731
        in_spatial, kernel, out_spatial = pad(in_spatial, 1), pad(kernel, 1), pad(out_spatial, 1)
        stride_t, dilation_t = pad(stride_t, 1), pad(dilation_t, 1)
        padding_t, output_padding_t = pad(padding_t, 0), pad(output_padding_t, 0)

    return Geometry(
        spatial_dims=d,
        batched=batched,
        batch=batch,
        in_channels=in_channels,
        out_channels=out_channels,
        groups=groups,
        in_size=tuple(in_spatial),
        kernel=tuple(kernel),
        stride=tuple(stride_t),
        padding=tuple(padding_t),
        output_padding=tuple(output_padding_t),
        dilation=tuple(dilation_t),
        out_size=tuple(out_spatial),
    )


_make_geometry_remembered = functools.lru_cache(maxsize=1024)(make_geometry)


def _plain(value) -> bool:
    """An int or a tuple of ints, by exact type.  True, 2.0 and [2, 2] equal
    1, 2 and (2, 2) and hash alike, but make_geometry rejects the first two,
    so only plain values may take a remembered answer."""
    if type(value) is int:
        return True
    return type(value) is tuple and all(type(v) is int for v in value)


def geometry_of(
    spatial_dims: int, input_shape: Tuple[int, ...], weight_shape: Tuple[int, ...], bias_shape: Optional[Tuple[int, ...]],
    stride, padding, output_padding, groups, dilation, input_name: str = "input",
) -> Geometry:  # fmt: skip
    """make_geometry, remembered for calls whose arguments are plain ints or
    tuples of ints (shapes are arrays' .shape: tuples of ints).  It is pure,
    and at 10 us per call the largest host cost of a tiny convolution.  A bad
    call raises every time (lru_cache keeps no exceptions)."""
    if _plain(stride) and _plain(padding) and _plain(output_padding) and type(groups) is int and _plain(dilation):
        return _make_geometry_remembered(
            spatial_dims, input_shape, weight_shape, bias_shape, stride, padding, output_padding, groups, dilation, input_name
        )
    return make_geometry(spatial_dims, input_shape, weight_shape, bias_shape, stride, padding, output_padding, groups, dilation, input_name)


def check_grad_output(geometry: Geometry, grad_output_shape: Sequence[int]) -> None:
    expected = geometry.output_shape
    if tuple(grad_output_shape) != expected:
        raise ValueError(f"grad_output must have the forward output's shape {expected}, got {tuple(grad_output_shape)}")
