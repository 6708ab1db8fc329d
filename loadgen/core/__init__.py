"""The ground floor: plain data, clocks, parsers and definitions (types, errors, units, metrics, SLOs,
histograms, windows). Imports nothing else of loadgen; everything above may import it."""
