"""Give each subgroup of a gang a domain of its own: which domain each subgroup takes.

A gang with :class:`~extender.core.model.values.SubgroupTopology` (a JobSet under
``exclusive-topology``: each child Job alone in one domain) is planned subgroup by subgroup:
every subgroup in one domain, no two in the same, none in a domain another gang is in. Domains
are disjoint, so whether a subgroup fits a domain does not depend on where the others go, and
the choice is a bipartite matching of subgroups to the domains each fits
(:func:`assign_domains`, augmenting paths): if any assignment exists it is found.

A subgroup whose pods are already placed keeps the domain they run in (JobSet pins a Job's
followers to its leader's domain). A LeaderWorkerSet's subgroups share its roles, so its pods
say which subgroup they are in (``subgroup-index``) and each placed pod is tied to its own
subgroup (:attr:`~extender.core.model.values.SubgroupTopology.label`). Whether a subgroup
fits a domain is asked of a callable the planner passes in (:data:`TryIn`), once per kind of
subgroup and domain, so the work is bounded by kinds x domains planning attempts, each within
its share of the search budget.

Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from extender.core.model.values import NodeName, SubgroupKind, SubgroupTopology

__all__ = ["Assignment", "Fit", "TryIn", "Unit", "assign_domains", "units_of"]


@dataclass(frozen=True, slots=True)
class Fit:
    """A subgroup's pods planned in one domain, or how far they got and why not."""

    slots: tuple[tuple[NodeName, str, int], ...] | None
    """``(node, role, pods)`` when the subgroup fits; ``None`` when it does not."""
    cost: tuple[int, ...] = ()
    """The domain's cost after the plan (lower is better; leaves whole domains free)."""
    placed: int = 0
    why: str = ""


TryIn = Callable[[tuple[tuple[str, int], ...], str], Fit]
"""Plan ``(role, pods)`` within one domain (given by its value), on the free capacity."""


@dataclass(frozen=True, slots=True)
class Unit:
    """One subgroup still to plan: its kind, the pods it still needs and, when some of its
    pods are placed already, the domain it keeps to."""

    name: str
    kind: SubgroupKind
    need: tuple[tuple[str, int], ...]
    domain: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    """Each unit's domain and slots, or why the gang's subgroups cannot each get one."""

    chosen: tuple[tuple[Unit, str, Fit], ...] = ()
    reason: str = ""
    placed: int = 0
    """Pods of the minimum the best attempt placed (for a failure)."""

    @property
    def ok(self) -> bool:
        return not self.reason


def units_of(sub: SubgroupTopology, placed: Mapping[str, Mapping[str, int]], *,
             by_value: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
             ) -> tuple[list[Unit], str | None]:
    """The subgroups to plan, given the gang's pods placed per domain (domain -> role ->
    pods): a domain holding a kind's pods is that subgroup's. Under ``sub.label`` the pods say
    which subgroup they are in instead: ``by_value`` (subgroup value -> domain -> role ->
    pods) ties each placed pod to its own subgroup. ``None`` or why the placed pods break the
    rule (one subgroup's pods in two domains, two subgroups in one)."""
    if sub.label is not None and by_value is not None:
        return _owned(sub, _labelled(sub, by_value))
    units: list[Unit] = []
    for kind in sub.kinds:
        roles = {r for r, _ in kind.pods}
        held = sorted(d for d, by_role in placed.items()
                      if any(n > 0 and r in roles for r, n in by_role.items()))
        if len(held) > kind.copies:
            return [], (f"pods of its {kind.copies} {kind.name} subgroup(s) run in "
                        f"{len(held)} {sub.key} domains ({', '.join(held)})")
        for i, domain in enumerate(held):
            here = placed[domain]
            need = tuple((r, max(0, n - here.get(r, 0))) for r, n in kind.pods)
            units.append(Unit(f"{kind.name}-{i}", kind, need, domain))
        units += [Unit(f"{kind.name}-{i}", kind, kind.pods)
                  for i in range(len(held), kind.copies)]
    return _owned(sub, (units, None))


def _labelled(sub: SubgroupTopology, by_value: Mapping[str, Mapping[str, Mapping[str, int]]],
              ) -> tuple[list[Unit], str | None]:
    """One unit per subgroup value, in the domain its placed pods run in, if any."""
    units: list[Unit] = []
    for kind in sub.kinds:
        for value in kind.values:
            name = f"subgroup-{value}"
            held = by_value.get(value, {})
            domains = sorted(d for d, by_role in held.items() if any(by_role.values()))
            if len(domains) > 1:
                return [], (f"pods of {name} run in {len(domains)} {sub.key} domains "
                            f"({', '.join(domains)})")
            if not domains:
                units.append(Unit(name, kind, kind.pods))
                continue
            here = held[domains[0]]
            need = tuple((r, max(0, n - here.get(r, 0))) for r, n in kind.pods)
            units.append(Unit(name, kind, need, domains[0]))
    return units, None


