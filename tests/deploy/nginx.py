"""deploy/nginx/calmon.conf outside Docker: read its directives, and run it in front of calmon.

The file is what the nginx image includes inside its ``http`` block, with two lines that belong
to docker-compose.yml: ``listen 8000;`` and the upstream ``server calmon:8000;`` (the compose
service). :func:`site_config` rewrites exactly those two for a test's ports; :func:`main_config`
wraps the result the way the image does (an ``http`` block), with the pid file, logs and
temporary files in a directory of the test's; :func:`running_nginx` starts it in the foreground.

``nginx`` comes from Debian's ``nginx`` package, which ``.ci/run`` installs. A missing nginx
fails these tests rather than skipping them: a skipped proxy test would pass CI with a proxy
configuration nobody has run.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy import DEPLOY

NGINX_CONF = DEPLOY / "nginx" / "calmon.conf"
#: The two lines of NGINX_CONF that name docker-compose.yml's ports and service.
LISTEN_LINE = "listen 8000;"
UPSTREAM_LINE = "server calmon:8000;"

NGINX_MISSING = (
    "nginx is not on PATH. `.ci/run` installs it with Debian's nginx package "
    "(`apt-get install -y --no-install-recommends nginx`); install it the same way."
)

_TOKEN = re.compile(r"""#[^\n]*|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[{};]|[^\s{};'"#]+""")
_SIZE = re.compile(r"(\d+)([kKmMgG]?)")
_TIME = re.compile(r"(\d+)(ms|s|m|h|d)?")


@dataclass(frozen=True)
class Directive:
    """One simple directive (``name args;``) and the blocks it sits in, outermost first
    (``("server", "location /")``); quoted arguments are unquoted."""

    context: tuple[str, ...]
    name: str
    args: tuple[str, ...]


def _unquote(token: str) -> str:
    """A quoted nginx argument's value: quotes dropped, ``\\n``, ``\\t``, ``\\r`` and other
    backslash escapes resolved as nginx resolves them."""
    escapes = {"n": "\n", "t": "\t", "r": "\r"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), token[1:-1])


def directives(text: str) -> list[Directive]:
    """Every simple directive of an nginx configuration text, in order (block openers such as
    ``server`` and ``location /`` are not themselves returned: they are the context)."""
    out: list[Directive] = []
    context: list[str] = []
    words: list[str] = []
    for token in _TOKEN.findall(text):
        if token.startswith("#"):
            continue
        if token == "{":
            context.append(" ".join(words))
            words = []
        elif token == "}":
            assert not words, f"unterminated directive before '}}': {words}"
            context.pop()
        elif token == ";":
            out.append(Directive(tuple(context), words[0], tuple(words[1:])))
            words = []
        else:
            words.append(_unquote(token) if token[0] in "'\"" else token)
    assert not context and not words, "unbalanced braces or a missing ';'"
    return out


def only(found: list[Directive], name: str, context: tuple[str, ...] | None = None) -> Directive:
    """The one directive ``name`` (in ``context``, if given); fail if there are none or several."""
    matches = [d for d in found if d.name == name and context in (None, d.context)]
    assert len(matches) == 1, f"expected one {name!r} in {context}, found {matches}"
    return matches[0]


def size_bytes(value: str) -> int:
    """An nginx size (``16m``, ``512k``, ``1024``) in bytes."""
    match = _SIZE.fullmatch(value)
    assert match, f"not an nginx size: {value!r}"
    factor = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match.group(2).lower()]
    return int(match.group(1)) * factor


def seconds(value: str) -> float:
    """An nginx time (``10s``, ``2m``, ``500ms``; a bare number is seconds) in seconds."""
    match = _TIME.fullmatch(value)
    assert match, f"not a single nginx time: {value!r}"
    unit = {None: 1, "ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    return int(match.group(1)) * unit


def site_config(listen_port: int, upstream: str, text: str | None = None) -> str:
    """NGINX_CONF listening on 127.0.0.1:``listen_port`` and passing to ``upstream``
    (``host:port``); nothing else changes."""
    text = NGINX_CONF.read_text() if text is None else text
    for line in (LISTEN_LINE, UPSTREAM_LINE):
        assert text.count(line) == 1, f"{NGINX_CONF.name} must contain {line!r} exactly once"
    return text.replace(LISTEN_LINE, f"listen 127.0.0.1:{listen_port};").replace(
        UPSTREAM_LINE, f"server {upstream};"
    )


def main_config(directory: Path, site: str) -> Path:
    """Write an nginx main configuration that includes ``site`` in its ``http`` block, as the
    nginx image does with conf.d/, keeping every file nginx writes in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "site.conf").write_text(site)
    temp_paths = "\n".join(
        f"    {kind}_temp_path {directory / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # Run as root, nginx's workers would become `nobody`, who cannot enter pytest's 0700
    # directories; they stay root here (only the test runs them).
    user = "user root;\n" if os.geteuid() == 0 else ""
    path = directory / "nginx.conf"
    path.write_text(
        f"{user}daemon off;\n"
        "worker_processes 1;\n"
        f"pid {directory / 'nginx.pid'};\n"
        f"error_log {directory / 'error.log'} info;\n"
        "events {\n    worker_connections 1024;\n}\n"
        "http {\n"
        f"    access_log {directory / 'access.log'};\n"
        f"{temp_paths}\n"
        f"    include {directory / 'site.conf'};\n"
        "}\n"
    )
    return path


def nginx_executable() -> str:
    """The nginx binary; fail the test (never skip) when it is not installed."""
    exe = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if exe is None:
        pytest.fail(NGINX_MISSING, pytrace=False)
    return exe


def check_config(config: Path) -> subprocess.CompletedProcess[str]:
    """``nginx -t`` on ``config`` (its error log in the config's directory)."""
    return subprocess.run(
        [nginx_executable(), "-t", "-c", str(config), "-e", str(config.parent / "error.log")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def running_nginx(directory: Path, listen_port: int, upstream: str) -> Iterator[Path]:
    """nginx with the shipped site config on 127.0.0.1:``listen_port`` in front of
    ``upstream``, stopped (and waited for) afterwards; yields its directory (logs)."""
    config = main_config(directory, site_config(listen_port, upstream))
    checked = check_config(config)
    assert checked.returncode == 0, checked.stderr
    log = (directory / "nginx.out").open("wb")
    process = subprocess.Popen(
        [nginx_executable(), "-c", str(config), "-e", str(directory / "error.log")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while not _listening(listen_port):
            assert process.poll() is None, (directory / "nginx.out").read_text()
            assert time.monotonic() < deadline, "nginx did not start listening within 30 s"
            time.sleep(0.1)
        yield directory
    finally:
        process.terminate()  # SIGTERM: nginx's fast shutdown, workers included
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()
