#!/usr/bin/python3
"""tests/train/ckpt_read.py — an independent reader of safetensors checkpoints,
for tests written in C (test_ckpt.c, the trainer's tests).

Usage: ckpt_read.py FILE [--pattern]

Parses FILE with only json and numpy, as the format's description reads:
an 8-byte little-endian header length N, N bytes of UTF-8 JSON, the data.
It checks the layout (known dtype, byte range = product(shape) x dtype size,
ranges tiling the data exactly) and prints tab-separated lines:

    data_start OFFSET                  8 + N, where the data begins
    tensor NAME DTYPE SHAPE NBYTES CRC32 SUM
                                       one per tensor, in file order; SHAPE is
                                       d0,d1,.. or - for a 0-d tensor; CRC32
                                       (zlib's, 8 hex digits) of the elements'
                                       little-endian bytes as numpy holds them;
                                       SUM of the elements as float64 (repr)
    meta KEYHEX VALUEHEX               one per metadata pair, sorted by key;
                                       the UTF-8 bytes in hex, so that any
                                       value is compared exactly
    safetensors: ok | skipped (why)    load_file and safe_open agree with the
                                       above, when safetensors is installed

With --pattern every element must also equal pattern(k, i) below (k: the
tensor's index in file order, i: the element's, row-major), the values
test_ckpt.c writes. Exit: 0 ok, 1 a fault (on stderr), 77 no numpy.
"""
import json
import sys
import zlib

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print("SKIP: no numpy: %s" % e)
    sys.exit(77)

DTYPES = {"F32": np.dtype("<f4"), "I32": np.dtype("<i4"), "U8": np.dtype("u1")}


def fail(msg):
    sys.stderr.write("ckpt_read.py: %s\n" % msg)
    sys.exit(1)


def pattern(dtype, k, n):
    i = np.arange(n, dtype=np.int64)
    if dtype == "F32":
        return ((i * 7 + k * 13) % 1001 - 500).astype(np.float32) / np.float32(8)
    if dtype == "I32":
        u = i.astype(np.uint64) * np.uint64(2654435761) + np.uint64(k * 40503)
        return (u & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)
    return ((i * 31 + k * 7) & 255).astype(np.uint8)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        fail("duplicate key in %r" % keys)
    return dict(pairs)


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        fail("%d bytes, too short" % len(raw))
    n = int.from_bytes(raw[:8], "little")
    if n > len(raw) - 8:
        fail("header length %d past the end of the file" % n)
    header = json.loads(raw[8:8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    if not isinstance(header, dict):
        fail("the header is not an object")
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        fail("__metadata__ is not an object of strings")
    tensors = []
    for name, e in header.items():
        if sorted(e) != ["data_offsets", "dtype", "shape"] or e["dtype"] not in DTYPES:
            fail("tensor %r: bad entry %r" % (name, e))
        begin, end = e["data_offsets"]
        dt = DTYPES[e["dtype"]]
        count = int(np.prod(e["shape"], dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or count * dt.itemsize != end - begin:
            fail("tensor %r: shape %r and data_offsets %r do not agree with %d data bytes"
                 % (name, e["shape"], e["data_offsets"], len(data)))
        arr = np.frombuffer(data, dtype=dt, count=count, offset=begin).reshape(e["shape"])
        tensors.append((name, e["dtype"], arr, (begin, end)))
    at = 0
    for _, _, _, (begin, end) in sorted(tensors, key=lambda t: t[3]):
        if begin != at:
            fail("data ranges do not tile the data at byte %d" % at)
        at = end
    if at != len(data):
        fail("%d data bytes after the last tensor" % (len(data) - at))
    return 8 + n, tensors, meta


def check_safetensors(path, tensors, meta):
    try:
        from safetensors import safe_open
        from safetensors.numpy import load_file
    except ImportError as e:
        return "skipped (%s)" % e
    loaded = load_file(path)
    if sorted(loaded) != sorted(t[0] for t in tensors):
        fail("safetensors sees tensors %r" % sorted(loaded))
    for name, _, arr, _ in tensors:
        if loaded[name].dtype != arr.dtype or not np.array_equal(loaded[name], arr):
            fail("safetensors reads %r differently" % name)
    with safe_open(path, framework="np") as f:
        if (f.metadata() or {}) != meta:
            fail("safetensors sees metadata %r" % f.metadata())
    return "ok"


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-") or any(a != "--pattern" for a in args[1:]):
        sys.stderr.write(__doc__)
        sys.exit(2)
    path = args[0]
    start, tensors, meta = read(path)
    print("data_start\t%d" % start)
    for k, (name, dtype, arr, _) in enumerate(tensors):
        if "--pattern" in args and not np.array_equal(arr.reshape(-1), pattern(dtype, k, arr.size)):
            fail("tensor %d %r differs from the pattern" % (k, name))
        shape = ",".join(str(d) for d in arr.shape) or "-"
        crc = zlib.crc32(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
        print("tensor\t%s\t%s\t%s\t%d\t%08x\t%r" % (name, dtype, shape, arr.nbytes, crc,
                                                   float(arr.astype(np.float64).sum())))
    for key in sorted(meta):
        print("meta\t%s\t%s" % (key.encode("utf-8").hex(), meta[key].encode("utf-8").hex()))
    print("safetensors: %s" % check_safetensors(path, tensors, meta))


if __name__ == "__main__":
    main()
