"""KL coefficient controllers: the beta in reward = score - beta * KL.

AdaptiveKLController is Ziegler et al. 2019 ("Fine-Tuning Language Models from Human Preferences"),
section 2.2: beta_{t+1} = beta_t (1 + K_beta e_t), e_t = clip(KL_t / KL_target - 1, -0.2, 0.2),
with K_beta = n_steps / horizon.

`min_coef` (default 0: Ziegler's and TRL's controller) keeps beta from falling below a floor. Every run starts
at KL 0, below any target, so the plain controller spends the first steps lowering beta and has to climb back
once the KL overshoots; with rewards that never saturate (people's rankings) that climb came too late to hold
the KL. A floor at the initial coefficient makes the target a budget: beta only rises above its start.
"""
from __future__ import annotations


class FixedKLController:
    """A constant beta."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        pass

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


class AdaptiveKLController(FixedKLController):
    """Moves beta so that the observed KL approaches `target` over about `horizon` samples."""

    def __init__(self, init_kl_coef: float, target: float, horizon: int, min_coef: float = 0.0) -> None:
        if target <= 0 or horizon <= 0:
            raise ValueError(f"AdaptiveKLController: target={target!r} and horizon={horizon!r} must be positive")
        if min_coef < 0:
            raise ValueError(f"AdaptiveKLController: min_coef={min_coef!r} must be >= 0")
        super().__init__(init_kl_coef)
        self.target, self.horizon, self.min_coef = float(target), int(horizon), float(min_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        # The clip bounds a single update to +-20% of n_steps / horizon, so one noisy batch can't swing beta.
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value = max(self.value * (1.0 + proportional_error * n_steps / self.horizon), self.min_coef)


def kl_budget_spent(step_kls: list[float], budget: float, window: int) -> bool:
    """Whether a run has spent its KL budget: the mean KL of its last `window` optimizer steps (all of them while
    fewer) has reached `budget`. A window, not one step, because one batch's KL is noisy; the caller ends the run."""
    if budget <= 0 or window < 1:
        raise ValueError(f"kl_budget_spent: budget={budget!r} must be positive and window={window!r} at least 1")
    recent = step_kls[-window:]
    return bool(recent) and sum(recent) / len(recent) >= budget
