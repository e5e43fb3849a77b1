"""The memory a trial must fit in: this machine's, or its container's where a cgroup limits it (a 3 GB container
on a 128 GB host has 3 GB), or its GPU's."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_memory_bytes(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> Optional[int]:
    """The tightest memory limit of this process's cgroups (v2 ``memory.max`` of its cgroup and each parent, v1
    ``memory.limit_in_bytes``), or None where there is none (or no cgroup file system to read)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    files = []
    for line in lines:  # "0::/path" (v2), "4:memory:/path" (v1); the limit of every ancestor applies too
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "" or "memory" in controllers.split(","):
            base, name = (root, "memory.max") if controllers == "" else (root / "memory", "memory.limit_in_bytes")
            here = base / path.strip("/")
            files += [d / name for d in (here, *here.parents) if d == base or base in d.parents]
    limits = []
    for file in files:
        try:
            text = file.read_text().strip()
        except OSError:
            continue
        if text.isdigit():  # "max": no limit
            limits.append(int(text))
    return min(limits, default=None)


def memory_limit_gb(gpu: bool = False) -> tuple[float, str]:
    """The memory one trial here can use (GB) and what it is, for messages: the GPU's (``gpu`` and CUDA seen),
    else the smaller of this machine's RAM and its cgroup's limit."""
    import psutil
    import torch

    if gpu and torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / 2**30, "this machine's GPU memory"
    total = psutil.virtual_memory().total
    limit = cgroup_memory_bytes()
    if limit is not None and limit < total:
        return limit / 2**30, "this container's memory limit (its cgroup's)"
    return total / 2**30, "this machine's memory"
