"""The mock registry: a mock registered in one place (``register_mock``) is picked up by every consumer: the
loader, ``MockSource``, ``vlmdata synth --mock`` (its choices included) and the audit's sources (``--sources``)."""

import io
import json
import os

import pytest
from PIL import Image

from vlmdata.audit.sources import registry as audit_inputs
from vlmdata.cli.main import main
from vlmdata.dataset.schema import ImageInfo, Sample
from vlmdata.synthetic.mocks import BRIDGE_NOISE, IMAGEFREE, IMAGEFREE_FIXED, MOCKS, Mock, MockError, register_mock
from vlmdata.synthetic.source import MockSource


class Solid:
    """A test mock: one flat-colour PNG per sample, a fixed caption."""

    def __init__(self, seed: int = 0, *, side: int = 32, encoded: bool = False):
        self.seed, self.side, self.encoded = seed, side, encoded

    def sample(self, i: int) -> Sample:
        buf = io.BytesIO()
        Image.new("RGB", (self.side, self.side), (i % 256, self.seed % 256, 7)).save(buf, "PNG")
        conv = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which colour?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a flat one"}]},
        ]
        info = ImageInfo("0.png", self.side, self.side, "PNG", len(buf.getvalue()))
        return Sample(f"s{i:09d}", conv, [buf.getvalue()], [info], synthetic=self.describe())

    def describe(self) -> dict:
        return {"generator": "solid", "seed": self.seed, "side": self.side}


@pytest.fixture
def solid():
    mock = register_mock(Mock("solid", "flat-colour PNGs (a test mock); not paired", Solid, params=("encoded",)))
    yield mock
    MOCKS.unregister("solid")


def test_builtin_mocks():
    assert list(MOCKS) == [IMAGEFREE, BRIDGE_NOISE, IMAGEFREE_FIXED]
    assert MOCKS.names(lambda m: m.synth) == (IMAGEFREE, BRIDGE_NOISE)
    # imagefree-fixed is imagefree with its default lengths
    a, b = MockSource(IMAGEFREE_FIXED, seed=2).take(2), MockSource(IMAGEFREE, seed=2).take(2)
    assert [s.conversation for s in a] == [s.conversation for s in b]
    with pytest.raises(MockError, match="unknown mock 'nope'"):
        MockSource("nope")
    with pytest.raises(ValueError, match="`num_images` must be >= 0"):  # the generators' own checks, by name
        MockSource(BRIDGE_NOISE, num_images=-1)
    with pytest.raises(ValueError, match="`image_size` 100000x100000"):
        MockSource(BRIDGE_NOISE, image_size=(100000, 100000))


def test_a_registered_mock_is_a_source_everywhere(solid, tmp_path, capsys):
    assert [s.images[0][:4] for s in MockSource("solid", seed=1).take(2)] == [b"\x89PNG"] * 2

    from vlmdata.loaders.api import make_loader

    loader = make_loader("solid", epoch_samples=4, micro_batch_size=2, num_workers=0, num_epochs=1, seq_length=512)
    batches = list(loader.iter_inline())
    assert len(batches) == 2 and batches[0]["visual_inputs"].image_grid_thw.shape == (2, 3)

    out = str(tmp_path / "solid")
    assert main(["synth", "--mock", "solid", "-n", "3", "-o", out, "-q"]) == 0
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["kind"] == "synth" and manifest["totals"]["samples"] == 3
    assert manifest["source"]["generator"] == "solid"
    with pytest.raises(SystemExit):
        main(["synth", "--help"])
    assert "--mock solid: flat-colour PNGs" in capsys.readouterr().out


def test_unknown_synth_mock_lists_the_registered_ones(solid, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["synth", "--mock", "solidd", "-n", "1", "-o", str(tmp_path / "o")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "did you mean 'solid'?" in err and "bridge-noise" in err


def test_a_registered_mock_is_an_audit_source(solid, capsys):
    assert "solid" in audit_inputs.ALL_SOURCES and "solid" in audit_inputs.MOCK_SOURCES
    audit_inputs.check_sources(("real", "solid"))
    got = audit_inputs.prepare_input("solid", ["unused.tar"])
    assert (got.name, got.source, got.options, got.paired) == ("solid", "solid", {}, False)
    assert got.definition == "flat-colour PNGs (a test mock); not paired"
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    assert "also: imagefree-fixed, solid)" in " ".join(capsys.readouterr().out.split())  # --sources' help
