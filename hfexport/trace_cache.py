"""Whether torch's fake-tensor dispatch cache is on while hfexport traces a model.

While torch.export traces, every operator call runs on fake tensors, and torch keeps a cache of those calls'
output shapes. Making an entry is not free: for each new call torch builds the key and then synthesises a fake
output from it to validate the entry, about a millisecond apiece with symbolic sizes here. The entries pay back
only when a call repeats with the same shapes, that is from the second decoder layer on, or when a later retrace
over the same shape environment (ExecuTorch's decompositions) replays them. A model with few repeated blocks
(every test-sized model a suite exports) therefore traces faster without the cache, a deep one faster with it.
``python benchmarks/fake_tensor_cache.py`` prints the export time with and without it per depth and backend; the
thresholds below are where the two cross.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch

from . import speedups

logger = logging.getLogger(__name__)

# (export format, whether the sample carries a KV cache) -> the number of repeated blocks (the longest ModuleList
# in the model) from which the cache's hits outweigh the cost of making its entries; below it the trace runs
# without the cache. ExecuTorch's decompositions retrace the program three times over the trace's shape
# environment, replaying its entries: there the cache pays off whatever the depth (a 2-layer Llama exported 2.5 s
# faster with it). The ONNX exporter traces once, straight into decomposed ATen (``decomposed_trace``); a decomposed
# layer makes more calls than a training-IR one, so the cache pays off from fewer layers than Dynamo's trace (a
# Llama of 4 layers or more exported faster with it, 8 two-layer zoo models without it). A program that writes into
# a cache it is given is functionalised into other calls, which the trace replays less: ONNX's generation components
# (prefill and decode, each given a cache) exported faster without the cache up to 16 layers. A format not named
# here traces with the cache on, torch's default.
CACHE_FROM_REPEATED_BLOCKS = {
    ("dynamo", False): 16,
    ("dynamo", True): 16,
    ("onnx", False): 4,
    ("onnx", True): 16,
    ("executorch", False): 0,
    ("executorch", True): 0,
}


def repeated_blocks(model: torch.nn.Module) -> int:
    """The length of the model's longest ``ModuleList``: its decoder (or encoder) layers, the calls that repeat."""
    return max((len(m) for m in model.modules() if isinstance(m, torch.nn.ModuleList)), default=0)


def cache_pays_off(model: torch.nn.Module, export_format: str, carries_cache: bool = False) -> bool:
    """Whether tracing ``model`` for ``export_format`` is faster with the fake-tensor cache (see the module doc);
    ``carries_cache``: the sample inputs hold a KV cache the program will write into."""
    return repeated_blocks(model) >= CACHE_FROM_REPEATED_BLOCKS.get((str(export_format), carries_cache), 0)


@contextlib.contextmanager
def fake_tensor_cache(enabled: bool) -> Iterator[None]:
    """Turn torch's fake-tensor cache on or off for the block; the setting before it comes back after."""
    if not speedups.enabled():  # torch's own setting stands
        yield
        return
    logger.debug("tracing with the fake-tensor cache %s", "on" if enabled else "off")
    with torch._dynamo.config.patch(fake_tensor_cache_enabled=enabled):
        yield
