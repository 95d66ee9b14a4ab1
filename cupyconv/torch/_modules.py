"""Drop-in modules and ``convert``.

``ConvTranspose1d``/``ConvTranspose2d`` inherit everything from torch's
classes (constructor, parameters and their initialisation, state_dict keys,
repr, the ``output_size`` rules of ``_output_padding``) and change only where
``forward`` computes.  ``convert`` re-classes modules in place, so every
Parameter, buffer and hook stays the very object it was.
"""

import functools
import operator

import torch
from torch import nn

from . import _functional

__all__ = ["ConvTranspose1d", "ConvTranspose2d", "convert"]


def _size_entry(value) -> bool:
    """An int (a SymInt while compiling, a NumPy integer, a 0-d integer tensor),
    not a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, torch.SymInt)):
        return True
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _check_output_size(function: str, input, output_size) -> None:
    """The types torch's _output_padding takes for granted: input a Tensor
    (it reads input.dim()) and output_size a sequence of ints (it compares
    the entries with ints and makes output_padding of them).  torch's own
    module raises AttributeError, or a TypeError naming neither, for these;
    lengths and ranges stay torch's checks and messages (ValueError)."""
    _functional._check_tensor(function, "input", input)
    if isinstance(output_size, torch.Size):
        return
    if not isinstance(output_size, (tuple, list)) or not all(_size_entry(size) for size in output_size):
        raise TypeError(f"{function}(): output_size must be None or a sequence of ints, got {output_size!r}")


class ConvTranspose1d(nn.ConvTranspose1d):
    """``torch.nn.ConvTranspose1d`` whose forward runs cupyconv's kernels on
    CUDA tensors (see ``cupyconv.torch``); same constructor and state."""

    def forward(self, input: torch.Tensor, output_size=None) -> torch.Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only `zeros` padding mode is supported for ConvTranspose1d")
        if output_size is not None:
            _check_output_size("ConvTranspose1d.forward", input, output_size)
        output_padding = self._output_padding(input, output_size, self.stride, self.padding, self.kernel_size, 1, self.dilation)
        return _functional.conv_transpose1d(
            input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups, self.dilation
        )


class ConvTranspose2d(nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` whose forward runs cupyconv's kernels on
    CUDA tensors (see ``cupyconv.torch``); same constructor and state."""

    def forward(self, input: torch.Tensor, output_size=None) -> torch.Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only `zeros` padding mode is supported for ConvTranspose2d")
        if output_size is not None:
            _check_output_size("ConvTranspose2d.forward", input, output_size)
        output_padding = self._output_padding(input, output_size, self.stride, self.padding, self.kernel_size, 2, self.dilation)
        return _functional.conv_transpose2d(
            input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups, self.dilation
        )


_OURS = {nn.ConvTranspose1d: ConvTranspose1d, nn.ConvTranspose2d: ConvTranspose2d}


@functools.lru_cache(maxsize=None)
def _combined(ours: type, cls: type) -> type:
    """A class that is `cls` (a subclass of torch's, e.g. the one
    torch.nn.utils.parametrize makes) with our forward."""
    return type(cls.__name__, (ours, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})


def _replacement(cls: type):
    """The class a module of class `cls` becomes, or None to leave it alone."""
    if issubclass(cls, tuple(_OURS.values())):
        return None  # already ours
    for theirs, ours in _OURS.items():
        if cls is theirs:
            return ours
        # A subclass that keeps torch's forward (a parametrized module, say)
        # computes what torch's does; one with its own forward is left alone.
        if issubclass(cls, theirs) and cls.forward is theirs.forward:
            return _combined(ours, cls)
    return None


def convert(module: nn.Module) -> nn.Module:
    """Make every ``nn.ConvTranspose1d/2d`` in `module` (itself included) run
    on cupyconv, in place, and return `module`.

    The modules keep their identity, Parameters (optimizer state stays
    valid), buffers and hooks; only their class changes.  Subclasses that
    override ``forward`` are left as they are.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"convert() takes a torch.nn.Module, got {type(module).__name__}")
    for child in module.modules():
        replacement = _replacement(type(child))
        if replacement is not None:
            child.__class__ = replacement
    return module
