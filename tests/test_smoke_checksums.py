"""The state digests the smoke judge compares: equal for bit-equal state, different for any changed bit."""

import pytest

torch = pytest.importorskip("torch")

from nemo_recipes.smoke_training.checksums import digest, per_rank  # noqa: E402


def test_equal_state_gives_equal_digests_and_any_changed_bit_does_not():
    weights = {"w": torch.randn(4, 3, dtype=torch.bfloat16), "b": torch.zeros(3), "step": 7}
    same = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in weights.items()}
    assert digest(weights.items()) == digest(reversed(list(same.items())))
    flipped = weights["b"].clone()
    flipped.view(torch.int32)[1] ^= 1  # one bit of one float
    assert digest({**weights, "b": flipped}.items()) != digest(weights.items())
    assert digest({**weights, "b": -weights["b"]}.items()) != digest(weights.items())  # -0.0 is not 0.0
    assert digest({**weights, "step": 8}.items()) != digest(weights.items())
    assert digest({**weights, "w": weights["w"].float()}.items()) != digest(weights.items())  # dtype counts
    assert digest({**weights, "w": weights["w"].reshape(3, 4)}.items()) != digest(weights.items())  # shape counts


def test_per_rank_without_a_process_group_is_this_rank_alone():
    assert per_rank("abc") == ["abc"]
