"""export_for_generation: every component, exported and run from disk, matches its eager submodule
on the kwargs captured from a real generate() run."""

import copy

import pytest

from conformance.checks import assert_matches, eager_named
from conformance.conftest import entry_params
from hfexport.dynamo import carries_tensors


@pytest.mark.parametrize("entry", entry_params("generation"))
def test_components_match_eager_submodules(entry, hfexport_implementation, hfexport_backend, tmp_path):
    model = entry.model()
    inputs = entry.sample_inputs(model)
    components = hfexport_implementation.decompose_for_generation(model, inputs)
    assert "decode" in components
    exporter = hfexport_implementation.exporter(hfexport_backend)
    config = hfexport_implementation.config(hfexport_backend, dynamic=True)
    for name, (module, kwargs) in components.items():
        program = hfexport_implementation.export(exporter, module, copy.deepcopy(kwargs), config)
        runner = hfexport_implementation.load(hfexport_implementation.save(exporter, program, tmp_path, name))
        graph_inputs = {k: v for k, v in kwargs.items() if carries_tensors(v)}  # flags were baked in
        assert_matches(eager_named(module, kwargs), runner(copy.deepcopy(graph_inputs)), hfexport_backend, name)
