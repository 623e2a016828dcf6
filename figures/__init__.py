"""The site's tables and figures, made from the package and data/ (`python -m figures`)."""
