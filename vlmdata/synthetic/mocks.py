"""The mocks: the mock data people benchmark with today, one registry (``MOCKS``), light to import.

A mock is a generator of samples, ``generator(seed, **options)`` with ``sample(i) -> Sample`` and
``describe() -> dict``, registered under a name with a one-line definition. Every consumer reads this registry:
``make_loader(name)`` and ``MockSource(name)`` (``synthetic.source``), ``vlmdata synth --mock`` (its choices are
the mocks with ``synth``), and the audit (every mock with ``audit`` is an audit source, not paired with real:
``audit.inputs``). So adding a mock is one ``register_mock(Mock(...))`` here (its generator may live in a module
of its own, named ``"module:Class"`` and imported on first use) and its test.

Registered:

- ``imagefree``: text only (``synthetic.imagefree``), text lengths from a profile or fixed counts (the audit's
  ``imagefree`` source is a different thing: the real samples with their images dropped, paired);
- ``bridge-noise``: Megatron Bridge's ``MockVLMSFTDatasetConfig`` data (``synthetic.bridge_noise``);
- ``imagefree-fixed``: the image-free mock with fixed-length text (16-token prompt, 256-token answer), a view
  the loader and the audit offer (``vlmdata synth --mock imagefree`` writes it with its default lengths).

This module imports no numpy or PIL (``vlmdata audit --help`` lists the mocks); the generators do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vlmdata.errors import OptionsError
from vlmdata.registry import Registry, load

IMAGEFREE, BRIDGE_NOISE, IMAGEFREE_FIXED = "imagefree", "bridge-noise", "imagefree-fixed"
IMAGEFREE_PROMPT_TOKENS, IMAGEFREE_ANSWER_TOKENS = 16, 256  # the fixed lengths of imagefree (imagefree-fixed)


class MockError(OptionsError):
    """An unknown mock name, or options a mock's generator does not take."""


@dataclass(frozen=True)
class Mock:
    """One registered mock.

    Attributes:
        name: what users type (``make_loader("bridge-noise")``, ``--mock bridge-noise``, ``--sources``).
        definition: one line saying what the data is (the audit report, ``--help``).
        generator: the class (or a ``"module:Class"`` path, imported on first use) called as
            ``generator(seed, **options)``; its samples come from ``sample(i)``, its manifest record from
            ``describe()``.
        options: options this entry fixes (a view of a generator, e.g. ``imagefree-fixed``).
        params: the options ``vlmdata synth`` passes from its flags (``--image-size`` -> ``image_size``).
        synth: ``vlmdata synth --mock`` offers it.
        audit: the audit offers it as a source (measured, not paired with real).
    """

    name: str
    definition: str
    generator: Any
    options: Mapping[str, Any] = field(default_factory=dict)
    params: tuple[str, ...] = ()
    synth: bool = True
    audit: bool = True

    def make(self, seed: int = 0, **options: Any) -> Any:
        """The generator of this mock with ``seed``, this entry's options and ``options`` on top."""
        return load(self.generator)(seed, **{**self.options, **options})


MOCKS: Registry[Mock] = Registry("mock", "source", MockError)


def register_mock(mock: Mock, *, replace: bool = False) -> Mock:
    """Add ``mock`` to ``MOCKS`` (every consumer picks it up: module docstring)."""
    return MOCKS.register(mock.name, mock, replace=replace)


register_mock(
    Mock(
        IMAGEFREE,
        "text only (no image part, no image file): text lengths from a profile's rows or fixed prompt/answer counts",
        "vlmdata.synthetic.imagefree:ImageFree",
        params=("profile", "prompt_tokens", "answer_tokens", "tokenizer"),
        audit=False,  # the audit's imagefree is the paired real view (audit.inputs); its mock is imagefree-fixed
    )
)
register_mock(
    Mock(
        BRIDGE_NOISE,
        "Megatron Bridge's MockVLMSFTDatasetConfig: one 256x256 uniform-noise RGB image held in memory (no file, "
        "no decode) and 10-29 words from its 110-word vocabulary; not paired",
        "vlmdata.synthetic.bridge_noise:BridgeNoise",
        params=("image_size", "num_images", "num_base_examples", "encoded"),
    )
)
register_mock(
    Mock(
        IMAGEFREE_FIXED,
        "text only, a fixed 16-token prompt and 256-token answer per sample (a fixed-length text mock); not paired",
        "vlmdata.synthetic.imagefree:ImageFree",
        synth=False,  # `vlmdata synth --mock imagefree` writes it (its default lengths)
    )
)

__all__ = [
    "BRIDGE_NOISE",
    "IMAGEFREE",
    "IMAGEFREE_ANSWER_TOKENS",
    "IMAGEFREE_FIXED",
    "IMAGEFREE_PROMPT_TOKENS",
    "MOCKS",
    "Mock",
    "MockError",
    "register_mock",
]
