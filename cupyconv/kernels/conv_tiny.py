"""conv_tiny.cu on the host: its block and name."""

from __future__ import annotations

from .common import CUDA_TYPE, instantiation_loop

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
