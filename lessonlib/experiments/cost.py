"""The course's one way of counting what a computation costs: its sequential steps and its operations.

Counted on an ideal parallel machine (the work-depth model): it runs any number of arithmetic
operations at once, as long as none needs another's result.

- operations: every multiply, add, exp ... on one number counts 1 (the work);
- sequential steps: the longest chain of operations in which each needs the result of the one
  before (the depth). An elementwise operation over a whole tensor is 1 step; combining n numbers
  into one (a sum, each dot product of a matrix product, a softmax's normaliser) is a tree of
  pairs, ceil(log2 n) steps.

Sequential steps are the time on a machine with as many parallel lanes as the widest step needs
(about 2 * B * T * D numbers at once for a scan over a batch: a round multiplies both parts of
every pair). A real machine has P lanes and needs at least max(steps, operations / P) rounds, and
at most operations / P + steps (Brent): a CPU, with tens of lanes, is nearer operations / P.
Only the forward pass is counted; moving data (views, copies, concatenation, lookup) is free.

    cost.count(lambda: model(x))  # -> Cost(sequential_steps=..., operations=...)
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten
# Data movement and creation: no arithmetic, no step.
MOVES = {aten.cat, aten.stack, aten.copy_, aten.clone, aten._to_copy, aten.embedding, aten.index, aten.index_select,
         aten.gather, aten.empty, aten.zeros, aten.ones, aten.full, aten.zeros_like, aten.ones_like, aten.full_like,
         aten.empty_like, aten.new_zeros, aten.new_ones, aten.new_empty, aten.new_full, aten.lift_fresh,
         aten.arange, aten.tril, aten.triu, aten.fill_, aten.zero_, aten.detach, aten._unsafe_view,
         aten.randn, aten.rand, aten.randint, aten.normal_, aten.uniform_, aten.unsafe_split, aten.unsafe_chunk}
PRODUCTS = {aten.mm, aten.bmm, aten.addmm, aten.baddbmm}
SCANS = {aten.cumsum, aten.cumprod, aten.logcumsumexp}  # a prefix over n: ceil(log2 n) rounds, n log2 n work
SOFTMAXES = {aten._softmax, aten._log_softmax}  # max, subtract, exp, sum, divide (or log)


class Cost(NamedTuple):
    sequential_steps: int  # the longest chain of operations, each needing the one before
    operations: int  # all arithmetic on single numbers


def count(fn: Callable[[], Any]) -> Cost:
    """The cost of running fn(): its sequential steps (to the tensors it returns) and its operations."""
    with _Counter() as counter:
        out = fn()
    return Cost(max((counter.depth_of(t) for t in tree_leaves(out) if isinstance(t, Tensor)), default=0),
                counter.operations)


def tree_steps(n: int) -> int:
    """Steps to combine n numbers into one, in pairs."""
    return math.ceil(math.log2(n)) if n > 1 else 0


def _rule(func: torch._ops.OpOverload, args: tuple, out: list[Tensor]) -> tuple[int, int]:
    """(steps, operations) of one aten call."""
    packet = func.overloadpacket
    if packet in MOVES:
        return 0, 0
    if packet in PRODUCTS:
        a, b = (args[1], args[2]) if packet in (aten.addmm, aten.baddbmm) else (args[0], args[1])
        k, cells = a.shape[-1], out[0].numel()
        add = packet in (aten.addmm, aten.baddbmm)  # the bias or input, added at the end
        return 1 + tree_steps(k) + add, cells * (2 * k - 1 + add)
    if packet in SCANS:
        n = args[0].shape[args[1]] if args[0].dim() else 1
        return tree_steps(n), out[0].numel() * tree_steps(n)
    if packet in SOFTMAXES:
        n = args[0].shape[args[1]] if args[0].dim() else 1
        return 2 * tree_steps(n) + 3, 5 * args[0].numel()
    if packet is aten.native_layer_norm:  # mean, subtract, square, mean, rsqrt(+ eps), multiply, scale, shift
        n = math.prod(args[1])
        return 2 * tree_steps(n) + 9, 9 * args[0].numel()
    if torch.Tag.reduction in func.tags:
        n, kept = args[0].numel() // max(1, out[0].numel()), out[0].numel()
        mean = packet is aten.mean  # then a division
        return tree_steps(n) + mean, kept * (n - 1 + mean)
    if torch.Tag.pointwise in func.tags:
        return 1, out[0].numel()
    raise NotImplementedError(f"cost.count has no rule for {func}: add it to lessonlib/experiments/cost.py")


class _Counter(TorchDispatchMode):
    """Follows each storage's depth: the steps before its latest value could exist."""

    def __init__(self) -> None:
        super().__init__()
        self.depths: dict[int, int] = {}
        self.operations = 0

    def depth_of(self, t: Tensor) -> int:
        return self.depths.get(_key(t), 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        read = [t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)]
        depth = max((self.depth_of(t) for t in read), default=0)
        out = func(*args, **kwargs)
        written = [t for t in tree_leaves(out) if isinstance(t, Tensor)]
        if func.is_view:
            return out
        steps, operations = _rule(func, args, written)
        self.operations += operations
        for t in written:
            self.depths[_key(t)] = depth + steps
        return out


def _key(t: Tensor) -> int:
    return t.untyped_storage().data_ptr()
