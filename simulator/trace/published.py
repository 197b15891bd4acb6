"""The FGD paper's published means on the default openb trace, to check the replay against.

Mean GPU allocation ratio (%) over seeds 42..51 at each arrived-demand percent, from the
authors' cached results (``analysis_allo_discrete.csv``, tune 1.3), as quoted in
``shared/traces/fgd-paper/default-trace-results.md``.
"""

from __future__ import annotations

PUBLISHED_SEEDS: tuple[int, ...] = tuple(range(42, 52))
PUBLISHED_POINTS: tuple[int, ...] = (50, 70, 80, 90, 100, 110, 120, 130)

PUBLISHED_MEANS: dict[str, dict[int, float]] = {
    "random": dict(zip(PUBLISHED_POINTS, (49.97, 69.21, 78.66, 85.02, 86.30, 86.88, 87.28, 87.47),
                       strict=True)),
    "dotprod": dict(zip(PUBLISHED_POINTS, (50.01, 70.00, 80.02, 89.98, 90.62, 90.70, 90.77, 90.85),
                        strict=True)),
    "gpuclustering": dict(
        zip(PUBLISHED_POINTS, (50.01, 70.00, 80.02, 89.98, 91.65, 91.73, 91.80, 91.88), strict=True)
    ),
    "gpupacking": dict(
        zip(PUBLISHED_POINTS, (50.01, 70.00, 80.02, 89.98, 91.78, 91.86, 91.92, 92.00), strict=True)
    ),
    "bestfit": dict(zip(PUBLISHED_POINTS, (50.01, 70.00, 80.02, 89.99, 92.86, 92.94, 93.00, 93.08),
                        strict=True)),
    "fgd": dict(zip(PUBLISHED_POINTS, (50.01, 70.00, 80.02, 89.98, 95.23, 95.30, 95.35, 95.39),
                    strict=True)),
}

PAPER_SECONDS_PER_EXPERIMENT = 600.0
"""The authors report about 10 minutes per experiment on 2 vCPUs."""
