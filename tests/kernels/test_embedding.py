import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.core.inputs import make_inputs
from popcorn.kernels.embedding import embedding

from .check import agree


def independent(input, weight):
    return F.one_hot(input, weight.shape[0]).double() @ weight.double()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims, batch", [({"vocab": 64, "hidden": 16}, (16,)), ({"vocab": 7, "hidden": 21}, (17,)),
                                         ({"vocab": 101, "hidden": 8}, (3,)), ({"vocab": 9, "hidden": 8}, (2, 5)),
                                         ({"vocab": 9, "hidden": 8}, ())])
def test_matches_fp64(dims, batch, dtype):
    agree(embedding, independent, Case(dims, batch, dtype))


def test_domain_in_range():
    indices = make_inputs(embedding, Case({"vocab": 7, "hidden": 8}, (256,)))["input"]
    assert indices.dtype == torch.int64 and indices.min() >= 0 and indices.max() < 7


def test_repeated_indices_accumulate_grad_and_int32_works():
    weight = torch.randn(5, 3, requires_grad=True)
    indices = torch.tensor([2, 2, 0, 2], dtype=torch.int32)
    out = embedding(indices, weight)
    assert out.dtype == weight.dtype and torch.equal(out, weight.detach()[indices.long()])
    out.sum().backward()
    torch.testing.assert_close(weight.grad[:, 0], torch.tensor([1.0, 0.0, 3.0, 0.0, 0.0]))


def test_indices_of_any_shape_like_f_embedding():
    weight = torch.randn(5, 4)
    for shape in [(), (3,), (2, 3), (2, 3, 2)]:
        idx = torch.randint(0, 5, shape)
        torch.testing.assert_close(embedding(idx, weight), F.embedding(idx, weight))
        torch.testing.assert_close(embedding(input=idx, weight=weight), F.embedding(input=idx, weight=weight))
    with pytest.raises(DispatchError, match="input"):
        embedding(torch.zeros(3), weight)  # float indices are rejected
    with pytest.raises(DispatchError, match="weight"):
        embedding(torch.zeros(3, dtype=torch.long), torch.randn(5))


def test_negative_indices_raise_like_torch():
    weight = torch.randn(5, 3)
    with pytest.raises(IndexError):
        F.embedding(torch.tensor([1, -1]), weight)
    with pytest.raises(IndexError):
        embedding.reference(torch.tensor([1, -1]), weight)
    with pytest.raises(IndexError):
        embedding.reference(torch.tensor([5]), weight)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_path_adds_no_host_device_sync():
    # torch's sync debug mode raises on any synchronizing call: the index check stays on the device
    weight = torch.randn(64, 16, device="cuda")
    indices = torch.randint(0, 64, (128,), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = embedding.reference(indices, weight)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(out, weight[indices])
