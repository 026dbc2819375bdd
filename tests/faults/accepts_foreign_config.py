"""Fault: an exporter takes a config of another backend without complaint."""

from faults._base import each_backend, with_faults


class AcceptsAnything:
    def resolve_config(self, config):
        if config is not None and str(config.export_format) != str(self.export_format):
            fields = {k: v for k, v in config.to_dict().items() if k in self.config_class.__dataclass_fields__}
            fields["export_format"] = str(self.config_class.export_format)
            return self.config_class.from_dict(fields)
        return super().resolve_config(config)


with_faults(globals(), exporters=each_backend(AcceptsAnything))
