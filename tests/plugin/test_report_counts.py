"""count_table: the suite's counts per check and backend, merged per model x backend x check."""

from pytest_hfexport.report import count_table


def test_counts_merge_rows_and_fold_statuses():
    rows = [
        {"model": "llama", "backend": "onnx", "check": "export", "status": "pass"},
        {"model": "llama", "backend": "onnx", "check": "export", "status": "fail"},  # worst status wins
        {"model": "t5", "backend": "onnx", "check": "export", "status": "xfail"},
        {"model": "t5", "backend": "dynamo", "check": "export", "status": "skip"},  # counted as unsupported
        {"model": "t5", "backend": "dynamo", "check": "shapes", "status": "error"},  # counted as fail
    ]
    lines = count_table(rows)
    table = {line.split()[0]: line.split()[1:] for line in lines[3:]}
    assert lines[1].split() == ["check", "dynamo", "onnx"]
    assert table["export"] == ["0/0/0/1", "0/1/1/0"]
    assert table["shapes"] == ["0/1/0/0"]
    assert table["all"] == ["0/1/0/1", "0/1/1/0"]
    markdown = count_table(rows, markdown=True)
    assert markdown[0] == "| check | dynamo | onnx |" and markdown[-1].startswith("| all |")
