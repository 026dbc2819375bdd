"""What only makes an ExecuTorch lowering faster, never what it computes: ``retraces`` (EXIR and XNNPACK retraces
that would record the graph they were given, skipped; ``edge_pass_triggers`` tells which), ``fusion`` (one code
regeneration per partitioning). Each patch is registered with ``speedup=True``: ``hfexport.speedups`` turns them off.
"""
