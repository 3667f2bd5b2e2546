"""lessonlib.device: the CPU settings every experiment runs under."""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

from lessonlib.device import device, steady_cpu


def _tiny_product(steady: bool) -> tuple[float, int]:
    """1e-30 * 1e-15 is a subnormal float32; flushed, it is 0. And the thread count inside."""
    if not steady:
        return (torch.tensor([1e-30]) * 1e-15).item(), torch.get_num_threads()
    with steady_cpu("cpu"):
        return (torch.tensor([1e-30]) * 1e-15).item(), torch.get_num_threads()


def test_steady_cpu_flushes_subnormals_and_uses_one_thread_in_a_fresh_process():
    """The memory task's runs go to fresh worker processes (joblib's loky), which inherit nothing.
    One new process for the whole test: a reused one could have been flushed already."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
        plain, _ = fresh.submit(_tiny_product, False).result()
        steady, threads = fresh.submit(_tiny_product, True).result()
    assert plain > 0, "a fresh process computes the subnormal"
    assert steady == 0.0 and threads == 1


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_device_variable_is_unset_as_every_other_switch_is(monkeypatch, value):
    monkeypatch.setenv("LESSONLIB_DEVICE", value)
    assert device() == torch.device("cpu")


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:x", "CPU", "cpu cuda"])
def test_a_device_that_torch_would_refuse_stops_the_build_at_its_start_in_one_line(tmp_path, value):
    from fixture_sites import build_process, make_site

    site = make_site(tmp_path, {"index.md": "# Home, where no page asks for a device\n"})
    built = build_process(site, LESSONLIB_DEVICE=value)
    assert built.returncode == 1
    assert f"LESSONLIB_DEVICE: {value!r} is not a torch device" in built.stderr
    assert "Traceback" not in built.stderr
