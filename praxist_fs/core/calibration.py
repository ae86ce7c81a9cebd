"""How long experiments really take, relative to their declared ETA (R-SUP-7).

A compact log-normal model of ratio = successful wall time / declared ETA. The
prior is neutral (median ratio 1, log-sd 0.5) and weighs as PRIOR_WEIGHT
observations, so the first few jobs cannot make the model overconfident.
An unknown ETA stays unknown: no probability is made up for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRIOR_MU = 0.0        # log ratio: jobs take as long as they say
PRIOR_SIGMA = 0.5     # a factor of ~1.65 either way at one sd
PRIOR_WEIGHT = 4.0    # pseudo-observations behind the prior


@dataclass(slots=True)
class Calibration:
    """Running sums of log ratios; ``fit`` combines them with the prior."""

    count: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    def observe(self, wall_s: float, eta_s: float) -> None:
        if wall_s > 0 and eta_s > 0:
            value = math.log(wall_s / eta_s)
            self.count += 1
            self.total += value
            self.total_sq += value * value

    def fit(self) -> tuple[float, float]:
        """Posterior (mu, sigma) of the log ratio."""
        n, k = self.count, PRIOR_WEIGHT
        if n == 0:
            return PRIOR_MU, PRIOR_SIGMA
        mean = self.total / n
        scatter = max(0.0, self.total_sq - n * mean * mean)
        mu = (k * PRIOR_MU + n * mean) / (k + n)
        variance = (k * PRIOR_SIGMA ** 2 + scatter + k * n / (k + n) * (mean - PRIOR_MU) ** 2) \
            / (k + n)
        return mu, math.sqrt(max(variance, 1e-6))

    def p_finish(self, eta_s: float | None, remaining_s: float) -> float | None:
        """P(a job declaring ``eta_s`` finishes within ``remaining_s``); None if ETA unknown."""
        if eta_s is None:
            return None
        if remaining_s <= 0:
            return 0.0
        mu, sigma = self.fit()
        z = (math.log(remaining_s / eta_s) - mu) / sigma
        return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
