import pytest
import torch

# Every device test runs on CPU, and on CUDA where there is one; without one it is
# skipped with a reason, never silently dropped.
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
    ),
]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


def pytest_terminal_summary(terminalreporter) -> None:
    from pathlib import Path

    screenshots = Path(__file__).resolve().parents[1] / "test-artifacts" / "screenshots"
    if screenshots.is_dir():
        terminalreporter.write_line(f"browser screenshots (desktop and 390-px phone): {screenshots}")
