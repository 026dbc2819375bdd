"""Upstream renames: one entry per name an upstream release changed, with the release that changed it.

Code that needs such a name asks this registry (``CACHE_ARGUMENT.current()``, ``CACHE_ARGUMENT.key_in(call)``)
instead of spelling one release's name, so one code base serves the whole tested window
(``hfexport/pins/window.toml``). An entry can go when the window's lowest release has the new name and the
old one is no longer accepted by the highest.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from .. import environment


@dataclass(frozen=True)
class Rename:
    """``old`` names became ``new`` in ``package`` ``since`` (a release); ``change`` says what upstream did."""

    what: str
    old: tuple[str, ...]
    new: str
    package: str
    since: str
    change: str

    @functools.cached_property
    def applies(self) -> bool:
        """Does the installed release use the new name?"""
        installed = environment.installed_version(self.package)
        return installed is not None and environment.version_tuple(installed) >= environment.version_tuple(self.since)

    def current(self) -> str:
        """The name the installed release uses (the first old name before ``since``)."""
        return self.new if self.applies else self.old[0]

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every name, the installed release's first: what to look for in a call or an output of either era."""
        return tuple(dict.fromkeys((self.current(), self.new, *self.old)))

    def key_in(self, names: Iterable[str]) -> str | None:
        """The spelling ``names`` (a call's keys, a signature's parameters) uses, or None."""
        present = set(names)
        return next((name for name in self.spellings if name in present), None)


RENAMES: list[Rename] = []


def register_rename(rename: Rename) -> Rename:
    RENAMES.append(rename)
    return rename


CACHE_ARGUMENT = register_rename(
    Rename(
        what="the cache argument of a model's forward, and the cache field of its output",
        old=("past_key_values", "cache_params"),
        new="cache",
        package="transformers",
        since="5.25.0",
        change="transformers 5.25 renamed forward's past_key_values (attention caches) and cache_params "
        "(state-space caches) to cache, in signatures, outputs and generate()'s model kwargs; the old keywords "
        "stay deprecated aliases (deprecate_kwarg) until 5.40/6.0",
    )
)
STATE_GETTERS = register_rename(
    Rename(
        what="how a state-space cache hands out a layer's conv and recurrent state (None before its first update)",
        old=("layers[i].conv_states[0] / layers[i].recurrent_states[0], behind has_previous_state(i)",),
        new="get_conv_state(i) / get_recurrent_state(i)",
        package="transformers",
        since="5.23.0",
        change="transformers 5.23 added Cache.get_conv_state and Cache.get_recurrent_state; 5.20 to 5.22 keep the "
        "states in the layer's conv_states/recurrent_states lists",
    )
)


# The names an attention (key/value) cache input takes across the window: before 5.25 ``past_key_values``,
# from 5.25 ``cache`` (a state-space model's ``cache_params`` is not a KV cache).
KV_CACHE_NAMES = ("past_key_values", CACHE_ARGUMENT.new)
