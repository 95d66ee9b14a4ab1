"""Property tests of argument handling: hypothesis throws random mixtures of
valid and invalid arguments at conv_transpose1d/2d and their backward, and
each call must either return what torch returns (float64 torch on the CPU,
autograd for the backward, on the same inputs upcast) or raise TypeError or
ValueError naming an argument -- never another exception -- and the next
valid call must still work.

Which calls are valid is torch's verdict (torch.nn.functional.conv_transpose
on the same arguments, tensors in their own dtypes), plus the rules that are
cupyconv's own: its dtypes (shared by every array; torch also computes
integer convolutions and takes some bias dtypes that differ from input's),
``precision``, backward's ``output_mask`` and ``grad_output``.  A call torch
accepts and cupyconv refuses, or the other way round, fails the test, except
for the disagreements listed in KNOWN_DISAGREEMENTS, where cupyconv must
raise as described there.

The NumPy path runs everywhere; the same properties on the CuPy path are
marked gpu (skipped without a GPU; with CUPYCONV_REQUIRE_GPU=1 a missing GPU
fails instead) and also check that no bad call leaves the device broken.
Derandomized, with no example database: the same examples on every run.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Dict, Optional, Set

import numpy
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cupyconv  # noqa: E402

from sweep import relative_error  # noqa: E402

from gpu_available import HAVE_GPU, cupy  # noqa: E402


_COMMON = dict(
    deadline=None, derandomize=True, database=None, print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip
CPU_SETTINGS = settings(max_examples=300, **_COMMON)
GPU_SETTINGS = settings(max_examples=100, **_COMMON)

# Error allowed against float64 torch, by dtype, relative to the same sums of
# the products' absolute values (_scaled_error); float32 with precision
# "tf32" on the GPU may round every factor to TF32 (2**-11).
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}
TF32_TOLERANCE = 4e-3

PER_AXIS = ("stride", "padding", "output_padding", "dilation")
MINIMUM = {"stride": 1, "dilation": 1, "padding": 0, "output_padding": 0}
# valid values, the small ones likelier (larger paddings and output_paddings
# clash with the sizes, strides and dilations more often)
VALUES = {"stride": (1, 1, 2, 2, 3), "dilation": (1, 1, 2, 3), "padding": (0, 0, 0, 1, 1, 2, 3), "output_padding": (0, 0, 0, 0, 1, 1, 2)}
ARGUMENTS = ("grad_output", "input", "weight", "bias", "groups", "precision", "output_mask") + PER_AXIS
OTHER_DTYPE = {"float32": numpy.float64, "float64": numpy.float32}


# --------------------------------------------------------------------------
# A drawn call: every argument as drawn, its valid counterpart, and which
# arguments were drawn invalid on their own (None, a float stride, ...).


@dataclasses.dataclass
class Call:
    backward: bool
    dims: int
    dtype: str
    arguments: Dict[str, object]  # as drawn
    good: Dict[str, object]  # a valid value for each
    bad: Set[str]  # drawn invalid on their own
    noncontiguous: Set[str]  # arrays passed as strided views

    def describe(self) -> str:
        def show(v):
            return f"ndarray{v.shape} {v.dtype}" if isinstance(v, numpy.ndarray) else repr(v)

        items = ", ".join(f"{k}={show(v)}" for k, v in self.arguments.items())
        return f"{'backward' if self.backward else 'forward'} {self.dims}d ({items}); bad={sorted(self.bad)}"


# Wrong kinds of array, each invalid whatever the other arguments are (an
# input with one axis fewer or more than a batched one would be a valid
# unbatched or batched one: its "fewer dims" and "more dims" have only the
# spatial axes, or three more).
ARRAY_FAULTS = {
    "input": ("none", "list", "scalar", "int64", "other dtype", "fewer dims", "more dims"),
    "weight": ("none", "list", "int64", "other dtype", "fewer dims", "more dims", "channels"),
    "bias": ("list", "scalar", "int64", "other dtype", "longer", "2d"),
    "grad_output": ("none", "list", "int64", "other dtype", "fewer dims", "more dims", "longer"),
}


def _faulty_array(kind, good, name, dims):
    if kind == "none":
        return None
    if kind == "list":
        return good.tolist()
    if kind == "scalar":
        return 1.0
    if kind == "int64":
        return numpy.ones(good.shape, numpy.int64)
    if kind == "other dtype":
        return good.astype(OTHER_DTYPE[good.dtype.name])
    if kind == "fewer dims":
        return numpy.zeros(good.shape[-dims:] if name == "input" else good.shape[1:], good.dtype)
    if kind == "more dims":
        return good.reshape((1,) * (dims + 3 - good.ndim if name == "input" else 1) + good.shape)
    if kind == "longer":  # last axis one longer (grad_output's shape, bias's size)
        return numpy.concatenate([good, good[..., :1]], axis=-1)
    if kind == "2d":  # bias (1, C)
        return good[None]
    if kind == "channels":  # weight for one channel more than input has
        return numpy.concatenate([good, good[:1]], axis=0)
    raise AssertionError(kind)


PER_AXIS_FAULTS = (
    "None", "float", "integral float", "bool", "str", "nested", "short", "long", "empty", "below", "negative", "bad entry", "array",
)  # fmt: skip


def _faulty_per_axis(draw, kind, name, values, dims):
    if kind == "None":
        return None
    if kind == "float":
        return values[0] + 0.5
    if kind == "integral float":
        return float(values[0])
    if kind == "bool":
        return draw(st.booleans())
    if kind == "str":
        return str(values[0])
    if kind == "nested":
        return [[v] for v in values]
    if kind == "short":  # 2D: one entry (torch expands it, see KNOWN_DISAGREEMENTS); 1D: none
        return tuple(values[:1]) if dims == 2 else ()
    if kind == "long":
        return tuple(values) + (values[0],)
    if kind == "empty":
        return ()
    if kind == "below":
        return MINIMUM[name] - 1
    if kind == "negative":
        return tuple(v if i else -1 - v for i, v in enumerate(values))
    if kind == "bad entry":  # the last entry (in 2D torch takes a bool there, see KNOWN_DISAGREEMENTS)
        return tuple(values[:-1]) + (draw(st.sampled_from((None, 1.0, True, "1", numpy.float64(1.0)))),)
    if kind == "array":
        return numpy.array(values if dims == 2 else values[0])
    raise AssertionError(kind)


def _valid_per_axis(draw, values):
    form = draw(st.sampled_from(("int", "tuple", "list", "numpy", "numpy tuple")))
    if form == "int":
        return values[0]
    if form == "tuple":
        return tuple(values)
    if form == "list":
        return list(values)
    if form == "numpy":
        return numpy.int64(values[0])
    return tuple(numpy.int32(v) for v in values)


BAD_GROUPS = (None, 0, -1, 1.0, 2.0, True, "1", (1,))
BAD_MASKS = (None, True, "abc", (True, True), (True,) * 4, (None, True, True), ("a", "b", "c"), (1.0, 0, 1), (2, 0, 1), numpy.ones(3, bool))
BAD_PRECISIONS = ("fast", "TF32", "", 3, True, ["tf32"], b"highest")


def _out_size(size, kernel, stride, padding, output_padding, dilation):
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


@st.composite
def calls(draw, backward: bool):
    """A Call: every argument valid on its own (a third of the calls), one
    argument invalid (a third), or each invalid with chance 1/4.  Valid
    arguments may still clash (groups, padding and output_padding against
    the shapes, stride and dilation)."""
    dims = draw(st.sampled_from((1, 2)))
    dtype = draw(st.sampled_from(("float32", "float64")))
    rng = numpy.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    batch = draw(st.sampled_from((None, 0, 1, 1, 2, 2)))
    groups = draw(st.sampled_from((1, 1, 2)))
    in_channels = groups * draw(st.integers(1, 2))
    out_per_group = draw(st.integers(1, 2))
    kernel = tuple(draw(st.lists(st.integers(1, 4), min_size=dims, max_size=dims)))
    size = tuple(draw(st.lists(st.integers(1, 8 if dims == 1 else 5), min_size=dims, max_size=dims)))
    lead = () if batch is None else (batch,)
    with_bias = not backward and draw(st.booleans())

    names = ["input", "weight", "groups", "precision", *PER_AXIS] + (["grad_output", "output_mask"] if backward else [])
    names += ["bias"] if with_bias else []
    mode = draw(st.sampled_from(("valid", "one", "many")))
    chosen = draw(st.sampled_from(names)) if mode == "one" else None
    bad: Set[str] = {n for n in names if (n == chosen if mode == "one" else mode == "many" and draw(st.integers(0, 3)) == 0)}
    arguments, good = {}, {}

    def array(name, shape):
        good[name] = value = rng.standard_normal(shape).astype(dtype)
        arguments[name] = _faulty_array(draw(st.sampled_from(ARRAY_FAULTS[name])), value, name, dims) if name in bad else value

    array("input", lead + (in_channels,) + size)
    array("weight", (in_channels, out_per_group) + kernel)
    for name in PER_AXIS:
        values = draw(st.lists(st.sampled_from(VALUES[name]), min_size=dims, max_size=dims))
        good[name] = tuple(values)
        if name in bad:
            arguments[name] = _faulty_per_axis(draw, draw(st.sampled_from(PER_AXIS_FAULTS)), name, values, dims)
        else:
            arguments[name] = _valid_per_axis(draw, values)
    good["groups"] = groups
    if "groups" in bad:
        arguments["groups"] = draw(st.sampled_from(BAD_GROUPS))
    else:  # mostly the shapes' groups; another positive int is valid on its own (the shapes decide)
        arguments["groups"] = draw(st.sampled_from((groups, groups, groups, numpy.int64(groups), draw(st.integers(1, 4)))))
    good["bias"] = None
    if with_bias:
        array("bias", (out_per_group * groups,))
    elif not backward:
        arguments["bias"] = None
    if backward:
        stride, padding, output_padding, dilation = (good[n] for n in PER_AXIS)
        out = tuple(max(1, _out_size(size[i], kernel[i], stride[i], padding[i], output_padding[i], dilation[i])) for i in range(dims))
        array("grad_output", lead + (out_per_group * groups,) + out)
        good["output_mask"] = mask = tuple(draw(st.lists(st.booleans(), min_size=3, max_size=3)))
        if "output_mask" in bad:
            arguments["output_mask"] = draw(st.sampled_from(BAD_MASKS))
        else:
            arguments["output_mask"] = draw(st.sampled_from((mask, mask, list(mask), [numpy.bool_(m) for m in mask], tuple(int(m) for m in mask))))
    good["precision"] = None
    if "precision" in bad:
        arguments["precision"] = draw(st.sampled_from(BAD_PRECISIONS))
    else:
        arguments["precision"] = draw(st.sampled_from((None, "highest", "tf32")))

    noncontiguous = {
        name for name in ("input", "weight", "grad_output")
        if isinstance(arguments.get(name), numpy.ndarray) and arguments[name].ndim and draw(st.booleans())
    }  # fmt: skip
    return Call(backward, dims, dtype, arguments, good, bad, noncontiguous)


# --------------------------------------------------------------------------
# The oracle.

def _axes(value, dims):
    """A per-axis argument torch took, as a tuple of dims ints."""
    values = tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else (int(value),)
    return values * dims if len(values) == 1 else values


def _out_sizes(call, a):
    """The output's spatial sizes by the formula, for arguments torch took."""
    x, w = a["input"], a["weight"]
    stride, padding, output_padding, dilation = (_axes(a[n], call.dims) for n in PER_AXIS)
    return tuple(
        _out_size(x.shape[-call.dims + i], w.shape[2 + i], stride[i], padding[i], output_padding[i], dilation[i])
        for i in range(call.dims)
    )  # fmt: skip