def _owned(sub: SubgroupTopology, found: tuple[list[Unit], str | None],
           ) -> tuple[list[Unit], str | None]:
    """``found``, or why two of its subgroups run in one domain."""
    units, broken = found
    if broken is not None:
        return [], broken
    owners: dict[str, str] = {}
    for unit in units:
        if unit.domain is not None:
            if unit.domain in owners:
                return [], (f"subgroups {owners[unit.domain]} and {unit.name} both run in "
                            f"{sub.key} {unit.domain}")
            owners[unit.domain] = unit.name
    return units, None


def assign_domains(units: Sequence[Unit], domains: Sequence[str], *, key: str,
                   try_in: TryIn, taken: Mapping[str, str], shown: int = 8) -> Assignment:
    """A domain per unit, each fitting it, no two alike; ``domains`` are the free ones
    (sorted), ``taken`` the ones other gangs are in, with why."""
    chosen: list[tuple[Unit, str, Fit]] = []
    used = {u.domain for u in units if u.domain is not None}
    for unit in units:
        if unit.domain is None:
            continue
        fit = try_in(unit.need, unit.domain)
        if fit.slots is None:
            return Assignment(reason=(f"subgroup {unit.name} runs in {key} {unit.domain}, "
                                      f"which fits {fit.placed} of the "
                                      f"{sum(n for _, n in unit.need)} pods it still needs: "
                                      f"{fit.why}"), placed=fit.placed)
        chosen.append((unit, unit.domain, fit))
    free = [u for u in units if u.domain is None]
    if not free:
        return Assignment(chosen=tuple(chosen))
    open_domains = [d for d in domains if d not in used and d not in taken]
    fits: dict[tuple[str, str], Fit] = {}
    for kind in sorted({u.kind.name: u.kind for u in free}.values(), key=lambda k: k.name):
        for domain in open_domains:
            fits[(kind.name, domain)] = try_in(kind.pods, domain)
    prefer = {kind: sorted((f.cost, d) for (k, d), f in fits.items()
                           if k == kind and f.slots is not None)
              for kind in {u.kind.name for u in free}}
    match: dict[str, int] = {}  # domain -> index into free

    def augment(i: int, seen: set[str]) -> bool:
        for _, domain in prefer[free[i].kind.name]:
            if domain in seen:
                continue
            seen.add(domain)
            if domain not in match or augment(match[domain], seen):
                match[domain] = i
                return True
        return False

    unmatched = [i for i in range(len(free)) if not augment(i, set())]
    if not unmatched:
        by_unit = {i: d for d, i in match.items()}
        chosen += [(free[i], by_unit[i], fits[(free[i].kind.name, by_unit[i])])
                   for i in range(len(free))]
        return Assignment(chosen=tuple(chosen))
    got = len(free) - len(unmatched)
    placed = sum(n for unit, _, _ in chosen for _, n in unit.need)
    placed += sum(n for d, i in match.items() for _, n in free[i].kind.pods)
    return Assignment(reason=_why(free, unmatched, open_domains, fits, key=key, taken=taken,
                                  got=got, shown=shown), placed=placed)


def _why(free: Sequence[Unit], unmatched: Sequence[int], domains: Sequence[str],
         fits: Mapping[tuple[str, str], Fit], *, key: str, taken: Mapping[str, str], got: int,
         shown: int) -> str:
    first = free[unmatched[0]]
    head = (f"its {len(free)} subgroup(s) each need a {key} domain of their own and only "
            f"{got} can get one ({len(unmatched)} left, e.g. {first.name})")
    tried = []
    for domain in domains[:shown]:
        fit = fits[(first.kind.name, domain)]
        total = sum(n for _, n in first.kind.pods)
        tried.append(f"{domain}: {'fits' if fit.slots is not None else 'does not fit'} a "
                     f"{first.kind.name} subgroup" + (
                         f" ({fit.placed} of {total} pods fit, {fit.why})"
                         if fit.slots is None else ""))
    if len(domains) > shown:
        tried.append(f"and {len(domains) - shown} more")
    text = head + ". Domains tried: " + ("; ".join(tried) if tried else "none free")
    if taken:
        items = sorted(taken.items())
        text += "; taken: " + "; ".join(f"{d} ({why})" for d, why in items[:shown])
        if len(items) > shown:
            text += f"; and {len(items) - shown} more"
    return text
