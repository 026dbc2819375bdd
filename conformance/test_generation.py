"""export_for_generation, judged against eager transformers on every backend:

* ``generation``: the split is the one the API promises, and every component, saved and loaded back,
  matches its eager submodule on the calls a real generate() makes at the sample prompt, at another
  prompt length and at a one-token prompt (not only on the calls it was traced on);
* ``generation_batch``: the same at batch 2 with left padding, and 32 greedy tokens per row;
* ``generation_tokens``: the model's own generate() with every component served by its artifact gives
  eager generate()'s 32 greedy tokens (and so does the implementation's own serving, where it has one).
"""

import pytest

from conformance.conftest import NEW_TOKENS, entry_params
from conformance.judge import assert_matches
from pytest_hfexport.reference import component_calls, eager_tokens, generation_config
from pytest_hfexport.serving import served_tokens


def check_components(result, kinds, backend):
    inputs_by_kind = result.entry.input_sets(result.model, kinds)
    for label, name, module, call in component_calls(result.model, result.programs, inputs_by_kind):
        assert_matches(module, call, result.runners[name], backend, label, artifact=result.artifact(name))


def assert_tokens(got, expected, what):
    assert got.tolist() == expected.tolist(), f"{what}: {got.tolist()}\neager generate(): {expected.tolist()}"


@pytest.mark.parametrize("entry", entry_params("generation"))
def test_components_match_eager_submodules(entry, exported, hfexport_backend):
    check_components(exported(entry, generation=True), ("sample", "other", "one"), hfexport_backend)


@pytest.mark.parametrize("entry", entry_params("generation", key="generation_batch"))
def test_components_serve_a_padded_batch(entry, exported, hfexport_backend):
    result = exported(entry, generation=True)
    check_components(result, ("batch",), hfexport_backend)
    inputs = entry.input_sets(result.model, ("batch",))["batch"]
    assert_tokens(
        served_tokens(result.model, result.runners, inputs, NEW_TOKENS),
        eager_tokens(result.model, inputs, NEW_TOKENS),
        "served components, padded batch",
    )


@pytest.mark.parametrize("entry", entry_params("generation", key="generation_tokens"))
def test_served_components_generate_eager_tokens(
    entry, exported, hfexport_implementation, hfexport_backend, monkeypatch
):
    adapter = hfexport_implementation
    result = exported(entry, generation=True)
    expected = eager_tokens(result.model, result.inputs, NEW_TOKENS)
    assert_tokens(
        served_tokens(result.model, result.runners, result.inputs, NEW_TOKENS),
        expected,
        "generate() with every component served by its artifact",
    )
    if adapter.declared_gap("serve", hfexport_backend) is None:
        # The implementation's own serving must really run the artifacts it loads: count their calls.
        calls: dict[str, int] = {}
        load = adapter.load

        class Counted:
            """The loaded runner, every attribute kept (an implementation may read its input names), calls counted."""

            def __init__(self, path, runner):
                self._path, self._runner = str(path), runner

            def __call__(self, *args, **kwargs):
                calls[self._path] = calls.get(self._path, 0) + 1
                return self._runner(*args, **kwargs)

            def __getattr__(self, name):
                return getattr(self._runner, name)

        def counting_load(path):
            return Counted(path, load(path))

        monkeypatch.setattr(adapter, "load", counting_load)
        got = adapter.serve(
            result.model, result.paths, result.inputs, NEW_TOKENS, generation_config(result.model, NEW_TOKENS)
        )
        monkeypatch.undo()
        assert_tokens(got, expected, f"{adapter.name}'s own serving of the components")
        idle = sorted(name for name, path in result.paths.items() if not calls.get(str(path)))
        assert not idle, f"{adapter.name}'s serving never ran the artifacts of {idle}"
        # Generation never stops early (generation_config): each of the NEW_TOKENS tokens needs the logits of one
        # artifact call (the prefill's, then one decode step each). Fewer calls: some tokens came from elsewhere.
        total = sum(calls.values())
        assert total >= NEW_TOKENS, (
            f"{adapter.name}'s serving ran its artifacts {total} times for {NEW_TOKENS} greedy tokens ({calls}): "
            "some tokens were not computed by the artifacts"
        )
