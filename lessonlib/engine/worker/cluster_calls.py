"""What crosses a Dask cluster: a page (lessonlib.engine.builder.cluster) and a page's joblib calls
(process._joblib_on) cross as bytes, which a worker loads and runs in `run`, a function that Dask
sends by value, so loading it needs nothing of lessonlib; a joblib call's outcome crosses back as
bytes too (ClusterBackend).

Why: Dask loads a task's function and arguments, and serialises its result, inside its own
machinery, where a failure stalls instead of failing: a worker that cannot load a task (no
lessonlib there) stops serving its scheduler, and a result Dask cannot serialise (a weakref inside
a torch module) or the page cannot load leaves joblib's Dask backend waiting forever. Made and
loaded here, the same failures are the call's, raised where the page made it, in one line naming
the call (and the worker). Arguments cross as they are: joblib's scattering of large ones is lost.
"""
from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle
from joblib._dask import DaskDistributedBackend
from joblib._utils import _retrieve_traceback_capturing_wrapped_call
from joblib.externals.loky.process_executor import _ExceptionWithTraceback


def packed(function: Callable, *args: Any, **kwargs: Any) -> bytes:
    """A call, for `run` on a worker (cloudpickle: a function a page defines crosses by value)."""
    return cloudpickle.dumps((function, args, kwargs))


def _by_value() -> Callable[[str, bytes], Any]:
    def run(name: str, call: bytes) -> Any:
        """On a worker: load the call `name` and run it; a call this worker cannot load fails
        in one line naming the worker."""
        import pickle

        from distributed import get_worker

        try:
            function, args, kwargs = pickle.loads(call)
        except Exception as e:
            raise RuntimeError(f"the Dask worker {get_worker().address} cannot load {name} "
                               f"({type(e).__name__}: {e}): workers need this project's packages, "
                               "lessonlib included") from None
        return function(*args, **kwargs)

    return run


run = _by_value()  # defined in a function, so cloudpickle (and Dask) send it by value, not by name


def call_name(function: Callable) -> str:
    name = getattr(function, "__qualname__", None) or repr(function)[:80]
    module = getattr(function, "__module__", None)
    return f"{module}.{name}" if module and module not in ("__main__", "builtins") else name


class ClusterBackend(DaskDistributedBackend):
    """joblib's Dask backend, each call sent to `run` as bytes and its outcome sent back as bytes."""

    def submit(self, func, callback=None):  # noqa: ANN001, ANN201 (joblib's signature)
        batch = copy.copy(func)  # joblib's BatchedCalls: its items are the calls
        batch.items = [(run, _sent(function, args, kwargs), {}) for function, args, kwargs in func.items]
        future = super().submit(batch, callback)
        future.add_done_callback(lambda done: _told_of_failure(done, callback))
        return future

    def retrieve_result_callback(self, out):  # noqa: ANN001, ANN201
        return [_received(name, outcome) for name, outcome in super().retrieve_result_callback(out)]


def _sent(function: Callable, args: tuple, kwargs: dict) -> tuple[str, bytes]:
    """`run`'s arguments for one call; a call that cannot be sent fails on the worker, as the
    call would: joblib may send it from its own thread, where raising would leave it waiting."""
    name = call_name(function)
    try:
        return name, packed(_sent_back, name, function, args, kwargs)
    except Exception as e:
        return name, packed(_refuse, f"the joblib call {name} cannot be sent to the Dask cluster "
                                     f"({type(e).__name__}: {e}): pass it plain data")


def _refuse(message: str) -> None:
    raise TypeError(message)


def _sent_back(name: str, function: Callable, args: tuple, kwargs: dict) -> tuple[str, bytes]:
    """On a worker: the call's outcome, its result or its exception (with its traceback, as joblib
    sends it), as bytes; an outcome that cannot cross fails the call."""
    try:
        outcome = function(*args, **kwargs)
    except BaseException as e:  # as joblib's own wrapper
        outcome = _ExceptionWithTraceback(e)
    try:
        return name, cloudpickle.dumps(outcome)
    except Exception as e:
        raised = isinstance(outcome, _ExceptionWithTraceback)
        what = type(outcome.exc if raised else outcome).__name__
        advice = "" if raised else ": return plain data (numbers, tensors, state dicts)"
        raise TypeError(f"the joblib call {name} {'raised' if raised else 'returned'} a {what}, which cannot cross "
                        f"the Dask cluster back to the page ({type(e).__name__}: {e}){advice}") from None


def _received(name: str, outcome: bytes) -> Any:
    """In the page: the call's result, or its exception raised."""
    try:
        outcome = pickle.loads(outcome)
    except Exception as e:
        raise TypeError(f"the outcome of the joblib call {name} came back from the Dask cluster, but the page "
                        f"cannot load it ({type(e).__name__}: {e})") from None
    return _retrieve_traceback_capturing_wrapped_call(outcome)


def _told_of_failure(done, callback: Callable) -> None:  # noqa: ANN001 (a concurrent.futures.Future)
    """A task Dask itself failed (all its workers lost) fails joblib's future, but joblib's Dask
    backend tells joblib nothing, and the page would wait forever: tell it."""
    if not done.cancelled() and done.exception() is not None:
        callback(done.exception())
