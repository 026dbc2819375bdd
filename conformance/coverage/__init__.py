"""The coverage sweep: how much of the installed transformers exports and matches eager, per architecture.

Every model class the Auto mappings register is built tiny (``shrink``), fed inputs made from its declared main
input (``inputs``), exported through an implementation's adapter and judged with the plugin's one comparison
(``cells``). The sweep is a pytest collection (``collect``, ``test_sweep.py``: one test per architecture x
backend x check) that writes the plugin's JSON report; ``report`` builds the side-by-side page of both
implementations from such reports (``rows``).

    python -m pytest -n 2 --dist loadgroup conformance/coverage --hfexport-report out/coverage/hfexport.json
    python -m conformance.coverage --report

The package never imports the implementation it judges: it goes through ``pytest_hfexport.adapters.resolve``.
"""
