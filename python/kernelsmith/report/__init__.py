"""Self-contained HTML report of one run (``kernelsmith report RUN_DIR``). See docs/reports.md."""

from .html import RunView, build_report, write_report

__all__ = ["RunView", "build_report", "write_report"]
