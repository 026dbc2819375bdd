"""The zoo of tiny random-weight models the suite checks, built offline from configs."""

from . import entries  # noqa: F401  (fills ZOO)
from .registry import CHECKS, FAMILIES, ZOO, ZooEntry, get, register, select

__all__ = ["ZOO", "ZooEntry", "FAMILIES", "CHECKS", "get", "register", "select"]
