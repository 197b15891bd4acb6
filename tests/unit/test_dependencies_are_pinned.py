"""Every dependency is pinned to a tested range: a lower bound the installed (tested) version
meets, and an upper bound at the next major release, so a breaking release is never taken
untested. gunicorn is the one whose minor releases changed what it opens (a control socket)."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]
REQUIREMENTS = [Requirement(r) for r in (*PROJECT["dependencies"],
                                         *(r for extra in EXTRAS.values() for r in extra))]


def _bounds(req: Requirement) -> tuple[Version, Version]:
    lower = [Version(s.version) for s in req.specifier if s.operator == ">="]
    upper = [Version(s.version) for s in req.specifier if s.operator == "<"]
    assert len(lower) == 1 and len(upper) == 1, f"{req}: give one >= and one < bound"
    return lower[0], upper[0]


@pytest.mark.parametrize("req", REQUIREMENTS, ids=str)
def test_every_dependency_has_a_lower_and_a_next_major_upper_bound(req: Requirement) -> None:
    lower, upper = _bounds(req)
    if lower.major == 0:  # 0.x: a minor release may break
        assert (upper.major, upper.minor) == (0, lower.minor + 1), str(req)
    else:
        assert upper == Version(f"{lower.major + 1}"), str(req)


@pytest.mark.parametrize("req", REQUIREMENTS, ids=str)
def test_the_installed_version_is_inside_the_range(req: Requirement) -> None:
    try:
        installed = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        if req.name == "ray":  # an optional extra
            pytest.skip("ray is not installed here")
        raise
    lower, _ = _bounds(req)
    assert req.specifier.contains(installed, prereleases=True), f"{req} but {installed} installed"
    assert Version(installed).release[:2] >= lower.release[:2]


def test_gunicorn_is_pinned_to_the_release_whose_control_socket_runner_disables() -> None:
    [gunicorn] = [r for r in REQUIREMENTS if r.name == "gunicorn"]
    assert _bounds(gunicorn) == (Version("27.0"), Version("28"))
