"""Islands, MAP-Elites grids, selection, migration and the run loop."""
