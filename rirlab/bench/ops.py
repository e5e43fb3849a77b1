"""What a step dispatches, not how long it takes: ATen ops counted by a dispatch mode (any device, CPU included) and,
on CUDA, kernel launches and host synchronisations counted by the profiler.

On a GPU a small model's step is host-bound: its time is its launches times the host's cost per launch, so the op
count is the figure to track beside time and memory (the GPU issue; 3,721 launches per RIR-EBT-GRC step at 128 x
100 on an H100, the GPU busy 7-13% of the step). It is measured on one extra step after the timed ones.
"""

from __future__ import annotations

import collections
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


class OpCounter(TorchDispatchMode):
    """Counts every ATen op dispatched inside the ``with`` block (forward, autograd's backward, optimiser), by name;
    ``views``: how many of them are views (no kernel on any device; the rest is what launches one).

    Code compiled by ``torch.compile`` (a model's ``compile: true``) runs under it as it runs outside: the counter is
    an "infra" mode, as Dynamo runs nothing compiled under any other dispatch mode (it falls back to eager, or raises
    with ``fullgraph=True``). There the counter sees what the compiled code dispatches (matrix products, top-k, the
    runtime's views), not the kernels inductor generated: on the CPU ``kernels`` counts those (C++ kernels called
    inside the block, :func:`inductor_cpu_kernels`); on CUDA the profiler counts every launch (:func:`count_step`)."""

    def __init__(self):
        super().__init__()
        self.by_name: collections.Counter = collections.Counter()
        self.views = 0
        self.kernels: collections.Counter = collections.Counter()
        self._unwrap = None

    @classmethod
    def is_infra_mode(cls) -> bool:
        return True

    def __enter__(self):
        self._unwrap = inductor_cpu_kernels(self.kernels)
        return super().__enter__()

    def __exit__(self, *exc):
        self._unwrap()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.by_name[func.overloadpacket.__name__] += 1
        self.views += bool(func.is_view)
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """ATen ops dispatched and inductor's C++ kernels run (each one launch's worth of host work)."""
        return sum(self.by_name.values()) + sum(self.kernels.values())


def inductor_cpu_kernels(counts: collections.Counter) -> Callable[[], None]:
    """Count the calls of every C++ kernel torch.compile's inductor has loaded so far (``cpp_fused_*`` functions of
    its generated modules, which call them by module global) into ``counts`` until the returned function restores
    them. Kernels loaded later (a graph compiled inside the block) are not counted: count after a warm-up step."""
    import sys

    mod = sys.modules.get("torch._inductor.codecache")
    wrapped = []
    for m in list(mod.PyCodeCache.modules) if mod is not None else []:
        for name in [n for n in vars(m) if n.startswith("cpp_fused")]:
            fn = getattr(m, name)

            def counted(*args, _fn=fn, _name=name, **kwargs):
                counts[_name] += 1
                return _fn(*args, **kwargs)

            setattr(m, name, counted)
            wrapped.append((m, name, fn))

    def restore():
        for m, name, fn in wrapped:
            setattr(m, name, fn)

    return restore


def busy_share(events, wall_us: float) -> float:
    """The union of the kernel intervals (microseconds) over ``wall_us``."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    busy, end = 0.0, float("-inf")
    for a, b in spans:
        if b <= end:
            continue
        busy += b - max(a, end)
        end = b
    return busy / wall_us if wall_us else 0.0


def kernel_events(events) -> list:
    """The profiler's device-side kernel events, less the user annotations it also puts on the GPU's timeline (the
    optimiser's "Optimizer.step#AdamW.step" range: not a kernel, and it spans kernels that are counted on their own)."""
    return [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA
            and not getattr(e, "is_user_annotation", False) and not e.name.startswith(("Optimizer.", "ProfilerStep"))]


def count_step(step: Callable[[], None], device: str, top: int = 12) -> dict:
    """One ``step()`` under :class:`OpCounter`: ``ops_per_step``, ``view_ops_per_step`` and the ``top`` op names;
    on CUDA also one profiled step: ``kernels_per_step``, ``syncs_per_step`` (the runtime's synchronising calls) and
    ``gpu_busy_share`` (kernel time over the step's wall time, under the profiler)."""
    with OpCounter() as ops:
        step()
    out = {"ops_per_step": ops.total, "view_ops_per_step": ops.views,
           "top_ops": dict(ops.by_name.most_common(top)), "compiled_kernels_per_step": sum(ops.kernels.values())}
    if device == "cuda":
        events, wall = profile_steps(step, 1)
        kernels = kernel_events(events)
        runtime = collections.Counter(e.name for e in events if e.name.startswith("cuda"))
        syncs = sum(runtime[k] for k in SYNC_CALLS) - 1  # less the synchronize that ends the measured step
        out.update(kernels_per_step=len(kernels), syncs_per_step=syncs, gpu_busy_share=busy_share(kernels, wall * 1e6))
    return out


def profile_steps(step: Callable[[], None], n: int) -> tuple[list, float]:
    """The CUDA profiler's events of ``n`` calls of ``step()`` and their wall time (s), synchronised at both ends."""
    import time

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    return prof.events(), wall
