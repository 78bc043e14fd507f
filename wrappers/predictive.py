"""Predictive delay compensation: act on where the env is now, not where it was.

A remote agent holds the freshest observation that reached it, ``o_j``, emitted by the
env ``a`` ticks ago (its packet's timestamp gives ``a``), and the actions it sent since.
Frame stacks leave the policy to work out what happened in between;
:class:`PredictiveObservation` does it explicitly (model-based state estimation for
delayed systems: the Smith predictor of control, model-based simulation in delayed RL):
it rolls ``o_j`` forward through the actions it believes the env applied at each of the
``a`` steps since, with a *predictor*, and hands the policy the estimated current
observation (optionally further ahead, to the state the next action will meet).

What it uses is what a real remote agent knows, read from the ``info`` of the shim
(``fleetgym.wrappers.network_shim``, either info level) or of ``fleetgym/Remote-v0``
(same keys, same timeline):

- ``obs_age_steps``: the delivered observation's age (from its send timestamp);
- the actions it sent and at which tick (it sent them);
- optionally (``applied_ids=True``) the id of the action the env applied when it emitted
  the delivered observation: a real env host knows it and can put it in the observation
  packet. The wrapper reads it as that step's ``action_age_steps`` and only once the
  observation emitted by that step has arrived; actions applied after it are the ones
  still uncertain.

Which action the env applied at each uncertain step follows the shim's rule: the freshest
one that has arrived, else the last one held. The *most likely case* (``samples=0``)
assumes every in-flight action takes the most frequent action age seen so far;
``samples=K`` draws ``K`` schedules from the distribution of action ages seen (delay and
loss together), predicts each, and returns their mean, with their spread as an
uncertainty feature.

The predictor protocol (:class:`Predictor`): ``predictor(obs, actions, ages)`` returns
the estimated observation after applying ``actions`` in order to ``obs``, or a pair
``(estimate, uncertainty)``. A plain callable takes one case: ``obs`` shaped like an
observation, ``actions`` ``(n, *action_shape)``, ``ages`` ``(n,)`` (for each step, the
ticks between the action's sending and its application). A predictor with
``batched = True`` takes ``B`` cases at once (``obs`` ``(B, *obs_shape)``, ``actions``
``(B, n, *action_shape)``, ``ages`` ``(B, n)``) and returns ``(B, *obs_shape)`` and
optionally ``(B,)``. A predictor may carry ``observation_space`` / ``action_space``; they
must equal the env's.
"""

from __future__ import annotations

from typing import Any, Protocol, SupportsFloat, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.errors import FleetgymError, UnsupportedSpaceError
from fleetgym.validation import check_bool, check_int, quote
from fleetgym.wrappers.shim_config import default_start_action

__all__ = ["PredictionError", "PredictiveObservation", "Predictor"]

#: Longest action age the wrapper keeps statistics for (older ones count as this).
MAX_AGE = 63
#: Longest rollout bound and stall length accepted.
MAX_HORIZON = 100_000
#: Pseudo-count of the prior action age (``action_delay``) in each episode's statistics:
#: below one, so the first age seen outweighs it.
PRIOR_COUNT = 0.5


class PredictionError(FleetgymError, ValueError):
    """A predictor's output that is not an observation estimate (shape, finiteness)."""


@runtime_checkable
class Predictor(Protocol):
    """Anything that estimates an observation from an older one and the actions since.

    ``predictor(obs, actions, ages)`` returns the estimated observation after applying
    ``actions`` in order to ``obs``, or a pair ``(estimate, uncertainty)``; the shapes, and
    the batched form, are in the module docstring. ``isinstance(x, Predictor)`` checks only
    that ``x`` is callable.
    """

    def __call__(self, obs: np.ndarray, actions: np.ndarray, ages: np.ndarray) -> Any: ...


