"""Fault: the export writes a report file into the caller's working directory."""

from pathlib import Path

from faults._base import each_backend, with_faults


class WritesReport:
    def export(self, model, sample_inputs, config=None):
        program = super().export(model, sample_inputs, config)
        Path("export_report.md").write_text("# export report\n")
        return program


with_faults(globals(), exporters=each_backend(WritesReport))
