"""Fault: the static-cache prefill is traced without its attention mask (as hfexport did where generate() passes
``{'full_attention': None}``: qwen3), so its attention differs from eager's on generate()'s own call."""

from faults._base import each_backend, with_faults


class MasklessPrefill:
    def export_for_generation(self, model, inputs, config=None, generation_config=None, multi_token_decode=False):
        from hfexport.utils import decompose_for_generation

        config = self.resolve_config(config)
        components = decompose_for_generation(model, inputs, generation_config, multi_token_decode)
        out = {}
        for name, (module, kwargs) in components.items():
            if name == "prefill":
                kwargs = {k: v for k, v in kwargs.items() if k != "attention_mask"}
            out[name] = self.export(module, kwargs, config)
        return out


with_faults(globals(), exporters=each_backend(MasklessPrefill))