def _check_predictor_spaces(
    predictor: Any, env: gym.Env[Any, Any], who: str = "PredictiveObservation"
) -> None:
    for attr, space in (
        ("observation_space", env.observation_space),
        ("action_space", env.action_space),
    ):
        theirs = getattr(predictor, attr, None)
        if theirs is None:
            continue
        if not isinstance(theirs, spaces.Space) or theirs != space:
            raise UnsupportedSpaceError(
                f"{who}: expected a predictor for the env's {attr} {space}, "
                f"actual a predictor for {theirs}"
            )


def resolve_predictor(
    predictor: Any, env: gym.Env[Any, Any], who: str = "PredictiveObservation"
) -> Any:
    """``predictor`` for ``env``: ``"true-dynamics"`` as the env's own equations
    (:func:`~fleetgym.wrappers.dynamics.true_dynamics`), a callable as is; either checked
    against the env's spaces.

    Raises:
        TypeError: For anything else.
        UnsupportedSpaceError: For a predictor of other spaces, or an env without known
            equations.
    """
    if isinstance(predictor, str) and predictor == "true-dynamics":
        # Imported here: the env's own equations are one predictor among others.
        from fleetgym.wrappers.dynamics import true_dynamics

        predictor = true_dynamics(env)
    elif not callable(predictor):
        raise TypeError(
            f"predictor: expected a callable or 'true-dynamics', actual {quote(predictor)}"
        )
    _check_predictor_spaces(predictor, env, who)
    return predictor


