"""``python -m conformance.tolerances``: the float32 tolerances are the worst measured error times ``FACTOR``, and
the ones in force (``pytest_hfexport.compare``) are what it prints for the pinned stack's default tier."""

import json

from conformance import tolerances
from pytest_hfexport.compare import FP32_ATOL, FP32_RTOL, compare, default_tolerance


def _row(backend, status, small, large, model="llama", check="export", compared=1):
    return {"model": model, "backend": backend, "check": check, "status": status, "compared": compared,
            "max_abs_small_scale": small, "max_rel_large_scale": large}


def test_the_worst_passing_row_sets_the_tolerance(tmp_path, capsys):
    rows = [
        _row("onnx", "pass", 2e-7, 3e-7),
        _row("onnx", "pass", 9e-8, 1.21e-6, model="t5"),
        _row("onnx", "fail", 5e-2, 5e-2, model="faulty"),  # a failure's error may be the fault it caught
        _row("onnx", "pass", 1.0, 1.0, model="tokens_only", compared=0),  # compared nothing with eager
        _row("onnx", "pass", "inf", "nan", model="odd"),
    ]
    measured = tolerances.measure(rows)["onnx"]
    assert measured.rows == 3
    assert (measured.absolute.value, measured.absolute.row) == (2e-7, "llama/export")
    assert (measured.relative.value, measured.relative.row) == (1.21e-6, "t5/export")
    assert (measured.atol, measured.rtol) == (2e-6, 1.3e-5)  # 10 x, up to two significant digits
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"rows": rows}))
    assert tolerances.main([str(path)]) == 0
    assert "| onnx | 3 | 2.00e-07 (llama/export) | 1.21e-06 (t5/export) | 2e-06 | 1.3e-05 |" in capsys.readouterr().out


def test_round_up_keeps_the_margin():
    assert tolerances.round_up(1.234e-6) == 1.3e-6 and tolerances.round_up(1.2e-6) == 1.2e-6
    assert tolerances.round_up(0.0) == 0.0


def test_every_measured_output_passes_with_the_factor_to_spare():
    """atol covers outputs within [-1, 1] by their abs error, rtol larger ones by their rel error."""
    for backend in FP32_ATOL:
        tol = default_tolerance(backend, "float32")
        assert (tol.atol, tol.rtol) == (FP32_ATOL[backend], FP32_RTOL[backend])
        import torch

        small = torch.tensor([0.5, -0.25])
        assert compare({"x": small}, {"x": small + tol.atol / tolerances.FACTOR}, backend).ok
        large = torch.tensor([40.0, -3.0])
        assert compare({"x": large}, {"x": large * (1 + tol.rtol / tolerances.FACTOR)}, backend).ok
        assert not compare({"x": small}, {"x": small * 1.02}, backend).ok  # 2%: the seeded layer fault's size
