"""jq has no step limit and holds the GIL, so unbounded programs are refused when loaded."""

from __future__ import annotations

import time

import pytest

from extender.core.karta.compile import compile_karta
from extender.core.karta.jq import MAX_OUTPUTS, compile_jq, unbounded_construct
from extender.core.workloads.expressions import DescriptorError, WorkloadError
from extender.core.workloads.paths import PathError
from tests.unit.karta.builders import training_run, training_run_karta

REPLICAS = "spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath"


@pytest.mark.parametrize(("program", "word"), [
    ("[range(100000000)]|length", "range"),
    ("[limit(5; repeat(1))] | length", "repeat"),
    ("def f: f; f", "def"),
    ("reduce .spec.x[] as $i (0; . + $i)", "reduce"),
    ('"\\(range(9))"', "range"),
    ("[.spec | recurse(.)] | length", "recurse"),
    ("$ENV.HOME | length", "$ENV"),
    ("now", "now"),
])
def test_a_program_that_can_run_without_bound_is_refused_naming_the_field(
        program: str, word: str) -> None:
    raw = training_run_karta()
    raw["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"][
        "replicasPath"] = program
    started = time.monotonic()
    with pytest.raises(DescriptorError) as err:
        compile_karta(raw)
    assert time.monotonic() - started < 1.0
    assert err.value.path == REPLICAS
    assert f"uses '{word}'" in err.value.message


def test_repeating_a_string_literal_is_refused() -> None:
    assert unbounded_construct('"x" * 1000000000 | length') is not None
    assert unbounded_construct(".spec.replicas * .spec.parallelism") is None


@pytest.mark.parametrize("program", [
    ".spec.replicatedJobs[] | .replicas * .template.spec.parallelism",
    '.metadata.labels["range"]', ".spec.range // 1", "# range\n.spec.replicas",
    '.spec.components[] | .podTemplate.spec.containers[] | select(.name == "main")',
])
def test_ordinary_paths_are_accepted(program: str) -> None:
    assert unbounded_construct(program) is None
    compile_jq(program)


def test_outputs_are_capped_so_a_cartesian_blowup_stops_at_once() -> None:
    obj = {"spec": {"xs": list(range(300))}}  # 300^3 = 27 million values if left to run
    program = ".spec.xs[] + .spec.xs[] + .spec.xs[]"
    started = time.monotonic()
    with pytest.raises(WorkloadError, match=f"outputs more than {MAX_OUTPUTS} values"):
        compile_jq(program).outputs(obj)
    assert compile_jq(program, strict=False).outputs(obj) == []
    assert time.monotonic() - started < 2.0
    with pytest.raises(PathError):
        compile_jq("[range(3)]")


def test_a_refused_program_in_a_karta_file_is_a_clear_error_not_a_stall() -> None:
    run = training_run("r", workers=2, gpus=1)
    assert run["spec"]["workers"] == 2
    raw = training_run_karta()
    raw["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"][
        "replicasPath"] = "[range(100000000)]|length"
    with pytest.raises(DescriptorError, match="can loop or generate values without bound"):
        compile_karta(raw)
