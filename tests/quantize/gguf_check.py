#!/usr/bin/env python3
"""Independent GGUF checker (standard library only), for files rotor writes.

Parses the header, every metadata pair and tensor info with `struct`, then
checks: magic and version, alignment (general.alignment or 32), that every
tensor offset is aligned, that tensors are laid out in order without overlap,
that each size follows from the GGML type table, and that the file ends where
the last tensor (padded) ends.

usage: gguf_check.py FILE [--expect-type NAME=TYPE ...] [--expect-kv KEY=VALUE ...]
Exit 0 and one summary line when the file is valid; 1 and the reason otherwise.
"""
import struct
import sys

# GGML type id: (name, block size, bytes per block)
GGML_TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36),
    10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110), 12: ("q4_K", 256, 144),
    13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 15: ("q8_K", 256, 292),
    20: ("iq4_nl", 32, 18), 24: ("i8", 1, 1), 25: ("i16", 1, 2), 26: ("i32", 1, 4),
    27: ("i64", 1, 8), 28: ("f64", 1, 8), 30: ("bf16", 1, 2),
}
# GGUF metadata value types: id -> struct format (strings and arrays apart)
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.data):
            raise ValueError(f"read of {size} bytes at offset {self.pos} past end of file ({len(self.data)})")
        v = struct.unpack_from("<" + fmt, self.data, self.pos)[0]
        self.pos += size
        return v

    def string(self):
        n = self.take("Q")
        if self.pos + n > len(self.data):
            raise ValueError(f"string of {n} bytes at offset {self.pos} past end of file")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype, depth=0):
        if vtype in SCALARS:
            return self.take(SCALARS[vtype])
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            if depth > 8:
                raise ValueError("arrays nested too deep")
            etype, count = self.take("I"), self.take("Q")
            if count > len(self.data):
                raise ValueError(f"array count {count} larger than the file")
            return [self.value(etype, depth + 1) for _ in range(count)]
        raise ValueError(f"unknown metadata type {vtype} at offset {self.pos}")


def check(path, expect_types, expect_kvs):
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError(f"bad magic {data[:4]!r}")
    r.pos = 4
    version = r.take("I")
    if version not in (2, 3):
        raise ValueError(f"version {version} not 2 or 3")
    n_tensors, n_kv = r.take("Q"), r.take("Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        if key in kv:
            raise ValueError(f"duplicate key {key}")
        kv[key] = r.value(r.take("I"))
    align = kv.get("general.alignment", 32)
    if align <= 0 or align & (align - 1):
        raise ValueError(f"general.alignment {align} not a power of two")
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("I")
        if not 1 <= n_dims <= 4:
            raise ValueError(f"tensor {name}: n_dims {n_dims}")
        ne = [r.take("Q") for _ in range(n_dims)]
        tid, offset = r.take("I"), r.take("Q")
        if tid not in GGML_TYPES:
            raise ValueError(f"tensor {name}: unknown type id {tid}")
        tname, block, tsize = GGML_TYPES[tid]
        if ne[0] % block:
            raise ValueError(f"tensor {name}: row {ne[0]} not a multiple of {tname} block {block}")
        n = 1
        for d in ne:
            n *= d
        tensors.append((name, tname, ne, offset, n // block * tsize))
    data_start = (r.pos + align - 1) // align * align
    end = 0
    for name, tname, ne, offset, size in tensors:
        if offset % align:
            raise ValueError(f"tensor {name}: offset {offset} not aligned to {align}")
        if offset < end:
            raise ValueError(f"tensor {name}: offset {offset} overlaps the previous tensor (ends {end})")
        end = offset + size
        if data_start + end > len(data):
            raise ValueError(f"tensor {name}: ends at {data_start + end}, past end of file {len(data)}")
    expected_size = data_start + (end + align - 1) // align * align if tensors else data_start
    if len(data) != expected_size:
        raise ValueError(f"file size {len(data)}, layout says {expected_size}")
    types = {name: tname for name, tname, _, _, _ in tensors}
    for name, want in expect_types.items():
        if types.get(name) != want:
            raise ValueError(f"tensor {name}: type {types.get(name)}, expected {want}")
    for key, want in expect_kvs.items():
        if str(kv.get(key)) != want:
            raise ValueError(f"key {key}: {kv.get(key)!r}, expected {want}")
    counts = {}
    for t in types.values():
        counts[t] = counts.get(t, 0) + 1
    print(f"{path}: GGUF v{version}, {n_kv} keys, {n_tensors} tensors ({counts}), "
          f"alignment {align}, {len(data)} bytes: ok")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    expect_types, expect_kvs = {}, {}
    args = argv[2:]
    while args:
        flag, spec = args[0], args[1]
        k, v = spec.split("=", 1)
        (expect_types if flag == "--expect-type" else expect_kvs)[k] = v
        args = args[2:]
    try:
        check(argv[1], expect_types, expect_kvs)
    except (ValueError, UnicodeDecodeError, struct.error) as e:
        print(f"{argv[1]}: invalid: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
