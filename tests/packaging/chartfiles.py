"""The files charts/muster carries as copies of manifests/, their one source.

A chart installs only what is in its own directory, so the CRDs (``crds/``) and the monitoring
files (``files/``) are copied in rather than linked: a symbolic link out of the chart is lost
when the chart directory is copied on its own or checked out where links are not kept. Edit
them in manifests/, then ``make chart-files`` copies them again;
``test_helm_chart_matches_manifests.py`` fails while a copy differs.
"""

from __future__ import annotations

import sys

from tests.packaging.helmchart import CHART, MANIFESTS, REPO

COPIES = {
    CHART / "crds" / "crd-workloaddescriptor.yaml": MANIFESTS / "crd-workloaddescriptor.yaml",
    CHART / "crds" / "crd-gang.yaml": MANIFESTS / "crd-gang.yaml",
    CHART / "files" / "prometheusrule.yaml": MANIFESTS / "monitoring" / "prometheusrule.yaml",
    CHART / "files" / "muster-dashboard.json": MANIFESTS / "monitoring" / "muster-dashboard.json",
}
"""Each copy in the chart, and the manifests/ file it is made from."""


def main() -> int:
    """Copy every file whose copy differs; print what was copied."""
    for copy, original in COPIES.items():
        content = original.read_bytes()
        if not copy.is_file() or copy.read_bytes() != content:
            copy.write_bytes(content)
            print(f"{original.relative_to(REPO)} -> {copy.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
