"""Named conditions: ``spec.namedConditions`` defines a condition once, ``{use: name}`` reads it.

A kind whose roles share a long test (Milvus: "is this Milvus 2.6 or later?", read from a
version field or an image tag, needed by seven components) would otherwise repeat it in every
role. Names are expanded in the raw descriptor before it compiles, so a compiled descriptor has
no references left and errors name the field path of the ``use``. A definition may not use
another: expansion is one level deep, hence bounded by the descriptor's own size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.core.workloads.expressions import DescriptorError, expect_mapping

__all__ = ["expand_named_conditions"]

USE = "use"


def expand_named_conditions(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """``spec`` with every ``{use: name}`` replaced by ``spec.namedConditions[name]``."""
    named = expect_mapping(spec.get("namedConditions", {}), "spec.namedConditions")
    for name, definition in named.items():
        if not isinstance(name, str) or not name:
            raise DescriptorError("spec.namedConditions",
                                  f"a condition name must be a non-empty string, got {name!r}")
        expect_mapping(definition, f"spec.namedConditions.{name}")
        if _uses(definition):
            raise DescriptorError(f"spec.namedConditions.{name}",
                                  "a named condition cannot use another")
    out = {k: v for k, v in spec.items() if k != "namedConditions"}
    for key in ("roles", "gangs", "status"):
        if key in out:
            out[key] = _expand(out[key], f"spec.{key}", named)
    return out


def _expand(node: object, at: str, named: Mapping[str, Any]) -> object:
    if isinstance(node, Mapping):
        if USE in node:
            if len(node) != 1:
                raise DescriptorError(at, "'use' stands alone: {use: <name>}")
            name = node[USE]
            if not isinstance(name, str) or name not in named:
                known = ", ".join(sorted(str(n) for n in named)) or "none"
                raise DescriptorError(f"{at}.use", f"no condition named {name!r} in "
                                      f"spec.namedConditions; defined: {known}")
            return named[name]
        return {k: _expand(v, f"{at}.{k}", named) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand(v, f"{at}[{i}]", named) for i, v in enumerate(node)]
    return node


def _uses(node: object) -> bool:
    if isinstance(node, Mapping):
        return USE in node or any(_uses(v) for v in node.values())
    if isinstance(node, list):
        return any(_uses(v) for v in node)
    return False
