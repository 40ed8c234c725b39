"""Engine selection that needs no Ray: the registry, the error without Ray, and the local engine's API."""

import subprocess
import sys

import pytest

from vlmdata.ingest.engines import LocalEngine, get_engine


def _square(x):
    return x * x


def test_local_engine_keeps_order_and_bounds_window():
    for workers in (1, 2):
        with get_engine("local", workers=workers) as eng:
            assert isinstance(eng, LocalEngine) and eng.parallelism == workers
            assert list(eng.imap(_square, iter(range(50)), window=3)) == [i * i for i in range(50)]
            assert eng.submit(_square, 7).result() == 49


def test_cli_without_ray_says_how_to_install(llava_source, tmp_path):
    import os

    code = "import sys; sys.modules['ray'] = None\nfrom vlmdata.cli.main import main; sys.exit(main(sys.argv[1:]))"
    r = subprocess.run(
        [sys.executable, "-c", code, "build", llava_source, "-o", str(tmp_path / "o"), "--engine", "ray"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "pip install 'vlmdata[ray]'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "o")  # nothing written before the engine is known to work


def test_engines_are_a_registry_and_the_cli_offers_it():
    from vlmdata.cli.main import parser
    from vlmdata.ingest.engines import DEFAULT_ENGINE, ENGINES, REGISTRY, EngineError, engine_class

    assert ENGINES == tuple(REGISTRY) and DEFAULT_ENGINE in REGISTRY
    assert all(REGISTRY[name].name == name for name in ENGINES)
    argv = ["build", "src", "-o", "out"]
    assert parser(argv).parse_args(argv).engine == DEFAULT_ENGINE
    for name in ENGINES:  # --engine offers exactly the registry's names
        assert parser(argv).parse_args(argv + ["--engine", name]).engine == name
    with pytest.raises(SystemExit):
        parser(argv).parse_args(argv + ["--engine", "spark"])
    for bad in ("spark", 3, None):
        with pytest.raises(EngineError, match="unknown engine"):
            engine_class(bad)
    with pytest.raises(EngineError, match="`address` is for `engine` ray"):
        get_engine("local", address="auto")
