"""Why a call runs the kernels it runs: every family of the call's priority
lists in order, with "chosen", "rejected: <reason>" or "takes it too" (a
family after the chosen one that would also run it: what autotuning
compares), each taker with its floor estimate (Family.cost, cupyconv._cost),
and the chosen plan's launches.  ``python -m cupyconv explain``
prints it; docs/routing.md is generated from it (scripts/routing_table.py).

It plans for a described device (sm_80: an A100; sm_90: an H200), so it needs
CuPy importable but no GPU.
"""

from __future__ import annotations

import contextlib
from typing import List, Optional, Sequence

from . import _geometry, settings
from ._plan import Problem, Sub

# compute capability, multiprocessors, a block's opt-in shared memory
DEVICES = {"sm_80": (80, 108, 166912), "sm_90": (90, 132, 232448)}


@contextlib.contextmanager
def _described(device: str):
    if device not in DEVICES:
        raise ValueError(f"device must be one of {sorted(DEVICES)}, got {device!r}")
    cc, multiprocessors, shared = DEVICES[device]
    with settings.override(compute_capability=cc, multiprocessors=multiprocessors, max_shared=shared):
        yield


def _aligned(roles):
    return tuple((role, 0) for role in roles)


def problems(geometry, dtype: str, precision: str, backward: bool, output_mask=(True, True, True)):
    """The Problems of a call (as cupyconv._cuda makes them, every array aligned)."""
    from . import _cuda, _registry

    if not backward:
        return [Problem("forward", geometry, dtype, precision, _cuda._device(), _aligned(("source", "weight", "bias", "out")))]
    want_input, want_weight, want_bias = output_mask
    found = []
    if want_input or want_weight:
        roles = ("grad_output", "x", "weight", "grad_input", "grad_weight")
        joint = Problem("backward", geometry, dtype, precision, _cuda._device(), _aligned(roles), (want_input, want_weight))
        found.append(joint)
        if _registry._choose(joint, settings.current()) is None:
            if want_weight:
                found.append(joint._replace(op="grad_weight", alignment=_aligned(("x", "grad_output", "out"))))
            if want_input:
                found.append(joint._replace(op="grad_input", alignment=_aligned(("source", "weight", "out"))))
    if want_bias:
        found.append(Problem("grad_bias", geometry, dtype, precision, _cuda._device(), _aligned(("grad_output", "out"))))
    return found


def _floor(family, p) -> str:
    """", floor ~X us": the family's cost() with its heuristic tile (Family.cost)."""
    return f", floor ~{family.cost(p, family.heuristic(p)):.0f} us"


def explain_problem(p, indent: str = "") -> List[str]:
    """The lines of one problem: its families in order, then the chosen plan."""
    from . import _registry

    lines = [f"{indent}{p.describe()}"]
    chosen = None
    for family in _registry.REGISTRY[p.op]:
        reason = family.reject(p)
        if reason is None and chosen is None:
            chosen = family
            lines.append(f"{indent}  {family.name}: chosen{_floor(family, p)}")
        elif reason is None:
            lines.append(f"{indent}  {family.name}: takes it too{_floor(family, p)}")
        else:
            lines.append(f"{indent}  {family.name}: rejected: {reason}")
    if chosen is None:
        lines.append(f"{indent}  (none: each gradient from its own list)")
        return lines
    plan = chosen.plan(p, chosen.heuristic(p))
    lines.append(f"{indent}  plan: {plan.family}" + ("" if plan.tile is None else f", tile {plan.tile}"))
    for step in plan.steps:
        lines += [f"{indent}    {line}" for line in plan._replace(steps=(step,), buffers=()).describe()]
        if isinstance(step, Sub):
            lines += explain_problem(step.problem, indent + "      ")
    lines += [f"{indent}    {line}" for line in plan._replace(steps=()).describe()]
    return lines


def explain(
    spatial_dims: int, input_shape: Sequence[int], weight_shape: Sequence[int], stride=1, padding=0, output_padding=0, groups: int = 1,
    dilation=1, *, dtype: str = "float32", precision: Optional[str] = None, backward: bool = False, output_mask=(True, True, True),
    device: str = "sm_90",
) -> str:  # fmt: skip
    """The routing of a call with these shapes and arguments (as
    cupyconv.conv_transpose1d/2d take them; `backward` for its backward
    pass), planned for the described `device`, as text."""
    if dtype not in _geometry.SUPPORTED_DTYPES:
        raise ValueError(f"dtype must be one of {_geometry.SUPPORTED_DTYPES}, got {dtype!r}")
    geometry = _geometry.make_geometry(spatial_dims, tuple(input_shape), tuple(weight_shape), None, stride, padding, output_padding, groups, dilation)
    precision = _geometry.check_precision(precision)
    if backward and not geometry.batch:
        return "backward of an empty batch: the gradients are zeros (filled), no kernel runs"
    with _described(device):
        lines = []
        for p in problems(geometry, dtype, precision, backward, output_mask):
            lines += explain_problem(p)
    return "\n".join(lines)


def chosen(spatial_dims, input_shape, weight_shape, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *, dtype="float32",
           precision=None, backward=False, device="sm_90") -> List[str]:  # fmt: skip
    """The chosen family of each pass of the call, in order ("op: family")."""
    from . import _registry

    geometry = _geometry.make_geometry(spatial_dims, tuple(input_shape), tuple(weight_shape), None, stride, padding, output_padding, groups, dilation)
    precision = _geometry.check_precision(precision)
    out = []
    if backward and not geometry.batch:
        return out  # (zeros filled, no kernel)
    with _described(device):
        for p in problems(geometry, dtype, precision, backward):
            family = _registry._choose(p, settings.current())
            if family is not None:
                out.append(f"{p.op}: {family.plan(p, family.heuristic(p)).family}")
                plan = family.plan(p, family.heuristic(p))
                for step in plan.steps:
                    if isinstance(step, Sub):
                        sub = _registry._choose(step.problem, settings.current())
                        out.append(f"{step.problem.op} (stride 1): {sub.plan(step.problem, sub.heuristic(step.problem)).family}")
    return out
