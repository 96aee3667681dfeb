"""A run's settings on the ground floor: the stage registry (training_stages/, one module of facts per stage),
the job's settings, the reward grammar, durations, label filters and the credentials refused from settings.
Facts and checks only: no table written, no torch."""
