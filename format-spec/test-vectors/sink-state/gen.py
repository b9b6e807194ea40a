#!/usr/bin/env python3
"""Writes this vector from format-spec/sink-state.md alone (not from floe's code):
`python3 gen.py` in this folder. tests: src/format/sink_state.rs."""
import json, struct


def committable(kind, checkpoint, subtask, file_len):
    name = f".pending-{checkpoint:020}-{subtask}".encode() if kind == 1 else b""
    return struct.pack("<BBQIQH", 1, kind, checkpoint, subtask, file_len, len(name)) + name


def state(entries):
    out = struct.pack("<I", len(entries))
    for checkpoint, c in entries:
        out += struct.pack("<QI", checkpoint, len(c)) + c
    return out


pending = [(3, committable(1, 3, 1, 42)), (4, committable(0, 4, 1, 0))]
good = state(pending)
files = {
    "state.bin": (good, None),
    # Cut inside the second entry's committable (its length field is at 4 + 12 + 55 + 8 = 79).
    "truncated.bin": (good[:-3], {"offset": 79, "reason": "committable runs past the end"}),
    # A count no bytes back: 4294967295 entries in 4 bytes.
    "hostile-count.bin": (struct.pack("<I", 0xFFFFFFFF), {"offset": 0, "reason": "count needs more bytes than there are"}),
    # One entry claiming a committable of 4294967295 bytes.
    "hostile-length.bin": (struct.pack("<IQI", 1, 3, 0xFFFFFFFF) + b"\0" * 8, {"offset": 12, "reason": "committable length over MAX_COMMITTABLE_LEN"}),
    # Checkpoint ids 4 then 3.
    "unordered.bin": (state([(4, b""), (3, b"")]), {"offset": 16, "reason": "checkpoint id not above the previous"}),
}
expected = {
    "description": "A sink state as the manifest's extra map stores it for subtask 1 of operator \"file sink\": "
    "two pending committables of floe's file sink (a pending file, and an empty transaction), and damaged "
    "copies with the error a reader must report.",
    "extra_key": "sink/file sink/1",
    "files": {},
}
for name, (data, err) in files.items():
    with open(name, "wb") as f:
        f.write(data)
    if err is None:
        expected["files"][name] = {
            "pending": [{"checkpoint_id": cp, "committable": c.hex()} for cp, c in pending],
            "file_committables": [
                {"kind": "pending", "checkpoint_id": 3, "subtask": 1, "file_len": 42, "file_name": ".pending-00000000000000000003-1"},
                {"kind": "nothing", "checkpoint_id": 4, "subtask": 1, "file_len": 0, "file_name": ""},
            ],
        }
    else:
        expected["files"][name] = {"error": dict(kind="corrupt", **err)}
with open("expected.json", "w") as f:
    json.dump(expected, f, indent=2, sort_keys=True)
    f.write("\n")
