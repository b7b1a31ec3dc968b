"""The foreign deployment's own postprocessing (``--postprocess FILE.py:argmax_at_source``):
its two-class logits upsampled to the source size (PIL bilinear), then the argmax; the matte is
the foreground's softmax probability."""

import numpy as np
from PIL import Image


def argmax_at_source(output, size):
    logits = np.asarray(output, np.float32).reshape(-1, *np.shape(output)[-2:])
    height, width = size
    up = np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(c), "F").resize((width, height), Image.BILINEAR))
                   for c in logits])
    e = np.exp(up - up.max(axis=0, keepdims=True))
    prob = e / e.sum(axis=0, keepdims=True)
    return prob[1], up.argmax(axis=0)

