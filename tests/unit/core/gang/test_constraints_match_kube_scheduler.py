"""Node constraints: selectors, required affinity operators, taints and cordons."""

from __future__ import annotations

from dataclasses import replace

import pytest

from extender.core.gang.constraints import (
    ineligibility,
    ineligibility_summary,
    requirement_matches,
    tolerates,
)
from extender.core.model.values import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    Toleration,
)
from tests.unit.core.builders import make_node, make_shape


@pytest.mark.parametrize(
    ("op", "values", "label", "expected"),
    [
        ("In", ("a", "b"), "a", True),
        ("In", ("a",), None, False),
        ("NotIn", ("a",), "b", True),
        ("NotIn", ("a",), None, True),
        ("Exists", (), "x", True),
        ("DoesNotExist", (), "x", False),
        ("DoesNotExist", (), None, True),
        ("Gt", ("4",), "8", True),
        ("Gt", ("8",), "8", False),
        ("Lt", ("8",), "4", True),
        ("Gt", ("4",), "many", False),
        ("Bogus", ("a",), "a", False),
    ],
)
def test_each_affinity_operator_matches_as_the_api_defines(
    op: str, values: tuple[str, ...], label: str | None, expected: bool
) -> None:
    assert requirement_matches(NodeSelectorRequirement("k", op, values), label) is expected


def test_affinity_terms_are_ored_and_expressions_anded() -> None:
    node = make_node("n1", labels={"zone": "a", "gpu": "h100"})
    both = NodeSelectorTerm(match_expressions=(
        NodeSelectorRequirement("zone", "In", ("a",)),
        NodeSelectorRequirement("gpu", "In", ("a100",)),
    ))
    by_name = NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In",
                                                                     ("n1",)),))
    assert ineligibility(replace(make_shape(), affinity=(both,)), node) is not None
    assert ineligibility(replace(make_shape(), affinity=(both, by_name)), node) is None


def test_no_schedule_taints_need_a_toleration_but_prefer_no_schedule_does_not() -> None:
    node = make_node(taints=[Taint("gpu", "true", "NoSchedule"),
                             Taint("soft", "", "PreferNoSchedule")])
    assert "taint gpu=true:NoSchedule" in (ineligibility(make_shape(), node) or "")
    tolerant = make_shape(tolerations=[Toleration(key="gpu", operator="Equal", value="true")])
    assert ineligibility(tolerant, node) is None


def test_an_empty_key_exists_toleration_tolerates_everything() -> None:
    assert tolerates(Toleration(operator="Exists"), Taint("anything", "x", "NoExecute"))
    assert not tolerates(Toleration(key="a", operator="Exists", effect="NoSchedule"),
                         Taint("a", "", "NoExecute"))


def test_cordoned_nodes_are_excluded_unless_the_cordon_is_tolerated() -> None:
    node = make_node(unschedulable=True)
    assert ineligibility(make_shape(), node) == "node is cordoned (unschedulable)"
    tolerant = make_shape(tolerations=[Toleration(key="node.kubernetes.io/unschedulable",
                                                  operator="Exists")])
    assert ineligibility(tolerant, node) is None


def test_the_summary_counts_reasons_so_a_person_sees_the_biggest_first() -> None:
    nodes = [make_node(f"n{i}", labels={"pool": "gpu"}, taints=[Taint("gpu", "", "NoSchedule")])
             for i in range(3)]
    nodes.append(make_node("x", labels={"pool": "cpu"}))
    summary = ineligibility_summary(make_shape(selector={"pool": "gpu"}), nodes)
    assert summary == ("3 nodes: taint gpu:NoSchedule is not tolerated; "
                       "1 node: nodeSelector pool=gpu does not match")
