"""Records how many bf16 weight elements change per optimizer step in RL-like
training: the change model of issue 27 (delta sync).

A small Llama built with transformers (random init) trains on generated
tokens with AdamW, as Megatron-Core does in bf16: float32 master weights, the
optimizer stepping them, and the bf16 weights a generator receives being the
master weights rounded to bf16 after every step. For each learning rate and
step it records, per tensor, the fraction of bf16 elements that differ from
the step before (what a delta sync would move).

  python3 bench/peers/change_model.py --out testdata/change-model.json \
      [--steps 300] [--lrs 1e-6,1e-5] [--hidden 512] [--layers 8]

The tokens: sequences from a fixed random bigram table (so that the loss
falls and the gradients keep a direction, as in training, rather than pure
noise). Runs on the GPU when there is one, else on the CPU (slowly); it needs
torch and transformers (on the H200 machine the python3 first on PATH).
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--lrs", default="1e-6,1e-5")
ap.add_argument("--hidden", type=int, default=512)
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--vocab", type=int, default=8192)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--seq", type=int, default=256)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()
dev = "cuda" if torch.cuda.is_available() else "cpu"


def tokens(gen, table):
    """A batch of sequences walked through the bigram table."""
    x = torch.empty(args.batch, args.seq, dtype=torch.long, device=dev)
    x[:, 0] = torch.randint(0, args.vocab, (args.batch,), generator=gen, device=dev)
    for i in range(1, args.seq):
        nxt = table[x[:, i - 1]]  # 4 likely successors per token
        pick = torch.randint(0, nxt.shape[1], (args.batch,), generator=gen, device=dev)
        x[:, i] = nxt[torch.arange(args.batch, device=dev), pick]
    return x


def run(lr):
    torch.manual_seed(args.seed)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3 // 64 * 64,
                      num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64, num_key_value_heads=max(1, args.hidden // 256),
                      max_position_embeddings=args.seq, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(dev, dtype=torch.float32)  # float32 master weights
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator(device=dev).manual_seed(args.seed + 1)
    table = torch.randint(0, args.vocab, (args.vocab, 4), generator=gen, device=dev)
    names = [n for n, _ in model.named_parameters()]
    prev = {n: p.detach().to(torch.bfloat16) for n, p in model.named_parameters()}
    frac = {n: [] for n in names}
    losses = []
    for step in range(args.steps):
        x = tokens(gen, table)
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 4))
        with torch.no_grad():
            for n, p in model.named_parameters():
                cur = p.detach().to(torch.bfloat16)
                changed = (cur.view(torch.int16) != prev[n].view(torch.int16)).sum().item()
                frac[n].append(float(f"{changed / cur.numel():.4g}"))
                prev[n] = cur
    shapes = {n: list(p.shape) for n, p in model.named_parameters()}
    return {"lr": lr, "loss": losses, "tensors": [{"name": n, "shape": shapes[n], "changed": frac[n]} for n in names]}


t0 = time.time()
runs = [run(float(lr)) for lr in args.lrs.split(",")]
out = {
    "about": "fraction of bf16 elements that change per AdamW step (float32 master weights rounded to bf16), "
             "per tensor, of a small Llama trained on bigram tokens; bench/peers/change_model.py",
    "command": "python3 bench/peers/change_model.py " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items() if k != "out"),
    "torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
    "config": {"hidden": args.hidden, "layers": args.layers, "vocab": args.vocab, "batch": args.batch, "seq": args.seq},
    "runs": runs,
}
with open(args.out, "w") as f:
    json.dump(out, f, separators=(",", ":"))
for r in runs:
    total = sum(len(t["changed"]) and 1 for t in r["tensors"])
    mean = [sum(t["changed"][s] * torch.Size(t["shape"]).numel() for t in r["tensors"]) /
            sum(torch.Size(t["shape"]).numel() for t in r["tensors"]) for s in range(args.steps)]
    print(f"lr {r['lr']:g}: loss {r['loss'][0]} -> {r['loss'][-1]}; changed elements per step (all weights): "
          f"step 1 {mean[0]:.4f}, step 10 {mean[min(9, args.steps - 1)]:.4f}, median {sorted(mean)[len(mean) // 2]:.4f}, last {mean[-1]:.4f}")
print(f"{time.time() - t0:.1f} s on {out['device']}")
