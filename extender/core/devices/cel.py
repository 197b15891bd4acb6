"""DRA device selectors: CEL expressions compiled once and evaluated against one device.

A DeviceClass's ``spec.selectors[].cel.expression`` and a ResourceClaim request's selectors are
CEL expressions over one variable, ``device``, as k8s.io/dynamic-resource-allocation's
``cel/compile.go`` defines it:

* ``device.driver`` (string) and ``device.allowMultipleAllocations`` (bool);
* ``device.attributes[domain][id]``: an attribute ``a/b`` lives in domain ``a`` under id ``b``,
  an unqualified one in the driver's own domain; values are string, int, bool or a semver;
* ``device.capacity[domain][id]``: Kubernetes quantities.

An unknown domain reads as an empty map, but a missing id in a map is a runtime error, which in
the scheduler aborts the pod's scheduling: :meth:`Selector.matches` raises :class:`SelectorError`
then, never answers "no match".

The CEL is Google's C++ implementation (``cel-expr-python``), with the extensions Kubernetes
enables for selectors (``cel.bind``, the strings extension, optionals) and Kubernetes' quantity
and semver libraries written here (:data:`SUPPORTED_KUBERNETES_FUNCTIONS`). It type-checks at
compile time, so a function it does not know (Kubernetes' ``url``, ``ip``, ``cidr``, list
``sum``/``min``/``max``, quantity ``mul``/``div``, ...) is refused by :func:`compile_selector`,
by name. Evaluation is bounded by the expression length (the API's 10,240 characters), the
library's nesting limit and its budget of comprehension iterations.

Where this differs from the API server (all for expressions the API server's own validation or
cost estimate would refuse, or for values no driver publishes):

* quantities are exact to the milli-unit (``extender.core.model.quantity``): sub-milli values
  round up, and amounts beyond an int64 of whole units are refused;
* the shared comparison methods (``compareTo``, ``isGreaterThan``, ``isLessThan``) are checked at
  run time, so ``'a'.compareTo('b')`` compiles here and fails when evaluated;
* expressions nested deeper than the library's limit (32) are refused; the API allows deeper;
* ``has(device.attributes.x)`` for an unknown, dot-free domain ``x`` is false here, true there.

Must NOT: do I/O, log, or read a clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from extender.core.devices.errors import DeviceError
from extender.core.model.quantity import MILLI, QuantityError, parse_quantity

#: The API's limit on a selector's length (``CELSelectorExpressionMaxLength``).
MAX_EXPRESSION_LENGTH = 10 * 1024
_SHOWN = 200
#: How many unknown domains one evaluation fills with an empty map before giving up.
_MAX_UNKNOWN_DOMAINS = 16
_INT64 = 2**63 - 1

#: The functions of Kubernetes' CEL libraries that selectors here may call (beside CEL's own
#: standard library, ``cel.bind``, the strings extension and optionals).
SUPPORTED_KUBERNETES_FUNCTIONS = frozenset({
    "quantity", "isQuantity", "sign", "isInteger", "asInteger", "asApproximateFloat", "add",
    "sub", "semver", "isSemver", "major", "minor", "patch", "compareTo", "isGreaterThan",
    "isLessThan",
})


class SelectorError(DeviceError):
    """A selector that cannot be compiled, or cannot be evaluated against one device."""

    def __init__(self, expression: str, message: str) -> None:
        self.expression = expression
        self.message = message
        super().__init__(f"CEL selector {_shown(expression)}: {message}")


def _shown(expression: str) -> str:
    if len(expression) <= _SHOWN:
        return repr(expression)
    return f"{expression[:_SHOWN]!r}... ({len(expression)} chars)"


# -- Kubernetes' Quantity and Semver types, as protobuf messages the C++ runtime can carry --------


def _message_types() -> tuple[descriptor_pool.DescriptorPool, type[Any], type[Any]]:
    proto = descriptor_pb2.FileDescriptorProto(
        name="muster/dra_cel.proto", package="kubernetes", syntax="proto3")
    string, int64 = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, \
        descriptor_pb2.FieldDescriptorProto.TYPE_INT64
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    # Milli-units as decimal text: beyond an int64, and equal exactly when the amounts are.
    quantity = proto.message_type.add(name="Quantity")
    quantity.field.add(name="milli", number=1, type=string, label=optional)
    # Without build metadata, which neither comparison nor equality looks at.
    semver = proto.message_type.add(name="Semver")
    for number, name in enumerate(("major", "minor", "patch"), start=1):
        semver.field.add(name=name, number=number, type=int64, label=optional)
    semver.field.add(name="pre", number=4, type=string, label=optional)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (pool,
            message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver")))


_POOL, _Quantity, _Semver = _message_types()


@lru_cache(maxsize=1024)
def _quantity_of(text: str) -> Any:
    if text != text.strip():
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    try:
        return _quantity(parse_quantity(text))
    except QuantityError as err:
        raise ValueError(str(err)) from err


def _quantity(milli: int) -> Any:
    return _Quantity(milli=str(milli))


def _milli(value: Any) -> int:
    if not isinstance(value, _Quantity):
        raise TypeError(f"no such overload: a quantity expected, not {_cel_type(value)}")
    return int(value.milli)


_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$")


@lru_cache(maxsize=1024)
def _semver_of(text: str, normalize: bool = False) -> Any:
    """Parse like blang/semver's ``Parse`` (``normalize``: Kubernetes' ``normalizeAndParse``)."""
    if normalize:
        text = _normalized(text)
    match = _SEMVER.match(text)
    pre = match.group(4) if match else None
    if match is None or any(p.isdigit() and len(p) > 1 and p[0] == "0"
                            for p in (pre or "").split(".")):
        raise ValueError(f"not a semantic version: {text!r}")
    major, minor, patch = (int(match.group(i)) for i in (1, 2, 3))
    if max(major, minor, patch) > _INT64:
        raise ValueError(f"semantic version {text!r} is too large")
    return _Semver(major=major, minor=minor, patch=patch, pre=pre or "")


def _normalized(text: str) -> str:
    parts = text.removeprefix("v").split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            parts[i] = trimmed if trimmed and trimmed[0].isdigit() else "0" + trimmed
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _is(parse: Callable[..., Any], *args: Any) -> bool:
    try:
        parse(*args)
    except ValueError:
        return False
    return True


def _semver_cmp(a: Any, b: Any) -> int:
    """blang/semver's ``Version.Compare``: pre-releases sort before their release."""
    left, right = (a.major, a.minor, a.patch), (b.major, b.minor, b.patch)
    if left != right:
        return 1 if left > right else -1
    if not a.pre or not b.pre:
        return (not a.pre) - (not b.pre)
    for x, y in zip(a.pre.split("."), b.pre.split("."), strict=False):
        if x == y:
            continue
        if x.isdigit() != y.isdigit():  # a numeric identifier sorts first
            return -1 if x.isdigit() else 1
        if x.isdigit():
            return 1 if int(x) > int(y) else -1
        return 1 if x > y else -1
    na: int = a.pre.count(".")
    nb: int = b.pre.count(".")
    return (na > nb) - (na < nb)


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, _Quantity) and isinstance(b, _Quantity):
        x, y = int(a.milli), int(b.milli)
        return (x > y) - (x < y)
    if isinstance(a, _Semver) and isinstance(b, _Semver):
        return _semver_cmp(a, b)
    raise TypeError(f"no such overload: {_cel_type(a)} compared with {_cel_type(b)}")


