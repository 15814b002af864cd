"""The page ``dvc plots show`` fills, with Vega inlined, so that the plots render with no network.

DVC's own page loads vega, vega-lite and vega-embed from a CDN (``dvc_render.vega.VegaRenderer.SCRIPTS``):
offline it is a blank page. ``.dvc/config`` points ``plots.html_template`` at ``.dvc/plots/offline.html``, this
module's output: the same page with the three libraries, at the versions dvc-render names, inlined from their npm
packages (BSD-3-Clause), and no ``{scripts}`` placeholder, so that DVC adds no CDN tag. The page is committed;
rebuild it (needs ``npm`` and the npm registry, once) when dvc-render moves to other versions::

    python -m tasks.orchestration.plots_page
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tasks.core.io import atomic_outputs

PAGE = Path(".dvc/plots/offline.html")
BUILDS = {"vega": "build/vega.min.js", "vega-lite": "build/vega-lite.min.js", "vega-embed": "build/vega-embed.min.js"}

TEMPLATE = """<!DOCTYPE html>
<html>
<head>
    {{refresh_tag}}
    <title>DVC Plot</title>
    <!-- {versions} (BSD-3-Clause), inlined for offline use: python -m tasks.orchestration.plots_page -->
{scripts}
    <style>
        table {{
            border-spacing: 15px;
        }}
    </style>
</head>
<body>
    {{plot_divs}}
</body>
</html>
"""


def cdn_versions() -> dict[str, str]:
    """``{package: version}`` of the scripts dvc-render's page loads from its CDN."""
    from dvc_render.vega import VegaRenderer

    found = dict(re.findall(r"npm/([\w-]+)@([\d.]+)", VegaRenderer.SCRIPTS))
    if set(found) != set(BUILDS):
        raise SystemExit(f"plots_page: dvc-render's page loads {sorted(found)}, not {sorted(BUILDS)}: update BUILDS")
    return found


def page(scripts: dict[str, str], versions: dict[str, str]) -> str:
    """The template with ``scripts`` (``{package: minified source}``, in :data:`BUILDS` order) inlined."""
    for name, source in scripts.items():
        if "</script" in source.lower():
            raise SystemExit(f"plots_page: {name}'s build holds '</script', which would end the inline script")
    inline = "\n".join(f"    <script>{scripts[name]}</script>" for name in BUILDS)
    return TEMPLATE.format(versions=", ".join(f"{n} {versions[n]}" for n in BUILDS), scripts=inline)


def main() -> int:
    versions = cdn_versions()
    with tempfile.TemporaryDirectory(prefix="zhplm-vega-") as folder:
        subprocess.run(["npm", "pack", "--silent", *(f"{n}@{v}" for n, v in versions.items())], cwd=folder,
                       check=True, stdout=subprocess.DEVNULL)
        scripts = {}
        for name, build in BUILDS.items():
            with tarfile.open(Path(folder) / f"{name}-{versions[name]}.tgz") as tar:
                scripts[name] = tar.extractfile(f"package/{build}").read().decode("utf-8")
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    with atomic_outputs(PAGE) as (out,):
        out.write_text(page(scripts, versions), encoding="utf-8")
    print(f"wrote {PAGE} ({PAGE.stat().st_size / 2**10:,.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
