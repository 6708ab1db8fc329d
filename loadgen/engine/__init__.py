"""One run's engine and its records: the plan (runplan), the runner and its dispatchers (open loop,
closed loop), stamp lateness, the record writer, the result, validity, time series and the why."""
