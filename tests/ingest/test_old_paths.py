"""``vlmdata.build`` (the package's name until issue 21) keeps working: the function, the module, and the module
paths the docs named (``vlmdata.build.builder``, ``.engines``, ``.engines.ray_engine``, ``.policy``) are the same
objects as under ``vlmdata.ingest``, not second copies."""

import subprocess
import sys


def test_old_module_paths_are_the_new_modules():
    import vlmdata.build
    import vlmdata.build.builder as old_builder
    import vlmdata.build.engines.ray_engine as old_ray
    import vlmdata.build.policy as old_policy
    from vlmdata.build.builder import build_shortfall, run_build_pipeline, write_dataset
    from vlmdata.build.engines import ENGINES, EngineError, get_engine

    assert old_builder is vlmdata.ingest and old_ray is vlmdata.ingest.engines.ray_engine
    assert old_policy is vlmdata.ingest.policy and vlmdata.build.BuildOptions is vlmdata.ingest.BuildOptions
    assert write_dataset is vlmdata.ingest.write_dataset and run_build_pipeline and build_shortfall
    assert ENGINES == ("local", "ray") and issubclass(EngineError, Exception) and callable(get_engine)
    assert callable(vlmdata.build)  # the module is also vlmdata's build()


def test_old_paths_in_a_fresh_interpreter():
    """The aliases exist before anything under vlmdata.ingest was imported (a script's first import)."""
    code = (
        "from vlmdata.build.builder import BuildOptions, build; import vlmdata.build.engines.ray_engine as r; "
        "import vlmdata.ingest.engines.ray_engine as n; import vlmdata; "
        "assert r is n and callable(build) and callable(vlmdata.build); print('ok')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]
