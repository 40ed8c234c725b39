"""vlmdata: real, synthetic and mock multimodal payloads for honest VLM throughput benchmarks.

The Python API mirrors the CLI: ``vlmdata.build.build``, ``vlmdata.validate.validate``,
``vlmdata.inspect_dataset.summarize``.
"""

__version__ = "0.1.0"
