"""The Dockerfile and .dockerignore, read with BuildKit's own parser (the ``dockerfile`` package).

No Docker engine runs here, so the image is not built. What can be checked without one is: the
file parses, its base image, a non-root user, the port, a HEALTHCHECK against a real route, a
default command that ``calmon``'s parser accepts, ``CALMON_*`` variables the code reads, and a
build context (.dockerignore) that holds every file the COPY lines name and nothing else.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import PurePosixPath

import dockerfile
import pytest
import yaml

from tests.deploy import DEPLOY, ROOT
from tests.deploy.conftest import (
    SETTINGS_ENV,
    parse_calmon,
    subcommand,
    variables_read_by_the_code,
)
from tests.deploy.manifests import KUBERNETES, load_documents

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@pytest.fixture(scope="module")
def instructions() -> tuple[dockerfile.Command, ...]:
    return dockerfile.parse_file(str(DOCKERFILE))


def only(instructions: tuple[dockerfile.Command, ...], cmd: str) -> dockerfile.Command:
    found = [i for i in instructions if i.cmd == cmd]
    assert len(found) == 1, f"expected one {cmd}, found {len(found)}"
    return found[0]


def env_vars(instructions: tuple[dockerfile.Command, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in instructions:
        if instruction.cmd == "ENV":
            pairs = instruction.value
            env.update(zip(pairs[::2], pairs[1::2], strict=True))
    return env


def test_base_image_and_single_stage(instructions: tuple[dockerfile.Command, ...]) -> None:
    assert only(instructions, "FROM").value == ("python:3.11-slim",)


def test_runs_as_a_numeric_non_root_user(instructions: tuple[dockerfile.Command, ...]) -> None:
    users = [i for i in instructions if i.cmd == "USER"]
    assert users, "no USER: the container would run as root"
    user, _, group = users[-1].value[0].partition(":")
    # Numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
    assert user.isdigit() and int(user) != 0, user
    assert group.isdigit() and int(group) != 0, group
    # The user is created with that uid, and the Kubernetes pods run as it.
    created = " ".join(" ".join(i.value) for i in instructions if i.cmd == "RUN")
    assert f"--uid {user}" in created
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for document in load_documents(path):
            if document["kind"] in ("Deployment", "Job", "CronJob"):
                job = document["spec"].get("jobTemplate", document)
                context = job["spec"]["template"]["spec"]["securityContext"]
                assert context["runAsUser"] == int(user), path.name
                assert context["runAsNonRoot"] is True, path.name


def test_default_command_serves_on_the_exposed_port(
    instructions: tuple[dockerfile.Command, ...],
) -> None:
    cmd = only(instructions, "CMD")
    assert cmd.json, "CMD in shell form would run under /bin/sh and not get SIGTERM itself"
    args = parse_calmon(list(cmd.value))
    assert subcommand(args) == "serve"
    assert args.host == "0.0.0.0"
    assert only(instructions, "EXPOSE").value == (str(args.port),)
    # docker-compose.yml's calmon service serves on the same port.
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert parse_calmon(compose["services"]["calmon"]["command"]).port == args.port


def test_healthcheck_probes_healthz_on_the_served_port(
    instructions: tuple[dockerfile.Command, ...], routes: frozenset[str]
) -> None:
    check = only(instructions, "HEALTHCHECK")
    assert check.value[0] == "CMD" and check.json
    (url,) = re.findall(r"https?://[^'\" ]+", " ".join(check.value))
    match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/\S*)", url)
    assert match, url
    assert match.group(1) == only(instructions, "EXPOSE").value[0]
    assert match.group(2) == "/healthz" and "/healthz" in routes
    # python:3.11-slim has no curl or wget: the probe must use what the image has.
    assert check.value[1] == "python"


def test_calmon_variables_are_read_by_the_code(
    instructions: tuple[dockerfile.Command, ...],
) -> None:
    env = env_vars(instructions)
    calmon_vars = {name for name in env if name.startswith("CALMON_")}
    assert calmon_vars
    unknown = calmon_vars - SETTINGS_ENV - variables_read_by_the_code()
    assert not unknown, f"ENV sets {sorted(unknown)}, which nothing in service/ reads"


def copies(instructions: tuple[dockerfile.Command, ...]) -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY, destinations resolved against WORKDIR."""
    workdir, out = PurePosixPath("/"), []
    for instruction in instructions:
        if instruction.cmd == "WORKDIR":
            workdir = workdir / instruction.value[0]
        elif instruction.cmd == "COPY":
            assert not instruction.flags, "COPY --from/--chown: extend this test"
            *sources, destination = instruction.value
            out.append((sources, str(workdir / destination)))
    return out


