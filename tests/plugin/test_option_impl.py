"""--hfexport-impl: hfexport (default), transformers (the peer), a dotted module; unknown -> usage error."""

import json

import pytest

from conftest import rows_of

TINY = """
    from fakeimpl.models import tiny

    def test_tiny(export_and_compare, hfexport_implementation):
        model, inputs = tiny()
        result = export_and_compare(model, inputs)
        assert result.implementation == hfexport_implementation.name
"""


def test_dotted_module_is_the_implementation_under_test(pytester, fake_impl):
    pytester.makepyfile(TINY)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx",
                                          "--hfexport-report=r.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["hfexport: impl=fakeimpl backends=dynamo,onnx device=cpu"])
    rows = rows_of(pytester.path / "r.json")
    assert {r["implementation"] for r in rows} == {"fakeimpl"}


def test_ini_twin(pytester, fake_impl):
    pytester.makeini("[pytest]\nhfexport_impl = fakeimpl\nhfexport_backend = dynamo\n")
    pytester.makepyfile(TINY)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["hfexport: impl=fakeimpl backends=dynamo*"])


def test_unknown_module_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_inprocess("--hfexport-impl=no_such_impl_module")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hfexport-impl=no_such_impl_module: no such module*"])


def test_backend_the_implementation_declares_it_lacks_is_unsupported(pytester, fake_impl, monkeypatch):
    monkeypatch.setenv("FAKEIMPL", "onnx=lacks")
    pytester.makepyfile(TINY)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx",
                                          "--hfexport-report=r.json", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*unsupported: fakeimpl declares it lacks export/onnx: fakeimpl cannot onnx*"])
    status = {r["backend"]: r["status"] for r in rows_of(pytester.path / "r.json")}
    assert status == {"dynamo": "pass", "onnx": "unsupported"}


def test_an_exception_is_a_failure_never_unsupported(pytester, fake_impl, monkeypatch):
    """NotImplementedError (or any text about unknown formats) from an implementation that declared nothing."""
    monkeypatch.setenv("FAKEIMPL", "onnx=notimpl")
    pytester.makepyfile(TINY)
    result = pytester.runpytest_inprocess("--hfexport-impl=fakeimpl", "--hfexport-backend=dynamo,onnx",
                                          "--hfexport-report=r.json")
    result.assert_outcomes(passed=1, failed=1)
    status = {r["backend"]: r["status"] for r in rows_of(pytester.path / "r.json")}
    assert status == {"dynamo": "pass", "onnx": "fail"}


def test_transformers_peer_unknown_option_is_an_error(pytester):
    """The peer's OnnxConfig has no external_data: asking for it fails with the peer's own error."""
    pytester.makepyfile("""
        def test_cfg(hfexport_config):
            hfexport_config(external_data=False)
    """)
    result = pytester.runpytest_inprocess("--hfexport-impl=transformers", "--hfexport-backend=onnx")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*unexpected keyword argument 'external_data'*"])


def test_transformers_peer_exports_and_runs_from_disk(pytester):
    pytester.makepyfile("""
        import torch
        import transformers as tf

        def test_bert(export_and_compare, hfexport_exporter):
            assert type(hfexport_exporter).__module__.startswith("transformers.exporters")
            torch.manual_seed(0)
            model = tf.BertModel(tf.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                               intermediate_size=32, vocab_size=64, max_position_embeddings=32)).eval()
            inputs = {"input_ids": torch.randint(0, 64, (1, 5)), "attention_mask": torch.ones(1, 5, dtype=torch.long)}
            result = export_and_compare(model, inputs)
            assert isinstance(result.program, torch.export.ExportedProgram)  # unwrapped from ExportedModel
            assert result.artifact.exists() and result.max_abs <= 1e-5
    """)
    result = pytester.runpytest_inprocess("--hfexport-impl=transformers", "--hfexport-backend=dynamo")
    result.assert_outcomes(passed=1)
