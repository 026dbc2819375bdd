"""Repo-level pytest set-up only: hypothesis profiles, pytester, and the third-party noise this repository's
own runs keep out of the terminal (no test logic here).

Noise, each silenced by its exact message and with its reason:
* torchao (an ExecuTorch dependency that transformers imports when it is installed) tries to load CUDA
  and Python-3.10 extension builds that cannot load here and logs each failure: it is told to skip them;
* torchao registers two Enums as pytree constants, which torch 2.13 logs as deprecated: filtered by message;
* deprecation warnings torch, transformers and ExecuTorch raise inside their own code (listed in
  pyproject.toml's filterwarnings). Warnings raised by a downstream repo's own code are never hidden.
"""

import logging
import os
import warnings

os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")

pytest_plugins = ["pytester"]



def pytest_sessionstart(session) -> None:
    """Hypothesis profiles, registered when a session starts (before collection) rather than at import, so
    ``pytest --help`` does not pay for importing hypothesis."""
    from hypothesis import HealthCheck, settings

    settings.register_profile("ci", max_examples=5, derandomize=True, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("dev", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class _DropMessages(logging.Filter):
    def __init__(self, *fragments: str) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(fragment in message for fragment in self.fragments)


# ExecuTorch reads its op tables with importlib.resources' legacy calls when it loads, outside any test.
for _legacy in ("read_text is deprecated", "open_text is deprecated"):
    warnings.filterwarnings("ignore", message=_legacy, category=DeprecationWarning)

logging.getLogger("torch.utils._pytree").addFilter(
    _DropMessages("is an Enum subclass and is now natively supported by torch.compile"))
logging.getLogger("torchao").addFilter(_DropMessages("Skipping import of cpp extensions due to TORCHAO_FORCE_SKIP"))
logging.getLogger("torch.onnx._internal.exporter._registration").addFilter(
    _DropMessages("torchvision is not installed. Skipping torchvision::"))
