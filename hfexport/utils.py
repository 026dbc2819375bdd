"""Shared generation tools of the public API, under ``hfexport.utils``."""

from .generation import decompose_for_generation, merge_decode_calls, record_calls

__all__ = ["decompose_for_generation", "merge_decode_calls", "record_calls"]
