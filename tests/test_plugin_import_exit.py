"""A plugin whose module calls ``sys.exit`` when imported (``sys.exit("needs Python 3.14")``, a
guard some packages have) is refused whole like any import failure: listed ``failed`` with its line
and the fix, while Switchboard and every other plugin load. Before, the ``SystemExit`` ended
``switchboard plugins`` and ``switchboard serve`` with only the plugin's message, naming no plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _installed(tmp_path: Path, name: str, source: str) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / f"switchboard_{name}.py").write_text(source)
    dist = site / f"switchboard_{name}-0.2.5.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: switchboard-{name}\nVersion: 0.2.5\n")
    (dist / "entry_points.txt").write_text(f"[switchboard]\n{name} = switchboard_{name}\n")
    return site


def test_a_plugin_that_exits_on_import_is_refused_and_the_rest_load(tmp_path: Path) -> None:
    site = _installed(tmp_path, "exiting", 'import sys\nsys.exit("switchboard-exiting needs Python 3.14")\n')
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    out = subprocess.run(
        [sys.executable, "-m", "switchboard", "plugins", "--json"],
        env={**clean, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    rows = {row["name"]: row for row in json.loads(out.stdout)["plugins"]}
    assert rows["exiting"]["status"] == "failed"
    assert rows["exiting"]["error"] == (
        "failed to import: SystemExit: switchboard-exiting needs Python 3.14; "
        "fix or disable it (SWITCHBOARD_DISABLE_PLUGINS=exiting)"
    )
    assert rows["github"]["status"] == "loaded" and rows["generic"]["status"] == "loaded"
    assert "Traceback" not in out.stderr
