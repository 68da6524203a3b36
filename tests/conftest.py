"Shared pytest set-up: Triton's interpreter on CPU-only machines, and the `gpu` marker."
import os
import pytest
import torch

# Before anything imports triton: its own tl.* helpers are @triton.jit functions, built for the interpreter only if this is set.
if not torch.cuda.is_available(): os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available(): return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords: item.add_marker(skip)
