"""`hpctrain checkpoint consolidate` read back by torch.

A torch model and its Adam state are written as a 3-rank sharded checkpoint
by this script itself, following docs/checkpoints.md byte for byte (so the
documented format is what hpctrain reads), split unevenly over the ranks.
`hpctrain checkpoint consolidate` turns it into one file; torch.load with
weights_only=True (torch's default) must give back every tensor bit for bit,
and load_state_dict must accept the model part. Then the errors a user meets:
no index, a missing shard (named, with the ranks whose files are needed), a
bit-flipped shard (named; the directory form falls back to the older one).

    python3 checkpoint_consolidate_test.py path/to/hpctrain
"""
import json
import os
import subprocess
import sys
import tempfile

import torch

MAGIC = b"HPCTSHD1"
DTYPES = {torch.float32: "float32", torch.int64: "int64", torch.bfloat16: "bfloat16"}


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def raw_bytes(t):
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def write_sharded(folder, step, tensors, world, cuts_for):
    """tensors: name -> tensor; cuts_for(numel, world) -> rank boundaries."""
    os.makedirs(folder, exist_ok=True)
    files, index_tensors = [], {}
    for rank in range(world):
        name = "shard-%05d-of-%05d.bin" % (rank, world)
        out = bytearray(MAGIC)
        for tname, t in sorted(tensors.items()):
            cuts = cuts_for(t.numel(), world)
            lo, hi = cuts[rank], cuts[rank + 1]
            if hi == lo:
                continue
            out += b"\0" * ((64 - len(out) % 64) % 64)
            piece = raw_bytes(t)[lo * t.element_size():hi * t.element_size()]
            entry = index_tensors.setdefault(
                tname, {"shape": list(t.shape), "dtype": DTYPES[t.dtype], "pieces": []})
            entry["pieces"].append({"file": rank, "offset": lo, "numel": hi - lo, "at": len(out),
                                    "crc32c": crc32c(piece)})
            out += piece
        with open(os.path.join(folder, name), "wb") as f:
            f.write(out)
        files.append({"name": name, "rank": rank, "bytes": len(out), "crc32c": crc32c(bytes(out))})
    index = {"format": "hpctrain-sharded-1", "step": step, "world_size": world, "meta": {},
             "files": files, "tensors": index_tensors}
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump(index, f)


def uneven(numel, world):
    cuts = [0, min(numel, 1)]
    while len(cuts) < world:
        cuts.append(min(numel, cuts[-1] + numel // 5))
    return cuts + [numel]


def run(hpctrain, *args):
    p = subprocess.run([hpctrain, "checkpoint", *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def trained_state():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.ReLU(), torch.nn.Linear(13, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 7)).square().sum().backward()
        opt.step()
    tensors = {"param/" + k: v for k, v in model.state_dict().items()}
    names = [k for k, _ in model.named_parameters()]
    for i, st in opt.state_dict()["state"].items():
        tensors["optim/%s/exp_avg" % names[i]] = st["exp_avg"]
        tensors["optim/%s/exp_avg_sq" % names[i]] = st["exp_avg_sq"]
    tensors["other/step"] = torch.tensor(3, dtype=torch.int64)
    tensors["other/tiny"] = torch.tensor([1.5, -2.25], dtype=torch.bfloat16)
    return model, tensors


def main():
    hpctrain = sys.argv[1]
    model, tensors = trained_state()
    with tempfile.TemporaryDirectory() as d:
        ckpt = os.path.join(d, "ckpt")
        write_sharded(os.path.join(ckpt, "sharded-0000000010"), 10, {k: v * 0 for k, v in tensors.items()},
                      3, uneven)
        write_sharded(os.path.join(ckpt, "sharded-0000000020"), 20, tensors, 3, uneven)
        out = os.path.join(d, "model.pt")
        rc, text = run(hpctrain, "consolidate", ckpt, "-o", out)
        assert rc == 0, text
        assert json.loads(text.strip().splitlines()[-1])["step"] == 20, text
        got = torch.load(out, weights_only=True)
        assert got["format"] == "hpctrain-consolidated-1" and got["step"] == 20 and got["world_size"] == 3, got
        for name, want in tensors.items():
            kind, rest = name.split("/", 1)
            if kind == "param":
                have = got["model"][rest]
            elif kind == "optim":
                param, key = rest.rsplit("/", 1)
                have = got["optimizer"][param][key]
            else:
                have = got["other"][name]
            assert have.dtype == want.dtype and have.shape == want.shape, (name, have, want)
            assert raw_bytes(have) == raw_bytes(want), name
        fresh = torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.ReLU(), torch.nn.Linear(13, 3))
        fresh.load_state_dict(got["model"])
        x = torch.randn(4, 7)
        assert torch.equal(fresh(x), model(x))
        print("consolidated %d tensors, bit-exact through torch.load(weights_only=True)" % len(tensors))

        # --format hpctrain needs the training run's meta: refused by name.
        rc, text = run(hpctrain, "consolidate", ckpt, "-o", os.path.join(d, "x.pt"), "--format", "hpctrain")
        assert rc != 0 and "--format torch consolidates any sharded checkpoint" in text, text

        # A bit flip in rank 1's file of step 20: named; the directory falls back to step 10.
        bad = os.path.join(ckpt, "sharded-0000000020", "shard-00001-of-00003.bin")
        with open(bad, "r+b") as f:
            f.seek(64)  # the first piece's first byte
            b = f.read(1)
            f.seek(64)
            f.write(bytes([b[0] ^ 1]))
        rc, text = run(hpctrain, "consolidate", os.path.join(ckpt, "sharded-0000000020"), "-o", out)
        assert rc != 0 and bad in text and "CRC-32C" in text, text
        rc, text = run(hpctrain, "consolidate", ckpt, "-o", out)
        assert rc == 0 and bad in text and '"step":10' in text, text

        # No index; a missing shard names the file and the ranks needed.
        os.remove(os.path.join(ckpt, "sharded-0000000020", "index.json"))
        rc, text = run(hpctrain, "consolidate", os.path.join(ckpt, "sharded-0000000020"), "-o", out)
        assert rc != 0 and "index.json is missing" in text, text
        os.remove(os.path.join(ckpt, "sharded-0000000010", "shard-00002-of-00003.bin"))
        rc, text = run(hpctrain, "consolidate", os.path.join(ckpt, "sharded-0000000010"), "-o", out)
        assert rc != 0 and "shard-00002-of-00003.bin (rank 2 of 3) cannot be read" in text, text
        assert "needs the files of all 3 ranks" in text, text
        rc, text = run(hpctrain, "consolidate", os.path.join(d, "nowhere"), "-o", out)
        assert rc != 0 and "no such checkpoint directory" in text, text
        print("errors: bit flip, no index, missing shard, missing directory named")


if __name__ == "__main__":
    main()