def _empty_batch(call, a):
    """An empty batch (N = 0) with a dilation of 0 or output_padding too
    large, which torch lets pass (the argument cupyconv's message names)."""
    x = a["input"]
    if not (isinstance(x, numpy.ndarray) and x.ndim == call.dims + 2 and x.shape[0] == 0):
        return None
    op, s, d = (_axes(a[n], call.dims) for n in ("output_padding", "stride", "dilation"))
    if 0 in d:
        return "dilation"
    return "output_padding" if any(o >= si and o >= di for o, si, di in zip(op, s, d)) else None


def _empty_output(call, a):
    """An output of size 0 along an axis, which torch sometimes returns (the
    argument cupyconv's message names)."""
    return "padding" if 0 in _out_sizes(call, a) else None


def _bool_entry(call, a):
    """A per-axis sequence with a bool after its first entry, which torch's
    argument parser takes as an int (it checks the first entry's type)."""
    for name in PER_AXIS:
        value = a[name]
        if isinstance(value, (tuple, list)) and any(type(v) is bool for v in value[1:]):
            return name
    return None


# Calls torch computes and cupyconv refuses, deliberately or knowingly: what
# each is, a predicate on the arguments of a call torch took giving the
# argument cupyconv's message names (None where it does not apply), and the
# exception cupyconv raises.  Found by these tests and reported, not hidden:
# test_known_disagreements_still_hold notices a change on either side.
KNOWN_DISAGREEMENTS = [
    # torch expands a one-entry sequence to every axis (ATen's
    # expand_param_if_needed: conv_transpose2d(x, w, stride=(2,)) is
    # stride=(2, 2)); cupyconv (and cupyconv.torch) take an int or exactly
    # one entry per axis.
    (
        "a one-entry sequence for a 2D per-axis argument",
        lambda call, a: call.dims == 2 and next((n for n in PER_AXIS if isinstance(a[n], (tuple, list)) and len(a[n]) == 1), None),
        ValueError,
    ),
    # torch's parser takes padding=(1, True) as (1, 1) (and refuses (True, 1)
    # and True); cupyconv refuses a bool anywhere.
    ("a bool after a per-axis sequence's first entry", _bool_entry, TypeError),
    # torch checks dilation > 0 (its frontend only refuses < 0) and
    # output_padding < stride or dilation in the CPU backend's shape check,
    # which an empty batch (N = 0) never reaches: it returns an empty output
    # of the formula's size.  cupyconv checks every call alike.
    ("an empty batch: dilation 0, or output_padding at least stride and dilation", _empty_batch, ValueError),
    # Where the formula gives an output of size 0, torch's CPU slow path
    # (slow_conv_transpose2d) raises "Output size is too small", but its
    # oneDNN path (float32, grouped and some other problems) and an empty
    # batch return an empty output; below 0 both fail.  cupyconv refuses
    # every output size below 1.
    ("an output of size 0", _empty_output, ValueError),
]