class PredictiveObservation(
    gym.Wrapper[np.ndarray, Any, Any, Any], gym.utils.RecordConstructorArgs
):
    """Replaces the delivered observation by the predictor's estimate of the current one.

    After ``step`` at tick ``t`` the delivered observation is ``o_j`` with
    ``j = t + 1 - obs_age_steps``; the estimate rolls it through env steps
    ``j .. t + lookahead``, where the action applied at step ``i`` is taken to be
    ``a_{s_i}`` with ``s_i = min(t, max(s_{i-1}, i - D_i))`` (the freshest arrived, held
    otherwise; ``a_{-1}`` is the start action), ``s_{j-1}`` the packet's applied id when
    ``applied_ids`` (else ``j - 1 - D``) and ``D_i`` the most frequent action age seen
    (or drawn from the ages seen, ``samples > 0``). A delivered observation of age 0 with
    no lookahead is returned as is (so under the ``perfect`` profile the wrapper is the
    identity). Estimates are clipped into the observation space's bounds and cast to
    its dtype; with ``uncertainty=True`` one float32 feature is appended (the
    predictor's own uncertainty plus the spread over sampled schedules; 0 when nothing
    was predicted).

    In a stall (no fresh observation for many ticks) the rollout grows with the
    observation's age; ``max_horizon`` bounds it, so that beyond it the estimate stops
    moving (the agent holds its last extrapolation instead of predicting seconds ahead).
    With ``safe_action`` the rollout follows the env side of
    :class:`~fleetgym.wrappers.StallWatchdog`: at a step that ends ``stall_steps`` or more
    steps in a row without a fresh action (the shim's hold), the env applies
    ``safe_action``. Where the applied ids are known the streak of holds before the
    delivered observation is known too; without them it is taken as 0.

    The action ages seen are the agent's knowledge of its network, not of an episode:
    they carry over from one episode to the next and start again (from
    ``action_delay``) at a seeded ``reset``, so the same seed gives the same estimates.
    Every other buffer (actions sent, ages) is cleared at each ``reset``.

    ``info`` gains ``predicted_steps`` (the rollout length of this step).

    Args:
        env: A networked env (shim or ``fleetgym/Remote-v0``, or a wrapper of one that
            keeps ``info``) with a Box observation space.
        predictor: A :class:`Predictor` (see the module docstring), or
            ``"true-dynamics"``: the env's own equations
            (:func:`~fleetgym.wrappers.dynamics.true_dynamics`: CartPole, or Hopper,
            Walker2d, HalfCheetah and Swimmer through a private MuJoCo instance).
        lookahead: Extra ticks to predict beyond the current one, or ``"action"``: the
            most likely action age, so the estimate is the state the next action meets.
        applied_ids: Use the applied action's id carried by the observation packet.
        action_delay: The prior action age in ticks (the most likely one before any is
            seen in an episode); required when ``applied_ids`` is false (then it is the
            only knowledge of the action path). ``None`` (with applied ids) is 0;
            :func:`~fleetgym.wrappers.make_robust_env` passes the network's median
            action age (:func:`~fleetgym.wrappers.action_delay_for_profile`) instead.
        samples: 0: the most likely schedule; K >= 1: K schedules drawn from the action
            ages seen, averaged.
        uncertainty: Append the uncertainty feature.
        start_action: What the env applies before the first action arrives (default the
            shim's: the action space's zero element).
        max_horizon: Most ticks predicted (``None``: no bound).
        stall_steps: Holds in a row after which the env applies ``safe_action``.
        safe_action: The env's safe action in a stall (``None``: the env holds, the
            shim's rule).

    Example:
        >>> import gymnasium as gym
        >>> from fleetgym.wrappers.dynamics import CartPoleDynamics
        >>> from fleetgym.wrappers.network_shim import NetworkShimWrapper
        >>> shim = NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-normal")
        >>> env = PredictiveObservation(shim, CartPoleDynamics.from_env(shim))
        >>> obs, _ = env.reset(seed=0)
        >>> obs, *_, info = env.step(1)
        >>> obs.shape, info["predicted_steps"] >= 0
        ((4,), True)

    Raises:
        UnsupportedSpaceError: For a non-Box observation space, or a predictor built for
            other spaces.
        TypeError, ValueError: On a bad argument.
        PredictionError: From ``step``, for an estimate of the wrong shape or with
            non-finite values (the message names the step).
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        predictor: Predictor | str,
        *,
        lookahead: int | str = 0,
        applied_ids: bool = True,
        action_delay: int | None = None,
        samples: int = 0,
        uncertainty: bool = False,
        start_action: Any = None,
        max_horizon: int | None = None,
        stall_steps: int = 16,
        safe_action: Any = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            predictor=predictor,
            lookahead=lookahead,
            applied_ids=applied_ids,
            action_delay=action_delay,
            samples=samples,
            uncertainty=uncertainty,
            start_action=start_action,
            max_horizon=max_horizon,
            stall_steps=stall_steps,
            safe_action=safe_action,
        )
        gym.Wrapper.__init__(self, env)
        box = env.observation_space
        if not isinstance(box, spaces.Box):
            raise UnsupportedSpaceError(
                f"PredictiveObservation: expected a Box observation space, actual {box}"
            )
        predictor = resolve_predictor(predictor, env)
        self.predictor: Any = predictor
        self._batched = bool(getattr(predictor, "batched", False))
        if lookahead == "action":
            self.lookahead: int | None = None
        else:
            self.lookahead = check_int("lookahead", lookahead, 0, MAX_AGE)
        self.applied_ids = check_bool("applied_ids", applied_ids)
        if action_delay is None:
            if not self.applied_ids:
                raise ValueError(
                    "action_delay: expected the action age in ticks when applied_ids is "
                    "False (the agent knows nothing else of the action path), actual None"
                )
            self.action_delay = 0
        else:
            self.action_delay = check_int("action_delay", action_delay, 0, MAX_AGE)
        self.samples = check_int("samples", samples, 0, 10_000)
        self.uncertainty = check_bool("uncertainty", uncertainty)
        self._start = (
            default_start_action(env.action_space) if start_action is None else start_action
        )
        if not env.action_space.contains(self._start):
            raise ValueError(
                f"start_action: expected an element of {env.action_space}, "
                f"actual {quote(start_action)}"
            )
        self.max_horizon = (
            None if max_horizon is None else check_int("max_horizon", max_horizon, 1, MAX_HORIZON)
        )
        self.stall_steps = check_int("stall_steps", stall_steps, 1, MAX_HORIZON)
        if safe_action is not None and not env.action_space.contains(safe_action):
            raise ValueError(
                f"safe_action: expected an element of {env.action_space}, "
                f"actual {quote(safe_action)}"
            )
        self._safe = safe_action
        self._box = box
        self._low = box.low.astype(np.float64)
        self._high = box.high.astype(np.float64)
        if self.uncertainty:
            self.observation_space = spaces.Box(
                np.append(box.low.astype(np.float32).ravel(), np.float32(0)),
                np.append(box.high.astype(np.float32).ravel(), np.float32(np.inf)),
                dtype=np.float32,
            )
        self._rng = np.random.default_rng()
        self._reset_state()
        self._reset_statistics()

    # -- state --------------------------------------------------------------------------
    def _reset_state(self) -> None:
        self._t = 0
        self._sent: list[Any] = []
        self._applied_age: list[int] = []
        self._newest = 0  # index j of the freshest observation delivered
        self.last_horizon = 0

    def _reset_statistics(self) -> None:
        self._counts = np.zeros(MAX_AGE + 1)
        self._counts[self.action_delay] = PRIOR_COUNT

    def _likely_delay(self) -> int:
        return self.action_delay if not self.applied_ids else int(np.argmax(self._counts))

    def _schedules(self, j: int, n: int) -> tuple[np.ndarray, int]:
        """Seq ids ``(B, n)`` of the actions applied at env steps ``j .. j + n - 1``, and
        the seq id applied at step ``j - 1`` (-1: the start action)."""
        t = self._t - 1
        known = self.applied_ids and j >= 1 and j - 1 < len(self._applied_age)
        if j == 0:
            last = -1
        elif known:
            last = (j - 1) - self._applied_age[j - 1]
        else:
            last = max(-1, (j - 1) - self._likely_delay())
        if self.samples == 0:
            delays = np.full((1, n), self._likely_delay())
        else:
            p = self._counts / self._counts.sum()
            delays = self._rng.choice(MAX_AGE + 1, size=(self.samples, n), p=p)
        if last == -1 and j >= 1:
            # The start action was still applied at step j - 1: a_0, sent at tick 0, had
            # not arrived, so every action age is at least j.
            delays = np.maximum(delays, j)
        steps = np.arange(j, j + n)
        seqs = np.empty(delays.shape, dtype=np.int64)
        prev = np.full(delays.shape[0], last, dtype=np.int64)
        for col in range(n):
            prev = np.minimum(t, np.maximum(prev, steps[col] - delays[:, col]))
            seqs[:, col] = prev
        return seqs, last

    def _known_streak(self, j: int) -> int:
        """Steps in a row up to ``j - 1`` without a fresh action, from the applied ids."""
        if not self.applied_ids or j < 1 or j - 1 >= len(self._applied_age):
            return 0
        ages = self._applied_age
        streak, i = 0, j - 1
        while i >= 0:
            prev = (i - 1) - ages[i - 1] if i >= 1 else -1
            if i - ages[i] != prev:
                break
            streak += 1
            i -= 1
        return streak

    def _watchdog(self, actions: np.ndarray, seqs: np.ndarray, last: int, j: int) -> np.ndarray:
        """``actions`` with ``safe_action`` where the env's hold streak reaches ``stall_steps``."""
        streak = np.full(len(seqs), self._known_streak(j))
        prev = np.full(len(seqs), last)
        safe = np.zeros(seqs.shape, dtype=bool)
        for col in range(seqs.shape[1]):
            held = seqs[:, col] == prev
            streak = np.where(held, streak + 1, 0)
            safe[:, col] = streak >= self.stall_steps
            prev = seqs[:, col]
        if not safe.any():
            return actions
        out = actions.copy()
        out[safe] = np.asarray(self._safe, dtype=out.dtype)
        return out

    def _action(self, seq: int) -> Any:
        return self._start if seq < 0 else self._sent[seq]

    # -- prediction ---------------------------------------------------------------------
    def _estimate(self, obs: Any, j: int, step: int) -> tuple[np.ndarray, float, int]:
        lookahead = self._likely_delay() if self.lookahead is None else self.lookahead
        n = self._t - j + lookahead
        if self.max_horizon is not None:
            n = min(n, self.max_horizon)
        if n <= 0:
            return obs, 0.0, 0
        seqs, last = self._schedules(j, n)
        steps = np.arange(j, j + n)
        ages = steps[None, :] - seqs
        actions = np.asarray([[self._action(int(s)) for s in row] for row in seqs])
        if self._safe is not None:
            actions = self._watchdog(actions, seqs, last, j)
        base = np.asarray(obs, dtype=np.float64)
        model_unc: Any = 0.0
        if self._batched:
            out = self.predictor(np.broadcast_to(base, (len(seqs), *base.shape)), actions, ages)
            if isinstance(out, tuple):
                out, model_unc = out
            est = self._check(out, (len(seqs), *self._box.shape), step)
        else:
            rows, uncs = [], []
            for b in range(len(seqs)):
                out = self.predictor(base.copy(), actions[b], ages[b])
                if isinstance(out, tuple):
                    out, unc = out
                    uncs.append(unc)
                rows.append(self._check(out, self._box.shape, step))
            est = np.stack(rows)
            model_unc = np.asarray(uncs, dtype=np.float64) if uncs else 0.0
        unc = float(np.mean(np.asarray(model_unc, dtype=np.float64)))
        if not np.isfinite(unc):
            raise PredictionError(
                f"predictor at step {step}: expected a finite uncertainty, actual {unc}"
            )
        if len(est) > 1:
            unc += float(np.sqrt(np.mean(np.var(est, axis=0))))
        mean = np.clip(est.mean(axis=0), self._low, self._high).astype(self._box.dtype)
        return mean, unc, n

    def _check(self, out: Any, shape: tuple[int, ...], step: int) -> np.ndarray:
        try:
            arr = np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise PredictionError(
                f"predictor at step {step}: expected an array of shape {shape}, actual {quote(out)}"
            ) from exc
        if arr.shape != shape:
            raise PredictionError(
                f"predictor at step {step}: expected an estimate of shape {shape}, "
                f"actual {arr.shape}"
            )
        if not np.all(np.isfinite(arr)):
            raise PredictionError(
                f"predictor at step {step}: expected finite values, actual {arr.tolist()}"
            )
        return arr

    def _output(self, obs: Any, unc: float) -> Any:
        if not self.uncertainty:
            return obs
        return np.append(np.asarray(obs, dtype=np.float32).ravel(), np.float32(unc))

    # -- gym API ------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self._rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x9E37]))
            self._reset_statistics()
        self._reset_state()
        est, unc, n = self._estimate(obs, 0, 0)
        self.last_horizon = n
        info["predicted_steps"] = n
        return self._output(est, unc), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        step = self._t
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._sent.append(action)
        self._t = step + 1
        obs_age = info.get("obs_age_steps", 0)
        action_age = info.get("action_age_steps", 0)
        for name, value, high in (
            ("obs_age_steps", obs_age, self._t),
            ("action_age_steps", action_age, self._t),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(
                    f"info[{name!r}] at step {step}: expected an int, actual {quote(value)}"
                )
            if not 0 <= value <= high:
                raise ValueError(
                    f"info[{name!r}] at step {step}: expected 0..{high}, actual {value}"
                )
        self._applied_age.append(int(action_age))
        j = self._t - int(obs_age)
        if self.applied_ids and j > self._newest and j >= 1:
            # A new packet: the applied id it carries is one more sample of the action
            # age, unless it is the start action's (applied before any action arrived).
            age = self._applied_age[j - 1]
            if age < j:
                self._counts[min(age, MAX_AGE)] += 1
        self._newest = max(self._newest, j)
        est, unc, n = self._estimate(obs, j, step)
        self.last_horizon = n
        info["predicted_steps"] = n
        return self._output(est, unc), reward, terminated, truncated, info
