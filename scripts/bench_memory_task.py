"""Time the memory-task sweep against a straightforward baseline.

    .venv/bin/python scripts/bench_memory_task.py            # the lesson's trainings
    .venv/bin/python scripts/bench_memory_task.py --quick    # smoke test: 2 lengths, 2 seeds, 150 steps
    .venv/bin/python scripts/bench_memory_task.py --levers   # also add the levers one at a time

The baseline trains the same models (lessonlib.experiments.memory_task.MemoryModel: nn.RNN / nn.LSTM) on
the same batches under the same protocol, one model at a time, for the full step budget with
no early stop, in one thread (torch's default of two threads makes these small ops slower on
the 2-core build machine, so one thread is the stronger baseline). Ours is memory_task.sweep:
a run stops once solved, the RNN seeds of a length train together in one batched loop, and
the runs are spread over one single-threaded worker process per core.

The baseline runs twice: in one process, and spread over as many worker processes as ours.
The speed-up against the second is what the protocol (stop when solved, batched seeds) gains;
against the first it also includes what the worker processes gain.

Wall time depends on what else the machine is doing; CPU time (the workers' included) hardly
does, so both are printed, with the load average before and after.

Exits with status 1 when ours and the baseline disagree on which runs solved the task (the
speed must not change an outcome).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import time

import torch
from joblib import Parallel, delayed
from joblib.externals.loky import get_reusable_executor
from torch import nn

from lessonlib.device import steady_cpu
from lessonlib.experiments import memory_task as mt


def train_baseline(model_name: str, length: int, seed: int, protocol: mt.MemoryProtocol) -> mt.Run:
    """The protocol written plainly, in one thread: every step of the budget, validation once at the end."""
    with steady_cpu("cpu"):
        return _train_baseline(model_name, length, seed, protocol)


def _train_baseline(model_name: str, length: int, seed: int, protocol: mt.MemoryProtocol) -> mt.Run:
    model = mt.build(model_name, seed, protocol)
    generator = torch.Generator().manual_seed(1_000 + seed)  # the same batches as mt.train
    optimizer = torch.optim.Adam(model.parameters(), lr=protocol.lr)
    for _ in range(protocol.steps):
        tokens, labels = mt.make_batch(protocol.batch, length, generator, "cpu", protocol.vocab)
        loss = nn.functional.cross_entropy(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), protocol.clip)
        optimizer.step()
    tokens, labels = mt.validation_set(length, protocol)
    with torch.no_grad():
        accuracy = (model(tokens).argmax(-1) == labels).float().mean().item()
    return mt.Run(accuracy, protocol.steps)


Results = dict[tuple[str, int, int], mt.Run]


def pattern(results: Results, solved: float) -> dict[tuple[str, int, int], bool]:
    return {job: run.accuracy >= solved for job, run in results.items()}


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the sweep's worker processes)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def timed(fn) -> tuple[object, float, float]:
    """fn's result, its wall time and its CPU time, which other load on the machine barely moves."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    out = fn()
    get_reusable_executor().shutdown(wait=True)  # workers must exit for their CPU time to be counted
    return out, time.perf_counter() - wall, cpu_seconds() - cpu


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--quick", action="store_true", help="lengths 10 and 30, seeds 0 and 1, 150 steps")
    parser.add_argument("--levers", action="store_true", help="also time the levers one at a time")
    parser.add_argument("--workers", type=int, default=None, help="processes for our sweep (default: cores)")
    args = parser.parse_args()

    protocol, lengths, seeds = mt.PROTOCOL, mt.LENGTHS, mt.SEEDS
    if args.quick:
        protocol, lengths, seeds = dataclasses.replace(protocol, steps=150), (10, 30), (0, 1)
    jobs = [(m, L, s) for m in mt.MODELS for L in lengths for s in seeds]
    workers = args.workers or os.cpu_count()
    print(f"{len(jobs)} trainings, {protocol}")
    print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.2f}")

    torch.set_num_threads(1)
    mt.train("lstm", 5, 0, dataclasses.replace(protocol, steps=1))  # one-off lazy imports, off the clock

    def sweep(workers: int) -> Results:
        return mt.sweep(mt.MODELS, lengths, seeds, protocol, "cpu", progress=workers > 1, workers=workers)

    def baseline(workers: int) -> Results:
        order = sorted(jobs, key=lambda job: -job[1])  # longest first, as the sweep orders its jobs
        runs = Parallel(n_jobs=workers)(delayed(train_baseline)(*job, protocol) for job in order)
        return dict(sorted(zip(order, runs), key=lambda item: jobs.index(item[0])))

    ours, t_ours, cpu_ours = timed(lambda: sweep(workers))
    base, t_base, cpu_base = timed(lambda: baseline(1))
    base_w, t_base_w, cpu_base_w = timed(lambda: baseline(workers)) if workers > 1 else (base, t_base, cpu_base)

    print(f"\nours ({workers} workers, stop when solved, RNN seeds batched): {t_ours:.1f} s, "
          f"{cpu_ours:.1f} CPU s")
    print(mt.format_table(ours))
    print(f"\nbaseline (one at a time, full budget, 1 thread): {t_base:.1f} s, {cpu_base:.1f} CPU s in 1 process; "
          f"{t_base_w:.1f} s, {cpu_base_w:.1f} CPU s in {workers}")
    print(mt.format_table(base))
    steps_ours = sum(run.steps * L for (_, L, _), run in ours.items())
    steps_base = sum(run.steps * L for (_, L, _), run in base.items())
    print(f"\nspeed-up against the baseline in {workers} worker processes, as ours (the protocol alone): "
          f"{t_base_w / t_ours:.2f}x wall ({t_base_w:.1f} s -> {t_ours:.1f} s), "
          f"{cpu_base_w / cpu_ours:.2f}x CPU ({cpu_base_w:.1f} s -> {cpu_ours:.1f} s)")
    print(f"speed-up against the baseline in 1 process (protocol and processes): "
          f"{t_base / t_ours:.2f}x wall ({t_base:.1f} s -> {t_ours:.1f} s), "
          f"{cpu_base / cpu_ours:.2f}x CPU ({cpu_base:.1f} s -> {cpu_ours:.1f} s)")
    print(f"  CPU time includes the workers' start-up; ours kept {cpu_ours / t_ours:.2f} of {workers} cores busy, "
          f"the {workers}-process baseline {cpu_base_w / t_base_w:.2f}")
    print(f"  time steps trained: {steps_base} -> {steps_ours}, {steps_base / steps_ours:.2f}x fewer")
    same = pattern(ours, protocol.solved) == pattern(base, protocol.solved) == pattern(base_w, protocol.solved)
    print(f"same solved/unsolved pattern (>= {protocol.solved}): {'yes' if same else 'NO'}")

    if args.levers:  # in this process, one lever at a time: its CPU seconds are the fair measure
        # the baseline's loop, each run cut where the stop rule stopped it (the runs are deterministic)
        cut = {job: dataclasses.replace(protocol, steps=ours[job].steps) for job in jobs}
        _, t_stop, cpu_stop = timed(lambda: [train_baseline(*job, cut[job]) for job in jobs])
        one, t_one, cpu_one = timed(lambda: sweep(1))
        assert one == ours, "the number of workers must not change a single result"
        print("\nlevers, added one at a time (wall s / CPU s):")
        rows = [
            ("baseline", t_base, cpu_base, ""),
            ("+ stop when solved", t_stop, cpu_stop, f"{cpu_base / cpu_stop:.2f}x CPU"),
            ("+ RNN: hand-written loop, seeds batched", t_one, cpu_one, f"{cpu_stop / cpu_one:.2f}x CPU"),
            (f"+ {workers} worker processes (our sweep)", t_ours, cpu_ours, f"{t_one / t_ours:.2f}x wall"),
        ]
        for label, wall, cpu, gain in rows:
            print(f"  {label:<42}{wall:6.1f} / {cpu:6.1f}   {gain}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if not same:
        sys.exit("the solved/unsolved pattern differs between ours and the baseline")


if __name__ == "__main__":
    main()