def _cupyconv_rules(call: Call, a: Dict[str, object]) -> Optional[str]:
    """The rules that are cupyconv's own, beyond torch's: the argument a
    call breaks (None where it keeps them all)."""
    arrays = (["grad_output"] if call.backward else []) + ["input", "weight"] + (["bias"] if a.get("bias") is not None else [])
    for name in arrays:
        if not isinstance(a[name], numpy.ndarray):
            return name
    dtypes = {a[name].dtype.name for name in arrays}
    if len(dtypes) > 1 or not dtypes <= {"float32", "float64"}:
        # one shared dtype (torch casts some biases to input's dtype on the
        # CPU) among cupyconv's (torch also runs integer convolutions)
        return next(n for n in arrays if a[n].dtype.name not in ("float32", "float64") or a[n].dtype != a["input"].dtype)
    precision = a["precision"]
    if not (precision is None or (type(precision) is str and precision in ("highest", "tf32"))):
        return "precision"
    if call.backward:
        mask = a["output_mask"]
        flag = lambda m: isinstance(m, (bool, numpy.bool_)) or (type(m) in (int, numpy.int64) and m in (0, 1))  # noqa: E731
        if not isinstance(mask, (tuple, list)) or len(mask) != 3 or not all(flag(m) for m in mask):
            return "output_mask"
    return None


