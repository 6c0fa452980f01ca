"""The cluster runtime: the coordinator that schedules a stage DAG, the workers that run its tasks, membership and local clusters."""
