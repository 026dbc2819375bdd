"""Fault: a missing package raises an ImportError that does not say how to install it."""

from faults._base import each_backend, with_faults


class NoHint:
    @classmethod
    def validate_environment(cls):
        try:
            super().validate_environment()
        except ImportError as exc:
            raise ImportError(str(exc).split(". ")[0]) from None


with_faults(globals(), exporters=each_backend(NoHint))
