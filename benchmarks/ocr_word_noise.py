"""How far the DALI recognition preprocessing moves the recognizer's answer from OpenCV's, on the
same boxes: the evidence behind the word tie margins (``WordRules``, docs/ocr.md).

For every photo of the folders given: the reference detector's boxes (the spec's resize and
``[postprocess]``), then each box's word two ways, on DALI's CPU kernels and on OpenCV, with
the same recognizer (ONNX Runtime):

- the reference's: ``crop_box`` and ``to_input`` (OpenCV: ``warpPerspective``, ``cv2.resize``),
  what training did (:mod:`harness.ocr.recognition`);
- the deployment's: the ``ocr_preprocess_dali`` graph (:mod:`harness.ocr.dali_recognition`).

Printed: how much the crops and inputs differ; per word, the largest change of a recognizer
probability; per step, how far the two preprocessings move the reference's best class's lead
over any other class (where it exceeds the reference's lead, the step's best class changes);
the steps whose best class changed (most move a character by one step, as CTC alignments do,
and read alike); the words read otherwise, with the reference's lead at each step the change
needed (:func:`harness.ocr.compare.needed_leads`); the text score changes of words read alike,
and the words kept on one side of the threshold only. A word read otherwise whose needed leads
are all within the tie margin (``WordRules.text_margin``) is a tie; the margin covers the
largest needed lead on a corpus the check is not judged on, as ``score_margin`` the largest
score change.

    .venv/bin/python benchmarks/ocr_word_noise.py DIR [DIR ...] [--spec model_repository/ocr.toml] [--limit N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import DEFAULT_REPOSITORY  # noqa: E402

SUFFIXES = (".jpg", ".jpeg", ".png")


def lead_moves(reference: np.ndarray, deployed: np.ndarray) -> np.ndarray:
    """Per step: how far ``deployed`` moved the lead of the reference's best class over any other
    class (``(p_ref[a] - p_ref[b]) - (p_dep[a] - p_dep[b])`` at its largest over ``b``)."""
    best = reference.argmax(axis=1)
    rows = np.arange(len(best))
    rise = deployed - reference
    rise[rows, best] = -np.inf
    return (reference[rows, best] - deployed[rows, best]) + rise.max(axis=1)


def main(argv=None) -> int:
    import cv2

    from harness.detection.boxes import greedy_match, iou_matrix
    from harness.detection.detector import OUTPUT_NAME, TextDetector
    from harness.detection.postprocess import from_table
    from harness.geometry import Geometry
    from harness.ocr.compare import needed_leads
    from harness.ocr.dali_recognition import CpuRecognitionRunner, word_samples
    from harness.ocr.recognition import CtcDecoder, parameters, to_input
    from harness.ocr.recognizer import TextRecognizer
    from harness.operations.word_crop import crop_box
    from harness.preprocessing.dali_graph import CpuPipelineRunner
    from harness.spec import load_spec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--spec", type=Path, default=DEFAULT_REPOSITORY / "ocr.toml")
    parser.add_argument("--limit", type=int, default=0, help="at most this many photos of each folder (0: all)")
    args = parser.parse_args(argv)
    spec = load_spec(args.spec)
    p = parameters(spec.recognition)
    detector = TextDetector(spec.preprocess.resize.detector(), from_table(spec.postprocess).params)
    recognizer = TextRecognizer()
    decoder = CtcDecoder(recognizer.characters, p.blank_index)
    dali = CpuRecognitionRunner(p, spec.preprocess.decode, batch_size=1)
    dali_detector = CpuPipelineRunner(spec.preprocess, 1)  # the detect_preprocess_dali graph: input, GEOMETRY
    photos = []
    for folder in args.folders:
        found = sorted(f for f in folder.rglob("*") if f.suffix.lower() in SUFFIXES) if folder.is_dir() else [folder]
        photos += found[:args.limit] if args.limit else found

    words, crop_means, crop_max, input_max, output_max, moves, changed = 0, [], 0.0, 0.0, [], [], []
    flipped, score_moves, kept_flips = [], [], []  # every step whose best class changed; |score change|; kept or not
    own_words, by_box, by_recognition = 0, [], []  # each side's own boxes: changes the box made, and the others
    for n, photo in enumerate(photos, 1):
        data = photo.read_bytes()
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if bgr is None:
            continue
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        quads = detector(bgr).detections.quads
        if not len(quads):
            continue
        served = dali.run(word_samples(data, quads, p, rgb.shape[:2]))
        for quad, (dali_crop, dali_input) in zip(quads, served):
            words += 1
            crop = crop_box(rgb, quad, p)
            x = to_input(crop, p, "RGB")
            if crop.shape == dali_crop.shape:
                diff = np.abs(crop.astype(np.float64) - dali_crop)
                crop_means.append(diff.mean())
                crop_max = max(crop_max, float(diff.max()))
            if x.shape != dali_input.shape:
                changed.append((photo.name, "input shapes differ", "", []))
                continue
            input_max = max(input_max, float(np.abs(x - dali_input).max()))
            ref, dep = recognizer(x), recognizer(dali_input)
            output_max.append(float(np.abs(ref - dep).max()))
            moves.append(lead_moves(ref, dep))
            (ref_text, ref_score), (dep_text, dep_score) = decoder(ref), decoder(dep)
            steps = np.flatnonzero(ref.argmax(axis=1) != dep.argmax(axis=1))
            flipped += [(float(ref[t].max() - ref[t, dep[t].argmax()]), photo.name, int(t), ref_text, dep_text)
                        for t in steps]
            if ref_text == dep_text:
                score_moves.append(abs(dep_score - ref_score))
            if p.keeps(ref_score) != p.keeps(dep_score):
                kept_flips.append((photo.name, ref_text, ref_score, dep_score))
            if ref_text != dep_text:
                changed.append((photo.name, ref_text, dep_text, needed_leads(ref, dep, decoder.text)))
        # each side's own boxes, as check compares them: the DALI detector graph on DALI's CPU kernels
        result = dali_detector.run([np.frombuffer(data, np.uint8)])[0]
        if result.error is None:
            model_input, geometry = result.outputs
            probability = detector.probability(model_input[None])
            deployed = detector.postprocess({OUTPUT_NAME: probability[0]}, Geometry.from_tensor(geometry)).quads
            pairs = greedy_match(iou_matrix(quads, deployed), np.ones(len(quads)), 0.5)
            made = dali.run(word_samples(data, deployed[[d for _, d in pairs]], p, rgb.shape[:2])) if pairs else []
            for (r, d), (_, dali_input) in zip(pairs, made):
                own_words += 1
                ref = recognizer(to_input(crop_box(rgb, quads[r], p), p, "RGB"))
                dep = recognizer(dali_input)
                (ref_text, ref_score), (dep_text, dep_score) = decoder(ref), decoder(dep)
                if ref_text == dep_text and p.keeps(ref_score) == p.keeps(dep_score):
                    continue
                # made by the box: the reference's own reading of the deployed box gives the deployed answer
                box = decoder(recognizer(to_input(crop_box(rgb, deployed[d], p), p, "RGB")))
                moved = float(np.abs(quads[r] - deployed[d]).max())
                row = (photo.name, ref_text, dep_text, needed_leads(ref, dep, decoder.text), moved, ref_score, dep_score)
                (by_box if box[0] == dep_text and p.keeps(box[1]) == p.keeps(dep_score) else by_recognition).append(row)
        if n % 25 == 0:
            print(f"... {n} of {len(photos)} photos, {words} words", file=sys.stderr)

    steps = np.concatenate(moves) if moves else np.zeros(0)
    print(f"{len(photos)} photos, {words} words, {len(steps)} recognizer steps; spec {args.spec}")
    if crop_means:
        print(f"crop: mean difference up to {max(crop_means):.4f} levels (mean {np.mean(crop_means):.5f}), "
              f"largest {crop_max:.0f} levels")
    print(f"input: largest difference {input_max:.5f} ({input_max * 127.5:.2f} levels)")
    if output_max:
        q = np.quantile(output_max, [0.5, 0.99, 1.0])
        print(f"output, per word, largest probability change: median {q[0]:.5f}, p99 {q[1]:.4f}, max {q[2]:.4f}")
    if len(steps):
        q = np.quantile(steps, [0.5, 0.99, 0.999, 1.0])
        print(f"lead move per step: median {q[0]:.2e}, p99 {q[1]:.4f}, p99.9 {q[2]:.4f}, max {q[3]:.4f}")
    if score_moves:
        q = np.quantile(score_moves, [0.5, 0.99, 1.0])
        print(f"text score change of a word read alike: median {q[0]:.5f}, p99 {q[1]:.4f}, max {q[2]:.4f}")
    leads = np.array([f[0] for f in flipped])
    if len(leads):
        q = np.quantile(leads, [0.5, 0.9, 0.99, 1.0])
        print(f"steps whose best class changed: {len(leads)}; the reference's lead there: median {q[0]:.4f}, "
              f"p90 {q[1]:.4f}, p99 {q[2]:.4f}, max {q[3]:.4f}")
        for lead, name, step, ref_text, dep_text in sorted(flipped, reverse=True)[:5]:
            print(f"  lead {lead:.4f}: {name} step {step} ({ref_text!r} -> {dep_text!r})")
    print(f"words read otherwise: {len(changed)} of {words}; the largest lead a change needed: "
          f"{max((lead for *_, leads in changed for _, lead in leads), default=0):.4f}")
    for name, ref_text, dep_text, leads in changed:
        shown = ", ".join(f"step {t}: {lead:.3f}" for t, lead in leads)
        print(f"  {name}: {ref_text!r} -> {dep_text!r}; the reference's lead at the steps needed: {shown}")
    print(f"words kept on one side only (text_score {p.text_score}): {len(kept_flips)}")
    for name, text, ref_score, dep_score in kept_flips:
        print(f"  {name}: {text!r} scores {ref_score:.4f} -> {dep_score:.4f}")
    print(f"each side's own boxes (the DALI detector graph): {own_words} matched words; answers changed by the box "
          f"{len(by_box)}, by the recognition preprocessing {len(by_recognition)}; the largest lead a change made by "
          f"the box needed: {max((lead for row in by_box for _, lead in row[3]), default=0):.4f}")
    for cause, rows in (("box", by_box), ("recognition", by_recognition)):
        for name, ref_text, dep_text, leads, moved, ref_score, dep_score in rows:
            shown = ", ".join(f"step {t}: {lead:.3f}" for t, lead in leads)
            print(f"  {cause}: {name}: {ref_text!r} ({ref_score:.3f}) -> {dep_text!r} ({dep_score:.3f}); a corner moved "
                  f"{moved:.1f} px; leads needed: {shown or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
