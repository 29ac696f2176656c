"""deploy/nginx/calmon.conf: real nginx accepts it, and the test rendering changes only its ports.

``nginx -t`` (Debian's nginx, which ``.ci/run`` installs) parses the shipped file inside an
``http`` block, as the nginx image includes it, with the compose service name replaced by a
loopback address (``nginx -t`` resolves upstream names). tests/deploy/test_compose.py checks the
file's values against docker-compose.yml and calmon; tests/integration/test_proxy.py runs it.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tests.deploy.nginx import (
    LISTEN_LINE,
    NGINX_CONF,
    UPSTREAM_LINE,
    check_config,
    main_config,
    site_config,
)


def test_nginx_accepts_the_shipped_config(tmp_path: Path) -> None:
    result = check_config(main_config(tmp_path, site_config(18080, "127.0.0.1:18000")))
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


def test_the_config_check_rejects_a_misspelt_directive(tmp_path: Path) -> None:
    text = NGINX_CONF.read_text()
    assert "proxy_request_buffering on;" in text
    broken = text.replace("proxy_request_buffering on;", "proxy_request_bufering on;")
    result = check_config(main_config(tmp_path, site_config(18080, "127.0.0.1:18000", broken)))
    assert result.returncode != 0
    assert 'unknown directive "proxy_request_bufering"' in result.stderr


def test_the_test_rendering_changes_only_the_listen_port_and_the_upstream() -> None:
    original = NGINX_CONF.read_text().splitlines()
    rendered = site_config(18080, "127.0.0.1:18000").splitlines()
    changed = {
        line[0] + line[1:].strip()
        for line in difflib.unified_diff(original, rendered, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    }
    assert changed == {
        f"-{LISTEN_LINE}",
        f"-{UPSTREAM_LINE}",
        "+listen 127.0.0.1:18080;",
        "+server 127.0.0.1:18000;",
    }
