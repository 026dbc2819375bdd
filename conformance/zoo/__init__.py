"""The zoo of tiny random-weight models the suite checks, built offline from configs."""

from . import entries, entries_realsize, entries_sweep, entries_vlm  # noqa: F401  (fill ZOO and REALSIZE, in this order)
from .registry import CHECKS, FAMILIES, REALSIZE, TIERS, ZOO, ZooEntry, get, register, select

__all__ = ["ZOO", "REALSIZE", "TIERS", "ZooEntry", "FAMILIES", "CHECKS", "get", "register", "select"]
