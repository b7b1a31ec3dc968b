"""How an encoded file goes into a model: no server needed (the server-side behaviour of each
kind is tested against real models in test_discovery.py and test_foreign.py)."""

import numpy as np
import pytest

from harness.deployment.base import ImageRequest
from harness.deployment.discovery import TensorInfo
from harness.packing import pack_images

RAGGED = TensorInfo("IMAGE", "TYPE_UINT8", (-1,))
BYTES = TensorInfo("encoded", "TYPE_STRING", (1,))


def test_ragged_uint8_is_one_zero_padded_row_per_file():
    batch = pack_images([b"\x01\x02\x03", b"\x04"])
    assert batch.dtype == np.uint8 and batch.tolist() == [[1, 2, 3], [4, 0, 0]]
    assert ImageRequest("m", RAGGED, batched=True).inputs([b"\x01\x02\x03"])["IMAGE"].shape == (1, 3)
    assert ImageRequest("m", RAGGED, batched=False).inputs([b"\x01\x02\x03"])["IMAGE"].tolist() == [1, 2, 3]


def test_bytes_is_one_object_per_file():
    batched = ImageRequest("m", BYTES, batched=True).inputs([b"ab", b"c"])["encoded"]
    assert batched.dtype == object and batched.shape == (2, 1) and batched[1, 0] == b"c"
    alone = ImageRequest("m", BYTES, batched=False).inputs([b"ab"])["encoded"]
    assert alone.shape == (1,) and alone[0] == b"ab"


def test_an_unbatched_model_takes_one_file_a_request():
    request = ImageRequest("m", BYTES, batched=False)
    assert request.max_images == 1 and ImageRequest("m", BYTES, batched=True).max_images is None
    with pytest.raises(ValueError, match="not batched"):
        request.inputs([b"a", b"b"])
