"""Every generated file of the chart with its text (`generated_files`), and the command that checks or
writes them (`main`, ``python -m metax_dev.chart``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from metax_dev import dashboard
from metax_dev.chart import security
from metax_dev.chart.options import CHART_DIR
from metax_dev.chart.rbac_templates import render_doctor_rbac, render_node_policy, render_operator_rbac
from metax_dev.chart.readme import render_readme
from metax_dev.chart.schema import render_schema
from metax_dev.chart.values import render_values, render_values_template


def generated_files(chart_dir: Path = CHART_DIR) -> dict[Path, str]:
    docs_dir = chart_dir.parent.parent / "docs"
    return {
        chart_dir / "values.yaml": render_values(),
        chart_dir / "values.schema.json": render_schema(),
        chart_dir / "README.md": render_readme(docs_dir),
        chart_dir / "templates" / "operator-rbac.yaml": render_operator_rbac(),
        chart_dir / "templates" / "doctor-rbac.yaml": render_doctor_rbac(),
        chart_dir / "templates" / "node-policy.yaml": render_node_policy(),
        chart_dir / "templates" / "_values.tpl": render_values_template(),
        chart_dir / dashboard.FILE: dashboard.render(),
        docs_dir / "security.md": security.render_security_doc(docs_dir),
    }


def main(argv: list[str] | None = None) -> int:
    # The description: the first line of the package's (metax_dev.chart's) docstring.
    package_doc = sys.modules[__name__.rpartition(".")[0]].__doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m metax_dev.chart", description=package_doc.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write the files (default: list stale ones)")
    args = parser.parse_args(argv)
    stale = 0
    for path, text in generated_files().items():
        if path.is_file() and path.read_text() == text:
            continue
        stale += 1
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
        else:
            print(f"stale: {path}")
    return 0 if args.write or not stale else 1
