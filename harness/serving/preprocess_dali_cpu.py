"""preprocess_dali (cpu profile): the same DALI graph as the GPU model, with DALI's CPU
decoder, run in the Python backend because the DALI backend needs a GPU here."""

from __future__ import annotations

from harness.preprocessing import TAP_TENSORS
from harness.preprocessing.dali_graph import CpuPipelineRunner
from harness.serving.preprocess import PreprocessModel
from harness.stage import GEOMETRY_TENSOR, Stage


class TritonPythonModel(PreprocessModel):
    def setup(self, spec):
        params = self.config.get("parameters", {})
        threads = int(params.get("num_threads", {}).get("string_value", "1"))
        # Same output order as the DALI backend model: the graph yields one tensor per output.
        self.names = list(self.output_dtypes)
        # The stages model answers the taps before the input; a detector's production model
        # answers INPUT and GEOMETRY, without taps.
        # ocr_decode_dali answers the decoded image alone: the decode step, no other stage made.
        decode_only = self.names == [TAP_TENSORS[Stage.DECODE]]
        taps = not decode_only and any(name in self.names for name in TAP_TENSORS.values()
                                       if name != TAP_TENSORS[Stage.INPUT])
        # A decoding error fails the whole dynamic batch, as in the DALI backend.
        # A segmenter's preprocessing answers GEOMETRY too (its config lists it): the source size.
        geometry = True if GEOMETRY_TENSOR in self.names else None
        self.runner = CpuPipelineRunner(spec, self.config["max_batch_size"], threads, taps=taps, isolate_failures=False,
                                        geometry=geometry, decode_only=decode_only)

    def preprocess(self, images, outputs):
        return [
            res.error if res.error else {name: t for name, t in zip(self.names, res.outputs) if name in outputs}
            for res in self.runner.run(images)
        ]
