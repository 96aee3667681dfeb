"""Models and their answers: the model registry, the one loader and its cache, answers queued for labelling,
Chat, Arena and its leaderboard, and a project's answer length fitted to its base model's answers."""
