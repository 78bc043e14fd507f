"""TokenPolicyModel: the inference server decodes token policies in batches with a KV cache,
sampling the slim head's restricted distribution, so the behaviour log-probs it answers are
the learner's recomputed ones at the same weights; a row's tokens do not depend on its
batch; the request layout packs observation, step and instruction; bad input is refused."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from fleetgym.agents.inference import InferenceServer, RemoteClient
from fleetgym.agents.inference.token_model import (
    TokenPolicyModel,
    load_token_policy_weights,
    pack_token_request,
    token_policy_weights,
)
from fleetgym.agents.tokens import ActionTokenizer
from fleetgym.agents.tokens.backbones import TinyCausalTransformer
from fleetgym.agents.tokens.head import action_log_softmax
from fleetgym.agents.tokens.policy import TokenPolicy

OBS_DIM, CHUNK, DIMS, VOCAB, BINS = 5, 2, 3, 128, 16
N = CHUNK * DIMS


def _policy(seed: int = 0, instruction_length: int = 0) -> TokenPolicy:
    torch.manual_seed(seed)
    tok = ActionTokenizer([-1.0] * DIMS, [1.0] * DIMS, num_bins=BINS, vocab_size=VOCAB)
    net = TinyCausalTransformer(hidden_size=16, layers=2, heads=2, vocab_size=VOCAB)
    return TokenPolicy(
        net, tok, obs_dim=OBS_DIM, chunk=CHUNK, instruction_length=instruction_length
    ).eval()


def _full_head(seed: int = 0) -> torch.nn.Linear:
    """The full V-row head _policy(seed) sliced its action rows from (and dropped)."""
    torch.manual_seed(seed)
    return TinyCausalTransformer(hidden_size=16, layers=2, heads=2, vocab_size=VOCAB).head


def _requests(rows: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((rows, OBS_DIM)).astype(np.float32)
    steps = rng.integers(0, 100, rows)
    return obs, steps, rng.random((rows, N))


def test_server_log_probs_equal_the_learners_recomputed_ones():
    learner = _policy()
    served = _policy(seed=7)  # other initial weights, then the learner's
    load_token_policy_weights(served, token_policy_weights(learner))
    answers: dict[int, tuple] = {}
    # A long wait: a batch runs at 8 requests (2 clients) or when all 4 clients wait.
    with InferenceServer(TokenPolicyModel(served), max_batch=8, max_wait_ms=2000.0) as server:
        clients = [server.connect(slots=4) for _ in range(4)]

        def actor(i: int) -> None:
            client = clients[i]
            obs, steps, noise = _requests(4, seed=i)
            reply = client.infer(pack_token_request(obs, steps), noise)
            answers[i] = (obs, steps, reply.outputs)
            client.close()

        threads = [threading.Thread(target=actor, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        metrics = server.metrics()
    assert metrics["requests"] == 16 and metrics["mean_batch"] > 4  # batched across actors
    for obs, steps, out in answers.values():
        tokens = torch.from_numpy(out["tokens"])
        assert tokens.shape == (4, CHUNK, DIMS)
        with torch.no_grad():
            ev = learner.evaluate(torch.from_numpy(obs), tokens, step=torch.from_numpy(steps))
        np.testing.assert_allclose(out["log_prob"], ev.log_probs.numpy(), atol=1e-5)
        np.testing.assert_allclose(out["value"], ev.values.numpy(), atol=1e-5)
        # The full-vocabulary softmax is another distribution: ratios built from one of
        # each would be biased by logsumexp_V - logsumexp_window > 0.
        with torch.no_grad():
            prefix = learner._prefix(torch.from_numpy(obs), None)
            hidden, _ = learner.backbone(prefix)
            full = torch.log_softmax(_full_head()(hidden[:, -1]), -1)
            window = action_log_softmax(learner.head(hidden[:, -1]))
        first = tokens[:, 0, 0]
        gap = (
            window.gather(1, (first - learner.tokenizer.offset)[:, None])[:, 0]
            - full.gather(1, first[:, None])[:, 0]
        )
        assert bool((gap > 1e-3).all())


def test_a_rows_tokens_do_not_depend_on_its_batch_and_match_the_policy():
    policy = _policy()
    model = TokenPolicyModel(policy)
    obs, steps, noise = _requests(6)
    batch = model.forward(pack_token_request(obs, steps), noise)
    for i in range(6):
        one = model.forward(pack_token_request(obs[i : i + 1], steps[i : i + 1]), noise[i : i + 1])
        np.testing.assert_array_equal(one["tokens"][0], batch["tokens"][i])
        np.testing.assert_allclose(one["log_prob"][0], batch["log_prob"][i], atol=1e-5)
    direct = policy.act(
        torch.from_numpy(obs), step=torch.from_numpy(steps.astype(np.float32)),
        uniforms=torch.from_numpy(noise),
    )  # fmt: skip
    np.testing.assert_array_equal(batch["tokens"], direct.tokens.numpy())


def test_inverse_cdf_draws_follow_the_restricted_distribution():
    policy = _policy()
    model = TokenPolicyModel(policy)
    obs = np.zeros((1, OBS_DIM), np.float32)
    with torch.no_grad():
        hidden, _ = policy.backbone(policy._prefix(torch.from_numpy(obs), None))
        probs = policy.head.log_probs(hidden[:, -1])[0].exp().numpy()
    grid = (np.arange(4000) + 0.5) / 4000  # a uniform grid: bin frequencies are exact
    noise = np.zeros((grid.size, N))
    noise[:, 0] = grid
    out = model.forward(
        pack_token_request(np.repeat(obs, grid.size, 0), np.zeros(grid.size)), noise
    )
    counts = np.bincount(out["tokens"][:, 0, 0] - policy.tokenizer.offset, minlength=BINS)
    np.testing.assert_allclose(counts / grid.size, probs, atol=1.0 / grid.size + 1e-6)


def test_instructions_travel_in_the_request_row():
    policy = _policy(instruction_length=3)
    model = TokenPolicyModel(policy)
    assert model.spec.obs.shape == (OBS_DIM + 1 + 3,)
    obs, steps, noise = _requests(2)
    ids = np.array([[1, 2, 3], [4, 5, 0]])
    out = model.forward(pack_token_request(obs, steps, ids), noise)
    direct = policy.act(
        torch.from_numpy(obs), torch.from_numpy(ids), step=torch.from_numpy(steps.astype(np.float32)),
        uniforms=torch.from_numpy(noise),
    )  # fmt: skip
    np.testing.assert_array_equal(out["tokens"], direct.tokens.numpy())


def test_a_remote_client_gets_the_same_answers():
    model = TokenPolicyModel(_policy())
    obs, steps, noise = _requests(3)
    expected = model.forward(pack_token_request(obs, steps), noise)
    with InferenceServer(model, max_batch=4, max_wait_ms=1.0) as server:
        client = RemoteClient(server.listen(), slots=4)
        try:
            reply = client.infer(pack_token_request(obs, steps), noise)
        finally:
            client.close()
    np.testing.assert_array_equal(reply.outputs["tokens"], expected["tokens"])
    np.testing.assert_allclose(reply.outputs["log_prob"], expected["log_prob"], atol=1e-6)


def test_a_llama_backbone_is_served_like_the_tiny_one():
    pytest.importorskip("transformers")
    from fleetgym.agents.tokens.backbones import llama_backbone

    torch.manual_seed(0)
    tok = ActionTokenizer([-1.0] * DIMS, [1.0] * DIMS, num_bins=BINS, vocab_size=VOCAB)
    policy = TokenPolicy(
        llama_backbone(16, 1, 2, VOCAB, seed=0), tok, obs_dim=OBS_DIM, chunk=CHUNK
    ).eval()
    obs, steps, noise = _requests(3)
    out = TokenPolicyModel(policy).forward(pack_token_request(obs, steps), noise)
    with torch.no_grad():
        ev = policy.evaluate(
            torch.from_numpy(obs), torch.from_numpy(out["tokens"]), step=torch.from_numpy(steps)
        )
    np.testing.assert_allclose(out["log_prob"], ev.log_probs.numpy(), atol=1e-5)


def test_bad_input_is_refused():
    policy = _policy()
    with pytest.raises(TypeError, match="expected a TokenPolicy"):
        TokenPolicyModel(torch.nn.Linear(2, 2))
    weights = token_policy_weights(policy)
    with pytest.raises(ValueError, match="missing"):
        load_token_policy_weights(policy, {k: v for k, v in weights.items() if "value" not in k})
    key = next(iter(weights))
    with pytest.raises(ValueError, match=f"weights\\['{key}'\\]: expected shape"):
        load_token_policy_weights(policy, {**weights, key: np.zeros((1, 1), np.float32)})
    with pytest.raises(TypeError, match="expected a dict"):
        load_token_policy_weights(policy, [1, 2])
    with pytest.raises(ValueError, match=r"instruction: expected ids in \[0, 2\*\*24\)"):
        pack_token_request(np.zeros((1, 2)), np.zeros(1), np.array([[-1]]))
    with pytest.raises(ValueError, match="one row each per request"):
        pack_token_request(np.zeros((2, 2)), np.zeros(3))
