"""Issue 46, item 3: the judge's AdamW recomputation (step_checks.adamw) is torch's AdamW, checked against torch's
own optimizer on one step from restored moments, the way the smoke judge recomputes the first step of each run
(the planted bugs that fail it are in tests/test_smoke_built.py)."""

from __future__ import annotations

import pytest

from nemo_recipes.smoke_training.step_checks import UPDATE_TOLERANCE, adamw

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("restored_step", [0, 7])
def test_the_recomputed_update_is_torchs_adamw(restored_step):
    generator = torch.Generator().manual_seed(0)
    param = torch.nn.Parameter(torch.randn(64, generator=generator) * 0.02)
    optimizer = torch.optim.AdamW([param], lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    before = {"p": param.detach().double().tolist(), "step": None, "m": None, "v": None}
    if restored_step:  # moments as a checkpoint restores them
        m, v = torch.randn(64, generator=generator) * 1e-3, torch.rand(64, generator=generator) * 1e-6
        optimizer.state[param] = {"step": torch.tensor(float(restored_step)), "exp_avg": m, "exp_avg_sq": v}
        before.update(step=restored_step, m=m.double().tolist(), v=v.double().tolist())
    param.grad = torch.randn(64, generator=generator) * 1e-3
    grads = param.grad.double().tolist()
    optimizer.step()
    state = optimizer.state[param]
    adam = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8}
    for i, g in enumerate(grads):
        want = adamw(before, g, i, 3e-3, 0.1, adam)
        assert want["step"] == float(state["step"]) == restored_step + 1
        update = want["p"] - before["p"][i]
        assert abs(float(param[i]) - want["p"]) <= UPDATE_TOLERANCE * abs(update) + 2**-23 * abs(want["p"])
        assert float(state["exp_avg"][i]) == pytest.approx(want["m"], rel=1e-6)
        assert float(state["exp_avg_sq"][i]) == pytest.approx(want["v"], rel=1e-6)
    # A beta2 of 0.999 (torch's default) instead of the recipe's 0.95 is not within the tolerance.
    wrong = adamw(before, grads[0], 0, 3e-3, 0.1, {**adam, "beta2": 0.999})
    assert abs(wrong["v"] - float(state["exp_avg_sq"][0])) > 1e-3 * abs(wrong["v"])
