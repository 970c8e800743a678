#!/usr/bin/env python3
"""Builds assets/embedded-cifar10.tlej, the embedded default data set.

It takes the first N images per class (file-name order) of each split of the
JPEG stand-in of CIFAR-10 and stores their JPEG bytes unchanged, so the asset
stays a few MB. tricklab decodes them at load time (src/data/embedded.rs).

usage: scripts/make_embedded.py ARCHIVE OUT [TRAIN_PER_CLASS] [TEST_PER_CLASS]
"""
import json
import struct
import sys
import tarfile

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def main():
    archive, out = sys.argv[1], sys.argv[2]
    train_per = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    test_per = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    found = {}
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar:
            parts = m.name.split("/")
            if m.isfile() and len(parts) == 3 and parts[0] in ("train", "test") and parts[1] in CLASSES:
                found[(parts[0], parts[1], parts[2])] = tar.extractfile(m).read()
    records = {"train": [], "test": []}
    for split, per in (("train", train_per), ("test", test_per)):
        for label, cls in enumerate(CLASSES):
            names = sorted(n for (s, c, n) in found if s == split and c == cls)[:per]
            if len(names) < per:
                sys.exit(f"{archive}: only {len(names)} {split} images of class {cls}, need {per}")
            records[split] += [(label, found[(split, cls, n)]) for n in names]
    header = {
        "name": "embedded-cifar10-jpeg-q75",
        "classes": CLASSES,
        "height": 32,
        "width": 32,
        "train": len(records["train"]),
        "test": len(records["test"]),
        "source": "first %d train / %d test images per class (file-name order) of cifar10-jpeg-q75.tar.gz" % (train_per, test_per),
    }
    blob = json.dumps(header).encode()
    with open(out + ".tmp", "wb") as f:
        f.write(b"TLEJ\x01\0\0\0" + struct.pack("<Q", len(blob)) + blob)
        for split in ("train", "test"):
            for label, data in records[split]:
                f.write(struct.pack("<BI", label, len(data)) + data)
    import os
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
