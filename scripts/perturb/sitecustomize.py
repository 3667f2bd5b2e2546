"""Stand-ins for another machine, for scripts/robustness: with this folder on PYTHONPATH, every
Python process of a build (the build, the engine's worker template, the processes experiments
start) applies what LESSONLIB_PERTURB names (comma-separated):

  subnormals   subnormal floats computed as IEEE says, never flushed to zero (the course flushes
               them: lessonlib.device.flush_subnormals)
  threads=N    torch uses N threads wherever the course asks for one

ATEN_CPU_CAPABILITY (other vectorised kernels) needs no help here: torch reads it itself.
"""
import os
import sys

from lessonlib.engine.config import environment_settings
from lessonlib.engine.worker.errors import SetupError

try:
    _asked = environment_settings().perturb  # each one checked there
except SetupError as _bad:  # one line: site.py would go on unperturbed, or end with a traceback on SystemExit
    sys.stderr.write(f"{_bad}\n")
    os._exit(2)
if _asked:
    import torch

    for _perturbation in _asked:
        if _perturbation == "subnormals":
            _flush = torch.set_flush_denormal
            torch.set_flush_denormal = lambda on: _flush(False)
        elif _perturbation.startswith("threads="):
            _threads, _set = int(_perturbation.split("=")[1]), torch.set_num_threads
            torch.set_num_threads = lambda n: _set(_threads)
            _set(_threads)