def _cel_type(value: Any) -> str:
    if isinstance(value, _Quantity):
        return "Quantity"
    if isinstance(value, _Semver):
        return "Semver"
    return type(value).__name__


def _as_integer(q: Any) -> int:
    milli = _milli(q)
    if milli % MILLI or abs(milli // MILLI) > _INT64:
        raise ValueError("cannot convert value to integer")
    return milli // MILLI


def _quantity_int(q: Any, n: int, sign: int) -> Any:
    return _quantity(_milli(q) + sign * n * MILLI)


def _sign(q: Any) -> int:
    milli = _milli(q)
    return (milli > 0) - (milli < 0)


def _functions() -> list[Any]:
    t = cel.Type
    quantity_t, semver_t = t("kubernetes.Quantity"), t("kubernetes.Semver")

    def fn(name: str, *overloads: Any) -> Any:
        return cel.FunctionDecl(name, list(overloads))

    def member(oid: str, result: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
        return cel.Overload(oid, result, params, is_member=True, impl=impl)

    def glob(oid: str, result: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
        return cel.Overload(oid, result, params, impl=impl)

    q, s, dyn = quantity_t, semver_t, t.DYN
    return [
        fn("quantity", glob("string_to_quantity", q, [t.STRING], _quantity_of)),
        fn("isQuantity", glob("is_quantity_string", t.BOOL, [t.STRING],
                              lambda x: _is(_quantity_of, x))),
        fn("sign", glob("quantity_sign", t.INT, [q], _sign),
           member("quantity_sign_member", t.INT, [q], _sign)),
        fn("isInteger", member("quantity_is_integer", t.BOOL, [q],
                               lambda x: _is(_as_integer, x))),
        fn("asInteger", member("quantity_get_int", t.INT, [q], _as_integer)),
        fn("asApproximateFloat", member("quantity_get_float", t.DOUBLE, [q],
                                        lambda x: float(_milli(x)) / MILLI)),
        fn("add", member("quantity_add", q, [q, q], lambda a, b: _quantity(_milli(a) + _milli(b))),
           member("quantity_add_int", q, [q, t.INT], lambda a, n: _quantity_int(a, n, 1))),
        fn("sub", member("quantity_sub", q, [q, q], lambda a, b: _quantity(_milli(a) - _milli(b))),
           member("quantity_sub_int", q, [q, t.INT], lambda a, n: _quantity_int(a, n, -1))),
        fn("semver", glob("string_to_semver", s, [t.STRING], _semver_of),
           glob("string_bool_to_semver", s, [t.STRING, t.BOOL], _semver_of)),
        fn("isSemver", glob("is_semver_string", t.BOOL, [t.STRING], lambda x: _is(_semver_of, x)),
           glob("is_semver_string_bool", t.BOOL, [t.STRING, t.BOOL],
                lambda x, n: _is(_semver_of, x, n))),
        fn("major", member("semver_major", t.INT, [s], lambda v: v.major)),
        fn("minor", member("semver_minor", t.INT, [s], lambda v: v.minor)),
        fn("patch", member("semver_patch", t.INT, [s], lambda v: v.patch)),
        # Shared by quantities and semvers: the C++ runtime keys overloads by kind, and both are
        # messages, so one overload each, on dyn, checks the operands' types when it runs.
        fn("compareTo", member("k8s_compare_to", t.INT, [dyn, dyn], _compare)),
        fn("isGreaterThan", member("k8s_is_greater_than", t.BOOL, [dyn, dyn],
                                   lambda a, b: _compare(a, b) == 1)),
        fn("isLessThan", member("k8s_is_less_than", t.BOOL, [dyn, dyn],
                                lambda a, b: _compare(a, b) == -1)),
    ]


@lru_cache(maxsize=1)
def _environment() -> Any:
    return cel.NewEnv(
        _POOL,
        variables={"device": cel.Type.DYN},
        extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings(),
                    ext_optional.ExtOptional(), cel.CelExtension("kubernetes", _functions())],
    )


# -- compiling ------------------------------------------------------------------------------------

_STATUS = re.compile(r"^(?:[A-Z_]+: )+|\s*\[[A-Z_]+\]$")
_UNDECLARED = re.compile(r"undeclared reference to '([^']*)'")


def _reason(err: BaseException) -> str:
    """The library's message without its status code and the source excerpts (which would repeat
    the whole expression): ``ERROR: at 1:17: Syntax error: ...``."""
    lines = [line for line in str(err).strip().splitlines() if not line.startswith(" |")]
    return "; ".join(_STATUS.sub("", line) for line in lines).replace("<input>:", "at ")


@lru_cache(maxsize=256)
def compile_selector(expression: str) -> Selector:
    """Compile a selector once (cached); raises :class:`SelectorError` when it cannot be."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise SelectorError(expression, f"{len(expression)} characters, more than the "
                                        f"{MAX_EXPRESSION_LENGTH} the API allows")
    try:
        program = _environment().compile(expression)
    except RuntimeError as err:
        message = _reason(err)
        unknown = sorted(set(_UNDECLARED.findall(message)))
        if unknown:
            message = (f"uses {', '.join(unknown)}, not a variable or function of CEL selectors "
                       f"that Muster evaluates (device, CEL's standard library, cel.bind, "
                       f"strings, optionals, quantity and semver); {message}")
        raise SelectorError(expression, message) from err
    result = program.return_type()
    if result not in (cel.Type.BOOL, cel.Type.DYN):
        raise SelectorError(expression, f"must evaluate to bool, not {result.name()}")
    return Selector(expression, program)


# -- evaluating -----------------------------------------------------------------------------------

_MISSING_KEY = re.compile(r'^NOT_FOUND: Key not found in map : "([^"\\]*)"$')


@dataclass(frozen=True)
class Selector:
    """A compiled selector; :meth:`matches` evaluates it against one device."""

    expression: str
    _program: Any = field(default=None, compare=False, repr=False)

    def matches(self, driver: str, device: Mapping[str, Any]) -> bool:
        """Whether ``device`` (one raw ``spec.devices[]`` entry of a ResourceSlice of ``driver``)
        is selected. Raises :class:`SelectorError` when the expression fails on it (a missing
        attribute, a wrong type, an attribute value it cannot read) or gives no bool.
        """
        program = self._program
        if program is None:  # Selector(expression) built by hand
            program = compile_selector(self.expression)._program
        attributes, capacity = self._maps(driver, device)
        filled: set[str] = set()
        variables = {"device": {
            "driver": driver,
            "allowMultipleAllocations": device.get("allowMultipleAllocations") is True,
            "attributes": attributes,
            "capacity": capacity,
        }}
        while True:
            try:
                value = program.eval(data=variables)
            except RuntimeError as err:  # e.g. the comprehension budget
                raise SelectorError(self.expression, _reason(err)) from err
            if value.type() != cel.Type.ERROR:
                break
            reason = str(value.value())
            # An unknown domain reads as an empty map (compile.go's mapWithDefault); a
            # missing id in a known domain is an error. The runtime cannot default a map
            # lookup, so a missing key that is no domain yet is added as an empty domain and
            # the expression evaluated again; the same key missing again is a missing id.
            missing = _MISSING_KEY.match(reason)
            domain = missing.group(1) if missing else None
            if (domain is None or domain in attributes or domain in capacity
                    or domain in filled or len(filled) >= _MAX_UNKNOWN_DOMAINS):
                raise SelectorError(self.expression,
                                    f"device {_name(device)}: {_reason_text(reason)}")
            filled.add(domain)
            attributes[domain] = {}
            capacity[domain] = {}
        result = value.value()
        if not isinstance(result, bool):
            raise SelectorError(self.expression, f"device {_name(device)}: evaluated to "
                                                 f"{value.type().name()}, not bool")
        return result

    def _maps(self, driver: str, device: Mapping[str, Any]
              ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        attributes: dict[str, dict[str, Any]] = {}
        for name, raw in _entries(device.get("attributes")):
            domain, ident = _qualified(name, driver)
            try:
                attributes.setdefault(domain, {})[ident] = _attribute(raw)
            except ValueError as err:
                raise SelectorError(self.expression, f"device {_name(device)}: attribute "
                                                     f"{name}: {err}") from err
        capacity: dict[str, dict[str, Any]] = {}
        for name, raw in _entries(device.get("capacity")):
            domain, ident = _qualified(name, driver)
            value = raw.get("value") if isinstance(raw, Mapping) else None
            try:
                if not isinstance(value, (str, int)) or isinstance(value, bool):
                    raise ValueError(f"no quantity in {raw!r}")
                quantity = _quantity_of(value) if isinstance(value, str) else \
                    _quantity(parse_quantity(value))
            except (ValueError, QuantityError) as err:
                raise SelectorError(self.expression, f"device {_name(device)}: capacity "
                                                     f"{name}: {err}") from err
            capacity.setdefault(domain, {})[ident] = quantity
        return attributes, capacity


def _reason_text(reason: str) -> str:
    return _STATUS.sub("", reason.strip())


def _name(device: Mapping[str, Any]) -> str:
    return repr(device.get("name", "?"))


def _entries(raw: object) -> list[tuple[str, Any]]:
    return [(str(k), v) for k, v in raw.items()] if isinstance(raw, Mapping) else []


def _qualified(name: str, driver: str) -> tuple[str, str]:
    """compile.go's ``parseQualifiedName``: ``domain/id``, or the driver's domain."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute(raw: object) -> Any:
    """One ``DeviceAttribute``'s value, in compile.go's order: int, bool, string, version."""
    if not isinstance(raw, Mapping):
        raise ValueError("unsupported attribute value")
    if "int" in raw:
        value = raw["int"]
        if isinstance(value, bool) or not isinstance(value, int) \
                or not -_INT64 - 1 <= value <= _INT64:
            raise ValueError(f"not an int64: {value!r}")
        return value
    if "bool" in raw:
        if not isinstance(raw["bool"], bool):
            raise ValueError(f"not a bool: {raw['bool']!r}")
        return raw["bool"]
    if "string" in raw:
        if not isinstance(raw["string"], str):
            raise ValueError(f"not a string: {raw['string']!r}")
        return raw["string"]
    if "version" in raw:
        if not isinstance(raw["version"], str):
            raise ValueError(f"not a version: {raw['version']!r}")
        return _semver_of(raw["version"])
    raise ValueError("unsupported attribute value")


__all__ = ["MAX_EXPRESSION_LENGTH", "SUPPORTED_KUBERNETES_FUNCTIONS", "Selector", "SelectorError",
           "compile_selector"]
