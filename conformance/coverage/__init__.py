"""The coverage sweep: how much of the installed transformers exports and matches eager, per architecture.

Every model class the Auto mappings register is built tiny (``shrink``), fed inputs made from
its declared main input (``inputs``), exported through an implementation's adapter and judged
with the plugin's one comparison (``cells``), each architecture in its own worker process
(``runner``). Results are kept per cell and per stack of versions (``store``) so an interrupted
sweep resumes, and ``report`` writes the side-by-side table of both implementations.

    python -m conformance.coverage --impl hfexport
    python -m conformance.coverage --impl transformers
    python -m conformance.coverage --report

The package never imports the implementation it judges: it goes through
``pytest_hfexport.adapters.resolve``.
"""