def _torch_forward(call: Call, a: Dict[str, object], upcast: bool = False, absolute: bool = False):
    """torch's conv_transpose on the arguments: (the output tensor, or the
    exception torch raises; the tensors it took).  Arrays become tensors in
    their own dtype, or (upcast) in float64 requiring grad, of the absolute
    values where `absolute`; everything else is passed as it is."""

    def tensor(v):
        if not isinstance(v, numpy.ndarray):
            return v
        if not upcast:
            return torch.from_numpy(v)
        v = numpy.abs(v) if absolute else v
        return torch.from_numpy(v.astype(numpy.float64)).requires_grad_()

    x, w = tensor(a["input"]), tensor(a["weight"])
    b = tensor(a.get("bias"))
    if call.backward and upcast and isinstance(w, torch.Tensor):  # grad_bias: a zero bias's gradient
        b = torch.zeros(w.shape[1] * int(a["groups"]), dtype=torch.float64, requires_grad=True)
    function = F.conv_transpose1d if call.dims == 1 else F.conv_transpose2d
    try:
        y = function(x, w, b, *(a[n] for n in ("stride", "padding", "output_padding", "groups", "dilation")))
    except Exception as error:  # torch raises RuntimeError for most bad values
        return error, (x, w, b)
    return y, (x, w, b)


