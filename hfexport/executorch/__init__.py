"""ExecuTorch, in one package: the exporter, its runner and decode loop, and what it needs from EXIR.

* ``exporter``: ``ExecutorchExporter`` (trace, lower to edge and to the delegate, emit, save a ``.pte``);
* ``runtime``: ``ExecutorchRunner`` and ``ExecutorchDecodeLoop`` over a ``.pte`` (the ExecuTorch Python runtime);
* ``fixes``, ``checks``, ``passes``: correctness workarounds of EXIR's lowering (patches of the
  ``executorch_lowering`` set), the checks a lowered program must pass, and hfexport's edge passes;
* ``speedups``: what only makes a lowering faster (skipped retraces, one code regeneration per partitioning),
  turned off with every other speed-up by ``hfexport.speedups``.
"""

from .exporter import ExecutorchExporter

__all__ = ["ExecutorchExporter"]
