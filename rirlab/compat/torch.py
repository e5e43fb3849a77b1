"""Every use rirlab makes of PyTorch below its public API, and the PyTorch versions that use was checked on.

Checked on torch 2.13.0 (the version the README installs and every test ran on); 2.1 is the oldest rirlab has
claimed to support. Unlike Ray's and MLflow's, these names are used at their call sites (a training step calls the
``_foreach`` kernels thousands of times: no indirection there); this module lists them, and
``tests/train/test_compat.py`` fails naming any one a new PyTorch removed.

- ``torch._foreach_*`` (rirlab/optim.py): the multi-tensor kernels ``torch.optim``'s own ``foreach`` path uses;
  Ranger's step as one kernel per operation over all parameters instead of one per parameter.
- ``torch.utils._python_dispatch.TorchDispatchMode`` (rirlab/bench/ops.py, tests/helpers/devices.py): counts the
  ATen ops a training step dispatches (issue 57's measure); ``torch.profiler`` counts kernels, not dispatches.
"""

from __future__ import annotations

from rirlab.compat import Supported

SUPPORTED = Supported("torch", lowest="2.1", below="2.14")

FOREACH = ("_foreach_mul_", "_foreach_add_", "_foreach_addcmul_", "_foreach_addcdiv_", "_foreach_sqrt",
           "_foreach_sub", "_foreach_copy_")
PRIVATE = tuple(("torch", name) for name in FOREACH) + (("torch.utils._python_dispatch", "TorchDispatchMode"),)


def check() -> None:
    """Raise one line (UnsupportedVersion) when the installed PyTorch is outside ``SUPPORTED``."""
    SUPPORTED.check()
