"""Reports: console (rich), files (JSON, CSV, HDR logs), HTML. The only place that formats output."""
