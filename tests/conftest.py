"""Shared pytest configuration: Hypothesis profiles.

``ci`` (the default) is the fast, derandomized profile every run uses. The ``long`` profile
(random, many more examples) runs on demand: ``pytest --hypothesis-profile=long`` (Hypothesis's
own option) or ``MUSTER_HYPOTHESIS_PROFILE=long pytest``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", max_examples=2000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("MUSTER_HYPOTHESIS_PROFILE", "ci"))

