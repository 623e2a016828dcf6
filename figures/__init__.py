"""The site's tables and figures (`python -m figures`), drawn to files only."""

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "minimodel"  # stable SVG ids: a redrawn figure diffs cleanly
