"""PyTorch adapter: cupyconv's kernels behind torch's own interfaces.

::

    from cupyconv.torch import ConvTranspose1d, ConvTranspose2d, conv_transpose1d, conv_transpose2d, convert

``conv_transpose1d/2d`` have the signature and results of
``torch.nn.functional.conv_transpose1d/2d`` and are differentiable in input,
weight and bias; ``ConvTranspose1d/2d`` subclass ``torch.nn.ConvTranspose1d/2d``
(same constructor, parameters, state_dict and repr); ``convert(model)`` swaps
every ``nn.ConvTranspose1d/2d`` inside a model for ours, in place, keeping the
same Parameter objects.

CUDA tensors of float16, bfloat16, float32 or float64 run cupyconv's kernels,
zero-copy through DLPack, on the tensors' device and torch's current stream,
with memory from torch's caching allocator.  Everything else (CPU tensors,
other dtypes) runs torch's own operator.  float32 uses TF32 exactly when
``torch.backends.cudnn.allow_tf32`` is True, as cuDNN does.

On torch >= 2.4 the operator is a ``torch.library.custom_op``
(``torch.ops.cupyconv.conv_transpose``, with a fake implementation and an
autograd formula), so ``torch.compile(fullgraph=True)`` traces it without a
graph break; older torch gets a ``torch.autograd.Function`` that computes the
same thing.

This package is the only place cupyconv imports torch.
"""

from ._functional import ArgumentError, conv_transpose1d, conv_transpose2d
from ._modules import ConvTranspose1d, ConvTranspose2d, convert

__all__ = ["ConvTranspose1d", "ConvTranspose2d", "conv_transpose1d", "conv_transpose2d", "convert", "ArgumentError"]
