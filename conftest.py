"""Repo-level pytest set-up only: hypothesis profiles. No test logic here."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=5, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
