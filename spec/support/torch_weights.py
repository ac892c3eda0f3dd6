"""spec/support/torch_weights.py: weights for an exported tcl model, written by PyTorch's side.

    python3 torch_weights.py MODEL WEIGHTS INPUT OUTPUT

Builds MODEL ("mlp", "affine" or "cnn", the architectures of spec/export/export_spec.lua's "weights
written by PyTorch") in torch with torch's own seeded initialization, writes its state_dict
to WEIGHTS as a safetensors file (by hand: torch 1.13 has no safetensors module; an 8-byte
little-endian header length, the JSON header, the tensors' bytes in state_dict order, nothing
else: no padding, no metadata), and writes the model's first output on INPUT (the raw float32
bytes of the input tensor) to OUTPUT as raw float32 bytes.

Names: tcl's nn.Sequential numbers its members from 1 and keeps them under `layers`, PyTorch's
from 0 at the top: PyTorch's "<i>.<rest>" is tcl's "layers.<i+1>.<rest>". A bare Linear is
"weight" and "bias" in both.
"""
import json
import struct
import sys

import torch
from torch import nn


def build(kind):
    torch.manual_seed(5)
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
        return model, [784], lambda x: model(x).softmax(-1)
    if kind == "affine":
        model = nn.Linear(4, 3)
        scale = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).sum(0)
        shift = torch.tensor([0.5, 1.0, 2.0])
        return model, [4], lambda x: model(x) * scale + shift
    if kind == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(1), nn.Linear(4 * 3 * 3, 5))
        return model, [1, 8, 8], lambda x: model(x).log_softmax(-1)
    raise SystemExit("unknown model " + kind)


def tcl_name(name, sequential):
    if not sequential:
        return name
    index, rest = name.split(".", 1)
    return "layers.%d.%s" % (int(index) + 1, rest)


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, t in tensors:
        data = t.detach().contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def main():
    kind, weights_path, input_path, output_path = sys.argv[1:5]
    model, item_shape, forward = build(kind)
    sequential = isinstance(model, nn.Sequential)
    write_safetensors(weights_path, [(tcl_name(n, sequential), t) for n, t in model.state_dict().items()])
    with open(input_path, "rb") as f:
        raw = f.read()
    x = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape([-1] + item_shape)
    with torch.no_grad():
        y = forward(x)
    with open(output_path, "wb") as f:
        f.write(y.contiguous().numpy().tobytes())


if __name__ == "__main__":
    main()
