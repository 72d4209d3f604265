"""Ops as torch.library custom ops: whole graphs under torch.compile, gradients through dispatch."""

import pytest
import torch

from popcorn.kernels import OPS, cross_entropy, rms_norm, softmax


def test_every_single_output_op_is_a_custom_op():
    for name, op in OPS.items():
        if len(op.outputs) == 1:
            assert op.library is not None and hasattr(torch.ops.popcorn, name), name
    assert OPS["rope"].library is None  # two outputs: eager dispatch only


@pytest.mark.parametrize("case", ["rms_norm", "softmax", "cross_entropy"])
def test_compiled_fullgraph_matches_eager_with_gradients(case):
    torch.manual_seed(0)
    if case == "rms_norm":
        args, fn = [torch.randn(4, 8), torch.randn(8)], lambda x, w: rms_norm(x, w, eps=1e-5) * 2
    elif case == "softmax":
        args, fn = [torch.randn(3, 17)], lambda x: softmax(x).log()
    else:
        target = torch.tensor([1, 0, 4, -100])
        args, fn = [torch.randn(4, 5)], lambda x: cross_entropy(x, target, label_smoothing=0.1) + 1
    eager_in = [a.clone().requires_grad_() for a in args]
    comp_in = [a.clone().requires_grad_() for a in args]
    want = fn(*eager_in)
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*comp_in)  # raises on any graph break
    torch.testing.assert_close(got, want)
    want.sum().backward()
    got.sum().backward()
    for a, b in zip(comp_in, eager_in):
        torch.testing.assert_close(a.grad, b.grad)
