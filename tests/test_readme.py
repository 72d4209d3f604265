"""The README's Llama block runs as written, eager and compiled whole, and trains like plain PyTorch."""

import re
from pathlib import Path

import torch

README = Path(__file__).parents[1] / "README.md"


def llama_block():
    block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "def llama_block" in b)
    namespace: dict = {}
    exec(block, namespace)  # the README's own text
    return namespace["llama_block"]


def params(hidden=32, heads=4, kv_heads=2, inter=48, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    head_dim = hidden // heads

    def w(*shape):
        return (torch.randn(*shape, generator=g) * shape[-1] ** -0.5).requires_grad_()
    return {"embed": w(vocab, hidden), "attn_norm": torch.ones(hidden, requires_grad=True),
            "wq": w(hidden, hidden), "wk": w(kv_heads * head_dim, hidden), "wv": w(kv_heads * head_dim, hidden),
            "wo": w(hidden, hidden), "mlp_norm": torch.ones(hidden, requires_grad=True),
            "w_gate": w(inter, hidden), "w_up": w(inter, hidden), "w_down": w(hidden, inter),
            "final_norm": torch.ones(hidden, requires_grad=True)}


def rotary(seq, head_dim):
    inv = 10000.0 ** (-torch.arange(0, head_dim, 2).double() / head_dim)
    emb = torch.cat([torch.outer(torch.arange(seq).double(), inv)] * 2, -1).float()
    return emb.cos()[None], emb.sin()[None]


def test_the_readme_llama_block_runs_eager_and_compiled_and_agrees(tmp_path, monkeypatch):
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    block = llama_block()
    tokens, targets = torch.randint(0, 50, (2, 6)), torch.randint(0, 50, (2, 6))
    cos, sin = rotary(6, 8)
    p_eager, p_comp = params(), params()
    eager = block(tokens, targets, p_eager, cos, sin, 4, 2)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")(tokens, targets, p_comp, cos, sin, 4, 2)
    torch.testing.assert_close(compiled, eager)
    eager.backward()
    compiled.backward()
    for name in p_eager:
        torch.testing.assert_close(p_comp[name].grad, p_eager[name].grad, msg=lambda m: f"{name}: {m}")
