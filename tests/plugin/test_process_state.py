"""The hygiene snapshot sees process-wide state an export could leave changed, and only that: each change
below is made and undone around a snapshot, and the diff must name it; a library's first import is not."""

import logging
import os
import random
import sys
import warnings

import pytest
import torch

from pytest_hfexport.hygiene import diff, snapshot

MODEL = torch.nn.Linear(2, 2)


def _leaves(change, undo) -> list[str]:
    before = snapshot(MODEL, {})
    change()
    try:
        return diff(before, MODEL, {})
    finally:
        undo()


@pytest.mark.parametrize(
    "what, change, undo, expected",
    [
        ("reseeded torch", lambda: torch.manual_seed(1), lambda: None, "torch RNG"),
        ("drew a Python random number", lambda: random.random(), lambda: None, "python RNG"),
        ("matmul precision", lambda: torch.set_float32_matmul_precision("medium"),
         lambda: torch.set_float32_matmul_precision("highest"), "float32 matmul precision"),
        ("mkldnn off", lambda: setattr(torch.backends.mkldnn, "enabled", False),
         lambda: setattr(torch.backends.mkldnn, "enabled", True), "mkldnn enabled"),
        ("an environment variable", lambda: os.environ.__setitem__("HFEXPORT_TEST_VAR", "1"),
         lambda: os.environ.pop("HFEXPORT_TEST_VAR"), "environment variable HFEXPORT_TEST_VAR"),
        ("the recursion limit", lambda: sys.setrecursionlimit(sys.getrecursionlimit() + 7),
         lambda: sys.setrecursionlimit(sys.getrecursionlimit() - 7), "recursion limit"),
        ("a logger's level", lambda: logging.getLogger("transformers").setLevel(logging.CRITICAL),
         lambda: logging.getLogger("transformers").setLevel(logging.NOTSET), "logger transformers"),
        ("logging.disable", lambda: logging.disable(logging.WARNING), lambda: logging.disable(logging.NOTSET),
         "logging disabled at"),
        ("fx stack traces off", lambda: setattr(torch.fx.config, "do_not_emit_stack_traces", True),
         lambda: setattr(torch.fx.config, "do_not_emit_stack_traces", False), "fx stack traces off"),
        ("size-oblivious tracing",
         lambda: setattr(torch.fx.experimental._config, "backed_size_oblivious", True),
         lambda: setattr(torch.fx.experimental._config, "backed_size_oblivious", False), "size-oblivious tracing"),
        ("frozen parameters", lambda: MODEL.weight.requires_grad_(False), lambda: MODEL.weight.requires_grad_(True),
         "requires_grad"),
    ],
)
def test_a_change_left_behind_is_named(what, change, undo, expected):
    logging.getLogger("transformers")  # exists before the snapshot, as it does once transformers is imported
    problems = _leaves(change, undo)
    assert any(expected in p for p in problems), f"{what}: {problems}"


def test_a_blanket_warnings_filter_is_named_and_a_scoped_one_is_not():
    with warnings.catch_warnings():
        before = snapshot(MODEL, {})
        warnings.filterwarnings("ignore", message="something one library says")  # an import's own filter
        assert diff(before, MODEL, {}) == []
        warnings.simplefilter("ignore")
        assert any("every message of every module" in p for p in diff(before, MODEL, {}))


def test_an_existing_blanket_filter_moved_to_the_front_is_named():
    """``simplefilter("ignore")`` when an ignore-everything filter already sits at the end moves it to the front
    (Python drops the duplicate): no filter is added or removed, yet every warning is now silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", append=True)
        warnings.filterwarnings("default", message="one library's message")
        before = snapshot(MODEL, {})
        warnings.simplefilter("ignore")
        assert any("reordered" in p for p in diff(before, MODEL, {})), diff(before, MODEL, {})


def test_nothing_changed_means_no_difference():
    inputs = {"x": torch.ones(2)}
    before = snapshot(MODEL, inputs)
    assert diff(before, MODEL, inputs) == []
