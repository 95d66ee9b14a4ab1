"""Problem, Plan and the kernel families' interface.

A call becomes one :class:`Problem` per pass (forward, grad_input,
grad_weight, grad_bias, or the joint backward pass of both gradients): a
hashable value of everything the kernel choice reads.  Each kernel family
(cupyconv/kernels/*.py, beside its .cu file) says whether it takes a
problem (``reject`` returns a reason or None) and how it runs it (``plan``
returns a :class:`Plan`: the launches, with each array argument named by
its role, and the temporary buffers).  cupyconv._registry walks the
families in one priority list per pass.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

from ._geometry import Geometry


class Device(NamedTuple):
    """What the plans read of a device."""

    compute_capability: int
    multiprocessors: int
    max_shared: int  # the opt-in dynamic shared memory of a block, bytes


class Problem(NamedTuple):
    """One pass of one call.  `op`: "forward", "grad_input", "grad_weight",
    "grad_bias" or "backward" (grad_input and grad_weight together, `wants`
    saying which); `alignment`: (role, address % 256) of the call's arrays
    (16-byte loads and tensor maps need aligned rows)."""

    op: str
    geometry: Geometry
    dtype: str
    precision: str
    device: Device
    alignment: Tuple[Tuple[str, Optional[int]], ...]
    wants: Tuple[bool, bool] = (True, True)

    def aligned(self, role: str, bytes_: int) -> bool:
        """Whether the array of `role` starts at a multiple of `bytes_` (a
        power of two up to 256); an absent array counts as aligned."""
        for name, offset in self.alignment:
            if name == role:
                return offset is None or offset % bytes_ == 0
        raise KeyError(role)

    @property
    def output_size(self) -> int:
        """Elements of the array the pass writes (grad_input's for "backward")."""
        g = self.geometry
        shape = {"forward": g.output_shape4, "grad_input": g.input_shape4, "grad_weight": g.weight_shape4, "backward": g.input_shape4}
        return math.prod(shape[self.op]) if self.op in shape else g.out_channels

    def describe(self) -> str:
        g = self.geometry
        k = "x".join(map(str, g.kernel))
        return (
            f"{self.op} {self.dtype}{'' if self.dtype != 'float32' else ' ' + self.precision} N{g.batch} Ci{g.in_channels} "
            f"Co{g.out_channels} K{k} in {'x'.join(map(str, g.in_size))} s{'x'.join(map(str, g.stride))} "
            f"p{'x'.join(map(str, g.padding))} d{'x'.join(map(str, g.dilation))} g{g.groups} on sm_{self.device.compute_capability}"
        )


class Table(NamedTuple):
    """A launch argument: an int32 table (phase records), uploaded once a device."""

    flat: tuple


class Buffer(NamedTuple):
    """A temporary array of the plan, named "t<k>" by its place in Plan.buffers."""

    shape: tuple
    dtype: str  # a NumPy dtype name


class Step(NamedTuple):
    """One kernel launch: `args` are roles ("x", "weight", "t0", ...), Tables
    or None (a null pointer), ahead of the launch's scalars."""

    launch: object  # cupyconv._launch._Launch
    args: tuple


class Sub(NamedTuple):
    """A step that runs a pass of another problem (the phase rewrite's
    stride-1 problem) through the registry, its roles renamed."""

    problem: Problem
    roles: tuple  # (its role, this plan's role) pairs


class Plan(NamedTuple):
    """How a family runs a problem: its steps in order, and the buffers they use."""

    family: str
    tile: object
    steps: tuple
    buffers: tuple = ()

    def describe(self) -> list:
        """One line per step: kernel, grid x block, shared memory, arguments."""
        lines = []
        for step in self.steps:
            if isinstance(step, Sub):
                lines.append(f"{step.problem.op} of the stride-1 problem ({', '.join(f'{a} = {b}' for a, b in step.roles)})")
                continue
            launch = step.launch
            args = ", ".join("table" if isinstance(a, Table) else "null" if a is None else a for a in step.args)
            shared = f", {launch.shared} B shared" if launch.shared else ""
            lines.append(f"{launch.name}: {launch.blocks} x {launch.threads}{shared} ({args})")
        for k, buffer in enumerate(self.buffers):
            lines.append(f"t{k}: {buffer.dtype} {buffer.shape}")
        return lines


def rename(plan: Plan, roles: dict, first_buffer: int) -> Tuple[tuple, tuple]:
    """The plan's steps and buffers with its roles renamed (`roles`) and its
    buffers numbered from `first_buffer`: a sub-problem's plan inside another."""
    mapping = dict(roles)
    for k in range(len(plan.buffers)):
        mapping[f"t{k}"] = f"t{first_buffer + k}"

    def name(arg):
        return mapping.get(arg, arg) if isinstance(arg, str) else arg

    steps = []
    for step in plan.steps:
        steps.append(Step(step.launch, tuple(name(a) for a in step.args)))
    return tuple(steps), plan.buffers


class Family:
    """A kind of kernel.  Subclasses set `name` and `ops`, and define reject()
    and plan(); a family with tile candidates defines tiles() (those that fit,
    for the autotuner) and heuristic(), and tune_key() (its autotuner cache key).
    cost() estimates a plan's floor (explain prints it; nothing chooses by it)."""

    name = "?"
    ops: tuple = ()
    fallback = False  # runs every problem of its passes that it is asked (settings.families keeps it)

    def reject(self, p: Problem) -> Optional[str]:
        raise NotImplementedError

    def heuristic(self, p: Problem):
        return None

    def tiles(self, p: Problem) -> tuple:
        return ()

    def tune_key(self, p: Problem):
        """(family label, key) under which the autotuner remembers its choice, or None."""
        return None

    def plan(self, p: Problem, tile) -> Plan:
        raise NotImplementedError

    def cost(self, p: Problem, tile) -> float:
        """A floor estimate of the plan's time in microseconds (cupyconv._cost:
        bytes, FLOPs at the math's rate over the grid's fill, launches)."""
        from ._cost import estimate_us

        return estimate_us(p, self.plan(p, tile))

    def __repr__(self):
        return f"<family {self.name}>"