def _verdict(call: Call, a: Dict[str, object]):
    """(True, None) for a call cupyconv must compute; (False, why) for one it
    must refuse; ("known", [(what, name, exception), ...]) for a call torch
    computes and cupyconv refuses as KNOWN_DISAGREEMENTS say."""
    result, _ = _torch_forward(call, a)
    if isinstance(result, Exception):
        return False, f"torch raises {type(result).__name__}: {str(result).splitlines()[0][:200]}"
    if call.backward:
        gy = a["grad_output"]
        if isinstance(gy, numpy.ndarray) and gy.shape != tuple(result.shape):
            return False, f"grad_output {gy.shape} is not the output's shape {tuple(result.shape)}"
    broken = _cupyconv_rules(call, a)
    if broken is not None:
        return False, f"{broken} breaks cupyconv's own rules"
    known = [(what, name, exception) for what, applies, exception in KNOWN_DISAGREEMENTS for name in [applies(call, a)] if name]
    if known:
        return "known", known
    return True, None


def _names(message: str) -> Set[str]:
    return {n for n in ARGUMENTS if re.search(rf"(?<![A-Za-z_]){n}(?![A-Za-z_])", message)}


def _materialize(call: Call, xp):
    """The call's arguments with arrays on xp (numpy or cupy); those in
    call.noncontiguous as every-other-element views of a larger array."""
    out = {}
    for name, v in call.arguments.items():
        if isinstance(v, numpy.ndarray):
            if name in call.noncontiguous:
                big = xp.zeros(v.shape[:-1] + (2 * v.shape[-1],), v.dtype)
                big[..., ::2] = xp.asarray(v)
                v = big[..., ::2]
            else:
                v = xp.asarray(v)
        out[name] = v
    return out


def _run(call: Call, xp):
    a = _materialize(call, xp)
    if call.backward:
        function = cupyconv.conv_transpose1d_backward if call.dims == 1 else cupyconv.conv_transpose2d_backward
        return function(
            a["grad_output"], a["input"], a["weight"], a["stride"], a["padding"], a["output_padding"], a["groups"], a["dilation"],
            output_mask=a["output_mask"], precision=a["precision"],
        )  # fmt: skip
    function = cupyconv.conv_transpose1d if call.dims == 1 else cupyconv.conv_transpose2d
    return function(
        a["input"], a["weight"], a["bias"], a["stride"], a["padding"], a["output_padding"], a["groups"], a["dilation"],
        precision=a["precision"],
    )  # fmt: skip


def _host(array):
    return array.get() if cupy is not None and isinstance(array, cupy.ndarray) else array


def _scaled_error(actual, expected, magnitude) -> float:
    """||actual - expected|| / ||magnitude||, where magnitude is the same sum
    of the absolute values of the products: an error relative to what a
    rounded sum may lose, so that cancellation (a grad_bias summing to
    nearly 0, say) asks for no more than the dtype can give."""
    actual, expected, magnitude = (numpy.asarray(v, dtype=numpy.float64) for v in (actual, expected, magnitude))
    if expected.size == 0:
        return 0.0
    return float(numpy.linalg.norm(actual - expected) / max(numpy.linalg.norm(magnitude), 1e-300))


