"""python -m scalable_agent_tf2.population: population-based training (command.py)."""
import sys

from scalable_agent_tf2.population import command

sys.exit(command.main())
