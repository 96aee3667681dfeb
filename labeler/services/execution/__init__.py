"""A run as it runs: its row in `runs`, the launch command and its processes, its metrics, checkpoints, a
people-rewarded PPO run's step journal and an online DPO run's judged pairs."""
