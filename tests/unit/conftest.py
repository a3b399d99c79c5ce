"""Unit-test settings: hypothesis without per-example deadlines (CI machines are shared and noisy)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("akresil", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          print_blob=True)
settings.register_profile("ci", parent=settings.get_profile("akresil"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "akresil")
