"""lessonlib.models.scan: the parallel and log-space scans against the loop, the underflow they avoid,
and the course's cost count (lessonlib.experiments.cost) against the arithmetic the code does."""
import pytest
import torch
from torch.overrides import TorchFunctionMode

from lessonlib.experiments import cost
from lessonlib.models.scan import (
    hillis_steele_rounds,
    scan_cumprod,
    scan_log,
    scan_loop,
    scan_parallel,
)

F64 = torch.float64
# 1, 2, 3, and 2^k - 1, 2^k, 2^k + 1 for every k up to 12: every way a length can sit against a power of two
LENGTHS = sorted({1, 2, 3} | {n for k in range(1, 13) for n in (2**k - 1, 2**k, 2**k + 1)})


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm()).item()


def random_recurrence(T: int, device, seed: int = 0, positive: bool = False):
    """a, b (2, T, 3) and h0 (2, 3), drawn on the CPU in float64: a in (-1, 1), or in (0, 1) with b
    and h0 positive too."""
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(2, T, 3, generator=g, dtype=F64)
    b = torch.randn(2, T, 3, generator=g, dtype=F64)
    h0 = torch.randn(2, 3, generator=g, dtype=F64)
    if positive:
        b, h0 = b.abs() + 0.01, h0.abs() + 0.01
    else:
        a = 2 * a - 1
    return a.to(device), b.to(device), h0.to(device)


@pytest.mark.parametrize("T", LENGTHS)
def test_parallel_scan_equals_the_loop(T, device):
    a, b, h0 = random_recurrence(T, device)
    want = scan_loop(a, b, h0)
    got = scan_parallel(a, b, h0)
    assert got.shape == (2, T, 3) and got.device == want.device
    assert relative_error(got, want) <= 1e-12
    # without h0: zeros
    assert relative_error(scan_parallel(a, b), scan_loop(a, b, torch.zeros_like(h0))) <= 1e-12


def test_the_loop_is_the_recurrence():
    """The reference itself, by hand: a = (2, 3), b = (1, 4), h0 = 5 -> h1 = 2*5 + 1 = 11, h2 = 3*11 + 4 = 37."""
    a = torch.tensor([[[2.0], [3.0]]], dtype=F64)
    b = torch.tensor([[[1.0], [4.0]]], dtype=F64)
    h0 = torch.tensor([[5.0]], dtype=F64)
    assert scan_loop(a, b, h0).flatten().tolist() == [11.0, 37.0]
    assert scan_parallel(a, b, h0).flatten().tolist() == [11.0, 37.0]


@pytest.mark.parametrize("T", [1, 2, 3, 7, 8, 9, 100, 1025])
def test_log_scan_equals_the_loop_for_positive_a(T, device):
    a, b, h0 = random_recurrence(T, device, positive=True)
    want = scan_loop(a, b, h0)
    assert relative_error(scan_log(a.log(), b.log(), h0.log()).exp(), want) <= 1e-10
    assert relative_error(scan_log(a.log(), b.log()).exp(), scan_loop(a, b)) <= 1e-10


@pytest.mark.parametrize("T", [1, 2, 9, 100])
@pytest.mark.parametrize("last", [1, 3, 200])
def test_log_scan_of_the_last_positions_equals_the_end_of_the_whole_scan(T, last, device):
    a, b, h0 = random_recurrence(T, device, positive=True)
    for given in (h0.log(), None):
        whole = scan_log(a.log(), b.log(), given)
        end = scan_log(a.log(), b.log(), given, last=last)
        assert end.shape == (2, min(last, T), 3)
        assert relative_error(end, whole[:, -min(last, T):]) <= 1e-12


def test_the_product_underflows_in_float32_and_the_log_scan_does_not(device):
    """300 factors a_t in (0.25, 0.75): their product is about 0.45^300 = 1e-104, zero in float32."""
    g = torch.Generator().manual_seed(0)
    a = (0.25 + 0.5 * torch.rand(1, 300, 4, generator=g, dtype=F64)).to(device)
    b = (0.1 + torch.rand(1, 300, 4, generator=g, dtype=F64)).to(device)
    exact = scan_loop(a, b)  # float64: the reference
    a32, b32 = a.float(), b.float()

    product = torch.cumprod(a32, dim=1)  # (1, 300, 4)
    assert (product[:, -1] == 0).all()  # underflowed
    assert (torch.cumprod(a, dim=1)[:, -1] > 0).all()  # float64 still holds it (about 1e-104)
    naive = scan_cumprod(a32, b32)
    assert not torch.isfinite(naive[:, -1]).any()  # b / 0 = inf, then 0 * inf = nan

    log_space = scan_log(a32.log(), b32.log()).exp()
    assert torch.isfinite(log_space).all()
    assert relative_error(log_space.double(), exact) <= 1e-5  # float32 rounding only
    assert relative_error(scan_parallel(a32, b32).double(), exact) <= 1e-5  # the pairs never form the full product
    # a naive float64 closed form still works here: the failure is float32's range, not the formula
    assert relative_error(scan_cumprod(a, b), exact) <= 1e-8


def test_shapes_are_checked():
    a = torch.zeros(2, 5, 3)
    with pytest.raises(ValueError, match="one shape"):
        scan_parallel(a, torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="h0"):
        scan_loop(a, a, torch.zeros(3))


def test_rounds_by_hand():
    assert hillis_steele_rounds(1) == []
    assert hillis_steele_rounds(2) == [[(1, 0)]]
    assert hillis_steele_rounds(4) == [[(1, 0), (2, 1), (3, 2)], [(2, 0), (3, 1)]]
    assert [len(r) for r in hillis_steele_rounds(8)] == [7, 6, 4]


class CountElementwise(TorchFunctionMode):
    """Counts the elements produced by every multiply and add that runs under it."""

    NAMES = {"__mul__", "__rmul__", "__add__", "__radd__", "mul", "add"}

    def __init__(self):
        super().__init__()
        self.elements = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in self.NAMES:
            self.elements += out.numel()
        return out


@pytest.mark.parametrize("T", [1, 2, 5, 8, 33])
def test_cost_count_sees_the_arithmetic_the_code_does(T):
    """cost.count's operations are the code's multiplies and adds, element by element; its steps are
    the loop's 2 per position (a multiply, then an add) and the scan's 2 per round after folding h0."""
    a, b, h0 = random_recurrence(T, "cpu")
    for scan, steps in ((scan_loop, 2 * T), (scan_parallel, 2 + 2 * (T - 1).bit_length())):
        with CountElementwise() as counter:
            scan(a, b, h0)
        counted = cost.count(lambda: scan(a, b, h0))
        assert counted == cost.Cost(steps, counter.elements), scan.__name__
