"""Schemathesis (MIT) generates requests from the REST API's own OpenAPI schema
and sends them to the team's served server as its admin: no answer may be a
5xx. Bounded: a few examples an operation, in at most a minute; the
operations that start training or swap the model are left out (they would
start jobs, not answer bad input)."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from security_support import ADMIN

LEFT_OUT = r"^/api/models/(train|default/activate|\{version_id\}/activate|jobs/.*/cancel)$"


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(team, tmp_path):
    command = shutil.which("st") or shutil.which("schemathesis")
    if command is None:
        pytest.skip("schemathesis is not installed (pip install -e '.[test]')")
    run = subprocess.run(
        [command, "run", team.url + "/openapi.json", "--checks", "not_a_server_error", "--max-examples", "8",
         "--seed", "7", "--max-time", "60", "--workers", "1", "--no-shrink", "--auth", ":".join(ADMIN),
         "--header", "X-Requested-With: schemathesis", "--exclude-path-regex", LEFT_OUT,
         "--request-timeout", "60", "--no-color", "--report-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    summary = "\n".join(run.stdout.splitlines()[-40:])
    print(summary)
    assert run.returncode == 0, summary
