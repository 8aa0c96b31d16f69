"""The compiled symbol stack alone: n forward steps, then n backward steps, B = 10, one thread, float32,
process time in ms: forward and backward the fastest of 9 runs, total_min their sum, total_median the sum of the medians.
PYTHONPATH=<checkout> python kernel.py Q,S,n,B ... (as run: 2,3,40,10 2,3,60,10 2,3,80,10 3,3,40,10 3,3,60,10 3,3,80,10)"""
import sys, time, json, statistics
import torch
from stacklm.kernels import symbol_stack as ks

torch.set_num_threads(1)
ks.load()
ops = torch.ops.stacklm_symbol_stack

def run(Q, S, n, B, reps, dtype=torch.float32):
    N = Q * S
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(B, n, N * (2 * N + Q), generator=g, dtype=dtype)
    grads = torch.randn(B, n, N, generator=g, dtype=dtype)  # r_t over configurations (states_in_reading)
    fw, bw = [], []
    for _ in range(reps):
        shares, alpha, totals, scales = ops.start(logits, B, n, Q, S)
        t0 = time.process_time()
        for t in range(1, n + 1):
            ops.step(t, Q, S, logits[:, t - 1], True, shares, alpha, totals, scales, True)
        t1 = time.process_time()
        adjoint = torch.zeros_like(shares); grad_alpha = torch.zeros_like(alpha)
        t2 = time.process_time()
        for t in range(n, 0, -1):
            ops.step_backward(t, Q, S, grads[:, t - 1].contiguous(), logits[:, t - 1], True, shares, alpha, totals, scales, adjoint, grad_alpha, True)
        t3 = time.process_time()
        fw.append((t1 - t0) * 1e3); bw.append((t3 - t2) * 1e3)
    return min(fw), min(bw), statistics.median(fw), statistics.median(bw)

cases = [tuple(map(int, c.split(','))) for c in sys.argv[1:]] or [(2,3,60,10),(2,3,80,10),(3,3,60,10),(3,3,80,10)]
for Q, S, n, B in cases:
    f, b, fm, bm = run(Q, S, n, B, 9)
    print(json.dumps(dict(Q=Q, S=S, n=n, B=B, forward_ms=round(f, 2), backward_ms=round(b, 2), total_min=round(f + b, 2), total_median=round(fm + bm, 2))), flush=True)
