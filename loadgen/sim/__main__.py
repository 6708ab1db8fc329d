"""``python -m loadgen.sim``: run the simulated endpoint standalone."""

from loadgen.sim.command import sim_command

if __name__ == "__main__":
    sim_command(prog_name="python -m loadgen.sim")
