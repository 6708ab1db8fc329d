"""The same run spread over processes (workers) or machines (cluster, Ray actors)."""
