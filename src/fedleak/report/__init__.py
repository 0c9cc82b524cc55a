"""Image grids, Markdown tables and self-contained HTML reports, shared by the audit, the run
report and the Flower dashboard (:mod:`fedleak.report.html`)."""

from .html import (CSS, MISSING, comparison_grid, html_images, html_report, html_table, html_text, image_grid,
                   markdown_table, save_png)

__all__ = ["CSS", "MISSING", "comparison_grid", "html_images", "html_report", "html_table", "html_text",
           "image_grid", "markdown_table", "save_png"]