def _check_result(call: Call, result, xp):
    """The result against float64 torch (autograd for the backward)."""
    a = call.arguments
    y, (x, w, b) = _torch_forward(call, a, upcast=True)
    y_abs, (x_abs, w_abs, b_abs) = _torch_forward(call, a, upcast=True, absolute=True)
    dtype = a["input"].dtype  # call.dtype, or the other one where every array was drawn in it
    tolerance = TOLERANCE[dtype.name]
    if xp is not numpy and dtype.name == "float32" and a["precision"] == "tf32":
        tolerance = TF32_TOLERANCE
    if not call.backward:
        assert isinstance(result, xp.ndarray) and result.dtype == dtype, call.describe()
        assert result.shape == tuple(y.shape), call.describe()
        error = _scaled_error(_host(result), y.detach().numpy(), y_abs.detach().numpy())
        assert error < tolerance, f"relative error {error:.3g}: {call.describe()}"
        return
    y.backward(torch.from_numpy(a["grad_output"].astype(numpy.float64)))
    y_abs.backward(torch.from_numpy(numpy.abs(a["grad_output"]).astype(numpy.float64)))
    assert isinstance(result, tuple) and len(result) == 3, call.describe()
    for name, grad, reference, magnitude, wanted in zip(
        ("grad_input", "grad_weight", "grad_bias"), result, (x, w, b), (x_abs, w_abs, b_abs), a["output_mask"]
    ):
        if not wanted:
            assert grad is None, f"{name} was not asked for: {call.describe()}"
            continue
        assert isinstance(grad, xp.ndarray) and grad.dtype == dtype, f"{name}: {call.describe()}"
        assert grad.shape == tuple(reference.shape), f"{name} {grad.shape} vs {tuple(reference.shape)}: {call.describe()}"
        error = _scaled_error(_host(grad), reference.grad.numpy(), magnitude.grad.numpy())
        assert error < tolerance, f"{name}: relative error {error:.3g}: {call.describe()}"


def _check_call(call: Call, xp) -> None:
    """One drawn call: computed right, or refused with TypeError/ValueError
    naming an argument (the bad one, where only one is bad), as the oracle says."""
    expected, why = _verdict(call, call.arguments)
    try:
        result = _run(call, xp)
    except (TypeError, ValueError) as error:
        message = str(error)
        named = _names(message)
        assert named, f"the message names no argument: {message!r}: {call.describe()}"
        if expected is True:
            raise AssertionError(f"cupyconv refused a call torch and cupyconv's rules accept: {error!r}: {call.describe()}") from error
        if expected == "known":  # (where several apply, cupyconv's order of checks picks one)
            assert any(isinstance(error, exception) and name in named for _, name, exception in why), (
                f"expected one of {[(w, e.__name__, n) for w, n, e in why]}, got {error!r}: {call.describe()}"
            )
        if len(call.bad) == 1:
            (bad,) = call.bad
            corrected = dict(call.arguments, **{bad: call.good[bad]})
            if _verdict(call, corrected)[0] is True:  # the one bad argument is the only fault
                assert bad in named, f"the only bad argument is {bad}, the message names {sorted(named)}: {message!r}: {call.describe()}"
        return
    assert expected is True, f"cupyconv accepted a call it should refuse ({why}): {call.describe()}"
    _check_result(call, result, xp)


# The next valid call after every example, against torch (computed once).
_GOOD_RNG = numpy.random.default_rng(62)
_GOOD = dict(
    x=_GOOD_RNG.standard_normal((2, 4, 7)), w=_GOOD_RNG.standard_normal((4, 3, 3)), b=_GOOD_RNG.standard_normal(3),
    gy=_GOOD_RNG.standard_normal((2, 3, 15)),
)  # fmt: skip


def _good_calls(xp):
    x, w, b, gy = (xp.asarray(_GOOD[k]) for k in ("x", "w", "b", "gy"))
    y = cupyconv.conv_transpose1d(x, w, b, stride=2)
    grads = cupyconv.conv_transpose1d_backward(gy, x, w, stride=2)
    return tuple(_host(a) for a in (y,) + grads)


@functools.lru_cache(maxsize=None)
def _expected_good():
    t = {k: torch.from_numpy(v).requires_grad_() for k, v in _GOOD.items()}
    y = F.conv_transpose1d(t["x"], t["w"], t["b"], stride=2)
    y.backward(t["gy"])
    return (y.detach().numpy(), t["x"].grad.numpy(), t["w"].grad.numpy(), t["b"].grad.numpy())


def _check_good_calls(xp):
    for got, expected in zip(_good_calls(xp), _expected_good()):
        assert relative_error(got, expected) < 1e-10


# --------------------------------------------------------------------------
# The tests.


@CPU_SETTINGS
@given(call=calls(backward=False))
def test_forward_arguments_numpy(call):
    _check_call(call, numpy)
    _check_good_calls(numpy)


@CPU_SETTINGS
@given(call=calls(backward=True))
def test_backward_arguments_numpy(call):
    _check_call(call, numpy)
    _check_good_calls(numpy)


