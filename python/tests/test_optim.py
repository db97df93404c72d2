"""ringflow.optim against torch.optim on the same parameters and gradients: SGD, Adam, AdamW,
the learning-rate schedules, clip_grad_norm_; GradScaler's rule; state round trips."""
import math

import numpy as np
import pytest

import ringflow as rf

torch = pytest.importorskip("torch")


def run_steps(make_ours, make_ref, steps=4):
    rng = np.random.default_rng(0)
    start = rng.normal(size=(3, 5)).astype(np.float32)
    grads = [rng.normal(size=(3, 5)).astype(np.float32) for _ in range(steps)]
    ours = rf.tensor(start, requires_grad=True)
    ref = torch.tensor(start, requires_grad=True)
    opt, ref_opt = make_ours([ours]), make_ref([ref])
    for g in grads:
        ours.grad = rf.tensor(g)
        ref.grad = torch.tensor(g)
        opt.step()
        ref_opt.step()
    np.testing.assert_allclose(ours.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    return opt


def test_optimizers_match_torch():
    run_steps(lambda p: rf.optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1))
    run_steps(lambda p: rf.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
              lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01))
    run_steps(lambda p: rf.optim.SGD(p, lr=0.1, momentum=0.5, dampening=0.3),
              lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5, dampening=0.3))
    run_steps(lambda p: rf.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
              lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1))
    run_steps(lambda p: rf.optim.AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01))


def test_optimizer_state_round_trip():
    opt = run_steps(lambda p: rf.optim.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01))
    state = opt.state_dict()
    assert sorted(state) == ["lr", "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step"]
    other = rf.optim.Adam([rf.zeros(3, 5, requires_grad=True)], lr=0.5)
    other.load_state_dict(state)
    assert other.lr == pytest.approx(0.01) and other.state_dict()["state.0.step"].item() == 4
    with pytest.raises(ValueError, match="state.7"):
        other.load_state_dict({"state.7.exp_avg": rf.zeros(3, 5)})


def schedules(lib):
    sched = lib.optim.lr_scheduler
    return [
        lambda o: sched.StepLR(o, step_size=3, gamma=0.5),
        lambda o: sched.MultiStepLR(o, milestones=[2, 5], gamma=0.1),
        lambda o: sched.CosineAnnealingLR(o, T_max=7, eta_min=0.001),
        lambda o: sched.LinearLR(o, start_factor=0.25, total_iters=4),
        lambda o: sched.SequentialLR(o, [sched.LinearLR(o, start_factor=0.1, total_iters=2),
                                         sched.CosineAnnealingLR(o, T_max=6)], milestones=[2]),
    ]


@pytest.mark.filterwarnings("ignore:The epoch parameter")  # torch 1.13's SequentialLR, inside
def test_schedules_match_torch():
    for ours, ref in zip(schedules(rf), schedules(torch)):
        opt = rf.optim.SGD([rf.zeros(1, requires_grad=True)], lr=0.2)
        ref_opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.2)
        s, t = ours(opt), ref(ref_opt)
        for _ in range(9):
            assert s.get_last_lr()[0] == pytest.approx(t.get_last_lr()[0], rel=1e-9, abs=1e-12)
            assert opt.lr == s.get_last_lr()[0]
            ref_opt.step()
            s.step()
            t.step()


def test_clip_grad_norm_matches_torch():
    rng = np.random.default_rng(3)
    grads = [rng.normal(size=s).astype(np.float32) for s in [(3, 4), (5,)]]
    ours = [rf.zeros(*g.shape, requires_grad=True) for g in grads]
    ref = [torch.zeros(*g.shape, requires_grad=True) for g in grads]
    for p, q, g in zip(ours, ref, grads):
        p.grad, q.grad = rf.tensor(g), torch.tensor(g)
    for norm_type in (2.0, math.inf):
        norm = rf.nn.utils.clip_grad_norm_(ours, 1.0, norm_type)
        ref_norm = torch.nn.utils.clip_grad_norm_(ref, 1.0, norm_type)
        assert norm == pytest.approx(float(ref_norm), rel=1e-5)
        for p, q in zip(ours, ref):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_grad_scaler_skips_overflowing_steps():
    p = rf.ones(2, requires_grad=True)
    opt = rf.optim.SGD([p], lr=1.0)
    scaler = rf.optim.GradScaler(init_scale=8.0, growth_interval=2)
    scaler.scale((p * 1.0).sum()).backward()
    assert p.grad.tolist() == [8.0, 8.0]
    assert scaler.step(opt) and p.tolist() == [0.0, 0.0]  # unscaled to 1 before the step
    scaler.update()
    p.grad = rf.tensor([math.inf, 0.0])
    assert not scaler.step(opt) and p.tolist() == [0.0, 0.0]
    scaler.update()
    assert scaler.get_scale() == 4.0 and scaler.state_dict()["skipped_steps"] == 1
