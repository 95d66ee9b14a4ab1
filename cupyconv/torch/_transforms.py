"""torch.func transforms over the adapter's two operators: batching rules
(vmap) and forward-mode derivatives (jvp), each written with the operators
themselves, so that transforms nest (vmap of grad for per-sample gradients,
jacrev, jacfwd, hessian).

Batching.  The vmapped dimension (size B) goes where one launch can take it:

* only activations batched (input, grad_output): it joins the batch axis
  N, the weight shared by every sample;
* a weight batched: it joins the channels, B groups of the problem side by
  side as a grouped convolution with groups * B groups (channel b * C + c
  is channel c of sample b), unbatched operands expanded to B copies;
* the gradient of the weight (and of the bias) of batched activations is
  per sample, so it takes the grouped convolution too.

torch's own batching rules for convolution fold the same ways.

Forward-mode derivatives.  The forward pass is bilinear in (input, weight)
and linear in the bias; the backward pass's grad_input is bilinear in
(grad_output, weight), grad_weight in (grad_output, input), and grad_bias
linear in grad_output.  A tangent is the sum of the passes with one operand
replaced by its tangent.
"""

from typing import Callable, Optional, Sequence, Tuple

import torch

# forward(input, weight, bias, stride, padding, output_padding, groups, dilation, precision)
# backward(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision)
Forward = Callable[..., torch.Tensor]
Backward = Callable[..., Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def _front(tensor: Optional[torch.Tensor], dim: Optional[int]) -> Optional[torch.Tensor]:
    """The vmapped dimension moved to the front (unbatched: as it is)."""
    return tensor if tensor is None or dim is None else tensor.movedim(dim, 0)


def _batched(tensor: torch.Tensor, dim: Optional[int], size: int) -> torch.Tensor:
    """A tensor with the vmapped dimension in front, expanded where it had none."""
    return tensor if dim is not None else tensor.expand(size, *tensor.shape)


def _into_channels(tensor: torch.Tensor, has_batch_axis: bool) -> torch.Tensor:
    """(B, N, C, ...) to (N, B * C, ...), or (B, C, ...) to (B * C, ...)."""
    return tensor.movedim(0, 1).flatten(1, 2) if has_batch_axis else tensor.flatten(0, 1)


def _from_channels(tensor: torch.Tensor, size: int, has_batch_axis: bool) -> Tuple[torch.Tensor, int]:
    """The inverse of _into_channels, with the vmapped dimension's place."""
    if has_batch_axis:
        return tensor.unflatten(1, (size, -1)), 1
    return tensor.unflatten(0, (size, -1)), 0


def _has_batch_axis(tensor: torch.Tensor, dim: Optional[int], dims: int) -> bool:
    """Whether each sample's activation has its own batch axis N."""
    return tensor.dim() - (dim is not None) == dims + 2


def forward_rule(forward: Forward, size: int, in_dims: Sequence[Optional[int]], input, weight, bias,
                 stride, padding, output_padding, groups, dilation, precision):  # fmt: skip
    """(output, out_dim) of the forward pass over a vmapped dimension of size `size`."""
    x_dim, w_dim, b_dim = in_dims[:3]
    x, w, b = _front(input, x_dim), _front(weight, w_dim), _front(bias, b_dim)
    dims = len(stride)
    has_n = _has_batch_axis(x, x_dim, dims)
    arguments = (stride, padding, output_padding)
    if w_dim is None:
        # the weight is shared: the samples join the batch axis; a batched
        # bias is added after
        if x_dim is not None and has_n:
            x = x.flatten(0, 1)
        y = forward(x, w, b if b_dim is None else None, *arguments, groups, dilation, precision)
        if x_dim is None:
            y = y.unsqueeze(0)
        elif has_n:
            y = y.unflatten(0, (size, -1))
        if b_dim is not None:
            y = y + b.reshape((size,) + (1,) * (y.dim() - dims - 2) + (-1,) + (1,) * dims)
        return y, 0
    x = _into_channels(_batched(x, x_dim, size), has_n)
    if b is not None:
        b = _batched(b, b_dim, size).flatten()
    y = forward(x, w.flatten(0, 1), b, *arguments, groups * size, dilation, precision)
    return _from_channels(y, size, has_n)


def backward_rule(backward: Backward, size: int, in_dims: Sequence[Optional[int]], grad_output, input, weight,
                  stride, padding, output_padding, groups, dilation, output_mask, precision):  # fmt: skip
    """((grad_input, grad_weight, grad_bias), out_dims) of the backward pass
    over a vmapped dimension; a masked gradient is the empty tensor, unbatched."""
    gy_dim, x_dim, w_dim = in_dims[:3]
    gy, x, w = _front(grad_output, gy_dim), _front(input, x_dim), _front(weight, w_dim)
    dims = len(stride)
    has_n = _has_batch_axis(x, x_dim, dims)
    mask = [bool(m) for m in output_mask]
    arguments = (stride, padding, output_padding)
    empty = grad_output.new_empty(0)
    grads, out_dims = [empty, empty, empty], [None, None, None]
    # grad_input takes grad_output and the weight; grad_weight and grad_bias
    # take grad_output and the input.  Each pair batched or not decides its fold.
    input_pair = mask[0] and (gy_dim is not None or w_dim is not None)
    weight_pair = (mask[1] or mask[2]) and (gy_dim is not None or x_dim is not None)
    if mask[0] and not input_pair:  # unbatched: one sample's input gives the shape
        grads[0] = backward(gy, x[0] if x_dim is not None else x, w, *arguments, groups, dilation, [True, False, False], precision)[0]
    if (mask[1] or mask[2]) and not weight_pair:
        g = backward(gy, x, w[0], *arguments, groups, dilation, [False, mask[1], mask[2]], precision)
        grads[1], grads[2] = g[1], g[2]
    if input_pair and w_dim is None and not weight_pair:
        # the weight is shared: the samples join the batch axis
        x_all = _batched(x, x_dim, size)
        gy_n, x_n = (t.flatten(0, 1) for t in (gy, x_all)) if has_n else (gy, x_all)
        g = backward(gy_n, x_n, w, *arguments, groups, dilation, [True, False, False], precision)[0]
        grads[0], out_dims[0] = (g.unflatten(0, (size, -1)) if has_n else g), 0
    elif input_pair or weight_pair:
        # a grouped convolution, the samples side by side in the channels
        fold_mask = [input_pair, weight_pair and mask[1], weight_pair and mask[2]]
        gy_c = _into_channels(_batched(gy, gy_dim, size), has_n)
        x_c = _into_channels(_batched(x, x_dim, size), has_n)
        w_c = _batched(w, w_dim, size).flatten(0, 1)
        g = backward(gy_c, x_c, w_c, *arguments, groups * size, dilation, fold_mask, precision)
        if fold_mask[0]:
            grads[0], out_dims[0] = _from_channels(g[0], size, has_n)
        if fold_mask[1]:
            grads[1], out_dims[1] = g[1].unflatten(0, (size, -1)), 0
        if fold_mask[2]:
            grads[2], out_dims[2] = g[2].unflatten(0, (size, -1)), 0
    return tuple(grads), tuple(out_dims)


def forward_tangent(forward: Forward, input, weight, t_input, t_weight, t_bias, arguments, precision, shape):
    """The forward pass's tangent: forward(t_input, weight, t_bias) + forward(input, t_weight)."""
    terms = []
    if t_input is not None:
        terms.append(forward(t_input, weight, t_bias, *arguments, precision))
    elif t_bias is not None:
        dims = len(arguments[0])
        terms.append(t_bias.reshape((-1,) + (1,) * dims).expand(shape).contiguous())  # a tangent lays out as its primal
    if t_weight is not None:
        terms.append(forward(input, t_weight, None, *arguments, precision))
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def backward_tangents(backward: Backward, grad_output, input, weight, t_grad_output, t_input, t_weight,
                      arguments, mask, precision, shapes):  # fmt: skip
    """The backward pass's tangents: each gradient's pass with grad_output
    replaced by its tangent, plus grad_input's with the weight's and
    grad_weight's with the input's.  A masked gradient's is empty; one
    with no term is zero."""
    tangents = [None, None, None]
    if t_grad_output is not None:
        tangents = list(backward(t_grad_output, input, weight, *arguments, list(mask), precision))
    if mask[0] and t_weight is not None:
        term = backward(grad_output, input, t_weight, *arguments, [True, False, False], precision)[0]
        tangents[0] = term if tangents[0] is None else tangents[0] + term
    if mask[1] and t_input is not None:
        term = backward(grad_output, t_input, weight, *arguments, [False, True, False], precision)[1]
        tangents[1] = term if tangents[1] is None else tangents[1] + term
    return tuple(grad_output.new_zeros(shape) if tangent is None else tangent for tangent, shape in zip(tangents, shapes))