#: The image's install: the service (the server extra) and its PostgreSQL driver.
INSTALL = 'pip install ".[server,postgresql]"'


def test_the_migrations_are_installed_with_the_package(
    instructions: tuple[dockerfile.Command, ...],
) -> None:
    # pyproject.toml installs migrations/ as service.migrations, so the image needs them in the
    # build before it is installed, and no source tree left in WORKDIR to shadow the installed
    # package (whose copy is the one carrying the migrations).
    installs = [n for n, i in enumerate(instructions) if i.cmd == "RUN" and INSTALL in i.value[0]]
    assert len(installs) == 1
    copied = {s for i in instructions[: installs[0]] if i.cmd == "COPY" for s in i.value[:-1]}
    assert "migrations" in copied
    run = instructions[installs[0]].value[0]
    assert "rm -rf" in run and {"service", "migrations"} <= set(run.split("rm -rf", 1)[1].split())
    assert not any(name.startswith("CALMON_MIGRATIONS") for name in env_vars(instructions))


def test_the_package_metadata_is_copied_before_pip_install(
    instructions: tuple[dockerfile.Command, ...],
) -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    readme = re.search(r'^readme = "([^"]+)"', pyproject, re.MULTILINE)
    assert readme, "pyproject.toml names no readme"
    installs = [n for n, i in enumerate(instructions) if i.cmd == "RUN" and INSTALL in i.value[0]]
    assert len(installs) == 1
    before = {
        source for i in instructions[: installs[0]] if i.cmd == "COPY" for source in i.value[:-1]
    }
    assert {"pyproject.toml", readme.group(1), "service", "migrations"} <= before


def dockerignore_patterns() -> list[tuple[bool, str]]:
    """(is_exception, pattern) of each .dockerignore line, in order."""
    out = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append((line.startswith("!"), line.lstrip("!").strip("/")))
    return out


def in_context(relative: str) -> bool:
    """Whether .dockerignore leaves ``relative`` in the build context.

    Docker's rule: the last pattern matching the path or one of its parent directories wins;
    ``!`` patterns re-include. fnmatch's ``*`` also crosses ``/``, which is enough here.
    """
    parts = PurePosixPath(relative).parts
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    included = True
    for exception, pattern in dockerignore_patterns():
        if any(fnmatch.fnmatchcase(c, pattern) for c in candidates):
            included = exception
    return included


def test_every_copied_file_is_in_the_build_context(
    instructions: tuple[dockerfile.Command, ...],
) -> None:
    for sources, _ in copies(instructions):
        for source in sources:
            assert (ROOT / source).exists(), source
            files = [ROOT / source] if (ROOT / source).is_file() else (ROOT / source).rglob("*.py")
            for path in files:
                relative = path.relative_to(ROOT).as_posix()
                if "__pycache__" not in relative:
                    assert in_context(relative), f"{relative} is excluded by .dockerignore"


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/config",
        "instance/calmon.db",
        "tests/conftest.py",
        "service/__pycache__/cli.cpython-311.pyc",
        "deploy/prometheus/prometheus.yml",
        "docker-compose.yml",
    ],
)
def test_the_build_context_leaves_out_what_the_image_does_not_need(path: str) -> None:
    assert not in_context(path)


def test_the_dockerignore_matcher_follows_docker_rules() -> None:
    # The matcher itself, on the rules the tests above rely on.
    assert in_context("service/cli.py")
    assert in_context("deploy/gunicorn.conf.py")
    assert not in_context("deploy/kubernetes/deployment.yaml")
    assert not in_context("service/api/__pycache__/x.pyc")


def test_the_gunicorn_config_file_is_where_its_usage_line_expects_it(
    instructions: tuple[dockerfile.Command, ...],
) -> None:
    # `gunicorn -c deploy/gunicorn.conf.py 'service:create_app()'` from WORKDIR, as in the repo.
    workdir = only(instructions, "WORKDIR").value[0]
    relative = (DEPLOY / "gunicorn.conf.py").relative_to(ROOT).as_posix()
    copied = {destination: sources for sources, destination in copies(instructions)}
    assert copied.get(str(PurePosixPath(workdir) / relative)) == [relative]
