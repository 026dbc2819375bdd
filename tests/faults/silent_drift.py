"""Fault: validate_environment never warns about version drift."""

import logging

from faults._base import each_backend, with_faults


class Silent:
    @classmethod
    def validate_environment(cls):
        logging.disable(logging.WARNING)
        try:
            super().validate_environment()
        finally:
            logging.disable(logging.NOTSET)


with_faults(globals(), exporters=each_backend(Silent))
