#!/usr/bin/env python3
"""Read a gpt2go run directory with TensorBoard's own EventAccumulator.

Checks that TensorBoard itself can load the events files that `gpt2go train` writes, and prints
each scalar tag with its number of points and its first and last (step, value), and each text
tag with its number of entries and the start of the last one.

    pip install tensorboard            # where a package index is reachable
    python3 tools/tb_check.py runs/NAME [--expect train/loss,val/loss]

Exits non-zero when the directory holds no scalars or an --expect tag is missing.
"""

import argparse
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as e:
    sys.exit(f"tb_check.py needs TensorBoard's Python package ({e}): pip install tensorboard")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rundir", help="a gpt2go run directory (holding events.out.tfevents.*)")
    parser.add_argument("--expect", default="", help="comma-separated scalar tags that must be present")
    args = parser.parse_args()

    # size_guidance 0 keeps every point rather than a reservoir sample.
    acc = event_accumulator.EventAccumulator(
        args.rundir,
        size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0},
    )
    acc.Reload()
    tags = acc.Tags()

    scalars = sorted(tags.get(event_accumulator.SCALARS, []))
    for tag in scalars:
        points = acc.Scalars(tag)
        first, last = points[0], points[-1]
        print(f"scalar {tag}: {len(points)} points, step {first.step} = {first.value:.6g} "
              f"... step {last.step} = {last.value:.6g}")

    for tag in sorted(tags.get(event_accumulator.TENSORS, [])):
        events = acc.Tensors(tag)
        strings = events[-1].tensor_proto.string_val
        text = strings[0].decode("utf-8", "replace") if strings else ""
        print(f"text {tag}: {len(events)} entries, last at step {events[-1].step}: {text[:60]!r}")

    missing = [t for t in args.expect.split(",") if t and t not in scalars]
    if not scalars or missing:
        print(f"FAIL: scalars {scalars}, missing {missing}", file=sys.stderr)
        return 1
    print(f"ok: {len(scalars)} scalar tags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
