"""Image grids, Markdown tables and self-contained HTML reports, shared by the audit, the run
report and the Flower dashboard (:mod:`fedleak.report.html`)."""

from .html import (MISSING, _CSS, _html_images, _html_table, _html_text, comparison_grid, html_report,
                   image_grid, markdown_table, save_png)

__all__ = ["MISSING", "comparison_grid", "html_report", "image_grid", "markdown_table", "save_png"]
