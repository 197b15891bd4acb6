"""Object names and label values made from free text, as the API server validates them.

Kubernetes checks two shapes of name (apimachinery's ``validation``): a DNS-1123 *label*, at
most 63 characters (label values, and the names that end up in one: a Job's, a Service's), and
a DNS-1123 *subdomain*, at most 253 (most object names, a Pod's among them). Both here are made
of lower-case letters, digits and ``-``, and start and end with a letter or digit.
"""

from __future__ import annotations

import re

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
_NOT_ALLOWED = re.compile(r"[^a-z0-9-]+")


def dns_label(*parts: object) -> str:
    """``parts`` joined by ``-`` as a DNS-1123 label (``Train``, ``0`` -> ``train-0``), cut to
    at most 63 characters."""
    return _name(parts, LABEL_MAX)


def dns_subdomain(*parts: object) -> str:
    """``parts`` joined by ``-`` as a DNS-1123 subdomain, cut to at most 253 characters."""
    return _name(parts, SUBDOMAIN_MAX)


def _name(parts: tuple[object, ...], most: int) -> str:
    text = _NOT_ALLOWED.sub("-", "-".join(str(p) for p in parts).lower()).strip("-")
    return text[:most].rstrip("-") or "x"
