"""What the whole-model tests (test_model.py, test_delta.py, test_lora.py,
test_lora_fp8.py) share: a small
Llama's config, config files every rank reads, and sources filled and
destinations checked, every element, through the parts Model.buffers
lists. values(tensor, layout_shape, itemsize) gives a tensor's global
array of raw bits (harness.raw): pattern's at a step (stepped), or any
other."""

import json
import os
import tempfile
import zlib

import numpy as np
from numpy.lib.stride_tricks import as_strided

from harness import box, comm, fail, pattern, rank, raw

LLAMA = {"model_type": "llama", "hidden_size": 64, "head_dim": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 256, "dtype": "bfloat16"}


def config(name, body):
    """A config.json that every rank reads (the model name, the file's,
    must agree): rank 0 writes it."""
    path = comm.bcast(os.path.join(tempfile.gettempdir(), "m2n-test-%s-%d.json" % (name, os.getpid())), root=0)
    if rank == 0:
        with open(path, "w") as f:
            json.dump(body, f)
    comm.Barrier()
    return path


def remove_config(path):
    """Removes a config() file once every rank is done with it."""
    comm.Barrier()
    if rank == 0:
        os.remove(path)


def seed(tensor):
    return zlib.crc32(tensor.encode()) & 0xffff


def stepped(step):
    """values: every tensor's pattern at step."""
    return lambda tensor, shape, itemsize: pattern(shape, itemsize, seed(tensor), step)


def part_view(buf, p):
    """The strided view of a buffer that holds one part."""
    b = raw(buf)
    return as_strided(b[p["view_offset"]:], shape=tuple(p["local_shape"]),
                      strides=tuple(st * b.itemsize for st in p["view_strides"]), writeable=True)


def fill(m, values):
    """The sources, filled through Model.parts (verify reads through
    part_view, the test's own)."""
    src = m.empty("src")
    parts = {p["entry"]: p for b in m.buffers("src").values() for p in b["parts"]}
    for entry, view in m.parts("src", {k: raw(a) for k, a in src.items()}).items():
        p = parts[entry]
        view[...] = box(values(p["tensor"], p["layout_shape"], view.itemsize), p["offset"], p["local_shape"])
    return src


def poisoned(m):
    dst = m.empty("dst")
    for a in dst.values():
        raw(a)[...] = np.array(0xAAAAAAAA).astype(raw(a).dtype)
    return dst


def verify(m, dst, values, what):
    """Checks every element of every part of this rank's destinations;
    returns how many parts."""
    parts = 0
    for name, b in m.buffers("dst").items():
        for p in b["parts"]:
            parts += 1
            want = box(values(p["tensor"], p["layout_shape"], dst[name].itemsize), p["offset"], p["local_shape"])
            got = part_view(dst[name], p)
            bad = np.argwhere(got != want)
            if len(bad):
                k = tuple(bad[0])
                fail("buffer %s, tensor %s, %s: %d of %d elements wrong; first at %s: got %#x, want %#x" %
                     (name, p["tensor"], what, len(bad), got.size, k, int(got[k]), int(want[k])))
    return parts


def bf16_bits(key, shape):
    """A global bfloat16 array (its raw bits) of normal values about 0.1,
    seeded by key: the same on every rank."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    f = (rng.standard_normal(int(np.prod(shape))) * 0.1).astype(np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16).reshape(shape)


def as_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def base_values(tensor, shape, itemsize):
    return bf16_bits(tensor, shape)


def adapter_values(step):
    return lambda tensor, shape, itemsize: bf16_bits("%s@%d" % (tensor, step), shape)
