"""A user's own package of gymnasium environments, as docs/ENVIRONMENTS.md describes it:
importing gym_user_package.envs registers its environments with gymnasium, so
--level_name=gym:tests.gym_user_package.envs:UserTarget-v0 trains on them."""
