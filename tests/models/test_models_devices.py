"""Device checks (tests/helpers/devices.py) on every device: CPU in the default suite (device-vs-device checks run
CPU vs CPU, so their logic is proven before they run on a GPU) and CUDA (``pytest -m cuda``; skipped without one);
plus what holds on CPU itself: one bf16-autocast training step of every registered model, fp32 beam scores under
autocast, the fused search's host reads not growing with its length, dropout draws on a non-CPU code path."""

from __future__ import annotations

import pytest
import torch

from rirlab.models import registry
from rirlab.models.base import at_least_fp32, autocast
from rirlab.models.grc import uniform_int16
from tests.helpers.devices import (CUDA, HostReads, check_dropout_draws_on_device, check_fused_equals_reference,
                                   check_fused_search_syncs_do_not_grow_with_length,
                                   check_model_matches_across_devices, check_search_scores_fp32_under_bf16,
                                   check_training_step, tiny_batch, tiny_model)

NAMES = registry.names()
DEVICES = ["cpu", CUDA]


@pytest.mark.parametrize("device", DEVICES)
def test_fused_search_equals_reference_float64(device):
    check_fused_equals_reference(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_model_on_the_device_equals_itself_on_cpu(name, device):
    check_model_matches_across_devices(name, "cpu", device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_training_step_every_model(name, precision, device):
    check_training_step(name, device, precision)


@pytest.mark.parametrize("device", DEVICES)
def test_search_scores_stay_fp32_under_bf16_autocast(device):
    check_search_scores_fp32_under_bf16(device)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_draws_on_the_device(device):
    check_dropout_draws_on_device(device)


def test_the_device_draw_is_uniform_and_seeded():
    """uniform_int16 is what CUDA draws (a bounded randint, no full-range int64 random_); here on CPU."""
    torch.manual_seed(1)
    u = uniform_int16(100000, "cpu")
    torch.manual_seed(1)
    assert torch.equal(uniform_int16(100000, "cpu"), u) and u.dtype == torch.int16
    assert int(u.min()) == -(2**15) and int(u.max()) == 2**15 - 1
    hist = torch.histc(u.float(), bins=16, min=-(2**15), max=2**15)  # equal sixteenths of the range
    assert (hist - 100000 / 16).abs().max() < 400


@pytest.mark.parametrize("device", DEVICES)
def test_fused_search_host_reads_do_not_grow_with_length(device):
    check_fused_search_syncs_do_not_grow_with_length(device)


def test_host_reads_counts_what_synchronises():
    """The counter behind the sync test sees each kind of host read (a counter that sees nothing passes anything)."""
    x = torch.arange(6)
    with HostReads() as reads:
        x.tolist(), x[0].item(), bool(x[1]), x.nonzero(), x[x > 2], torch.repeat_interleave(x, x), torch.bincount(x)
        x.sum() + 1  # not a host read
    assert reads.calls == ["tolist", "_local_scalar_dense", "_local_scalar_dense", "nonzero", "index",
                           "repeat_interleave", "bincount"]

    class Twice(torch.autograd.Function):  # a read inside a hand-written backward is seen too
        forward = staticmethod(lambda ctx, v: v * 2)
        backward = staticmethod(lambda ctx, g: g * 2 if g.nonzero().numel() else g)

    y = torch.ones(3, requires_grad=True)
    with HostReads() as reads:
        Twice.apply(y).sum().backward()
    assert reads.calls == ["nonzero"]


def test_autocast_helper():
    lin = torch.nn.Linear(4, 4)
    with autocast("fp32", "cpu"):
        assert lin(torch.randn(2, 4)).dtype == torch.float32
    with autocast("bf16", "cpu"):
        assert lin(torch.randn(2, 4)).dtype == torch.bfloat16
    with autocast("fp16", "cpu"):  # the dynamic-halt code's float16 (the trainer adds a grad scaler)
        assert lin(torch.randn(2, 4)).dtype == torch.float16
    with pytest.raises(ValueError, match="precision"):
        autocast("fp8", "cpu")
    assert at_least_fp32(torch.ones(1, dtype=torch.bfloat16)).dtype == torch.float32
    assert at_least_fp32(torch.ones(1, dtype=torch.float64)).dtype == torch.float64


# ops whose results are not correctly rounded, so CPU and CUDA may differ in the last bit of a float32 result
TRANSCENDENTAL = {"sin", "cos", "tan", "exp", "expm1", "log", "log1p", "log2", "pow", "tanh", "sigmoid", "erf",
                  "softplus", "gelu", "silu", "atan2", "_softmax", "_log_softmax"}


@pytest.mark.parametrize("name", NAMES)
def test_float64_forward_computes_no_transcendental_in_float32(name):
    """A float64 forward computes its sines, exponentials, powers... in float64: a float32 one (RoPE's angles once)
    gives CPU and CUDA results an ulp of float32 apart, which the float64 device comparison above then fails on
    (seen on an H100: gutlb 6.9e-9 apart)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ in TRANSCENDENTAL and isinstance(out, torch.Tensor) \
                    and out.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.complex64):
                seen.append(f"{func.overloadpacket.__name__} -> {out.dtype}")
            return out

    model, _ = tiny_model(name, torch.float64)
    model.eval()
    with torch.no_grad(), Spy():
        model(tiny_batch("cpu"))
    assert not seen, seen
