import itertools, torch, warnings
warnings.filterwarnings("ignore")
from popcorn.kernels.attn import attn
print(torch.__version__, torch.cuda.get_device_name(), torch.backends.cudnn.version())
bad = []
n = 0
for dt, hd, gqa, causal, grad, seq in itertools.product(
        [torch.float16, torch.bfloat16, torch.float32, torch.float64], [4, 8, 12, 17, 20, 36, 64, 72, 100, 104, 128, 136, 160, 256, 288],
        [False, True], [False, True], [False, True], [1, 2, 3, 37]):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 4, seq, hd, device="cuda", dtype=dt, generator=g)
    k = torch.randn(2, 2 if gqa else 4, seq, hd, device="cuda", dtype=dt, generator=g)
    v = torch.randn(2, 2 if gqa else 4, seq, hd, device="cuda", dtype=dt, generator=g)
    want = attn(q, k, v, causal=causal)
    for name in ["sdpa:flash", "sdpa:efficient", "sdpa:cudnn", "sdpa:math"]:
        impl = attn[name]
        args = dict(q=q, k=k, v=v, causal=causal, scale=None)
        accepts = impl.rejects(args, grad) is None
        try:
            qq, kk, vv = (t.detach().clone().requires_grad_(grad) for t in (q, k, v))
            out = impl.fn(qq, kk, vv, causal, None)
            if grad:
                out.float().sum().backward()
            torch.cuda.synchronize()
            err = (out.double() - want.double()).abs().max().item()
            runs = True
            if err > max(1.0, want.abs().max().item()) * (3e-2 if dt in (torch.float16, torch.bfloat16) else 1e-4):
                bad.append(("INACCURATE", name, str(dt), hd, gqa, causal, grad, seq, err))
        except Exception as e:
            runs = False
            msg = str(e).split("\n")[0][:100]
        n += 1
        if runs != accepts:
            bad.append(("MISMATCH", name, str(dt), hd, gqa, causal, grad, seq, "runs" if runs else msg, "accepts" if accepts else impl.rejects(args, grad)))
print(n, "checks")
import os, json, collections
open(os.path.join(os.environ.get("OUT", "."), "probe.json"), "w").write(json.dumps(bad))
agg = collections.defaultdict(collections.Counter)
for b in bad:
    kind, name, dt, hd, gqa, causal, grad, seq = b[:8]
    d = kind if kind != "MISMATCH" else ("DECLINED_BUT_RUNS" if b[8] == "runs" else "ACCEPTED_BUT_FAILS")
    agg[(d, name, dt.removeprefix("torch."), "gqa" if gqa else "mha", "seq=%d" % seq)][hd] += 1
for key in sorted(agg, key=str):
    print(key, dict(sorted(agg[key].items())))
msgs = collections.Counter((b[0], b[1], b[8] if b[0] == "MISMATCH" else "err") for b in bad)
print(msgs)
