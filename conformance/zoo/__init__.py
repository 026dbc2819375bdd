"""The zoo of tiny random-weight models the suite checks, built offline from configs."""

from . import entries, entries_vlm  # noqa: F401  (fill ZOO, in this order)
from .registry import CHECKS, FAMILIES, ZOO, ZooEntry, get, register, select

__all__ = ["ZOO", "ZooEntry", "FAMILIES", "CHECKS", "get", "register", "select"]
