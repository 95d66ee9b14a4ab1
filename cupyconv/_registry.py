"""The kernel families in one priority list per pass, and the choice among them."""

from __future__ import annotations


from . import settings
from ._plan import Family, Problem
from .kernels.conv_direct import ConvDirect
from .kernels.conv_fold import ConvFold
from .kernels.conv_gemm import ConvGemm
from .kernels.conv_nhwc import ConvNhwc
from .kernels.conv_tf32 import ConvTf32, ConvTf32Stream
from .kernels.conv_tiny import ConvTiny
from .kernels.conv_wgmma import (
    ConvWgmma,
    ConvWgmmaResident,
    ConvWgmmaSplit,
    ConvWgmmaX3,
    GradWeightWgmma,
)
from .kernels.conv_window import ConvWindow, WindowFill
from .kernels.depthwise import DepthwiseBackward, DepthwiseForward
from .kernels.grad_input_overlap import GradInputOverlap
from .kernels.grad_input_phase import GradInputPhase
from .kernels.grad_input_taps import Taps
from .kernels.grad_weight import GradBias, GradWeightGemm
from .kernels.grad_weight_nhwc import GradWeightNhwc
from .kernels.grad_weight_overlap import GradWeightOverlap
from .kernels.grad_weight_phase import GradPhaseFused, GradWeightPhase
from .kernels.grad_weight_tf32 import GradWeightTf32
from .kernels.grad_weight_window import GradWeightWindow
from .kernels.grouped_backward import GroupedBackward
from .kernels.grouped_forward import GroupedForward
from .kernels.phase_gather import PhaseBackward

_S = settings.current  # the routing settings in force



FORWARD = (
    ConvTiny(), DepthwiseForward(), GroupedForward(), ConvFold(), WindowFill(), ConvDirect(),
    ConvTf32Stream(), ConvTf32(), ConvWgmmaSplit(), ConvWgmmaResident(), ConvWgmma(), ConvWgmmaX3(), ConvWindow(),
    ConvNhwc(), ConvGemm(True), ConvGemm(False),
)  # fmt: skip


GRAD_INPUT = (
    GradInputOverlap(), Taps("grad_input"), GradInputPhase(),
    ConvTf32(), ConvWgmmaSplit(), ConvWgmmaResident(), ConvWgmma(), ConvWgmmaX3(), ConvWindow(),
    ConvNhwc(), ConvGemm(True), ConvGemm(False),
)  # fmt: skip


GRAD_WEIGHT = (
    GradWeightTf32(3), GradWeightOverlap(), GradWeightTf32(1), Taps("grad_weight"), GradWeightWgmma(), GradWeightNhwc(),
    GradWeightWindow(), GradWeightPhase(), GradWeightGemm(True), GradWeightGemm(False),
)  # fmt: skip


GRAD_BIAS = (GradBias(),)


BACKWARD = (DepthwiseBackward(), GroupedBackward(), PhaseBackward(), GradPhaseFused())


REGISTRY = {"forward": FORWARD, "grad_input": GRAD_INPUT, "grad_weight": GRAD_WEIGHT, "grad_bias": GRAD_BIAS, "backward": BACKWARD}


_CHOICES: dict = {}  # (problem, settings) -> family


def _choose(p: Problem, s) -> Family:
    """The first family of p's priority list that does not reject p (among
    settings.families and the fallbacks, where that is set), remembered per
    (problem, settings).  The rules read the settings in force: a choice
    made while they changed (another thread's override) is not kept."""
    key = (p, s)
    family = _CHOICES.get(key, _CHOICES)
    if family is not _CHOICES:  # (None too: no joint family takes it)
        return family
    version = settings.version()
    for family in REGISTRY[p.op]:
        if s.families is not None and family.name not in s.families and not family.fallback:
            continue
        if family.reject(p) is None:
            break
    else:
        family = None
    if settings.version() == version and settings.current() is s:
        if len(_CHOICES) >= 4096:
            _CHOICES.clear()
        _CHOICES[key] = family
    return family


_choose.cache_clear = _CHOICES.clear  # (tests that change what a rule reads outside the settings)


def _candidates(p: Problem) -> list:
    """(family, tile) for every tile of every family that takes p, in priority order."""
    found, allowed = [], _S().families
    for family in REGISTRY[p.op]:
        if allowed is not None and family.name not in allowed and not family.fallback:
            continue
        if family.reject(p) is None:
            tiles = family.tiles(p) or (family.heuristic(p),)
            found += [(family, tile) for tile in tiles]
    return found