# One call for each KNOWN_DISAGREEMENTS entry: (id, dims, input shape, weight
# shape, arguments, torch's output shape, cupyconv's exception and message).
KNOWN_CASES = [
    ("one-entry stride in 2D", 2, (1, 2, 3, 3), (2, 1, 2, 2), dict(stride=(2,)), (1, 1, 6, 6), ValueError, "stride must be an int or a sequence of 2 ints"),
    ("bool second entry", 2, (1, 2, 3, 3), (2, 1, 2, 2), dict(padding=(0, True)), (1, 1, 4, 2), TypeError, "padding must be an int or a sequence of 2 ints"),
    ("empty batch, dilation 0", 1, (0, 2, 3), (2, 1, 2), dict(dilation=0), (0, 1, 3), ValueError, "dilation must be positive"),
    ("empty batch, output_padding 5", 1, (0, 2, 3), (2, 1, 2), dict(output_padding=5), (0, 1, 9), ValueError, "output_padding must be smaller"),
    ("output size 0, grouped", 1, (1, 2, 2), (2, 1, 2), dict(stride=2, padding=2, groups=2), (1, 2, 0), ValueError, "computed output size 0"),
]


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("case", KNOWN_CASES, ids=[c[0] for c in KNOWN_CASES])
def test_known_disagreements_still_hold(case, backward):
    """Each KNOWN_DISAGREEMENTS entry: torch computes the call, cupyconv (and
    cupyconv.torch) refuse it.  Where cupyconv changes this fails; where
    torch does it skips, saying so: then the entry should go."""
    _, dims, x_shape, w_shape, kwargs, shape, exception, message = case
    x, w = numpy.ones(x_shape, numpy.float32), numpy.ones(w_shape, numpy.float32)  # (float32: torch's oneDNN path)
    arguments = dict(dict(input=x, weight=w, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, precision=None), **kwargs)
    call = Call(backward, dims, "float32", arguments, {}, set(), set())
    if backward:
        call.arguments.update(grad_output=numpy.ones(shape, numpy.float32), output_mask=(True, True, True))
        del call.arguments["bias"]
    verdict, known = _verdict(call, call.arguments)
    if verdict is False:
        pytest.skip(f"torch no longer computes this call ({known}): drop its KNOWN_DISAGREEMENTS entry")
    assert verdict == "known" and tuple(_torch_forward(call, call.arguments)[0].shape) == shape, known
    with pytest.raises(exception, match=message):
        _run(call, numpy)
    if not backward:  # the adapter (CPU tensors) refuses it as well
        import cupyconv.torch as ct

        function = ct.conv_transpose1d if dims == 1 else ct.conv_transpose2d
        with pytest.raises(exception):
            function(torch.from_numpy(x), torch.from_numpy(w), **kwargs)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_oracle_sees_a_valid_call(backward, dtype):
    """The oracle's own check: a plain valid call is valid, and computes."""
    rng = numpy.random.default_rng(1)
    x, w = rng.standard_normal((2, 2, 5)).astype(dtype), rng.standard_normal((2, 3, 3)).astype(dtype)
    arguments = dict(input=x, weight=w, stride=2, padding=1, output_padding=1, groups=1, dilation=1, precision=None)
    if backward:
        arguments.update(grad_output=rng.standard_normal((2, 3, 10)).astype(dtype), output_mask=(True, True, True))
    else:
        arguments["bias"] = rng.standard_normal(3).astype(dtype)
    call = Call(backward, 1, dtype, arguments, dict(arguments), set(), set())
    assert _verdict(call, arguments) == (True, None)
    _check_call(call, numpy)


# The CuPy path: the same properties, and after every call (a refused one
# included) the device still works: a synchronize surfaces any failed launch,
# and the next valid call gives the right answer.


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@GPU_SETTINGS
@given(call=calls(backward=False))
def test_forward_arguments_cupy(call):
    _check_call(call, cupy)
    cupy.cuda.Device().synchronize()
    _check_good_calls(cupy)
    cupy.cuda.Device().synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@GPU_SETTINGS
@given(call=calls(backward=True))
def test_backward_arguments_cupy(call):
    _check_call(call, cupy)
    cupy.cuda.Device().synchronize()
    _check_good_calls(cupy)
    cupy.cuda.Device().synchronize()
