"""A user's module that fails to import: its own error must reach the user."""
raise RuntimeError("gym_user_package.broken: missing simulator licence file")
