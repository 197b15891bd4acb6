"""Names made from workload, role and replica names pass the API server's checks."""

from __future__ import annotations

import re

import pytest

from extender.core.model.dnsnames import LABEL_MAX, SUBDOMAIN_MAX, dns_label, dns_subdomain

LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize("parts", [
    ("Train", "Worker", 0), ("ml/train", "a_b.c"), ("--x--",), ("", "!!"), ("a" * 62, "-b"),
    ("x" * 300, 7),
])
def test_labels_and_subdomains_are_lower_case_alphanumerics_and_dashes_within_their_limits(
        parts: tuple[object, ...]) -> None:
    label, subdomain = dns_label(*parts), dns_subdomain(*parts)
    assert LABEL.fullmatch(label) and len(label) <= LABEL_MAX
    assert LABEL.fullmatch(subdomain) and len(subdomain) <= SUBDOMAIN_MAX


def test_parts_are_joined_by_a_dash_and_lowered() -> None:
    assert dns_label("LLaMA", "Worker", 3) == "llama-worker-3"
    assert dns_subdomain("ml/train", "a_b") == "ml-train-a-b"


def test_a_label_is_cut_at_63_characters_and_a_subdomain_keeps_what_fits_in_253() -> None:
    long = "w" * 70
    assert dns_label(long, 1) == "w" * 63
    assert dns_subdomain(long, 1) == f"{long}-1"  # two pods of one long group stay distinct
    assert len(dns_subdomain("w" * 300)) == SUBDOMAIN_MAX


def test_a_name_of_nothing_usable_is_still_a_name() -> None:
    assert dns_label("", "--") == dns_subdomain("!") == "x"
