"""Lists every valid --level_name: python -m scalable_agent_tf2.environments.families"""
from scalable_agent_tf2.environments import families

print(families.all_names_text())
