"""Group the ImageNet sample's photos by WordNet, for retrieval by label.

``../shared/datasets/imagenet-sample`` has one photo per class, so a photo's own class has
no other image to retrieve. Its group does: each class (a WordNet 3.0 noun, its WNID the
synset's offset) takes the nearest hypernym, along the first hypernym of each synset, that
at least :data:`MIN_GROUP` of the sample's classes share (e.g. ``dog``, ``bird``,
``container``); a class no group reaches gets none (unlabeled: not a query, still in the
gallery). Reads Debian's ``wordnet-base`` (``/usr/share/wordnet/data.noun``); writes
``imagenet-sample-groups.csv`` beside this file (``file,label``, for ``harness accuracy
--labels``), which is checked in: regenerating needs the Debian package, using it does not.

    python examples/retrieval/imagenet_groups.py ../shared/datasets/imagenet-sample/labels.csv
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

DATA_NOUN = Path("/usr/share/wordnet/data.noun")
MIN_GROUP = 4
OUT = Path(__file__).with_name("imagenet-sample-groups.csv")


def read_wordnet(path: Path = DATA_NOUN) -> tuple[dict[str, str], dict[str, str]]:
    """(offset -> its first hypernym's offset, offset -> its first lemma) of every noun synset."""
    parent, name = {}, {}
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.startswith(" "):
            continue  # the licence header
        fields = line.split(" | ")[0].split()
        offset, words = fields[0], int(fields[3], 16)
        name[offset] = fields[4].replace("_", " ")
        pointers = int(fields[4 + 2 * words])
        rest = fields[5 + 2 * words:]
        for i in range(pointers):
            symbol, target, pos = rest[4 * i], rest[4 * i + 1], rest[4 * i + 2]
            if symbol in ("@", "@i") and pos == "n":
                parent[offset] = target
                break
    return parent, name


def chain(offset: str, parent: dict[str, str]) -> list[str]:
    """The synset's hypernyms, nearest first."""
    out = []
    while offset in parent:
        offset = parent[offset]
        out.append(offset)
    return out


def main(labels_csv: Path) -> None:
    rows = list(csv.DictReader(labels_csv.open()))
    parent, name = read_wordnet()
    chains = {r["file"]: chain(Path(r["file"]).name.split("_")[0][1:], parent) for r in rows}
    shared = Counter(a for c in chains.values() for a in set(c))
    with OUT.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "label"])
        for r in rows:
            group = next((a for a in chains[r["file"]] if shared[a] >= MIN_GROUP), None)
            writer.writerow([r["file"], name[group] if group else ""])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
