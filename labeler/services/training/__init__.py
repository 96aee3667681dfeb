"""Starting and finishing runs: a run's resolved settings, the trainer configs, preview and estimate, the job
queue, the rows each stage trains on, the stage runners (runners/), the criteria reward, a cancelled run's
kept model, model cards and Hub push, and the demo."""
