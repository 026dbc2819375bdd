"""Reading a ``.pt2`` file: work ``torch.export.load`` repeats for every node, done once.

Deserialising a program turns its JSON into torch's schema dataclasses, then parses every symbolic size
expression of every node with sympy. For the small programs hfexport writes, repeated work was most of a load
(measured: ``python benchmarks/program_load.py``):

* JSON to schema dataclasses: torch's converter works out, for every JSON object (hundreds of thousands per
  program), what its declared type is: it resolves the class, asks ``typing.get_type_hints`` for its fields and
  inspects the type's origin and arguments. ``SchemaConverter`` does that once per type and keeps the plan
  (which fields, converted how); it builds the same objects in the same way: through the dataclass's own
  constructor and a union's own ``create``. Anything outside the plans (a malformed document) goes to torch's
  own converter, which raises its own error.
* ``sympy.sympify`` of a size expression such as ``s0*s1``, parsed again for every tensor that has that size.
  Its result depends only on the text and on what the local names it mentions stand for, so within one load it
  is parsed once per (text, those names' values). Everything the deserialiser does with the parsed expression
  (registering symbols, their ranges and hints in the shape environment) still runs on every call.

The swaps replace names inside torch's serialiser modules only while a load runs (``PROGRAM_LOAD`` patches,
installed by ``hfexport.runtime.program_store``). The program read is the same: same graph, same node values,
same range constraints (``tests/test_program_load.py`` compares both reads, and the converted documents, over
zoo artifacts). Remove when torch's deserialiser does this itself.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from .registry import register_patch

PROGRAM_LOAD = "program-load"

_NAME = re.compile(r"[A-Za-z_]\w*")
Plan = Callable[[Any], Any]


class SchemaConverter:
    """``converter(cls, data)``: torch's JSON-to-schema conversion, its per-type decisions made once per type.

    ``fallback`` is torch's own converter: a document that does not fit a plan (the wrong JSON kind for a
    union, an unresolvable class) is handed to it so the error is torch's."""

    def __init__(self, fallback: Callable[[Any, Any], Any]) -> None:
        from torch._export.serde import schema
        from torch._export.serde.union import _Union

        self._fallback = fallback
        self._schema = schema
        self._union = _Union
        self._plans: dict[Any, Plan] = {}

    def __call__(self, cls: Any, data: Any) -> Any:
        return self.plan(cls)(data)

    def plan(self, cls: Any) -> Plan:
        try:
            return self._plans[cls]
        except KeyError:
            plan = self._plans[cls] = self._build(cls)
            return plan
        except TypeError:  # an unhashable type object: no plan kept
            return lambda data: self._fallback(cls, data)

    def _resolve(self, cls: Any) -> Any:
        if isinstance(cls, typing.ForwardRef):
            cls = cls.__forward_arg__
        if isinstance(cls, str):
            return getattr(self._schema, cls, cls)
        return cls

    def _hints(self, cls: type) -> dict[str, Any]:
        return typing.get_type_hints(cls, globalns=vars(self._schema))

    def _build(self, cls: Any) -> Plan:
        resolved = self._resolve(cls)
        if isinstance(resolved, str):  # torch raises for a class it cannot resolve
            return lambda data: self._fallback(cls, data)
        origin, args = typing.get_origin(resolved), typing.get_args(resolved)
        if origin is typing.Annotated:
            inner = resolved.__origin__
            return lambda data: self.plan(inner)(data)
        if origin in (typing.Union, types.UnionType) and type(None) in args:
            if len(args) != 2:
                return lambda data: self._fallback(cls, data)
            return self._optional(args[0])
        if isinstance(resolved, type) and issubclass(resolved, self._union):
            return self._tagged_union(cls, resolved)
        if dataclasses.is_dataclass(resolved):
            return self._dataclass(resolved)
        return self._container_or_value(cls, resolved, args)

    def _optional(self, inner: Any) -> Plan:
        def convert(data: Any) -> Any:
            return None if data is None else self.plan(inner)(data)

        return convert

    def _tagged_union(self, cls: Any, union: Any) -> Plan:
        hints = self._hints(union)

        def convert(data: Any) -> Any:
            if not isinstance(data, dict) or len(data) != 1:
                return self._fallback(cls, data)
            ((tag, value),) = data.items()
            if not isinstance(tag, str) or tag not in hints:
                return self._fallback(cls, data)
            return union.create(**{tag: self.plan(hints[tag])(value)})

        return convert

    def _dataclass(self, schema_cls: Any) -> Plan:
        hints = self._hints(schema_cls)
        fields = [(f.name, hints[f.name]) for f in dataclasses.fields(schema_cls)]

        def convert(data: Any) -> Any:
            return schema_cls(**{name: self.plan(hint)(data[name]) for name, hint in fields if name in data})

        return convert

    def _container_or_value(self, cls: Any, resolved: Any, args: tuple[Any, ...]) -> Plan:
        def convert(data: Any) -> Any:
            if isinstance(data, list):
                if not data:
                    return data
                if not args:
                    return self._fallback(cls, data)
                item = self.plan(args[0])
                return [item(value) for value in data]
            if isinstance(data, dict):
                if len(args) < 2:
                    return self._fallback(cls, data)
                item = self.plan(args[1])
                return {key: item(value) for key, value in data.items()}
            if resolved is float:
                return float(data)
            return data

        return convert


class _MemoisedSympy(types.ModuleType):
    """``sympy``, whose ``sympify`` of a string remembers its result for the same text and the same values of the
    local names the text mentions (one instance per load: the memo lives as long as the load)."""

    def __init__(self, original: types.ModuleType) -> None:
        super().__init__(original.__name__)
        self._original = original
        self._parsed: dict[Any, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def sympify(self, a: Any, locals: Any = None, *args: Any, **kwargs: Any) -> Any:  # noqa: A002 (sympy's name)
        if not isinstance(a, str) or args or kwargs or not (locals is None or isinstance(locals, dict)):
            return self._original.sympify(a, locals, *args, **kwargs)
        names = sorted(set(_NAME.findall(a)))
        key = (a, tuple((name, locals.get(name)) for name in names) if locals else None)
        try:
            parsed = self._parsed.get(key)
        except TypeError:  # a local name stands for something unhashable: no memo for it
            return self._original.sympify(a, locals=locals)
        if parsed is None:
            parsed = self._parsed[key] = self._original.sympify(a, locals=locals)
        return parsed


@register_patch(
    PROGRAM_LOAD,
    "torch._export.serde.serialize._dict_to_dataclass",
    "torch.export.pt2_archive._package._dict_to_dataclass",
    speedup=True,
)
def _plan_schema_conversion(original: Any) -> Any:
    """torch's deserialiser re-derives each schema type's fields and type hints for every JSON object it converts."""
    return SchemaConverter(original)


@register_patch(PROGRAM_LOAD, "torch._export.serde.serialize.sympy", speedup=True)
def _memoise_size_expressions(original: Any) -> Any:
    """torch's deserialiser parses the same size expression with sympy again for every tensor of that size."""
    return _MemoisedSympy(original)
