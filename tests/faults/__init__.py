"""Seeded-fault implementations of the export API: each module is hfexport with exactly one fault.

They are how the conformance suite is tested (tests/test_suite_catches_faults.py): run with
``--hfexport-impl=faults.<name>`` (``tests`` on the path), the suite must fail each of them on the
check the fault belongs to, and pass hfexport itself. A fault module exposes hfexport's public API
(``with_faults`` fills its namespace) with its own exporter classes, runtime or config classes in place.
"""
