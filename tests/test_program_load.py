"""hfexport reads a ``.pt2`` file into the same program as ``torch.export.load``, with the load patches installed only
during the load; and the comparisons that say so fail on a converter or a memo that gets it wrong."""

import json
import typing

import pytest
import sympy
import torch
import torch._export.serde.serialize as serialize
import torch.export.pt2_archive._package as package
from torch._export.serde import schema

from hfexport import AutoExportConfig, AutoHfExporter, caches
from hfexport.patching import apply_patches
from hfexport.patching.program_load import PROGRAM_LOAD, SchemaConverter, _MemoisedSympy
from hfexport.runtime.program_store import forget_programs, load_program

from helpers import static_decode_export, tiny_llama

STOCK_CONVERTER = serialize._dict_to_dataclass


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Paths of saved Dynamo programs: a plain dynamic export, the export_for_generation components, a static-cache
    decode step."""
    folder = tmp_path_factory.mktemp("programs")
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    model, inputs = tiny_llama(2)
    programs = {"model": exporter.export(model, inputs, config),
                **exporter.export_for_generation(model, inputs, config),
                "static_decode": static_decode_export("dynamo")[0]}
    paths = []
    for name, program in programs.items():
        path = folder / f"{name}.pt2"
        exporter.save(program, str(path))
        paths.append(path)
    caches.register_cache_pytrees()
    return paths


def differences(a, b) -> list[str]:
    """What differs between two deserialised programs: graph code, a node's value (sizes, strides, symbols),
    the range constraints."""
    found = []
    if str(a.graph) != str(b.graph):
        found.append("graph")
    found += [f"value of {x.name}" for x, y in zip(a.graph.nodes, b.graph.nodes)
              if str(x.meta.get("val")) != str(y.meta.get("val"))]
    if str(a.range_constraints) != str(b.range_constraints):
        found.append("range constraints")
    return found


def documents(path) -> list[tuple[typing.Any, bytes]]:
    """Every (schema class, JSON bytes) torch's load converts for this file."""
    seen = []
    original = serialize._bytes_to_dataclass

    def record(cls, data):
        seen.append((cls, data))
        return original(cls, data)

    serialize._bytes_to_dataclass = record
    try:
        torch.export.load(str(path))
    finally:
        serialize._bytes_to_dataclass = original
    assert seen, "torch's load converted no document: the recording no longer sees its conversions"
    return seen


def converted_differently(converter, paths) -> list[str]:
    return [f"{path.name}: {cls}" for path in paths for cls, data in documents(path)
            if converter(cls, json.loads(data)) != STOCK_CONVERTER(cls, json.loads(data))]


def test_hfexport_reads_the_program_torch_reads(saved):
    forget_programs()
    for path in saved:
        assert differences(torch.export.load(str(path)), load_program(path)) == [], path.name


def test_the_load_patches_are_in_place_during_a_load_only(saved, monkeypatch):
    seen = []
    original = serialize.GraphModuleDeserializer.deserialize_graph

    def spy(self, *args, **kwargs):
        seen.append((serialize._dict_to_dataclass, package._dict_to_dataclass, serialize.sympy))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(serialize.GraphModuleDeserializer, "deserialize_graph", spy)
    forget_programs()
    load_program(saved[0])
    assert seen and all(isinstance(s, SchemaConverter) and isinstance(p, SchemaConverter)
                        and isinstance(m, _MemoisedSympy) for s, p, m in seen)
    assert serialize._dict_to_dataclass is STOCK_CONVERTER and package._dict_to_dataclass is STOCK_CONVERTER
    assert serialize.sympy is sympy


def test_the_converter_builds_the_documents_torch_builds(saved):
    assert converted_differently(SchemaConverter(STOCK_CONVERTER), saved) == []


class _ConverterThatKeepsUnionValuesRaw(SchemaConverter):
    """Fault: a tagged union's value is kept as its JSON instead of being converted to its declared type."""

    def _tagged_union(self, cls, union):
        return lambda data: union.create(**data)


class _ConverterThatKeepsListItemsRaw(SchemaConverter):
    """Fault: list and dict items are kept as their JSON."""

    def _container_or_value(self, cls, resolved, args):
        return lambda data: data


@pytest.mark.parametrize("fault", [_ConverterThatKeepsUnionValuesRaw, _ConverterThatKeepsListItemsRaw])
def test_the_document_comparison_catches_a_faulty_converter(saved, fault):
    assert converted_differently(fault(STOCK_CONVERTER), saved[:1])


def test_a_malformed_document_gets_torchs_own_error():
    converter = SchemaConverter(STOCK_CONVERTER)
    for bad in ({"as_int": 1, "as_ints": [1]}, [1]):
        with pytest.raises(AssertionError) as ours:
            converter(schema.Argument, bad)
        with pytest.raises(AssertionError) as torchs:
            STOCK_CONVERTER(schema.Argument, bad)
        assert str(ours.value) == str(torchs.value)


class _SympyMemoOnTextAlone(_MemoisedSympy):
    """Fault: the memo ignores what the names in the text stand for."""

    def sympify(self, a, locals=None, *args, **kwargs):  # noqa: A002
        if a not in self._parsed:
            self._parsed[a] = self._original.sympify(a, locals=locals)
        return self._parsed[a]


@pytest.mark.parametrize("memo, right", [(_MemoisedSympy, True), (_SympyMemoOnTextAlone, False)])
def test_a_parsed_size_is_reused_only_for_the_same_names_values(memo, right):
    parser = memo(sympy)
    positive, integer = sympy.Symbol("s0", positive=True), sympy.Symbol("s0", integer=True)
    first = parser.sympify("s0 + 1", locals={"s0": positive})
    assert parser.sympify("s0 + 1", locals={"s0": positive}) is first  # the memo is used
    again = parser.sympify("s0 + 1", locals={"s0": integer})
    assert (again.free_symbols == {integer}) is right


def test_a_failed_load_leaves_torchs_serialiser_as_it_was(tmp_path):
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(b"not a zip archive")
    with pytest.raises(Exception):
        load_program(broken)
    assert serialize._dict_to_dataclass is STOCK_CONVERTER and serialize.sympy is sympy
    with apply_patches(PROGRAM_LOAD) as installed:
        assert len(installed) == 3


def test_a_local_name_that_cannot_be_a_memo_key_is_parsed_as_sympy_parses_it():
    parser = _MemoisedSympy(sympy)
    unhashable = {"s0": sympy.Symbol("s0"), "table": [1, 2]}
    assert parser.sympify("s0 + 1", locals=unhashable) == sympy.sympify("s0 + 1", locals=unhashable)
    assert parser.sympify("table", locals=unhashable) == [1, 2]
