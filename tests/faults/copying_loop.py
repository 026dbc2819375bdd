"""Fault: the ONNX Runtime decode loop runs the graph into fresh outputs and copies the cache back each step."""

import numpy as np
import torch

from hfexport.runtime import onnxruntime as ort_runtime
from hfexport.runtime.decode import decode_loop as real_decode_loop

from faults._base import runtime_with, with_faults


class CopyingOrtLoop(ort_runtime.OrtDecodeLoop):
    def step(self, input_ids, attention_mask, position_ids):
        runner = self.runner
        feed = {"input_ids": input_ids, "position_ids": position_ids, **self.buffers}
        if self._takes_mask:
            feed["attention_mask"] = attention_mask
        names = [runner._graph_input_name(n) for n in feed]
        results = runner.session.run(None, {g: t.numpy() for g, t in zip(names, feed.values())})
        outputs = dict(zip(runner.output_names, results))
        writes = {}
        for name, buffer in self.buffers.items():
            buffer.copy_(torch.from_numpy(np.asarray(outputs[name])))
            writes[name] = int(np.asarray(outputs[name]).ctypes.data)
        runner.last_shared_writes = writes
        return torch.from_numpy(np.asarray(outputs["logits"]))


def decode_loop(program_or_path, backend, **options):
    if backend == "onnx":
        return CopyingOrtLoop(program_or_path, **options)
    return real_decode_loop(program_or_path, backend, **options)


with_faults(globals(), runtime=runtime_with(decode_loop=decode_loop))
