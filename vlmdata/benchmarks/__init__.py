"""Benchmarks measured the skeptic's way: whole commands or whole loaders, side by side in one run.

``timing`` runs contenders interleaved in rotating order over rounds and records wall and CPU time and the
load average; ``build``, ``loader`` and ``synth`` hold the contenders of ``vlmdata bench build|loader|synth``.
The modules are imported by name (``vlmdata.benchmarks.loader``) so that torch stays out of light commands.
"""
