# Peer for m2n's FP8 quantize on the GPU: DeepSeek-V3's 128x128 block quantize of a bf16 weight as a
# PyTorch user writes it (eager, and torch.compile), against a plain copy of the same bytes, with
# m2n's rule (s = amax * float32(1/448), q = f32(x)/s clamped); reports whether compile's bytes equal eager's.
# Copied from the project's shared peers so that it travels with m2n: `refit quant-bench` embeds it and runs
# it beside its own figures (python3 torch_fp8_block.py [M K], both multiples of 128; default 16384 32768).
import sys, time, torch
dev = torch.device("cuda"); M, K = 16384, 32768  # 1 GiB of bf16, as refit quant-bench
if len(sys.argv) == 3:
    M, K = int(sys.argv[1]), int(sys.argv[2])
x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
def quant(x):
    m, k = x.shape
    b = x.view(m // 128, 128, k // 128, 128).float()
    amax = b.abs().amax(dim=(1, 3), keepdim=True)
    s = torch.where(amax == 0, torch.ones_like(amax), amax * torch.tensor(1 / 448, dtype=torch.float32, device=x.device))
    q = (b / s).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.view(m, k), s.view(m // 128, k // 128)
def timed(f, n=20):
    f(); torch.cuda.synchronize(); ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    ts.sort(); return ts[len(ts) // 2]
y = torch.empty_like(x)
tc = timed(lambda: y.copy_(x)); te = timed(lambda: quant(x))
print(f"torch peer, {M*K*2/2**30:g} GiB bf16 {M}x{K}, 128x128 blocks, median of 20")
print(f"  copy_ of the bf16 bytes:      {tc*1e6:8.1f} us ({x.numel()*2/tc/1e9:.0f} GB/s)")
print(f"  eager block quantize:         {te*1e6:8.1f} us ({tc/te*100:.1f}% of the copy)")
try:
    qc = torch.compile(quant)
    tq = timed(lambda: qc(x))
    a, sa = quant(x); b, sb = qc(x)
    same = torch.equal(a.view(torch.uint8), b.view(torch.uint8)) and torch.equal(sa, sb)
    print(f"  torch.compile block quantize: {tq*1e6:8.1f} us ({tc/tq*100:.1f}% of the copy; same bytes as eager: {same})")
except Exception as e:
    print("  torch.compile failed:", type(e).__name__, str(e)[:200])
