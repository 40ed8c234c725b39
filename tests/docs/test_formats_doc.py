"""docs/FORMATS.md runs as written: every example's files are written, its commands run, its counts checked.

Markers in the doc (HTML comments, invisible when rendered) say what each block is:
``<!-- images: PATHS -->`` small real images at those paths; ``<!-- file: PATH -->`` the next fenced block
is that file; ``<!-- python -->`` the next block is run; ``<!-- upload: LOCAL s3://BUCKET/PREFIX -->`` a
folder copied to (moto's) S3; ``<!-- run: written=N -->`` each ``vlmdata`` line of the next block is run
and must exit 0, and each build must write N samples and skip none.
"""

import json
import os
import re
import shlex

import pytest
from conftest import REPO, photo

from vlmdata.cli.main import main

DOC = os.path.join(REPO, "docs", "FORMATS.md")
MARK = re.compile(r"<!-- (images|file|python|upload|run):?\s*(.*?)\s*-->\n(?:```\w*\n(.*?)```\n)?", re.S)


def sections():
    text = open(DOC).read()
    out = []
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title = part.splitlines()[0]
        out.append((title, [(m[1], m[2], m[3]) for m in MARK.finditer(part)]))
    return out


SECTIONS = sections()
TITLES = [t for t, marks in SECTIONS if any(kind == "run" for kind, _, _ in marks)]


def test_every_format_has_a_checked_example():
    assert len(TITLES) == 5 and any("s3" in t for t in TITLES)


def _image(path: str, i: int) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    img = photo(("chelsea", "coffee", "astronaut", "rocket")[i % 4]).convert("RGB").resize((96 + 8 * i, 72 + 4 * i))
    img.save(path, "PNG" if path.endswith(".png") else "JPEG", quality=90)


def _prepare(kind: str, arg: str, body: str | None) -> None:
    if kind == "images":
        for i, p in enumerate(arg.split()):
            _image(p, i)
    elif kind == "file":
        os.makedirs(os.path.dirname(arg) or ".", exist_ok=True)
        with open(arg, "w") as f:
            f.write(body)
    elif kind == "python":
        exec(compile(body, DOC, "exec"), {})


@pytest.fixture
def s3_env(monkeypatch):
    s3fs = pytest.importorskip("s3fs", reason="the s3 example needs s3fs")
    moto_server = pytest.importorskip("moto.server", reason="the s3 example needs moto[server]")
    s3fs.S3FileSystem.clear_instance_cache()  # fsspec caches filesystems (and so endpoints) per process
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for k, v in {
        "AWS_ACCESS_KEY_ID": "AKIAFORMATSDOCTEST01",
        "AWS_SECRET_ACCESS_KEY": "formats-doc-secret",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    yield
    server.stop()
    s3fs.S3FileSystem.clear_instance_cache()  # no later test may reach this stopped server


@pytest.mark.parametrize("title", TITLES)
def test_example_runs(title, tmp_path, monkeypatch, capsys, request):
    monkeypatch.chdir(tmp_path)
    if "s3" in title:
        request.getfixturevalue("s3_env")
    for t, marks in SECTIONS:  # the files of this and every earlier example (the s3 one reuses photos/)
        for kind, arg, body in marks:
            _prepare(kind, arg, body)
        if t == title:
            break
    marks = dict(SECTIONS)[title]
    for kind, arg, body in marks:
        if kind == "upload":
            import fsspec

            local, url = arg.split()
            fs = fsspec.filesystem("s3", skip_instance_cache=True)
            fs.mkdir(url[len("s3://") :].split("/")[0])
            fs.put(local, url, recursive=True)
        if kind != "run":
            continue
        want = int(re.fullmatch(r"written=(\d+)", arg)[1])
        commands = [shlex.split(line) for line in body.splitlines() if line.startswith("vlmdata ")]
        assert commands
        for argv in commands:
            build = argv[1] == "build"
            code = main(argv[1:] + (["--json"] if build else []))
            cap = capsys.readouterr()
            assert code == 0, (argv, cap.err)
            if build:
                acc = json.loads(cap.out)["accounting"]
                assert (acc["written"], acc["skipped"]) == (want, 0), (argv, acc, cap.err)


def test_llava_without_image_root_skips_as_the_doc_says(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for kind, arg, body in dict(SECTIONS)[TITLES[1]]:
        _prepare(kind, arg, body)
    code = main(["build", "llava/data.json", "-o", "out"])
    err = capsys.readouterr().err
    assert code in (0, 1)  # 1 once a build that writes nothing fails (issue 10's --min-written-fraction)
    assert re.findall(r"skipped data\.json\[\d\]: (\w+)", err) == ["missing_file", "missing_file"]
