"""The application: the `evolve` command line, the main job (the one composition root), doctor."""
