"""The routing settings: which kernel families may run and the sizes past
which they take a problem, in one frozen value.

The defaults are what the library measured fastest (docs/perf-notes.md has
how each was chosen).  Tests and experiments change them for a block::

    with cupyconv.settings.override(use_fold=False, window_min_output=0):
        y = cupyconv.conv_transpose1d(x, w, stride=8)

Every change moves :func:`version` on, so that plans chosen and calls
remembered under other settings are not reused.  The settings are global to
the process (not per thread).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Iterator, Optional

__all__ = ["Settings", "current", "override", "version"]


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every setting the kernel choice reads.  ``use_*``: whether a family may
    run (a few take ``"anywhere"``, which also lifts its size rules);
    ``*_min_*``/``*_max_*``: the thresholds of the families' rules."""

    # float32 "highest": "3xtf32" on tensor cores where a pass sums at least
    # tf32x3_min_products products an output, CUDA cores elsewhere; "simt": CUDA cores everywhere
    float32_highest: str = "3xtf32"
    tf32x3_min_products: int = 128
    # conv_gemm/conv_mma read a packed weight from outputs of this many elements on
    pack_min_output: int = 1 << 16
    # the window, wgmma, fold and taps kernels take outputs of at least this many elements
    window_min_output: int = 1 << 16
    # ... whose phases hold at least this many output positions in one sample (their tiles' columns)
    window_min_columns: int = 32
    use_wgmma: bool = True
    wgmma_max_rows: int = 64
    wgmma_min_taps: int = 4
    use_resident: bool = True
    use_resident_anywhere: bool = False
    resident_tf32_row_tiles: int = 2
    use_fill: bool = True
    use_split: bool = True
    use_gemm_split: bool = True  # conv_mma_split: grad_input grids that leave most multiprocessors idle cut their reduction
    use_conv_tf32: object = True  # or "anywhere"
    conv_tf32_min_rows: int = 64
    conv_tf32_min_fold: int = 128
    use_conv_tf32_stream: object = True  # or "anywhere"
    use_conv_tf32_multicast: bool = True
    use_fold: bool = True
    fold_blocks: Optional[int] = None  # conv_fold's grid (None: one block a multiprocessor)
    use_fold_raw_weight: bool = True
    use_window_fill: bool = True
    use_wgmma_x3: bool = True
    use_wgmma_x3_anywhere: bool = False
    wgmma_x3_min_rows: int = 64
    wgmma_x3_max_rows: int = 4096
    use_grad_input_taps: bool = True
    use_grad_weight_taps: bool = True
    grad_input_taps_min_chunks: int = 16
    grad_input_taps_blocks_per_multiprocessor: int = 2
    use_grad_input_overlap: bool = True
    use_grad_input_multicast: bool = True
    use_grad_input_phase: object = True  # or "anywhere"
    grad_input_phase_stride_one: object = "one_tile"  # or True (every stride-1 problem) or False
    direct_max_products_tensor_cores: int = 16
    direct_max_products_cuda_cores: int = 16
    direct_max_products_full_rows: int = 64
    direct_full_rows: int = 32
    direct_min_output: int = 1 << 16
    use_grouped_forward: object = True  # or "anywhere"
    grouped_forward_min_output: int = 1 << 16
    grouped_forward_max_tc_rows: int = 32
    small_forward_max_output: int = 1 << 16
    tiny_max_output: int = 1 << 14
    tiny_max_products: int = 192
    spare_output_max_bytes: int = 1 << 14
    use_remembered_forward: bool = True
    use_remembered_backward: bool = True
    use_phase_backward: object = True  # or "anywhere"
    phase_backward_min_output: int = 1 << 16
    use_grouped_backward: bool = True
    grouped_min_input: int = 1 << 16
    grouped_pipe: bool = True
    use_grad_weight_wgmma: bool = True
    use_grad_weight_overlap: bool = True
    use_grad_weight_multicast: bool = True
    use_grad_weight_tf32: bool = True
    grad_weight_tf32_min_channels: int = 64
    use_grad_weight_phase: object = True  # or "anywhere"
    grad_weight_phase_min_channels: int = 16
    grad_weight_phase_max_tiles_tf32: int = 8
    grad_weight_phase_max_tiles_3xtf32: int = 2
    use_grad_phase_fused: object = True  # or "anywhere"
    bias_blocks_per_multiprocessor: int = 4
    # conv_nhwc and grad_weight_nhwc on channels-first arrays: where the call
    # sums at least this many products per element of input and output (below,
    # memory-bound, the layout changes around them cost more than they save);
    # in float32 "tf32" more, mma.sync's TF32 running at half its 16-bit rate
    nhwc_min_products: int = 32
    nhwc_min_products_tf32: int = 256
    # ... and where the pass writes (grad_weight: reads as grad_output) at least
    # this many elements: below, one launch of conv_mma costs less host time than their four
    nhwc_min_output: int = 1 << 16
    # tests and experiments: plan as if the device had these (None: its own)
    multiprocessors: Optional[int] = None
    compute_capability: Optional[int] = None
    max_shared: Optional[int] = None  # a block's opt-in dynamic shared memory, bytes
    # "long long": the 64-bit-index builds for every call (None: where an array needs them)
    index_type: Optional[str] = None
    # family names: only these (and the fallbacks every pass has: conv_mma,
    # conv_gemm, grad_weight_mma, grad_weight_partial, grad_bias) may run;
    # None: every family.  Forcing one in a test: families=("conv_window",)
    families: Optional[tuple] = None
    # (family name, tile), or a tuple of them: that family runs with that tile
    # where it is one of its candidates (tests)
    tile: Optional[tuple] = None


_LOCK = threading.Lock()
_STATE = {"current": Settings(), "version": 0}
_LAYERS: list = []  # the open override blocks' changes, in the order they were entered


def current() -> Settings:
    """The settings in force."""
    return _STATE["current"]


def version() -> int:
    """A count that moves on whenever the settings change."""
    return _STATE["version"]


def _rebuild() -> None:
    """The defaults with every open block's changes, in order (under _LOCK):
    a block that ends removes its own changes only, whatever thread opened
    the others."""
    merged = {}
    for _, changes in _LAYERS:
        merged.update(changes)
    _STATE["current"] = dataclasses.replace(Settings(), **merged)
    _STATE["version"] += 1


@contextlib.contextmanager
def override(**changes) -> Iterator[Settings]:
    """The settings with `changes` (field names of :class:`Settings`) in force
    for the block; without them after it.  A name that is not a setting is a
    TypeError."""
    fields = {f.name for f in dataclasses.fields(Settings)}
    unknown = sorted(set(changes) - fields)
    if unknown:
        raise TypeError(f"unknown settings {unknown}; the settings are {sorted(fields)}")
    layer = (object(), changes)
    with _LOCK:
        _LAYERS.append(layer)
        _rebuild()
    try:
        yield current()
    finally:
        with _LOCK:
            _LAYERS.remove(layer)
            _rebuild()
