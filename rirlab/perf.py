"""Process-level speed settings shared by training and benchmarks."""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_done = False


def tune_allocator() -> bool:
    """Keep freed CPU memory in glibc's heap instead of returning it to the OS (Linux/glibc only).

    A train step allocates and frees tens of MB of activations; by default every large block is
    a fresh mmap whose pages fault in on first touch (about 15k faults, ~25 ms per RIR-EBT-GRC
    step at batch 16 x 100 on 2 cores). With mmap above 1 GiB only and a 2 GiB trim threshold,
    the blocks are reused: the peak RSS is unchanged, but the process keeps it until exit.
    Returns whether the settings were applied (False off glibc).
    """
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 1 << 31))
    except (OSError, AttributeError):
        return False
    _done = ok
    return ok


class TensorMemory:
    """High-water mark of the tensor memory a training step holds, counted tensor by tensor (CPU has no
    allocator statistics; the process's RSS also holds the interpreter, libraries and freed heap).

    Counts, in bytes of unique storages: the model's parameters, one gradient per trainable parameter, the
    optimiser's state tensors, and the activations that autograd saves for backward during the forward
    (``torch.autograd.graph.saved_tensors_hooks``; tensors a custom autograd Function keeps as plain ``ctx``
    attributes are not seen). The step's peak is the end of its forward, when every saved activation is
    alive beside the previous step's gradients (the trainer clears them after the forward). Not counted:
    short-lived temporaries freed within the forward or backward, evaluation passes, the best-dev weight
    copy and the data. ``peak_bytes`` = static (parameters, gradients, optimiser state) + the largest
    step's saved activations.
    """

    def __init__(self, model, opt=None):
        self.model, self.opt = model, opt
        self.peak_saved = 0  # bytes of activations saved for backward, largest step so far

    def track(self):
        """Context manager around one training forward: record the bytes it saves for backward."""
        import contextlib

        import torch

        @contextlib.contextmanager
        def ctx():
            params = list(self.model.parameters())
            param_ids = {id(p) for p in params}  # a saved weight is the Parameter itself: skipped cheaply
            skip = {p.untyped_storage().data_ptr() for p in params}  # views of parameters: counted as such
            seen: set = set()
            total = [0]

            def pack(t):
                if id(t) in param_ids:
                    return t
                try:
                    st = t.untyped_storage()
                except (RuntimeError, NotImplementedError):  # sparse or other storage-less tensors
                    return t
                key = st.data_ptr()
                if key not in seen and key not in skip:
                    seen.add(key)
                    total[0] += st.nbytes()
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, _unpack):
                yield
            self.peak_saved = max(self.peak_saved, total[0])

        return ctx()

    def static_bytes(self) -> int:
        """Parameters + a gradient per trainable parameter + the optimiser's state tensors (unique storages)."""
        import torch

        seen: set = set()
        total = 0

        def add(t) -> int:
            st = t.untyped_storage()
            if st.data_ptr() in seen:
                return 0
            seen.add(st.data_ptr())
            return st.nbytes()

        params = list(self.model.parameters())
        for p in params:
            total += add(p)
        total += sum(p.numel() * p.element_size() for p in params if p.requires_grad)  # grads (allocated or due)
        if self.opt is not None:
            for state in self.opt.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor) and v.numel() > 1:  # skip scalar step counters
                        total += add(v)
        return total

    def peak_bytes(self) -> int:
        return self.static_bytes() + self.peak_saved


def _unpack(t):
    return t
