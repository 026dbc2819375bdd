"""The baseline gate as a user who just bumped a version reads it: causes grouped, rows with stage and message,
improvements, new and gone rows, documented exit codes."""

import json

from pytest_hfexport import gate

RENAMED = "GuideError: the program's example inputs hold no 'past_key_values' cache to rebuild (it takes ['a', 'b'])"


def row(model, backend, check, status, message="", stage=None):
    return {"model": model, "backend": backend, "check": check, "status": status, "message": message,
            "stage": stage, "nodeid": f"conformance/test_x.py::test[{backend}-{model}]"}


def report(path, rows):
    path.write_text(json.dumps({"rows": rows}))
    return str(path)


BASELINE = [
    row("llama", "dynamo", "static_cache", "pass"),
    row("llama", "onnx", "static_cache", "pass"),
    row("qwen2", "executorch", "static_cache", "pass"),
    row("llama", "dynamo", "generation", "pass"),
    row("bert", "dynamo", "export", "fail", "old failure"),
    row("gone", "dynamo", "export", "pass"),
]
NOW = [
    row("llama", "dynamo", "static_cache", "fail", RENAMED, "test"),
    row("llama", "onnx", "static_cache", "fail", RENAMED.replace("'a', 'b'", "'c'"), "test"),
    row("qwen2", "executorch", "static_cache", "fail", "ExecuTorch failed: execute() failed with error 0x12", "run"),
    row("llama", "dynamo", "generation", "fail",
        "Guard failed: input_ids.size()[1] + cache[0].size()[2] <= 0\nmore lines", "test"),
    row("bert", "dynamo", "export", "pass"),
    row("newcomer", "onnx", "export", "pass"),
]


def test_normalise_folds_numbers_backends_and_quoted_lists():
    assert gate.normalise("onnx export does not match eager (decode of 3 query token(s)):\n  detail") == (
        "<backend> export does not match eager (decode of N query token(s)):"
    )
    assert gate.normalise("Guard failed: cache[3].size()[2] + -1 * x <= 0") == gate.normalise(
        "Guard failed: cache[0].size()[2] + -1 * x <= 0"
    )
    assert gate.normalise(RENAMED) == gate.normalise(RENAMED.replace("'a', 'b'", "'c'"))
    assert gate.normalise("error 0x12") == "error N"
    assert gate.normalise("'logits' shape (1, 128) float32: max abs error 6.064e-02") == (
        "'logits' shape (N, N) float32: max abs error N"
    )


def test_regressions_grouped_by_cause_most_rows_first_with_an_example(tmp_path):
    result = gate.compare(gate.load_rows(report(tmp_path / "now.json", NOW)),
                          gate.load_rows(report(tmp_path / "base.json", BASELINE)))
    causes = result.causes()
    assert [len(c.changes) for c in causes] == [2, 1, 1, 1]
    assert causes[0].text.startswith("GuideError: the program's example inputs hold no 'past_key_values'")
    assert causes[0].backends == ["dynamo", "onnx"] and causes[0].stages == ["test"]
    assert [gate.label(c.key) for c in result.improvements] == ["bert/dynamo/export"]
    assert [gate.label(c.key) for c in result.new] == ["newcomer/onnx/export"]
    assert [gate.label(c.key) for c in result.gone] == ["gone/dynamo/export"]
    lines = result.summary_lines()
    assert lines[0] == (
        "5 regression(s) from 4 cause(s); 1 improvement(s); 1 new row(s); 1 gone; 0 drifting (error grew more than "
        "10x, still passing)"
    )
    assert "e.g. llama/dynamo/static_cache" in lines[3]
    rows = [line for _, line in result.row_lines()]
    assert ("REGRESSION qwen2/executorch/static_cache: pass -> fail [run] "
            "conformance/test_x.py::test[executorch-qwen2]: ExecuTorch failed: execute() failed with error 0x12") in rows
    assert "REGRESSION gone/dynamo/export: pass -> not run: the row was not run" in " ".join(rows)


def test_command_line_exit_codes(tmp_path, capsys):
    base = report(tmp_path / "base.json", BASELINE)
    assert gate.main([report(tmp_path / "now.json", NOW), base, "--json", str(tmp_path / "gate.json")]) == 1
    out = capsys.readouterr().out
    assert "5 regression(s), 1 improvement(s)" in out.splitlines()[-1]
    assert json.loads((tmp_path / "gate.json").read_text())["causes"][0]["rows"] == 2
    assert gate.main([base, base]) == 0
    assert gate.main([str(tmp_path / "missing.json"), base]) == 2


def test_a_passing_row_whose_error_grew_tenfold_is_reported_as_drift_not_a_failure(tmp_path, capsys):
    """Every compared row carries its error; the gate warns when it grows more than tenfold (still passing)."""
    before = [
        {**row("llama", "onnx", "export", "pass"), "max_abs": 2e-7},
        {**row("bert", "onnx", "export", "pass"), "max_abs": 3e-7},
        {**row("t5", "onnx", "export", "pass"), "max_abs": 0.0},
    ]
    now = [
        {**row("llama", "onnx", "export", "pass"), "max_abs": 5e-6, "tolerance": "atol=1e-05", "ratio": 0.5,
         "worst_output": "logits"},
        {**row("bert", "onnx", "export", "pass"), "max_abs": 2.9e-6},  # 9.7x: not drift
        {**row("t5", "onnx", "export", "pass"), "max_abs": 1e-8},  # both under float32's epsilon
    ]
    result = gate.compare(gate.load_rows(report(tmp_path / "now.json", now)),
                          gate.load_rows(report(tmp_path / "before.json", before)))
    assert [c.key for c in result.drift] == [("llama", "onnx", "export")]
    assert not result.failed
    line = [text for _, text in result.row_lines() if text.startswith("DRIFT")][0]
    assert "2.00e-07 -> 5.00e-06 (x25)" in line and "atol=1e-05" in line and "'logits'" in line
    assert gate.main([report(tmp_path / "now.json", now), report(tmp_path / "before.json", before), "--rows"]) == 0
    assert "1 drifting" in capsys.readouterr().out


def test_a_regression_line_names_the_first_diverging_module():
    """A mismatch the locator placed carries its module onto the REGRESSION line: the user sees where, not only
    which output."""
    now = {**row("llama", "onnx", "export", "fail", "output 'logits' ... max abs error 3.5e-04", "mismatch"),
           "first_divergence": "model.layers.1.mlp"}
    result = gate.compare({("llama", "onnx", "export"): now},
                          {("llama", "onnx", "export"): row("llama", "onnx", "export", "pass")})
    line = result.regressions[0].line("REGRESSION")
    assert line.endswith("max abs error 3.5e-04 (first diverging module: model.layers.1.mlp)"), line
