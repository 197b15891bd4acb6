"""The catalog: compiled descriptors indexed by API group, kind and served version.

Objects are matched exactly (``apiVersion`` + ``kind``); people's type names match leniently
(kind, plural, short name, ``kind.group``, any case), as kubectl does. When descriptors for the
same group/kind/version are added twice, the later one wins, so a cluster's descriptors can
override the built-in catalog, except that a native WorkloadDescriptor always wins over a
translated Workload Map (Karta) one, wherever either comes from: the native format says
everything Muster needs, a Karta only what its authors wrote for KAI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.workloads.descriptor import Descriptor


class UnknownKind(LookupError):
    """A type name or object kind no descriptor in the catalog describes."""


def split_api_version(api_version: str) -> tuple[str, str]:
    """``"jobset.x-k8s.io/v1alpha2"`` -> ``("jobset.x-k8s.io", "v1alpha2")``; ``"v1"`` -> core."""
    group, _, version = api_version.rpartition("/")
    return group, version


@dataclass(frozen=True)
class Catalog:
    """An immutable set of descriptors; build with :meth:`of`."""

    descriptors: tuple[Descriptor, ...] = ()
    _by_version: Mapping[tuple[str, str, str], Descriptor] = field(
        default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, descriptors: Iterable[Descriptor]) -> Catalog:
        index: dict[tuple[str, str, str], Descriptor] = {}
        for d in descriptors:
            for version in d.target.versions:
                key = (d.target.group, d.target.kind, version)
                held = index.get(key)
                if held is not None and held.format == "muster" and d.format != "muster":
                    continue
                index[key] = d
        kept: dict[str, Descriptor] = {}
        for d in index.values():
            kept[d.name] = d
        ordered = tuple(sorted(kept.values(), key=lambda d: (d.target.kind.lower(), d.name)))
        return cls(descriptors=ordered, _by_version=index)

    def merged(self, other: Iterable[Descriptor]) -> Catalog:
        """A catalog with ``other`` added; ``other`` wins for the same group/kind/version,
        unless only ``self`` has a native descriptor for it (native beats Karta)."""
        return Catalog.of((*self.descriptors, *other))

    def __len__(self) -> int:
        return len(self.descriptors)

    def for_api(self, api_version: str, kind: str) -> Descriptor | None:
        """The descriptor of objects of ``apiVersion``/``kind``, if any."""
        group, version = split_api_version(api_version)
        return self._by_version.get((group, kind, version))

    def for_object(self, obj: Mapping[str, Any]) -> Descriptor | None:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return None
        return self.for_api(api_version, kind)

    def serves_group_kind(self, group: str, kind: str) -> bool:
        return any(g == group and k == kind for g, k, _ in self._by_version)

    def known_kinds(self) -> list[str]:
        """Every described kind as ``Kind.group`` (``Pod`` for core), sorted."""
        return sorted({d.target.group_kind for d in self.descriptors}, key=str.lower)

    def known_kinds_text(self) -> str:
        """``known kinds: A, B`` for messages, or that no descriptor is loaded at all (the
        packaged catalog left out with ``--no-builtin`` and nothing given instead)."""
        kinds = self.known_kinds()
        if not kinds:
            return "no descriptors are loaded, so no kind is known"
        return f"known kinds: {', '.join(kinds)}"

    def require(self, obj: Mapping[str, Any]) -> Descriptor:
        """The descriptor of ``obj``, or :class:`UnknownKind` naming the kinds known."""
        found = self.for_object(obj)
        if found is not None:
            return found
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if isinstance(api_version, str) and isinstance(kind, str):
            group, version = split_api_version(api_version)
            if self.serves_group_kind(group, kind):
                served = sorted(v for g, k, v in self._by_version if g == group and k == kind)
                raise UnknownKind(f"{kind} {api_version}: version {version} is not described; "
                                  f"described versions: {', '.join(served)}")
        raise UnknownKind(f"unknown kind {kind or '<none>'} ({api_version or 'no apiVersion'}); "
                          f"{self.known_kinds_text()}")

    def find_type(self, name: str) -> tuple[Descriptor, ...]:
        """Descriptors a person means by ``name``: kind, plural, short name or ``kind.group``.

        Raises :class:`UnknownKind` (listing the known kinds) when none matches.
        """
        wanted = name.strip().lower()
        type_part, _, group_part = wanted.partition(".")
        out = []
        for d in self.descriptors:
            t = d.target
            names = {t.kind.lower(), t.plural.lower(), *(s.lower() for s in t.short_names)}
            if wanted in names or (group_part and type_part in names
                                   and group_part == t.group.lower()):
                out.append(d)
        if not out:
            raise UnknownKind(f"unknown kind {name}; {self.known_kinds_text()}")
        return tuple(out)
