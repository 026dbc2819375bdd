"""The suite keeps only a few exports loaded per worker (a worker of the slow tier once grew past 13 GiB)."""

from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace

from conformance import conftest


def test_only_the_most_recent_exports_stay_loaded_and_a_reused_one_is_not_rebuilt():
    cache = {"entries": OrderedDict(), "built": 0}
    builds = []

    def get(key):
        return conftest._cached(cache, key, lambda: builds.append(key) or SimpleNamespace(error=None))

    for key in range(conftest.KEPT_EXPORTS + 3):
        get(key)
        get(key)  # every check of the same export after the first reuses it
    assert builds == list(range(conftest.KEPT_EXPORTS + 3))
    assert list(cache["entries"]) == list(range(3, conftest.KEPT_EXPORTS + 3))
    get(0)  # let go earlier, so built again
    assert builds[-1] == 0 and len(cache["entries"]) == conftest.KEPT_EXPORTS
