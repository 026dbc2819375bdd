"""The API contract through the implementation adapter: config round trips, Auto dispatch, environment."""

import json

import pytest


def test_config_round_trips_through_dict_and_json(hfexport_implementation, hfexport_backend):
    config = hfexport_implementation.config(hfexport_backend, dynamic=True)
    if not hasattr(config, "to_dict"):
        from pytest_hfexport import Unsupported

        raise Unsupported(f"{hfexport_implementation.name} configs have no to_dict")
    data = json.loads(json.dumps(config.to_dict(), default=str))
    assert str(data["export_format"]) == hfexport_backend
    back = type(config).from_dict(data)
    assert back.to_dict() == config.to_dict()
    assert str(getattr(back.export_format, "value", back.export_format)) == hfexport_backend


def test_auto_dispatch_picks_the_backend(hfexport_implementation, hfexport_backend):
    exporter = hfexport_implementation.exporter(hfexport_backend)
    assert callable(getattr(exporter, "export", None))
    fmt = getattr(type(exporter), "export_format", None)
    if fmt is not None:
        assert str(getattr(fmt, "value", fmt)) == hfexport_backend


def test_environment_validation_passes_on_the_pinned_stack(hfexport_implementation, hfexport_backend):
    exporter = hfexport_implementation.exporter(hfexport_backend)
    # On the instance: the guide does not say whether it is a classmethod (hfexport) or a method (the peer).
    exporter.validate_environment()  # raises when a required package is missing or too old
