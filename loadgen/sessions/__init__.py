"""Multi-turn sessions: the plan from a source (planning), the turn engine (turns), sessions over
worker processes (spread) and one measured session run (measured)."""
