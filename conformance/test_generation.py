"""export_for_generation, judged twice on every backend:

1. every exported component, saved and loaded back, matches its eager submodule on the kwargs
   that ``decompose_for_generation`` captured from a real generate() run (batch-1 sample: the
   dynamic component must also serve that);
2. the model's own ``generate()``, with each component's forward served by its artifact, gives
   the same 16 greedy tokens as eager ``generate()`` (hfexport.runtime.components).
"""

import copy

import pytest

from conformance.checks import assert_matches, eager_named
from conformance.conftest import entry_params
from hfexport.dynamo import tensor_inputs
from hfexport.runtime.components import ExportedGenerate, eager_greedy_tokens

NEW_TOKENS = 16


@pytest.mark.parametrize("entry", entry_params("generation"))
def test_components_match_eager_submodules(entry, generation_exported, hfexport_backend):
    result = generation_exported(entry)
    assert sorted(result.programs) == sorted(result.components), "export_for_generation and " \
        "decompose_for_generation disagree on the components"
    for name, (module, kwargs) in result.components.items():
        graph_inputs = tensor_inputs(kwargs)  # flags were baked in
        got = result.runners[name](copy.deepcopy(graph_inputs))
        assert_matches(eager_named(module, kwargs), got, hfexport_backend, name)


@pytest.mark.parametrize("entry", entry_params("generation", case="generation_tokens"))
def test_exported_components_generate_eager_tokens(entry, generation_exported):
    result = generation_exported(entry)
    foreign = [name for name, (module, _) in result.components.items()
               if not any(module is m for m in result.model.modules())]
    if foreign:
        from pytest_hfexport import Unsupported

        raise Unsupported(f"components {foreign} are not submodules that generate() calls (wrappers?), so their "
                          "artifacts cannot be served inside the model's own generate()")
    got = ExportedGenerate(result.model, result.components, result.runners).generate(result.inputs, NEW_TOKENS)
    expected = eager_greedy_tokens(result.model, result.inputs, NEW_TOKENS)
    assert got.tolist() == expected.tolist(), f"exported components: {got.tolist()}\neager generate: {expected.tolist()}"
