"""Issue #42 item 6: the text proof's tolerance is derived from the recomputation's own float error (100× its float32
error against float64, at most 1e-3), so one wrong token fails at ≥ 10⁵ tokens. A bare 1-layer LLaMA (vocabulary 64,
width 32) on 200 × 512 = 102,400 tokens, FedSGD; fixed seed. 68 s wall at load 13 on 2 cores (slow)."""

import pytest
import torch

from fedleak.attacks.text.common import simulate
from fedleak.attacks.text.verify import FLOAT_MARGIN, TOLERANCE, derived_tolerance, float_error, relative_error
from fedleak.types import Protocol, Update

tf = pytest.importorskip("transformers")


def test_derived_tolerance_rule():
    assert derived_tolerance(1e-6) == pytest.approx(1e-4) and derived_tolerance(1.0) == TOLERANCE
    assert FLOAT_MARGIN * 1e-7 == derived_tolerance(1e-7)


@pytest.mark.slow  # 10⁵ tokens is the bar: three passes over them (the update, float32/64 recomputations)
def test_one_wrong_token_fails_at_a_hundred_thousand_tokens():
    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512)
    model = tf.LlamaForCausalLM(config)
    ids = torch.randint(0, 64, (200, 512))
    assert ids.numel() >= 100_000
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    zero = {k: torch.zeros_like(v) for k, v in params.items()}
    probe = Update(server_params=params, protocol=Protocol("fedsgd", lr=0.01), num_samples=200, gradient=zero)
    update = Update(server_params=params, protocol=Protocol("fedsgd", lr=0.01), num_samples=200,
                    gradient=simulate(model, probe, ids))
    noise = float_error(model, update, ids, None)
    tolerance = derived_tolerance(noise)
    assert 1e-8 < noise < 1e-5 and tolerance < 1e-3 / 10  # measured 5.3e-7 → 5.3e-5
    assert all(p.dtype == torch.float32 for p in model.parameters())  # switched back after the float64 run
    assert relative_error(model, update, ids, None) < tolerance
    wrong = ids.clone()
    wrong[7, 511] = (wrong[7, 511] + 1) % 64  # the last token: one target changed (measured error 3.8e-3)
    assert relative_error(model, update, wrong, None) > 10 * tolerance
