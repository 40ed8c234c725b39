"""The README's Python snippets run as written, from a directory that is not the repository."""

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

BLOCKS = re.findall(r"```python\n(.*?)```", open(os.path.join(REPO, "README.md")).read(), re.S)


def test_readme_has_python_snippets():
    assert len(BLOCKS) == 2


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_snippet_runs_outside_the_repo(i, tmp_path):
    code = BLOCKS[i] + "\nprint('SNIPPET OK')\n"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and "SNIPPET OK" in r.stdout, r.stderr[-2000:]
