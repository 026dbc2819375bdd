"""Fault: export_for_generation exports the prefill static: it serves only the prompt length it was traced on."""

import dataclasses

from faults._base import each_backend, with_faults


class StaticPrefill:
    def export_for_generation(self, model, inputs, config=None, generation_config=None, multi_token_decode=False):
        from hfexport.utils import decompose_for_generation

        config = self.resolve_config(config)
        components = decompose_for_generation(model, inputs, generation_config, multi_token_decode)
        return {name: self.export(module, kwargs, dataclasses.replace(config, dynamic=False) if name == "prefill"
                                  else config)
                for name, (module, kwargs) in components.items()}


with_faults(globals(), exporters=each_backend(StaticPrefill))
