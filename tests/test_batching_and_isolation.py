"""Concurrent load on the real embedded server (cpu profile, the production configs):
dynamic batches form across requests of different byte lengths, a bad image among good
ones fails only its own request, and EXIF-rotated photos come out upright on both paths."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from harness.client import IMAGE, InferenceError, TritonClient
from harness.packing import pack_images
from harness.preflight.bad_images import bad_images
from loadtest.metrics import breakdown, scrape
from tests.conftest import encode

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg", "rocket.jpg", "aero3.jpg",
          "home.jpg"]


def hammer(server, requests, clients: int = 8):
    """Send ``requests`` [(kind, model, image bytes)] from ``clients`` threads at once;
    returns [(kind, error message or None)] in order."""

    def send(chunk):
        out = []
        with TritonClient(server.url("grpc"), "grpc") as client:
            for kind, model, data in chunk:
                try:
                    if model.startswith("classify_"):
                        client.classify([data], model.removeprefix("classify_"), top_k=1)
                    else:
                        client.infer(model, {IMAGE: pack_images([data])}, ["INPUT"])
                    out.append((kind, None))
                except InferenceError as exc:
                    out.append((kind, str(exc)))
        return out

    chunks = [requests[i::clients] for i in range(clients)]
    with ThreadPoolExecutor(clients) as pool:
        return [r for chunk in pool.map(send, chunks) for r in chunk]


def mixed(photo, model: str, rounds: int = 4):
    good = [photo(n) for n in PHOTOS]
    bad = bad_images(photo("squirrel_cls.jpg"))
    requests = []
    for r in range(rounds):
        for i, data in enumerate(good):
            requests.append(("good", model, data))
            name = list(bad)[(r + i) % len(bad)]
            requests.append((name, model, bad[name]))
    return requests


def test_preprocessing_models_batch_across_requests_of_different_lengths(server, photo):
    assert len({len(photo(n)) for n in PHOTOS}) == len(PHOTOS)
    before = scrape(server.metrics_url)
    results = hammer(server, [("good", f"classify_{p}", photo(n)) for _ in range(6) for n in PHOTOS for p in ("dali", "opencv")])
    after = scrape(server.metrics_url)
    assert all(error is None for _, error in results)
    for model in ("validate_image", "preprocess_dali", "preprocess_opencv", "classifier"):
        stats = breakdown(before, after, model)
        assert stats.requests >= 6 * len(PHOTOS) and stats.avg_batch > 1.0, stats


def test_a_bad_image_among_concurrent_good_ones_fails_only_itself(server, photo):
    results = hammer(server, mixed(photo, "classify_dali"))
    good = [error for kind, error in results if kind == "good"]
    bad = [(kind, error) for kind, error in results if kind != "good"]
    assert good and all(error is None for error in good), [e for e in good if e]
    assert bad and all(error for _, error in bad)
    reasons = {kind: error for kind, error in bad}
    assert "truncated JPEG" in reasons["truncated JPEG"]
    assert "65500x65500 pixels" in reasons["65500x65500 frame header"]
    assert "corrupt JPEG" in reasons["bogus Huffman table"]  # the header reads fine: validation decodes
    assert "in ensemble 'classify_dali'" in reasons["text file"]


def test_without_the_validation_step_one_bad_image_fails_its_whole_dali_batch(server, photo):
    # The same load sent straight to preprocess_dali: the cpu profile fails a whole dynamic
    # batch on one decoding error, as the DALI backend does. This is what validate_image
    # prevents (and proves the test above could fail).
    results = hammer(server, mixed(photo, "preprocess_dali", rounds=6), clients=12)
    failed_good = [error for kind, error in results if kind == "good" and error]
    assert failed_good and all("the DALI batch of" in e for e in failed_good)


def rotated(image: Image.Image, orientation: int) -> bytes:
    """A JPEG storing ``image`` turned so that EXIF ``orientation`` turns it upright again."""
    turn = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}[orientation]
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(image.transpose(turn), "JPEG", quality=95, exif=exif.tobytes())


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_rotated_photos_come_out_upright_and_equal_on_both_paths(client, squirrel_image, orientation):
    data = rotated(squirrel_image, orientation)
    upright = np.asarray(squirrel_image)
    dali, opencv = client.stages(data, "dali"), client.stages(data, "opencv")
    assert dali["decode"].shape == opencv["decode"].shape == upright.shape
    assert np.array_equal(dali["decode"], opencv["decode"])  # one libjpeg, one orientation
    # Upright: closer to the original than any other orientation would be (JPEG re-encoding
    # moves pixels a little; a wrong turn moves them a lot).
    error = np.abs(dali["decode"].astype(int) - upright).mean()
    assert error < 5, error
    for stage in ("resize", "crop", "input"):
        assert np.abs(dali[stage] - opencv[stage]).max() <= (1.0 if stage != "input" else 1 / 128 + 1e-5)
    logits = {p: client.logits([data], p)[0] for p in ("dali", "opencv")}
    assert np.argmax(logits["dali"]) == np.argmax(logits["opencv"])
    assert np.abs(logits["dali"] - logits["opencv"]).max() < 0.5


def test_a_bmp_claiming_more_rows_than_it_holds_is_refused_and_serving_goes_on(client, squirrel_image, photo):
    # DALI's BMP decoder reads past the end of such a file and takes the process down
    # (the taps model's stub died on one from the fuzz campaign): validation refuses it first.
    from harness.preflight.bad_images import bmp_claiming_rows

    lying = bmp_claiming_rows(encode(squirrel_image, "BMP"), 131232)
    for call in (lambda: client.stages(lying, "dali"), lambda: client.classify([lying], "dali")):
        with pytest.raises(InferenceError, match="truncated BMP: its header declares"):
            call()
    assert client.is_ready("preprocess_dali_stages") and client.is_ready("preprocess_dali")
    assert client.classify([photo("baboon.jpg")], "dali")[0][0].label == "baboon"


@pytest.mark.parametrize("pipeline", ["dali", "opencv"])
def test_an_image_the_resize_would_blow_up_is_refused_and_serving_goes_on(client, photo, pipeline):
    # 1x65500 pixels pass every decoder's limit; resized to a shorter side of 256 they would
    # be 256x16.8M pixels (12 GiB) and the process would be killed, not told.
    from PIL import Image

    sliver = encode(Image.new("RGB", (65500, 1), (90, 120, 30)), "JPEG")
    for call in (lambda: client.stages(sliver, pipeline), lambda: client.classify([sliver], pipeline)):
        with pytest.raises(InferenceError, match="image too elongated"):
            call()
    assert client.classify([photo("baboon.jpg")], pipeline)[0][0].label == "baboon"
