"""The generated report (Markdown + HTML) and its sections."""
