"""conv_tiny.cu on the host: its block and name."""

from __future__ import annotations

import functools

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32, _index_type, _Launch
from .._plan import Family, Plan, Step
from .common import CUDA_TYPE, instantiation_loop
from .rules import _products_per_output, _size

TINY_THREADS = 128  # conv_tiny.cu: threads a block, one output each


def tiny_name(dtype: str, index: str) -> str:
    return f"conv_tiny<{CUDA_TYPE[dtype]}, {index}>"


def tiny_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """conv_tiny's build for one dtype and index type."""
    return [("conv_tiny.cu", tiny_name(dtype, index))]


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of conv_tiny.cu the library can launch."""
    return instantiation_loop(trailing=(tiny_instantiations,))


_S = settings.current  # the routing settings in force



def _tiny_routed(geometry: Geometry, output_size: int) -> bool:
    return output_size <= _S().tiny_max_output and _products_per_output(geometry, "forward") <= _S().tiny_max_products


@functools.lru_cache(maxsize=1024)
def _tiny_plan(geometry: Geometry, dtype: str, index: str) -> _Launch:
    """conv_tiny's launch: a thread an output element."""
    batch, _, in_h, in_w = geometry.input_shape4
    _, channels, out_h, out_w = geometry.output_shape4
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    scalars = tuple(
        _i32(v) for v in (batch, geometry.groups, geometry.in_channels_per_group, geometry.out_channels_per_group,
                          in_h, in_w, out_h, out_w, kh, kw, sh, sw, ph, pw, dh, dw)
    )  # fmt: skip
    blocks = _blocks_for(-(-batch * channels * out_h * out_w // TINY_THREADS))
    return _Launch("conv_tiny.cu", tiny_name(dtype, index), blocks, TINY_THREADS, scalars)


class ConvTiny(Family):
    name, ops = "conv_tiny", ("forward",)

    def reject(self, p):
        out = p.output_size
        s = _S()
        if out >= min(s.small_forward_max_output, s.window_min_output, s.pack_min_output):
            return "not a small call"
        if not _tiny_routed(p.geometry, out):
            return f"more than {s.tiny_max_output} outputs or {s.tiny_max_products} products an output"
        return None

    def plan(self, p, tile):
        g = p.geometry
        index = _index_type(_size(g.input_shape4), p.output_size, _size(g.weight_shape4))
        return Plan(self.name, None, (Step(_tiny_plan(g, p.dtype, index), ("source", "weight", "bias", "out")),))
