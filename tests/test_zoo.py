"""The zoo's eager references are fit to judge with: greedy generation is not degenerate, and eager itself
serves k query tokens in one call the way it serves them one by one where an entry opts into that check."""

import pytest

from conformance.conftest import NEW_TOKENS
from conformance.zoo import ZOO, select
from pytest_hfexport.reference import decode_block, eager_tokens

GENERATIVE = [e for e in ZOO.values() if "generation" in e.checks]


@pytest.mark.parametrize("entry", GENERATIVE, ids=lambda e: e.name)
def test_greedy_reference_is_not_degenerate(entry):
    """At least 4 distinct tokens among the 32 of every row (sample prompt and padded batch): a model that
    repeats one token cannot tell a wrong artifact from a right one."""
    model = entry.model()
    for kind, inputs in entry.input_sets(model, ("sample", "batch")).items():
        for row in eager_tokens(model, inputs, NEW_TOKENS).tolist():
            assert len(set(row)) >= 4, f"{entry.name} ({kind} prompt) generates {row}: change its seed"


@pytest.mark.parametrize("entry", select(check="multi_token_decode"), ids=lambda e: e.name)
def test_eager_serves_its_query_blocks_in_one_call(entry):
    model = entry.model()
    for inputs in entry.input_sets(model, ("sample", "batch")).values():
        for tokens in entry.query_tokens:
            decode_block(model, inputs, tokens)


@pytest.mark.parametrize("threads", [1, 2])
def test_rounding_is_not_taken_for_a_model_that_serves_blocks_differently(threads):
    """The eager precondition tolerates float rounding at any thread count (T5's large logits) and still refuses a
    model whose merged call really differs (Mamba, which the zoo judges on single tokens for that reason)."""
    import torch

    from conformance.zoo import get

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        t5 = get("t5")
        model = t5.model()
        for inputs in t5.input_sets(model, ("sample", "batch")).values():
            decode_block(model, inputs, 3)
        mamba = get("mamba")
        model = mamba.model()
        with pytest.raises(AssertionError, match="does not serve 3 query tokens"):
            decode_block(model, mamba.input_sets(model, ("sample",))["sample"], 3)
    finally:
        torch.set_num_threads(before)


# Parameter counts of the published checkpoints (their model cards' safetensors totals, tied weights once).
PUBLISHED_PARAMETERS = {
    "smollm2_135m": 134_515_008,
    "qwen3_0_6b": 596_049_920,
    "whisper_base": 72_593_920,
    "t5_small": 60_506_624,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_a_realsize_entry_has_the_published_dimensions(name):
    """Built on the meta device (no memory, no time): a mistyped dimension changes the count."""
    import torch

    from conformance.zoo import REALSIZE

    with torch.device("meta"):
        model = REALSIZE[name].build()
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED_PARAMETERS[name]
    assert REALSIZE[name].tier == "realsize" and name not in ZOO


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_every_quantized_cell_of_a_realsize_entry_has_its_measured_floors(name):
    """The realsize tier runs for hours: a cell without a floor would fail there for want of a number, not of a
    right artifact. Every scheme needs the SQNR floor against float32; a scheme that quantizes activations at run
    time also the agreement floor it is judged by at that depth. A cell that could not be measured is listed in
    ``UNMEASURED`` with the reason, and only such a cell may lack a floor."""
    from conformance.test_quantization import AGREEMENT_FLOOR, SQNR_FLOOR, UNMEASURED, judged_by_agreement
    from conformance.zoo import REALSIZE
    from pytest_hfexport.quantized_reference import SCHEMES

    entry = REALSIZE[name]
    floors = {s: [(s, name) in SQNR_FLOOR] for s in SCHEMES}
    for scheme in SCHEMES:
        if judged_by_agreement(scheme, entry):
            floors[scheme].append((scheme, name) in AGREEMENT_FLOOR)
    missing = sorted(s for s, found in floors.items() if not all(found))
    assert missing == sorted(s for s, n in UNMEASURED if n == name), (
        f"{name}: floors missing for {missing} (python -m conformance.quantization_errors --entries {name})"
    )
