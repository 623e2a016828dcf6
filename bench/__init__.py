"""The measurements: each module writes a data file under data/ (`python -m bench.NAME`)."""
